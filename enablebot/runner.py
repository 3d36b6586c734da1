"""One model through eager and torch.compile, in this process.

Stages (each failure becomes a verdict, never an exception to the caller):
  resolve/create -> eager x2 (determinism) + fp64 reference -> explain (every break,
  with user frames) -> fullgraph=True capture check -> compile with the chosen backend
  (counters, compile time) -> numerics -> interleaved timing.
`isolation.run_in_child` wraps this in a subprocess with a timeout; call that, not
this, for anything that may crash or hang.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import logging
import time
import traceback
from typing import Any, Callable

from . import graph_breaks, numerics, timing, versions
from .results import CompileStats, ErrorInfo, RunResult, RunSpec, Timing


class _StageError(Exception):
    def __init__(self, verdict: str, info: ErrorInfo):
        super().__init__(info.message)
        self.verdict, self.info = verdict, info


def _error(stage: str, exc: BaseException) -> ErrorInfo:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return ErrorInfo(stage=stage, type=type(exc).__name__, message=str(exc)[:4000], traceback=tb[-6000:])


@contextlib.contextmanager
def _stage(stage: str, verdict: str):
    try:
        yield
    except _StageError:
        raise
    except Exception as e:  # noqa: BLE001 - every model failure is data
        raise _StageError(verdict, _error(stage, e)) from e


@contextlib.contextmanager
def _timed(result: RunResult, stage: str):
    """Add the wall time of the block to result.stage_s[stage] (sweeps report where time goes)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        result.stage_s[stage] = round(result.stage_s.get(stage, 0.0) + time.perf_counter() - t0, 3)


class _RecompileCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Recompiling"):
            self.count += 1


@contextlib.contextmanager
def count_recompiles():
    import torch

    counter = _RecompileCounter()
    torch._logging.set_logs(recompiles=True)
    names = [n for n in logging.Logger.manager.loggerDict if n.endswith("__recompiles")]
    loggers = [logging.getLogger(n) for n in names]
    for lg in loggers:
        lg.addHandler(counter)
    try:
        yield counter
    finally:
        for lg in loggers:
            lg.removeHandler(counter)
        torch._logging.set_logs()


def _to(obj: Any, device: str, float_dtype: Any = None) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        if float_dtype is not None and obj.is_floating_point():
            return obj.to(device=device, dtype=float_dtype)
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _to(v, device, float_dtype) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(v, device, float_dtype) for v in obj)
    return obj


def make_step(model: Any, inputs: dict[str, Any], mode: str) -> Callable[[Any], Any]:
    """A callable running one step of `fn_model` (the eager or the compiled module):
    eval -> the outputs; train -> the outputs plus parameter gradients of a loss."""
    import torch

    from .loss import loss_from_outputs

    if mode == "eval":
        def eval_step(fn_model: Any) -> Any:
            with torch.no_grad():
                return fn_model(**inputs)

        return eval_step

    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]

    def train_step(fn_model: Any) -> Any:
        for _, p in params:
            p.grad = None
        out = fn_model(**inputs)
        loss = loss_from_outputs(out)
        loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in params if p.grad is not None}
        return {"loss": loss.detach(), "outputs": out, "grads": grads}

    return train_step


def _apply_dynamo_config(settings: dict[str, Any]) -> None:
    import torch._dynamo

    for key, value in settings.items():
        if not hasattr(torch._dynamo.config, key):
            raise ValueError(f"torch._dynamo.config has no setting {key!r}")
        setattr(torch._dynamo.config, key, value)


def run_spec(spec: RunSpec, progress: Callable[[str], None] | None = None) -> RunResult:
    import torch

    from . import build as build_mod
    from .inputs import build_inputs
    from .resolve import resolve

    say = progress or (lambda _msg: None)
    started = time.time()
    result = RunResult(spec=spec, verdict="create_error",
                       started_at=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat())
    result.versions = versions.current(spec.device)
    try:
        _apply_dynamo_config(spec.dynamo_config)
        _run_stages(spec, result, say, torch, build_mod, build_inputs, resolve)
    except _StageError as e:
        result.verdict, result.error = e.verdict, e.info
    except build_mod.MissingDependency as e:  # raised outside a stage by check_requires
        result.verdict, result.missing_dependency = "missing_dependency", e.package
        result.error = _error("create", e)
    result.duration_s = round(time.time() - started, 3)
    return result


def _run_stages(spec: RunSpec, result: RunResult, say: Callable[[str], None], torch: Any, build_mod: Any,
                build_inputs: Any, resolve: Any) -> None:
    device = spec.device
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[spec.dtype]

    say("building the tiny model")
    with _timed(result, "create"), _stage("resolve", "create_error"):
        from .registry import Registry

        res = resolve(spec.model_id, Registry.load_cached(spec.registry), allow_remote_code=spec.allow_remote_code)
    result.model_type = res.model_type
    if res.entry and res.entry.modality:
        result.modality = res.entry.modality  # known even when the build fails; the build refines it
    try:
        with _timed(result, "create"), _stage("create", "create_error"):
            built = build_mod.build_model(res, size=spec.size, task=spec.task, seed=spec.seed)
            recipe = res.entry.inputs if res.entry else None
            inputs = build_inputs(built.model, built.config, built.modality, recipe,
                                  batch=spec.batch_size, seq_len=spec.seq_len, seed=spec.seed)
    except _StageError as e:
        cause = e.__cause__
        if isinstance(cause, build_mod.MissingDependency):
            result.verdict, result.missing_dependency, result.error = "missing_dependency", cause.package, e.info
            return
        raise
    result.model_class, result.modality = built.class_name, built.modality
    model = built.model
    result.n_params = sum(p.numel() for p in model.parameters())
    if spec.mode == "train":
        model.train()

    with _timed(result, "eager"), _stage("eager", "eager_error"):
        model = model.to(device=device, dtype=dtype)
        run_inputs = _to(inputs, device, dtype)
        step = make_step(model, run_inputs, spec.mode)
        say("eager run")
        eager_out = step(model)
    if spec.fast:
        _dynamo_pass(spec, result, model, run_inputs, step, torch)
        return
    with _timed(result, "reference"), _stage("eager", "eager_error"):
        say("second eager run and the fp64 reference")
        eager_out2 = step(model)
        deterministic = numerics.outputs_equal(eager_out, eager_out2)
    fp64_out = None
    with _timed(result, "reference"):
        try:
            fp64_model = copy.deepcopy(model).to(dtype=torch.float64)
            fp64_out = make_step(fp64_model, _to(inputs, device, torch.float64), spec.mode)(fp64_model)
            del fp64_model
        except Exception:  # noqa: BLE001 - some ops have no fp64 kernel: numerics falls back to cosine
            fp64_out = None

    # 1. Every break, with its user frame, from Dynamo's explain.
    say("explain: collecting graph breaks")
    _explain(spec, result, model, run_inputs, torch)
    # 2. full_graph means torch.compile(fullgraph=True) captures it (Dynamo only: cheap backend).
    if spec.fullgraph_check:
        say("fullgraph=True capture check")
        _fullgraph(spec, result, step, model, torch)
        result.explain_fullgraph_disagree = bool(
            result.explain_breaks is not None and (result.explain_breaks > 0) == bool(result.fullgraph_ok))

    # 3. The real compile with the chosen backend.
    say(f"torch.compile(backend={spec.backend!r})")
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    trace_ctx = _trace(spec.trace_dir) if spec.trace_dir else contextlib.nullcontext()
    with trace_ctx, count_recompiles() as recompiles, _timed(result, "compile"):
        with _stage("compile", "compile_error"):
            compiled = torch.compile(model, backend=spec.backend, dynamic=spec.dynamic or None)
            t0 = time.perf_counter()
            compiled_out = step(compiled)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            compile_s = time.perf_counter() - t0
            compiled_out = step(compiled)  # a second call: steady state, guards hold
    result.trace_dir = spec.trace_dir
    result.stats = _stats(counters, recompiles.count)
    compile_counters = {"inductor": dict(counters.get("inductor", {}))}  # before numerics/timing add to them
    result.verdict = "full_graph" if (result.fullgraph_ok and result.stats.graph_breaks == 0) else "graph_break"
    if not spec.fullgraph_check and result.stats.graph_breaks == 0 and result.stats.graphs <= 1:
        result.verdict = "full_graph"

    if spec.numerics:
        say("numerics against fp64")
        tol = numerics.default_tol(spec.mode, spec.dtype)
        result.numerics = numerics.compare(eager_out, compiled_out, fp64_out, tol=tol, eager_deterministic=deterministic,
                                           eager_again=None if deterministic else eager_out2)
        if not deterministic:
            result.numerics.message = "eager_two_runs_differ; " + result.numerics.message

    result.timing = Timing()
    if spec.timing:
        say(f"timing: {spec.warmup} warm-up + {spec.repeats} interleaved repeats")
        with _timed(result, "timing"), _stage("timing", result.verdict):
            result.timing = timing.interleaved(lambda: step(model), lambda: step(compiled), device=device,
                                               repeats=spec.repeats, warmup=spec.warmup)
    result.timing.compile_s = round(compile_s, 3)
    result.timing.compile_cache = timing.compile_cache_state(compile_counters)


def _explain(spec: RunSpec, result: RunResult, model: Any, run_inputs: dict[str, Any], torch: Any) -> bool:
    with _timed(result, "explain"):
        return _explain_untimed(spec, result, model, run_inputs, torch)


def _explain_untimed(spec: RunSpec, result: RunResult, model: Any, run_inputs: dict[str, Any], torch: Any) -> bool:
    torch._dynamo.reset()
    try:
        # Breaks happen while Dynamo traces the forward; the backward is AOT-traced whole.
        with torch.no_grad() if spec.mode == "eval" else contextlib.nullcontext():
            ex = torch._dynamo.explain(model)(**run_inputs)
    except Exception as e:  # noqa: BLE001 - explain can fail where compile would too
        result.error = _error("explain", e)
        return False
    result.graph_breaks = graph_breaks.from_explain(ex)
    result.explain_graphs, result.explain_breaks = ex.graph_count, ex.graph_break_count
    return True


def _fullgraph(spec: RunSpec, result: RunResult, step: Callable[[Any], Any], model: Any, torch: Any) -> None:
    with _timed(result, "fullgraph"):
        _fullgraph_untimed(spec, result, step, model, torch)


def _fullgraph_untimed(spec: RunSpec, result: RunResult, step: Callable[[Any], Any], model: Any, torch: Any) -> None:
    torch._dynamo.reset()
    try:
        step(torch.compile(model, fullgraph=True, backend="eager", dynamic=spec.dynamic or None))
        result.fullgraph_ok = True
    except Exception as e:  # noqa: BLE001 - the failure is the finding
        result.fullgraph_ok = False
        result.fullgraph_error = graph_breaks.from_exception(e)


def _dynamo_pass(spec: RunSpec, result: RunResult, model: Any, run_inputs: dict[str, Any],
                 step: Callable[[Any], Any], torch: Any) -> None:
    """The sweep's cheap pass: one explain (every break, with user frames). A model with one
    graph and no break is full_graph: explain and fullgraph=True disagree only the other way
    (a break explain reports that fullgraph=True captures, as with .item()). With
    `spec.fullgraph_check`, breaking models also get the fullgraph=True check for that case."""
    if not _explain(spec, result, model, run_inputs, torch):
        result.verdict = "compile_error"
        return
    n = result.explain_breaks or 0
    result.stats = CompileStats(graphs=result.explain_graphs or 0, graph_breaks=n,
                                unique_graph_breaks=len(result.graph_breaks),
                                breaks_by_type=_by_type(result.graph_breaks))
    result.verdict = "graph_break" if n or (result.explain_graphs or 0) > 1 else "full_graph"
    if result.verdict == "graph_break" and spec.fullgraph_check:
        _fullgraph(spec, result, step, model, torch)
        result.explain_fullgraph_disagree = bool(result.fullgraph_ok)


def _by_type(breaks: list) -> dict[str, int]:
    out: dict[str, int] = {}
    for b in breaks:
        out[b.gb_type] = out.get(b.gb_type, 0) + b.count
    return out


def _stats(counters: Any, recompiles: int) -> CompileStats:
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
                        fallbacks_to_eager=max(total - ok, 0), breaks_by_type=by_type)


@contextlib.contextmanager
def _trace(trace_dir: str):
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
