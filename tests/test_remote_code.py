"""Hub remote code, allow-listed with `watch --run --allow-remote-code`, attacked from inside.

A real, tiny, working remote-code model (tests/fixtures/remote_code/hostile-lab/TinyRC: a
PreTrainedModel behind `auto_map`) is served by a fake Hub over HTTP on 127.0.0.1. At the
import of its configuration and modeling files and at its first forward it tries to read the
Hub token (HF_TOKEN, the token file under HF_HOME), to open a socket to the Hub's port, and to
write outside its directory (the checkout, HOME, the host's /tmp), printing what it managed
as `HOSTILE {json}` lines into the child's log. The parent fetches the code (files only) and
the sandboxed child builds and runs it: every attack fails, and the verdict is still recorded.
"""

from __future__ import annotations

import json
import uuid
import os
import shutil
import sys
from pathlib import Path

import pytest

from enablebot.execute import sandbox
from enablebot.execute.isolation import run_in_child
from enablebot.model.hub import HubClient, RetryPolicy
from enablebot.model.registry import ArchEntry, Registry
from enablebot.model.remote_code import auto_map_refs, pick_model_ref
from enablebot.model.resolve import Resolved, UsageError
from enablebot.testing.fake_hub import FakeHub, FakeRepo, hub_requests_allowed
from enablebot.watch.watcher import watch_once

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = Path(__file__).parent / "fixtures" / "remote_code" / "hostile-lab" / "TinyRC"
REPO = "hostile-lab/TinyRC"
SECRET = "hf_enablebotTESTSECRETremote0123456789"
FAST = RetryPolicy(attempts=2, base_wait_s=0.05, max_wait_s=5.0, timeout_s=5.0)


def hostile_repo(port: int, token_files: list[str], outside: list[str]) -> FakeRepo:
    """The fixture with its placeholders filled in (the Hub's port is known once it serves)."""
    files = {}
    for p in sorted(FIXTURE.iterdir()):
        text = (p.read_text(encoding="utf-8").replace("__HUB_PORT__", str(port))
                .replace("__TOKEN_FILES__", json.dumps(token_files)).replace("__OUTSIDE__", json.dumps(outside)))
        files[p.name] = text.encode()
    return FakeRepo(REPO, "2026-11-22T08:00:00.000Z", library_name="transformers", pipeline_tag="text-generation",
                    tags=["custom_code"], files=files)


@pytest.fixture
def hf_home():
    """HF_HOME with a token file, outside HOME and /tmp (as on a shared disk), so that neither the
    tmpfs over HOME nor the private /tmp hides it: only masking the token file does."""
    d = ROOT / ".pytest_cache" / f"enablebot-hf-home-{os.getpid()}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "token").write_text(SECRET, encoding="utf-8")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_the_sandbox_is_available_here():
    assert sandbox.available(), "bubblewrap is required: apt-get install -y bubblewrap (scripts/setup.sh does it)"


def test_hostile_remote_code_runs_sandboxed_and_its_verdict_is_recorded(tmp_path, monkeypatch, hf_home):
    # The watcher runs online and logged in: the Hub reachable, a token in the env and on disk.
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("HF_HOME", str(hf_home))
    (tmp_path / "outside").mkdir()
    tag = f"enablebot_remote_pwned_{os.getpid()}.txt"
    outside = [str(ROOT / tag), os.path.join(os.path.expanduser("~"), tag), str(tmp_path / "outside" / tag)]
    reg = Registry(path=tmp_path / "model_registry.yaml")
    reg.upsert(ArchEntry(model_type="llama", first_seen="2026-01-01T00:00:00+00:00"))
    reg.save()
    logs = tmp_path / "logs"
    try:
        with hub_requests_allowed(), FakeHub() as hub:
            monkeypatch.setenv("HF_ENDPOINT", hub.url)
            port = int(hub.url.rsplit(":", 1)[1])
            hub.add_repo(hostile_repo(port, [str(hf_home / "token")], outside))
            report = watch_once(reg.path, HubClient(hub.url, policy=FAST, cache_dir=tmp_path / "cache"), run=True,
                                runner=lambda spec: run_in_child(spec, log_dir=logs),
                                allow_remote_code=[REPO], spec_overrides={"pass_name": "dynamo", "timeout_s": 600})
            exfil = hub.requests_to(r"^/exfil")
            code_requests = [(r.method, r.path) for r in hub.requests_to(r"\.py$")]
        log = "\n".join(p.read_text(errors="replace") for p in sorted(logs.glob("*.log")))
        attempts = [json.loads(ln[len("HOSTILE "):]) for ln in log.splitlines() if ln.startswith("HOSTILE ")]
        print(json.dumps(attempts, indent=1))  # what the remote code tried, and how each try ended
        written = [p for p in outside if os.path.exists(p)]
    finally:
        for p in outside:
            if os.path.exists(p):
                os.unlink(p)

    # The code really ran, in the child: at both imports and at the first forward.
    assert {a["phase"] for a in attempts} == {"configuration import", "modeling import", "forward"}, \
        (report.decisions, report.runs, log[-3000:])
    # ... and never in this process (the parent only downloaded files, at the pinned commit).
    assert not [m for m in sys.modules if "tinyrc" in m.lower()]
    sha = hub.repo(REPO).sha
    assert code_requests and all(f"/resolve/{sha}/" in path for _, path in code_requests), code_requests
    for a in attempts:
        # (a) no token: not in the environment, the token file unreadable, huggingface_hub finds none.
        assert a["env_token"] == {"HF_TOKEN": False, "HUGGING_FACE_HUB_TOKEN": False}, a
        assert a["token_files"] == {str(hf_home / "token"): "read 0 chars"}, a  # masked: reads as empty
        assert a["get_token"] is False, a
        # (b) no network, not even to 127.0.0.1.
        assert "Errno" in a["socket"], a
        # (c) nothing written outside its directory: the checkout is read-only; HOME and /tmp are
        # private tmpfs inside (a write there "works" and vanishes with the sandbox).
        assert "Read-only file system" in a["writes"][outside[0]], a
    assert not exfil and not written
    assert SECRET not in log
    # The verdict is recorded all the same: the tiny model compiles as one graph.
    assert [(r.model_type, r.model_id, r.verdict) for r in report.runs] == [("tinyrc", REPO, "full_graph")], \
        (report.runs, log[-3000:])
    entry = Registry.load(reg.path).get("tinyrc")
    assert entry.origin == "remote_code" and entry.status["cpu/eval"]["verdict"] == "full_graph"


def test_auto_map_picks_the_class_and_refuses_code_from_another_repo():
    auto_map = {"AutoConfig": "configuration_x.XConfig", "AutoModel": "modeling_x.XModel",
                "AutoModelForCausalLM": "modeling_x.XForCausalLM",
                "AutoTokenizer": ["tokenization_x.XTokenizer", None]}
    assert pick_model_ref(auto_map, ["XForCausalLM"], None) == "modeling_x.XForCausalLM"
    assert pick_model_ref(auto_map, ["XForCausalLM"], "base") == "modeling_x.XModel"
    assert pick_model_ref(auto_map, [], "XModel") == "modeling_x.XModel"
    assert pick_model_ref(auto_map, ["XModel"], "head") == "modeling_x.XForCausalLM"
    assert pick_model_ref({"AutoModel": "m.M"}, [], None) == "m.M"
    with pytest.raises(UsageError, match="no model class 'Nope'"):
        pick_model_ref(auto_map, [], "Nope")
    with pytest.raises(UsageError, match="another repo"):
        auto_map_refs({"AutoModel": "other/repo--modeling_y.YModel"})


def test_remote_code_is_never_built_without_the_fetched_copy():
    """In-process (`run --no-isolation`) or any child without the parent's copy: refused, not downloaded."""
    from enablebot.model.build import build_model

    res = Resolved(model_id=REPO, model_type="tinyrc", config_dict=json.loads((FIXTURE / "config.json").read_text()),
                   class_name=None, source="hub", remote_code=True)
    with pytest.raises(UsageError, match="never in-process"):
        build_model(res)


def test_an_allowed_repo_without_remote_code_is_resolved_once_and_built_sandboxed(tmp_path, monkeypatch):
    """--allow-remote-code on a repo of a native architecture: the parent resolves it (nothing to
    fetch) and the sandboxed child builds it from the config it was handed, offline."""
    monkeypatch.delenv("HF_TOKEN", raising=False)
    llama = Path(__file__).parent / "fixtures" / "hub" / "repos" / "acme-lab" / "Llama-3.2-1B-sft-v2" / "config.json"
    # A repo id of its own: the shared Hub cache of an earlier run must not answer the GET.
    repo = f"acme-lab/llama-ft-{uuid.uuid4().hex[:8]}"
    with hub_requests_allowed(), FakeHub([FakeRepo(repo, "2026-11-22T08:00:00.000Z",
                                                   files={"config.json": llama.read_bytes()})]) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        from enablebot.results import RunSpec

        result = run_in_child(RunSpec(model_id=repo, allow_remote_code=True, pass_name="build",
                                      timeout_s=300), log_dir=tmp_path / "logs")
        assert len(hub.requests_to(r"/resolve/")) == 2  # config.json (HEAD + GET), by the parent only
    assert result.verdict == "eager_ok", (result.error, result.log_tail[-2000:])
    assert result.spec.resolved["model_type"] == "llama" and result.spec.resolved["code_dir"] is None
