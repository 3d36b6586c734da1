"""Discover new architectures on the Hub and record them in model_registry.yaml.

One poll: list models newest first back to the cursor (or --since, bounded by --limit),
then handle them oldest first: read each config (the listing's `config` field, else
config.json through hf_hub_download), classify it, and add what is new to the registry.
The cursor (`meta.watch_cursor`, the createdAt of the newest model handled, plus
`meta.watch_cursor_repos`, the repos handled at exactly that instant) is saved with the
registry, so a restart neither misses nor repeats a model, even when several share a
timestamp. A poll that finds nothing new leaves the file byte-identical.

Classification and registry updates are pure functions over plain data; `poll`,
`run_pending` and `watch_once` do the I/O through a HubClient and a runner callable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..model.catalog import KnownArch
from ..model.hub import ConfigMissing, HubClient, HubError, HubModel, ListingSkip, iso_utc, parse_iso
from ..model.registry import ArchEntry, Registry
from ..results import RunResult, RunSpec, Serializable
from .support import record_status, status_key

log = logging.getLogger(__name__)

# Decision kinds, in the order a report lists them.
KINDS = {
    "new": "known to the installed transformers, new to the registry",
    "needs_newer_transformers": "model_type the installed transformers does not know",
    "remote_code": "remote code (auto_map / custom_code) for a model_type transformers does not know",
    "registered": "architecture already in the registry",
    "ignored": "not a transformers model",
    "skipped": "malformed listing entry or config, or the Hub refused it",
}
NEW_KINDS = ("new", "needs_newer_transformers", "remote_code")
SEEN_IN_CAP = 5  # repos kept per architecture: enough to reproduce, small enough to review

# The Hub's pipeline tags -> the registry's modality, for architectures transformers cannot describe.
PIPELINE_MODALITY = {
    "text-generation": "text", "text2text-generation": "text", "fill-mask": "text",
    "text-classification": "text", "token-classification": "text", "question-answering": "text",
    "feature-extraction": "text", "sentence-similarity": "text", "translation": "text",
    "summarization": "text", "image-classification": "vision", "image-feature-extraction": "vision",
    "object-detection": "vision", "image-segmentation": "vision", "depth-estimation": "vision",
    "automatic-speech-recognition": "audio", "audio-classification": "audio", "text-to-speech": "audio",
    "text-to-audio": "audio", "image-text-to-text": "multimodal", "visual-question-answering": "multimodal",
    "video-text-to-text": "multimodal", "any-to-any": "multimodal", "video-classification": "video",
    "time-series-forecasting": "timeseries",
}


# ---- data ---------------------------------------------------------------------------------


@dataclass
class Candidate(Serializable):
    """What the Hub says about one repo, reduced to what classification needs."""

    repo_id: str
    created_at: str | None = None
    sha: str | None = None
    library_name: str | None = None
    pipeline_tag: str | None = None
    tags: list[str] = field(default_factory=list)
    model_type: str | None = None
    architectures: list[str] = field(default_factory=list)
    auto_map: dict[str, Any] = field(default_factory=dict)
    config_source: str | None = None  # listing | config.json | None (no config)

    @property
    def remote_code(self) -> bool:
        return bool(self.auto_map) or "custom_code" in self.tags


@dataclass
class Decision(Serializable):
    repo_id: str
    kind: str  # a key of KINDS
    reason: str
    model_type: str | None = None
    created_at: str | None = None
    remote_code: bool = False
    changed: bool = False  # the registry entry changed because of this repo


@dataclass
class Cursor(Serializable):
    """Where the last poll stopped: models created at or before it are done, except ties not in `repos`."""

    created_at: str | None = None
    repos: list[str] = field(default_factory=list)  # repos handled at exactly `created_at`

    META_TIME = "watch_cursor"
    META_REPOS = "watch_cursor_repos"

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> Cursor:
        t = meta.get(cls.META_TIME)
        return cls(created_at=str(t) if t else None, repos=sorted(str(r) for r in meta.get(cls.META_REPOS) or []))

    def to_meta(self, meta: dict[str, Any]) -> None:
        if self.created_at is None:
            return
        meta[self.META_TIME] = self.created_at
        meta[self.META_REPOS] = sorted(self.repos)

    def admits(self, created_at: str, repo_id: str) -> bool:
        """True for a model this cursor has not handled yet."""
        if self.created_at is None:
            return True
        t, c = parse_iso(created_at), parse_iso(self.created_at)
        return t > c or (t == c and repo_id not in self.repos)

    def advanced(self, created_at: str, repo_id: str) -> Cursor:
        """The cursor after handling one more model (models come oldest first)."""
        if self.created_at is not None:
            t, c = parse_iso(created_at), parse_iso(self.created_at)
            if t < c:
                return self
            if t == c:
                return Cursor(self.created_at, sorted(set(self.repos) | {repo_id}))
        return Cursor(iso_utc(parse_iso(created_at)), [repo_id])


@dataclass
class RunRecord(Serializable):
    model_type: str
    model_id: str | None
    key: str  # "<device>/<mode>"
    verdict: str | None = None  # None: not run (see skipped)
    numerics_passed: bool | None = None
    speedup: float | None = None
    supported_at: str | None = None
    skipped: str | None = None


@dataclass
class WatchReport(Serializable):
    endpoint: str
    registry: str
    started_at: str
    cursor_before: Cursor
    cursor_after: Cursor
    since: str | None = None
    limit: int = 0
    listed: int = 0  # listing entries read (including ones older than the cursor that ended the scan)
    examined: int = 0  # entries handled this poll
    truncated: bool = False  # --limit ended the scan before the cursor/--since: older models were not seen
    stopped: str | None = None  # a transient Hub failure ended the poll early (the cursor stops before it)
    decisions: list[Decision] = field(default_factory=list)
    runs: list[RunRecord] = field(default_factory=list)
    saved: bool = False  # the registry file changed

    def by_kind(self, kind: str) -> list[Decision]:
        return [d for d in self.decisions if d.kind == kind]

    @property
    def new_architectures(self) -> list[str]:
        return sorted({d.model_type for d in self.decisions if d.kind in NEW_KINDS and d.changed and d.model_type})


# ---- pure functions -----------------------------------------------------------------------


def candidate_from(model: HubModel, config: Mapping[str, Any] | None, source: str | None) -> Candidate:
    """Pull model_type / architectures / auto_map out of an untrusted config, tolerating odd types."""
    config = config if isinstance(config, Mapping) else {}
    mt = config.get("model_type")
    archs = config.get("architectures")
    auto_map = config.get("auto_map")
    return Candidate(
        repo_id=model.repo_id,
        created_at=model.created_at,
        sha=model.sha,
        library_name=model.library_name,
        pipeline_tag=model.pipeline_tag,
        tags=list(model.tags),
        model_type=mt.strip() if isinstance(mt, str) and mt.strip() else None,
        architectures=[a for a in archs if isinstance(a, str)] if isinstance(archs, list) else [],
        auto_map=dict(auto_map) if isinstance(auto_map, Mapping) else {},
        config_source=source if config else None,
    )


def wants_config_download(model: HubModel) -> bool:
    """Fetch config.json only when the listing gave no usable config and the repo may be transformers."""
    if isinstance(model.config, dict) and model.config.get("model_type"):
        return False
    return model.library_name in (None, "transformers") or "transformers" in model.tags


def classify(c: Candidate, registry: Registry, known: Mapping[str, KnownArch], transformers_version: str = "") -> Decision:
    def decide(kind: str, reason: str) -> Decision:
        return Decision(c.repo_id, kind, reason, c.model_type, c.created_at, c.remote_code)

    tf = f"transformers {transformers_version}" if transformers_version else "the installed transformers"
    if not c.model_type:
        where = {"listing": "listing config", "config.json": "config.json"}.get(c.config_source or "", "no config")
        return decide("ignored", f"no model_type ({where}; library {c.library_name or 'unknown'})")
    mt = c.model_type
    entry = registry.get(mt)
    if entry is not None and not (entry.origin != "transformers" and mt in known):
        return decide("registered", "already in the registry")
    if mt in known:
        why = f"registered as Hub-only; {tf} now knows it" if entry is not None else f"known to {tf}, new here"
        if c.remote_code:
            why += " (repo ships remote code too; the native class is used)"
        return decide("new", why)
    if c.remote_code:
        return decide("remote_code", f"unknown to {tf}; repo ships its own code (auto_map/custom_code): "
                                     "recorded, not executed unless allow-listed")
    return decide("needs_newer_transformers", f"unknown to {tf}: needs a newer transformers")


def apply_decision(registry: Registry, d: Decision, c: Candidate, known: Mapping[str, KnownArch]) -> bool:
    """Record a decision in the registry (in memory). Returns whether an entry changed."""
    if d.kind not in (*NEW_KINDS, "registered") or not c.model_type:
        return False
    mt = c.model_type
    entry = registry.get(mt)
    before = entry.to_dict() if entry is not None else None  # knowledge and state alike
    if d.kind == "registered":
        assert entry is not None
        # Only architectures the watcher discovered collect more repos; seeded ones stay untouched,
        # so the thousandth llama fine-tune changes nothing.
        if not entry.seen_in:
            return False
    elif entry is None:
        entry = ArchEntry(model_type=mt, first_seen=c.created_at, first_seen_source="bot")
    if d.kind == "new":
        k = known[mt]
        entry.origin, entry.remote_code = "transformers", False
        entry.config_class, entry.base, entry.head, entry.task, entry.modality = (
            k.config_class, k.base, k.head, k.task, k.modality)
    elif d.kind in ("needs_newer_transformers", "remote_code"):
        entry.origin = "hub" if d.kind == "needs_newer_transformers" else "remote_code"
        entry.remote_code = d.kind == "remote_code"
        entry.modality = PIPELINE_MODALITY.get(c.pipeline_tag or "", entry.modality)
    if len(entry.seen_in) < SEEN_IN_CAP and c.repo_id not in entry.seen_in:
        entry.seen_in = sorted({*entry.seen_in, c.repo_id})
    named = {entry.base, entry.head, entry.config_class, *entry.classes}
    entry.classes = sorted({*entry.classes, *(a for a in c.architectures if a not in named)})
    registry.upsert(entry)
    return entry.to_dict() != before


def pending_runs(registry: Registry, *, device: str, mode: str, allow_remote_code: Iterable[str] = (),
                 spec_overrides: Mapping[str, Any] | None = None
                 ) -> list[tuple[ArchEntry, RunSpec | None, str | None]]:
    """Watcher-discovered architectures (they have `seen_in`) with no status for device/mode yet.

    Each item: (entry, spec to run or None, why not). Architectures transformers does not know
    cannot be built; remote code runs only for an allow-listed repo, and only with
    allow_remote_code=True in its spec. `spec_overrides` sets other RunSpec fields (backend, dtype, ...).
    """
    allowed = set(allow_remote_code)
    extra = {k: v for k, v in (spec_overrides or {}).items()
             if k not in ("model_id", "device", "mode", "registry", "allow_remote_code")}
    key = status_key(device, mode)
    out = []
    for mt in sorted(registry.entries, key=lambda m: (registry.entries[m].first_seen or "", m)):
        e = registry.entries[mt]
        if not e.seen_in or key in e.status:
            continue
        reg = str(registry.path)
        if e.origin == "transformers":
            out.append((e, RunSpec(model_id=mt, device=device, mode=mode, registry=reg, **extra), None))
        elif e.remote_code:
            repos = [r for r in e.seen_in if r in allowed]
            if repos:
                out.append((e, RunSpec(model_id=repos[0], device=device, mode=mode, registry=reg,
                                       allow_remote_code=True, **extra), None))
            else:
                out.append((e, None, "remote code: not run (allow one of its repos with --allow-remote-code)"))
        else:
            out.append((e, None, "needs a newer transformers: cannot be built here"))
    return out


# ---- I/O ----------------------------------------------------------------------------------


def collect_window(client: HubClient, cursor: Cursor, *, since: datetime | None, limit: int
                   ) -> tuple[list[HubModel], list[ListingSkip], int, bool]:
    """Read the listing newest first until a model older than the cursor (or since), or `limit` models.

    Returns (models to handle, oldest first; unreadable entries; entries read; truncated by limit).
    """
    models: list[HubModel] = []
    skips: list[ListingSkip] = []
    listed = 0
    floor = since if since is not None else parse_iso(cursor.created_at) if cursor.created_at else None
    for item in client.iter_models(page_size=min(limit, 100)):
        listed += 1
        if isinstance(item, ListingSkip):
            skips.append(item)
        else:
            assert item.created_at is not None
            t = parse_iso(item.created_at)
            if floor is not None and t < floor:
                return models[::-1], skips, listed, False
            if since is not None or cursor.admits(item.created_at, item.repo_id):
                models.append(item)
        if len(models) + len(skips) >= limit:
            # Without a floor (first poll) the newest `limit` models are the whole window by design.
            return models[::-1], skips, listed, floor is not None
    return models[::-1], skips, listed, False


def poll(registry: Registry, client: HubClient, *, limit: int = 100, since: datetime | None = None,
         known: Mapping[str, KnownArch] | None = None, transformers_version: str | None = None,
         now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> WatchReport:
    """One pass over the Hub; updates `registry` in memory (the caller saves it).

    `since` replaces the cursor as the lower bound (a deliberate rescan; decisions are
    idempotent, so nothing is registered twice); the cursor only ever moves forward.
    """
    if known is None:
        from ..model.catalog import known_architectures

        known = known_architectures()
    if transformers_version is None:
        transformers_version = _transformers_version()
    cursor = Cursor.from_meta(registry.meta)
    report = WatchReport(endpoint=client.endpoint, registry=str(registry.path),
                         started_at=iso_utc(now().replace(microsecond=0)),
                         cursor_before=cursor, cursor_after=cursor, since=iso_utc(since) if since else None,
                         limit=limit)
    models, skips, report.listed, report.truncated = collect_window(client, cursor, since=since, limit=limit)
    for s in skips:
        log.info("skipping %s: %s", s.repo_id, s.reason)
        report.decisions.append(Decision(s.repo_id, "skipped", s.reason))
    if report.truncated:
        log.warning("--limit %d reached before the cursor: older new models in this window were not examined", limit)
    for model in models:
        try:
            decision = _handle(registry, model, client, known, transformers_version)
        except HubError as e:
            # Transient (rate limit, outage): stop here; the cursor stays before this model.
            report.stopped = f"{model.repo_id}: {e}"
            log.warning("stopping the poll: %s", report.stopped)
            break
        report.decisions.append(decision)
        report.examined += 1
        assert model.created_at is not None
        cursor = cursor.advanced(model.created_at, model.repo_id)
    cursor.to_meta(registry.meta)
    report.cursor_after = cursor
    return report


def _handle(registry: Registry, model: HubModel, client: HubClient, known: Mapping[str, KnownArch],
            transformers_version: str) -> Decision:
    config: Mapping[str, Any] | None = model.config
    source: str | None = "listing" if config else None
    if wants_config_download(model):
        try:
            config, source = client.fetch_config(model.repo_id, revision=model.sha).config, "config.json"
        except ConfigMissing:
            config, source = None, None  # no config.json: classified below as not a transformers model
        except HubError as e:
            if e.transient:
                raise
            reason = str(e).removeprefix(f"{model.repo_id}: ")  # the repo is shown beside the reason
            log.info("skipping %s: %s", model.repo_id, reason)
            return Decision(model.repo_id, "skipped", reason, created_at=model.created_at)
    candidate = candidate_from(model, config, source)
    decision = classify(candidate, registry, known, transformers_version)
    decision.changed = apply_decision(registry, decision, candidate, known)
    return decision


def run_pending(registry: Registry, runner: Callable[[RunSpec], RunResult], *, device: str, mode: str,
                allow_remote_code: Iterable[str] = (), spec_overrides: Mapping[str, Any] | None = None,
                save: Callable[[], Any] | None = None,
                now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> list[RunRecord]:
    """Run each discovered architecture lacking a status for device/mode; save after each run
    so an interrupted --run resumes where it stopped."""
    records = []
    key = status_key(device, mode)
    for entry, spec, why in pending_runs(registry, device=device, mode=mode, allow_remote_code=allow_remote_code,
                                         spec_overrides=spec_overrides):
        if spec is None:
            records.append(RunRecord(entry.model_type, None, key, skipped=why))
            continue
        try:
            result = runner(spec)
        except Exception as e:  # the runner should turn failures into verdicts; if not, retry next time
            log.warning("run of %s failed outside the model: %s", spec.model_id, e)
            records.append(RunRecord(entry.model_type, spec.model_id, key, skipped=f"runner error: {e}"))
            continue
        st = record_status(entry, result, now=now())
        records.append(RunRecord(entry.model_type, spec.model_id, key, verdict=result.verdict,
                                 numerics_passed=st.get("numerics_passed"), speedup=st.get("speedup"),
                                 supported_at=st.get("supported_at")))
        if save is not None:
            save()
    return records


def watch_once(registry_path: str | Path | None, client: HubClient, *, limit: int = 100,
               since: datetime | None = None, run: bool = False,
               runner: Callable[[RunSpec], RunResult] | None = None, device: str = "cpu", mode: str = "eval",
               allow_remote_code: Iterable[str] = (), spec_overrides: Mapping[str, Any] | None = None,
               known: Mapping[str, KnownArch] | None = None) -> WatchReport:
    """Poll, save the registry (atomically; unchanged content is not rewritten), then with
    `run` run the pending architectures. A transient Hub failure still saves what was done."""
    registry = Registry.load(registry_path)
    report = poll(registry, client, limit=limit, since=since, known=known)
    report.saved = registry.save()
    if run:
        if runner is None:
            from ..execute.isolation import run_in_child as runner
        saves = []
        report.runs = run_pending(registry, runner, device=device, mode=mode, allow_remote_code=allow_remote_code,
                                  spec_overrides=spec_overrides, save=lambda: saves.append(registry.save()))
        report.saved = report.saved or any(saves)
    return report


def _transformers_version() -> str:
    from importlib.metadata import version

    try:
        return version("transformers")
    except Exception:  # noqa: BLE001 - only used in messages
        return ""
