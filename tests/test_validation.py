"""Validated data at every boundary: a file the bot reads back either becomes its typed
dataclass or fails in one line naming the file, the entry, the field and what was expected.
Every test below but the first failed at ed153a0, where `requires: timm` loaded as
['t', 'i', 'm', 'm'], `remote_code: "false"` as a truthy string, a nightly typo was dropped
and a results line of the wrong type loaded as it was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from enablebot.commands.nightly_steps import ConfigError, NightlyConfig
from enablebot.fix.bundle import FixBundle, find_bundles
from enablebot.model.registry import Registry, RegistryError
from enablebot.results import RunResult
from enablebot.sweep.baseline import Baseline
from enablebot.sweep.checkpoint import load_results
from enablebot.verdict import Verdict

ROOT = Path(__file__).resolve().parent.parent
PASS = ROOT / "results" / "cpu-dynamo" / "results.jsonl"  # the 2,180 results of the CPU Dynamo pass


def one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


def committed_results() -> list[Path]:
    return sorted((ROOT / "results").rglob("results.jsonl"))


def test_committed_data_written_by_older_versions_still_loads():
    """Every committed result, baseline, bundle and the registry load under the strict rules, and
    no result line is dropped: each non-blank line is one result (a later line may replace an
    earlier one of the same key). This passed at ed153a0 too; it guards the strictness."""
    files = committed_results()
    assert len(files) >= 40
    for f in files:
        lines = [ln for ln in f.read_text(encoding="utf-8").splitlines() if ln.strip()]
        keys = {RunResult.from_dict(json.loads(ln)).key for ln in lines}
        assert len(load_results(f)) == len(keys), f
    for b in sorted((ROOT / "baselines").glob("*.json")):
        assert Baseline.load(b).entries, b
    bundles = find_bundles(ROOT / "results" / "versions" / "day0-transformers-5.25.0" / "fixes")
    assert bundles and all(FixBundle.load(d).fix_key for d in bundles)
    reg = Registry.load(ROOT / "model_registry.yaml")
    assert len(reg) > 600 and all(isinstance(e.requires, list) and isinstance(e.remote_code, bool)
                                  for e in reg.entries.values())


def test_loading_a_pass_reuses_one_validator_per_class(monkeypatch):
    """Loading was `typing.get_type_hints` for every object (~50x the JSON parse: 2.4 s of CPU for
    this pass at ed153a0); one cached validator per class made it ~2x. Counted, not timed (a
    timed assertion failed on a loaded CI machine): once the validators exist, loading the 2,180
    results resolves no type hints at all."""
    import typing

    import enablebot.validate as validate

    load_results(PASS)  # builds the validators once, as any command's first load does
    calls = []
    real = typing.get_type_hints
    monkeypatch.setattr(validate.typing, "get_type_hints", lambda *a, **k: calls.append(a) or real(*a, **k))
    got = load_results(PASS)
    assert len(got) == 2180
    assert calls == []


# ---- the registry ---------------------------------------------------------------------------
@pytest.mark.parametrize("fields, expected", [
    ({"requires": "timm"}, "entry llama: field requires: expected a list of strings, got str 'timm'"),
    ({"remote_code": "false"}, "entry llama: field remote_code: expected true or false, got str 'false'"),
    ({"requirs": ["timm"]}, "entry llama: field requirs: unknown key; did you mean requires?"),
    ({"classes": ["LlamaModel", 3]}, "entry llama: field classes[1]: expected a string, got int 3"),
])
def test_a_bad_registry_entry_fails_in_one_line_naming_file_entry_and_field(tmp_path, fields, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"architectures": {"gpt2": {}, "llama": {"head": "LlamaForCausalLM", **fields}}}))
    with pytest.raises(RegistryError) as e:
        Registry.load(path)
    assert one_line(e).startswith(f"{path}: {expected}")


def test_a_bad_state_file_entry_names_the_state_file(tmp_path):
    path = tmp_path / "reg.yaml"
    path.write_text(yaml.safe_dump({"architectures": {"llama": {}}}))
    state = tmp_path / "reg.state.json"
    state.write_text(json.dumps({"architectures": {"llama": {"seen_in": "acme/llama-ft"}}}))
    with pytest.raises(RegistryError) as e:
        Registry.load(path)
    assert one_line(e).startswith(f"{state}: entry llama: field seen_in: expected a list of strings, got str 'acme/llama-ft'")


def test_run_with_a_bad_registry_prints_the_one_line_error_and_exits_2(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("architectures:\n  llama:\n    requires: timm\n")
    p = subprocess.run([sys.executable, "-m", "enablebot.cli", "run", "llama", "--registry", str(path), "--device", "cpu"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.strip().startswith("error:") and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "entry llama: field requires: expected a list of strings, got str 'timm' (a single item is still a list: [timm])" \
        in p.stderr and "Traceback" not in p.stderr  # [timm] is no markup tag: printed as written


# ---- the nightly's settings -----------------------------------------------------------------
def nightly_config(tmp_path: Path, **sections) -> Path:
    path = tmp_path / "nightly.yaml"
    path.write_text(yaml.safe_dump({"out": "out", "sweep": {"pass": "dynamo", "jobs": 2}, **sections}))
    return path


@pytest.mark.parametrize("sweep, expected", [
    ({"jobz": 8}, "field sweep.jobz: unknown key; did you mean jobs?"),
    ({"device": "gpu"}, "field sweep.device: expected 'cpu' or 'cuda', got str 'gpu'"),
    ({"pass": "inductr"}, "field sweep.pass: expected one of 'build', 'dynamo', 'inductor', got str 'inductr'"),
    ({"jobs": "8"}, "field sweep.jobs: expected an integer, got str '8'"),
])
def test_a_bad_nightly_setting_fails_in_one_line(tmp_path, sweep, expected):
    path = nightly_config(tmp_path, sweep=sweep)
    with pytest.raises(ConfigError) as e:
        NightlyConfig.load(path)
    assert one_line(e) == f"{path}: {expected}"


def test_the_committed_nightly_settings_load_typed():
    cfg = NightlyConfig.load(ROOT / ".github" / "enablebot-nightly.yaml")
    assert (cfg.sweep.pass_, cfg.sweep.device, cfg.sweep.jobs, cfg.sweep.timeout) == ("dynamo", "cpu", 4, 300.0)
    assert cfg.fix.llm_model is None  # ${ENABLEBOT_LLM_MODEL} unset: dropped, the default holds


# ---- results, baselines, bundles ------------------------------------------------------------
def test_a_results_line_of_the_wrong_type_names_file_line_entry_and_field(tmp_path):
    lines = PASS.read_text(encoding="utf-8").splitlines()[:3]
    bad = json.loads(lines[1])
    bad["spec"]["batch_size"] = "2"
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join([lines[0], json.dumps(bad), lines[2], '{"spec": {"mod']))  # a torn tail has no newline
    with pytest.raises(ValueError) as e:
        load_results(path)
    model = bad["spec"]["model_id"]
    assert one_line(e) == f"{path}: line 2: entry {model}: field spec.batch_size: expected an integer, got str '2'"
    path.write_text("\n".join([lines[0], lines[2], '{"spec": {"mod']))
    assert len(load_results(path)) == 2  # a torn line (a kill mid-write) is still skipped: it reruns


def test_a_verdict_word_from_a_newer_bot_reads_as_crash_and_a_number_is_refused():
    r = RunResult.from_dict({"spec": {"model_id": "llama"}, "verdict": "some_new_word"})
    assert r.verdict == "crash" and not r.ok
    with pytest.raises(ValueError) as e:
        RunResult.from_dict({"spec": {"model_id": "llama"}, "verdict": 1})
    assert one_line(e).startswith("entry llama: field verdict: expected a verdict word (full_graph, ")


def test_a_bad_baseline_entry_and_a_bad_bundle_name_their_field(tmp_path):
    src = ROOT / "baselines" / "cpu-dynamo-torch-2.13.0.json"
    data = json.loads(src.read_text())
    key = sorted(data["entries"])[0]
    data["entries"][key]["graph_breaks"] = "3"
    path = tmp_path / "base.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError) as e:
        Baseline.load(path)
    assert one_line(e) == f"{path}: entry {key}: field graph_breaks: expected an integer or null, got str '3'"

    bundle = find_bundles(ROOT / "results" / "versions" / "day0-transformers-5.25.0" / "fixes")[0]
    meta = json.loads((bundle / "bundle.json").read_text())
    meta["verified"] = "yes"
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "bundle.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError) as e:
        FixBundle.load(tmp_path / "b")
    where = tmp_path / "b" / "bundle.json"
    assert one_line(e) == f"{where}: field verified: expected true or false, got str 'yes' (write it unquoted)"


def test_check_on_a_results_line_of_the_wrong_type_prints_one_line_and_exits_2(tmp_path):
    lines = PASS.read_text(encoding="utf-8").splitlines()[:2]
    bad = json.loads(lines[1])
    bad["verdict"] = ["graph_break"]
    (tmp_path / "results.jsonl").write_text("\n".join([lines[0], json.dumps(bad)]) + "\n")
    p = subprocess.run([sys.executable, "-m", "enablebot.cli", "check", str(tmp_path), "--baseline",
                        str(ROOT / "baselines" / "cpu-dynamo-torch-2.13.0.json")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stdout + p.stderr
    assert p.stderr.strip() == (f"error: {tmp_path / 'results.jsonl'}: line 2: entry {bad['spec']['model_id']}: field verdict: "
                                "expected a verdict word (" + ", ".join(v.value for v in Verdict) + "), got list ['graph_break']")
