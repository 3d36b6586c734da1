"""The PyGithub client as the bot uses it, and GitHub errors turned into clear messages.

Configuration is the GitHub Actions convention: `GITHUB_TOKEN` and `GITHUB_API_URL`
(https://api.github.com, or https://HOST/api/v3 on GitHub Enterprise). The token is
only ever handed to PyGithub; it is never printed or logged.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import os
from typing import Iterator

import requests
from github import Auth, Github, GithubException, UnknownObjectException
from github.GithubException import BadCredentialsException, RateLimitExceededException
from github.Repository import Repository
from urllib3.util import Retry

DEFAULT_API_URL = "https://api.github.com"


class GitHubError(RuntimeError):
    """A GitHub failure explained for a person; the CLI prints it and exits 1."""


class MissingToken(ValueError):
    pass


def connect(token: str | None = None, base_url: str | None = None, *, write_interval: float = 1.0) -> Github:
    token = token or os.environ.get("GITHUB_TOKEN")
    if not token:
        raise MissingToken("GITHUB_TOKEN is not set: export a token that may write to the target repository")
    base_url = (base_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/")
    # PyGithub's default retry waits out rate limits (up to an hour in CI). Here a rate limit
    # is reported instead, and only idempotent reads are retried, on transient server errors.
    retry = Retry(
        total=3,
        backoff_factor=0.5,
        status_forcelist=(500, 502, 503, 504),
        allowed_methods=frozenset({"GET", "HEAD"}),
        raise_on_status=False,
    )
    return Github(
        base_url=base_url,
        auth=Auth.Token(token),
        retry=retry,
        timeout=30,
        seconds_between_requests=0.0,
        # GitHub asks integrations to space content-creating requests by at least a second.
        seconds_between_writes=write_interval,
    )


def _header(headers: dict[str, str] | None, name: str) -> str | None:
    for k, v in (headers or {}).items():
        if k.lower() == name.lower():
            return v
    return None


def _reset_text(headers: dict[str, str] | None) -> str:
    reset = _header(headers, "X-RateLimit-Reset")
    if reset and reset.isdigit():
        at = dt.datetime.fromtimestamp(int(reset), tz=dt.timezone.utc)
        minutes = max(0, round((at - dt.datetime.now(dt.timezone.utc)).total_seconds() / 60))
        return f"it resets at {at:%H:%M} UTC (in about {minutes} min)"
    retry_after = _header(headers, "Retry-After")
    if retry_after:
        return f"GitHub asks to wait {retry_after} s"
    return "the reset time was not given"


def explain(e: Exception, doing: str, repo: str, needs: str | None = None) -> str:
    """One clear sentence about why `doing` failed on `repo`, and what to do."""
    if isinstance(e, RateLimitExceededException):
        return f"GitHub rate limit reached while trying to {doing} on {repo}: {_reset_text(e.headers)}; retry later."
    if isinstance(e, BadCredentialsException):
        return f"GitHub rejected the token (401 Bad credentials) while trying to {doing}: check GITHUB_TOKEN."
    if isinstance(e, GithubException):
        said = (e.data or {}).get("message") if isinstance(e.data, dict) else None
        said = said or e.message or str(e.data)
        if e.status == 403:
            perm = f" ({needs})" if needs else ""
            return f"the token lacks permission to {doing} on {repo}{perm}: GitHub said {said!r}."
        if e.status == 404:
            return (
                f"could not {doing}: {repo} or the object was not found, or the token cannot see it "
                f"(GitHub said {said!r})."
            )
        errors = (e.data or {}).get("errors") if isinstance(e.data, dict) else None
        detail = "; ".join(str(x.get("message") or x) for x in errors if isinstance(x, dict)) if errors else ""
        return f"GitHub refused to {doing} on {repo} ({e.status}: {said}{'; ' + detail if detail else ''})."
    if isinstance(e, requests.exceptions.RequestException):
        return f"could not reach GitHub to {doing} on {repo}: {type(e).__name__}: {e}"
    return f"failed to {doing} on {repo}: {type(e).__name__}: {e}"


@contextlib.contextmanager
def step(doing: str, repo: str, needs: str | None = None) -> Iterator[None]:
    """Run one GitHub call; its failure becomes a GitHubError saying what was being done."""
    try:
        yield
    except (GithubException, requests.exceptions.RequestException) as e:
        raise GitHubError(explain(e, doing, repo, needs)) from e


def read_text_at(repo: Repository, path: str, ref: str) -> str | None:
    """A file's text at a commit or branch; None when the path does not exist there."""
    try:
        content = repo.get_contents(path, ref=ref)
    except UnknownObjectException:
        return None
    if isinstance(content, list):
        raise GitHubError(f"{path} is a directory in {repo.full_name} at {ref}, not a file")
    if content.encoding == "base64" and content.content:
        return content.decoded_content.decode("utf-8")
    # The contents API leaves the content out for files over 1 MB; the blob API has it.
    return base64.b64decode(repo.get_git_blob(content.sha).content).decode("utf-8")
