"""The LLM behind the patch agent: the real `openai` client against any OpenAI-compatible
endpoint (`OPENAI_BASE_URL`, `OPENAI_API_KEY`), with bounded retries, token and cost
accounting under a budget, and a transcript with secrets redacted.

The client's own retries are off (max_retries=0) so that every attempt, wait and failure
is ours to count and log; 429 and 5xx (and connection errors) are retried at most `retries`
times, waiting as enablebot.retry_wait says (shared with the Hub client): the server's
`retry-after-ms` / `Retry-After` (seconds or HTTP-date) as given, up to `max_wait_s` (a longer
wait ends the call with LLMUnavailable saying so), else full-jitter exponential backoff capped at
`max_backoff_s`.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ...results import Serializable
from ...retry_wait import Wait, retry_wait


class LLMUnavailable(RuntimeError):
    """No endpoint configured, or it kept failing; the loop falls back to recipes only."""


class BudgetExceeded(RuntimeError):
    pass


@dataclass
class Budget(Serializable):
    """Caps on one fix run. Cost needs prices (USD per million tokens); without them only
    the token cap applies."""

    max_total_tokens: int | None = None
    max_usd: float | None = None
    usd_per_mtok_in: float = 0.0
    usd_per_mtok_out: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def usd(self) -> float:
        return (self.prompt_tokens * self.usd_per_mtok_in + self.completion_tokens * self.usd_per_mtok_out) / 1e6

    def charge(self, prompt: int, completion: int) -> None:
        self.prompt_tokens += prompt
        self.completion_tokens += completion

    def exhausted(self) -> str | None:
        """Why no further call may be made, or None."""
        if self.max_total_tokens is not None and self.total_tokens >= self.max_total_tokens:
            return f"token budget spent ({self.total_tokens} >= {self.max_total_tokens})"
        if self.max_usd is not None and self.usd >= self.max_usd:
            return f"cost budget spent (${self.usd:.4f} >= ${self.max_usd:.4f})"
        return None


# One redaction for every file the bot writes (transcripts included): enablebot.redact.
from ...redact import SECRET_ENV, redact  # noqa: E402,F401 - re-exported for callers of fix.draft.llm


class Transcript:
    """Append-only JSONL of prompts, responses and events; every record is redacted."""

    def __init__(self, path: str | Path | None, secrets: tuple[str, ...] = ()):
        self.path = Path(path) if path else None
        self.secrets = secrets
        self.records: list[dict[str, Any]] = []
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def add(self, kind: str, **data: Any) -> None:
        record = json.loads(redact(json.dumps({"kind": kind, "t": round(time.time(), 3), **data}, default=str),
                                   self.secrets))
        self.records.append(record)
        if self.path:
            from ... import jsonl

            jsonl.append(self.path, record, sort_keys=True, secrets=self.secrets)


@dataclass
class LLMReply:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    retries: int = 0


@dataclass
class LLMClient:
    model: str
    base_url: str | None = None
    api_key: str | None = None
    max_tokens: int = 4096
    temperature: float = 0.0
    retries: int = 4
    backoff_s: float = 1.0  # backoff without a server hint: up to base, 2x, 4x, ... (full jitter)
    max_backoff_s: float = 20.0  # cap of that backoff
    max_wait_s: float = 120.0  # longest server-asked wait honoured; a longer one gives up (rate windows are a minute)
    timeout_s: float = 300.0
    budget: Budget = field(default_factory=Budget)
    transcript: Transcript | None = None
    # The waits' side effects and randomness, injectable so tests can see and pin them.
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    rand: Callable[[], float] = field(default=random.random, repr=False)
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(timezone.utc), repr=False)

    @staticmethod
    def from_env(model: str | None, **kw: Any) -> "LLMClient | None":
        """A client when an endpoint and a model are configured, else None (recipes only)."""
        base_url = kw.pop("base_url", None) or os.environ.get("OPENAI_BASE_URL")
        api_key = kw.pop("api_key", None) or os.environ.get("OPENAI_API_KEY")
        if not model or not (base_url or api_key):
            return None
        return LLMClient(model=model, base_url=base_url, api_key=api_key, **kw)

    def _client(self) -> Any:
        from openai import OpenAI

        # A local endpoint may need no key; the client insists on one being set.
        return OpenAI(base_url=self.base_url, api_key=self.api_key or "unused", max_retries=0, timeout=self.timeout_s)

    def chat(self, messages: list[dict[str, str]], *, temperature: float | None = None,
             seed: int | None = None) -> LLMReply:
        """One completion; `temperature` overrides the client's, `seed` asks for a distinct,
        repeatable sample (servers that ignore it still vary with the temperature)."""
        import openai

        why = self.budget.exhausted()
        if why:
            raise BudgetExceeded(why)
        client = self._client()
        attempt = 0
        while True:
            try:
                extra = {"seed": seed} if seed is not None else {}
                resp = client.chat.completions.create(
                    model=self.model, messages=messages, max_tokens=self.max_tokens,
                    temperature=self.temperature if temperature is None else temperature, **extra)
                break
            except (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError, ValueError) as e:
                # ValueError: a body that is not JSON (a proxy's error page, a truncated reply).
                status = getattr(e, "status_code", None)
                wait = self._wait(e, attempt)
                self._log("llm_error", status=status, error=type(e).__name__, message=str(e)[:300], attempt=attempt,
                          wait_s=round(wait.seconds, 3), wait_from=wait.source)
                if attempt >= self.retries:
                    raise LLMUnavailable(f"LLM endpoint failed {attempt + 1} times: {type(e).__name__}: {e}") from e
                if wait.too_long(self.max_wait_s):
                    raise LLMUnavailable(f"LLM endpoint asks to wait {wait.seconds:.0f}s ({wait.source}), more than the "
                                         f"{self.max_wait_s:.0f}s this run accepts (max_wait_s); try again later") from e
                self.sleep(wait.seconds)
                attempt += 1
            except openai.APIStatusError as e:  # 4xx other than 429: retrying will not help
                self._log("llm_error", status=e.status_code, error=type(e).__name__, message=str(e)[:300])
                raise LLMUnavailable(f"LLM endpoint refused the request: {e.status_code} {type(e).__name__}") from e
            except openai.APIResponseValidationError as e:
                raise LLMUnavailable(f"LLM endpoint sent a malformed response: {e}") from e
        # Untrusted structure: a compatible server may omit usage or choices.
        usage = getattr(resp, "usage", None)
        pt = int(getattr(usage, "prompt_tokens", 0) or 0)
        ct = int(getattr(usage, "completion_tokens", 0) or 0)
        self.budget.charge(pt, ct)
        choices = getattr(resp, "choices", None) or []
        choice = choices[0] if choices else None
        message = getattr(choice, "message", None)
        text = str(getattr(message, "content", "") or "")
        reply = LLMReply(text=text, prompt_tokens=pt, completion_tokens=ct,
                         finish_reason=getattr(choice, "finish_reason", None), retries=attempt)
        self._log("llm_call", model=self.model, messages=messages, response=text, prompt_tokens=pt, seed=seed,
                  temperature=self.temperature if temperature is None else temperature,
                  completion_tokens=ct, finish_reason=reply.finish_reason, retries=attempt)
        return reply

    def _wait(self, err: Exception, attempt: int) -> Wait:
        """The wait after failed try `attempt` (0-based here); a connection error has no response, so no hint."""
        response = getattr(err, "response", None)
        return retry_wait(getattr(err, "status_code", None), getattr(response, "headers", None), attempt + 1,
                          base_s=self.backoff_s, cap_s=self.max_backoff_s, rand=self.rand, now=self.clock())

    def _log(self, kind: str, **data: Any) -> None:
        if self.transcript is not None:
            self.transcript.add(kind, **data)
