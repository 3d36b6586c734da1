"""A local OpenAI-compatible chat-completions server, for tests and offline demos.

    POST /v1/chat/completions   answers with the next scripted response, in order
    GET  /v1/models             lists the served model names

Each scripted item is one of
  - a string: the assistant message content (a normal 200 completion);
  - Reply(content=..., status=200, usage=..., finish_reason=..., raw=..., headers=...): a status
    other than 200 returns an OpenAI-style error body (429 carries `Retry-After`, plus any
    `headers`); `raw` sends those bytes verbatim (malformed JSON and the like).
When the script runs out, the server answers 500 (a test asked for more than it scripted).
Every request is recorded (path, headers, parsed JSON body). Only binds 127.0.0.1.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from .local_server import LocalServer


@dataclass
class Reply:
    content: str = ""
    status: int = 200
    usage: dict[str, int] | None = None  # default: estimated from the text lengths
    finish_reason: str = "stop"
    raw: bytes | None = None
    retry_after: float | None = 0.0  # for 429s
    headers: dict[str, str] = field(default_factory=dict)  # sent with an error status (retry-after-ms, an HTTP-date ...)


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any


@dataclass
class FakeOpenAI(LocalServer):
    url_prefix = "/v1"
    script: list[Any] = field(default_factory=list)
    models: tuple[str, ...] = ("fake-coder",)
    api_key: str | None = None  # when set, requests must carry `Authorization: Bearer <api_key>`
    requests: list[Recorded] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        return _handler(self)

    @property
    def chat_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def add(self, *items: Any) -> None:
        with self._lock:
            self.script.extend(items)

    # -- behaviour ---------------------------------------------------------------------
    def _take(self) -> Reply | None:
        with self._lock:
            if self._next >= len(self.script):
                return None
            item = self.script[self._next]
            self._next += 1
        return item if isinstance(item, Reply) else Reply(content=str(item))

    def completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        prompt_chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
        usage = reply.usage or {"prompt_tokens": max(1, prompt_chars // 4),
                                "completion_tokens": max(1, len(reply.content) // 4)}
        usage = {**usage, "total_tokens": usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)}
        return {
            "id": f"chatcmpl-fake-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.models[0]),
            "choices": [{"index": 0, "finish_reason": reply.finish_reason,
                         "message": {"role": "assistant", "content": reply.content}}],
            "usage": usage,
        }


def _lower(headers: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def _handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # keep test output quiet
            pass

        def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
            kind = {401: "invalid_request_error", 429: "rate_limit_exceeded"}.get(status, "server_error")
            self._send(status, {"error": {"message": message, "type": kind, "code": kind}}, headers)

        def _authorised(self) -> bool:
            if fake.api_key is None or self.headers.get("Authorization") == f"Bearer {fake.api_key}":
                return True
            self._error(401, "Incorrect API key provided")
            return False

        def do_GET(self) -> None:  # noqa: N802 - http.server API
            fake.requests.append(Recorded(self.path, _lower(self.headers), None))
            if not self._authorised():
                return
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in fake.models]})
            else:
                self._error(404, f"no route {self.path}")

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                body = {"_unparsed": raw.decode("utf-8", "replace")}
            fake.requests.append(Recorded(self.path, _lower(self.headers), body))
            if not self._authorised():
                return
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._error(404, f"no route {self.path}")
                return
            reply = fake._take()
            if reply is None:
                self._error(500, "fake server: the script is exhausted")
            elif reply.raw is not None:
                self._send(reply.status, reply.raw)
            elif reply.status != 200:
                headers = {"Retry-After": str(reply.retry_after)} if reply.status == 429 and reply.retry_after is not None else {}
                self._error(reply.status, reply.content or f"scripted error {reply.status}", headers | reply.headers)
            else:
                self._send(200, fake.completion(body, reply))

    return Handler
