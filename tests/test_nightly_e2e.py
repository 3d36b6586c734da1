"""The whole nightly loop through `enablebot nightly --config`, against the local fake Hub, an
OpenAI-compatible server answering with the real switch_transformers dense-expert-mask fix,
and the fake GitHub: watch registers switch_transformers, the sweep finds its graph break, fix
drafts and verifies (sandboxed) the patch, pr opens exactly one PR carrying the verified patch,
the dashboard issue is written; a second run changes nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
import yaml
from typer.testing import CliRunner

from enablebot.commands import nightly as nightly_cmd
from enablebot.fix.judge.overlay import locate
from enablebot.model.registry import Registry
from enablebot.testing.fake_github import FakeGitHub
from enablebot.testing.fake_hub import FakeHub, FakeRepo, hub_requests_allowed
from enablebot.testing.fake_openai import FakeOpenAI

# About 2 minutes on 2 cores (one model swept); it needs bubblewrap (scripts/setup.sh installs it).

FIX = (Path(__file__).parent / "fixtures" / "fix" / "switch_transformers_static_experts.diff").read_text()
SW = "src/transformers/models/switch_transformers/modeling_switch_transformers.py"


def _app():
    app = typer.Typer()
    nightly_cmd.register(app)
    app.command("noop")(lambda: None)  # a group of one command would swallow the name
    return app


def test_nightly_end_to_end_then_a_second_run_changes_nothing(tmp_path, monkeypatch):
    from transformers import SwitchTransformersConfig

    cfg_json = SwitchTransformersConfig(num_layers=2, num_decoder_layers=2).to_dict()
    cfg_json["architectures"] = ["SwitchTransformersForConditionalGeneration"]
    repo = FakeRepo("moe-lab/switch-tiny-ft", "2026-11-20T08:00:00.000Z", library_name="transformers",
                    files={"config.json": json.dumps(cfg_json).encode()})
    Registry(path=tmp_path / "model_registry.yaml").save()
    config = tmp_path / "nightly.yaml"
    config.write_text(yaml.safe_dump({
        "out": "out", "registry": "model_registry.yaml", "baseline_dir": "baselines",
        "watch": {"limit": 10},
        # The watched model only: over every installed type, triage ranks shared clusters (the
        # VLMs' GB0036 in vision_utils.py) above switch_transformers' one-model cluster, and
        # `top: 1` would fix that instead.
        "sweep": {"pass": "dynamo", "modes": ["eval"], "tasks": ["base"], "jobs": 1, "record_task": "base",
                  "models": ["switch_transformers"]},
        "fix": {"top": 1, "llm_model": "fake-coder", "backend": "aot_eager", "attempts": 1, "recipes": False,
                "timing": False, "heldout": True, "sample_models": [], "max_clusters": 1},
        "pr": {"repos": {"model-code": "acme/transformers"}, "write_interval": 0},
        "dashboard": {"repo": "acme/enablebot"},
    }))
    _, installed = locate(SW)
    answer = f"The expert loop depends on data; iterate over every expert with a dense mask.\n\n```diff\n{FIX}```\n"
    with hub_requests_allowed(), FakeHub([repo]) as hub, FakeGitHub() as gh, \
            FakeOpenAI(script=[answer]) as llm:
        tf = gh.add_repo("acme/transformers", {SW: installed.read_text(), "README.md": "transformers\n"})
        board = gh.add_repo("acme/enablebot", {"README.md": "enablebot\n"})
        for k, v in {"HF_ENDPOINT": hub.url, "OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": "sk-local-nightly-key-1",
                     "GITHUB_API_URL": gh.base_url, "GITHUB_TOKEN": gh.token}.items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        t0 = time.time()
        first = CliRunner().invoke(_app(), ["nightly", "--config", str(config), "--json", str(tmp_path / "n1.json")])
        wall = time.time() - t0
        print(f"nightly end to end: {wall:.0f} s")
        assert first.exit_code == 0, first.output
        log = {s["step"]: s for s in json.loads((tmp_path / "n1.json").read_text())}
        assert "switch_transformers" in log["watch"]["detail"]
        assert "switch_transformers" in Registry.load(tmp_path / "model_registry.yaml")
        # Exactly one PR, carrying the verified patch.
        pulls = tf.pulls()
        assert len(pulls) == 1, log["pr"]
        branch = [b for b in tf.branches() if b.startswith("enablebot/")]
        assert len(branch) == 1
        patched = tf.files_at(f"heads/{branch[0]}")[SW]
        # The playbook's dense-experts rewrite fixes it before the LLM is asked (the PR says so).
        assert "for expert_idx in range(expert_mask.shape[0]):" in patched and ".nonzero()" not in patched
        assert "playbook" in pulls[0]["body"] and "dense-experts" in pulls[0]["body"]
        bundle = next((tmp_path / "out" / "fixes" / "switch_transformers").glob("*/verification.json"))
        ver = json.loads(bundle.read_text())
        assert ver["passed"] and ver["patch_sha256"] and sorted(ver["files_sha256"]) == [SW]
        assert "Verification: passed" in pulls[0]["body"]
        issues = board.issues()
        assert len(issues) == 1 and "switch_transformers" in issues[0]["body"]
        assert "sk-local-nightly-key-1" not in (tmp_path / "out").joinpath("fixes").rglob("report.md").__next__().read_text()
        writes_1 = [r for r in gh.requests if r.method in ("POST", "PATCH", "PUT", "DELETE")]
        asked = len(llm.chat_requests)
        assert asked == 0  # a verified rewrite needs no LLM

        second = CliRunner().invoke(_app(), ["nightly", "--config", str(config), "--json", str(tmp_path / "n2.json")])
        assert second.exit_code == 0, second.output
        log2 = {s["step"]: s for s in json.loads((tmp_path / "n2.json").read_text())}
        writes_2 = [r for r in gh.requests if r.method in ("POST", "PATCH", "PUT", "DELETE")]
        assert writes_2 == writes_1, [f"{r.method} {r.path}" for r in writes_2[len(writes_1):]]
        assert len(llm.chat_requests) == asked  # no second LLM bill
        assert log2["sweep"]["data"]["ran"] == 0 and "already verified" in log2["fix"]["detail"]
        assert log2["dashboard"]["data"]["action"] == "unchanged"
        assert len(tf.pulls()) == 1 and len(board.issues()) == 1
