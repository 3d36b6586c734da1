"""CLI conventions: validated choices, exit codes, --help, --version, outputs."""

import os
import subprocess
import sys

import pytest
import typer

from enablebot.choices import parse_task

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
