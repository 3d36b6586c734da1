"""`verify --together` (enablebot.fix.judge.together): one item of a model judged with several fix
bundles applied at once, as the replay's bot judges a type item by item."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from enablebot.fix.bundle import ClusterRef, FixBundle
from enablebot.fix.draft.rewrites import Site, load_playbook, propose, rewrite_diff
from enablebot.fix.judge.patchguard import PatchRejected
from enablebot.fix.judge.together import TogetherError, judge_item

OMNI = "src/transformers/models/omniasr/modeling_omniasr.py"


def _omniasr_site() -> Site:
    mod = importlib.import_module("transformers.models.omniasr.modeling_omniasr")
    text = Path(mod.__file__).read_text(encoding="utf-8")
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "if dropout_probability < self.layerdrop" in ln)
    return Site(path=OMNI, text=text, lineno=line, function="forward")


def _bundle(d: Path, diff: str | None, *, model_id: str = "omniasr_audio", verified: bool = True,
            files: tuple[str, ...] = (OMNI,), kind: str = "patch", recipe: dict | None = None) -> Path:
    FixBundle(fix_key=f"{model_id}/x", model_id=model_id, cluster=ClusterRef(gb_type="Data-dependent branching",
              registry_id="GB0170"), target="model-code", kind=kind, recipe=recipe, files=list(files),
              verified=verified).save(d)
    if diff is not None:
        (d / "patch.diff").write_text(diff, encoding="utf-8")
    return d


def _never(spec):
    raise AssertionError(f"nothing may run before the bundles are accepted: {spec.model_id}")


def _rewrite_diff() -> str:
    site = _omniasr_site()
    [rw] = propose("Data-dependent branching", "GB0170", [site], load_playbook())
    return rewrite_diff(rw, site.text)


def test_bundles_that_cannot_be_judged_together_are_refused_before_anything_runs(tmp_path):
    diff = _rewrite_diff()
    good = _bundle(tmp_path / "good", diff)
    cases = {
        "unverified": [_bundle(tmp_path / "unverified", diff, verified=False)],
        "another model": [good, _bundle(tmp_path / "other", None, model_id="lasr_ctc", kind="recipe", recipe={})],
        # two patches of one file, each made against the unpatched text
        "same file twice": [good, _bundle(tmp_path / "again", diff)],
        "no patch": [_bundle(tmp_path / "nopatch", None)],
    }
    for name, bundles in cases.items():
        with pytest.raises(TogetherError):
            judge_item(bundles, mode="train", runner=_never)
        assert name


@pytest.mark.parametrize("path", ["src/transformers/utils/import_utils.py", "sitecustomize.py",
                                  "src/transformers/models/omniasr/../../__init__.py"])
def test_a_hostile_bundle_patch_is_refused_by_the_guard_before_anything_runs(tmp_path, path):
    """The bundle names the file it touched, but the guard decides from the model and the bundles'
    transformers files: a patch to another library file, outside transformers or escaping the
    model's folder is refused, and no process imports it."""
    diff = (f"--- a/{path}\n+++ b/{path}\n@@ -1,1 +1,2 @@\n import os\n+os.system('id')\n")
    b = _bundle(tmp_path / "hostile", diff, files=(OMNI,))
    with pytest.raises((PatchRejected, ValueError)):
        judge_item([b], mode="train", runner=_never)


def test_the_layerdrop_rewrite_makes_omniasr_training_one_graph(tmp_path):
    """Real runs (omniasr_audio, transformers 5.25, training, Inductor numerics): the verified
    rewrite passes."""
    fixed = judge_item([_bundle(tmp_path / "fix", _rewrite_diff())], mode="train", task="base",
                       work_dir=tmp_path / "w1")
    assert fixed.passed, fixed.feedback()
    assert fixed.before.verdict == "graph_break" and fixed.after.verdict == "full_graph"
    assert fixed.item == {"mode": "train", "scenario": "call", "task": "base"}


@pytest.mark.slow
def test_a_patch_that_leaves_the_break_fails_full_graph(tmp_path):
    """The same item with a patch that changes only a comment: the break stays, `full_graph` fails."""
    site = _omniasr_site()
    lines = site.text.splitlines(keepends=True)
    n = site.lineno - 1
    noop = "".join(lines[:n] + [lines[n].rstrip("\n") + "  # unchanged\n"] + lines[n + 1:])
    from types import SimpleNamespace

    diff = rewrite_diff(SimpleNamespace(path=OMNI, new_text=noop), site.text)
    still = judge_item([_bundle(tmp_path / "noop", diff)], mode="train", task="base", work_dir=tmp_path / "w2")
    assert not still.passed
    assert {c.name for c in still.checks if not c.passed} == {"full_graph"}
