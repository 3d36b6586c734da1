"""One way from a RunSpec to a tiny model and its inputs: resolve -> config -> shrink -> build
-> inputs. Used by the runner, the held-out reference and the build pass of a sweep.

The id is resolved once: by the runner's first stage (`resolve`), or by a caller that already
resolved it and passes the resolution in the spec (`RunSpec.resolved`: fix and the held-out
children), so a Hub id is not resolved a second time. Within a sweep worker the pristine built model is kept for the next
spec of the same architecture (the other mode, the other scenarios): building is a deep copy
instead of a fresh build.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..results import RunSpec
from .inputs import NO_GENERIC_INPUT


@dataclass
class Prepared:
    """A built tiny model with its inputs. `model` is private to the caller (a copy)."""

    model: Any
    config: Any
    inputs: dict[str, Any]
    model_type: str
    class_name: str
    modality: str
    recipe: dict[str, Any] = field(default_factory=dict)
    changes: dict[str, Any] = field(default_factory=dict)
    copied: bool = False  # a copy of this process's kept build, not a build of its own
    # what the generic fallbacks changed (layouts, repairs, narrow, widths), as the item's note says
    notes: list[str] = field(default_factory=list)


def resolve_spec(spec: RunSpec) -> Any:
    """The spec's resolution: carried in the spec when the parent already resolved it."""
    from .registry import Registry
    from .resolve import Resolved, resolve

    registry = Registry.load_cached(spec.registry)
    if spec.resolved:
        return Resolved.from_dict(spec.resolved, registry)
    return resolve(spec.model_id, registry, allow_remote_code=spec.allow_remote_code)


# The last pristine builds in this process, newest first: (key, Prepared). The pool hands a
# worker every queued item of the architecture it ran last (pool._affine), so its eval, train and
# scenario items follow one another; two entries keep a type's base and head builds both.
_LAST: list[tuple[tuple, Prepared]] = []
KEEP = 2


def _key(spec: RunSpec) -> tuple:
    return (spec.model_id, spec.task, spec.size, spec.seed, spec.batch_size, spec.seq_len, spec.registry,
            spec.allow_remote_code, repr(sorted((spec.resolved or {}).items())))


def prepare(spec: RunSpec, res: Any = None, *, reuse: bool = True) -> Prepared:
    """Build the spec's tiny model (random weights) and its inputs. Raises UsageError,
    MissingDependency or the model's own exception; the caller turns them into verdicts."""
    from . import build

    key = _key(spec)
    kept = next((p for k, p in _LAST if k == key), None) if reuse else None
    if kept is not None:
        try:
            return _copy(kept, copied=True)
        except Exception:  # noqa: BLE001 - a model that cannot be deep-copied is built afresh
            _LAST[:] = [(k, p) for k, p in _LAST if k != key]
            reuse = False
    res = res if res is not None else resolve_spec(spec)
    built = build.build_model(res, size=spec.size, task=spec.task, seed=spec.seed)
    # The trial forwards that find the inputs run on this model and can leave state in it (caches
    # kept as plain attributes: CLVP's rotary table, made on the CPU, stayed there after the move to
    # CUDA). The model handed out is a copy taken before them, as a user's fresh model is.
    pristine = _pristine(built.model, built.config)
    recipe = (res.entry.inputs if res.entry else None) or {}
    try:
        inputs, notes, err = _inputs_for(built.model, built.config, built.modality, recipe, spec)
    except ValueError as e:  # no rule makes an input: a composite that contains the model may
        if recipe or not str(e).startswith(NO_GENERIC_INPUT):
            raise
        inputs, notes, err = {}, [], e
    if err is not None and not (res.entry and res.entry.hook):
        built, inputs, notes, err = _filled_at_forward(spec, built, inputs, recipe, err, notes)
    if err is not None:
        widened = _other_widths(res, spec, built, inputs, recipe, err, notes)
        if widened[0] is not built:
            (built, inputs), err = widened, None
    if err is not None and not recipe:
        built, inputs, notes, err = _from_parent(spec, built, inputs, notes, err)
    if err is not None and not recipe:
        inputs, notes, err = _from_processor(spec, res.model_type, built, inputs, notes, err)
    if isinstance(err, ValueError) and str(err).startswith(NO_GENERIC_INPUT):
        raise err
    if pristine is not None and pristine[0] is built.model:  # not rebuilt by a fallback
        built = dataclasses.replace(built, model=pristine[1])
    prepared = Prepared(model=built.model, config=built.config, inputs=inputs, model_type=res.model_type,
                        class_name=built.class_name, modality=built.modality, recipe=recipe,
                        changes=built.changes, notes=[*built.notes, *notes])
    if not reuse:
        return prepared
    try:
        copied = _copy(prepared)
    except Exception:  # noqa: BLE001 - not deep-copyable: hand out the build itself, keep nothing
        return prepared
    _LAST[:] = [(key, prepared)] + [(k, p) for k, p in _LAST if k != key][:KEEP - 1]
    return copied


def _inputs_for(model: Any, config: Any, modality: str, recipe: dict[str, Any],
                spec: RunSpec) -> tuple[dict[str, Any], list[str], BaseException | None]:
    """The inputs build_inputs makes, the notes of what its fallbacks changed, and the trial
    forward's error (None when they run)."""
    from .inputs import build_inputs

    notes: list[str] = []
    failure: list[BaseException] = []
    inputs = build_inputs(model, config, modality, recipe, batch=spec.batch_size, seq_len=spec.seq_len,
                          seed=spec.seed, notes=notes, failure=failure)
    return inputs, notes, (failure[0] if failure else None)


def _filled_at_forward(spec: RunSpec, built: Any, inputs: dict[str, Any], recipe: dict[str, Any],
                       err: BaseException, notes: list[str], rounds: int = 3) -> tuple[Any, Any, list[str], Any]:
    """Rebuilt from a config with the values the forward read as unset (unset.py; modules copy
    config values when built, so filling the built config is not enough), where the forward then
    runs: (built, inputs, notes, None). As they were, with `err`, where none runs."""
    import dataclasses

    import torch

    from .unset import fill_unset

    cfg, cand_err, filled = copy.deepcopy(built.config), err, []
    for _ in range(rounds):
        fills = fill_unset(cfg, cand_err)
        if not fills:
            break
        filled += [str(f) for f in fills]
        try:
            torch.manual_seed(spec.seed)
            model = type(built.model)._from_config(cfg).eval()
            cand_inputs, cand_notes, cand_err = _inputs_for(model, cfg, built.modality, recipe, spec)
        except Exception:  # noqa: BLE001 - a fill its model refuses is not the one
            break
        if cand_err is None:
            return dataclasses.replace(built, model=model, config=cfg, notes=[*built.notes, *filled]), \
                cand_inputs, cand_notes, None
    return built, inputs, notes, err


def _other_widths(res: Any, spec: RunSpec, built: Any, inputs: dict[str, Any], recipe: dict[str, Any],
                  err: BaseException, notes: list[str], rounds: int = 3) -> tuple[Any, Any]:
    """Rebuilt with a full-size width set to the shrunk one it meets (widths.py), where the
    forward then runs (its notes replace `notes`); a candidate that moves the failure to another
    product is kept for the next round. `built` and `inputs` as they were where none runs."""
    from . import build
    from .widths import mismatch_candidates

    extra: dict[str, Any] = {}
    current = built
    for _ in range(rounds):
        moved = None
        for key, value in mismatch_candidates(current.config, err):
            try:
                cand = build.build_model(res, size=spec.size, task=spec.task, seed=spec.seed,
                                         extra_config={**extra, key: value})
                cand_inputs, cand_notes, cand_err = _inputs_for(cand.model, cand.config, cand.modality, recipe, spec)
            except Exception:  # noqa: BLE001 - a candidate its config or model refuses is not the one
                continue
            if cand_err is None:
                notes[:] = [*cand_notes, *(f"config {k}={v} (a full-size width met a shrunk one)"
                                           for k, v in {**extra, key: value}.items())]
                return cand, cand_inputs
            if moved is None and str(cand_err) != str(err) and mismatch_candidates(cand.config, cand_err):
                moved = (key, value, cand, cand_err)
        if moved is None:
            break
        key, value, current, err = moved
        extra[key] = value
    return built, inputs


_IN_PARENT: list[str] = []  # the composites being built for a tower's inputs (no nesting)


def _from_parent(spec: RunSpec, built: Any, inputs: dict[str, Any], notes: list[str],
                 err: BaseException) -> tuple[Any, Any, list[str], BaseException | None]:
    """The model rebuilt from a containing composite's sub-config, with the arguments that
    composite calls it with (parent_inputs.py), where they run it: (built, inputs, notes, None).
    As they were, with `err`, where no composite gives a call that runs."""
    import dataclasses

    from .parent_inputs import from_parent
    from .trial import trial_forward

    if _IN_PARENT:
        return built, inputs, notes, err

    def build_parent(parent: str) -> tuple[Any, dict[str, Any]] | None:
        for task in ("base", None):
            try:
                p = prepare(dataclasses.replace(spec, model_id=parent, task=task, resolved=None), reuse=False)
                return p.model, p.inputs
            except Exception:  # noqa: BLE001 - a composite that does not build gives nothing
                continue
        return None

    _IN_PARENT.append(spec.model_id)
    try:
        got = from_parent(type(built.model), type(built.config), build_parent=build_parent, seed=spec.seed,
                          runs=trial_forward)
    finally:
        _IN_PARENT.pop()
    if got is None:
        return built, inputs, notes, err
    model, cap = got
    note = (f"inputs as {cap.parent} calls its {cap.attr} model ({', '.join(sorted(cap.inputs))}), captured "
            f"from {cap.parent}'s forward; built from {cap.parent}'s {cap.attr}")
    return dataclasses.replace(built, model=model, config=cap.config), cap.inputs, [note], None


def _from_processor(spec: RunSpec, model_type: str, built: Any, inputs: dict[str, Any], notes: list[str],
                    err: BaseException) -> tuple[dict[str, Any], list[str], BaseException | None]:
    """The inputs the release's image processor makes for the model (processor_inputs.py), where
    they run it: (inputs, [note], None); as they were, with `err`, where none does."""
    import torch

    from .processor_inputs import from_processor
    from .trial import trial_forward

    got = from_processor(built.model, built.config, model_type, batch=spec.batch_size,
                         gen=torch.Generator().manual_seed(spec.seed), runs=trial_forward)
    if got is None:
        return inputs, notes, err
    return got.inputs, [got.note()], None


def _pristine(model: Any, config: Any) -> tuple[Any, Any] | None:
    """(the model, a deep copy of it before any forward), or None where it cannot be copied. The copy
    shares the config objects: a repair the fallbacks make on them in place (a `sliding_window` the
    forward reads) reaches the model handed out."""
    from .configs import configs_in

    try:
        return model, copy.deepcopy(model, memo={id(c): c for c in configs_in(config)})
    except Exception:  # noqa: BLE001 - such a model is handed out as its trials left it
        return None


def _copy(p: Prepared, copied: bool = False) -> Prepared:
    # The runner moves, casts and trains its model: never hand out the kept one.
    model = copy.deepcopy(p.model)
    return Prepared(model=model, config=getattr(model, "config", p.config), inputs=copy.deepcopy(p.inputs),
                    model_type=p.model_type, class_name=p.class_name, modality=p.modality, recipe=p.recipe,
                    changes=p.changes, copied=copied, notes=p.notes)


def forget() -> None:
    """Drop the kept build (e.g. before a worker is recycled or memory is tight)."""
    _LAST.clear()
