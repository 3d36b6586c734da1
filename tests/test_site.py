"""The dashboard site: built from real results (committed sweeps and real runs), read in a real
browser (headless Chromium through Selenium) from file:// URLs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from enablebot.sweep.checkpoint import RESULTS_FILE
from enablebot.fix.bundle import ClusterRef, FixBundle, Snapshot
from enablebot.results import RunResult
from enablebot.site.build import SiteInputError, build, new_breaks, order_sets, load_inputs
from enablebot.site.links import gb_url, release_ref, source_url

from conftest import MINIMAL_BASELINE, ROOT

MODELS = ("jetmoe", "wav2vec2-bert", "llama", "gpt2", "t5", "bert")
GB0033 = "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0033.html"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,1000")


def _subset(src: Path, dest: Path, models=MODELS) -> list[RunResult]:
    """A small sweep directory of committed, real results: RunResult objects written back as lines."""
    dest.mkdir(parents=True)
    out = []
    for line in (src / RESULTS_FILE).read_text(encoding="utf-8").splitlines():
        r = RunResult.from_dict(json.loads(line))
        if r.spec.model_id in models:
            out.append(r)
    (dest / RESULTS_FILE).write_text("".join(json.dumps(r.to_dict()) + "\n" for r in out), encoding="utf-8")
    return out


def cli(*args):
    p = subprocess.run([sys.executable, "-m", "enablebot.cli", *args], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
    p.stderr = " ".join(p.stderr.split())  # rich wraps long messages
    return p


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("site")
    older = _subset(ROOT / "results" / "gpu" / "cuda-inductor-tiny", tmp / "nightly-cuda")  # torch 2.11 / tf 5.17
    newer = _subset(ROOT / "results" / "cpu-dynamo", tmp / "nightly-cpu")  # torch 2.13 / tf 5.24
    assert older and newer
    # A verified recipe fix for jetmoe's break, as `fix` writes it.
    bundle = FixBundle(fix_key="jetmoe-gb0033", model_id="jetmoe", target="config", kind="recipe",
                       cluster=ClusterRef(gb_type="Data dependent operator", registry_id="GB0033", function="forward"),
                       recipe={"capture_scalar_outputs": True}, verified=True,
                       before=Snapshot(verdict="graph_break", graph_breaks=2), after=Snapshot(verdict="full_graph", graph_breaks=0))
    bundle.save(tmp / "fixes" / "jetmoe" / "gb0033")
    (tmp / "pr.json").write_text(json.dumps([{"fix_key": "jetmoe-gb0033", "repo": "o/r", "branch": "b", "action": "opened",
                                              "url": "https://github.com/o/r/pull/7"}]))
    out = tmp / "out"
    p = cli("site", str(tmp / "nightly-cpu"), str(tmp / "nightly-cuda"), "--fixes", str(tmp / "fixes"),
            "--prs", str(tmp / "pr.json"), "--out", str(out))
    assert p.returncode == 0, p.stderr
    return out


# ---- links -----------------------------------------------------------------------------------
def test_links_use_the_registry_url_form_and_the_release_tag():
    assert gb_url("GB0033") == GB0033 and gb_url(None) is None and gb_url("Data dependent operator") is None
    f = "/x/.venv/lib/python3.11/site-packages/transformers/models/jetmoe/modeling_jetmoe.py"
    assert source_url(f, 12, transformers="5.24.0", torch="2.13.0+cpu") == (
        "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/models/jetmoe/modeling_jetmoe.py#L12")
    t = "/usr/lib/python3/dist-packages/torch/_dynamo/utils.py"
    assert source_url(t, 3, transformers="5.24.0", torch="2.11.0+cu130") == (
        "https://github.com/pytorch/pytorch/blob/v2.11.0/torch/_dynamo/utils.py#L3")
    assert release_ref("5.25.0.dev0") == "main" and source_url("/home/me/train.py", 1, transformers="5", torch="2") is None


# ---- pages from real results ---------------------------------------------------------------------
def test_site_pages_and_summary(site):
    summary = json.loads((site / "site.json").read_text())
    assert [s["label"] for s in summary["sets"]] == ["nightly-cuda", "nightly-cpu"]  # version order, not argument order
    vc = summary["version_changes"][0]
    assert vc["before"] == "nightly-cuda" and vc["after"] == "nightly-cpu" and vc["common"] == len(MODELS)
    index = (site / "index.html").read_text()
    assert "torch 2.11.0 / transformers 5.17.0" in index and "torch 2.13.0 / transformers 5.24.0" in index
    assert '<svg class="chart"' in index and "<title id=\"trend-title\">" in index
    assert 'href="https://github.com/o/r/pull/7"' in index and "✓ verified" in index
    jet = (site / "models" / "jetmoe.html").read_text()
    assert f'href="{GB0033}"' in jet
    assert "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/models/jetmoe/modeling_jetmoe.py#L" in jet
    # The cuda result ran on transformers 5.17: its frame links to that tag.
    assert "https://github.com/huggingface/transformers/blob/v5.17.0/src/transformers/models/jetmoe/modeling_jetmoe.py#L" in jet
    cluster_pages = list((site / "clusters").glob("*.html"))
    jet_cluster = [p for p in cluster_pages if "modeling_jetmoe.py" in p.read_text()]
    assert jet_cluster and "verified fix" in jet_cluster[0].read_text()
    assert "capture_scalar_outputs" in jet_cluster[0].read_text()  # the recipe the fix loop tries
    for p in [site / "index.html", site / "models.html", *cluster_pages]:
        text = p.read_text()
        assets = re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', text)
        assert assets and all(not a.startswith(("http:", "https:", "//")) for a in assets), assets  # vendored
        assert "<img" not in text or " alt=" in text


def test_bad_inputs_are_refused_with_exit_2(tmp_path):
    (tmp_path / "empty").mkdir()
    p = cli("site", str(tmp_path / "empty"), "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and "results.jsonl" in p.stderr
    (tmp_path / "b.json").write_text("[1, 2")
    p = cli("site", str(tmp_path / "b.json"), "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and "not a baseline file" in p.stderr
    assert not (tmp_path / "o" / "index.html").exists()
    with pytest.raises(SiteInputError, match="fixes directory"):
        build([MINIMAL_BASELINE], fixes=tmp_path / "nope")


def test_a_baseline_that_repeats_a_given_sweep_is_shown_once():
    # Baselines key their items by scenario (model|task|device|mode|dtype|scenario).
    data = build([ROOT / "results" / "gpu" / "cuda-dynamo-default", ROOT / "baselines" / "cuda-dynamo-torch-2.11.0.json"])
    assert [s.label for s in data.sets] == ["cuda-dynamo-default"] and "shown once" in data.notes[0]
    # One that does not repeat it (the Inductor pass with scenarios against the older minimal
    # harness) is its own set, every item read.
    data = build([ROOT / "results" / "gpu" / "cuda-inductor-tiny", ROOT / "baselines" / "cuda-inductor-torch-2.11.0.json"])
    base = next(s for s in data.sets if s.kind == "baseline")
    assert len(data.sets) == 2 and not data.notes and len(base.rows) == 594
    assert {r.pass_ for r in base.rows} == {"inductor"} and {r.scenario for r in base.rows} == {"call"}


def test_a_new_break_since_the_previous_nightly_is_found(tmp_path):
    """Two real runs of one model on one device: with the recipe that avoids its break (the older
    nightly), then without it (the newer): the break is new in the newer one."""
    from enablebot.execute.isolation import run_in_child
    from enablebot.results import RunSpec

    def nightly(name: str, cfg: dict) -> Path:
        spec = RunSpec(model_id="jetmoe", task="head", mode="eval", backend="eager", fast=True, numerics=False,
                       timing=False, fullgraph_check=False, timeout_s=240, dynamo_config=cfg)
        r = run_in_child(spec)
        (tmp_path / name).mkdir()
        (tmp_path / name / RESULTS_FILE).write_text(json.dumps(r.to_dict()) + "\n")
        return tmp_path / name

    first = nightly("n1", {"capture_scalar_outputs": True})
    second = nightly("n2", {})
    sets = order_sets(load_inputs([second, first]))
    assert [s.label for s in sets] == ["n1", "n2"]
    assert sets[0].rows[0].verdict == "full_graph" and sets[1].rows[0].verdict == "graph_break"
    found = new_breaks(sets)
    assert [(b.model, b.registry_id, b.before_set, b.after_set) for b in found] == [("jetmoe", "GB0033", "n1", "n2")]
    assert "modeling_jetmoe.py" in found[0].what
    assert new_breaks(list(reversed(sets))) == []  # the fix direction is not a new break


# ---- in a real browser ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    # Debian's chromium; GitHub's runners have google-chrome with a matching chromedriver.
    chromium = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    driver_bin = shutil.which("chromedriver")
    if not (chromium and driver_bin):
        pytest.fail("Chromium is needed for the browser test and is not installed: "
                    "apt-get install -y chromium chromium-driver (scripts/setup.sh does this when run as root)")
    from selenium import webdriver

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver path: Selenium Manager (which would download one) never runs.
    driver = webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=driver_bin))
    yield driver
    driver.quit()


def _visible_rows(driver):
    from selenium.webdriver.common.by import By

    return [r for r in driver.find_elements(By.CSS_SELECTOR, "#models tbody tr") if r.is_displayed()]


def test_table_sorts_filters_and_links_in_chromium(site, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    d = browser
    errors = []
    d.get((site / "models.html").as_uri())
    rows = _visible_rows(d)
    total = len(rows)
    assert total == len(_subset_keys())
    assert d.find_element(By.ID, "count").text == f"{total} of {total} rows shown"

    # Sort by breaks, descending (second click): the most breaks first, empty cells last.
    button = d.find_elements(By.CSS_SELECTOR, "#models thead th button")[8]
    assert button.text.startswith("breaks")
    button.click()
    button.click()
    assert button.find_element(By.XPATH, "..").get_attribute("aria-sort") == "descending"
    breaks = [r.find_elements(By.TAG_NAME, "td")[8].text for r in _visible_rows(d)]
    numbers = [int(b) for b in breaks if b]
    assert numbers == sorted(numbers, reverse=True) and numbers[0] > 0
    assert all(b for b in breaks[:len(numbers)])  # empty cells only at the end

    # Filter: verdict graph_break, then only the torch 2.13 version; the status line follows.
    Select(d.find_element(By.CSS_SELECTOR, "select[name='verdict']")).select_by_value("graph_break")
    shown = _visible_rows(d)
    assert 0 < len(shown) < total
    assert all("graph_break" in r.find_elements(By.TAG_NAME, "td")[7].text for r in shown)
    Select(d.find_element(By.CSS_SELECTOR, "select[name='version']")).select_by_value("2.13.0/5.24.0")
    shown2 = _visible_rows(d)
    assert 0 < len(shown2) < len(shown) and all("2.13.0/5.24.0" in r.text for r in shown2)
    assert d.find_element(By.ID, "count").text == f"{len(shown2)} of {total} rows shown"
    search = d.find_element(By.ID, "q")
    search.send_keys("wav2vec2")
    assert {r.find_element(By.TAG_NAME, "a").text for r in _visible_rows(d)} == {"wav2vec2-bert"}
    search.clear()
    search.send_keys("no-such-model")
    assert _visible_rows(d) == [] and d.find_element(By.ID, "count").text == f"0 of {total} rows shown"
    errors += d.get_log("browser")

    # Filters preset from the address; then follow a model link and its GB link.
    d.get((site / "models.html").as_uri() + "?breaks=GB0033")
    shown = _visible_rows(d)
    assert shown and all("GB0033" in r.text for r in shown)
    link = next(r for r in shown if r.find_element(By.TAG_NAME, "a").text == "jetmoe").find_element(By.TAG_NAME, "a")
    link.click()
    assert d.current_url.endswith("/models/jetmoe.html") and d.find_element(By.TAG_NAME, "h1").text == "jetmoe"
    gb = d.find_element(By.CSS_SELECTOR, "section.break a.gb")
    assert gb.get_attribute("href") == GB0033 and gb.text == "GB0033"
    src = d.find_element(By.CSS_SELECTOR, "section.break a.src")  # the newest set's break comes first
    assert src.get_attribute("href").startswith(
        "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/models/jetmoe/modeling_jetmoe.py#L")
    errors += d.get_log("browser")
    gb.click()  # offline: the page cannot load, but the navigation goes to the registry page
    assert d.current_url.rstrip("/") == GB0033 or "compile-graph-break-site/gb/gb0033.html" in d.current_url
    d.back()

    for page in ("index.html", "clusters.html"):
        d.get((site / page).as_uri())
        assert d.find_element(By.TAG_NAME, "h1").text
        errors += d.get_log("browser")
    # Offline, only the external GB page may fail to load; the site itself logs nothing.
    assert [e for e in errors if "compile-graph-break-site" not in e.get("message", "")] == []


def _subset_keys():
    keys = set()
    for src in (ROOT / "results" / "gpu" / "cuda-inductor-tiny", ROOT / "results" / "cpu-dynamo"):
        for line in (src / RESULTS_FILE).read_text().splitlines():
            r = json.loads(line)
            if r["spec"]["model_id"] in MODELS:
                keys.add((src.name, RunResult.from_dict(r).key))
    return keys


def _lines(src: Path, keep=lambda d: True) -> list[dict]:
    return [d for d in map(json.loads, (src / RESULTS_FILE).read_text().splitlines()) if keep(d)]


def _write(dest: Path, lines: list[dict]) -> Path:
    dest.mkdir(parents=True)
    (dest / RESULTS_FILE).write_text("".join(json.dumps(d) + "\n" for d in lines))
    return dest


def test_a_new_architecture_gets_its_time_to_support(tmp_path):
    """The older nightly lacks qwen2_moe; the newer runs it full graph with numerics passing,
    63 minutes after the registry first saw it. A Hub find never run is listed as not run."""
    from enablebot.model.registry import Registry

    subset = ROOT / "results" / "cpu-inductor-subset"
    older = _write(tmp_path / "older", _lines(subset, lambda d: d["spec"]["model_id"] != "qwen2_moe"))
    newer = ROOT / "results" / "cpu-inductor-subset-warm"
    (tmp_path / "reg.yaml").write_text(
        "architectures:\n"
        "  qwen2_moe: {first_seen: '2026-12-03T05:00:00+00:00'}\n"
        "  brand_new: {origin: hub, first_seen: '2026-12-03T04:00:00+00:00', seen_in: [org/brand-new]}\n")
    data = build([newer, older], registry=Registry.load(tmp_path / "reg.yaml"))
    archs = {a.model: a for a in data.new_archs}
    assert set(archs) == {"qwen2_moe", "brand_new"}
    q = archs["qwen2_moe"]
    assert q.why == "new in cpu-inductor-subset-warm" and q.supported_at == "2026-12-03T06:03:23+00:00"
    assert q.seconds == 3803.0
    b = archs["brand_new"]
    assert b.why == "found on the Hub" and b.latest_verdict == "not run" and b.seconds is None


def test_scenario_is_read_from_the_spec_and_compare_is_shown(tmp_path):
    from enablebot.site.pages import models_table, overview
    from enablebot.site.write import write_site

    lines = _lines(ROOT / "results" / "cpu-inductor-subset", lambda d: d["spec"]["model_id"] in ("gpt2", "t5"))
    generate = [dict(d, spec=dict(d["spec"], scenario="generate")) for d in lines]
    sweep = _write(tmp_path / "s", lines + generate)
    (tmp_path / "cmp.json").write_text(json.dumps({"regressions": [{"key": "gpt2|head", "what": "full_graph -> graph_break"}],
                                                   "versions": {"before": "2.11", "after": "2.13"}}))
    data = build([sweep], compare=tmp_path / "cmp.json")
    assert sorted((r.model, r.scenario) for r in data.rows) == [("gpt2", "call"), ("gpt2", "generate"),
                                                               ("t5", "call"), ("t5", "generate")]
    assert '<option value="generate">generate</option>' in models_table(data)
    assert '<a href="compare.html">' in overview(data)
    write_site(data, tmp_path / "out")
    cmp = (tmp_path / "out" / "compare.html").read_text()
    assert "<td>full_graph -&gt; graph_break</td>" in cmp and "<dt>versions</dt>" in cmp
    (tmp_path / "bad.json").write_text("{")
    p = cli("site", str(sweep), "--compare", str(tmp_path / "bad.json"), "--out", str(tmp_path / "o2"))
    assert p.returncode == 2 and "not a readable JSON file" in p.stderr


def test_committed_cpu_sweeps_on_two_versions_give_a_real_trend():
    """The CPU Dynamo pass on torch 2.11 / transformers 5.17 and on torch 2.13 / transformers 5.24."""
    data = build([ROOT / "results" / "cpu-dynamo", ROOT / "results" / "cpu-dynamo-torch2.11"])
    assert [(s.label, s.torch, s.series) for s in data.sets] == [("cpu-dynamo-torch2.11", "2.11.0", "cpu dynamo"),
                                                                 ("cpu-dynamo", "2.13.0", "cpu dynamo")]
    vc = data.version_changes[0]
    assert (vc.compiled_both, vc.before_full_graph_compiled, vc.after_full_graph_compiled) == (1788, 1429, 1512)
    new = {(b.model, b.registry_id) for b in data.new_breaks}
    assert ("aya_vision", "GB0124") in new and all(b.after_set == "cpu-dynamo" for b in data.new_breaks)
    # Architectures transformers 5.24 has and 5.17 lacks are new in the newer set.
    assert {a.why for a in data.new_archs} == {"new in cpu-dynamo"} and len(data.new_archs) > 10
    older = {r.model for r in data.sets[0].rows}
    assert not any(a.model in older for a in data.new_archs)


def test_an_architecture_an_earlier_set_of_another_series_ran_is_not_new(tmp_path):
    """distilbert is missing from the time-boxed torch 2.11 CPU sweep but the CUDA pass on 2.11 ran it."""
    cpu = [ROOT / "results" / "cpu-dynamo", ROOT / "results" / "cpu-dynamo-torch2.11"]
    assert "distilbert" in {a.model for a in build(cpu).new_archs}
    with_cuda = build(cpu + [ROOT / "results" / "gpu" / "cuda-inductor-tiny"])
    assert "distilbert" not in {a.model for a in with_cuda.new_archs}


# ---- trend lines compare like with like ------------------------------------------------------------
TREND_WHOLE = ("llama", "gpt2", "bert", "t5", "mixtral", "qwen2_moe", "phi3", "falcon", "jetmoe", "aya_vision")
TREND_SUBSET = ("llama", "jetmoe", "aya_vision")


def _call_runs(src: Path, models) -> list[dict]:
    return _lines(src, lambda d: d["spec"]["model_id"] in models and d["spec"].get("scenario", "call") == "call")


def _share(lines: list[dict], keys: set) -> tuple[int, int]:
    on = [d for d in lines if RunResult.from_dict(d).key in keys]
    return sum(d["verdict"] == "full_graph" for d in on), sum(d["verdict"] in ("full_graph", "graph_break") for d in on)


@pytest.fixture(scope="module")
def trend_site(tmp_path_factory):
    """Two overlapping result sets of different sizes, as the torch 2.13 baseline and the 2.15
    subset: the whole sweep (10 models, torch 2.11) and a 3-model subset of it on torch 2.13,
    whose models break more often than the whole sample's."""
    tmp = tmp_path_factory.mktemp("trend")
    whole = _call_runs(ROOT / "results" / "cpu-dynamo-torch2.11", TREND_WHOLE)
    subset = _call_runs(ROOT / "results" / "cpu-dynamo", TREND_SUBSET)
    _write(tmp / "whole", whole)
    _write(tmp / "subset", subset)
    p = cli("site", str(tmp / "subset"), str(tmp / "whole"), "--out", str(tmp / "out"))
    assert p.returncode == 0, p.stderr
    return tmp / "out", whole, subset


def test_trend_chart_joins_only_shares_on_the_same_runs_in_chromium(trend_site, browser):
    from selenium.webdriver.common.by import By

    out, whole, subset = trend_site
    shared = {RunResult.from_dict(d).key for d in whole} & {RunResult.from_dict(d).key for d in subset}
    assert len(whole) == 40 and len(subset) == len(shared) == 12
    d = browser
    d.get((out / "index.html").as_uri())
    # The chart's description lists each line's points: the whole sample's 80.0% is never joined
    # to the subset's 33.3% (a fall that is only a change of sample).
    desc = d.find_element(By.CSS_SELECTOR, "svg.chart desc").get_attribute("textContent")
    assert "set #1 80.0%, set #2" not in desc, desc
    lines = {}
    for g in d.find_elements(By.CSS_SELECTOR, "svg.chart g.line"):
        points = [(int(p.get_attribute("data-x")), p.find_element(By.TAG_NAME, "text").text,
                   p.find_element(By.TAG_NAME, "title").get_attribute("textContent"))
                  for p in g.find_elements(By.CSS_SELECTOR, "g.point")]
        lines[g.find_element(By.CSS_SELECTOR, "text.legend").text] = points
    # Set #1 is the whole torch 2.11 sweep, #2 the torch 2.13 subset (version order).
    fg, compiled = _share(whole, shared)
    fg2, compiled2 = _share(subset, shared)
    on_shared = f"{100 * fg / compiled:.1f}%"
    assert (fg, compiled, fg2, compiled2) == (4, 12, 4, 12)  # the subset breaks as often on both versions
    assert lines == {
        "cpu dynamo: 40 runs (circle)": [(1, "80.0%", "#1 whole: 80.0% (32 of 40 compiled, on the line's 40 runs; "
                                                      "the set has 40)")],
        "cpu dynamo: subset, the 12 runs of #2 (square)": [
            (1, on_shared, f"#1 whole: {on_shared} ({fg} of {compiled} compiled, on the line's 12 runs; the set has 40)"),
            (2, on_shared, f"#2 subset: {on_shared} ({fg2} of {compiled2} compiled, on the line's 12 runs; the set has 12)")],
    }
    # The per-set table still lists each set on all its runs; the chart's lines are tabled beside it.
    shares = [r.text for r in d.find_elements(By.CSS_SELECTOR, "#shares tbody tr")]
    assert any("whole" in r and "80.0%" in r for r in shares) and any("subset" in r and "33.3%" in r for r in shares)
    assert len(d.find_elements(By.CSS_SELECTOR, "#trend-lines tbody tr")) == 3
    assert d.get_log("browser") == []


def test_the_torch_2_15_subset_is_drawn_beside_2_13_on_the_same_runs():
    """The committed baselines: 2.15 holds 40 types (154 call runs), 2.13 the whole pass. The 2.15
    share is only ever joined to the 2.13 share on the runs 2.15 holds."""
    from enablebot.site.trend import trend_lines

    data = build([ROOT / "baselines" / "cpu-dynamo-torch-2.13.0.json", ROOT / "baselines" / "cpu-dynamo-torch-2.15.0.json"])
    new, old = (next(s for s in data.sets if s.torch == v) for v in ("2.15.0", "2.13.0"))
    lines = [ln for ln in trend_lines(data.sets) if ln.scenario == "call"]
    main, sub = lines
    assert [p.set_label for p in main.points] == [old.label] and main.runs == 2212
    assert sub.subset_of == new.label and [p.set_label for p in sub.points] == [old.label, new.label]
    keys = {r.key for r in new.rows if r.scenario == "call"} & {r.key for r in old.rows}
    assert sub.runs == len(keys) == 154 and all(p.runs == 154 for p in sub.points)
    old_rows = {r.key: r for r in old.rows}
    assert sub.points[0].full_graph == sum(old_rows[k].verdict == "full_graph" for k in keys)
    # Read as a trend, the whole-sample shares would fall from 79.6% to 63.6%; on the same runs they do not.
    assert [round(100 * s.rate, 1) for s in data.shares if s.scenario == "call"] == [70.6, 63.6]
    assert [round(100 * p.rate, 1) for p in sub.points] == [63.6, 63.6]


def _readme_site_command() -> list[str]:
    """README's command that builds the site from the committed results (results/site/ is not in git)."""
    import shlex

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```console\n(.*?)```", text, re.S) if "enablebot site" in b)
    return shlex.split(block.replace("\\\n", " "))


def test_the_site_builds_from_the_committed_data_with_readmes_command(tmp_path):
    import glob

    argv = _readme_site_command()
    assert argv[0].endswith("enablebot") and argv[1] == "site" and argv[-2:] == ["--out", "results/site"]
    inputs = [p for a in argv[2:-2] for p in sorted(glob.glob(str(ROOT / a)))]
    assert len(inputs) == len(argv[2:-2]) - 1 + len(glob.glob(str(ROOT / "baselines" / "*.json")))
    p = cli("site", *inputs, "--out", str(tmp_path / "site"))
    assert p.returncode == 0, p.stderr
    summary = json.loads((tmp_path / "site" / "site.json").read_text())
    assert len(summary["sets"]) == len(inputs) and (tmp_path / "site" / "models" / "llama.html").is_file()
    # The torch 2.15 baseline (40 types) is on subset lines only, beside 2.13 on the same runs.
    new = "baseline cpu-dynamo-torch-2.15.0"
    with_new = [t for t in summary["trends"] if any(pt["set"] == new for pt in t["points"])]
    assert with_new and all(t["subset_of"] == new for t in with_new)
    assert all("baseline cpu-dynamo-torch-2.13.0" in {pt["set"] for pt in t["points"]} for t in with_new)
    # Generated, so not in git: the command above rebuilds it from the data that is.
    tracked = subprocess.run(["git", "ls-files", "results/site"], cwd=ROOT, capture_output=True, text=True)
    assert tracked.returncode != 0 or tracked.stdout == "", tracked.stdout[:500]
