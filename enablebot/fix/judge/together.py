"""Judge one item of a model (a mode, a scenario, a task) with several fix bundles applied together.

A type is supported only when every item of its default pass is one graph. `fix` verifies each
bundle on the item it reproduced; a break that only training or the decode step hits, or two
clusters fixed by two bundles, is judged here: the bundles' patches in one overlay (each through
the guard again) and their recipes' settings merged, the item run unpatched and patched, and the
patched run must be one graph with no break, numerics passing, and the anti-gaming gates holding.
Speed is not re-judged: each bundle passed its own speed check where it was made.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...results import RunSpec, Serializable
from ..bundle import FixBundle, Snapshot, read_patch
from . import gates
from .verify import Check, Runner, _bundle_spec, default_runner, model_type_of, one_graph, snapshot, with_candidate


@dataclass
class ItemCheck(Serializable):
    """The verdict on one item with the bundles applied together."""
    model_id: str
    item: dict[str, Any]  # mode, scenario, task
    bundles: list[str]
    passed: bool = False
    before: Snapshot | None = None
    after: Snapshot | None = None
    checks: list[Check] = field(default_factory=list)

    def feedback(self) -> str:
        return "; ".join(f"{c.name}: {c.detail}" for c in self.checks if not c.passed)


class TogetherError(ValueError):
    """The bundles cannot be judged together (another model, an unverified bundle, overlapping patches)."""


def combined(bundle_dirs: list[Path]) -> tuple[str, str, list[str], dict[str, Any], RunSpec]:
    """(model id, the patches as one diff, the files they touch, the merged recipe settings, the
    first bundle's spec). Every bundle must be verified and of one model; two patches of one file
    are refused (each was made against the unpatched file)."""
    diffs, files, settings = [], [], {}
    model_id, spec = None, None
    for b in bundle_dirs:
        bundle = FixBundle.load(b)
        if not bundle.verified:
            raise TogetherError(f"{b}: not a verified bundle")
        if model_id not in (None, bundle.model_id):
            raise TogetherError(f"{b}: a bundle of {bundle.model_id}, not {model_id}")
        model_id, spec = bundle.model_id, spec or _bundle_spec(Path(b), bundle)
        if bundle.kind == "recipe":
            settings.update(bundle.recipe or {})
            continue
        patch = read_patch(Path(b))
        if not patch:
            raise TogetherError(f"{b}: a patch bundle without patch.diff")
        overlap = sorted(set(bundle.files) & set(files))
        if overlap:
            raise TogetherError(f"{b}: patches {', '.join(overlap)} again (made against the unpatched file)")
        diffs.append(patch if patch.endswith("\n") else patch + "\n")
        files += bundle.files
    if model_id is None or spec is None:
        raise TogetherError("no bundle given")
    return model_id, "".join(diffs), files, settings, spec


def judge_item(bundle_dirs: list[Path], *, mode: str | None = None, scenario: str | None = None,
               task: str | None = None, device: str = "cpu", runner: Runner | None = None,
               work_dir: Path | None = None) -> ItemCheck:
    from .overlay import build_overlay
    from .patchguard import PatchPolicy, check_patch

    model_id, diff, files, settings, spec = combined([Path(b) for b in bundle_dirs])
    changes: dict[str, Any] = {"device": device, "timing": False, "overlay_dir": None, "dynamo_config": {}}
    changes.update({k: v for k, v in (("mode", mode), ("scenario", scenario), ("task", task)) if v is not None})
    if spec.registry and not Path(spec.registry).is_file():
        changes["registry"] = None
    spec = RunSpec.from_dict({**spec.to_dict(), **changes})
    item = {"mode": spec.mode, "scenario": spec.scenario_name, "task": spec.task}
    out = ItemCheck(model_id=model_id, item=item, bundles=[str(b) for b in bundle_dirs])
    overlay_dir = None
    if diff:  # the guard first, before anything runs
        work = work_dir or Path(tempfile.mkdtemp(prefix="enablebot-together-"))
        # The guard again: the files the bundles were allowed to patch where they were made (their
        # own break frames there) are the only ones besides the model's file and torch's.
        policy = PatchPolicy(model_type=model_type_of(model_id),
                             frame_files=tuple(f for f in files if f.startswith("src/transformers/")))
        checked = check_patch(diff, policy)
        overlay_dir = str(work / "overlay")
        build_overlay(checked.diff, overlay_dir)
    run = runner or default_runner
    baseline = run(spec)
    out.before = snapshot(baseline)
    after = run(with_candidate(spec, overlay_dir, settings))
    out.after = snapshot(after)
    a = out.after
    checks = [Check("runs", after.ok, f"verdict {after.verdict}" + (f": {after.error.message[:400]}" if after.error else ""))]
    if after.ok:
        whole = one_graph(after, a)
        checks.append(Check("full_graph", whole, f"verdict {baseline.verdict} -> {after.verdict}, graphs "
                            f"{out.before.graphs} -> {a.graphs}, breaks {out.before.graph_breaks} -> {a.graph_breaks}"))
        n = after.numerics
        checks.append(Check("numerics", bool(n and n.passed), (n.message or n.method or "") if n else "not measured"))
        if baseline.ok:
            checks.extend(Check(g.name, g.passed, g.detail) for g in gates.evaluate(baseline, after))
    out.checks = checks
    out.passed = all(c.passed for c in checks)
    return out
