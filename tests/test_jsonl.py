"""enablebot.jsonl, the one reader/appender of the bot's JSONL files, and every reader routed
through it: a torn last line (a writer killed mid-append) is dropped, never fatal; an append
after one stays parseable; a malformed line elsewhere is an error naming file:line; an append
is on disk (fsynced) before it returns."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from enablebot import jsonl
from enablebot.results import RunResult, RunSpec
from enablebot.site.build import SiteInputError, load_sweep
from enablebot.sweep.checkpoint import RESULTS_FILE, Checkpoint, load_results
from enablebot.sweep.compare import CompareInputError, load_set
from enablebot.sweep.engine import RUNS_FILE, load_runs
from enablebot.sweep.incremental import KEYS_FILE, CacheKey, append_key, load_keys
from enablebot.sweep.schedule import load_durations

from conftest import ROOT

TORN = b'{"spec": {"model_id": "bert", "ta'  # what a kill mid-write leaves: no newline, not JSON


def result(model: str, secs: float = 1.0) -> RunResult:
    return RunResult(spec=RunSpec(model_id=model, mode="eval", task="base"), verdict="full_graph", duration_s=secs)


def results_file(d, *models: str, tail: bytes = b"", middle: bytes | None = None):
    lines = [json.dumps(result(m, i + 1.0).to_dict()).encode() + b"\n" for i, m in enumerate(models)]
    if middle is not None:
        lines.insert(1, middle + b"\n")
    d.mkdir(parents=True, exist_ok=True)
    (d / RESULTS_FILE).write_bytes(b"".join(lines) + tail)
    return d / RESULTS_FILE


def test_a_torn_tail_is_dropped_by_every_results_reader(tmp_path):
    f = results_file(tmp_path / "s", "llama", "gpt2", tail=TORN)
    want = {"llama", "gpt2"}
    assert {r.spec.model_id for r in load_results(f).values()} == want
    assert {k.split("|")[0] for k in load_durations(f)} == want
    assert {k.model_id for k in load_set(tmp_path / "s").keys.values()} == want
    assert {r.result.spec.model_id for r in load_sweep(tmp_path / "s").rows} == want
    read = jsonl.read(f)
    assert read.torn == TORN and [no for no, _ in read.records] == [1, 2]
    assert f.read_bytes().endswith(TORN)  # reading never changes the file (a live sweep may be appending)


def test_load_runs_drops_a_torn_tail(tmp_path):
    # On ed153a0 load_runs raised JSONDecodeError: `sweep merge` and sweep_speed died on a killed sweep's log.
    (tmp_path / RUNS_FILE).write_bytes(b'{"ran": 3, "wall_s": 12.5}\n{"ran": 1, "wall_s"')
    assert load_runs(tmp_path) == [{"ran": 3, "wall_s": 12.5}]
    with pytest.raises(FileNotFoundError):
        load_runs(tmp_path / "none")


def test_load_keys_drops_a_torn_tail_and_append_key_repairs_it(tmp_path):
    append_key(tmp_path, "a|base|eval|call", CacheKey(torch="2.13", transformers="5.26"))
    with open(tmp_path / KEYS_FILE, "ab") as f:
        f.write(b'{"key": "b|base|eval|call", "cache_k')
    assert list(load_keys(tmp_path)) == ["a|base|eval|call"]
    append_key(tmp_path, "c|base|eval|call", CacheKey(torch="2.13", transformers="5.26"))
    assert list(load_keys(tmp_path)) == ["a|base|eval|call", "c|base|eval|call"]
    assert jsonl.read(tmp_path / KEYS_FILE).torn is None


def test_an_append_after_a_torn_tail_stays_parseable(tmp_path):
    f = results_file(tmp_path, "llama", tail=TORN)
    ck = Checkpoint(tmp_path)  # the resuming writer truncates the torn line up front
    assert set(ck.done) == {result("llama").key} and not f.read_bytes().endswith(TORN)
    ck.append(result("gpt2"))
    with open(f, "ab") as fh:  # killed again, then a plain append (no Checkpoint in between)
        fh.write(TORN)
    jsonl.append(f, result("bert").to_dict())
    assert [d["spec"]["model_id"] for d in jsonl.read_values(f)] == ["llama", "gpt2", "bert"]
    assert all(json.loads(ln) for ln in f.read_text().splitlines())  # every line parses, no glued garbage


def test_a_whole_last_record_missing_only_its_newline_is_kept_and_ended(tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_bytes(b'{"a": 1}\n{"a": 2}')
    assert jsonl.read_values(f) == [{"a": 1}, {"a": 2}]
    jsonl.append(f, {"a": 3})
    assert f.read_bytes() == b'{"a": 1}\n{"a": 2}\n{"a":3}\n'


def test_a_torn_multibyte_character_is_a_torn_tail(tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_bytes(b'{"a": 1}\n' + '{"msg": "\u00e9'.encode()[:-1])  # cut inside a UTF-8 sequence
    assert jsonl.read_values(f) == [{"a": 1}]
    jsonl.append(f, {"msg": "\u00e9"})
    assert jsonl.read_values(f) == [{"a": 1}, {"msg": "\u00e9"}]


def test_a_malformed_line_in_the_middle_names_file_and_line(tmp_path):
    f = results_file(tmp_path / "s", "llama", "gpt2", middle=b'{"spec": oops}')
    with pytest.raises(jsonl.JsonlError, match=rf"{f}:2: not a JSON line"):
        load_results(f)
    with pytest.raises(jsonl.JsonlError, match=rf"{f}:2: "):
        load_durations(f)
    with pytest.raises(CompareInputError, match=rf"{f}:2: "):
        load_set(tmp_path / "s")
    with pytest.raises(SiteInputError, match=rf"{f}:2: "):
        load_sweep(tmp_path / "s")
    with pytest.raises(jsonl.JsonlError, match=rf"{f}:2: "):
        Checkpoint(tmp_path / "s")
    (tmp_path / RUNS_FILE).write_text('{"ran": 1}\n\n{"ran": 2\n{"ran": 3}\n')
    with pytest.raises(jsonl.JsonlError, match=rf"{tmp_path / RUNS_FILE}:3: "):
        load_runs(tmp_path)


def test_a_json_line_that_is_not_a_result_names_file_and_line(tmp_path):
    f = results_file(tmp_path, "llama", "gpt2", middle=b'["not", "a", "result"]')
    with pytest.raises(jsonl.JsonlError, match=rf"{f}:2: not a result record"):
        load_results(f)


def test_append_redacts_and_never_writes_an_unparseable_line(tmp_path, monkeypatch):
    monkeypatch.setenv("ENABLEBOT_TEST_API_KEY", "s3cr3t-value")
    f = tmp_path / "t.jsonl"
    jsonl.append(f, [{"msg": "key s3cr3t-value leaked"}, {"n": 2}])
    assert "s3cr3t" not in f.read_text() and len(jsonl.read_values(f)) == 2


def test_append_fsyncs_the_data_before_it_returns(tmp_path):
    """The real syscalls of a real append: the record's write, then fsync of that descriptor (and of
    the directory, for a new file), all before the caller runs again."""
    f, log = tmp_path / "d.jsonl", tmp_path / "strace.txt"
    code = (f"from enablebot import jsonl; jsonl.append({str(f)!r}, {{'n': 1}}); "
            f"jsonl.append({str(f)!r}, {{'n': 2}}); print('RETURNED', end='', flush=True)")
    p = subprocess.run(["strace", "-f", "-e", "trace=openat,write,fsync,fdatasync", "-o", str(log),
                        sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    if "Operation not permitted" in p.stderr:
        pytest.skip("ptrace is not allowed here")
    assert p.returncode == 0, p.stderr
    calls = [ln.split(None, 1)[1] for ln in log.read_text().splitlines() if "ENOENT" not in ln]
    opened = [i for i, c in enumerate(calls) if str(f) in c and c.startswith("openat")]
    fd = calls[opened[0]].rsplit("= ", 1)[1]
    seq = [c for c in calls[opened[0]:] if c.startswith((f"write({fd},", f"fsync({fd})", "write(1,", "fsync("))]
    assert seq[0].startswith(f'write({fd}, "{{\\"n\\":1}}\\n"') and seq[1].startswith(f"fsync({fd})")
    assert seq[2].startswith("fsync(")  # the new file's directory entry
    second = [i for i, c in enumerate(seq) if '\\"n\\":2' in c][0]
    returned = [i for i, c in enumerate(seq) if c.startswith('write(1, "RETURNED"')][0]
    assert seq[second + 1].startswith(f"fsync({fd})") and second + 1 < returned


def test_every_acknowledged_append_survives_a_sigkill_of_the_writer(tmp_path):
    """A child appends and says so after each return; SIGKILL at a random moment. Everything it
    acknowledged is in the file, the file reads (a torn tail at most), and the next append parses."""
    f = tmp_path / "w.jsonl"
    child = textwrap.dedent(f"""
        from enablebot import jsonl
        i = 0
        while True:
            jsonl.append({str(f)!r}, {{"i": i, "pad": "x" * 20000}})
            print(i, flush=True)
            i += 1
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "0"
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    acked = 1 + len(proc.stdout.read().split())
    got = [d["i"] for d in jsonl.read_values(f)]
    assert got[:acked] == list(range(acked)) and len(got) <= acked + 1  # one more: written, not yet acknowledged
    jsonl.append(f, {"i": "after"})
    assert jsonl.read_values(f)[-1] == {"i": "after"} and jsonl.read(f).torn is None
