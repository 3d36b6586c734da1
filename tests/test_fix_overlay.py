"""Overlay: patches apply to copies; a child process importing the patched modules gets the
copies; the installed site-packages files stay byte-for-byte unchanged."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from enablebot.fix.judge.overlay import (PatchApplyError, build_overlay, install_overlay, load_overlay, locate,
                                   upstream_path)
from enablebot.fix.judge.patchguard import PatchPolicy, check_patch

FIX = Path(__file__).parent / "fixtures" / "fix"
SWITCH = (FIX / "switch_transformers_static_experts.diff").read_text()
LOGGER = (FIX / "dynamo_reorder_logger_calls.diff").read_text()
SWITCH_FILE = "src/transformers/models/switch_transformers/modeling_switch_transformers.py"
PINNED = "fixture diffs are against torch 2.13.0 / transformers 5.24.0 sources"


def _sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_locate_maps_upstream_paths_to_installed_files_and_back():
    import torch
    import transformers

    module, installed = locate("torch/_dynamo/variables/misc.py")
    assert module == "torch._dynamo.variables.misc"
    assert installed == (Path(torch.__file__).parent / "_dynamo" / "variables" / "misc.py").resolve()
    module, installed = locate(SWITCH_FILE)
    assert module == "transformers.models.switch_transformers.modeling_switch_transformers"
    assert installed.parent == (Path(transformers.__file__).parent / "models" / "switch_transformers").resolve()
    assert upstream_path(str(installed)) == SWITCH_FILE
    assert upstream_path(str(Path(torch.__file__).parent / "_dynamo" / "config.py")) == "torch/_dynamo/config.py"
    with pytest.raises(PatchApplyError, match="no such file"):
        locate("torch/_dynamo/not_a_module.py")


def test_build_overlay_writes_copies_only(tmp_path):
    _, installed = locate(SWITCH_FILE)
    before = _sha(str(installed))
    overlay = build_overlay(check_patch(SWITCH, PatchPolicy(model_type="switch_transformers")).diff, tmp_path / "ov")
    assert [f.upstream for f in overlay.files] == [SWITCH_FILE], PINNED
    copy = tmp_path / "ov" / overlay.files[0].copy
    assert "for expert_idx in range(self.num_experts):" in copy.read_text()
    assert "for expert_idx in range(self.num_experts):" not in installed.read_text()
    assert _sha(str(installed)) == before
    assert load_overlay(tmp_path / "ov").modules == {overlay.files[0].module: overlay.files[0].copy}
    # The canonical diff (what a PR carries) re-applies to the installed file to the same copy.
    again = build_overlay(overlay.canonical_diff, tmp_path / "ov2")
    assert again.files[0].sha256_patched == overlay.files[0].sha256_patched
    assert overlay.canonical_diff.startswith(f"--- a/{SWITCH_FILE}\n+++ b/{SWITCH_FILE}\n")


def test_hunks_apply_at_an_offset_but_not_with_wrong_context(tmp_path):
    shifted = SWITCH.replace("@@ -171,12 +171,12 @@", "@@ -150,12 +150,12 @@")
    overlay = build_overlay(shifted, tmp_path / "shifted")
    assert "range(self.num_experts)" in (tmp_path / "shifted" / overlay.files[0].copy).read_text()
    wrong = SWITCH.replace(" expert_mask = selected_experts.permute(2, 1, 0)", " expert_mask = selected_experts.permute(0, 1, 2)")
    with pytest.raises(PatchApplyError, match=r"hunk 1 .* does not apply"):
        build_overlay(wrong, tmp_path / "wrong")
    broken = SWITCH.replace("+        for expert_idx in range(self.num_experts):", "+        for expert_idx in range(self.num_experts)")
    with pytest.raises(PatchApplyError, match="does not compile"):
        build_overlay(broken, tmp_path / "broken")


def _child(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_child_process_imports_the_patched_copies(tmp_path):
    # One overlay holding both files: the torch patch and the model-code patch.
    both = tmp_path / "both"
    overlay = build_overlay(SWITCH + LOGGER, both)
    installed = {f.installed: _sha(f.installed) for f in overlay.files}
    code = f"""
import json, inspect
from enablebot.fix.judge.overlay import install_overlay
mods = install_overlay({str(both)!r})
import torch._dynamo.variables.misc as misc
import transformers.models.switch_transformers.modeling_switch_transformers as sw
print(json.dumps({{"mods": mods, "misc": misc.__file__, "sw": sw.__file__,
  "sw_patched": "range(self.num_experts)" in inspect.getsource(sw.SwitchTransformersExperts.forward),
  "misc_patched": "debug_locals.append((debug_var" in inspect.getsource(misc.LoggingLoggerVariable.call_method),
  "package": sw.__package__}}))
"""
    got = _child(code)
    assert got["mods"] == sorted(["torch._dynamo.variables.misc",
                                  "transformers.models.switch_transformers.modeling_switch_transformers"])
    assert got["misc"].startswith(str(both)) and got["sw"].startswith(str(both))
    assert got["sw_patched"] and got["misc_patched"]
    assert got["package"] == "transformers.models.switch_transformers"
    # Without the overlay the same child sees the installed code.
    plain = _child("import json, inspect, transformers.models.switch_transformers.modeling_switch_transformers as sw;"
                   "print(json.dumps({'p': 'range(self.num_experts)' in inspect.getsource(sw)}))")
    assert plain == {"p": False}
    assert {p: _sha(p) for p in installed} == installed


def test_install_overlay_refuses_modules_already_imported(tmp_path):
    build_overlay(SWITCH, tmp_path / "ov")
    code = f"""
import json, transformers.models.switch_transformers.modeling_switch_transformers
from enablebot.fix.judge.overlay import install_overlay
try:
    install_overlay({str(tmp_path / 'ov')!r}); print(json.dumps({{"refused": False}}))
except RuntimeError as e:
    print(json.dumps({{"refused": "already imported" in str(e)}}))
"""
    assert _child(code) == {"refused": True}


def test_install_overlay_refuses_a_tampered_copy(tmp_path):
    overlay = build_overlay(SWITCH, tmp_path / "ov")
    copy = tmp_path / "ov" / overlay.files[0].copy
    copy.write_text(copy.read_text() + "\nimport os  # injected after verification\n")
    with pytest.raises(RuntimeError, match="modified after the overlay was built"):
        install_overlay(tmp_path / "ov")
