"""A small GitHub REST server on 127.0.0.1 for driving the real PyGithub client in tests.

It implements the subset of the API that `enablebot pr` and `enablebot dashboard` call
(repos, git refs/blobs/trees/commits, contents, pulls, issues and their labels) over an
in-memory state, records every request for assertions, and can be told to answer the next
matching request with a rate-limit or a permission error, as GitHub does.

Git objects are simplified: a tree is a flat {path: blob sha} mapping (what a recursive
tree listing shows), and ids are SHA-1 digests of the content, so equal trees share an id.

    with FakeGitHub() as gh:
        repo = gh.add_repo("acme/transformers", {"src/x.py": "a = 1\\n"})
        Github(base_url=gh.base_url, auth=Auth.Token(gh.token), retry=None)...
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable

from .local_server import LocalServer

# The user the token belongs to; PRs and issues are authored by it.
BOT_LOGIN = "enablebot-bot"

RATE_LIMIT_MESSAGE = (
    "API rate limit exceeded for user ID 4242. If you reach out to GitHub Support for help, "
    "please include the request ID ABCD:1234."
)
FORBIDDEN_MESSAGE = "Resource not accessible by integration"


@dataclass
class LoggedRequest:
    method: str
    path: str  # without the server prefix and the query string
    query: dict[str, str]
    body: Any
    authorized: bool
    status: int = 0


@dataclass
class Injection:
    """Answer the next `times` requests matching method + path regex with an error."""

    method: str
    path_re: str
    kind: str  # rate_limit | forbidden | server_error
    times: int = 1
    reset_in_s: int = 1800


def _sha1(kind: str, payload: bytes) -> str:
    return hashlib.sha1(f"{kind} {len(payload)}\0".encode() + payload).hexdigest()


@dataclass
class FakeRepo:
    owner: str
    name: str
    default_branch: str = "main"
    repo_id: int = 1
    refs: dict[str, str] = field(default_factory=dict)  # "heads/main" -> commit sha
    blobs: dict[str, bytes] = field(default_factory=dict)
    trees: dict[str, dict[str, str]] = field(default_factory=dict)  # sha -> {path: blob sha}
    commits: dict[str, dict[str, Any]] = field(default_factory=dict)  # sha -> {tree, parents, message}
    items: dict[int, dict[str, Any]] = field(default_factory=dict)  # issues and pulls by number
    labels: dict[str, dict[str, Any]] = field(default_factory=dict)
    next_number: int = 1

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"

    # ---- git objects -----------------------------------------------------------
    def put_blob(self, data: bytes) -> str:
        sha = _sha1("blob", data)
        self.blobs[sha] = data
        return sha

    def put_tree(self, entries: dict[str, str]) -> str:
        sha = _sha1("tree", json.dumps(entries, sort_keys=True).encode())
        self.trees[sha] = dict(entries)
        return sha

    def put_commit(self, tree: str, parents: list[str], message: str) -> str:
        raw = json.dumps({"tree": tree, "parents": parents, "message": message}, sort_keys=True)
        sha = _sha1("commit", raw.encode())
        self.commits[sha] = {"tree": tree, "parents": list(parents), "message": message}
        return sha

    def commit_files(self, branch: str, files: dict[str, str | None], message: str) -> str:
        """Test helper: commit on top of `branch` (None deletes a path) and move the branch."""
        parent = self.refs.get(f"heads/{branch}")
        entries = dict(self.trees[self.commits[parent]["tree"]]) if parent else {}
        for path, text in files.items():
            if text is None:
                entries.pop(path, None)
            else:
                entries[path] = self.put_blob(text.encode())
        sha = self.put_commit(self.put_tree(entries), [parent] if parent else [], message)
        self.refs[f"heads/{branch}"] = sha
        return sha

    # ---- reading state in tests ------------------------------------------------
    def resolve(self, ref_or_sha: str) -> str | None:
        if ref_or_sha in self.commits:
            return ref_or_sha
        for candidate in (ref_or_sha, f"heads/{ref_or_sha}", ref_or_sha.removeprefix("refs/")):
            if candidate in self.refs:
                return self.refs[candidate]
        return None

    def files_at(self, ref_or_sha: str) -> dict[str, str]:
        sha = self.resolve(ref_or_sha)
        if sha is None:
            raise KeyError(f"no ref or commit {ref_or_sha!r} in {self.full_name}")
        tree = self.trees[self.commits[sha]["tree"]]
        return {p: self.blobs[b].decode() for p, b in tree.items()}

    def pulls(self, state: str = "all") -> list[dict[str, Any]]:
        return [i for i in self.items.values() if i["kind"] == "pull" and state in ("all", i["state"])]

    def issues(self, state: str = "all") -> list[dict[str, Any]]:
        return [i for i in self.items.values() if i["kind"] == "issue" and state in ("all", i["state"])]

    def branches(self) -> list[str]:
        return sorted(r.removeprefix("heads/") for r in self.refs if r.startswith("heads/"))

    def is_ancestor(self, old: str, new: str) -> bool:
        todo, seen = [new], set()
        while todo:
            sha = todo.pop()
            if sha == old:
                return True
            if sha in seen or sha not in self.commits:
                continue
            seen.add(sha)
            todo.extend(self.commits[sha]["parents"])
        return False


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None, **extra: Any):
        super().__init__(message)
        self.status = status
        self.payload = {"message": message, "documentation_url": "https://docs.github.com/rest", **extra}
        self.headers = headers or {}


def _not_found() -> ApiError:
    return ApiError(404, "Not Found")


def _validation(message: str, **error: Any) -> ApiError:
    return ApiError(422, "Validation Failed", errors=[{"code": "custom", "message": message, **error}])


Handler = Callable[..., tuple[int, Any, dict[str, str]]]


class FakeGitHub(LocalServer):
    def __init__(self, token: str = "ghp_fake_test_token", prefix: str = "") -> None:
        self.token = token
        self.prefix = prefix.rstrip("/")  # e.g. "/api/v3" like GitHub Enterprise
        self.url_prefix = self.prefix
        self.repos: dict[str, FakeRepo] = {}
        self.requests: list[LoggedRequest] = []
        self.injections: list[Injection] = []
        self.lock = threading.RLock()
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self._add_routes()

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as separate writes

            def do_GET(self) -> None:  # noqa: N802 (http.server naming)
                fake._handle(self)

            do_POST = do_PATCH = do_PUT = do_DELETE = do_GET

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

        return _Handler

    # ---- set-up and assertions ---------------------------------------------------
    def add_repo(self, full_name: str, files: dict[str, str], default_branch: str = "main") -> FakeRepo:
        owner, name = full_name.split("/")
        repo = FakeRepo(owner=owner, name=name, default_branch=default_branch, repo_id=len(self.repos) + 1)
        repo.commit_files(default_branch, dict(files), "initial commit")
        self.repos[full_name] = repo
        return repo

    def open_pull(self, full_name: str, head: str, title: str, body: str, labels: list[str]) -> int:
        """Test helper: an open PR from `head` (branched off the default branch if missing)."""
        repo = self.repos[full_name]
        repo.refs.setdefault(f"heads/{head}", repo.refs[f"heads/{repo.default_branch}"])
        item = self._new_item(repo, "pull", {"title": title, "body": body, "labels": labels})
        item.update(head=head, base=repo.default_branch, head_sha=repo.refs[f"heads/{head}"])
        return item["number"]

    def inject(self, method: str, path_re: str, kind: str, times: int = 1, reset_in_s: int = 1800) -> None:
        if kind not in ("rate_limit", "forbidden", "server_error"):
            raise ValueError(kind)
        self.injections.append(Injection(method.upper(), path_re, kind, times, reset_in_s))

    def calls(self, method: str | None = None, path_re: str | None = None) -> list[LoggedRequest]:
        with self.lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method.upper()) and (path_re is None or re.search(path_re, r.path))
            ]

    def writes(self) -> list[LoggedRequest]:
        return [r for r in self.calls() if r.method != "GET"]

    def clear_log(self) -> None:
        with self.lock:
            self.requests.clear()

    # ---- HTTP plumbing -----------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        parsed = urllib.parse.urlsplit(h.path)
        path = urllib.parse.unquote(parsed.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(parsed.query).items()}
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        auth = h.headers.get("Authorization", "")
        authorized = auth in (f"token {self.token}", f"Bearer {self.token}")
        entry = LoggedRequest(h.command, path.removeprefix(self.prefix), query, body, authorized)
        with self.lock:
            self.requests.append(entry)
            try:
                status, payload, headers = self._dispatch(h.command, path, query, body, authorized)
            except ApiError as e:
                status, payload, headers = e.status, e.payload, e.headers
            entry.status = status
        data = b"" if status == 204 else json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json; charset=utf-8")
        h.send_header("Content-Length", str(len(data)))
        h.send_header("X-RateLimit-Limit", headers.pop("X-RateLimit-Limit", "5000"))
        h.send_header("X-RateLimit-Remaining", headers.pop("X-RateLimit-Remaining", "4999"))
        h.send_header("X-RateLimit-Reset", headers.pop("X-RateLimit-Reset", str(int(time.time()) + 3600)))
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        if data:
            h.wfile.write(data)

    def _dispatch(
        self, method: str, path: str, query: dict[str, str], body: Any, authorized: bool
    ) -> tuple[int, Any, dict[str, str]]:
        if not path.startswith(self.prefix + "/"):
            raise _not_found()
        path = path.removeprefix(self.prefix)
        if not authorized:
            raise ApiError(401, "Bad credentials")
        for inj in self.injections:
            if inj.times > 0 and inj.method == method and re.search(inj.path_re, path):
                inj.times -= 1
                raise self._injected_error(inj)
        for route_method, pattern, handler in self._routes:
            m = pattern.fullmatch(path)
            if route_method == method and m:
                groups = m.groupdict()
                repo = self.repos.get(f"{groups.pop('owner')}/{groups.pop('repo')}")
                if repo is None:
                    raise _not_found()
                return handler(repo, query=query, body=body or {}, **groups)
        raise _not_found()

    @staticmethod
    def _injected_error(inj: Injection) -> ApiError:
        if inj.kind == "rate_limit":
            reset = int(time.time()) + inj.reset_in_s
            return ApiError(
                403,
                RATE_LIMIT_MESSAGE,
                {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset), "X-RateLimit-Used": "5000"},
            )
        if inj.kind == "forbidden":
            return ApiError(403, FORBIDDEN_MESSAGE)
        return ApiError(502, "Server Error")

    # ---- JSON shapes ---------------------------------------------------------------
    def _api(self, repo: FakeRepo, suffix: str = "") -> str:
        return f"{self.base_url}/repos/{repo.full_name}{suffix}"

    def _repo_json(self, repo: FakeRepo) -> dict[str, Any]:
        return {
            "id": repo.repo_id,
            "name": repo.name,
            "full_name": repo.full_name,
            "owner": {"login": repo.owner, "id": 1000 + repo.repo_id, "type": "Organization"},
            "private": False,
            "default_branch": repo.default_branch,
            "url": self._api(repo),
            "html_url": f"https://github.test/{repo.full_name}",
            "permissions": {"admin": False, "push": True, "pull": True},
        }

    def _ref_json(self, repo: FakeRepo, ref: str) -> dict[str, Any]:
        sha = repo.refs[ref]
        return {
            "ref": f"refs/{ref}",
            "url": self._api(repo, f"/git/refs/{ref}"),
            "object": {"sha": sha, "type": "commit", "url": self._api(repo, f"/git/commits/{sha}")},
        }

    def _commit_json(self, repo: FakeRepo, sha: str) -> dict[str, Any]:
        c = repo.commits[sha]
        return {
            "sha": sha,
            "url": self._api(repo, f"/git/commits/{sha}"),
            "message": c["message"],
            "tree": {"sha": c["tree"], "url": self._api(repo, f"/git/trees/{c['tree']}")},
            "parents": [{"sha": p, "url": self._api(repo, f"/git/commits/{p}")} for p in c["parents"]],
        }

    def _tree_json(self, repo: FakeRepo, sha: str) -> dict[str, Any]:
        entries = [
            {"path": p, "mode": "100644", "type": "blob", "sha": b, "size": len(repo.blobs[b])}
            for p, b in sorted(repo.trees[sha].items())
        ]
        return {"sha": sha, "url": self._api(repo, f"/git/trees/{sha}"), "tree": entries, "truncated": False}

    def _label_json(self, repo: FakeRepo, name: str) -> dict[str, Any]:
        return {"name": name, "color": "ededed", "url": self._api(repo, f"/labels/{urllib.parse.quote(name)}")}

    def _item_json(self, repo: FakeRepo, item: dict[str, Any], as_issue: bool = False) -> dict[str, Any]:
        n = item["number"]
        data: dict[str, Any] = {
            "id": 50000 + n,
            "number": n,
            "state": item["state"],
            "title": item["title"],
            "body": item["body"],
            "user": {"login": BOT_LOGIN, "id": 4242, "type": "User"},
            "labels": [self._label_json(repo, name) for name in item["labels"]],
            "created_at": item["created_at"],
            "updated_at": item["updated_at"],
        }
        if item["kind"] == "issue":
            data["url"] = self._api(repo, f"/issues/{n}")
            data["html_url"] = f"https://github.test/{repo.full_name}/issues/{n}"
            return data
        html = f"https://github.test/{repo.full_name}/pull/{n}"
        if as_issue:
            data["url"] = self._api(repo, f"/issues/{n}")
            data["html_url"] = html
            data["pull_request"] = {"url": self._api(repo, f"/pulls/{n}"), "html_url": html}
            return data
        head_sha = repo.refs.get(f"heads/{item['head']}", item["head_sha"])
        item["head_sha"] = head_sha
        data.update(
            {
                "url": self._api(repo, f"/pulls/{n}"),
                "html_url": html,
                "issue_url": self._api(repo, f"/issues/{n}"),
                "merged": item.get("merged", False),
                "draft": item.get("draft", False),
                "maintainer_can_modify": item.get("maintainer_can_modify", False),
                "head": {
                    "ref": item["head"],
                    "sha": head_sha,
                    "label": f"{repo.owner}:{item['head']}",
                    "repo": self._repo_json(repo),
                },
                "base": {
                    "ref": item["base"],
                    "sha": repo.refs.get(f"heads/{item['base']}", ""),
                    "label": f"{repo.owner}:{item['base']}",
                    "repo": self._repo_json(repo),
                },
            }
        )
        return data

    def _paginate(self, items: list[Any], query: dict[str, str], path: str) -> tuple[int, Any, dict[str, str]]:
        per_page = int(query.get("per_page", 30))
        page = int(query.get("page", 1))
        chunk = items[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(items):
            q = dict(query, page=str(page + 1), per_page=str(per_page))
            headers["Link"] = f'<{self.base_url}{path}?{urllib.parse.urlencode(q)}>; rel="next"'
        return 200, chunk, headers

    # ---- routes ------------------------------------------------------------------------
    def _add_routes(self) -> None:
        r = r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)"
        table: list[tuple[str, str, Handler]] = [
            ("GET", "", self._get_repo),
            ("GET", "/git/ref/(?P<ref>.+)", self._get_ref),
            ("GET", "/git/refs/(?P<ref>.+)", self._get_ref),
            ("POST", "/git/refs", self._create_ref),
            ("PATCH", "/git/refs/(?P<ref>.+)", self._update_ref),
            ("DELETE", "/git/refs/(?P<ref>.+)", self._delete_ref),
            ("GET", "/git/blobs/(?P<sha>[0-9a-f]+)", self._get_blob),
            ("POST", "/git/blobs", self._create_blob),
            ("GET", "/git/trees/(?P<sha>[0-9a-f]+)", self._get_tree),
            ("POST", "/git/trees", self._create_tree),
            ("GET", "/git/commits/(?P<sha>[0-9a-f]+)", self._get_commit),
            ("POST", "/git/commits", self._create_commit),
            ("GET", "/contents/(?P<path>.+)", self._get_contents),
            ("GET", "/pulls", self._list_pulls),
            ("POST", "/pulls", self._create_pull),
            ("GET", r"/pulls/(?P<number>\d+)", self._get_pull),
            ("PATCH", r"/pulls/(?P<number>\d+)", self._edit_pull),
            ("GET", r"/pulls/(?P<number>\d+)/files", self._pull_files),
            ("GET", "/issues", self._list_issues),
            ("POST", "/issues", self._create_issue),
            ("GET", r"/issues/(?P<number>\d+)", self._get_issue),
            ("PATCH", r"/issues/(?P<number>\d+)", self._edit_issue),
            ("POST", r"/issues/(?P<number>\d+)/labels", self._add_labels),
            ("PUT", r"/issues/(?P<number>\d+)/labels", self._set_labels),
        ]
        self._routes = [(m, re.compile(r + suffix), h) for m, suffix, h in table]

    def _get_repo(self, repo: FakeRepo, **_: Any):
        return 200, self._repo_json(repo), {}

    # git refs
    def _get_ref(self, repo: FakeRepo, ref: str, **_: Any):
        ref = ref.removeprefix("refs/")
        if ref not in repo.refs:
            raise _not_found()
        return 200, self._ref_json(repo, ref), {}

    def _create_ref(self, repo: FakeRepo, body: dict[str, Any], **_: Any):
        ref, sha = str(body.get("ref", "")), body.get("sha")
        if not ref.startswith("refs/") or ref.count("/") < 2:
            raise _validation("Reference name must start with 'refs/' and have at least two slashes")
        if sha not in repo.commits:
            raise _validation("Object does not exist")
        short = ref.removeprefix("refs/")
        if short in repo.refs:
            raise ApiError(422, "Reference already exists")
        repo.refs[short] = sha
        return 201, self._ref_json(repo, short), {}

    def _update_ref(self, repo: FakeRepo, ref: str, body: dict[str, Any], **_: Any):
        ref = ref.removeprefix("refs/")
        if ref not in repo.refs:
            raise ApiError(422, "Reference does not exist")
        sha = body.get("sha")
        if sha not in repo.commits:
            raise _validation("Object does not exist")
        if not body.get("force") and not repo.is_ancestor(repo.refs[ref], sha):
            raise ApiError(422, "Update is not a fast forward")
        repo.refs[ref] = sha
        return 200, self._ref_json(repo, ref), {}

    def _delete_ref(self, repo: FakeRepo, ref: str, **_: Any):
        ref = ref.removeprefix("refs/")
        if ref not in repo.refs:
            raise ApiError(422, "Reference does not exist")
        del repo.refs[ref]
        return 204, None, {}

    # git objects
    def _get_blob(self, repo: FakeRepo, sha: str, **_: Any):
        if sha not in repo.blobs:
            raise _not_found()
        data = repo.blobs[sha]
        return 200, {
            "sha": sha,
            "size": len(data),
            "url": self._api(repo, f"/git/blobs/{sha}"),
            "encoding": "base64",
            "content": base64.b64encode(data).decode(),
        }, {}

    def _create_blob(self, repo: FakeRepo, body: dict[str, Any], **_: Any):
        content, encoding = body.get("content"), body.get("encoding", "utf-8")
        if not isinstance(content, str):
            raise _validation("content is missing")
        data = base64.b64decode(content) if encoding == "base64" else content.encode()
        sha = repo.put_blob(data)
        return 201, {"sha": sha, "url": self._api(repo, f"/git/blobs/{sha}")}, {}

    def _get_tree(self, repo: FakeRepo, sha: str, **_: Any):
        if sha not in repo.trees:
            raise _not_found()
        return 200, self._tree_json(repo, sha), {}

    def _create_tree(self, repo: FakeRepo, body: dict[str, Any], **_: Any):
        base = body.get("base_tree")
        if base is not None and base not in repo.trees:
            raise _validation("base_tree is not a valid tree")
        entries = dict(repo.trees[base]) if base else {}
        for e in body.get("tree", []):
            path = e.get("path")
            if e.get("type") != "blob" or e.get("mode") not in ("100644", "100755"):
                raise _validation(f"unsupported tree entry for {path}")
            if "content" in e:
                entries[path] = repo.put_blob(str(e["content"]).encode())
            elif e.get("sha") is None:
                if path not in entries:
                    raise _validation(f"cannot delete {path}: not in base tree")
                del entries[path]
            elif e["sha"] in repo.blobs:
                entries[path] = e["sha"]
            else:
                raise _validation(f"tree.sha {e['sha']} is not a valid blob")
        sha = repo.put_tree(entries)
        return 201, self._tree_json(repo, sha), {}

    def _get_commit(self, repo: FakeRepo, sha: str, **_: Any):
        if sha not in repo.commits:
            raise _not_found()
        return 200, self._commit_json(repo, sha), {}

    def _create_commit(self, repo: FakeRepo, body: dict[str, Any], **_: Any):
        tree, parents = body.get("tree"), list(body.get("parents") or [])
        if tree not in repo.trees or any(p not in repo.commits for p in parents):
            raise _validation("tree or parent sha is not valid")
        sha = repo.put_commit(tree, parents, str(body.get("message", "")))
        return 201, self._commit_json(repo, sha), {}

    def _get_contents(self, repo: FakeRepo, path: str, query: dict[str, str], **_: Any):
        sha = repo.resolve(query.get("ref", repo.default_branch))
        if sha is None:
            raise ApiError(404, f"No commit found for the ref {query.get('ref')}")
        tree = repo.trees[repo.commits[sha]["tree"]]
        if path not in tree:
            raise _not_found()
        data = repo.blobs[tree[path]]
        return 200, {
            "type": "file",
            "encoding": "base64",
            "size": len(data),
            "name": path.rsplit("/", 1)[-1],
            "path": path,
            "sha": tree[path],
            "content": base64.b64encode(data).decode(),
            "url": self._api(repo, f"/contents/{path}?ref={sha}"),
        }, {}

    # pulls
    def _pull(self, repo: FakeRepo, number: str) -> dict[str, Any]:
        item = repo.items.get(int(number))
        if item is None or item["kind"] != "pull":
            raise _not_found()
        return item

    def _list_pulls(self, repo: FakeRepo, query: dict[str, str], **_: Any):
        state = query.get("state", "open")
        head = query.get("head")
        items = []
        for item in sorted(repo.pulls(state), key=lambda i: -i["number"]):
            if head and head not in (item["head"], f"{repo.owner}:{item['head']}"):
                continue
            if query.get("base") and query["base"] != item["base"]:
                continue
            items.append(self._item_json(repo, item))
        return self._paginate(items, query, f"/repos/{repo.full_name}/pulls")

    def _create_pull(self, repo: FakeRepo, body: dict[str, Any], **_: Any):
        head = str(body.get("head", "")).split(":")[-1]
        base = str(body.get("base", ""))
        if not body.get("title"):
            raise _validation("title is missing", field="title")
        if f"heads/{head}" not in repo.refs:
            raise _validation("head is invalid", resource="PullRequest", field="head", code="invalid")
        if f"heads/{base}" not in repo.refs:
            raise _validation("base is invalid", resource="PullRequest", field="base", code="invalid")
        for item in repo.pulls("open"):
            if item["head"] == head:
                raise _validation(f"A pull request already exists for {repo.owner}:{head}.")
        item = self._new_item(repo, "pull", body)
        item.update(
            head=head,
            base=base,
            head_sha=repo.refs[f"heads/{head}"],
            draft=bool(body.get("draft", False)),
            maintainer_can_modify=bool(body.get("maintainer_can_modify", False)),
        )
        return 201, self._item_json(repo, item), {}

    def _get_pull(self, repo: FakeRepo, number: str, **_: Any):
        return 200, self._item_json(repo, self._pull(repo, number)), {}

    def _edit_pull(self, repo: FakeRepo, number: str, body: dict[str, Any], **_: Any):
        item = self._pull(repo, number)
        self._edit(item, body)
        return 200, self._item_json(repo, item), {}

    def _pull_files(self, repo: FakeRepo, number: str, query: dict[str, str], **_: Any):
        item = self._pull(repo, number)
        head = repo.commits[item["head_sha"]]
        old = repo.trees[repo.commits[head["parents"][0]]["tree"]] if head["parents"] else {}
        new = repo.trees[head["tree"]]
        files = []
        for path in sorted(set(old) | set(new)):
            if old.get(path) == new.get(path):
                continue
            status = "added" if path not in old else "removed" if path not in new else "modified"
            files.append({"filename": path, "status": status, "sha": new.get(path, old.get(path))})
        return self._paginate(files, query, f"/repos/{repo.full_name}/pulls/{number}/files")

    # issues
    def _new_item(self, repo: FakeRepo, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        item = {
            "kind": kind,
            "number": repo.next_number,
            "state": "open",
            "title": body.get("title", ""),
            "body": body.get("body"),
            "labels": [],
            "created_at": now,
            "updated_at": now,
        }
        repo.next_number += 1
        repo.items[item["number"]] = item
        for name in body.get("labels") or []:
            self._ensure_label(repo, item, name)
        return item

    def _ensure_label(self, repo: FakeRepo, item: dict[str, Any], name: str) -> None:
        # GitHub creates labels that do not exist yet when they are applied.
        repo.labels.setdefault(name, {"name": name})
        if name not in item["labels"]:
            item["labels"].append(name)

    @staticmethod
    def _edit(item: dict[str, Any], body: dict[str, Any]) -> None:
        for key in ("title", "body", "state"):
            if key in body:
                item[key] = body[key]
        item["updated_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def _issue(self, repo: FakeRepo, number: str) -> dict[str, Any]:
        item = repo.items.get(int(number))
        if item is None:
            raise _not_found()
        return item

    def _list_issues(self, repo: FakeRepo, query: dict[str, str], **_: Any):
        state = query.get("state", "open")
        wanted = [x for x in query.get("labels", "").split(",") if x]
        items = [
            self._item_json(repo, item, as_issue=True)
            for item in sorted(repo.items.values(), key=lambda i: -i["number"])
            if state in ("all", item["state"]) and all(w in item["labels"] for w in wanted)
        ]
        return self._paginate(items, query, f"/repos/{repo.full_name}/issues")

    def _create_issue(self, repo: FakeRepo, body: dict[str, Any], **_: Any):
        if not body.get("title"):
            raise _validation("title is missing", field="title")
        item = self._new_item(repo, "issue", body)
        return 201, self._item_json(repo, item), {}

    def _get_issue(self, repo: FakeRepo, number: str, **_: Any):
        return 200, self._item_json(repo, self._issue(repo, number), as_issue=True), {}

    def _edit_issue(self, repo: FakeRepo, number: str, body: dict[str, Any], **_: Any):
        item = self._issue(repo, number)
        self._edit(item, body)
        if "labels" in body:
            item["labels"] = []
            for name in body["labels"]:
                self._ensure_label(repo, item, name)
        return 200, self._item_json(repo, item, as_issue=True), {}

    def _add_labels(self, repo: FakeRepo, number: str, body: Any, **_: Any):
        item = self._issue(repo, number)
        names = body.get("labels", []) if isinstance(body, dict) else body
        for name in names:
            self._ensure_label(repo, item, name)
        return 200, [self._label_json(repo, n) for n in item["labels"]], {}

    def _set_labels(self, repo: FakeRepo, number: str, body: Any, **_: Any):
        item = self._issue(repo, number)
        item["labels"] = []
        return self._add_labels(repo, number=number, body=body)
