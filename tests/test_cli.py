"""CLI conventions: validated choices, exit codes, --help, --version, outputs."""

import os
import subprocess
import sys

import pytest
import typer

from enablebot.commands.choices import parse_task

from conftest import ROOT


def cli(*args, env=None, cwd=None):
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "enablebot.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=600, env=full_env)


def flat(text: str) -> str:
    """rich boxes wrap error lines: compare words, not layout."""
    return " ".join(text.replace("│", " ").replace("╭", " ").replace("╰", " ").split())


@pytest.mark.parametrize("option, value, valid", [
    ("--mode", "foo", ["eval", "train"]),
    ("--size", "huge", ["tiny", "small"]),
    ("--task", "foo", ["base", "head", "main"]),
    ("--dtype", "float16", ["float32", "bfloat16"]),
    ("--pass", "foo", ["dynamo", "inductor"]),
    ("--device", "tpu", ["cpu", "cuda"]),
])
def test_sweep_refuses_bad_choices_before_writing_anything(tmp_path, option, value, valid):
    out = tmp_path / "out"
    p = cli("sweep", "--out", str(out), "-m", "llama", option, value)
    assert p.returncode == 2, p.stdout + p.stderr
    err = flat(p.stderr)
    assert f"Invalid value for '{option}'" in err and all(f"'{v}'" in err for v in valid), err
    assert not out.exists()  # nothing that could poison a baseline


@pytest.mark.parametrize("command", [["sweep", "-m", "llama"], ["run", "llama"], ["fix", "llama"]])
def test_device_cuda_without_cuda_exits_2_with_a_clear_line(tmp_path, command):
    p = cli(*command, "--device", "cuda", cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)})
    assert p.returncode == 2, p.stdout + p.stderr
    assert "--device cuda: no CUDA device is visible" in flat(p.stderr)
    assert not any(tmp_path.iterdir())


def test_task_accepts_kinds_and_known_classes_only():
    assert parse_task("base") == "base" and parse_task("head") == "head"
    assert parse_task("main") is None and parse_task(None) is None  # the registry's default class
    assert parse_task("LlamaForCausalLM") == "LlamaForCausalLM"
    with pytest.raises(typer.BadParameter, match="LlamaForCausalLM"):
        parse_task("LlamaForCausalLMM")  # a typo gets a suggestion
    with pytest.raises(typer.BadParameter):
        parse_task("foo")


def test_help_lists_the_choices():
    p = cli("run", "--help", env={"COLUMNS": "200"})
    assert p.returncode == 0
    for choice in ("cpu|cuda", "eval|train", "float32|bfloat16", "tiny|small"):
        assert choice in p.stdout, p.stdout


def _llama_config(tmp_path):
    import transformers

    cfg = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=500)
    cfg.save_pretrained(tmp_path / "model")
    return tmp_path / "model" / "config.json"


def test_run_without_a_tty_prints_a_line_per_stage_and_json_to_stdout(tmp_path):
    import json

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    p = subprocess.run([sys.executable, "-m", "enablebot.cli", "run", str(_llama_config(tmp_path)), "--device", "cpu",
                        "--backend", "eager", "--repeats", "2", "--warmup", "1", "--json", "-"],
                       capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)  # stdout is the JSON and nothing else
    assert data["verdict"] == "full_graph" and not (ROOT / "-").exists() and not (tmp_path / "-").exists()
    stages = [ln for ln in p.stderr.splitlines() if ln.startswith("[") and "] " in ln]
    for stage in ("building the tiny model", "eager run", "torch.compile: tracing every step", "timing:"):
        assert any(stage in ln for ln in stages), p.stderr
    # the human summary went to stderr, with the break count and the noise verdict
    assert "graph breaks    0 at 0 sites (explain" in p.stderr and "noise" in p.stderr
    assert "result written to stdout" in p.stderr


def test_line_progress_counts_and_eta_every_n_items():
    import io

    from rich.console import Console

    from enablebot.progress import LineProgress, interactive

    buf = io.StringIO()
    console = Console(file=buf, width=80)
    assert not interactive(console)  # a file is not a terminal
    lp = LineProgress(console, total=5, every=2)
    for i, v in enumerate(["full_graph", "graph_break", "full_graph", "timeout", "full_graph"]):
        lp.item(f"m{i}/head/eval", v, 1.0)
    lines = buf.getvalue().splitlines()
    assert lines[0] == "[1/5] m0/head/eval: full_graph (1 s)"
    counts = [ln for ln in lines if ln.startswith("progress:")]
    assert len(counts) == 3  # after items 2, 4 and 5
    assert counts[0].startswith("progress: 2/5 done (1 full_graph, 1 graph_break)") and "ETA" in counts[0]
    assert counts[-1].startswith("progress: 5/5 done (3 full_graph, 1 graph_break, 1 timeout)")


def test_tables_fold_file_line_instead_of_cutting_it():
    from rich.console import Console

    from enablebot.measure.render import rich_summary
    from enablebot.results import CompileStats, GraphBreak, RunResult, RunSpec, UserFrame

    long = "/site-packages/transformers/models/vilt/modeling_vilt_with_a_very_long_module_name_indeed.py"
    b = GraphBreak(gb_type="Data dependent operator", registry_id="GB0033", count=1, user_frame=UserFrame(
        long, 1234, "visual_embed_with_a_long_function_name", "x = mask.nonzero().tolist()  # and a long source line too"))
    r = RunResult(spec=RunSpec(model_id="vilt"), verdict="graph_break", graph_breaks=[b], explain_breaks=1,
                  stats=CompileStats(graph_breaks=5, unique_graph_breaks=1))
    console = Console(record=True, width=80)
    console.print(rich_summary(r))
    text = console.export_text()
    where = "".join(ln.split("│")[4].strip() for ln in text.splitlines() if ln.startswith("│"))
    assert where.startswith("vilt/modeling_vilt_with_a_very_long_module_name_indeed.py:1234 in") and "…" not in text
    # one break count; the counters' number labelled beside it because they differ
    row = " ".join(ln for ln in text.splitlines() if "break" in ln and "explain" in ln or "counters" in ln)
    assert "1 at 1 site (explain" in row and "torch.compile counters: 5 break events" in " ".join(text.split())


def test_version_and_short_help():
    from enablebot import __version__

    import torch
    import transformers

    p = cli("--version")
    # the versions a run measures with, not just the package's own: graph breaks depend on them
    assert p.returncode == 0 and p.stdout.splitlines() == [
        f"enablebot {__version__}",
        f"torch {torch.__version__}",
        f"transformers {transformers.__version__}",
    ]
    p = cli("sweep", "-h", env={"COLUMNS": "200"})
    assert p.returncode == 0 and "Usage:" in p.stdout and ".enablebot/" in p.stdout  # default outputs stated


def test_empty_report_support_says_what_to_do_and_json_goes_to_stdout(tmp_path):
    import json

    p = cli("report", "support", "--key", "tpu/eval", "--json", "-", cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["rows"] == [] and not (tmp_path / "-").exists()
    err = flat(p.stderr)
    assert "no architectures to report with --key tpu/eval" in err and "enablebot registry record" in err


def test_outputs_are_0644_and_default_outputs_are_ignored_by_git(tmp_path):
    from enablebot.commands.choices import DEFAULT_FIX_OUT, DEFAULT_SWEEP_OUT
    from enablebot.model.registry import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "x.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "x.json").stat().st_mode & 0o777 == 0o644
    for d in (DEFAULT_SWEEP_OUT, DEFAULT_FIX_OUT):
        p = subprocess.run(["git", "check-ignore", "-q", str(d / "results.jsonl")], cwd=ROOT)
        assert p.returncode == 0, f"{d} is not ignored by git"
