"""The Hub client layer against a local Hub (enablebot.testing.fake_hub), through the real
huggingface_hub session and hf_hub_download."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from enablebot.model.hub import (
    LISTING_EXPAND,
    ConfigMissing,
    HubClient,
    HubError,
    HubModel,
    ListingSkip,
    RetryPolicy,
    fetch_config,
    parse_listing_item,
    parse_retry_after,
    retry_wait,
)
from enablebot.testing.fake_hub import FakeHub, FakeRepo, Fault, hub_requests_allowed

FIXTURES = Path(__file__).parent / "fixtures" / "hub"
ROOT = Path(__file__).resolve().parent.parent
FAST = RetryPolicy(attempts=3, base_wait_s=0.05, max_wait_s=5.0, timeout_s=5.0)
TOKEN = "hf_fixtureTOKEN0123456789"


@pytest.fixture
def hub(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    with hub_requests_allowed(), FakeHub.from_fixtures(FIXTURES, page_size=3, token=TOKEN) as h:
        yield h


def client(hub: FakeHub, tmp_path: Path, **kw) -> HubClient:
    return HubClient(hub.url, policy=kw.pop("policy", FAST), cache_dir=tmp_path / "cache", **kw)


# ---- pure parts -------------------------------------------------------------------------


def test_retry_wait_prefers_ratelimit_reset_then_retry_after_then_backoff():
    p = RetryPolicy(base_wait_s=1, max_wait_s=10)
    assert retry_wait(429, {"RateLimit": '"api";r=0;t=7', "Retry-After": "3"}, 1, p) == 7
    # RateLimit with requests remaining is not the reason for the 429: Retry-After decides.
    assert retry_wait(429, {"RateLimit": '"api";r=5;t=7', "Retry-After": "3"}, 1, p) == 3
    # no hint: full jitter over 1, 2, 4, 8, then the cap (rand pinned to the top of its range)
    assert [retry_wait(503, {}, a, p, rand=lambda: 1.0) for a in (1, 2, 3, 4, 5)] == [1, 2, 4, 8, 10]
    assert [retry_wait(503, {}, a, p, rand=lambda: 0.5) for a in (1, 2, 3, 4, 5)] == [0.5, 1, 2, 4, 5]


def test_retry_after_http_date():
    now = datetime(2026, 11, 20, 8, 0, 0, tzinfo=timezone.utc)
    assert parse_retry_after("Fri, 20 Nov 2026 08:00:30 GMT", now=now) == 30
    assert parse_retry_after("120") == 120
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


def test_malformed_listing_items_become_skips():
    assert isinstance(parse_listing_item({"id": "a/b", "createdAt": "2026-11-20T08:00:00.000Z"}), HubModel)
    bad_date = parse_listing_item({"id": "a/b", "createdAt": "last tuesday"})
    assert isinstance(bad_date, ListingSkip) and bad_date.repo_id == "a/b" and "last tuesday" in bad_date.reason
    assert isinstance(parse_listing_item({"createdAt": "2026-11-20T08:00:00.000Z"}), ListingSkip)  # no id
    assert isinstance(parse_listing_item(["not", "an", "object"]), ListingSkip)
    no_date = parse_listing_item({"id": "a/b"})
    assert isinstance(no_date, ListingSkip) and "createdAt" in no_date.reason


# ---- listing ----------------------------------------------------------------------------


def test_listing_follows_link_pages_newest_first_with_expand(hub, tmp_path):
    items = list(client(hub, tmp_path).iter_models(page_size=3))
    assert len(items) == 12
    listed = hub.requests_to(r"^/api/models$")
    assert len(listed) == 4  # 12 repos, 3 per page, followed through Link headers
    first = listed[0].query
    assert first["sort"] == ["createdAt"] and sorted(first["expand"]) == sorted(LISTING_EXPAND)
    assert all("cursor" in r.query for r in listed[1:])
    models = [i for i in items if isinstance(i, HubModel)]
    times = [m.created_at for m in models]
    assert times == sorted(times, reverse=True)
    llama = next(m for m in models if m.repo_id == "acme-lab/Llama-3.2-1B-sft-v2")
    assert llama.config == {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    assert llama.library_name == "transformers" and "llama" in llama.tags and llama.sha == hub.repo(llama.repo_id).sha
    skips = [i for i in items if isinstance(i, ListingSkip)]
    assert [s.repo_id for s in skips] == ["weird-org/bad-listing"]


def test_listing_requests_no_more_pages_than_consumed(hub, tmp_path):
    it = client(hub, tmp_path).iter_models(page_size=3)
    [next(it) for _ in range(2)]
    assert len(hub.requests_to(r"^/api/models$")) == 1
    assert len(list(client(hub, tmp_path).iter_models(limit=4, page_size=3))) == 4


def test_listing_429_with_retry_after_then_success(hub, tmp_path):
    hub.inject(Fault(r"^/api/models$", 429, {"Retry-After": "1"}))
    start = time.monotonic()
    items = list(client(hub, tmp_path).iter_models(limit=3))
    waited = time.monotonic() - start
    assert len(items) == 3
    assert [r.status for r in hub.requests_to(r"^/api/models$")] == [429, 200]
    assert 1.0 <= waited < 4.0  # honoured Retry-After: 1, and no more


def test_listing_429_honours_ratelimit_header_and_5xx_backs_off(hub, tmp_path):
    sleeps: list[float] = []
    hub.inject(Fault(r"^/api/models$", 429, {"RateLimit": '"api";r=0;t=2',
                                             "RateLimit-Policy": '"fixed window";"api";q=500;w=300'}))
    hub.inject(Fault(r"^/api/models$", 503, times=2))
    policy = RetryPolicy(attempts=4, base_wait_s=0.05)
    items = list(client(hub, tmp_path, policy=policy, sleep=sleeps.append).iter_models(limit=2))
    assert len(items) == 2
    # reset time, then exponential backoff with full jitter: up to 0.1 s, then up to 0.2 s
    assert sleeps[0] == 2.0 and 0 <= sleeps[1] <= 0.05 * 2 and 0 <= sleeps[2] <= 0.05 * 4
    assert [r.status for r in hub.requests_to(r"^/api/models$")] == [429, 503, 503, 200]


def test_listing_gives_up_after_bounded_attempts(hub, tmp_path):
    hub.inject(Fault(r"^/api/models$", 429, {"Retry-After": "0"}, times=100))
    with pytest.raises(HubError) as ei:
        list(client(hub, tmp_path, sleep=lambda s: None).iter_models())
    assert ei.value.transient and ei.value.status == 429
    assert "rate limiting" in str(ei.value) and "HF_TOKEN" in str(ei.value)
    assert len(hub.requests_to(r"^/api/models$")) == FAST.attempts


def test_listing_fails_fast_when_told_to_wait_too_long(hub, tmp_path):
    hub.inject(Fault(r"^/api/models$", 429, {"Retry-After": "3600"}))
    with pytest.raises(HubError, match="wait 3600s"):
        list(client(hub, tmp_path, sleep=lambda s: pytest.fail("must not sleep")).iter_models())
    assert len(hub.requests_to(r"^/api/models$")) == 1


def test_listing_timeout_is_retried(hub, tmp_path):
    hub.inject(Fault(r"^/api/models$", None, delay_s=1.5))
    policy = RetryPolicy(attempts=2, base_wait_s=0.05, timeout_s=0.4)
    items = list(client(hub, tmp_path, policy=policy).iter_models(limit=1))
    assert len(items) == 1 and len(hub.requests_to(r"^/api/models$")) == 2


def test_listing_page_that_is_not_json(hub, tmp_path):
    hub.inject(Fault(r"^/api/models$", 200, {"Content-Type": "text/html"}, body=b"<html>proxy login</html>"))
    with pytest.raises(HubError, match="not JSON.*HF_ENDPOINT"):
        list(client(hub, tmp_path).iter_models())


def test_unreachable_hub_names_hf_endpoint_and_offline_mode(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    sleeps: list[float] = []
    with hub_requests_allowed(), pytest.raises(HubError) as ei:
        list(HubClient(policy=FAST, sleep=sleeps.append).iter_models())
    msg = str(ei.value)
    assert f"HF_ENDPOINT=http://127.0.0.1:{port}" in msg and "HF_HUB_OFFLINE" in msg
    assert ei.value.transient and len(sleeps) == FAST.attempts - 1


def test_hf_endpoint_read_at_call_time(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    c = HubClient(cache_dir=tmp_path)
    assert c.endpoint == hub.url
    assert len(list(c.iter_models(limit=2))) == 2
    assert fetch_config("qwen-fans/Qwen3-0.6B-math", cache_dir=tmp_path).config["model_type"] == "qwen3"


def test_token_goes_to_the_hub_only(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with FakeHub([FakeRepo("elsewhere/m", "2026-11-01T00:00:00.000Z")]) as other:
        # The first page's Link points at another host: that request must not carry the token.
        hub.inject(Fault(r"^/api/models$", 200, {"Link": f'<{other.url}/api/models?limit=5>; rel="next"'},
                         body=b"[]"))
        items = list(client(hub, tmp_path).iter_models())
    assert [i.repo_id for i in items] == ["elsewhere/m"]
    assert hub.requests_to(r"^/api/models$")[0].headers["authorization"] == f"Bearer {TOKEN}"
    assert "authorization" not in other.requests_to(r"^/api/models$")[0].headers


# ---- config.json ------------------------------------------------------------------------


def test_fetch_config_downloads_only_config_json_and_uses_the_cache(hub, tmp_path):
    repo = hub.repo("acme-lab/Llama-3.2-1B-sft-v2")
    cfg = fetch_config(repo.repo_id, endpoint=hub.url, cache_dir=tmp_path)
    assert cfg.config == json.loads(repo.files["config.json"])
    assert cfg.sha == repo.sha and cfg.revision == "main" and not cfg.remote_code
    assert {r.path for r in hub.requests} == {f"/{repo.repo_id}/resolve/main/config.json"}
    hub.clear_requests()
    again = fetch_config(repo.repo_id, revision=repo.sha, endpoint=hub.url, cache_dir=tmp_path)
    assert again.config == cfg.config and hub.requests == []  # pinned revision in the cache: no request


def test_fetch_config_flags_remote_code_without_fetching_code(hub, tmp_path):
    cfg = fetch_config("deepthink/DTCoder-8B", endpoint=hub.url, cache_dir=tmp_path)
    assert cfg.remote_code and cfg.config["auto_map"]["AutoModelForCausalLM"].startswith("modeling_dtcoder.")
    assert not hub.requests_to(r"\.py$")


def test_fetch_config_429_then_success(hub, tmp_path):
    hub.inject(Fault(r"/resolve/", 429, {"Retry-After": "1"}, method="HEAD"))
    cfg = fetch_config("qwen-fans/Qwen3-0.6B-math", endpoint=hub.url, cache_dir=tmp_path, policy=FAST)
    assert cfg.config["model_type"] == "qwen3"
    assert [r.status for r in hub.requests_to(r"/resolve/", "HEAD")] == [429, 200]


def test_fetch_config_5xx_retried_then_success(hub, tmp_path):
    hub.inject(Fault(r"/resolve/", 503, {"Retry-After": "0"}, method="HEAD", times=2))
    hub.inject(Fault(r"/resolve/", 502, {"Retry-After": "0"}, method="GET"))
    sleeps: list[float] = []
    cfg = fetch_config("qwen-fans/Qwen3-0.6B-math", endpoint=hub.url, cache_dir=tmp_path, policy=FAST,
                       sleep=sleeps.append)
    assert cfg.config["model_type"] == "qwen3"
    # HEAD: huggingface_hub's own retry; GET 502: ours (Retry-After 0).
    assert [r.status for r in hub.requests_to(r"/resolve/")] == [503, 503, 200, 502, 200, 200]
    assert sleeps == [0.0]


def test_fetch_config_5xx_exhausted_is_transient_and_bounded(hub, tmp_path):
    hub.inject(Fault(r"/resolve/", 503, {"Retry-After": "0"}, times=1000))
    t0 = time.monotonic()
    with pytest.raises(HubError) as ei:
        fetch_config("qwen-fans/Qwen3-0.6B-math", endpoint=hub.url, cache_dir=tmp_path, policy=FAST,
                     sleep=lambda s: pytest.fail("huggingface_hub already retried the HEAD"))
    assert ei.value.transient and ei.value.status == 503 and "try again later" in str(ei.value)
    assert len(hub.requests_to(r"/resolve/")) == 7  # 1 + huggingface_hub's 6-request backoff pass
    assert time.monotonic() - t0 < 30


def test_fetch_config_errors_say_what_to_do(hub, tmp_path):
    with pytest.raises(HubError, match="not found.*HF_TOKEN"):
        fetch_config("nobody/nothing", endpoint=hub.url, cache_dir=tmp_path)
    with pytest.raises(ConfigMissing, match="no config.json"):
        fetch_config("pixelworks/flux-lora-watercolor", endpoint=hub.url, cache_dir=tmp_path)
    with pytest.raises(HubError, match="not valid JSON"):
        fetch_config("broken-org/truncated-config", endpoint=hub.url, cache_dir=tmp_path)
    with pytest.raises(HubError, match="revision 'v9' not found"):
        fetch_config("qwen-fans/Qwen3-0.6B-math", revision="v9", endpoint=hub.url, cache_dir=tmp_path)


def test_gated_config_needs_hf_token_which_never_shows(hub, tmp_path, monkeypatch):
    repo = "gated-org/Mistral-7B-gated-ft"
    with pytest.raises(HubError, match="HF_TOKEN") as ei:
        fetch_config(repo, endpoint=hub.url, cache_dir=tmp_path)
    assert not ei.value.transient
    wrong = "hf_wrongTOKEN9876543210"
    monkeypatch.setenv("HF_TOKEN", wrong)
    with pytest.raises(HubError) as ei:
        fetch_config(repo, endpoint=hub.url, cache_dir=tmp_path)
    assert wrong not in str(ei.value)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert fetch_config(repo, endpoint=hub.url, cache_dir=tmp_path).config["model_type"] == "mistral"
    assert hub.requests_to(r"/resolve/")[-1].headers["authorization"] == f"Bearer {TOKEN}"


def test_offline_mode_uses_the_cache_and_refuses_listing(hub, tmp_path):
    """HF_HUB_OFFLINE is read at import, so the offline side runs in a fresh process."""
    cache = tmp_path / "cache"
    online = fetch_config("qwen-fans/Qwen3-0.6B-math", endpoint=hub.url, cache_dir=cache)
    hub.clear_requests()
    code = f"""
import json
from enablebot.model.hub import HubClient, HubError, fetch_config
out = {{"cached": fetch_config("qwen-fans/Qwen3-0.6B-math", cache_dir={str(cache)!r}).config}}
for what, call in (("uncached", lambda: fetch_config("acme-lab/Llama-3.2-1B-dpo", cache_dir={str(cache)!r})),
                   ("listing", lambda: list(HubClient().iter_models(limit=1)))):
    try:
        call()
    except HubError as e:
        out[what] = str(e)
print(json.dumps(out))
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": hub.url, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["cached"] == online.config
    assert "HF_HUB_OFFLINE" in out["uncached"] and "not in the local cache" in out["uncached"]
    assert "HF_HUB_OFFLINE" in out["listing"]
    assert hub.requests == []
