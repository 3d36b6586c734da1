"""report.md of a fix bundle and the Markdown summary of `enablebot verify`."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from ..results import RunSpec
from .bundle import FixBundle, Snapshot
from .clusters import key_of
from .recipes import settings_text

if TYPE_CHECKING:
    from .judge.verify import Verification
    from .outcome import FixOutcome


def repro_command(spec: RunSpec) -> str:
    """The `enablebot run` command that reproduces the break (same spec)."""
    args = ["enablebot", "run", spec.model_id, "--device", spec.device, "--backend", spec.backend,
            "--mode", spec.mode, "--dtype", spec.dtype, "--batch-size", str(spec.batch_size),
            "--seq-len", str(spec.seq_len)]
    if spec.scenario_name != "call":
        args += ["--scenario", spec.scenario_name]
    if spec.task:
        args += ["--task", spec.task]
    return " ".join(shlex.quote(a) for a in args)


def _fmt(v: Any, nd: int = 2) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "pass" if v else "FAIL"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def snapshot_table(before: Snapshot, after: Snapshot) -> str:
    rows = [("verdict", before.verdict, after.verdict), ("graphs", before.graphs, after.graphs),
            ("graph breaks", before.graph_breaks, after.graph_breaks),
            ("breaks of this cluster", before.cluster_breaks, after.cluster_breaks),
            ("numerics vs fp64", before.numerics_passed, after.numerics_passed),
            ("speedup over eager", before.speedup, after.speedup),
            ("compiled ms (median)", before.compiled_ms, after.compiled_ms)]
    lines = ["| | before | after |", "|---|---|---|"]
    lines += [f"| {name} | {_fmt(b)} | {_fmt(a)} |" for name, b, a in rows]
    return "\n".join(lines)


def checks_table(ver: "Verification") -> str:
    lines = ["| check | result | detail |", "|---|---|---|"]
    for c in ver.checks:
        detail = c.detail.replace("|", "\\|").replace("\n", " ")[:400]
        lines.append(f"| {c.name} | {'pass' if c.passed else '**FAIL**'} | {detail} |")
    return "\n".join(lines)


def render_report(bundle: FixBundle, ver: "Verification | None", outcome: "FixOutcome", diff: str | None) -> str:
    ref = bundle.cluster
    out = [f"# {bundle.model_id}: {ref.gb_type} ({ref.registry_id or 'no registry id'})", ""]
    status = ("verified " + ("recipe" if bundle.kind == "recipe" else f"patch ({bundle.target})")) if bundle.verified \
        else "not fixed"
    out += [f"- Cluster: `{key_of(ref)}`" + (f" (first at line {ref.lineno})" if ref.lineno else ""),
            f"- Result: **{status}**",
            f"- Versions: torch {bundle.versions.get('torch', '')}, transformers {bundle.versions.get('transformers', '')}",
            f"- Reproduce: `{bundle.repro}`"]
    if bundle.fix_source:
        out.append(f"- Fix idea from: **{bundle.fix_source}**")
    if bundle.llm_model or bundle.attempts:
        out.append(f"- Candidates: {bundle.attempts}" + (f"; LLM `{bundle.llm_model}`" if bundle.llm_model else ""))
    if outcome.message:
        out.append(f"- Note: {outcome.message}")
    out += ["", "## Before / after", "", snapshot_table(bundle.before, bundle.after), ""]
    if bundle.kind == "recipe" and bundle.recipe and bundle.verified:
        out += ["## Recipe", "", "Set before `torch.compile`:", "", "```python", "import torch._dynamo",
                *[f"torch._dynamo.config.{k} = {v!r}" for k, v in sorted(bundle.recipe.items())], "```", ""]
    if diff:
        out += ["## Patch", "", f"Files: {', '.join(f'`{f}`' for f in bundle.files)}", "", "```diff", diff.rstrip(), "```", ""]
    if ver is not None:
        out += ["## Verification", ""]
        if ver.heldout_seed is not None:
            out += [f"Held-out numerics: seed {ver.heldout_seed}, batch {ver.heldout_shape[0]}, "
                    f"seq {ver.heldout_shape[1]}, against the unpatched fp64 eager model.", ""]
        out += [checks_table(ver), ""]
    if outcome.recipes:
        out += ["## Recipes tried", "", "| recipe | settings | result | why |", "|---|---|---|---|"]
        for t in outcome.recipes:
            why = (t.feedback or "").replace("|", "\\|").replace("\n", " ")[:300]
            out.append(f"| {t.id} | `{settings_text(t.settings)}` | {'verified' if t.passed else 'does not fix it'} | {why} |")
        out.append("")
    if outcome.agent and outcome.agent.candidates:
        a = outcome.agent
        out += ["## Candidates", "", "| # | source | round | stage reached | result | feedback |", "|---|---|---|---|---|---|"]
        for c in a.candidates:
            fb = (c.feedback or "").replace("|", "\\|").replace("\n", " ")[:300]
            out.append(f"| {c.n} | {c.source} | {c.round} | {c.stage} | {'verified' if c.ok else 'rejected'} | {fb} |")
        out += ["", f"Stopped: {a.stopped}; {a.applied()} distinct candidate(s) applied; tokens: {a.prompt_tokens} "
                f"prompt + {a.completion_tokens} completion; LLM {a.llm_s:.0f} s, judge {a.judge_s:.0f} s.", ""]
    return "\n".join(out)


def verify_summary(results: list[tuple[str, "Verification | None", str]]) -> str:
    """Markdown for `enablebot verify` (GITHUB_STEP_SUMMARY): one row per bundle."""
    lines = ["## enablebot verify", "", "| bundle | model | cluster | result | graphs | breaks | held-out numerics | speed ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for name, ver, err in results:
        if ver is None:
            lines.append(f"| {name} | – | – | **ERROR**: {err[:200]} | – | – | – | – |")
            continue
        h = ver.heldout
        lines.append(f"| {name} | {ver.model_id} | `{key_of(ver.cluster)}` | {'pass' if ver.passed else '**FAIL**'} | "
                     f"{_fmt(ver.before.graphs)} → {_fmt(ver.after.graphs)} | "
                     f"{_fmt(ver.before.graph_breaks)} → {_fmt(ver.after.graph_breaks)} | "
                     f"{_fmt(h.passed) if h else '–'} | {_fmt(ver.speed_ratio, 3)} |")
    for name, ver, _ in results:
        if ver is not None and not ver.passed:
            lines += ["", f"### {name}: failed checks", "", checks_table(ver)]
    return "\n".join(lines) + "\n"
