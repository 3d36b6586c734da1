"""The LLM client: the real `openai` client against a local OpenAI-compatible server."""

import json

import pytest

from enablebot.fix.draft.llm import Budget, BudgetExceeded, LLMClient, LLMUnavailable, Transcript, redact
from enablebot.testing.fake_openai import FakeOpenAI, Reply

KEY = "sk-test-0123456789abcdefSECRET"
MSGS = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]


@pytest.fixture
def server():
    with FakeOpenAI(api_key=KEY) as s:
        yield s


def _client(server, tmp_path, **kw):
    transcript = Transcript(tmp_path / "t.jsonl", secrets=(KEY,))
    return LLMClient(model="fake-coder", base_url=server.base_url, api_key=KEY, backoff_s=0.01, transcript=transcript, **kw)


def test_chat_returns_text_usage_and_sends_the_request(server, tmp_path):
    server.add(Reply(content="```diff\n...\n```", usage={"prompt_tokens": 120, "completion_tokens": 30}))
    llm = _client(server, tmp_path, max_tokens=777)
    reply = llm.chat(MSGS)
    assert reply.text == "```diff\n...\n```"
    assert (reply.prompt_tokens, reply.completion_tokens) == (120, 30)
    assert llm.budget.total_tokens == 150
    req = server.chat_requests[0]
    assert req.body["model"] == "fake-coder" and req.body["messages"] == MSGS and req.body["max_tokens"] == 777
    assert req.headers["authorization"] == f"Bearer {KEY}"


def test_429_and_500_are_retried_then_succeed(server, tmp_path):
    server.add(Reply(status=429, content="slow down", retry_after=0), Reply(status=500), "ok")
    llm = _client(server, tmp_path)
    reply = llm.chat(MSGS)
    assert reply.text == "ok" and reply.retries == 2
    assert len(server.chat_requests) == 3
    errors = [r for r in llm.transcript.records if r["kind"] == "llm_error"]
    assert [e["status"] for e in errors] == [429, 500]


def test_retries_are_bounded(server, tmp_path):
    server.add(*[Reply(status=503) for _ in range(5)])
    llm = _client(server, tmp_path, retries=2)
    with pytest.raises(LLMUnavailable, match="failed 3 times"):
        llm.chat(MSGS)
    assert len(server.chat_requests) == 3


def test_client_errors_are_not_retried(server, tmp_path):
    llm = LLMClient(model="fake-coder", base_url=server.base_url, api_key="sk-wrong-key-000000000", backoff_s=0.01)
    with pytest.raises(LLMUnavailable, match="401"):
        llm.chat(MSGS)
    assert len(server.chat_requests) == 1


def test_malformed_responses_are_retried_or_read_as_empty(server, tmp_path):
    server.add(Reply(raw=b"{not json"), "after garbage", Reply(raw=b'{"choices": []}'), Reply(raw=b"[1, 2]"))
    llm = _client(server, tmp_path, retries=1)
    reply = llm.chat(MSGS)
    assert reply.text == "after garbage" and reply.retries == 1
    assert llm.chat(MSGS).text == ""  # no choices: an empty answer, which the agent reports back
    assert llm.chat(MSGS).text == ""
    server.add(Reply(raw=b"<html>bad gateway</html>"), Reply(raw=b"<html>bad gateway</html>"))
    with pytest.raises(LLMUnavailable, match="failed 2 times"):
        llm.chat(MSGS)


def test_token_budget_stops_further_calls(server, tmp_path):
    server.add(Reply("a", usage={"prompt_tokens": 60, "completion_tokens": 50}), "never sent")
    llm = _client(server, tmp_path, budget=Budget(max_total_tokens=100))
    llm.chat(MSGS)
    with pytest.raises(BudgetExceeded, match="token budget"):
        llm.chat(MSGS)
    assert len(server.chat_requests) == 1


def test_cost_budget(server, tmp_path):
    server.add(Reply("a", usage={"prompt_tokens": 1_000_000, "completion_tokens": 100_000}))
    budget = Budget(max_usd=2.0, usd_per_mtok_in=1.0, usd_per_mtok_out=10.0)
    llm = _client(server, tmp_path, budget=budget)
    llm.chat(MSGS)
    assert budget.usd == pytest.approx(2.0)
    assert "cost budget" in budget.exhausted()


def test_transcript_never_contains_secrets(server, tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_" + "A" * 36)
    server.add(f"the key is {KEY} and ghp_{'A' * 36} and Bearer abc.def")
    llm = _client(server, tmp_path)
    llm.chat([{"role": "user", "content": f"my key {KEY}"}])
    text = (tmp_path / "t.jsonl").read_text()
    assert KEY not in text and "ghp_" + "A" * 36 not in text and "abc.def" not in text
    assert text.count("[REDACTED]") >= 3
    assert redact("token hf_" + "x" * 30) == "token [REDACTED]"


def test_from_env_needs_a_model_and_an_endpoint(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert LLMClient.from_env("m") is None
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert LLMClient.from_env(None) is None
    assert LLMClient.from_env("m").base_url == "http://127.0.0.1:9/v1"
