"""`enablebot watch` and time-to-support, against a local Hub served over HTTP and driven
through the real huggingface_hub client."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import transformers
import typer
from typer.testing import CliRunner

from enablebot.model.catalog import known_architectures
from enablebot.commands import report as report_cmd
from enablebot.commands import watch as watch_cmd
from enablebot.model.hub import HubClient, RetryPolicy
from enablebot.model.registry import ArchEntry, Registry
from enablebot.results import Numerics, RunResult, RunSpec, Timing, Versions
from enablebot.watch.support import human_duration, record_status, time_to_support
from enablebot.testing.fake_hub import FakeHub, FakeRepo, Fault, hub_requests_allowed
from enablebot.watch.watcher import Cursor, pending_runs, poll, run_pending, watch_once

FIXTURES = Path(__file__).parent / "fixtures" / "hub"
ROOT = Path(__file__).resolve().parent.parent
ROOT = Path(__file__).resolve().parent.parent
FAST = RetryPolicy(attempts=2, base_wait_s=0.05, max_wait_s=5.0, timeout_s=5.0)
LLAMA_CFG = (FIXTURES / "repos/acme-lab/Llama-3.2-1B-sft-v2/config.json").read_bytes()


@pytest.fixture
def hub(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    with hub_requests_allowed(), FakeHub.from_fixtures(FIXTURES, page_size=3) as h:
        yield h


@pytest.fixture
def registry_path(tmp_path) -> Path:
    """A registry that knows llama only (as `registry seed` writes it: no seen_in)."""
    k = known_architectures()["llama"]
    reg = Registry(path=tmp_path / "model_registry.yaml")
    reg.upsert(ArchEntry(model_type="llama", config_class=k.config_class, base=k.base, head=k.head, task=k.task,
                         modality=k.modality, first_seen="2026-01-01T00:00:00+00:00"))
    reg.save()
    return reg.path


def client(hub: FakeHub, tmp_path: Path) -> HubClient:
    return HubClient(hub.url, policy=FAST, cache_dir=tmp_path / "cache")


def kinds(report) -> dict[str, str]:
    return {d.repo_id: d.kind for d in report.decisions}


def fake_result(spec: RunSpec, verdict: str = "full_graph", passed: bool = True) -> RunResult:
    return RunResult(spec=spec, verdict=verdict, model_type=spec.model_id,
                     versions=Versions(torch="2.13.0", transformers="5.24.0", python="3.11"),
                     numerics=Numerics(passed=passed, tol=1e-3, method="allclose"),
                     timing=Timing(repeats=20, eager_ms=2.0, compiled_ms=1.0, speedup=2.0))


# ---- discovery ----------------------------------------------------------------------------


def test_new_architectures_are_registered_once(hub, tmp_path, registry_path):
    report = watch_once(registry_path, client(hub, tmp_path), limit=50)
    assert kinds(report) == {
        "weird-org/bad-listing": "skipped",  # unparseable createdAt in the listing
        "acme-lab/Llama-3.2-1B-sft-v2": "registered",
        "acme-lab/Llama-3.2-1B-dpo": "registered",
        "qwen-fans/Qwen3-0.6B-math": "new",
        "pixelworks/flux-lora-watercolor": "ignored",
        "visionco/resnet50.a1_in1k-ft": "ignored",
        "helixai/Helix-MoE-16B-A2B": "needs_newer_transformers",
        "deepthink/DTCoder-8B": "remote_code",
        "legacy-org/Phi-3-mini-4k-ft": "new",  # ships auto_map, but transformers has phi3 natively
        "broken-org/truncated-config": "skipped",
        "meta-vision/dinov2-small-ft": "new",
        "gated-org/Mistral-7B-gated-ft": "skipped",  # gated, no HF_TOKEN
    }
    assert report.new_architectures == ["dinov2", "dtcoder", "helix_moe", "phi3", "qwen3"]
    assert report.saved and not report.truncated and report.stopped is None

    reg = Registry.load(registry_path)
    qwen3, k = reg.get("qwen3"), known_architectures()["qwen3"]
    assert (qwen3.origin, qwen3.config_class, qwen3.head, qwen3.task) == ("transformers", k.config_class, k.head, k.task)
    assert qwen3.first_seen == "2026-11-20T10:15:00+00:00" and qwen3.seen_in == ["qwen-fans/Qwen3-0.6B-math"]
    helix = reg.get("helix_moe")
    assert (helix.origin, helix.remote_code, helix.classes) == ("hub", False, ["HelixMoeForCausalLM"])
    assert reg.get("phi3").origin == "transformers" and not reg.get("phi3").remote_code
    assert reg.get("llama").seen_in == []  # an architecture already known is left untouched
    assert reg.meta == {"watch_cursor": "2026-11-20T15:30:00+00:00",
                        "watch_cursor_repos": ["gated-org/Mistral-7B-gated-ft"]}

    # Only configs missing from the listing were downloaded, and nothing but config.json.
    fetched = {r.path for r in hub.requests if "/resolve/" in r.path}
    assert {p.split("/resolve/")[0].lstrip("/") for p in fetched} == {
        "broken-org/truncated-config", "gated-org/Mistral-7B-gated-ft"}
    assert all(p.endswith("/config.json") for p in fetched)

    # A second poll: nothing new, the file is byte-identical and not rewritten.
    before, mtime = registry_path.read_bytes(), registry_path.stat().st_mtime_ns
    hub.clear_requests()
    again = watch_once(registry_path, client(hub, tmp_path), limit=50)
    assert not again.saved and again.new_architectures == [] and again.examined == 0
    assert registry_path.read_bytes() == before and registry_path.stat().st_mtime_ns == mtime
    assert len(hub.requests_to(r"^/api/models$")) == 1  # the scan stopped at the cursor on page 1


def test_new_repos_of_a_discovered_architecture_are_collected_up_to_a_cap(hub, tmp_path, registry_path):
    watch_once(registry_path, client(hub, tmp_path), limit=50)
    for i in range(7):
        hub.add_repo(FakeRepo(f"helix-fans/helix-ft-{i}", f"2026-11-21T0{i}:00:00.000Z", library_name="transformers",
                              files={"config.json": (FIXTURES / "repos/helixai/Helix-MoE-16B-A2B/config.json").read_bytes()}))
    report = watch_once(registry_path, client(hub, tmp_path), limit=50)
    assert [d.changed for d in report.decisions if d.repo_id.startswith("helix-fans/")] == [True] * 4 + [False] * 3
    helix = Registry.load(registry_path).get("helix_moe")
    assert helix.seen_in == sorted(["helixai/Helix-MoE-16B-A2B"] + [f"helix-fans/helix-ft-{i}" for i in range(4)])
    assert helix.first_seen == "2026-11-20T12:30:00+00:00"


def test_remote_code_is_recorded_and_never_executed(hub, tmp_path, registry_path):
    ran: list[RunSpec] = []

    def runner(spec: RunSpec) -> RunResult:
        ran.append(spec)
        return fake_result(spec)

    report = watch_once(registry_path, client(hub, tmp_path), limit=50, run=True, runner=runner)
    entry = Registry.load(registry_path).get("dtcoder")
    assert entry.origin == "remote_code" and entry.remote_code and entry.status == {}
    assert entry.seen_in == ["deepthink/DTCoder-8B"]
    assert sorted(s.model_id for s in ran) == ["dinov2", "phi3", "qwen3"]  # native classes only
    assert not any(s.allow_remote_code for s in ran)
    skipped = {r.model_type: r.skipped for r in report.runs if r.skipped}
    assert "allow-remote-code" in skipped["dtcoder"] and "newer transformers" in skipped["helix_moe"]
    assert not hub.requests_to(r"\.py$")  # the repo's code was never even downloaded

    # Allow-listed: run by repo id with allow_remote_code, and only then.
    ran.clear()
    watch_once(registry_path, client(hub, tmp_path), run=True, runner=runner,
               allow_remote_code=["deepthink/DTCoder-8B"])
    assert [(s.model_id, s.allow_remote_code) for s in ran] == [("deepthink/DTCoder-8B", True)]


def test_rate_limited_listing_and_config_then_success(hub, tmp_path, registry_path):
    hub.inject(Fault(r"^/api/models$", 429, {"Retry-After": "1"}))
    hub.inject(Fault(r"/broken-org/.*/resolve/", 429, {"Retry-After": "0"}, method="HEAD"))
    report = watch_once(registry_path, client(hub, tmp_path), limit=50)
    assert report.stopped is None and report.new_architectures == ["dinov2", "dtcoder", "helix_moe", "phi3", "qwen3"]
    assert [r.status for r in hub.requests_to(r"^/api/models$")][:2] == [429, 200]
    assert [r.status for r in hub.requests_to(r"/broken-org/.*/resolve/", "HEAD")] == [429, 200]


def test_malformed_entries_skip_only_themselves(hub, tmp_path, registry_path):
    report = watch_once(registry_path, client(hub, tmp_path), limit=50)
    reasons = {d.repo_id: d.reason for d in report.decisions if d.kind == "skipped"}
    assert "malformed listing entry" in reasons["weird-org/bad-listing"]
    assert "not valid JSON" in reasons["broken-org/truncated-config"]
    assert "HF_TOKEN" in reasons["gated-org/Mistral-7B-gated-ft"]
    # Their neighbours in time were handled normally.
    assert kinds(report)["helixai/Helix-MoE-16B-A2B"] == "needs_newer_transformers"
    assert kinds(report)["meta-vision/dinov2-small-ft"] == "new"


def test_a_transient_failure_stops_the_poll_and_the_next_resumes(hub, tmp_path, registry_path):
    # The gated repo's config keeps failing with 503: the poll stops before it, keeping the cursor there.
    hub.inject(Fault(r"/gated-org/.*/resolve/", 503, {"Retry-After": "0"}, times=1000))
    first = watch_once(registry_path, client(hub, tmp_path), limit=50)
    assert first.stopped and "gated-org/Mistral-7B-gated-ft" in first.stopped
    assert Registry.load(registry_path).meta["watch_cursor"] == "2026-11-20T15:00:00+00:00"  # dinov2, just before
    hub.clear_faults()
    second = watch_once(registry_path, client(hub, tmp_path), limit=50)
    assert second.stopped is None
    assert [d.repo_id for d in second.decisions if d.kind != "skipped" or d.created_at] == \
        ["gated-org/Mistral-7B-gated-ft"]
    assert Registry.load(registry_path).meta["watch_cursor"] == "2026-11-20T15:30:00+00:00"


# ---- the registry file ----------------------------------------------------------------------


def test_crash_during_registry_write_leaves_the_old_file(hub, tmp_path, registry_path, monkeypatch):
    old = registry_path.read_text()

    def crash(src, dst):
        raise OSError("simulated crash between writing the temp file and renaming it")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        watch_once(registry_path, client(hub, tmp_path), limit=50)
    monkeypatch.undo()
    assert registry_path.read_text() == old and Registry.load(registry_path).get("llama") is not None
    assert [p.name for p in registry_path.parent.iterdir() if p.suffix == ".tmp"] == []
    # The restart finds everything again, once.
    with hub_requests_allowed():
        report = watch_once(registry_path, client(hub, tmp_path), limit=50)
    assert report.new_architectures == ["dinov2", "dtcoder", "helix_moe", "phi3", "qwen3"]


_WRITER = """
import sys
from pathlib import Path
from enablebot.fileio import atomic_write_text
path, texts = Path(sys.argv[1]), [Path(p).read_text() for p in sys.argv[2:]]
print("ready", flush=True)
i = 0
while True:  # nothing but writes, so a kill lands in the write, fsync or rename
    atomic_write_text(path, texts[i % 2])
    i += 1
"""


def test_sigkill_mid_write_never_leaves_a_torn_registry(tmp_path):
    path = tmp_path / "reg" / "model_registry.yaml"
    big = Registry(path=path, meta={"round": 1},
                   entries={f"a{i:04d}": ArchEntry(model_type=f"a{i:04d}", notes="x" * 200) for i in range(2000)})
    small = Registry(path=path, meta={"round": 0}, entries={"llama": ArchEntry(model_type="llama")})
    small.save()
    texts = []
    for name, reg in (("small", small), ("big", big)):
        texts.append(tmp_path / f"{name}.yaml")
        texts[-1].write_text(reg.dumps())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rng = random.Random(4)
    torn_writes = 0
    for _ in range(30):  # until two kills landed inside a write (most do: the writer only writes)
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), *map(str, texts)],
                                stdout=subprocess.PIPE, env=env)
        assert proc.stdout.readline().strip() == b"ready"
        # Kill only once a write is seen in flight (its temp file exists): on a loaded machine the
        # writer may not run for a while after "ready", and most of each loop is redact() on the
        # text, before any file exists, so a kill at a random time often proves nothing.
        deadline = time.monotonic() + 10
        while not any(n.endswith(".tmp") for n in os.listdir(path.parent)) and time.monotonic() < deadline:
            pass
        time.sleep(rng.uniform(0.0, 0.002))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        reg = Registry.load(path)  # parses: the old or the new content, never a mix
        assert len(reg) in (1, 2000)  # the old or the new file whole (meta lives in the state file now)
        leftovers = list(path.parent.glob(".model_registry.yaml.*.tmp"))
        torn_writes += bool(leftovers)
        for p in leftovers:
            p.unlink()
        if torn_writes == 2:
            break
    assert torn_writes >= 1, "no kill landed inside a write: the test proved nothing"


# ---- cursor ---------------------------------------------------------------------------------


def test_cursor_admits_ties_not_yet_handled():
    c = Cursor("2026-11-20T13:00:00+00:00", ["deepthink/DTCoder-8B"])
    assert not c.admits("2026-11-20T13:00:00.000Z", "deepthink/DTCoder-8B")
    assert c.admits("2026-11-20T13:00:00.000Z", "legacy-org/Phi-3-mini-4k-ft")
    assert not c.admits("2026-11-20T12:59:59.999Z", "new/old")
    assert c.advanced("2026-11-20T13:00:00Z", "z/z").repos == ["deepthink/DTCoder-8B", "z/z"]
    assert c.advanced("2026-11-20T12:00:00Z", "old/one") == c
    assert c.advanced("2026-11-20T14:00:00Z", "n/n") == Cursor("2026-11-20T14:00:00+00:00", ["n/n"])


def test_restart_with_the_cursor_neither_misses_nor_duplicates(hub, tmp_path, registry_path):
    first = watch_once(registry_path, client(hub, tmp_path), limit=50)
    assert first.cursor_after.created_at == "2026-11-20T15:30:00+00:00"
    # Published after the poll: one at exactly the cursor's instant (a tie), one later.
    olmo = json.dumps({"architectures": ["Olmo3ForCausalLM"], "model_type": "olmo3"}).encode()
    smol = json.dumps({"architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3"}).encode()
    hub.add_repo(FakeRepo("allen-fans/olmo3-7b-ft", "2026-11-20T15:30:00.000Z", library_name="transformers",
                          files={"config.json": olmo}))
    hub.add_repo(FakeRepo("hf-fans/SmolLM3-3B-ft", "2026-11-21T09:00:00.000Z", library_name="transformers",
                          files={"config.json": smol}))
    hub.clear_requests()
    # A new process: registry read back from disk, a new client.
    second = watch_once(registry_path, client(hub, tmp_path), limit=50)
    handled = [d.repo_id for d in second.decisions if d.created_at]
    assert handled == ["allen-fans/olmo3-7b-ft", "hf-fans/SmolLM3-3B-ft"]
    assert second.new_architectures == ["olmo3", "smollm3"]
    assert not hub.requests_to(r"/resolve/")  # earlier repos' configs were not fetched again
    reg = Registry.load(registry_path)
    assert reg.meta["watch_cursor"] == "2026-11-21T09:00:00+00:00"
    assert reg.meta["watch_cursor_repos"] == ["hf-fans/SmolLM3-3B-ft"]
    assert reg.get("qwen3").seen_in == ["qwen-fans/Qwen3-0.6B-math"]  # not repeated
    before = registry_path.read_bytes()
    third = watch_once(registry_path, client(hub, tmp_path), limit=50)
    assert not third.saved and registry_path.read_bytes() == before


def test_limit_bounds_the_scan_and_reports_truncation(hub, tmp_path, registry_path):
    watch_once(registry_path, client(hub, tmp_path), limit=50)
    for i in range(5):
        hub.add_repo(FakeRepo(f"late/m{i}", f"2026-11-22T0{i}:00:00.000Z", library_name="transformers",
                              files={"config.json": LLAMA_CFG}))
    report = watch_once(registry_path, client(hub, tmp_path), limit=3)
    assert report.truncated and report.listed == 3
    assert report.cursor_after.created_at == "2026-11-22T04:00:00+00:00"


def test_since_rescans_without_registering_twice(hub, tmp_path, registry_path):
    watch_once(registry_path, client(hub, tmp_path), limit=50)
    before = registry_path.read_bytes()
    since = datetime(2026, 11, 1, tzinfo=timezone.utc)
    report = watch_once(registry_path, client(hub, tmp_path), limit=50, since=since)
    assert report.examined == 11 and report.new_architectures == [] and not report.saved
    assert registry_path.read_bytes() == before


# ---- runs and time to support ---------------------------------------------------------------


def test_run_records_status_and_resumes_after_an_interruption(hub, tmp_path, registry_path):
    calls: list[str] = []
    died: list[str] = []

    def flaky(spec: RunSpec) -> RunResult:
        calls.append(spec.model_id)
        if spec.model_id == "phi3" and not died:
            died.append(spec.model_id)
            raise RuntimeError("runner died")  # e.g. the machine went away mid-run
        return fake_result(spec, "graph_break" if spec.model_id == "dinov2" else "full_graph")

    report = watch_once(registry_path, client(hub, tmp_path), limit=50, run=True, runner=flaky, device="cpu")
    assert calls == ["qwen3", "phi3", "dinov2"]  # oldest first
    reg = Registry.load(registry_path)
    q = reg.get("qwen3").status["cpu/eval"]
    assert q["verdict"] == "full_graph" and q["numerics_passed"] and q["speedup"] == 2.0
    assert q["supported_at"] == q["checked_at"] and q["torch"] == "2.13.0"
    assert reg.get("dinov2").status["cpu/eval"]["supported_at"] is None
    assert reg.get("phi3").status == {}
    assert {r.model_type: r.verdict for r in report.runs if r.verdict} == {"qwen3": "full_graph", "dinov2": "graph_break"}
    # The next --run picks up only what has no status yet.
    calls.clear()
    watch_once(registry_path, client(hub, tmp_path), run=True, runner=flaky)
    assert calls == ["phi3"]
    left = pending_runs(Registry.load(registry_path), device="cpu", mode="eval")
    assert [(e.model_type, spec) for e, spec, _ in left] == [("helix_moe", None), ("dtcoder", None)]
    # Another device is a separate status: everything runnable is pending there.
    other = pending_runs(Registry.load(registry_path), device="cuda", mode="eval")
    assert [s.model_id for _, s, _ in other if s] == ["qwen3", "phi3", "dinov2"]


def test_supported_at_is_set_once_and_never_moves():
    e = ArchEntry(model_type="qwen3", first_seen="2026-11-20T10:00:00+00:00")
    spec = RunSpec(model_id="qwen3", device="cuda", mode="train")
    t = datetime(2026, 11, 21, tzinfo=timezone.utc)
    assert record_status(e, fake_result(spec, "graph_break"), now=t)["supported_at"] is None
    assert record_status(e, fake_result(spec, "full_graph", passed=False), now=t)["supported_at"] is None
    first = record_status(e, fake_result(spec), now=t + timedelta(days=1))["supported_at"]
    assert first == "2026-11-22T00:00:00+00:00"
    later = record_status(e, fake_result(spec, "compile_error"), now=t + timedelta(days=5))
    assert later["verdict"] == "compile_error" and later["supported_at"] == first
    assert record_status(e, fake_result(spec), now=t + timedelta(days=9))["supported_at"] == first


def test_time_to_support_per_architecture_and_median():
    reg = Registry(path=Path("unused.yaml"))
    day = timedelta(days=1)
    t0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    for mt, days in (("a", 1), ("b", 3), ("c", 10), ("d", None)):
        e = ArchEntry(model_type=mt, first_seen=t0.isoformat(), seen_in=[f"org/{mt}"])
        spec = RunSpec(model_id=mt)
        record_status(e, fake_result(spec, "graph_break"), now=t0 + day / 2)
        if days is not None:
            record_status(e, fake_result(spec), now=t0 + days * day)
        reg.upsert(e)
    reg.upsert(ArchEntry(model_type="pending", first_seen=t0.isoformat(), seen_in=["org/p"]))
    reg.upsert(ArchEntry(model_type="seeded", first_seen=t0.isoformat()))  # never run, not discovered: no row
    rep = time_to_support(reg, now=t0 + 20 * day)
    rows = {(r.model_type, r.key): r for r in rep.rows}
    assert set(rows) == {("a", "cpu/eval"), ("b", "cpu/eval"), ("c", "cpu/eval"), ("d", "cpu/eval"), ("pending", None)}
    assert rows[("b", "cpu/eval")].seconds == 3 * 86400
    assert rows[("d", "cpu/eval")].seconds is None and rows[("d", "cpu/eval")].open_seconds == 20 * 86400
    [summary] = rep.summaries
    assert (summary.key, summary.architectures, summary.supported, summary.median_seconds) == ("cpu/eval", 4, 3, 3 * 86400)
    assert human_duration(3 * 86400 + 4 * 3600) == "3d 4h" and human_duration(None) == "-"


# ---- the CLI --------------------------------------------------------------------------------


def cli() -> typer.Typer:
    app = typer.Typer()
    watch_cmd.register(app)
    report_cmd.register(app)
    return app


def test_cli_watch_then_report(hub, tmp_path, registry_path):
    runner = CliRunner()
    out_json = tmp_path / "watch.json"
    res = runner.invoke(cli(), ["watch", "--registry", str(registry_path), "--limit", "50", "--json", str(out_json)],
                        env={"HF_ENDPOINT": hub.url, "COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "helix_moe" in res.output and "new architectures: dinov2, dtcoder, helix_moe, phi3, qwen3" in res.output
    data = json.loads(out_json.read_text())
    assert data["cursor_after"]["created_at"] == "2026-11-20T15:30:00+00:00" and data["examined"] == 11

    reg = Registry.load(registry_path)
    record_status(reg.get("qwen3"), fake_result(RunSpec(model_id="qwen3")),
                  now=datetime(2026, 11, 22, 10, 15, tzinfo=timezone.utc))
    reg.save()
    rep_json = tmp_path / "support.json"
    res = runner.invoke(cli(), ["report", "support", "--registry", str(registry_path), "--discovered-only",
                                "--json", str(rep_json)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "qwen3" in res.output and "2d 0h" in res.output and "1/1" in res.output
    summary = json.loads(rep_json.read_text())["summaries"]
    assert summary == [{"key": "cpu/eval", "architectures": 1, "supported": 1, "median_seconds": 172800.0}]


def test_cli_errors_exit_2_with_what_to_do(tmp_path, registry_path):
    runner = CliRunner()
    with hub_requests_allowed():
        res = runner.invoke(cli(), ["watch", "--registry", str(registry_path), "--endpoint", "http://127.0.0.1:9",
                                    "--retries", "0"], env={"COLUMNS": "200"})
    assert res.exit_code == 2 and "HF_ENDPOINT" in res.output
    res = runner.invoke(cli(), ["watch", "--registry", str(registry_path), "--since", "last week"])
    assert res.exit_code == 2 and "--since" in res.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("architectures: [unclosed\n")
    res = runner.invoke(cli(), ["report", "support", "--registry", str(bad)])
    assert res.exit_code == 2 and "not valid YAML" in res.output


def test_watch_run_through_the_real_child_runner(hub, tmp_path, registry_path):
    """--run's default runner: each architecture in its own process (enablebot.execute.isolation).
    The eager backend keeps this quick; compiling with Inductor is what `run`'s own tests cover."""
    keep = {"acme-lab/Llama-3.2-1B-sft-v2", "qwen-fans/Qwen3-0.6B-math", "deepthink/DTCoder-8B"}
    with FakeHub([r for r in hub.repos if r.repo_id in keep]) as small_hub:
        report = watch_once(registry_path, client(small_hub, tmp_path), run=True, device="cpu",
                            spec_overrides={"backend": "eager", "repeats": 2, "warmup": 1, "timeout_s": 300})
    [run] = [r for r in report.runs if r.verdict]
    assert (run.model_type, run.model_id, run.key) == ("qwen3", "qwen3", "cpu/eval")
    assert run.verdict == "full_graph" and run.numerics_passed
    status = Registry.load(registry_path).get("qwen3").status["cpu/eval"]
    assert status["supported_at"] == status["checked_at"] and status["transformers"] == transformers.__version__
    assert Registry.load(registry_path).get("dtcoder").status == {}


def test_registry_keeps_knowledge_apart_from_state(tmp_path):
    """The reviewed registry is in the writer's form (an unchanged save is byte-identical), and
    what the bot observes (first_seen, status, the cursor) goes only to the state file."""
    from enablebot.model.registry import state_path

    committed = Registry.load(ROOT / "model_registry.yaml")
    assert committed.dumps() == (ROOT / "model_registry.yaml").read_text(encoding="utf-8")
    assert committed.dumps_state() == state_path(ROOT / "model_registry.yaml").read_text(encoding="utf-8")
    path = tmp_path / "model_registry.yaml"
    committed.save(path)
    before = path.read_bytes()
    reg = Registry.load(path)
    reg.meta["cursor"] = "2026-12-03T00:00:00Z"
    reg.get("llama").status["cpu/eval"] = {"verdict": "full_graph"}
    reg.get("llama").seen_in.append("acme/llama-ft")
    assert reg.save(path)
    assert path.read_bytes() == before  # the file maintainers review did not move
    again = Registry.load(path)
    assert again.meta["cursor"] == "2026-12-03T00:00:00Z" and again.get("llama").status["cpu/eval"]["verdict"] == "full_graph"
    assert "acme/llama-ft" in again.get("llama").seen_in
    assert "status" not in path.read_text() and "first_seen" not in path.read_text()
    assert not reg.save(path)  # nothing changed: nothing written


def test_time_to_support_and_to_fix_for_a_releases_new_types(tmp_path):
    """Types registered on day 0 of a release: the clock starts at the release date (or when the bot saw
    them), stops at the first supported run, and separately at the first verified fix bundle."""
    from enablebot.fix.bundle import ClusterRef, FixBundle
    from enablebot.watch.support import first_fixes

    reg = Registry(path=Path("unused.yaml"))
    t0 = datetime(2026, 11, 30, tzinfo=timezone.utc)
    hour = timedelta(hours=1)
    for mt, src in (("new_a", "release"), ("new_b", "bot")):
        reg.upsert(ArchEntry(model_type=mt, first_seen=t0.isoformat(), first_seen_source=src,
                             new_in="transformers 5.25.0"))
    reg.upsert(ArchEntry(model_type="old", first_seen=t0.isoformat()))
    record_status(reg.get("new_a"), fake_result(RunSpec(model_id="new_a")), now=t0 + 5 * hour)
    record_status(reg.get("new_b"), fake_result(RunSpec(model_id="new_b"), "graph_break"), now=t0 + hour)
    for name, verified, at in (("b-1", False, t0 + 2 * hour), ("b-2", True, t0 + 30 * hour),
                               ("b-3", True, t0 + 50 * hour)):
        FixBundle(fix_key=name, model_id="new_b", cluster=ClusterRef(gb_type="x"), target="config", verified=verified,
                  created_at=(at).isoformat()).save(tmp_path / name)
    fixes = first_fixes([tmp_path])
    assert fixes == {"new_b": (t0 + 30 * hour).isoformat()}  # the first *verified* bundle
    rep = time_to_support(reg, now=t0 + 100 * hour, fixes=fixes, new_in="transformers 5.25.0")
    rows = {r.model_type: r for r in rep.rows}
    assert set(rows) == {"new_a", "new_b"}
    assert (rows["new_a"].seconds, rows["new_a"].first_seen_source) == (5 * 3600, "release")
    assert rows["new_b"].seconds is None and rows["new_b"].open_seconds == 100 * 3600
    assert (rows["new_b"].fix_seconds, rows["new_b"].first_seen_source) == (30 * 3600, "bot")
