"""How long to wait before retrying an HTTP call that was rate limited or failed: the one rule the
Hub client (model/hub.py) and the LLM client (fix/llm.py) share.

The server's hint wins, the first of these that is present and readable:
1. `RateLimit` (IETF draft ratelimit-headers, sent by the Hub): on a 429 with `r=0`, the reset `t`.
2. `retry-after-ms` (OpenAI and compatible servers): milliseconds, fractions allowed.
3. `Retry-After` (RFC 9110 10.2.3): delay-seconds or an HTTP-date (`Fri, 20 Nov 2026 08:00:30 GMT`).
A hint is used as given, neither shortened nor jittered: the server said when it will answer, and a
retry before that only earns another 429. Each caller has a `max_wait_s` (Hub 60 s, LLM 120 s):
a hint longer than that ends the retries with an error that says so (`Wait.too_long`), rather than
sleeping for an hour in CI or retrying early into another refusal.

Without a hint: exponential backoff with full jitter, uniform(0, min(cap, base * 2**(attempt-1))),
so clients that failed together (a nightly's shards, the agent's parallel candidates) do not retry
together. `rand` and `now` are parameters so tests can pin the jitter and the clock.
"""

from __future__ import annotations

import email.utils
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from huggingface_hub.utils import parse_ratelimit_headers


@dataclass(frozen=True)
class Wait:
    seconds: float
    source: str  # "ratelimit" | "retry-after-ms" | "retry-after" | "backoff"

    def too_long(self, max_wait_s: float) -> bool:
        """A server hint beyond what the caller accepts (backoff is capped, so never too long)."""
        return self.source != "backoff" and self.seconds > max_wait_s


def header(headers: Mapping[str, str] | None, name: str) -> str | None:
    """A header by case-insensitive name (httpx headers are; a plain dict is not)."""
    if not headers:
        return None
    name = name.lower()
    for k, v in headers.items():
        if k.lower() == name:
            return v
    return None


def _seconds(value: str, scale: float = 1.0) -> float | None:
    try:
        s = float(value) * scale
    except ValueError:
        return None
    return s if math.isfinite(s) and s >= 0 else None


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """`Retry-After`: delay-seconds or an HTTP-date (a date in the past: 0). None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    secs = _seconds(value)
    if secs is not None:
        return secs
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000" parses naive; HTTP-dates are GMT
        when = when.replace(tzinfo=timezone.utc)
    now = now or datetime.now(timezone.utc)
    return max(0.0, (when - now).total_seconds())


def parse_retry_after_ms(value: str | None) -> float | None:
    """`retry-after-ms`, in seconds. None when absent or unreadable."""
    return _seconds(value.strip(), 1e-3) if value and value.strip() else None


def backoff(attempt: int, base_s: float, cap_s: float, rand: Callable[[], float] = random.random) -> float:
    """Full-jitter exponential backoff after failed try number `attempt` (1-based)."""
    return rand() * min(base_s * 2 ** (max(attempt, 1) - 1), cap_s)


def retry_wait(status: int | None, headers: Mapping[str, str] | None, attempt: int, *, base_s: float, cap_s: float,
               rand: Callable[[], float] = random.random, now: datetime | None = None) -> Wait:
    """The wait before the next try after failed try number `attempt` (1-based): see the module note."""
    if status == 429 and headers:
        info = parse_ratelimit_headers(headers)
        if info is not None and info.remaining == 0:
            return Wait(float(info.reset_in_seconds), "ratelimit")
    ms = parse_retry_after_ms(header(headers, "retry-after-ms"))
    if ms is not None:
        return Wait(ms, "retry-after-ms")
    secs = parse_retry_after(header(headers, "retry-after"), now=now)
    if secs is not None:
        return Wait(secs, "retry-after")
    return Wait(backoff(attempt, base_s, cap_s, rand), "backoff")
