"""Shared helpers of the fidelity evidence scripts (issue 28).

Each script in this folder takes one family of disagreements between the project's default
Dynamo pass and an independent corpus, runs the models of that family the way a user calls
them (and, beside it, the way the other harness seems to have called them), and prints one
`FIDELITY {json}` line per (class, variant): graphs, breaks, the first break's gb_type and its
frame in the model's code, or the error. `run_all.py` runs every script and writes
results/fidelity/.

Only the tiny config comes from the project (`enablebot.model.build.make_config`: shrunk, with
the registry's overrides); models are built here with `cls._from_config`, and each script makes
its own inputs: feature extractors built from their defaults where the model has one, token ids
and a tokenizer-style padding mask by hand otherwise.
"""

from __future__ import annotations

import contextlib
import json
import sys
import traceback
from typing import Any, Callable


def versions() -> dict[str, str]:
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__}


def tiny_model(model_type: str, class_name: str, *, train: bool = False, config_edit: Callable | None = None) -> Any:
    """A tiny random-init `class_name` for `model_type` (the project's shrunk config)."""
    import torch
    import transformers

    from enablebot.model.registry import Registry
    from enablebot.model.resolve import resolve
    from enablebot.model.build import make_config

    res = resolve(model_type, Registry.load_cached(None))
    cfg, _ = make_config(res, "tiny")
    if config_edit is not None:
        config_edit(cfg)
    torch.manual_seed(0)
    cls = getattr(transformers, class_name)
    model = cls._from_config(cfg)
    return model.train() if train else model.eval()


def _user_frame(reason: Any) -> str | None:
    for fr in reversed(getattr(reason, "user_stack", None) or []):
        name = getattr(fr, "filename", "") or ""
        if "/transformers/" in name:
            return f"{name.split('/transformers/')[-1]}:{fr.lineno} ({fr.name})"
    return None


def explain(model: Any, inputs: dict[str, Any], *, backward: bool = False, dynamo_config: dict | None = None) -> dict:
    """One `torch._dynamo.explain` of `model(**inputs)` (with grad on when `backward`: a train
    step's forward; the backward is AOT autograd's, not Dynamo's), under `dynamo_config` patches. Graphs, breaks, the first break and its frame, or the
    error that stopped the trace."""
    import torch

    torch._dynamo.reset()
    out: dict[str, Any] = {}

    def call(**kw: Any) -> Any:
        return model(**kw)

    patches = torch._dynamo.config.patch(**(dynamo_config or {})) if dynamo_config else contextlib.nullcontext()
    grad = contextlib.nullcontext() if backward else torch.no_grad()
    try:
        with patches, grad:
            ex = torch._dynamo.explain(call)(**inputs)
        out["graphs"] = ex.graph_count
        out["breaks"] = ex.graph_break_count
        if ex.break_reasons:
            r = ex.break_reasons[0]
            out["first_break"] = r.reason.splitlines()[0][:200]
            out["frame"] = _user_frame(r)
        out["verdict"] = "graph_break" if ex.graph_break_count else "full_graph"
    except Exception as e:  # noqa: BLE001 - the error is the evidence
        out["verdict"] = "compile_error"
        out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        frames = [f for f in traceback.extract_tb(e.__traceback__) if "/transformers/models/" in f.filename]
        if frames:
            f = frames[-1]
            out["frame"] = f"{f.filename.split('/transformers/')[-1]}:{f.lineno} ({f.name})"
    return out


def eager_ok(model: Any, inputs: dict[str, Any]) -> str | None:
    import torch

    try:
        with torch.no_grad():
            model(**inputs)
        return None
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"


def emit(family: str, cls: str, variant: str, result: dict, **extra: Any) -> None:
    row = {"family": family, "class": cls, "variant": variant, **versions(), **extra, **result}
    print("FIDELITY " + json.dumps(row, default=str), flush=True)


def guarded(family: str, cls: str, fn: Callable[[], None]) -> None:
    """Run one class's evidence; a failure to build is printed as its own row."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        emit(family, cls, "build", {"verdict": "harness_error", "error": f"{type(e).__name__}: {str(e)[:300]}"})


def padded_text(model: Any, config: Any, batch: int = 2, seq: int = 24, left: bool = True, seed: int = 0) -> dict:
    """Token ids and attention mask as a tokenizer pads a batch of two prompts of different
    lengths (left padding for decoder-only generation, right for encoders)."""
    import torch

    tc = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = int(getattr(tc, "vocab_size", 100))
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, max(vocab - 1, 6), (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    pad = getattr(tc, "pad_token_id", None)
    pad = pad if isinstance(pad, int) and 0 <= pad < vocab else 0
    short = seq - seq // 4
    if left:
        ids[-1, : seq - short] = pad
        mask[-1, : seq - short] = 0
    else:
        ids[-1, short:] = pad
        mask[-1, short:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def main_guard(fn: Callable[[], None]) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    try:
        import transformers

        transformers.logging.set_verbosity_error()
    except Exception:  # noqa: BLE001
        pass
    fn()
    sys.stdout.flush()


def project_inputs(model_type: str, model: Any) -> dict:
    """The project's `call` inputs for this model (its builder plus the tokenizer-style padding):
    used where no processor can be built offline (VLM tokenizers need their vocab files)."""
    from enablebot.model.inputs import build_inputs
    from enablebot.model.padding import pad_batch
    from enablebot.model.registry import Registry
    from enablebot.model.resolve import resolve

    res = resolve(model_type, Registry.load_cached(None))
    modality = res.entry.modality if res.entry else "text"
    x = build_inputs(model, model.config, modality, res.entry.inputs if res.entry else None)
    padded, _ = pad_batch(model, model.config, x)
    return padded
