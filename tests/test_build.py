"""Builder: tiny models from configs build and run eager; shrink keeps constraints;
recipes evaluate; missing optional packages are typed."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig

from enablebot.model.build import MissingDependency, build_model, check_requires, missing_package_from
from enablebot.sweep.reports import summarize
from enablebot.results import RunResult, RunSpec
from enablebot.measure.runner import run_spec
from enablebot.sweep.engine import SweepOptions, plan
from enablebot.model.inputs import build_inputs, recipe_tensor
from enablebot.model.tensors import eval_dim
from enablebot.model.loss import loss_from_outputs
from enablebot.model.registry import ArchEntry, Registry
from enablebot.model.resolve import resolve
from enablebot.model.shrink import shrink_config


@pytest.fixture(scope="module")
def registry(tmp_path_factory) -> Registry:
    return Registry(path=tmp_path_factory.mktemp("reg") / "model_registry.yaml")


def run_item(model_type: str, task: str, mode: str, *, registry: Registry) -> RunResult:
    """The build pass (what `sweep --pass build` runs): build tiny, one eager step."""
    return run_spec(RunSpec(model_id=model_type, task=task, mode=mode, pass_name="build", registry=str(registry.path)))


@pytest.mark.parametrize("model_type,task", [
    ("llama", "head"),        # decoder-only text, CausalLM
    ("bert", "head"),         # encoder, MaskedLM
    ("vit", "head"),          # vision, ImageClassification
    ("whisper", "head"),      # audio encoder-decoder
    ("mixtral", "base"),      # MoE
    ("clip", "base"),         # dual encoder: both towers get inputs
    ("qwen3_next", "base"),   # hybrid linear/full attention
])
def test_families_build_and_run_eager(model_type, task, registry):
    r = run_item(model_type, task, "eval", registry=registry)
    assert r.verdict == "eager_ok", r.error
    assert r.model_class and r.model_class.endswith(("Model", "LM", "Classification", "Generation"))


def test_train_mode_runs_backward(registry):
    r = run_item("gpt2", "head", "train", registry=registry)
    assert r.verdict == "eager_ok", r.error


def test_dual_encoder_gets_both_inputs(registry):
    b = build_model(resolve("clip", registry), task="base")
    x = build_inputs(b.model, b.config, b.modality, None)
    assert {"input_ids", "pixel_values", "attention_mask"} <= set(x)
    assert x["pixel_values"].shape[-1] == b.config.vision_config.image_size


def _divisible(cfg) -> None:
    heads = cfg.num_attention_heads
    assert cfg.hidden_size % heads == 0
    kv = getattr(cfg, "num_key_value_heads", None)
    if kv:
        assert heads % kv == 0


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2", "gemma", "phi3"])
def test_shrink_keeps_head_divisibility(model_type):
    cfg, changes = shrink_config(AutoConfig.for_model(model_type), "tiny")
    assert cfg.hidden_size <= 64 and cfg.num_hidden_layers <= 2
    assert changes["num_hidden_layers"] == cfg.num_hidden_layers
    _divisible(cfg)


def test_shrink_keeps_expert_constraints():
    cfg, _ = shrink_config(AutoConfig.for_model("mixtral"), "tiny")
    assert cfg.num_local_experts <= 4 and 1 <= cfg.num_experts_per_tok <= cfg.num_local_experts
    ds, _ = shrink_config(AutoConfig.for_model("deepseek_v3"), "tiny")
    assert ds.n_routed_experts % ds.n_group == 0 and ds.topk_group <= ds.n_group
    per_group = ds.n_routed_experts // ds.n_group
    assert ds.num_experts_per_tok <= per_group * ds.topk_group
    # MLA: the derived query head width is recomputed from the shrunk parts.
    assert ds.qk_head_dim == ds.qk_nope_head_dim + ds.qk_rope_head_dim
    assert ds.num_key_value_heads == ds.num_attention_heads


@pytest.mark.parametrize("model_type,attr,most", [
    ("qwen3_moe", "num_local_experts", 4),  # field num_experts, stored as num_local_experts
    ("kimi_linear", "num_experts", 4),
    ("inkling_vision", "n_layers", 2),  # field num_hidden_layers, stored as n_layers
])
def test_a_field_stored_under_its_attribute_map_name_is_shrunk(model_type, attr, most):
    """A config dataclass whose field is kept under another name (`attribute_map`) lists the stored
    name in to_dict(): it is a constructor field, not a derived value, so the shrink caps it. Before,
    the tiny Qwen3-MoE had all 128 experts and Inkling's vision tower all 24 layers."""
    full = AutoConfig.for_model(model_type)
    assert getattr(full, attr) > most
    cfg, _ = shrink_config(full, "tiny")
    assert getattr(cfg, attr) <= most


def test_sections_keep_their_sum_and_equal_sections_stay_equal():
    """mrope sections scaled to the shrunk rotary half: the sum is the half, no section below 1,
    and sections that were equal stay equal where the rounding allows (Ernie 4.5 VL stacks its
    height and width parts, which must have one size)."""
    from enablebot.model.shrink import scale_sections

    assert scale_sections([22, 22, 20], 8) == [3, 3, 2]
    assert scale_sections([16, 24, 24], 8) == [2, 3, 3]
    assert scale_sections([24, 20, 20], 8) == [4, 2, 2]
    for sec, total in [([22, 22, 20], 8), ([16, 24, 24], 16), ([11, 11, 10], 8), ([2, 1, 1], 3), ([5, 7], 4)]:
        new = scale_sections(sec, total)
        assert sum(new) == total and min(new) >= 1


def test_an_unset_mrope_section_is_the_modeling_codes_own_default_scaled():
    """A config that leaves `mrope_section` to its modeling code gets the code's own fallback
    (Ernie 4.5 VL's [22, 22, 20], Qwen3-VL's [24, 20, 20]), not another family's, scaled."""
    ernie, _ = shrink_config(AutoConfig.for_model("ernie4_5_vl_moe").text_config, "tiny")
    assert ernie.rope_parameters["mrope_section"] == [3, 3, 2]
    qwen3_vl, _ = shrink_config(AutoConfig.for_model("qwen3_vl").text_config, "tiny")
    assert qwen3_vl.rope_parameters["mrope_section"] == [4, 2, 2]


def test_a_kind_list_in_pairs_keeps_whole_pairs_and_its_part_counts_still_add_up():
    """Dory lists each layer as an attention block and its "mlp" block (its config halves the list
    and the counts), and splits the layers into input, looped and output parts that must sum to the
    total. The shrink keeps whole pairs, one per part, and scales the parts with the total: 1 + 1 + 1
    layers (the defaults, 8 + 20 + 8 halved, left a negative looped count). Gemma 2's alternating
    kinds are kept as before."""
    cfg, _ = shrink_config(AutoConfig.for_model("dory"), "tiny")
    assert cfg.layer_types == ["sliding_attention", "sliding_attention", "full_attention"]
    assert (cfg.num_hidden_layers, cfg.n_input_layers, cfg.n_recurrent_layers, cfg.n_output_layers) == (3, 1, 1, 1)
    from transformers import DoryForCausalLM

    with torch.device("meta"):
        DoryForCausalLM(cfg)  # builds
    gemma2, _ = shrink_config(AutoConfig.for_model("gemma2"), "tiny")
    assert gemma2.layer_types == ["sliding_attention", "full_attention"]


def test_shrink_keeps_every_layer_kind():
    full = AutoConfig.for_model("qwen3_next")
    cfg, _ = shrink_config(full, "tiny")
    assert set(cfg.layer_types) == set(full.layer_types)
    assert len(cfg.layer_types) == cfg.num_hidden_layers <= 6


def test_shrink_keeps_layer_kinds_given_by_a_period_and_an_offset(registry):
    """Jamba's attention layers are every 8th from layer 4: two tiny layers would have none, and
    the default cache then fails in eager (`get_mask_sizes` on a cache of linear-attention layers only)."""
    full = AutoConfig.for_model("jamba")
    cfg, _ = shrink_config(full, "tiny")
    assert cfg.num_hidden_layers == 2 and set(cfg.layers_block_type) == {"attention", "mamba"}
    assert sorted(set(cfg.layers_num_experts)) == [1, cfg.num_experts]  # dense and MoE layers both kept
    r = run_item("jamba", "head", "eval", registry=registry)
    assert r.verdict == "eager_ok", r.error


@pytest.mark.parametrize("model_type,task,limit", [
    ("janus", "base", 70_000_000),  # VQ-VAE: base_channels x a multiplier per stage (125M uncapped)
    ("qwen2_5_omni", "head", 30_000_000),  # BigVGAN vocoder: upsample_initial_channel halved per stage (138M)
    ("vibevoice_acoustic_tokenizer", "base", 30_000_000),  # num_filters doubled over 6 stages (262M)
])
def test_shrink_caps_conv_base_widths(model_type, task, limit):
    """Conv widths derived from one base value: uncapped, the tiny model was over the budget."""
    # The repository's registry: the generic entry of qwen2_5_omni's head has no forward of its own.
    r = run_spec(RunSpec(model_id=model_type, task=task, mode="eval", pass_name="build"))
    assert r.verdict == "eager_ok", r.error
    assert r.n_params < limit


def test_an_audio_mask_the_forward_documents_as_unused_is_left_out(registry):
    """Qwen2AudioEncoder documents its `attention_mask` as "preserved for compatibility, but it is
    not used"; a long 0/1 mask over frames reached SDPA and failed in eager."""
    import transformers

    from enablebot.model.documented import documented_unused

    assert documented_unused(transformers.Qwen2AudioEncoder, "attention_mask")
    assert not documented_unused(transformers.Wav2Vec2Model, "attention_mask")
    r = run_item("qwen2_audio_encoder", "base", "eval", registry=registry)
    assert r.verdict == "eager_ok", r.error


def test_shrink_rescales_mrope_sections():
    cfg, _ = shrink_config(AutoConfig.for_model("qwen2_vl"), "tiny")
    tc = cfg.text_config
    head_dim = tc.hidden_size // tc.num_attention_heads
    assert sum(tc.rope_parameters["mrope_section"]) == head_dim // 2


def test_overrides_reach_sub_configs_and_are_validated():
    cfg, changes = shrink_config(AutoConfig.for_model("llava"), "tiny",
                                 {"text_config.num_hidden_layers": 1, "vision_config.image_size": 28})
    assert cfg.text_config.num_hidden_layers == 1 and cfg.vision_config.image_size == 28
    assert changes["text_config.num_hidden_layers"] == 1


def test_recipe_with_config_expressions():
    cfg = AutoConfig.for_model("whisper")
    assert eval_dim("2 * config.max_source_positions", config=cfg, batch=2, seq_len=8) == 3000
    assert eval_dim("max(S, config.num_mel_bins // 10)", config=cfg, batch=2, seq_len=4) == 8
    gen = torch.Generator().manual_seed(0)
    t = recipe_tensor({"shape": ["B", "config.num_mel_bins", "S + 1"]}, config=cfg, batch=2, seq_len=5, gen=gen)
    assert tuple(t.shape) == (2, 80, 6) and t.dtype == torch.float32
    ids = recipe_tensor({"shape": ["B", "S"], "dtype": "long", "high": 7}, config=cfg, batch=3, seq_len=4, gen=gen)
    assert ids.dtype == torch.long and int(ids.max()) < 7
    with pytest.raises(ValueError):
        eval_dim("__import__('os')", config=cfg, batch=2, seq_len=4)


def test_nested_recipe_tensors():
    cfg = AutoConfig.for_model("whisper")
    gen = torch.Generator().manual_seed(0)
    spec = {"items": {"full_attention": {"tuple": [{"shape": ["B", 2, "S", 4]}, {"shape": ["B", 2, "S", 4]}]}}}
    kv = recipe_tensor(spec, config=cfg, batch=2, seq_len=5, gen=gen)
    assert set(kv) == {"full_attention"} and [tuple(t.shape) for t in kv["full_attention"]] == [(2, 2, 5, 4)] * 2


def test_shrink_keeps_kv_sharing():
    # Gemma 3n: the last layers reuse the KV caches of earlier layers of their kind, so each
    # kind is kept among both the cache producers and the consumers.
    cfg, _ = shrink_config(AutoConfig.for_model("gemma3n_text"))
    n, shared = cfg.num_hidden_layers, cfg.num_kv_shared_layers
    assert 0 < shared < n
    assert set(cfg.layer_types[:n - shared]) == set(cfg.layer_types[n - shared:]) == set(cfg.layer_types)


def test_recipe_replaces_generic_inputs(registry):
    b = build_model(resolve("bert", registry), task="base")
    recipe = {"drop": ["attention_mask"], "seq_len": 8,
              "tensors": {"token_type_ids": {"shape": ["B", "S"], "dtype": "long", "high": 2}}}
    x = build_inputs(b.model, b.config, b.modality, recipe)
    assert "attention_mask" not in x and tuple(x["input_ids"].shape) == (2, 8)
    assert int(x["token_type_ids"].max()) <= 1


def test_recipe_inputs_hook(registry):
    b = build_model(resolve("bert", registry), task="base")
    with pytest.raises(ValueError):  # only enablebot.* code may be named
        build_inputs(b.model, b.config, b.modality, {"hook": "os:getcwd"})


def test_unknown_optional_package_is_missing_dependency(tmp_path):
    with pytest.raises(MissingDependency) as e:
        check_requires(["enablebot_surely_absent_pkg"])
    assert e.value.package == "enablebot_surely_absent_pkg"
    reg = Registry(path=tmp_path / "r.yaml")
    reg.upsert(ArchEntry(model_type="bert", requires=["enablebot_surely_absent_pkg"]))
    reg.save()
    r = run_item("bert", "base", "eval", registry=reg)
    assert r.verdict == "missing_dependency" and r.missing_dependency == "enablebot_surely_absent_pkg"
    assert missing_package_from(ImportError("No module named 'natten.functional'")) == "natten"
    assert missing_package_from(ImportError("FooModel requires the timm library but it was not found")) == "timm"
    # transformers' lazy module hides the cause behind its own message (5.0's Sam3Model: torchvision)
    try:
        try:
            import enablebot_surely_absent_vision  # noqa: F401
        except ModuleNotFoundError as cause:
            raise ModuleNotFoundError("Could not import module 'Sam3Model'. Are this object's requirements "
                                      "defined correctly?") from cause
    except ModuleNotFoundError as e:
        assert missing_package_from(e) == "enablebot_surely_absent_vision"
    assert missing_package_from(ValueError("shape mismatch")) is None


def test_loss_from_outputs():
    w = torch.ones(3, requires_grad=True)
    out = {"logits": w * 2, "hidden": (w * 3, torch.arange(3))}
    loss = loss_from_outputs(out)
    assert float(loss.detach()) == pytest.approx(5.0)
    own = {"loss": (w * 4).sum(), "logits": w}
    assert float(loss_from_outputs(own).detach()) == pytest.approx(12.0)
    with pytest.raises(ValueError):
        loss_from_outputs({"ids": torch.arange(3)})


def test_build_pass_items_and_coverage():
    items = plan(Registry.load_cached(None), SweepOptions(pass_="build", modes=("eval",)), ["llama", "vitpose"])
    got = {(it.model_id, it.task, it.mode, it.scenario) for it in items}
    assert ("llama", "base", "eval", "call") in got and ("llama", "head", "eval", "call") in got
    assert ("vitpose", "head", "eval", "call") in got and ("vitpose", "base", "eval", "call") not in got  # fallback head
    rs = [RunResult(RunSpec(model_id=m, pass_name="build"), verdict=v)
          for m, v in (("a", "eager_ok"), ("b", "eager_error"), ("c", "missing_dependency"))]
    s = summarize(rs)
    assert s.coverage == 0.5 and s.missing_dependency == {"?": ["c"]}
    assert [f["key"].split("|")[0] for f in s.failures] == ["b"]


def test_shrink_zeroes_every_dropout_spelling():
    """gpt2-style `*_pdrop` too: train-mode eager must be deterministic, or numerics are inconclusive."""
    cfg, _ = shrink_config(AutoConfig.for_model("gpt2"), "tiny")
    assert (cfg.attn_pdrop, cfg.resid_pdrop, cfg.embd_pdrop) == (0.0, 0.0, 0.0)
    r = run_spec(RunSpec(model_id="gpt2", mode="train", backend="eager", timing=False, repeats=2, warmup=1))
    assert r.numerics.status == "pass" and r.numerics.eager_deterministic, r.numerics


def test_configs_get_the_token_ids_a_checkpoint_carries():
    # transformers 5.0 dropped pad/bos/eos from the base config while 5.0's Glm4vTextModel still read
    # config.pad_token_id: built from the config class, glm46v failed where a checkpoint's config works.
    from transformers import PretrainedConfig

    from enablebot.model.build import define_token_ids

    class Text(PretrainedConfig):
        model_type = "enablebot_text"

    class Outer(PretrainedConfig):
        model_type = "enablebot_outer"

        def __init__(self, **kw):
            super().__init__(**kw)
            self.text_config = Text()

    cfg = Outer()
    with pytest.raises(AttributeError):
        cfg.text_config.pad_token_id  # noqa: B018 - the bare 5.x config has none
    cfg.eos_token_id = 7
    define_token_ids(cfg)
    assert cfg.text_config.pad_token_id is None and cfg.pad_token_id is None
    assert cfg.eos_token_id == 7  # what a config says is kept


def test_mrope_exemption_is_read_from_early_and_late_config_classes():
    from transformers import PretrainedConfig, Qwen2VLTextConfig

    from enablebot.model.shrink import _mrope_exempt

    class Early(PretrainedConfig):  # transformers 5.0-5.5 passed it up from __init__
        model_type = "enablebot_early"

        def __init__(self, **kwargs):
            super().__init__(ignore_keys_at_rope_validation={"mrope_section"}, **kwargs)

    class Plain(PretrainedConfig):
        model_type = "enablebot_plain"

    assert _mrope_exempt(Early) and not _mrope_exempt(Plain)
    assert _mrope_exempt(Qwen2VLTextConfig)  # the installed release's own class


def test_train_mode_of_a_model_without_a_gradient_is_skipped_with_the_reason():
    """WavTokenizer's encoder returns integer codes: nothing a user trains through. Train mode
    does not apply (skipped, with why), which is not a failure to build or run."""
    r = run_spec(RunSpec(model_id="wavtokenizer_encoder", task="base", mode="train", pass_name="build"))
    assert r.verdict == "skipped" and "train mode does not apply" in r.note and "requires grad" in r.note
    r = run_spec(RunSpec(model_id="wavtokenizer_encoder", task="base", mode="eval", pass_name="build"))
    assert r.verdict == "eager_ok", r.error


def test_a_type_whose_mapped_class_transformers_lacks_is_skipped_not_a_build_failure():
    """transformers 5.25 maps voxtral_realtime_text to VoxtralRealtimeTextModel but defines no such
    class (the text config lives inside VoxtralRealtimeForConditionalGeneration)."""
    r = run_spec(RunSpec(model_id="voxtral_realtime_text", task="base", mode="eval", pass_name="build"))
    assert r.verdict == "skipped" and "has no class 'VoxtralRealtimeTextModel'" in r.note


def test_train_mode_of_an_inference_mode_forward_is_skipped():
    """Sam2VideoModel.forward is decorated `@torch.inference_mode()`: nobody trains through it (train
    mode failed inside it with a KeyError)."""
    r = run_spec(RunSpec(model_id="sam2_video", task="base", mode="train", pass_name="build"))
    assert r.verdict == "skipped" and "@torch.inference_mode()" in r.note


def test_the_prepared_model_carries_no_state_from_the_trial_forwards():
    """prepare's trial forwards (eval, then training mode for arguments only training requires) run
    on the model they probe; the model handed out is copied before them. CLVP caches its rotary
    table as a plain attribute (made on the CPU it stayed there after a move to CUDA: an eager_error
    no user meets); a training-mode trial moves BatchNorm's running statistics."""
    import torch

    from enablebot.model.prepare import prepare
    from enablebot.results import RunSpec

    clvp = prepare(RunSpec(model_id="clvp", task="base", mode="train", pass_name="dynamo"), reuse=False)
    caches = [m.cached_rotary_positional_embedding for m in clvp.model.modules()
              if hasattr(m, "cached_rotary_positional_embedding")]
    assert caches and all(c is None for c in caches)
    resnet = prepare(RunSpec(model_id="resnet", task="base", mode="train", pass_name="dynamo"), reuse=False)
    bns = [m for m in resnet.model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert bns and all(int(m.num_batches_tracked) == 0 and bool((m.running_mean == 0).all()) for m in bns)
