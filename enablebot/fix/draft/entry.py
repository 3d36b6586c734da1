"""Builder knowledge drafted by the LLM: a registry entry (config overrides, input recipe) for a
model type that fails `create_error` / `eager_error`, as DATA only.

The reply is parsed with yaml.safe_load (no Python tags), validated against the entry schema
(`validate_entry`: no hook, no code, no change of the architecture's identity, layer counts and
sizes within the budget, shape expressions in the recipe language), written into a copy of the
registry, and verified by running the type's sweep items (build + eager + Dynamo, eval and train)
in isolated children. A verified entry becomes a bundle: `entry.yaml`, `patch.diff` against
`model_registry.yaml`, `bundle.json` (FixBundle, target `config`, kind `registry`), `report.md`
and the LLM transcript.
"""

from __future__ import annotations

import ast
import copy
import datetime as _dt
import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from ...fileio import atomic_write_text
from ...model.registry import ArchEntry, Registry
from ...results import OK_VERDICTS, RunResult, RunSpec, Serializable

BUILDER_ERRORS = ("create_error", "eager_error")
ENTRY_KEYS = {"config", "inputs"}
RECIPE_KEYS = {"drop", "tensors", "kwargs", "seq_len", "batch", "replace", "by_class"}
TENSOR_KEYS = {"shape", "value", "dtype", "rule", "repeat_batch", "unsqueeze", "transpose", "items", "tuple", "fill",
               "low", "high"}
DTYPES = {"long", "int", "float", "bool"}
# Config keys that name what the architecture is: changing them builds another model.
IDENTITY_KEYS = {"model_type", "architectures", "auto_map", "trust_remote_code", "_name_or_path", "name_or_path",
                 "transformers_version", "custom_pipelines", "base_config_key"}
MAX_LAYERS = 4  # the "small" size profile's layer count: no drafted entry may build more
MAX_INT = 4096  # any other integer: widths, vocab, positions
MAX_STR = 64
_CODE_RE = re.compile(r"import|__|lambda|\beval\b|\bexec\b|\bopen\b|\bos\.|\bsys\.|subprocess|;|\n|`|\$\(|:\w+:|\bhook\b",
                      re.I)
_SHAPE_NODES = (ast.Expression, ast.BinOp, ast.Constant, ast.Name, ast.Attribute, ast.Load, ast.Call,
                ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Div, ast.Mod)


class EntryRejected(ValueError):
    """A drafted entry that is not plain, safe registry data."""


@dataclass
class EntryAttempt(Serializable):
    attempt: int
    entry: dict[str, Any] | None = None
    rejected: list[str] = field(default_factory=list)
    verdicts: dict[str, str] = field(default_factory=dict)  # "task/mode" -> verdict
    errors: dict[str, str] = field(default_factory=dict)
    verified: bool = False


@dataclass
class EntryOutcome(Serializable):
    model_type: str
    status: str  # verified | rejected | failed | not_needed | no_llm
    before: dict[str, str] = field(default_factory=dict)
    attempts: list[EntryAttempt] = field(default_factory=list)
    bundle_dir: str | None = None
    message: str = ""


# ---------------------------------------------------------------- parsing and validation (pure)

def parse_reply(text: str) -> dict[str, Any]:
    """The first ```yaml (or ```json) block of a reply, as plain data."""
    m = re.search(r"```(?:ya?ml|json)?\s*\n(.*?)```", text, re.S)
    body = m.group(1) if m else text
    try:
        data = yaml.safe_load(body)
    except yaml.YAMLError as e:  # includes !!python/... tags, which safe_load refuses
        raise EntryRejected(f"not plain YAML data: {str(e).splitlines()[0]}") from e
    if not isinstance(data, dict):
        raise EntryRejected("the entry must be a mapping with `config` and/or `inputs`")
    return data


def _scalar_problem(path: str, v: Any) -> str | None:
    if isinstance(v, bool) or v is None or isinstance(v, float):
        return None
    if isinstance(v, int):
        return None if abs(v) <= MAX_INT else f"{path}: {v} is beyond the size budget ({MAX_INT})"
    if isinstance(v, str):
        if len(v) > MAX_STR or _CODE_RE.search(v):
            return f"{path}: {v[:40]!r} looks like code, not data"
        return None
    return f"{path}: {type(v).__name__} is not plain data"


def _check_config(cfg: Any, path: str, problems: list[str]) -> None:
    from ...model.shrink import LAYER_KEYS

    if not isinstance(cfg, dict):
        problems.append(f"{path}: must be a mapping of overrides")
        return
    for k, v in cfg.items():
        p = f"{path}.{k}"
        if not isinstance(k, str):
            problems.append(f"{p}: keys must be strings")
            continue
        last = k.split(".")[-1]
        if last in IDENTITY_KEYS or last.endswith("_class") or last == "hook":
            problems.append(f"{p}: changes the architecture's identity or runs code; not allowed")
            continue
        if isinstance(v, dict):
            _check_config(v, p, problems)
            continue
        values = v if isinstance(v, list) else [v]
        for x in values:
            if isinstance(x, (list, dict)):
                problems.append(f"{p}: nested values are not allowed here")
                break
            bad = _scalar_problem(p, x)
            if bad:
                problems.append(bad)
                break
            if last in LAYER_KEYS and isinstance(x, int) and not isinstance(x, bool) and x > MAX_LAYERS:
                problems.append(f"{p}: {x} layers is beyond the budget ({MAX_LAYERS})")
                break


def _check_shape_expr(path: str, e: Any, problems: list[str]) -> None:
    if isinstance(e, bool) or not isinstance(e, (int, str)):
        problems.append(f"{path}: shape entries are ints, B, S or config arithmetic")
        return
    if isinstance(e, int):
        if not 0 <= e <= MAX_INT:
            problems.append(f"{path}: {e} is beyond the size budget")
        return
    if _CODE_RE.search(e):
        problems.append(f"{path}: {e[:40]!r} looks like code, not shape arithmetic")
        return
    try:
        tree = ast.parse(e, mode="eval")
    except SyntaxError:
        problems.append(f"{path}: {e!r} is not shape arithmetic")
        return
    for node in ast.walk(tree):
        if not isinstance(node, _SHAPE_NODES):
            problems.append(f"{path}: {e!r} uses {type(node).__name__}, outside the recipe language")
            return
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in ("max", "min")):
            problems.append(f"{path}: {e!r} calls something other than max()/min()")
            return
        if isinstance(node, ast.Name) and node.id not in ("B", "S", "config", "max", "min"):
            problems.append(f"{path}: {e!r} names {node.id!r}; only B, S and config.* exist")
            return
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            problems.append(f"{path}: {e!r} reaches a private attribute")
            return


def _check_tensor(spec: Any, path: str, problems: list[str]) -> None:
    from ...model.tensors import RULES

    if not isinstance(spec, dict):
        problems.append(f"{path}: a tensor spec is a mapping")
        return
    for k in spec:
        if k not in TENSOR_KEYS:
            problems.append(f"{path}.{k}: not a tensor-spec key ({', '.join(sorted(TENSOR_KEYS))})")
    if "items" in spec:
        for name, sub in (spec["items"] or {}).items() if isinstance(spec["items"], dict) else []:
            _check_tensor(sub, f"{path}.items.{name}", problems)
    if "tuple" in spec:
        for i, sub in enumerate(spec["tuple"] if isinstance(spec["tuple"], list) else []):
            _check_tensor(sub, f"{path}.tuple[{i}]", problems)
    if "rule" in spec and spec["rule"] not in RULES:
        problems.append(f"{path}.rule: {spec['rule']!r} is not a generic rule ({', '.join(sorted(RULES))})")
    if "dtype" in spec and spec["dtype"] not in DTYPES:
        problems.append(f"{path}.dtype: {spec['dtype']!r} is not one of {sorted(DTYPES)}")
    for i, d in enumerate(spec.get("shape") or []):
        _check_shape_expr(f"{path}.shape[{i}]", d, problems)
    for key in ("high", "low"):
        if key in spec:
            _check_shape_expr(f"{path}.{key}", spec[key], problems)
    if "value" in spec:
        flat = json.dumps(spec["value"])
        if not re.fullmatch(r"[\[\]\d\s,.\-truefalsn]*", flat):
            problems.append(f"{path}.value: only numbers and booleans")


def _check_recipe(recipe: Any, path: str, problems: list[str], *, nested: bool = False) -> None:
    if not isinstance(recipe, dict):
        problems.append(f"{path}: the input recipe is a mapping")
        return
    for k, v in recipe.items():
        p = f"{path}.{k}"
        if k == "hook":
            problems.append(f"{p}: hooks are code; a drafted entry is data only")
        elif k not in RECIPE_KEYS or (nested and k == "by_class"):
            problems.append(f"{p}: not a recipe key ({', '.join(sorted(RECIPE_KEYS))})")
        elif k == "drop":
            if not isinstance(v, list) or any(_scalar_problem(p, x) or not isinstance(x, str) for x in v):
                problems.append(f"{p}: a list of input names")
        elif k == "tensors":
            for name, spec in (v or {}).items() if isinstance(v, dict) else [("?", None)]:
                _check_tensor(spec, f"{p}.{name}", problems)
        elif k == "kwargs":
            for name, x in (v or {}).items() if isinstance(v, dict) else [("?", object())]:
                bad = _scalar_problem(f"{p}.{name}", x)
                if bad:
                    problems.append(bad)
        elif k in ("seq_len", "batch"):
            if isinstance(v, bool) or not isinstance(v, int) or not 2 <= v <= 512:
                problems.append(f"{p}: an int between 2 and 512")
        elif k == "replace":
            if not isinstance(v, bool):
                problems.append(f"{p}: true or false")
        elif k == "by_class":
            for cls, sub in (v or {}).items() if isinstance(v, dict) else [("?", None)]:
                _check_recipe(sub, f"{p}.{cls}", problems, nested=True)


def validate_entry(entry: dict[str, Any]) -> list[str]:
    """Problems that make `entry` unacceptable as registry data; empty when it is acceptable."""
    problems: list[str] = []
    for k in entry:
        if k == "hook":
            problems.append("hook: code, not data; a drafted entry may only set `config` and `inputs`")
        elif k not in ENTRY_KEYS:
            problems.append(f"{k}: not allowed in a drafted entry (only `config` and `inputs`)")
    if not (set(entry) & ENTRY_KEYS):
        problems.append("the entry sets neither `config` nor `inputs`")
    if "config" in entry:
        _check_config(entry["config"], "config", problems)
    if "inputs" in entry:
        _check_recipe(entry["inputs"], "inputs", problems)
    return problems


def merged_entry(current: ArchEntry, drafted: dict[str, Any]) -> ArchEntry:
    """The registry entry with the drafted knowledge merged over what it had."""
    e = copy.deepcopy(current)
    if "config" in drafted:
        e.config = {**e.config, **drafted["config"]}
    if "inputs" in drafted:
        e.inputs = {**e.inputs, **drafted["inputs"]}
    return e


def registry_diff(before: str, after: str, path: str = "model_registry.yaml") -> str:
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        fromfile=f"a/{path}", tofile=f"b/{path}"))


# ---------------------------------------------------------------- the prompt

def recipe_language() -> str:
    """The recipe language as inputs.py documents it, without the code hook."""
    from ...model import inputs

    doc = inputs.__doc__ or ""
    start = doc.index("    inputs:") if "    inputs:" in doc else 0
    return "\n".join(ln for ln in doc[start:].splitlines() if "hook" not in ln).strip()


def _config_fields(model_type: str) -> str:
    try:
        from transformers import AutoConfig

        d = AutoConfig.for_model(model_type).to_dict()
    except Exception as e:  # noqa: BLE001 - the prompt says so instead
        return f"(the default config could not be built: {type(e).__name__}: {e})"
    return "\n".join(f"{k} = {v!r}"[:160] for k, v in sorted(d.items()) if not isinstance(v, dict))[:6000]


def build_messages(model_type: str, entry: ArchEntry, failure: RunResult, feedback: str = "") -> list[dict[str, str]]:
    from .prompts import render

    current = {k: v for k, v in (("config", entry.config), ("inputs", entry.inputs)) if v}
    err = failure.error
    system = render("registry_entry_system", max_layers=MAX_LAYERS, recipe_language=recipe_language())
    user = render("registry_entry_user", model_type=model_type, config_class=entry.config_class or "?",
                  model_class=failure.model_class or entry.head or entry.base or "?", modality=entry.modality,
                  stage=err.stage if err else failure.verdict,
                  error=(f"{err.type}: {err.message}" if err else failure.verdict)[:3000],
                  config_fields=_config_fields(model_type),
                  current_entry=yaml.safe_dump(current, sort_keys=True) if current else "{}",
                  feedback=f"\nYour previous entry did not work:\n\n{feedback}\n" if feedback else "")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


# ---------------------------------------------------------------- the loop (I/O: LLM, children, files)

Runner = Callable[[RunSpec], RunResult]


def item_specs(model_type: str, registry_path: Path, *, timeout_s: float = 300.0,
               modes: tuple[str, ...] = ("eval", "train"), task: str = "head") -> list[RunSpec]:
    """The type's Dynamo-pass sweep items (build + eager + explain), against `registry_path`."""
    return [RunSpec(model_id=model_type, task=task, mode=m, backend="eager", fast=True, numerics=False, timing=False,
                    fullgraph_check=False, timeout_s=timeout_s, registry=str(registry_path)) for m in modes]


def _run_all(specs: list[RunSpec], runner: Runner) -> dict[str, RunResult]:
    return {f"{s.task}/{s.mode}": runner(s) for s in specs}


def draft_entry(model_type: str, registry: Registry, llm: Any, out_dir: Path, *, attempts: int = 2,
                runner: Runner | None = None, modes: tuple[str, ...] = ("eval", "train"),
                timeout_s: float = 300.0, say: Callable[[str], None] = lambda m: None) -> EntryOutcome:
    """Reproduce the builder failure, ask the LLM for an entry, validate, verify, bundle."""
    from ...execute.isolation import run_in_child

    runner = runner or (lambda s: run_in_child(s))
    entry = registry.get(model_type)
    if entry is None:
        raise ValueError(f"{model_type}: not in the registry (run `enablebot registry seed`)")
    task = "head" if entry.head else "base"
    work = Path(out_dir) / f"{model_type}-registry"
    work.mkdir(parents=True, exist_ok=True)
    say("reproducing")
    before = _run_all(item_specs(model_type, registry.path, timeout_s=timeout_s, modes=modes, task=task), runner)
    outcome = EntryOutcome(model_type, "failed", before={k: r.verdict for k, r in before.items()})
    failing = [r for r in before.values() if r.verdict in BUILDER_ERRORS]
    if not failing:
        outcome.status, outcome.message = "not_needed", "builds and runs eager already: no entry to draft"
        return outcome
    if llm is None:
        outcome.status, outcome.message = "no_llm", "no LLM configured: the generic shrink and input rules apply"
        return outcome
    base_text = registry.path.read_text(encoding="utf-8") if registry.path.exists() else registry.dumps()
    feedback = ""
    for n in range(1, attempts + 1):
        att = EntryAttempt(attempt=n)
        outcome.attempts.append(att)
        say(f"asking the LLM (attempt {n})")
        reply = llm.chat(build_messages(model_type, entry, failing[0], feedback))
        try:
            drafted = parse_reply(reply.text)
            att.entry = drafted
            att.rejected = validate_entry(drafted)
        except EntryRejected as e:
            att.rejected = [str(e)]
        if att.rejected:
            feedback = "Rejected as registry data:\n" + "\n".join(f"- {p}" for p in att.rejected)
            continue
        trial = copy.deepcopy(registry)
        trial.path = work / ".trial_registry.yaml"  # read by the children; removed after: patch.diff keeps the change
        trial.upsert(merged_entry(entry, drafted))
        trial.save()
        say(f"verifying attempt {n}")
        try:
            after = _run_all(item_specs(model_type, trial.path, timeout_s=timeout_s, modes=modes, task=task), runner)
        finally:
            trial.path.unlink(missing_ok=True)
        att.verdicts = {k: r.verdict for k, r in after.items()}
        att.errors = {k: f"{r.error.stage}: {r.error.type}: {r.error.message[:200]}" for k, r in after.items() if r.error}
        att.verified = all(r.verdict in OK_VERDICTS for r in after.values())
        if att.verified:
            outcome.status = "verified"
            outcome.bundle_dir = str(_write_bundle(work, model_type, entry, drafted, before, after, base_text,
                                                   trial.dumps(), llm, n))
            outcome.message = "entry verified: builds, runs eager and traces in every sweep item"
            break
        feedback = "It built but did not run:\n" + "\n".join(f"- {k}: {v}" for k, v in att.errors.items())
    else:
        outcome.status = "rejected" if all(a.rejected for a in outcome.attempts) else "failed"
        outcome.message = f"no verified entry in {attempts} attempts"
    atomic_write_text(work / "outcome.json", json.dumps(outcome.to_dict(), indent=1) + "\n")
    return outcome


def _write_bundle(work: Path, model_type: str, entry: ArchEntry, drafted: dict[str, Any],
                  before: dict[str, RunResult], after: dict[str, RunResult], base_text: str, new_text: str,
                  llm: Any, attempts: int) -> Path:
    from ..bundle import ClusterRef, FixBundle, Snapshot

    first_bad = next(r for r in before.values() if r.verdict in BUILDER_ERRORS)
    any_after = next(iter(after.values()))
    b = FixBundle(fix_key=f"registry-{model_type}", model_id=model_type,
                  cluster=ClusterRef(gb_type=first_bad.verdict, registry_id=None,
                                     function=first_bad.error.stage if first_bad.error else None),
                  target="config", kind="registry", recipe=drafted, files=["model_registry.yaml"],
                  llm_model=getattr(llm, "model", None), attempts=attempts, verified=True,
                  versions={"torch": any_after.versions.torch, "transformers": any_after.versions.transformers},
                  before=Snapshot(verdict=first_bad.verdict), after=Snapshot(verdict=any_after.verdict),
                  repro=f"enablebot run {model_type} --task {any_after.spec.task} --mode eval",
                  created_at=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat())
    b.save(work)
    atomic_write_text(work / "entry.yaml", yaml.safe_dump({model_type: drafted}, sort_keys=True))
    atomic_write_text(work / "patch.diff", registry_diff(base_text, new_text))
    rows = "\n".join(f"| {k} | {before[k].verdict} | {after[k].verdict} |" for k in after)
    atomic_write_text(work / "report.md", f"# Registry entry for `{model_type}` (drafted by the LLM, verified)\n\n"
                      f"| item | before | after |\n|---|---|---|\n{rows}\n\n```yaml\n"
                      f"{yaml.safe_dump({model_type: drafted}, sort_keys=True)}```\n")
    return work
