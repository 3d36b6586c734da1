"""Builder coverage: does every architecture build and run one eager step?

For each (model_type, task, mode) the model is built tiny from its config, given
inputs from the generic rules plus its registry recipe, and run once: `eval` is a
no-grad forward, `train` a forward plus backward on `loss_from_outputs`. Everything
runs in this process; each item's exception is captured and typed:

  ok                  built and ran
  create_error        config, class or construction failed
  eager_error         inputs or the forward/backward failed
  missing_dependency  an optional package that is not installed (see build.MissingDependency)
"""

from __future__ import annotations

import gc
import importlib.util
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from .results import Serializable

STATUSES = ("ok", "create_error", "eager_error", "missing_dependency")
TASKS = ("base", "head")
MODES = ("eval", "train")


@dataclass
class CoverageItem(Serializable):
    model_type: str
    task: str  # base | head
    mode: str  # eval | train
    status: str = "ok"
    class_name: str | None = None
    stage: str | None = None  # resolve | create | inputs | eager | backward, where it failed
    reason: str | None = None  # "ExcType: first line of the message"
    where: str | None = None  # innermost frame of the failure (file:line in function)
    package: str | None = None  # for missing_dependency
    seconds: float = 0.0


@dataclass
class CoverageSummary(Serializable):
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # "task/mode" -> status -> n
    total: int = 0
    ok: int = 0
    failed: int = 0  # create_error + eager_error
    missing: int = 0
    coverage: float = 0.0  # ok / (total - missing)


def item_class(model_type: str, task: str, registry: Any = None) -> str | None:
    """The class a sweep item builds; None when the type has no such class (item skipped).

    `base` is the base model; `head` is the main task head when it differs from the base
    (for types with no base, e.g. backbones, the catalog's fallback head).
    A registry entry's `base`/`head` override the auto-mapping's (as in `sweep.plan`),
    e.g. where the mapped class has no forward or takes a sub-config.
    """
    from . import catalog

    known = catalog.known_architectures().get(model_type)
    if known is None:
        return None
    entry = registry.get(model_type) if registry is not None else None
    base = (entry.base if entry else None) or known.base
    head = (entry.head if entry else None) or known.head
    if task == "base":
        return base
    if task == "head":
        return head if head and head != base else None
    raise ValueError(f"task must be one of {TASKS}, not {task!r}")


def sweep_items(model_types: Iterable[str] | None = None, tasks: Iterable[str] = TASKS,
                modes: Iterable[str] = MODES, registry: Any = None) -> list[tuple[str, str, str]]:
    from . import catalog
    from .registry import Registry

    registry = registry if registry is not None else Registry.load()
    types = list(model_types) if model_types is not None else list(catalog.known_architectures())
    return [(mt, t, m) for mt in types for t in tasks if item_class(mt, t, registry) for m in modes]


def _reason(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {msg[0][:300] if msg else ''}".rstrip(": ")


def _where(exc: BaseException) -> str | None:
    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return None
    f = tb[-1]
    path = f.filename
    for marker in ("site-packages/", "enablebot/"):
        if marker in path:
            path = path.split(marker, 1)[1] if marker == "site-packages/" else "enablebot/" + path.split(marker, 1)[1]
    return f"{path}:{f.lineno} in {f.name}"


def _missing_package(exc: BaseException) -> str | None:
    """The package an ImportError raised at run time names, when it really is absent."""
    from .build import MissingDependency, missing_package_from

    if isinstance(exc, MissingDependency):
        return exc.package
    if isinstance(exc, ImportError):
        pkg = missing_package_from(exc)
        if pkg and importlib.util.find_spec(pkg.replace("-", "_")) is None:
            return pkg
    return None


def run_item(model_type: str, task: str, mode: str, *, registry: Any = None, size: str = "tiny",
             batch: int = 2, seq_len: int = 32) -> CoverageItem:
    """Build one (model_type, task) and run one eager step in `mode`; never raises."""
    import torch

    from .build import build_model
    from .inputs import build_inputs
    from .loss import loss_from_outputs
    from .resolve import resolve

    item = CoverageItem(model_type=model_type, task=task, mode=mode)
    t0 = time.perf_counter()
    stage = "resolve"
    built = None
    try:
        if registry is None:
            from .registry import Registry

            registry = Registry.load()
        item.class_name = item_class(model_type, task, registry)
        if item.class_name is None:
            raise ValueError(f"{model_type} has no {task} class")
        res = resolve(model_type, registry)
        stage = "create"
        built = build_model(res, size=size, task=item.class_name)
        model = built.model
        stage = "inputs"
        recipe = res.entry.inputs if res.entry else None
        x = build_inputs(model, built.config, built.modality, recipe, batch=batch, seq_len=seq_len)
        stage = "eager"
        if mode == "train":
            model.train()
            out = model(**x)
            stage = "backward"
            loss_from_outputs(out).backward()
        else:
            model.eval()
            with torch.no_grad():
                model(**x)
    except Exception as exc:  # every failure is a typed result, never a crash of the sweep
        pkg = _missing_package(exc)
        if pkg:
            item.status, item.package = "missing_dependency", pkg
        else:
            item.status = "create_error" if stage in ("resolve", "create") else "eager_error"
        item.stage = stage
        item.reason = _reason(exc)
        item.where = _where(exc)
    finally:
        del built
        gc.collect()
    item.seconds = round(time.perf_counter() - t0, 3)
    return item


def run_coverage(items: Iterable[tuple[str, str, str]], *, registry: Any = None, size: str = "tiny",
                 progress: Callable[[CoverageItem], None] | None = None) -> list[CoverageItem]:
    """Run every (model_type, task, mode) in this process, one after the other."""
    import warnings

    from .registry import Registry

    registry = registry if registry is not None else Registry.load()
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for mt, task, mode in items:
            r = run_item(mt, task, mode, registry=registry, size=size)
            out.append(r)
            if progress:
                progress(r)
    return out


def summarize(results: Iterable[CoverageItem]) -> CoverageSummary:
    s = CoverageSummary()
    for r in results:
        key = f"{r.task}/{r.mode}"
        s.counts.setdefault(key, dict.fromkeys(STATUSES, 0))
        s.counts[key][r.status] += 1
        s.total += 1
        s.ok += r.status == "ok"
        s.failed += r.status in ("create_error", "eager_error")
        s.missing += r.status == "missing_dependency"
    counted = s.total - s.missing
    s.coverage = round(s.ok / counted, 4) if counted else 0.0
    return s
