"""enablebot.retry_wait, the one wait rule of the Hub and LLM clients: every Retry-After form
(seconds, HTTP-date, retry-after-ms, the Hub's RateLimit), honoured as given up to the caller's
max_wait_s, else full-jitter exponential backoff. The clients are driven against real HTTP servers
on 127.0.0.1 (fake_openai, fake_hub) answering 429 with each form; the sleep, the jitter and
the clock are injected so the waits computed are seen exactly, nothing of the clients is mocked."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest

from enablebot.fix.draft.llm import LLMClient, LLMUnavailable, Transcript
from enablebot.model.hub import HubClient, HubError, RetryPolicy
from enablebot.retry_wait import Wait, backoff, parse_retry_after, parse_retry_after_ms, retry_wait
from enablebot.testing.fake_hub import Fault
from enablebot.testing.fake_openai import FakeOpenAI, Reply

from test_hub import hub  # noqa: F401 - the local Hub fixture, shared with test_hub.py

NOW = datetime(2026, 12, 4, 15, 0, 0, tzinfo=timezone.utc)
HTTP_DATE_30S = "Fri, 04 Dec 2026 15:00:30 GMT"  # NOW + 30 s
MSGS = [{"role": "user", "content": "hello"}]


# ---- the rule itself ----------------------------------------------------------------------

def test_each_header_form_parses():
    assert parse_retry_after("7") == 7 and parse_retry_after("1.5") == 1.5 and parse_retry_after(" 0 ") == 0
    assert parse_retry_after(HTTP_DATE_30S, now=NOW) == 30
    assert parse_retry_after("Fri, 04 Dec 2026 14:00:00 GMT", now=NOW) == 0  # a date in the past: now
    assert parse_retry_after_ms("1500") == 1.5 and parse_retry_after_ms("0.5") == 0.0005
    for bad in (None, "", "soon", "-3", "nan", "inf"):
        assert parse_retry_after(bad, now=NOW) is None and parse_retry_after_ms(bad) is None


def test_hint_precedence_ratelimit_then_ms_then_retry_after_then_backoff():
    kw = dict(base_s=1.0, cap_s=10.0, rand=lambda: 1.0, now=NOW)
    h = {"RateLimit": '"api";r=0;t=7', "retry-after-ms": "250", "Retry-After": "3"}
    assert retry_wait(429, h, 1, **kw) == Wait(7.0, "ratelimit")
    assert retry_wait(503, h, 1, **kw) == Wait(0.25, "retry-after-ms")  # RateLimit only explains a 429
    assert retry_wait(429, {"RETRY-AFTER": HTTP_DATE_30S}, 1, **kw) == Wait(30.0, "retry-after")
    assert retry_wait(429, {"Retry-After": "soon"}, 3, **kw) == Wait(4.0, "backoff")  # unreadable: as if absent
    assert retry_wait(None, None, 9, **kw) == Wait(10.0, "backoff")  # capped


def test_backoff_is_full_jitter_under_an_exponential_cap():
    assert [backoff(a, 1.0, 20.0, rand=lambda: 1.0) for a in range(1, 8)] == [1, 2, 4, 8, 16, 20, 20]
    rng = random.Random(7)
    waits = [backoff(4, 1.0, 20.0, rand=rng.random) for _ in range(200)]
    assert all(0 <= w <= 8 for w in waits)
    assert min(waits) < 1 and max(waits) > 7 and len(set(waits)) == 200  # spread over the range, not fixed


def test_only_a_server_hint_is_ever_too_long():
    assert Wait(121, "retry-after").too_long(120) and not Wait(120, "retry-after").too_long(120)
    assert not Wait(500, "backoff").too_long(120)


# ---- the LLM client, against a real OpenAI-compatible server --------------------------------

@pytest.fixture
def openai_server():
    with FakeOpenAI() as s:
        yield s


def _llm(server, tmp_path, sleeps, **kw):
    kw = {"backoff_s": 1.0, "max_backoff_s": 20.0, **kw}
    return LLMClient(model="fake-coder", base_url=server.base_url, api_key="unused", sleep=sleeps.append,
                     rand=lambda: 0.5, clock=lambda: NOW, transcript=Transcript(tmp_path / "t.jsonl"), **kw)


@pytest.mark.parametrize("reply, want", [
    (Reply(status=429, retry_after=7), (7.0, "retry-after")),
    (Reply(status=429, retry_after=45), (45.0, "retry-after")),  # past the old 20 s clamp: as the server asks
    (Reply(status=429, retry_after=None, headers={"Retry-After": HTTP_DATE_30S}), (30.0, "retry-after")),
    (Reply(status=429, retry_after=None, headers={"retry-after-ms": "1500"}), (1.5, "retry-after-ms")),
    (Reply(status=429, retry_after=9, headers={"retry-after-ms": "250"}), (0.25, "retry-after-ms")),
    (Reply(status=429, retry_after=None), (0.5, "backoff")),  # no hint: jitter (pinned at 0.5) x 1 s
], ids=["seconds", "seconds-over-20", "http-date", "ms", "ms-over-seconds", "none"])
def test_llm_honours_each_retry_after_form(openai_server, tmp_path, reply, want):
    openai_server.add(reply, "ok")
    sleeps: list[float] = []
    llm = _llm(openai_server, tmp_path, sleeps)
    assert llm.chat(MSGS).text == "ok" and len(openai_server.chat_requests) == 2
    assert sleeps == [want[0]]
    err = [r for r in llm.transcript.records if r["kind"] == "llm_error"][0]
    assert (err["status"], err["wait_s"], err["wait_from"]) == (429, want[0], want[1])


def test_llm_backoff_doubles_to_its_cap_with_jitter(openai_server, tmp_path):
    openai_server.add(*[Reply(status=503) for _ in range(4)], "ok")
    sleeps: list[float] = []
    assert _llm(openai_server, tmp_path, sleeps, max_backoff_s=3.0).chat(MSGS).text == "ok"
    assert sleeps == [0.5, 1.0, 1.5, 1.5]  # 0.5 x (1, 2, 4 -> 3, 8 -> 3)


def test_llm_gives_up_rather_than_wait_past_max_wait(openai_server, tmp_path):
    openai_server.add(Reply(status=429, retry_after=None, headers={"retry-after-ms": "600000"}), "ok")
    sleeps: list[float] = []
    with pytest.raises(LLMUnavailable, match=r"wait 600s \(retry-after-ms\), more than the 120s"):
        _llm(openai_server, tmp_path, sleeps).chat(MSGS)
    assert sleeps == [] and len(openai_server.chat_requests) == 1


# ---- the Hub client, against a local Hub -----------------------------------------------------

def _listing_sleeps(hub, tmp_path, headers, policy=RetryPolicy(attempts=3, base_wait_s=0.05, max_wait_s=60.0)):
    hub.inject(Fault(r"^/api/models$", 429, headers))
    sleeps: list[float] = []
    items = list(HubClient(hub.url, policy=policy, cache_dir=tmp_path, sleep=sleeps.append).iter_models(limit=2))
    assert len(items) == 2 and [r.status for r in hub.requests_to(r"^/api/models$")] == [429, 200]
    return sleeps


def test_hub_honours_retry_after_ms(hub, tmp_path):
    assert _listing_sleeps(hub, tmp_path, {"retry-after-ms": "1500"}) == [1.5]


def test_hub_honours_retry_after_http_date(hub, tmp_path):
    when = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=20), usegmt=True)
    [slept] = _listing_sleeps(hub, tmp_path, {"Retry-After": when})
    assert 18.0 < slept <= 20.0  # the date has whole seconds, and the request took a moment


def test_hub_gives_up_on_a_ms_wait_past_max_wait(hub, tmp_path):
    hub.inject(Fault(r"^/api/models$", 429, {"retry-after-ms": "90000"}))
    with pytest.raises(HubError, match="wait 90s"):
        list(HubClient(hub.url, policy=RetryPolicy(max_wait_s=60.0), cache_dir=tmp_path,
                       sleep=lambda s: pytest.fail("must not sleep")).iter_models())
