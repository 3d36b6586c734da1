"""Typed result objects shared by run, sweep, fix and pr.

Every object round-trips through JSON (`to_dict` / `from_dict`) so that a result
written by a child process, a shard or an older bot version can be read back; `from_dict`
validates (enablebot/validate.py), so a wrong type is an error, never a silently odd value.
The schema is documented in README.md ("Result schema").
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

from .validate import DataError, Strict, load_as
from .verdict import OK_VERDICTS, VERDICTS, Verdict  # noqa: F401 - re-exported for readers of results

SCHEMA_VERSION = 1


def _plain(value: Any) -> Any:
    """Enums as their values, so `to_dict()` is plain JSON data (and YAML-safe)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class Serializable(Strict):
    """Mixin: `to_dict`, and a validating `from_dict` (enablebot/validate.py: strict types, no
    unknown keys; a mismatch raises `DataError`, one line naming the field)."""

    def to_dict(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self))  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = ""):
        """`data` as this class; `where` (a file, a line, an entry) starts the error's one line."""
        return load_as(cls, data, where)


@dataclass
class Versions(Serializable):
    torch: str = ""
    transformers: str = ""
    python: str = ""
    triton: str | None = None
    cuda: str | None = None
    device_name: str | None = None


@dataclass
class UserFrame(Serializable):
    """One frame of user (model) code: where a break happened."""

    filename: str
    lineno: int
    function: str
    source: str = ""

    def short(self) -> str:
        tail = "/".join(self.filename.replace("\\", "/").split("/")[-2:])
        return f"{tail}:{self.lineno} in {self.function}"


@dataclass
class GraphBreak(Serializable):
    """One distinct graph break (same type at the same user frame), with its count."""

    gb_type: str
    registry_id: str | None = None  # GBxxxx from torch/_dynamo/graph_break_registry.json
    explanation: str = ""
    hints: list[str] = field(default_factory=list)
    context: str = ""  # Dynamo's "developer debug context"
    user_frame: UserFrame | None = None
    stack: list[UserFrame] = field(default_factory=list)
    count: int = 1
    reason: str = ""  # raw reason text as torch printed it (trimmed)
    source: str = "explain"  # explain | fullgraph
    step: str | None = None  # the scenario step that hit it (call, prefill, decode, shape_b, ...)


@dataclass
class CompileStats(Serializable):
    """Counters from torch._dynamo.utils.counters after the compiled run."""

    graphs: int = 0
    graph_breaks: int = 0
    unique_graph_breaks: int = 0
    recompiles: int = 0
    frames_total: int = 0
    frames_ok: int = 0
    fallbacks_to_eager: int = 0
    breaks_by_type: dict[str, int] = field(default_factory=dict)  # gb_type -> occurrences
    ops_captured: int = 0  # call_function nodes over every captured graph
    calls_captured: int = 0  # Dynamo's counters["stats"]["calls_captured"]


@dataclass
class StepStats(Serializable):
    """One compiled call of a scenario (call; prefill/decode; shape_a/shape_b)."""

    name: str
    graphs: int = 0  # graphs Dynamo captured during this step (a recompile adds one)
    graph_breaks: int = 0
    ops: int = 0
    recompiles: int = 0
    recompile_reasons: list[str] = field(default_factory=list)  # Dynamo's recompile log, verbatim
    first_call_s: float | None = None  # the step's first compiled call: tracing (+ codegen)


@dataclass
class Numerics(Serializable):
    """Compiled vs eager against an fp64 eager reference (torch._dynamo.utils.same rules)."""

    passed: bool
    tol: float
    method: str = ""  # allclose | rmse | cosine | exact | mismatch
    eager_deterministic: bool = True
    n_tensors: int = 0
    worst_output: str | None = None
    worst_error: float | None = None  # rmse(fp64, compiled) of the worst output
    worst_ref_error: float | None = None  # rmse(fp64, eager) of that output
    message: str = ""
    # pass | fail | inconclusive. Inconclusive: eager disagrees with itself beyond the tolerance
    # (two eager runs judged like compiled vs eager), so compiled vs eager means nothing; then
    # `passed` is False, though nothing is known to be wrong. Older results: derived from `passed`.
    status: str = ""
    eager_self_error: float | None = None  # largest rmse(eager run 1, eager run 2) when they differ

    def __post_init__(self) -> None:
        if not self.status:
            self.status = "pass" if self.passed else "fail"

    @property
    def accuracy(self) -> str:
        """PyTorch's benchmark CSV accuracy word for these numerics."""
        if self.status == "inconclusive":  # the harness's word for it; never "pass"
            return "eager_two_runs_differ"
        return "pass" if self.status == "pass" else "fail_accuracy"


@dataclass
class Timing(Serializable):
    repeats: int = 0
    eager_ms: float | None = None  # medians
    compiled_ms: float | None = None
    speedup: float | None = None
    compile_s: float | None = None  # first compiled call, tracing + codegen
    eager_peak_mb: float | None = None
    compiled_peak_mb: float | None = None
    # Spread of the repeats (ms) and why a speedup may not be trusted (enablebot/timing.py).
    eager_p10_ms: float | None = None
    eager_p90_ms: float | None = None
    compiled_p10_ms: float | None = None
    compiled_p90_ms: float | None = None
    eager_iqr_ms: float | None = None
    compiled_iqr_ms: float | None = None
    eager_cv: float | None = None  # stdev / mean
    compiled_cv: float | None = None
    cpu_steal: float | None = None  # share of CPU time stolen by the hypervisor while timing (/proc/stat)
    load_per_core: float | None = None  # 1-minute load average / cores, at the start of timing
    flags: list[str] = field(default_factory=list)  # spread, high_cv, cpu_steal, load, parallel_workers, ...
    noise: str = ""  # ok | noisy; "" = not assessed (older results): not trusted
    compile_cache: str | None = None  # warm | cold | partial: Inductor FX graph cache hits on the first compile
    # Seconds per compile phase of the first compiled calls, from Dynamo's own timers
    # (`torch._dynamo.utils.compilation_time_metrics`, keys as torch names them; nested phases
    # overlap): where a cold compile goes (Dynamo, AOT, Inductor lowering, Triton compile, autotuning).
    compile_phases: dict[str, float] = field(default_factory=dict)

    @property
    def trustworthy(self) -> bool:
        """A speedup to put in a geomean: measured, assessed, and no noise or contention flag."""
        return self.speedup is not None and self.noise == "ok"


@dataclass
class ErrorInfo(Serializable):
    stage: str  # resolve | create | eager | explain | fullgraph | compile | numerics | timing | child
    type: str
    message: str
    traceback: str = ""


@dataclass
class RunSpec(Serializable):
    """What to run: everything that changes a result is in here."""

    model_id: str
    device: str = "cpu"
    mode: str = "eval"  # eval | train
    scenario: str = "call"  # call | decode | dynamic (scenarios.py)
    pass_name: str = "inductor"  # build | dynamo | inductor (runner.PIPELINES)
    dtype: str = "float32"  # float32 | bfloat16
    backend: str = "inductor"
    dynamic: bool = False
    size: str = "tiny"  # tiny | small (a realistic small size for speed runs)
    batch_size: int = 2
    seq_len: int = 32
    repeats: int = 20
    warmup: int = 5
    seed: int = 0
    timeout_s: float = 600.0
    task: str | None = None  # base | head | a class name; None = the registry default
    numerics: bool = True
    timing: bool = True
    fullgraph_check: bool = True
    fast: bool = False  # older results: the Dynamo pass (now pass_name="dynamo")
    trace_dir: str | None = None
    allow_remote_code: bool = False
    dynamo_config: dict[str, Any] = field(default_factory=dict)  # recipes set these
    overlay_dir: str | None = None  # patched sources imported first (fix / verify)
    resolved: dict[str, Any] | None = None  # the parent's resolution (resolve.Resolved.to_dict): resolve once
    registry: str | None = None  # model_registry.yaml to read builder knowledge from (default: the repo's)

    def __post_init__(self) -> None:
        if self.fast and self.pass_name == "inductor":
            self.pass_name = "dynamo"

    @property
    def scenario_name(self) -> str:
        """The scenario that ran (older results: `dynamic` when compiled with dynamic shapes, else call)."""
        return self.scenario or ("dynamic" if self.dynamic else "call")


@dataclass
class RunResult(Serializable):
    spec: RunSpec
    verdict: Verdict
    versions: Versions = field(default_factory=Versions)
    model_type: str | None = None
    model_class: str | None = None
    modality: str | None = None
    n_params: int | None = None
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    explain_graphs: int | None = None
    explain_breaks: int | None = None
    frames_skipped: int | None = None  # frames Dynamo gave up on during explain (ran eagerly); None: not measured
    ops_captured: int | None = None  # ops summed over explain's graphs (calls captured); None: not measured
    fullgraph_ok: bool | None = None
    fullgraph_error: GraphBreak | None = None
    explain_fullgraph_disagree: bool = False
    stats: CompileStats | None = None
    numerics: Numerics | None = None
    timing: Timing | None = None
    error: ErrorInfo | None = None
    missing_dependency: str | None = None
    log_tail: str = ""
    trace_dir: str | None = None
    started_at: str = ""
    duration_s: float = 0.0
    stage_s: dict[str, float] = field(default_factory=dict)  # seconds per stage: where the time goes
    stage_cpu_s: dict[str, float] = field(default_factory=dict)  # CPU seconds per stage (this process, all threads)
    build: str = ""  # fresh | copy (of the worker's kept build of the same type, spec and registry)
    steps: list[StepStats] = field(default_factory=list)  # per compiled step of the scenario
    towers: dict[str, int] = field(default_factory=dict)  # forward calls per top-level submodule (eager)
    towers_not_run: list[str] = field(default_factory=list)  # towers (vision, audio, ...) the call never ran
    note: str = ""  # why a scenario was skipped, and other notes that are not errors
    attempts: int = 1  # runs of this item in a sweep: a `crash` is retried once on resume

    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        self.verdict = Verdict.of(self.verdict)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "") -> "RunResult":
        """A stored result; its error also names the item (its model id, when the spec has one)."""
        try:
            return load_as(cls, data)
        except DataError as e:
            spec = data.get("spec") if isinstance(data, dict) else None
            model = spec.get("model_id") if isinstance(spec, dict) else None
            raise e.at(": ".join(w for w in (where, f"entry {model}" if model else "") if w)) from None

    def __setattr__(self, name: str, value: Any) -> None:
        # Writers may set a plain word; readers always get a Verdict.
        if name == "verdict" and not isinstance(value, Verdict):
            value = Verdict.of(value)
        super().__setattr__(name, value)

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    @property
    def key(self) -> str:
        """Identity of this result inside a sweep (model, task, device, mode, dtype, scenario)."""
        s = self.spec
        return f"{s.model_id}|{s.task or 'default'}|{s.device}|{s.mode}|{s.dtype}|{s.scenario}"
