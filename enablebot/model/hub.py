"""The Hugging Face Hub client layer: list recent models and fetch config.json, never weights.

Everything goes through the real huggingface_hub stack: its HTTP session (which enforces
HF_HUB_OFFLINE), its headers and token lookup (HF_TOKEN or the saved login), its `ModelInfo`
parsing, and `hf_hub_download` with its cache. On top of that this module adds what an
unattended watcher needs:

- The listing is paged here (the same request HfApi.list_models makes: `sort=createdAt`,
  `expand=...`, `Link: <...>; rel="next"`) instead of through HfApi.list_models, because that
  is one generator: a single malformed item raises inside it and ends the whole listing, and
  its rate-limit wait has no upper bound. Here a bad item becomes a `ListingSkip` with a
  reason and the rest continue.
- Bounded retries (`RetryPolicy`): 429 waits for the `RateLimit` reset (when `r=0`),
  `retry-after-ms` or `Retry-After` (seconds or HTTP-date); 408/5xx, timeouts and network
  errors back off exponentially with full jitter (enablebot.retry_wait, shared with the LLM). After
  `attempts` tries, or when the server asks for a wait longer than `max_wait_s`, a
  `HubError(transient=True)` tells the caller to stop and keep its cursor.
- Errors say what to do (HF_ENDPOINT, HF_HUB_OFFLINE, HF_TOKEN) and never contain the token.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# httpx2 is huggingface_hub's HTTP library; its exceptions are what the session raises.
import httpx2
from huggingface_hub import ModelInfo, constants, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

from .. import __version__
from ..results import Serializable
from ..retry_wait import parse_retry_after  # noqa: F401 - re-exported, callers and tests import it from here
from ..retry_wait import retry_wait as _wait

log = logging.getLogger(__name__)

# Listing fields the watcher reads (the Hub refuses `expand` together with full/cardData/config=True).
LISTING_EXPAND = ("config", "createdAt", "lastModified", "sha", "library_name", "pipeline_tag", "tags")
RETRY_STATUS = (408, 429, 500, 502, 503, 504)
MAX_PAGE_SIZE = 1000  # the Hub's cap on `limit` per page
_COMMIT_RE = re.compile(r"[0-9a-f]{40}")


class HubError(Exception):
    """A Hub call failed; the message says what to do. `transient`: worth retrying later."""

    def __init__(self, message: str, *, transient: bool = False, status: int | None = None):
        super().__init__(_redact(message))
        self.transient = transient
        self.status = status


class ConfigMissing(HubError):
    """The repo exists but has no config.json: not a transformers model."""


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4  # tries per request, the first included
    base_wait_s: float = 1.0  # backoff without a server hint: base, 2x, 4x, ...
    max_wait_s: float = 60.0  # longest single wait accepted; a longer Retry-After ends the call
    timeout_s: float = 10.0  # per request (connect and read)


@dataclass
class HubModel(Serializable):
    """One listing entry, as far as the watcher cares."""

    repo_id: str
    created_at: str | None = None  # ISO UTC
    sha: str | None = None
    library_name: str | None = None
    pipeline_tag: str | None = None
    tags: list[str] = field(default_factory=list)
    config: dict[str, Any] | None = None  # the listing's config subset (model_type, architectures, auto_map)


@dataclass
class ListingSkip(Serializable):
    """A listing entry that could not be read; the listing goes on without it."""

    repo_id: str
    reason: str


@dataclass
class HubConfig(Serializable):
    repo_id: str
    revision: str  # as asked ("main" by default)
    sha: str | None  # the commit it resolved to
    config: dict[str, Any]
    remote_code: bool  # auto_map present: the repo ships its own modelling code


# ---- pure helpers ---------------------------------------------------------------------------


def resolve_endpoint(endpoint: str | None = None) -> str:
    """--endpoint, else HF_ENDPOINT now (not only at import time), else huggingface_hub's default."""
    return (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def iso_utc(dt: datetime) -> str:
    """ISO 8601 in UTC as the registry writes it (2026-11-20T08:00:00+00:00); sub-seconds only when present."""
    dt = dt.astimezone(timezone.utc)
    spec = "seconds" if not dt.microsecond else "milliseconds" if dt.microsecond % 1000 == 0 else "microseconds"
    return dt.isoformat(timespec=spec)


def parse_iso(value: str) -> datetime:
    """ISO 8601 with Z or an offset; a naive value is taken as UTC."""
    dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def retry_wait(status: int | None, headers: Mapping[str, str], attempt: int, policy: RetryPolicy, *,
               rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait before the next try (enablebot.retry_wait): the server's hint (RateLimit
    reset, retry-after-ms, Retry-After) first, else jittered exponential backoff capped at max_wait_s."""
    return _wait(status, headers, attempt, base_s=policy.base_wait_s, cap_s=policy.max_wait_s, rand=rand).seconds


def parse_listing_item(item: Any) -> HubModel | ListingSkip:
    """One `/api/models` entry through huggingface_hub's ModelInfo; malformed -> ListingSkip."""
    repo_id = str(item.get("id") or item.get("modelId") or "?") if isinstance(item, dict) else "?"
    if not isinstance(item, dict):
        return ListingSkip(repo_id, f"listing entry is a {type(item).__name__}, not an object")
    try:
        info = ModelInfo(**dict(item))
    except Exception as e:  # the Hub's data is untrusted: any parse failure skips this entry only
        first = str(e).split(". ")[0][:160]
        return ListingSkip(repo_id, f"malformed listing entry ({type(e).__name__}: {first})")
    if not isinstance(info.id, str) or not info.id:
        return ListingSkip(repo_id, "listing entry without a repo id")
    if info.created_at is None:
        return ListingSkip(info.id, "listing entry without createdAt")
    tags = [str(t) for t in info.tags] if isinstance(info.tags, list) else []
    return HubModel(
        repo_id=info.id,
        created_at=iso_utc(info.created_at),
        sha=info.sha if isinstance(info.sha, str) else None,
        library_name=info.library_name if isinstance(info.library_name, str) else None,
        pipeline_tag=info.pipeline_tag if isinstance(info.pipeline_tag, str) else None,
        tags=tags,
        config=info.config if isinstance(info.config, dict) else None,
    )


def _redact(text: str) -> str:
    """Never let a token reach a message or log, whatever a server echoed back."""
    from ..redact import redact

    return redact(text)


def _endpoint_hint(endpoint: str) -> str:
    env = os.environ.get("HF_ENDPOINT")
    where = f"HF_ENDPOINT={env}" if env else f"HF_ENDPOINT is unset, so the default {constants.ENDPOINT} is used"
    return (
        f"Cannot reach the Hub at {endpoint} ({where}). Check the network or point HF_ENDPOINT "
        "(or --endpoint) at a reachable Hub or mirror. Without a network, HF_HUB_OFFLINE=1 lets "
        "commands that only need cached configs work; listing new models always needs the Hub."
    )


def _offline_message(what: str) -> str:
    return (
        f"HF_HUB_OFFLINE is set, so huggingface_hub makes no requests: {what} needs the Hub. "
        "Unset HF_HUB_OFFLINE (and TRANSFORMERS_OFFLINE), or point HF_ENDPOINT at a reachable mirror."
    )


def _http_error_message(e: HfHubHTTPError, subject: str) -> str:
    status = e.response.status_code if e.response is not None else None
    server = (getattr(e, "server_message", None) or "").strip().rstrip(".")
    detail = f": {server}" if server else ""
    if status in (401, 403):  # the Hub's own text ("Please log in") adds nothing to this
        return (
            f"{subject}: the Hub refused access (HTTP {status}); if the repo is private or gated, "
            "accept its terms on the Hub and set HF_TOKEN to a token that can read it"
        )
    return f"{subject}: the Hub answered HTTP {status}{detail}"


# ---- the client -----------------------------------------------------------------------------


class HubClient:
    """Lists models and fetches configs with bounded, header-honouring retries."""

    def __init__(
        self,
        endpoint: str | None = None,
        token: str | None = None,
        *,
        policy: RetryPolicy = RetryPolicy(),
        cache_dir: str | os.PathLike | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.endpoint = resolve_endpoint(endpoint)
        self.token = token  # None: huggingface_hub reads HF_TOKEN / the saved login per request
        self.policy = policy
        self.cache_dir = cache_dir
        self.sleep = sleep

    def iter_models(self, *, limit: int | None = None, page_size: int = 100) -> Iterator[HubModel | ListingSkip]:
        """Newest first (sort=createdAt). Pages are fetched lazily: stop iterating, stop requesting."""
        if constants.is_offline_mode():
            raise HubError(_offline_message("listing models"))
        size = max(1, min(page_size, limit or page_size, MAX_PAGE_SIZE))
        url: str | None = f"{self.endpoint}/api/models"
        params: list[tuple[str, str]] | None = [("sort", "createdAt"), ("limit", str(size))]
        params += [("expand", f) for f in LISTING_EXPAND]
        seen = 0
        while url:
            r = self._get(url, params, subject="listing models")
            try:
                page = r.json()
            except ValueError as e:
                raise HubError(
                    f"the model listing from {url} is not JSON ({e}); is HF_ENDPOINT a Hugging Face Hub?",
                    transient=True,
                ) from None
            if not isinstance(page, list):
                raise HubError(f"the model listing from {url} is not a JSON list", transient=True)
            for item in page:
                yield parse_listing_item(item)
                seen += 1
                if limit is not None and seen >= limit:
                    return
            url = r.links.get("next", {}).get("url")
            params = None  # the next link carries the query

    def fetch_config(self, repo_id: str, revision: str | None = None) -> HubConfig:
        return fetch_config(
            repo_id,
            revision=revision,
            endpoint=self.endpoint,
            token=self.token,
            cache_dir=self.cache_dir,
            policy=self.policy,
            sleep=self.sleep,
        )

    def _get(self, url: str, params: list[tuple[str, str]] | None, *, subject: str) -> httpx2.Response:
        p = self.policy
        headers = build_hf_headers(token=self.token, library_name="enablebot", library_version=__version__)
        if _origin(url) != _origin(self.endpoint):
            headers.pop("authorization", None)  # a next link elsewhere never gets the token
        for attempt in range(1, p.attempts + 1):
            status: int | None = None
            resp_headers: Mapping[str, str] = {}
            try:
                r = get_session().get(url, params=params, headers=headers, timeout=p.timeout_s, follow_redirects=True)
            except OfflineModeIsEnabled:
                raise HubError(_offline_message(subject)) from None
            except httpx2.ConnectError as e:
                problem, final = f"connection failed ({e})", _endpoint_hint(self.endpoint)
            except httpx2.TimeoutException:
                problem = f"no answer within {p.timeout_s:g}s"
                final = f"{subject}: the Hub at {self.endpoint} did not answer within {p.timeout_s:g}s, {p.attempts} times; try again later"
            except (httpx2.NetworkError, httpx2.RemoteProtocolError) as e:
                problem, final = f"network error ({e})", _endpoint_hint(self.endpoint)
            else:
                if r.status_code not in RETRY_STATUS:
                    try:
                        hf_raise_for_status(r)
                    except HfHubHTTPError as e:
                        raise HubError(_http_error_message(e, subject), status=r.status_code) from None
                    return r
                status, resp_headers = r.status_code, r.headers
                problem = f"HTTP {status}"
                final = (
                    f"{subject}: the Hub is rate limiting (HTTP 429) after {p.attempts} tries; try again later "
                    "(an HF_TOKEN raises the limit)"
                    if status == 429
                    else f"{subject}: the Hub answered HTTP {status} {p.attempts} times; try again later"
                )
            wait = retry_wait(status, resp_headers, attempt, p)
            if attempt == p.attempts:
                raise HubError(final, transient=True, status=status)
            if wait > p.max_wait_s:
                raise HubError(
                    f"{subject}: {problem}; the Hub asks to wait {wait:.0f}s, more than the {p.max_wait_s:.0f}s "
                    "this run accepts; try again later",
                    transient=True,
                    status=status,
                )
            log.warning("%s: %s from %s; retry %d/%d in %.1fs", subject, problem, url, attempt, p.attempts - 1, wait)
            self.sleep(wait)
        raise AssertionError("unreachable")  # the loop returns or raises


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc


def fetch_config(
    repo_id: str,
    *,
    revision: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    policy: RetryPolicy = RetryPolicy(),
    sleep: Callable[[float], None] = time.sleep,
) -> HubConfig:
    """Download only `config.json` of `repo_id` with hf_hub_download (cache, HF_HUB_OFFLINE, HF_TOKEN).

    hf_hub_download already retries the metadata (HEAD) request with backoff on 429/5xx and
    network errors (about 7 requests, waits capped at 8 s unless the server asks for more);
    when that gives up, the error is final here too. The download itself (GET) is retried
    by huggingface_hub only on 408/429, so a 5xx or a dropped connection there is retried
    here, `policy.attempts` times in all, honouring the server's wait.
    """
    ep = resolve_endpoint(endpoint)
    rev = revision or "main"
    subject = f"{repo_id}@{rev} config.json"
    for attempt in range(1, policy.attempts + 1):
        try:
            path = hf_hub_download(repo_id, "config.json", revision=revision, endpoint=ep, token=token,
                                   cache_dir=cache_dir, etag_timeout=policy.timeout_s)
            return _read_config(repo_id, rev, Path(path))
        except HfHubHTTPError as e:
            if _status(e) not in RETRY_STATUS or isinstance(e, EntryNotFoundError):
                raise _config_error(e, repo_id, rev, ep) from None
            status, headers = _status(e), e.response.headers
            final = HubError(_http_error_message(e, subject) + "; try again later", transient=True, status=status)
        except (httpx2.TimeoutException, httpx2.NetworkError, httpx2.RemoteProtocolError) as e:
            status, headers = None, {}
            final = HubError(f"{subject}: {type(e).__name__}. " + _endpoint_hint(ep), transient=True)
        except (EntryNotFoundError, OfflineModeIsEnabled) as e:
            raise _config_error(e, repo_id, rev, ep) from None
        wait = retry_wait(status, headers, attempt, policy)
        if attempt == policy.attempts or wait > policy.max_wait_s:
            raise final
        log.warning("%s: %s; retry %d/%d in %.1fs", subject, final, attempt, policy.attempts - 1, wait)
        sleep(wait)
    raise AssertionError("unreachable")  # the loop returns or raises


def _config_error(e: Exception, repo_id: str, rev: str, ep: str) -> HubError:
    """hf_hub_download's exception as a HubError that says what to do."""
    subject = f"{repo_id}@{rev} config.json"
    if isinstance(e, GatedRepoError):
        return HubError(_http_error_message(e, f"{repo_id}: gated repo"), status=_status(e))
    if isinstance(e, RepositoryNotFoundError):
        return HubError(f"{repo_id}: repository not found on {ep} (HTTP {_status(e)}). Check the id; if it is "
                        "private or gated, set HF_TOKEN to a token that can read it.", status=_status(e))
    if isinstance(e, RevisionNotFoundError):
        return HubError(f"{repo_id}: revision {rev!r} not found on {ep}", status=404)
    if isinstance(e, LocalEntryNotFoundError):
        # hf_hub_download could not reach the file and has no cached copy; the cause says why.
        cause = e.__cause__
        if constants.is_offline_mode() or isinstance(cause, OfflineModeIsEnabled):
            return HubError(f"{subject} is not in the local cache and HF_HUB_OFFLINE is set. Fetch it once "
                            "online (unset HF_HUB_OFFLINE) or point HF_ENDPOINT at a reachable mirror.")
        if isinstance(cause, HfHubHTTPError) and _status(cause) not in RETRY_STATUS:
            return _config_error(cause, repo_id, rev, ep) if isinstance(cause, RepositoryNotFoundError) \
                else HubError(_http_error_message(cause, subject), status=_status(cause))
        if isinstance(cause, HfHubHTTPError):
            return HubError(_http_error_message(cause, subject) + " after huggingface_hub's retries; try again later",
                            transient=True, status=_status(cause))
        return HubError(f"{subject}: {cause or e}. " + _endpoint_hint(ep), transient=True)
    if isinstance(e, EntryNotFoundError):
        return ConfigMissing(f"{repo_id} has no config.json (not a transformers model?)", status=404)
    if isinstance(e, OfflineModeIsEnabled):
        return HubError(_offline_message(f"downloading {subject}"))
    assert isinstance(e, HfHubHTTPError)
    return HubError(_http_error_message(e, subject), status=_status(e))


def _read_config(repo_id: str, revision: str, path: Path) -> HubConfig:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise HubError(f"{repo_id}: config.json is not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise HubError(f"{repo_id}: config.json is a JSON {type(config).__name__}, not an object")
    # hf_hub_download returns .../snapshots/<commit>/config.json
    sha = path.parent.name if _COMMIT_RE.fullmatch(path.parent.name) else None
    return HubConfig(
        repo_id=repo_id,
        revision=revision,
        sha=sha,
        config=config,
        remote_code=bool(config.get("auto_map")),
    )


def _status(e: HfHubHTTPError) -> int | None:
    return e.response.status_code if getattr(e, "response", None) is not None else None

