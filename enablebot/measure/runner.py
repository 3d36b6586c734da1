"""One model through eager and torch.compile, in this process.

A run is a pipeline of stages chosen by the pass (`spec.pass_name`), each a row of
(name, verdict on error, function). A failing stage sets that verdict and ends the run; one
function (`decide`) turns what the stages recorded into the verdict of a run that completed.
Passes:

  build     prepare -> plan -> eager                           (does the harness build and run it?)
  dynamo    ... -> trace (eager backend) -> fullgraph check    (every graph break, cheap)
  inductor  ... -> reference -> trace (the chosen backend) -> fullgraph check -> numerics -> timing

The scenario (`spec.scenario`: call, decode, dynamic; see scenarios.py) decides the steps a
run calls: one forward (call), a prefill and a decode step (decode), two shapes (dynamic).
`trace` compiles the model ONCE with a backend wrapped in Dynamo's ExplainWithBackend and runs
every step through it, so one Dynamo trace gives the graph breaks with their user frames, the
counters, the recompiles per step and (inductor pass) the compiled module that numerics and
timing use. The fullgraph=True check runs only when that trace found a break (explain and
fullgraph=True can disagree, e.g. on `.item()`).

`execute.run_in_child` wraps this in a subprocess with a timeout; call that, not this, for
anything that may crash or hang.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import logging
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from . import graph_breaks
from . import guard_profile
from . import numerics
from . import timing
from .. import versions
from ..results import CompileStats, ErrorInfo, RunResult, RunSpec, StepStats, Timing
from .tensors import to_device, torch_dtype
from ..verdict import Verdict


# ---- errors -> verdicts ---------------------------------------------------------------------
class StageFailed(Exception):
    def __init__(self, verdict: Verdict, info: ErrorInfo):
        super().__init__(info.message)
        self.verdict, self.info = verdict, info


class EndRun(Exception):
    """A stage decided the verdict without an error (e.g. the scenario does not apply)."""

    def __init__(self, verdict: Verdict, note: str = ""):
        super().__init__(note)
        self.verdict, self.note = verdict, note


def error_info(stage: str, exc: BaseException) -> ErrorInfo:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return ErrorInfo(stage=stage, type=type(exc).__name__, message=str(exc)[:4000], traceback=tb[-6000:])


# ---- recompiles -----------------------------------------------------------------------------
class _RecompileLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if msg.startswith("Recompiling"):
            self.reasons.append(msg.strip()[:2000])

    @property
    def count(self) -> int:
        return len(self.reasons)


@contextlib.contextmanager
def recompile_log():
    """Dynamo's recompile log (what TORCH_LOGS=recompiles prints), each message a reason."""
    import torch

    log = _RecompileLog()
    torch._logging.set_logs(recompiles=True)
    loggers = [logging.getLogger(n) for n in list(logging.Logger.manager.loggerDict) if n.endswith("__recompiles")]
    for lg in loggers:
        lg.addHandler(log)
    try:
        yield log
    finally:
        for lg in loggers:
            lg.removeHandler(log)
        torch._logging.set_logs()


# ---- small helpers --------------------------------------------------------------------------
def apply_dynamo_config(settings: dict[str, Any]) -> None:
    import torch._dynamo

    for key, value in settings.items():
        if not hasattr(torch._dynamo.config, key):
            raise ValueError(f"torch._dynamo.config has no setting {key!r}")
        setattr(torch._dynamo.config, key, value)


def make_call(model: Any, mode: str) -> Callable[[Any, dict[str, Any]], Any]:
    """`call(fn_model, inputs)`: one step of the eager or compiled module. eval -> the outputs;
    train -> the outputs plus every parameter gradient of a loss (forward + backward)."""
    import torch

    from ..model.loss import loss_from_outputs

    if mode == "eval":
        def eval_call(fn_model: Any, inputs: dict[str, Any]) -> Any:
            with torch.no_grad():
                return fn_model(**inputs)

        return eval_call

    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]

    def train_call(fn_model: Any, inputs: dict[str, Any]) -> Any:
        for _, p in params:
            p.grad = None
        out = fn_model(**inputs)
        loss = loss_from_outputs(out)
        loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in params if p.grad is not None}
        return {"loss": loss.detach(), "outputs": out, "grads": grads}

    return train_call


# ---- the run's state ------------------------------------------------------------------------
@dataclass
class Run:
    """What the stages share. Stages read and write it; only `decide` turns it into a verdict."""

    spec: RunSpec
    result: RunResult
    say: Callable[[str], None]
    resolved: Any = None  # model.resolve.Resolved
    prepared: Any = None
    model: Any = None
    plan: Any = None  # scenarios.ScenarioPlan
    call: Callable[[Any, dict[str, Any]], Any] | None = None
    eager_outs: list[Any] = field(default_factory=list)
    deterministic: bool = True
    eager_again: list[Any] | None = None  # the second eager run, kept when it differs (numerics: inconclusive?)
    compile_cache: str | None = None  # warm | cold | partial: the Inductor cache during the first compiled calls
    fp64_outs: list[Any] | None = None
    compiled: Any = None
    compiled_outs: list[Any] = field(default_factory=list)
    found_break: bool = False
    several_graphs: bool = False  # a step captured more than one graph (with or without a break reason)
    model_files: frozenset[str] = frozenset()  # the model's own source files: where user frames are

    def steps_through(self, fn_model: Any, *, plan: Any = None) -> list[Any]:
        """Every step of the scenario through `fn_model`, with fresh inputs each."""
        plan = plan or self.plan
        return [self.call(fn_model, step.make_inputs()) for step in plan.steps]


# ---- stages ---------------------------------------------------------------------------------
def _resolve(run: Run) -> None:
    """The id -> registry entry, config source, classes. Its own stage: a failure here is bad
    input (an unknown id, a malformed config, remote code refused), which `run` exits 2 on."""
    from ..model.prepare import resolve_spec

    run.resolved = resolve_spec(run.spec)


def _prepare(run: Run) -> None:
    from ..model.prepare import prepare

    spec, result = run.spec, run.result
    prepared = prepare(spec, run.resolved)
    run.prepared = prepared
    result.build = "copy" if prepared.copied else "fresh"
    result.model_type, result.model_class, result.modality = (prepared.model_type, prepared.class_name,
                                                              prepared.modality)
    result.n_params = sum(p.numel() for p in prepared.model.parameters())
    run.model = prepared.model.to(device=spec.device, dtype=torch_dtype(spec.dtype))
    if spec.mode == "train":
        run.model.train()
    run.call = make_call(run.model, spec.mode)
    run.model_files = graph_breaks.model_files(run.model)


def _plan(run: Run) -> None:
    from . import scenarios

    spec = run.spec
    inputs = to_device(run.prepared.inputs, spec.device, torch_dtype(spec.dtype))
    run.plan = scenarios.plan(spec.scenario, run.model, run.prepared.config, inputs, run.prepared.modality,
                              spec.mode, recipe=run.prepared.recipe)
    if run.plan.skip_reason:
        raise EndRun(Verdict.SKIPPED, run.plan.skip_reason)
    run.result.note = "; ".join([*run.prepared.notes, *(getattr(run.plan, "notes", None) or [])])


def _eager(run: Run) -> None:
    from . import towers

    from ..model.loss import NothingToTrain

    with towers.count_towers(run.model, run.prepared.config) as report:
        try:
            run.eager_outs = run.steps_through(run.model)
        except NothingToTrain as e:
            raise EndRun(Verdict.SKIPPED, f"train mode does not apply: {e}") from e
    run.result.towers = dict(report.calls)
    run.result.towers_not_run = list(report.not_run)


def _reference(run: Run) -> None:
    """A second eager run (determinism) and an fp64 copy (the reference numerics judge by)."""
    import torch

    from . import scenarios

    again = run.steps_through(run.model)
    run.deterministic = numerics.outputs_equal(run.eager_outs, again)
    run.eager_again = None if run.deterministic else again
    spec = run.spec
    try:
        fp64_model = copy.deepcopy(run.model).to(dtype=torch.float64)
        fp64_plan = scenarios.plan(spec.scenario, fp64_model, run.prepared.config,
                                   to_device(run.prepared.inputs, spec.device, torch.float64),
                                   run.prepared.modality, spec.mode, recipe=run.prepared.recipe)
        run.fp64_outs = [make_call(fp64_model, spec.mode)(fp64_model, s.make_inputs()) for s in fp64_plan.steps]
        del fp64_model
    except Exception:  # noqa: BLE001 - some ops have no fp64 kernel: numerics falls back to cosine
        run.fp64_outs = None


def _trace(run: Run) -> None:
    """One compile (ExplainWithBackend around the backend) through every step: breaks with user
    frames, graphs/ops/recompiles per step, Dynamo's counters; the compiled module for later."""
    from torch._dynamo.utils import counters

    spec, result = run.spec, run.result
    backend = "eager" if spec.pass_name == "dynamo" else spec.backend
    # `dynamic` runs its shapes twice: as a user would (automatic dynamic shapes), then with the
    # varying dims marked dynamic up front; recompiles are recorded per step for both.
    marks = getattr(run.plan, "mark_dynamic", None) or {}
    variants = [("", {})] + ([("marked:", marks)] if marks else [])
    trace_ctx = _torch_trace(spec.trace_dir) if spec.trace_dir else contextlib.nullcontext()
    metrics_ctx = guard_profile.skipped() if spec.pass_name == "dynamo" else contextlib.nullcontext()
    with trace_ctx, metrics_ctx, recompile_log() as recompiles:
        for prefix, marked in variants:
            explainer = _trace_steps(run, backend, recompiles, prefix, marked)
    result.trace_dir = spec.trace_dir
    result.graph_breaks = graph_breaks.aggregate(result.graph_breaks)
    result.explain_graphs = sum(s.graphs for s in result.steps if not s.name.startswith("marked:"))
    result.explain_breaks = sum(s.graph_breaks for s in result.steps)
    result.stats = counter_stats(counters, recompiles.count, ops=explainer.op_count)
    run.compile_cache = timing.compile_cache_state({"inductor": dict(counters.get("inductor", {}))})
    # What the fix gates compare before/after a patch (a patch that stops capture must show here).
    result.ops_captured = sum(s.ops for s in result.steps if not s.name.startswith("marked:"))
    result.frames_skipped = result.stats.fallbacks_to_eager
    run.found_break = result.explain_breaks > 0
    run.several_graphs = any(s.graphs > 1 for s in result.steps)
    if spec.pass_name == "inductor" and run.plan.steps:
        # Steady state: a second call of every step (guards hold, no recompiles expected).
        run.compiled_outs = run.steps_through(run.compiled)
        result.timing = Timing(compile_s=round(sum(s.first_call_s or 0.0 for s in result.steps), 3),
                               compile_cache=run.compile_cache, compile_phases=timing.compile_phases())


def _trace_steps(run: Run, backend: str, recompiles: _RecompileLog, prefix: str,
                 marks: dict[str, list[int]]) -> Any:
    import torch
    from torch._dynamo.backends.debugging import ExplainWithBackend
    from torch._dynamo.utils import counters

    spec, result = run.spec, run.result
    torch._dynamo.reset()
    counters.clear()
    explainer = ExplainWithBackend(backend)
    run.compiled = torch.compile(run.model, backend=explainer, dynamic=spec.dynamic or None)
    run.compiled_outs = []
    for step in run.plan.steps:
        inputs = step.make_inputs()
        for name, dims in marks.items():
            if isinstance(inputs.get(name), torch.Tensor):
                for d in dims:
                    torch._dynamo.mark_dynamic(inputs[name], d)
        before = (len(explainer.graphs), len(explainer.break_reasons), explainer.op_count, recompiles.count)
        t0 = time.perf_counter()
        out = run.call(run.compiled, inputs)
        if spec.device.startswith("cuda"):
            torch.cuda.synchronize()
        took = time.perf_counter() - t0
        run.compiled_outs.append(out)
        name = prefix + step.name
        result.graph_breaks.extend(graph_breaks.from_reasons(explainer.break_reasons[before[1]:], step=name,
                                                             model_files=run.model_files))
        graphs = len(explainer.graphs) - before[0]
        result.steps.append(StepStats(
            # Breaks are the reasons Dynamo gave; more graphs than that are separate frames (hooks,
            # recompiles), which the fullgraph=True check then judges.
            name=name, graphs=graphs, graph_breaks=len(explainer.break_reasons) - before[1],
            ops=explainer.op_count - before[2], recompiles=recompiles.count - before[3],
            recompile_reasons=recompiles.reasons[before[3]:], first_call_s=round(took, 3)))
    return explainer


def _fullgraph(run: Run) -> None:
    """torch.compile(fullgraph=True) on the first breaking step: full_graph needs it to pass.
    Skipped when the trace captured one graph per step with no break (fullgraph=True captures the
    same); run when a step captured several graphs without a break reason (hooks, separate frames),
    which only fullgraph=True can judge; on a reported break only with `spec.fullgraph_check`."""
    import torch

    result = run.result
    if not (run.found_break or run.several_graphs):
        result.fullgraph_ok = True
        return
    if run.found_break and not run.spec.fullgraph_check:
        return  # a break Dynamo reported is the verdict; the check only looks for disagreement (opt-in)
    step = next((s for s, st in zip(run.plan.steps, result.steps) if st.graph_breaks or st.graphs > 1),
                run.plan.steps[0])
    torch._dynamo.reset()
    try:
        run.call(torch.compile(run.model, fullgraph=True, backend="eager", dynamic=run.spec.dynamic or None),
                 step.make_inputs())
        result.fullgraph_ok = True
    except Exception as e:  # noqa: BLE001 - the failure is the finding
        result.fullgraph_ok = False
        result.fullgraph_error = graph_breaks.from_exception(e, run.model_files)
    result.explain_fullgraph_disagree = bool(result.fullgraph_ok) and run.found_break


def _numerics(run: Run) -> None:
    spec = run.spec
    tol = numerics.default_tol(spec.mode, spec.dtype)
    names = [s.name for s in run.plan.steps]

    def by_step(outs: list[Any] | None) -> Any:
        # One step: its output as is (paths read `logits`); several: keyed by step (`decode.logits`).
        if outs is None:
            return None
        return outs[0] if len(outs) == 1 else dict(zip(names, outs))

    run.result.numerics = numerics.compare(by_step(run.eager_outs), by_step(run.compiled_outs),
                                           by_step(run.fp64_outs), tol=tol, eager_deterministic=run.deterministic,
                                           eager_again=by_step(run.eager_again))
    if not run.deterministic:
        run.result.numerics.message = "eager_two_runs_differ; " + run.result.numerics.message


def _timing(run: Run) -> None:
    spec = run.spec
    steps = run.plan.steps
    compile_s = run.result.timing.compile_s if run.result.timing else None
    # Inputs are made outside the timed calls; decode caches are copied per call by the plan.
    got = timing.interleaved(lambda: [run.call(run.model, s.make_inputs()) for s in steps],
                             lambda: [run.call(run.compiled, s.make_inputs()) for s in steps],
                             device=spec.device, repeats=spec.repeats, warmup=spec.warmup)
    got.compile_s, got.compile_cache = compile_s, run.compile_cache
    got.compile_phases = run.result.timing.compile_phases if run.result.timing else {}
    run.result.timing = got


@dataclass(frozen=True)
class Stage:
    name: str  # also the key of result.stage_s
    # The verdict when `fn` raises; None: the stage decides no verdict, so its error is recorded and
    # the later stages (the fullgraph check) still run.
    on_error: Verdict | None
    fn: Callable[[Run], None]
    when: Callable[[RunSpec], bool] = lambda spec: True
    progress: str = ""


RESOLVE = Stage("resolve", Verdict.CREATE_ERROR, _resolve, progress="resolving the model id")
PREPARE = Stage("create", Verdict.CREATE_ERROR, _prepare, progress="building the tiny model")
PLAN = Stage("plan", Verdict.EAGER_ERROR, _plan, progress="preparing the scenario's steps")
EAGER = Stage("eager", Verdict.EAGER_ERROR, _eager, progress="eager run")
REFERENCE = Stage("reference", Verdict.EAGER_ERROR, _reference, progress="second eager run and the fp64 reference")
TRACE = Stage("trace", Verdict.COMPILE_ERROR, _trace, progress="torch.compile: tracing every step, collecting breaks")
FULLGRAPH = Stage("fullgraph", Verdict.COMPILE_ERROR, _fullgraph, progress="fullgraph=True capture check")
NUMERICS = Stage("numerics", None, _numerics, when=lambda spec: spec.numerics,
                 progress="numerics against fp64")
TIMING = Stage("timing", None, _timing, when=lambda spec: spec.timing,
               progress="timing: warm-up + interleaved repeats")

PIPELINES: dict[str, tuple[Stage, ...]] = {
    "build": (RESOLVE, PREPARE, PLAN, EAGER),
    "dynamo": (RESOLVE, PREPARE, PLAN, EAGER, TRACE, FULLGRAPH),
    # The fullgraph check resets Dynamo, which drops the compiled code: it runs after timing, or
    # timing would recompile every breaking model (measured on the H200: 5.8 s of timing per
    # breaking item cold, 8.3 s warm, against 0.2 s per full-graph item).
    "inductor": (RESOLVE, PREPARE, PLAN, EAGER, REFERENCE, TRACE, NUMERICS, TIMING, FULLGRAPH),
}


def decide(run: Run) -> Verdict:
    """The verdict of a run whose stages all completed."""
    r = run.result
    if run.spec.pass_name == "build":
        return Verdict.EAGER_OK
    if r.explain_breaks or r.fullgraph_ok is False:
        return Verdict.GRAPH_BREAK
    return Verdict.FULL_GRAPH


# ---- the run --------------------------------------------------------------------------------
def run_spec(spec: RunSpec, progress: Callable[[str], None] | None = None) -> RunResult:
    from ..model.budget import OverBudget
    from ..model.build import MissingDependency, NoModelClass

    fatal = (EndRun, MissingDependency, NoModelClass, MemoryError, OverBudget)  # end the run whatever the stage
    say = progress or (lambda _msg: None)
    started = time.time()
    result = RunResult(spec=spec, verdict=Verdict.CREATE_ERROR,
                       started_at=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat())
    result.versions = versions.current(spec.device)
    run = Run(spec=spec, result=result, say=say)
    stage = RESOLVE
    try:
        apply_dynamo_config(spec.dynamo_config)
        for stage in PIPELINES[spec.pass_name]:
            if not stage.when(spec):
                continue
            say(stage.progress or stage.name)
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                stage.fn(run)
            except fatal:
                raise
            except Exception as e:  # noqa: BLE001 - a stage that decides no verdict records and goes on
                if stage.on_error is not None:
                    raise
                result.error = error_info(stage.name, e)
            finally:
                result.stage_s[stage.name] = round(result.stage_s.get(stage.name, 0.0) + time.perf_counter() - t0, 3)
                # CPU time beside wall time: on shared cores it is what the stage itself cost.
                result.stage_cpu_s[stage.name] = round(result.stage_cpu_s.get(stage.name, 0.0)
                                                       + time.process_time() - c0, 3)
        result.verdict = decide(run)
    except EndRun as e:
        result.verdict, result.note = e.verdict, e.note
    except NoModelClass as e:  # nothing to build: the mapping names a class transformers lacks
        result.verdict, result.note = Verdict.SKIPPED, str(e)
    except MissingDependency as e:
        result.verdict, result.missing_dependency = Verdict.MISSING_DEPENDENCY, e.package
        result.error = error_info(stage.name, e)
    except (MemoryError, OverBudget) as e:  # refused before building, or the address-space limit hit
        result.verdict, result.error = Verdict.MEMORY_LIMIT, error_info(stage.name, e)
    except Exception as e:  # noqa: BLE001 - every model failure is data
        cause = e.__cause__
        if isinstance(cause, MissingDependency):
            result.verdict, result.missing_dependency = Verdict.MISSING_DEPENDENCY, cause.package
        else:
            result.verdict = stage.on_error or decide(run)
        result.error = error_info(stage.name, e)
    result.duration_s = round(time.time() - started, 3)
    return result


def trace_model(model: Any, inputs: dict[str, Any], spec: RunSpec | None = None) -> RunResult:
    """The trace stage alone, on a module built elsewhere, called once with `inputs` (tests and the
    fix gates use it on hand-made modules)."""
    from .scenarios import ScenarioPlan, Step, fresh

    spec = spec or RunSpec(model_id=type(model).__name__, pass_name="dynamo", backend="eager")
    run = Run(spec=spec, result=RunResult(spec=spec, verdict=Verdict.CREATE_ERROR), say=lambda _msg: None,
              model=model, call=make_call(model, spec.mode),
              plan=ScenarioPlan("call", steps=[Step("call", fresh(inputs))]))
    _trace(run)
    run.result.verdict = decide(run)
    return run.result


def counter_stats(counters: Any, recompiles: int, *, ops: int = 0) -> CompileStats:
    """PyTorch's benchmark graph stats from torch._dynamo.utils.counters."""
    gb = counters.get("graph_break", {})
    frames = counters.get("frames", {})
    stats = counters.get("stats", {})
    total, ok = int(frames.get("total", 0)), int(frames.get("ok", 0))
    by_type: dict[str, int] = {}
    for reason, n in gb.items():
        t = graph_breaks.parse_reason(str(reason))["gb_type"]
        by_type[t] = by_type.get(t, 0) + int(n)
    return CompileStats(graphs=int(stats.get("unique_graphs", 0)), graph_breaks=int(sum(gb.values())),
                        unique_graph_breaks=len(gb), recompiles=recompiles, frames_total=total, frames_ok=ok,
                        fallbacks_to_eager=max(total - ok, 0), breaks_by_type=by_type, ops_captured=ops,
                        calls_captured=int(stats.get("calls_captured", 0)))


@contextlib.contextmanager
def _torch_trace(trace_dir: str):
    """Keep torch's structured trace (what TORCH_TRACE=dir writes) for tlparse."""
    import os

    import torch._logging._internal as internal

    os.makedirs(trace_dir, exist_ok=True)
    os.environ["TORCH_TRACE"] = trace_dir
    internal.trace_log.setLevel(logging.DEBUG)
    internal._init_logs()
    try:
        yield
    finally:
        for h in list(internal.trace_log.handlers):
            h.flush()
