"""A local stand-in for the Hugging Face Hub, for tests and offline demos.

It serves, from fixture data, the routes huggingface_hub uses to list models and fetch a file:

  GET  /api/models                      sort (createdAt|lastModified|downloads|likes), direction,
                                        limit, expand; paginated with `Link: <...>; rel="next"`
                                        and an opaque `cursor`, as the Hub does
  GET  /api/models/{repo}[/revision/{rev}]
  GET  /api/models/{repo}/tree/{rev}[/{path}]   the files (snapshot_download lists a commit with it)
  HEAD /{repo}/resolve/{rev}/{file}     ETag, X-Repo-Commit, Content-Length (hf_hub_download
  GET  /{repo}/resolve/{rev}/{file}     needs them)

Errors carry the Hub's `X-Error-Code` (RepoNotFound, RevisionNotFound, EntryNotFound,
GatedRepo) so huggingface_hub raises its usual exceptions. `inject` adds faults (429 with
Retry-After / RateLimit headers, 5xx, slow or garbage answers); every request is recorded.

Fixture layout (see tests/fixtures/hub/):
  models.json                 [{id, createdAt, lastModified?, library_name?, pipeline_tag?,
                                tags?, gated?, listing_config?, listing_overrides?}, ...]
  repos/<org>/<name>/<files>  served under /{org}/{name}/resolve/...
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from .local_server import LocalServer

# Keys of config.json the Hub repeats in a listing's `config` field.
LISTING_CONFIG_KEYS = ("architectures", "model_type", "auto_map", "quantization_config")
_DEFAULT_FIELDS = ("id", "likes", "downloads", "private", "tags", "pipeline_tag", "library_name", "createdAt")


@dataclass
class FakeRepo:
    repo_id: str
    created_at: str  # ISO, e.g. 2026-11-20T08:00:00.000Z
    last_modified: str | None = None
    library_name: str | None = None
    pipeline_tag: str | None = None
    tags: list[str] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    gated: bool = False  # resolve needs `Authorization: Bearer <FakeHub.token>`
    listing_config: bool = True  # False: the listing omits `config` (as when the Hub cannot parse it)
    listing_overrides: dict[str, Any] = field(default_factory=dict)  # raw fields forced into listings
    downloads: int = 0
    likes: int = 0

    @property
    def sha(self) -> str:
        return hashlib.sha1(f"commit:{self.repo_id}".encode()).hexdigest()

    def parsed_config(self) -> dict[str, Any] | None:
        raw = self.files.get("config.json")
        if raw is None:
            return None
        try:
            cfg = json.loads(raw)
        except ValueError:
            return None
        return cfg if isinstance(cfg, dict) else None

    def info(self, fields: tuple[str, ...] | None) -> dict[str, Any]:
        """The JSON the Hub returns for this model: `_id`, `id` and the requested fields."""
        everything: dict[str, Any] = {
            "author": self.repo_id.split("/")[0] if "/" in self.repo_id else None,
            "createdAt": self.created_at,
            "lastModified": self.last_modified or self.created_at,
            "sha": self.sha,
            "private": False,
            "gated": "auto" if self.gated else False,
            "disabled": False,
            "downloads": self.downloads,
            "likes": self.likes,
            "library_name": self.library_name,
            "pipeline_tag": self.pipeline_tag,
            "tags": list(self.tags),
            "siblings": [{"rfilename": f} for f in sorted(self.files)],
        }
        cfg = self.parsed_config()
        if cfg is not None and self.listing_config:
            everything["config"] = {k: cfg[k] for k in LISTING_CONFIG_KEYS if k in cfg}
        out: dict[str, Any] = {"_id": hashlib.sha1(self.repo_id.encode()).hexdigest()[:24], "id": self.repo_id}
        for k in fields if fields is not None else tuple(everything):
            if k in everything and everything[k] is not None:
                out[k] = everything[k]
        if fields is None or "id" in fields:
            out["modelId"] = self.repo_id
        out.update(self.listing_overrides)
        return out


@dataclass
class Fault:
    """Answer matching requests with `status` (or, with status None, normally after `delay_s`)."""

    path: str  # regex searched in the request path, e.g. r"^/api/models$" or r"/resolve/"
    status: int | None = 429
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b'{"error": "injected fault"}'
    times: int = 1  # how many matching requests get it
    method: str | None = None  # GET / HEAD; None: any
    delay_s: float = 0.0


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    status: int = 0


def load_fixture_repos(root: str | Path) -> list[FakeRepo]:
    root = Path(root)
    repos = []
    for raw in json.loads((root / "models.json").read_text(encoding="utf-8")):
        repo_dir = root / "repos" / raw["id"]
        files = {}
        if repo_dir.is_dir():
            for p in sorted(repo_dir.rglob("*")):
                if p.is_file():
                    files[p.relative_to(repo_dir).as_posix()] = p.read_bytes()
        repos.append(
            FakeRepo(
                repo_id=raw["id"],
                created_at=raw["createdAt"],
                last_modified=raw.get("lastModified"),
                library_name=raw.get("library_name"),
                pipeline_tag=raw.get("pipeline_tag"),
                tags=list(raw.get("tags", [])),
                files=files,
                gated=bool(raw.get("gated", False)),
                listing_config=bool(raw.get("listing_config", True)),
                listing_overrides=dict(raw.get("listing_overrides", {})),
                downloads=int(raw.get("downloads", 0)),
                likes=int(raw.get("likes", 0)),
            )
        )
    return repos


class FakeHub(LocalServer):
    """`with FakeHub(repos) as hub:` serves on 127.0.0.1 (a free port) in a thread; `hub.url` is
    what HF_ENDPOINT or `endpoint=` takes."""

    def __init__(self, repos: Iterable[FakeRepo] = (), *, page_size: int = 50, token: str | None = None):
        self.page_size = page_size
        self.token = token  # unlocks gated repos
        self._repos: dict[str, FakeRepo] = {r.repo_id: r for r in repos}
        self._faults: list[Fault] = []
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()

    @classmethod
    def from_fixtures(cls, root: str | Path, **kwargs: Any) -> FakeHub:
        return cls(load_fixture_repos(root), **kwargs)

    @property
    def url(self) -> str:
        return self.base_url

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        return type("FakeHubHandler", (_Handler,), {"hub": self})

    @property
    def repos(self) -> list[FakeRepo]:
        with self._lock:
            return list(self._repos.values())

    # ---- knobs -------------------------------------------------------------------------
    def add_repo(self, repo: FakeRepo) -> None:
        with self._lock:
            self._repos[repo.repo_id] = repo

    def repo(self, repo_id: str) -> FakeRepo:
        return self._repos[repo_id]

    def inject(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def requests_to(self, pattern: str, method: str | None = None) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if re.search(pattern, r.path) and (method is None or r.method == method)]

    def clear_requests(self) -> None:
        with self._lock:
            self.requests.clear()

    # ---- internals used by the handler -------------------------------------------------
    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for f in self._faults:
                if f.times > 0 and (f.method is None or f.method == method) and re.search(f.path, path):
                    f.times -= 1
                    return f
        return None

    def _sorted_repos(self, sort: str | None, direction: str | None) -> list[FakeRepo]:
        with self._lock:
            repos = list(self._repos.values())
        keys = {
            "createdAt": lambda r: r.created_at,
            "lastModified": lambda r: r.last_modified or r.created_at,
            "downloads": lambda r: r.downloads,
            "likes": lambda r: r.likes,
        }
        if sort in keys:
            # Timestamps share one format, so string order is time order; ties keep id order.
            repos.sort(key=lambda r: r.repo_id)
            repos.sort(key=keys[sort], reverse=direction != "1")
        return repos


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _blob_etag(content: bytes) -> str:
    # The Hub's ETag for a regular (non-LFS) file is its git blob id.
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeHub/1.0"
    hub: FakeHub  # set per server by FakeHub.handler_class

    def log_message(self, format: str, *args: Any) -> None:  # requests are recorded instead
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def _dispatch(self, method: str) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        rec = RecordedRequest(method, path, query, {k.lower(): v for k, v in self.headers.items()})
        with self.hub._lock:
            self.hub.requests.append(rec)
        fault = self.hub._take_fault(method, path)
        if fault is not None:
            if fault.delay_s:
                time.sleep(fault.delay_s)
            if fault.status is not None:
                return self._send(rec, fault.status, fault.body, {"Content-Type": "application/json", **fault.headers})
        try:
            if path == "/api/models":
                return self._list_models(rec, query)
            if path.startswith("/api/models/") and "/tree/" in path:
                return self._tree(rec, path[len("/api/models/"):])
            if path.startswith("/api/models/"):
                return self._model_info(rec, path[len("/api/models/"):], query)
            if "/resolve/" in path:
                return self._resolve(rec, method, path)
            return self._error(rec, 404, "NotFound", f"no route for {path}")
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (e.g. a timeout test)
            return None

    # ---- routes ------------------------------------------------------------------------
    def _list_models(self, rec: RecordedRequest, query: dict[str, list[str]]) -> None:
        fields = tuple(query.get("expand", []) + query.get("expand[]", [])) or None
        repos = self.hub._sorted_repos(_first(query, "sort"), _first(query, "direction"))
        try:
            size = min(int(_first(query, "limit") or self.hub.page_size), self.hub.page_size)
            offset = json.loads(base64.urlsafe_b64decode(_first(query, "cursor") or "e30="))["offset"] \
                if _first(query, "cursor") else 0
        except (ValueError, KeyError, TypeError):
            return self._error(rec, 400, "BadRequest", "invalid limit or cursor")
        page = repos[offset: offset + size]
        headers = {"Content-Type": "application/json; charset=utf-8"}
        if offset + size < len(repos):
            cursor = base64.urlsafe_b64encode(_json_bytes({"offset": offset + size})).decode()
            next_query = {k: v for k, v in query.items() if k != "cursor"} | {"cursor": [cursor]}
            headers["Link"] = f'<{self.hub.url}/api/models?{urlencode(next_query, doseq=True)}>; rel="next"'
        body = _json_bytes([r.info(fields or _DEFAULT_FIELDS) for r in page])
        self._send(rec, 200, body, headers)

    def _model_info(self, rec: RecordedRequest, rest: str, query: dict[str, list[str]]) -> None:
        repo_id, _, revision = rest.partition("/revision/")
        repo = self.hub._repos.get(repo_id)  # dict reads are atomic; writers hold the lock
        if repo is None:
            return self._error(rec, 404, "RepoNotFound", "Repository not found")
        if revision and revision not in ("main", repo.sha):
            return self._error(rec, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
        fields = tuple(query.get("expand", []) + query.get("expand[]", [])) or None
        self._send(rec, 200, _json_bytes(repo.info(fields)), {"Content-Type": "application/json; charset=utf-8"})

    def _tree(self, rec: RecordedRequest, rest: str) -> None:
        """Every file under the path, as one page (recursive or not: fixture repos are small)."""
        repo_id, _, tail = rest.partition("/tree/")
        revision, _, prefix = tail.partition("/")
        repo = self.hub._repos.get(repo_id)
        if repo is None:
            return self._error(rec, 404, "RepoNotFound", "Repository not found")
        if revision not in ("main", repo.sha):
            return self._error(rec, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
        prefix = prefix.strip("/")
        entries = [{"type": "file", "oid": _blob_etag(content), "size": len(content), "path": name}
                   for name, content in sorted(repo.files.items())
                   if not prefix or name.startswith(prefix + "/")]
        self._send(rec, 200, _json_bytes(entries), {"Content-Type": "application/json; charset=utf-8"})

    def _resolve(self, rec: RecordedRequest, method: str, path: str) -> None:
        repo_part, _, rest = path.lstrip("/").partition("/resolve/")
        revision, _, filename = rest.partition("/")
        repo = self.hub._repos.get(repo_part)
        if repo is None:
            return self._error(rec, 404, "RepoNotFound", "Repository not found")
        if repo.gated and rec.headers.get("authorization") != f"Bearer {self.hub.token}":
            return self._error(rec, 401, "GatedRepo",
                               f"Access to model {repo.repo_id} is restricted. You must have access to it "
                               "and be authenticated to access it. Please log in.")
        if revision not in ("main", repo.sha):
            return self._error(rec, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
        content = repo.files.get(filename)
        headers = {"X-Repo-Commit": repo.sha}
        if content is None:
            return self._error(rec, 404, "EntryNotFound", f"{filename} does not exist on \"{revision}\"", headers)
        ctype = "application/json" if filename.endswith(".json") else "application/octet-stream"
        headers |= {"ETag": f'"{_blob_etag(content)}"', "Content-Type": ctype, "Accept-Ranges": "bytes"}
        self._send(rec, 200, content, headers, head=method == "HEAD")

    # ---- responses ---------------------------------------------------------------------
    def _error(self, rec: RecordedRequest, status: int, code: str, message: str,
               extra: dict[str, str] | None = None) -> None:
        headers = {"Content-Type": "application/json", "X-Error-Code": code, "X-Error-Message": message}
        self._send(rec, status, _json_bytes({"error": message}), headers | (extra or {}))

    def _send(self, rec: RecordedRequest, status: int, body: bytes, headers: dict[str, str],
              head: bool | None = None) -> None:
        rec.status = status
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("X-Request-Id", f"Root=fake-{len(self.hub.requests)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not (head if head is not None else self.command == "HEAD"):
            self.wfile.write(body)


def _first(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[0] if values else None


@contextmanager
def hub_requests_allowed() -> Iterator[None]:
    """Let huggingface_hub make requests while the test suite runs with HF_HUB_OFFLINE=1.

    The suite sets HF_HUB_OFFLINE so that nothing can reach the real Hub; huggingface_hub
    reads it once, at import, into `constants.HF_HUB_OFFLINE`. Tests that talk to a FakeHub
    (always with an explicit 127.0.0.1 endpoint) lift it for their duration only.
    """
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = False
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before
