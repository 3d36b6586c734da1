"""Family: hybrid linear-attention / SSM models (peer breaks, the project gets one graph), eval and
train: Qwen3Next, Qwen3.5-MoE (CausalLM and TextModel), NemotronH, OlmoHybrid.

In transformers 5.17 their gated-delta-rule, causal-conv1d and Mamba-2 scan functions are
decorated with `use_kernel_func_from_hub_with_fallback`: the function a forward calls is the
Hub kernel when requested, else the original package's (fla, causal_conv1d, mamba_ssm) when it
imports, else the torch-only path. Which one ran decides the verdict. This prints, per model,
where each decorated function resolved to, and the verdict of a tokenizer-style left-padded
call in eval and in train (the forward in training mode, grad on)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import emit, explain, guarded, main_guard, padded_text, tiny_model  # noqa: E402

FAMILY = "hybrid_linear_attention"
CASES = [("qwen3_next", "Qwen3NextModel"), ("qwen3_next", "Qwen3NextForCausalLM"),
         ("qwen3_5_moe_text", "Qwen3_5MoeTextModel"), ("qwen3_5_moe_text", "Qwen3_5MoeForCausalLM"),
         ("nemotron_h", "NemotronHModel"), ("nemotron_h", "NemotronHForCausalLM"),
         ("olmo_hybrid", "OlmoHybridModel"), ("olmo_hybrid", "OlmoHybridForCausalLM")]
HOOKED = ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "torch_chunk_gated_delta_rule",
          "torch_recurrent_gated_delta_rule", "causal_conv1d_fn", "causal_conv1d_update",
          "mamba_chunk_scan_combined", "mamba_split_conv1d_scan_combined", "selective_state_update")


def implementations(model) -> dict[str, str]:
    mod = sys.modules[type(model).__module__]
    out = {}
    for name in HOOKED:
        fn = getattr(mod, name, None)
        if fn is not None:
            out[name] = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', '?')}"
    return out


def case(model_type: str, cls: str) -> None:
    for variant, train in (("eval", False), ("train", True)):
        model = tiny_model(model_type, cls, train=train)
        x = padded_text(model, model.config, left=True)
        emit(FAMILY, cls, variant, explain(model, x, backward=train), kernels=implementations(model))


def main() -> None:
    only = set(sys.argv[1:])
    for model_type, cls in CASES:
        if not only or cls in only:
            guarded(FAMILY, cls, lambda: case(model_type, cls))


if __name__ == "__main__":
    main_guard(main)
