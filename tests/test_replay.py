"""`enablebot replay`: releases read from their wheels, one environment per release, the day-0 path,
types followed across releases (reused while their code is unchanged), the Inductor check, and the
time-to-support tables. The end-to-end test installs two real transformers releases (--no-deps,
wheels from the package registry) and runs one real type through both."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from enablebot.replay.releases import config_mapping_keys, select_versions, wheel_date, wheel_model_types
from enablebot.replay.timeline import BotFix, TypeRelease, release_rows, totals, type_rows

ROOT = Path(__file__).resolve().parents[1]


def test_config_mapping_keys_reads_both_layouts_of_configuration_auto():
    old = 'CONFIG_MAPPING_NAMES = OrderedDict(\n    [\n        ("llama", "LlamaConfig"),\n        ("gpt2", "GPT2Config"),\n    ]\n)\n'
    # From 5.6 the mapping is generated in auto_mappings.py and extended where it is imported.
    new = ('from .auto_mappings import CONFIG_MAPPING_NAMES\n'
           'CONFIG_MAPPING_NAMES.update({"mlcd": "MLCDVisionConfig"})\n'
           'CONFIG_MAPPING_NAMES = OrderedDict(**{"gpt-sw3": "GPT2Config"}, **CONFIG_MAPPING_NAMES)\n')
    assert config_mapping_keys(old) == {"llama", "gpt2"}
    assert config_mapping_keys(new) == {"mlcd", "gpt-sw3"}
    assert config_mapping_keys("X = 1\n") == set()


def test_select_versions_keeps_final_releases_in_release_order():
    avail = ["5.10.1", "5.9.0", "5.10.0rc1", "5.2.0", "5.10.4", "4.57.6", "5.11.0"]
    assert select_versions(avail, "5.0.0", "5.11.0") == ["5.2.0", "5.9.0", "5.10.1", "5.10.4", "5.11.0"]
    assert select_versions(avail, "5.0.0", "5.11.0", minor_only=True) == ["5.2.0", "5.9.0", "5.10.4", "5.11.0"]


def _st(items, full, built=None, numerics=None, seconds=10.0):
    return TypeRelease(items=items, built_and_ran=items if built is None else built, full_graph_items=full,
                       numerics=numerics, inductor_verdict="full_graph" if numerics else None, seconds=seconds)


def test_time_to_support_counts_releases_and_days_and_compares_the_bot():
    rel = [("5.1.0", "2026-02-01T00:00:00+00:00"), ("5.2.0", "2026-02-11T00:00:00+00:00"),
           ("5.3.0", "2026-03-03T00:00:00+00:00")]
    new_in = {"day0ok": "5.1.0", "later": "5.1.0", "never": "5.1.0", "unbuilt": "5.2.0", "numfail": "5.2.0"}
    standings = {
        "5.1.0": {"day0ok": _st(2, 2, numerics="pass"), "later": _st(2, 1), "never": _st(2, 0)},
        "5.2.0": {"later": _st(2, 1), "never": _st(2, 1), "unbuilt": _st(2, 0, built=0),
                  "numfail": _st(2, 2, numerics="fail")},
        "5.3.0": {"later": _st(2, 2, numerics="pass"), "never": _st(2, 1), "unbuilt": _st(2, 0, built=0),
                  "numfail": _st(2, 2, numerics="fail")},
    }
    bot = {"later": BotFix(status="fixed", seconds=50.0, clusters=1, fixed_clusters=1, sources=["rewrite:x"]),
           "never": BotFix(status="not_fixed", seconds=90.0, clusters=2)}
    rows = {r.model_type: r for r in type_rows(rel, new_in, standings, bot)}
    assert rows["day0ok"].outcome == "supported at day 0" and rows["day0ok"].human_releases == 0
    assert rows["later"].outcome == "fixed upstream later"
    assert (rows["later"].human_supported_in, rows["later"].human_releases, rows["later"].human_days) == ("5.3.0", 2, 30.0)
    assert rows["later"].bot_seconds == 60.0  # its day-0 Dynamo items (10 s) + the fix (50 s)
    assert rows["never"].outcome == "never fixed" and rows["never"].last_seen_in == "5.3.0"
    assert rows["unbuilt"].outcome == "not built at day 0"
    assert rows["numfail"].day0_full_graph and not rows["numfail"].day0_supported
    t = totals(list(rows.values()), 3)
    assert (t.new_types, t.built, t.supported_day0, t.fixed_later, t.bot_fixed, t.bot_fixed_of_fixed_later) == (5, 4, 1, 1, 1, 1)
    assert t.median_human_releases == 2.0 and t.median_human_days == 30.0
    per = {r.version: r for r in release_rows(rel, {}, list(rows.values()))}
    assert (per["5.1.0"].new_types, per["5.1.0"].fixed_later, per["5.1.0"].bot_fixed) == (3, 1, 1)
    assert per["5.3.0"].new_types == 0


def _replay(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "enablebot.cli", "replay", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=1200)


@pytest.fixture(scope="module")
def replay_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("replay-cache")


def test_a_release_that_cannot_be_fetched_is_named_and_the_replay_goes_on(tmp_path, replay_cache):
    out = tmp_path / "r"
    p = _replay("--release", "5.20.99", "--previous", "5.20.0", "--out", str(out), "--cache", str(replay_cache),
                "--no-inductor", "--no-fix", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    rep = json.loads((out / "support.json").read_text())
    assert "5.20.99" in rep["not_replayed"] and "pip download failed" in rep["not_replayed"]["5.20.99"]
    assert "Not replayed" in (out / "support.md").read_text()


def test_replay_of_two_real_releases_follows_a_type_and_resumes(tmp_path, replay_cache):
    """transformers 5.20.1 added `beam`; 5.20.2 is the next release. Real wheels, real installs,
    real Dynamo and Inductor runs of the tiny random-init model."""
    out = tmp_path / "replay"
    common = ["--release", "5.20.1", "--release", "5.20.2", "--previous", "5.20.0", "--out", str(out),
              "--cache", str(replay_cache), "--type", "beam", "--jobs", "2", "--timeout", "240", "--no-fix"]
    # Without the Inductor check nothing can be supported: beam is followed into 5.20.2.
    p = _replay(*common, "--no-inductor", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    state = json.loads((out / "replay.json").read_text())
    r1, r2 = state["releases"]["5.20.1"], state["releases"]["5.20.2"]
    assert r1["release"]["date"].startswith("2026-10-16") and "wheel file timestamps" in r1["release"]["date_source"]
    assert r1["env"]["ok"] and r1["env"]["imported_version"] == "5.20.1"
    assert r1["new_types"] == ["beam"] and r2["new_types"] == []
    assert "inductor" not in r1["steps"] and "fix" not in r1["steps"]  # left out now, done by a later run
    day0 = [json.loads(ln) for ln in (out / "releases/5.20.1/dynamo/results.jsonl").read_text().splitlines()]
    assert day0 and {d["spec"]["model_id"] for d in day0} == {"beam"}
    assert {d["versions"]["transformers"] for d in day0} == {"5.20.1"}
    assert all(d["versions"]["torch"].startswith("2.13") for d in day0)
    reg = (out / "registry.yaml").read_text()
    assert "beam:" in reg and "new_in: transformers 5.20.1" in reg
    # Followed in 5.20.2: every item either reused (its model code unchanged) or re-run.
    follow = r2["steps"]["follow"]
    assert follow["ran"] + follow["reused"] == len(day0), follow
    inc = json.loads((out / "releases/5.20.2/dynamo/incremental.json").read_text())
    # A reuse says what stayed unchanged ("model code unchanged"), a re-run what changed.
    assert inc["decisions"] and all((d["action"] == "reuse") == ("unchanged" in d["reason"]) for d in inc["decisions"])
    # Resume with the Inductor check on, on a machine where 5.20.2's environment is gone (a fresh
    # clone of the committed results): it is installed again, never silently replaced by the base
    # venv's transformers. Only the missing steps run.
    import shutil

    shutil.rmtree(replay_cache / "envs" / "5.20.2")
    p = _replay(*common, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "5.20.2: environment installed again" in p.stderr
    assert (replay_cache / "envs" / "5.20.2" / "transformers" / "__init__.py").exists()
    state = json.loads((out / "replay.json").read_text())
    assert state["releases"]["5.20.1"]["steps"]["day0"] == r1["steps"]["day0"]  # not redone
    ind = [json.loads(ln) for ln in (out / "releases/5.20.1/inductor/results.jsonl").read_text().splitlines()]
    assert [(d["spec"]["model_id"], d["spec"]["mode"]) for d in ind] == [("beam", "eval")]
    rep = json.loads((out / "support.json").read_text())
    (row,) = rep["types"]
    assert row["model_type"] == "beam" and row["new_in"] == "5.20.1" and row["day0_built"]
    supported = ind[0]["verdict"] == "full_graph" and ind[0]["numerics"]["status"] == "pass" and row["day0_full_graph"]
    assert row["day0_supported"] == supported
    assert (row["human_supported_in"] == "5.20.1") == supported
    assert rep["totals"]["releases"] == 2 and rep["cost"]["items_run"] >= len(day0)
    html = (out / "support.html").read_text()
    assert "<svg" in html and "beam" in html
    # The bot's pass beside it: beam does not break, so nothing to fix; both releases are marked done.
    p = _replay("--fix-only", "--out", str(out), "--cache", str(replay_cache), cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    bot = json.loads((out / "bot.json").read_text())
    assert bot == {"types": {}, "releases_done": ["5.20.1", "5.20.2"]}
    assert json.loads((out / "support.json").read_text())["bot_pending"] == []
    # A harness fix since: `--refresh beam` drops beam's results from both releases and redoes its
    # day 0, follow and Inductor steps with today's harness; resumed with the same flag, nothing is
    # dropped again (the refresh is recorded with the harness commit that made it).
    before = max(d["started_at"] for d in day0)
    p = _replay(*common, "--refresh", "beam", cwd=tmp_path)
    assert p.returncode == 0 and "refresh: 1 types dropped from 2 releases" in p.stderr, p.stderr[-3000:]
    state = json.loads((out / "replay.json").read_text())
    assert [r["types"] for r in state["refreshes"]] == [["beam"]]
    assert {"day0", "follow", "inductor"} <= set(state["releases"]["5.20.1"]["steps"])
    redone = [json.loads(ln) for ln in (out / "releases/5.20.1/dynamo/results.jsonl").read_text().splitlines()]
    assert len(redone) == len(day0) and min(d["started_at"] for d in redone) >= before
    p = _replay(*common, "--refresh", "beam", cwd=tmp_path)
    assert p.returncode == 0 and "refresh: no type to redo" in p.stderr, p.stderr[-3000:]
    assert "Redone with harness" in (out / "support.md").read_text()
    # The same tables through `report support --replay`.
    p = subprocess.run([sys.executable, "-m", "enablebot.cli", "report", "support", "--replay", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "| 5.20.1 |" in p.stdout and "| beam |" in p.stdout


def test_wheel_dates_and_types_come_from_the_wheel(replay_cache):
    from enablebot.replay.releases import fetch_wheel

    w = fetch_wheel("5.20.1", replay_cache / "wheels")
    assert wheel_date(w).startswith("2026-10-16")
    types = wheel_model_types(w)
    assert "beam" in types and "llama" in types and len(types) > 700


def test_the_site_has_a_time_to_support_page_with_the_replay_timeline(tmp_path):
    from enablebot.replay import report as rep_mod
    from enablebot.site.build import build
    from enablebot.site.write import write_site

    rel = [("5.1.0", "2026-02-01T00:00:00+00:00"), ("5.2.0", "2026-02-11T00:00:00+00:00")]
    rows = type_rows(rel, {"alpha": "5.1.0", "beta": "5.1.0"},
                     {"5.1.0": {"alpha": _st(2, 2, numerics="pass"), "beta": _st(2, 0)},
                      "5.2.0": {"beta": _st(2, 2, numerics="pass")}}, {})
    rep = rep_mod.ReplayReport(torch="2.13.0+cpu", date_source="wheel file timestamps", types=rows,
                               releases=release_rows(rel, {"5.1.0": "pinned", "5.2.0": "pinned"}, rows),
                               totals=totals(rows, 2))
    rep_mod.write(tmp_path / "replay", rep)
    assert rep_mod.load(tmp_path / "replay").totals.fixed_later == 1
    sweeps = [ROOT / "tests" / "fixtures" / "baselines" / "cpu-torch-2.13.0-minimal-harness.json"]
    data = build(sweeps, replay=tmp_path / "replay")
    write_site(data, tmp_path / "site")
    page = (tmp_path / "site" / "support.html").read_text()
    assert "<svg" in page and "beta" in page and "fixed upstream later: 1" in page
    assert 'href="support.html"' in (tmp_path / "site" / "index.html").read_text()
    # Without a replay the page still exists (the navigation links it) and says how to get it.
    write_site(build(sweeps), tmp_path / "site2")
    assert "enablebot replay" in (tmp_path / "site2" / "support.html").read_text()


def test_results_from_a_later_transformers_are_purged_and_their_steps_redone(tmp_path):
    """A release folder may hold results recorded under the base venv's transformers (a run whose
    release environment was gone). They are dropped, and the follow/Inductor steps from that release
    on are un-recorded; results from an earlier release (a legitimate reuse) stay."""
    from enablebot.replay.run import ReleaseState, ReplayState, StepRecord, purge_wrong_release, release_dir

    def rec(mt, tf):
        return json.dumps({"spec": {"model_id": mt}, "verdict": "full_graph", "versions": {"transformers": tf}})

    state = ReplayState(previous="5.0.0")
    for v in ("5.1.0", "5.2.0", "5.3.0"):
        state.releases[v] = ReleaseState(version=v, steps={s: StepRecord() for s in ("release", "env", "day0", "follow", "inductor")})
    for v, lines in {"5.1.0": [rec("a", "5.1.0")], "5.2.0": [rec("a", "5.1.0"), rec("b", "5.25.0"), rec("c", "5.2.0")],
                     "5.3.0": [rec("a", "5.1.0")]}.items():
        (release_dir(tmp_path, v) / "dynamo").mkdir(parents=True)
        (release_dir(tmp_path, v) / "dynamo" / "results.jsonl").write_text("\n".join(lines) + "\n")
    said = []
    assert purge_wrong_release(tmp_path, state, said.append) == ["5.2.0"]
    kept = [json.loads(ln)["spec"]["model_id"] for ln in (release_dir(tmp_path, "5.2.0") / "dynamo/results.jsonl").read_text().splitlines()]
    assert kept == ["a", "c"]
    assert set(state.releases["5.1.0"].steps) == {"release", "env", "day0", "follow", "inductor"}
    assert set(state.releases["5.2.0"].steps) == {"release", "env"}  # day0 too: the purged release redoes it
    assert set(state.releases["5.3.0"].steps) == {"release", "env", "day0"}
    assert json.loads((tmp_path / "replay.json").read_text())["releases"]["5.3.0"]["steps"].keys() == {"release", "env", "day0"}
    assert any("dropped 1 results" in s for s in said)
    assert purge_wrong_release(tmp_path, state, said.append) == []  # nothing left to drop


def test_a_refresh_drops_a_types_results_everywhere_and_redoes_day0_and_the_later_follow_steps(tmp_path, monkeypatch):
    """After a harness fix, `replay --refresh T` / `--refresh-unbuilt` redoes T with today's harness:
    its results go from every release from the one that brought it, that release's day 0 and every
    later follow/Inductor step are un-recorded; other types' results stay (skipped, not re-run)."""
    from enablebot.replay.run import (ReleaseState, ReplayState, StepRecord, UnknownRefresh, refresh_types,
                                      release_dir, unbuilt_at_day0)

    def rec(mt, verdict):
        return json.dumps({"spec": {"model_id": mt}, "verdict": verdict})

    all_steps = ("release", "env", "day0", "follow", "inductor")
    state = ReplayState(previous="5.0.0")
    for v, new in (("5.1.0", ["a"]), ("5.2.0", ["b", "c"]), ("5.3.0", [])):
        state.releases[v] = ReleaseState(version=v, new_types=new, steps={s: StepRecord() for s in all_steps})
    for v, lines in {"5.1.0": [rec("a", "full_graph")], "5.2.0": [rec("a", "full_graph"), rec("b", "eager_error"), rec("c", "graph_break")],
                     "5.3.0": [rec("a", "full_graph"), rec("b", "eager_error"), rec("c", "graph_break")]}.items():
        (release_dir(tmp_path, v) / "dynamo").mkdir(parents=True)
        (release_dir(tmp_path, v) / "dynamo" / "results.jsonl").write_text("\n".join(lines) + "\n")
    # Standings from these abridged result files (the real reader needs whole results): only b
    # did not build and run eager at day 0.
    import enablebot.replay.run as run_mod

    def standings_of(d):
        return {mt: TypeRelease(items=1, built_and_ran=int(v != "eager_error"), full_graph_items=int(v == "full_graph"))
                for mt, v in ((json.loads(ln)["spec"]["model_id"], json.loads(ln)["verdict"])
                              for ln in (d / "dynamo/results.jsonl").read_text().splitlines())}
    monkeypatch.setattr(run_mod, "_read_standings", standings_of)
    monkeypatch.setattr(run_mod, "_STANDINGS", {})
    assert unbuilt_at_day0(tmp_path, state) == ["b"]
    said = []
    assert refresh_types(tmp_path, state, ["b"], "--refresh-unbuilt", said.append) == ["5.2.0", "5.3.0"]
    for v in ("5.2.0", "5.3.0"):
        kept = [json.loads(ln)["spec"]["model_id"] for ln in (release_dir(tmp_path, v) / "dynamo/results.jsonl").read_text().splitlines()]
        assert kept == ["a", "c"]
    assert set(state.releases["5.1.0"].steps) == set(all_steps)  # before b: untouched
    assert set(state.releases["5.2.0"].steps) == {"release", "env"}  # b's release: day 0 redone
    assert set(state.releases["5.3.0"].steps) == {"release", "env", "day0"}  # later: follow + Inductor redone
    saved = json.loads((tmp_path / "replay.json").read_text())
    (r,) = saved["refreshes"]
    assert r["types"] == ["b"] and r["reason"] == "--refresh-unbuilt" and r["harness"]
    assert "refresh: 1 types" in said[-1]
    with pytest.raises(UnknownRefresh, match="zzz"):
        refresh_types(tmp_path, state, ["zzz"], "--refresh", said.append)


def test_refreshing_a_type_no_release_brought_is_refused_with_its_name(tmp_path):
    p = _replay("--release", "5.20.99", "--previous", "5.20.0", "--out", str(tmp_path / "r"), "--no-fix",
                "--refresh", "no_such_type", cwd=tmp_path)
    assert p.returncode == 2 and "--refresh" in p.stderr and "no_such_type" in p.stderr, p.stderr[-2000:]


def test_a_sweep_refuses_to_run_on_another_transformers_than_the_replay_expects(tmp_path):
    import os

    env = {**os.environ, "ENABLEBOT_EXPECT_TRANSFORMERS": "5.2.0"}
    p = subprocess.run([sys.executable, "-m", "enablebot.cli", "sweep", "-m", "llama", "--out", str(tmp_path / "s")],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert p.returncode == 2 and "ENABLEBOT_EXPECT_TRANSFORMERS=5.2.0" in p.stderr
    assert not (tmp_path / "s" / "results.jsonl").exists()
    p = subprocess.run([sys.executable, "-m", "enablebot.cli", "fix", "llama", "--out", str(tmp_path / "f")],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert p.returncode == 2 and "ENABLEBOT_EXPECT_TRANSFORMERS=5.2.0" in p.stderr
    assert not (tmp_path / "f").exists()
    # The replay's child-process runner turns that refusal into a stop, never a recorded step.
    from enablebot.replay.run import ReplayAborted, _cli

    with pytest.raises(ReplayAborted, match="ENABLEBOT_EXPECT_TRANSFORMERS=5.2.0"):
        _cli(["sweep", "-m", "llama", "--out", str(tmp_path / "s2")], env, tmp_path / "s2.log")


def test_the_bot_fixes_the_items_that_broke_and_counts_a_type_only_when_every_one_is_one_graph(tmp_path, monkeypatch):
    """Day-0 items that are not one graph are the bot's work, eval/call first (a break only training
    hits, like LayerDrop's, is reached too). After the first item's fix, each other item is judged
    with the verified bundles together; where they do not make it one graph it is fixed in its own
    right, and the type counts only when every item passed."""
    from enablebot.replay import run as rr

    def rec(mode, scenario, verdict, task="base"):
        return json.dumps({"spec": {"model_id": "t", "mode": mode, "scenario": scenario, "task": task}, "verdict": verdict})

    d = rr.release_dir(tmp_path, "5.1.0") / "dynamo"
    d.mkdir(parents=True)
    (d / "results.jsonl").write_text("\n".join([
        rec("train", "call", "graph_break"), rec("eval", "decode", "graph_break", "head"), rec("eval", "call", "full_graph"),
        rec("eval", "call", "compile_error", "head"), json.dumps({"spec": {"model_id": "other", "mode": "eval"}, "verdict": "graph_break"}),
    ]) + "\n")
    items = rr.breaking_items(tmp_path, "5.1.0", "t")
    assert items == [{"mode": "eval", "scenario": "call", "task": "head"}, {"mode": "eval", "scenario": "decode", "task": "head"},
                     {"mode": "train", "scenario": "call", "task": "base"}]

    calls: list[list[str]] = []
    together = {"eval-decode": [True], "train-call": [False, True]}  # train: fixed only with its own bundle

    def fake_cli(args, env, log, timeout=None):  # the child processes' answers (their own tests run them for real)
        calls.append(args)
        mode, scenario = args[args.index("--mode") + 1], args[args.index("--scenario") + 1]
        js = Path(args[args.index("--json") + 1])
        if args[0] == "fix":
            js.write_text(json.dumps([{"cluster": f"GB0170@{mode}", "status": "fixed", "source": "rewrite:x",
                                       "bundle_dir": f"b-{mode}-{scenario}"}]))
        else:
            ok = together[f"{mode}-{scenario}"].pop(0)
            js.write_text(json.dumps({"passed": ok, "checks": [{"name": "full_graph", "passed": ok, "detail": "d"}]}))
        return 0, ""

    monkeypatch.setattr(rr, "_cli", fake_cli)
    opts = rr.ReplayOptions(out=tmp_path, versions=[], previous="", wheels=tmp_path, envs=tmp_path)
    fix = rr.run_fix(opts, {}, tmp_path / "r.yaml", tmp_path / "fix", "t", 600, items)
    assert fix.status == "fixed", fix
    assert [c[0] for c in calls] == ["fix", "verify", "verify", "fix", "verify"]
    assert [(i["mode"], i["scenario"], i["by"]) for i in fix.items] == [
        ("eval", "call", "fix"), ("eval", "decode", "together"), ("train", "call", "fix")]
    assert calls[-1][1:3] == ["b-eval-call", "b-train-call"]  # the last judgement applies both bundles
    assert "--task" in calls[0] and calls[0][calls[0].index("--task") + 1] == "head"

    # an item the bundles leave broken, whose own fix fails: the type is not fixed
    calls.clear()
    together = {"eval-decode": [False]}

    def failing_fix(args, env, log, timeout=None):
        if args[0] == "fix" and "decode" in args:
            Path(args[args.index("--json") + 1]).write_text(json.dumps([{"cluster": "c", "status": "not_fixed"}]))
            return 0, ""
        return fake_cli(args, env, log, timeout)

    monkeypatch.setattr(rr, "_cli", failing_fix)
    fix = rr.run_fix(opts, {}, tmp_path / "r.yaml", tmp_path / "fix", "t", 600, items)
    assert fix.status == "not_fixed" and fix.items[-1]["status"] == "not_fixed"
    assert "eval-decode" in fix.note or "head-eval-decode" in fix.note
