"""Day 0 with no registry knowledge: the generic rules that build what hand-written recipes built.

Each case is a transformers 5.25 type that failed the day-0 build with a generic entry and has
a hand-written registry recipe today; the generic rule it exercises builds and runs it without
that recipe (the registry under test has no entry at all), and says what it changed:
- layouts.py: another layout of a generic input when the first does not run (a waveform's
  channel axis, frames-first features, a larger image, audio padded to whole windows);
- repairs.py: a config attribute the modeling code reads and the default config lacks;
- narrow.py: widths the shrink rules missed, halved until the model fits the budget;
- widths.py: a full-size width where it meets a shrunk one (`mat1 and mat2 shapes ...`);
- documented.py: a codec's latent `frames`; shrink.py: `vocab_size_per_layer_input`.
"""

from __future__ import annotations

import pytest
import torch
import transformers

from enablebot.measure.runner import run_spec
from enablebot.model.build import build_model
from enablebot.model.inputs import build_inputs
from enablebot.model.layouts import relayout
from enablebot.model.registry import Registry
from enablebot.model.repairs import repair
from enablebot.model.resolve import resolve
from enablebot.model.widths import mismatch_candidates
from enablebot.results import RunSpec


@pytest.fixture(scope="module")
def no_entry(tmp_path_factory) -> Registry:
    reg = Registry(path=tmp_path_factory.mktemp("reg") / "model_registry.yaml")
    reg.save()
    return reg


def _needs(model_type: str):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return pytest.mark.skipif(model_type not in CONFIG_MAPPING_NAMES,
                              reason=f"{model_type} is not in transformers {transformers.__version__} (CI pins 5.25)")


CASES = [
    # (type, task, what the item's note or the build's changes must say)
    ("omniasr_ctc", "base", "input_values: waveform with a channel axis"),
    ("parakeet_tdt", "base", "input_features: features frames first"),
    ("pp_ocrv6_tiny_rec", "base", "pixel_values: image 2x larger"),
    ("qwen3_asr_encoder", "base", "input_features: padded to whole windows"),
    ("step3p7", "base", "config sliding_window=16 on Step3p7TextConfig"),
    ("qwen2_5_omni_thinker", "base", "config vision_start_token_id="),
    ("nemotron3_diarization", "base", "config head_config.audio_hidden_size=64 (a full-size width met a shrunk one)"),
    # asked_width.py: the width the forward's error asks of a generic input
    ("granite_speech5_encoder", "base", "input_features: axis 2 128 -> 320 (the width the forward asked for)"),
    ("fun_asr_nano_encoder", "base", "input_features: axis 2 128 -> 560"),
    ("vibevoice_acoustic_tokenizer_decoder", "base", "hidden_states: axis 1 32 -> 64"),
    # ... and a waveform at the asked single channel, then doubled until the strided convolutions fit
    ("vibevoice_acoustic_tokenizer_encoder", "base", "(the forward's convolutions need a longer input)"),
    # trial.one_of: the forward wants one of two arguments (text-only call), then the audio's length
    # scaled to the text length the model derives from it (asked_width.py: one token per 8 frames)
    ("voxtral_realtime", "head", "input_features: by its rule (the forward asks for one of the arguments it names); "
                                 "input_features: axis 2 128 -> 256"),
    # unset.py: values the default config leaves unset, at construction and (rebuilt) at forward
    ("lfm2_moe", "base", "Lfm2MoeConfig.layer_types=['conv', 'full_attention'] (per layer, the kinds"),
    ("qwen4_exp_text", "base", "indexer_compress_ratio=1 (read as self.compress_ratio"),
    ("cohere_compass_text", "base", "rope_parameters={'full_attention': {'rope_type': 'default'"),
    ("vitmatte", "head", "fusion_hidden_sizes=[256, 128, 64, 32] (a tuple where the code concatenates lists)"),
    ("deepseek_ocr2", "base", "num_experts_per_tok=2 (read as self.top_k"),
    ("diffusion_gemma", "base", "top_k_experts=2 (a count the code reads"),
    ("paddleocr_vl", "base", "rope_parameters['mrope_section']=[2, 3, 3] (the code's default [16, 24, 24] scaled"),
    ("granite4_vision", "head", "Granite4VisionConfig.downsample_rate='1/4' (the value its config class's docstring gives)"),
    ("muse_glimmer_assistant", "base", "context_hidden_states: axis 2 64 -> 320"),
    # trial.add_training_inputs: an argument the forward requires only in training mode
    ("molmo2", "base", "mm_token_type_ids: by its rule (the forward requires it in training)"),
    # parent_inputs.py: a tower's arguments as the composite that contains it calls it
    ("kimi_k25_vision", "base", "inputs as kimi_k25 calls its vision_config model (grid_thw, pixel_values)"),
    # unset.py: per-stage width lists a head indexes (and their kernel sizes); shrink.py: a per-layer
    # list of head counts follows the shrunk counts
    ("sapiens2", "head", "Sapiens2HeadConfig.upsample_out_channels=[64, 64] (per-stage widths the code indexes"),
    ("pp_doclayout_v2", "head", "PPDocLayoutV2Config.class_thresholds=[0.5, 0.5] (one entry per label"),
    # processor_inputs.py: a tower's inputs from the image processor of its type or its composite
    ("gemma4_vision", "base", "inputs from gemma4's image processor Gemma4ImageProcessorPil: pixel_position_ids (its image_position_ids)"),
    ("minicpmv4_7_vision", "base", "image processor MiniCPMV4_6ImageProcessorPil: pixel_values, target_sizes"),
]


@pytest.mark.parametrize("model_type,task,said", CASES, ids=[c[0] for c in CASES])
def test_a_generic_rule_builds_what_a_recipe_built(model_type, task, said, no_entry):
    if model_type not in transformers.models.auto.configuration_auto.CONFIG_MAPPING_NAMES:
        pytest.skip(f"{model_type} is not in transformers {transformers.__version__} (CI pins 5.25)")
    assert no_entry.get(model_type) is None
    known = Registry.load().entries[model_type]
    assert known.inputs or known.config  # the hand-written knowledge the generic rule does without
    r = run_spec(RunSpec(model_id=model_type, task=task, mode="train", pass_name="build",
                         registry=str(no_entry.path)))
    assert r.verdict == "eager_ok", r.error
    assert said in r.note


@_needs("t5gemma2_encoder")
@_needs("dory")
def test_a_kind_list_in_pairs_builds_and_runs_without_its_recipe(no_entry):
    """Dory's recipe set its layer kinds in pairs and its part counts by hand; the shrink now keeps
    whole pairs and scales the parts (shrink._whole_pairs, _part_counts), so the generic entry runs."""
    known = Registry.load().entries["dory"]
    assert "layer_types" in known.config  # the hand-written knowledge the shrink does without
    r = run_spec(RunSpec(model_id="dory", task="head", mode="train", pass_name="build", registry=str(no_entry.path)))
    assert r.verdict == "eager_ok", r.error


def test_a_config_attribute_read_at_construction_is_set_and_recorded(no_entry):
    b = build_model(resolve("t5gemma2_encoder", no_entry), task="base")
    assert b.changes["dropout_rate (set: the default config lacks it)"] == 0.0
    x = build_inputs(b.model, b.config, b.modality, None)
    assert torch.isfinite(b.model(**x).last_hidden_state).all()


@_needs("muse_spark_audio")
def test_an_over_budget_model_is_narrowed_and_its_waveform_padded_to_whole_windows(no_entry):
    b = build_model(resolve("muse_spark_audio", no_entry), task="base")
    default = type(b.config)()
    assert b.changes["hidden_sizes"] == [x // 2 for x in default.hidden_sizes]  # halved together, one round
    assert b.changes["out_hidden_size"] == default.out_hidden_size // 2
    assert sum(p.numel() for p in b.model.parameters()) <= 100_000_000
    notes: list[str] = []
    x = build_inputs(b.model, b.config, b.modality, None, notes=notes)
    assert x["input_values"].shape[-1] % b.config.samples_per_token == 0
    assert notes == ["input_values: padded to whole windows (the forward asks for a multiple)"]


@_needs("gemma4_text")
def test_a_per_layer_vocabulary_is_shrunk_like_the_vocabulary(no_entry):
    b = build_model(resolve("gemma4_text", no_entry), task="base")
    assert b.config.vocab_size_per_layer_input <= 1024


@_needs("mimi_decoder")
def test_a_codec_decoders_latents_get_their_documented_shape(no_entry):
    b = build_model(resolve("mimi_decoder", no_entry), task="base")
    x = build_inputs(b.model, b.config, b.modality, None)
    assert x["latents"].shape == (2, b.config.hidden_size, 8)


def test_a_model_that_runs_keeps_its_generic_layout_and_a_recipe_tensor_is_never_relaid(no_entry):
    b = build_model(resolve("wav2vec2", no_entry), task="base")
    notes: list[str] = []
    x = build_inputs(b.model, b.config, b.modality, None, notes=notes)
    assert x["input_values"].dim() == 2 and notes == []
    # A recipe's tensor is the recipe's, even where it does not run: no other layout is tried.
    recipe = {"tensors": {"input_values": {"shape": ["B", 1, 4000]}}}
    x = build_inputs(b.model, b.config, b.modality, recipe, notes=notes)
    assert x["input_values"].shape == (2, 1, 4000) and notes == []


def test_no_layout_is_kept_when_none_runs():
    class Picky(torch.nn.Module):
        def forward(self, input_values):
            raise RuntimeError("never runs")

    x = {"input_values": torch.zeros(2, 4000)}
    out, notes, err = relayout(Picky(), x, {"input_values"}, merges_images=False)
    assert out is x and notes == [] and "never runs" in str(err)


def test_a_too_short_input_is_doubled_until_its_convolutions_fit_and_never_past_the_cap():
    from enablebot.model.layouts import MAX_SAMPLES

    short = "Calculated padded input size per channel: (3). Kernel size: (5). Kernel size can't be greater than actual input size"

    class Strided(torch.nn.Module):
        def __init__(self, need: int):
            super().__init__()
            self.need = need

        def forward(self, input_values, attention_mask):
            assert attention_mask.shape == input_values.shape and bool(attention_mask.all())
            if input_values.shape[-1] < self.need:
                raise RuntimeError(short)
            return input_values.sum()

    x = {"input_values": torch.zeros(2, 100), "attention_mask": torch.ones(2, 100, dtype=torch.long)}
    out, notes, err = relayout(Strided(500), x, {"input_values", "attention_mask"}, merges_images=False)
    assert err is None and out["input_values"].shape == (2, 800) and out["attention_mask"].shape == (2, 800)
    assert notes == ["input_values: last axis 100 -> 800 (the forward's convolutions need a longer input)"]
    # longer than the cap never runs: nothing is kept; a recipe's tensor (not generic) is never lengthened
    for model, generic in ((Strided(MAX_SAMPLES + 1), {"input_values", "attention_mask"}), (Strided(500), set())):
        out, notes, err = relayout(model, x, generic, merges_images=False)
        assert out is x and notes == [] and "Kernel size" in str(err)


def test_repairs_only_config_attributes_with_a_known_harmless_value(no_entry):
    cfg = transformers.LlamaConfig(vocab_size=1024, hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                   intermediate_size=64)
    # unknown name: nothing is guessed
    assert repair(cfg, AttributeError("'LlamaConfig' object has no attribute 'num_foo_bars'")) is None
    assert not hasattr(cfg, "num_foo_bars")
    # not a config class the tree holds, or not an attribute error at all
    assert repair(cfg, AttributeError("'NoneType' object has no attribute 'attention_dropout'")) is None
    assert repair(cfg, RuntimeError("'LlamaConfig' object has no attribute 'attention_multiplier'")) is None
    fixed = repair(cfg, AttributeError("'LlamaConfig' object has no attribute 'attention_multiplier'"))
    assert fixed is not None and cfg.attention_multiplier == 1.0
    fixed = repair(cfg, AttributeError("'LlamaConfig' object has no attribute 'vision_start_token_id'"))
    used = {cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id}
    assert 0 < cfg.vision_start_token_id < 1024 and cfg.vision_start_token_id not in used


def test_only_width_attributes_holding_the_full_size_width_are_candidates():
    cfg = transformers.LlamaConfig(vocab_size=512, hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                   intermediate_size=512, max_position_embeddings=512)
    err = RuntimeError("mat1 and mat2 shapes cannot be multiplied (20x64 and 512x64)")
    # intermediate_size is a width; vocab_size and max_position_embeddings hold 512 too but are not
    assert mismatch_candidates(cfg, err) == [("intermediate_size", 64)]
    assert mismatch_candidates(cfg, RuntimeError("shape '[2, 2, 0, 256]' is invalid")) == []
    assert mismatch_candidates(cfg, None) == []


def test_an_asked_width_names_only_a_generic_float_input_whose_shape_fits_the_error():
    from enablebot.model.asked_width import MAX_WIDTH, asked_widths, with_width

    x = {"input_features": torch.randn(2, 80, 128), "input_features_mask": torch.ones(2, 80, dtype=torch.long),
         "pixel_values": torch.randn(2, 80, 128)}
    err = RuntimeError("Given normalized_shape=[160], expected input with shape [*, 160], but got input of size[2, 80, 128]")
    ws = asked_widths(err, x, generic={"input_features", "input_features_mask"})
    assert [(w.arg, w.axis, w.width) for w in ws] == [("input_features", 2, 160)]  # pixel_values is a recipe's
    assert with_width(x, ws[0])["input_features"].shape == (2, 80, 160)
    # an intermediate activation's shape names no input; an absurd width is a missed shrink, not an input's
    assert asked_widths(RuntimeError("expected input[2, 384, 2, 8] to have 12 channels, but got 384 channels"),
                        x, generic=set(x)) == []
    huge = RuntimeError(f"mat1 and mat2 shapes cannot be multiplied (160x128 and {MAX_WIDTH + 1}x64)")
    assert asked_widths(huge, x, generic=set(x)) == []
    assert asked_widths(ValueError("something else"), x, generic=set(x)) == []


def test_a_size_mismatch_naming_no_input_scales_only_a_generic_audio_input_by_the_two_sizes_ratio():
    from enablebot.model.asked_width import asked_widths

    x = {"input_ids": torch.ones(2, 32, dtype=torch.long), "input_features": torch.randn(2, 128, 128),
         "pixel_values": torch.randn(2, 3, 64, 64)}
    cfg = transformers.WhisperConfig(num_mel_bins=128)
    err = RuntimeError("The size of tensor a (32) must match the size of tensor b (16) at non-singleton dimension 1")
    ws = asked_widths(err, x, generic=set(x), config=cfg)
    assert [(w.arg, w.axis, w.width) for w in ws] == [("input_features", 2, 256), ("input_features", 2, 64)]
    assert asked_widths(err, x, generic={"input_ids", "pixel_values"}, config=cfg) == []  # a recipe's audio


def test_one_of_two_named_arguments_is_added_only_when_neither_is_given_and_the_forward_takes_it():
    from enablebot.model.tensors import Ctx
    from enablebot.model.trial import one_of

    class Either(torch.nn.Module):
        def forward(self, input_ids=None, input_features=None, encoder_inputs_embeds=None):
            return input_ids

    cfg = transformers.WhisperConfig(num_mel_bins=80)
    ctx = Ctx(model=Either(), config=cfg, batch=2, seq_len=16, gen=torch.Generator().manual_seed(0),
              out={"input_ids": torch.ones(2, 16, dtype=torch.long)})
    err = ValueError("You must specify exactly one of input_features or encoder_inputs_embeds")
    assert list(one_of(ctx.model, err, ctx)) == ["input_features"]
    assert one_of(ctx.model, ValueError("You must specify exactly one of foo_values or bar_values"), ctx) == {}
    assert one_of(ctx.model, RuntimeError(str(err)), ctx) == {}  # only the forward's own argument check
    ctx.out["encoder_inputs_embeds"] = torch.zeros(2, 4, 8)  # one is given: the error is another matter
    assert one_of(ctx.model, err, ctx) == {}


def test_unset_values_are_filled_only_from_a_modeling_frame_that_reads_them_as_none():
    from enablebot.model.unset import fill_unset

    cfg = transformers.LlamaConfig(num_hidden_layers=2)
    cfg.layer_types = None
    try:
        cfg.layer_types[0]  # a TypeError outside any transformers modeling file: not ours to read
    except TypeError as e:
        assert fill_unset(cfg, e) == []
    assert cfg.layer_types is None
    assert fill_unset(cfg, KeyError("full_attention")) == []  # no modeling frame, no layer types
    assert fill_unset(None, TypeError("'NoneType' object is not subscriptable")) == []


def test_sections_are_scaled_to_the_width_they_split_and_a_list_field_is_never_given_a_count():
    from enablebot.model.unset import _rescaled, fill_unset

    cfg = transformers.Qwen2VLConfig()
    text = cfg.get_text_config()
    text.rope_parameters = {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [16, 24, 24]}
    fills = _rescaled([text], 8, [16, 24, 24])
    assert text.rope_parameters["mrope_section"] == [2, 3, 3] and fills[0].name == "rope_parameters['mrope_section']"
    assert _rescaled([text], 2, [16, 24, 24]) == []  # fewer than one per section: not a width to scale to
    err = RuntimeError("split_with_sizes expects split_sizes to sum exactly to 8 (input tensor's size at "
                       "dimension -1), but got split_sizes=[9, 9, 9]")
    assert fill_unset(cfg, err) == []  # no config (nor the code) holds these sizes


@_needs("gemma4_assistant")
def test_a_default_config_its_own_validation_refuses_is_built_with_the_values_it_names(no_entry):
    b = build_model(resolve("gemma4_assistant", no_entry), task="head")
    said = "\n".join(b.notes)
    assert "text_config.hidden_size_per_layer_input=0 (the default config's own validation asks for it)" in said
    assert b.config.get_text_config().hidden_size_per_layer_input == 0


def test_a_validation_message_without_a_value_names_nothing():
    from enablebot.model.repairs import asked_value

    assert asked_value("llama", ValueError("hidden_size must be divisible by the number of heads")) is None
    assert asked_value("llama", ValueError("foo must be __import__('os'), got 3")) is None  # never evaluated
    assert asked_value("llama", ValueError("not_a_field must be 0, got 3")) is None


def test_a_towers_call_is_captured_by_name_from_its_composite():
    """parent_inputs.capture: the first call of the sub-model built from the tower's config class,
    positional arguments bound to the forward's names, None left out, tensors detached copies."""
    from enablebot.model.parent_inputs import capture

    class TowerConfig:
        pass

    class Tower(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = TowerConfig()
            self.proj = torch.nn.Linear(4, 4)

        def forward(self, pixels, grid=None, scale=None):
            return self.proj(pixels) * grid.sum()

    class Composite(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tower = Tower()

        def forward(self, x):
            grid = torch.tensor([[1, 2, 2]])
            return self.tower(x * 2, grid=grid)

    x = torch.randn(2, 4)
    module, args = capture(Composite(), {"x": x}, TowerConfig)
    assert isinstance(module, Tower) and sorted(args) == ["grid", "pixels"]  # scale=None left out
    assert torch.equal(args["pixels"], x * 2) and args["grid"].tolist() == [[1, 2, 2]]
    assert capture(Composite(), {"x": x}, int) is None  # no sub-model of that config: nothing


@_needs("granite_docling_vision")
def test_a_composite_that_never_calls_its_tower_gives_it_no_inputs(no_entry):
    """granite_docling's generic inputs run its text only (no image placeholders the rules can
    place), so its vision tower is never called: the tower keeps its own error, no capture."""
    r = run_spec(RunSpec(model_id="granite_docling_vision", task="base", mode="eval", pass_name="build",
                         registry=str(no_entry.path)))
    assert r.verdict == "eager_error" and "captured" not in r.note


def test_an_annotation_admits_only_its_own_members():
    """A strict config refuses an int where `list[int] | None` is declared: the unset rules must
    not read the `int` inside the list as an int field (they did, and Sapiens2 failed to build)."""
    from enablebot.model.unset import _admits

    assert not _admits("list[int] | None", "int") and _admits("list[int] | None", "list")
    assert _admits("int | None", "int") and _admits("typing.Optional[int]", "int")
    assert not _admits("typing.Optional[list[int]]", "int") and _admits("<class 'int'>", "int")
    assert not _admits("dict | PreTrainedConfig | None", "int") and _admits("", "int")


@_needs("sapiens2")
def test_a_sub_config_left_none_gets_its_class_defaults_and_an_auto_config_is_never_guessed():
    """Sapiens2 at 5.10.1 left `head_config` None and its head read `config.head_config.X`; the
    sub-config comes from the class the config names in `sub_configs`. A sub-config whose class is
    AutoConfig (any model type) is not guessed."""
    from enablebot.model.unset import _sub_configs, fill_unset

    cfg = transformers.Sapiens2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_attention_heads=2, intermediate_size=64, image_size=64)
    cfg.head_config = None
    with pytest.raises(AttributeError) as e:
        transformers.Sapiens2ForSemanticSegmentation(cfg)
    fills = fill_unset(cfg, e.value)
    assert [(f.where, f.name) for f in fills] == [("Sapiens2Config", "head_config")]
    assert type(cfg.head_config).__name__ == "Sapiens2HeadConfig"
    holder = _AutoHolder()
    assert _sub_configs([holder], "x = config.vision_config.hidden_size", "'NoneType' object has no attribute 'hidden_size'") == []
    assert holder.vision_config is None


class _AutoHolder:
    """A config whose vision sub-config is any model type (AutoConfig) with no declared default."""
    sub_configs = {"vision_config": transformers.AutoConfig}

    def __init__(self):
        self.vision_config = None


class _OldStyleHolder:
    """Diffusion Gemma at 5.11.0: AutoConfig in sub_configs, the default type only in its own code."""
    sub_configs = {"vision_config": transformers.AutoConfig, "audio_config": transformers.AutoConfig}

    def __post_init__(self):
        if isinstance(self.vision_config, dict):
            self.vision_config["model_type"] = self.vision_config.get("model_type", "gemma4_vision")
        if isinstance(self.audio_config, dict):
            self.audio_config["model_type"] = self.audio_config.get("model_type", "__import__('os')")


def test_a_sub_configs_class_is_the_declared_default_or_the_type_its_own_code_names():
    from enablebot.model.unset import _sub_config_class

    assert _sub_config_class(transformers.LlavaConfig, "text_config")[0] is transformers.LlamaConfig  # sub_configs_defaults
    assert _sub_config_class(_OldStyleHolder, "vision_config")[0].model_type == "gemma4_vision"
    assert _sub_config_class(_OldStyleHolder, "audio_config") == (None, "")  # not a model type: nothing
    assert _sub_config_class(_AutoHolder, "vision_config") == (None, "")  # AutoConfig, no default: no guess


def test_a_none_read_through_a_local_is_filled_from_the_config_attribute_the_local_copied():
    """`heads // kv` where `kv = config.num_global_key_value_heads` just above (Diffusion Gemma 5.11.0)."""
    from enablebot.model.unset import fill_unset

    cfg = transformers.LlamaConfig(num_hidden_layers=1)
    cfg.num_global_key_value_heads = None
    err = None
    try:
        _divide_through_a_local(cfg)
    except TypeError as e:
        err = e
    assert err is not None
    # the frame is this test file, not a transformers modeling file: nothing is read
    assert fill_unset(cfg, err) == [] and cfg.num_global_key_value_heads is None


def _divide_through_a_local(config):
    kv = config.num_global_key_value_heads
    return config.num_attention_heads // kv


def test_a_documented_value_is_read_from_its_own_entry_and_never_made_up():
    """unset.doc_value: the default an entry states, else its first example, as a literal; an entry
    that states none (`defaults to `None``, prose only), another attribute's entry or no entry gives
    None. Counts are not taken from docstrings (_documented): a documented 4096 is a full size."""
    from enablebot.model.unset import _documented, doc_value

    class Cfg:
        r"""
        rate (`str`, *optional*):
            Fractional rate, e.g. `"1/4"` or `"3/8"`.
        layers (`list`, *optional*, defaults to `[12, 15]`):
            Target layers.
        table (`dict`, *optional*, defaults to `None`):
            A table; see `rate`, e.g. `"ignored"` belongs to no entry below.
        width (`int`, *optional*, defaults to 4096):
            The width, e.g. `4096`.
        prose (`list`, *optional*):
            Pairs of indices.
        kinds (`list[str]`, *optional*):
            Per layer, e.g. `["dense", "sparse", ...]`.
        """

        def __init__(self):
            self.rate = self.layers = self.table = self.width = self.prose = self.kinds = None

    assert doc_value(Cfg, "rate") == "1/4" and doc_value(Cfg, "layers") == [12, 15]
    assert doc_value(Cfg, "table") is None and doc_value(Cfg, "prose") is None
    assert doc_value(Cfg, "missing") is None
    assert doc_value(Cfg, "kinds") is None  # an elided example is no value
    c = Cfg()
    fills = _documented([c], "q, k = config.rate.split('/'); w = config.width; t = config.table['x']")
    assert [(f.name, f.value) for f in fills] == [("rate", "1/4")]
    assert c.width is None and c.table is None


def test_a_per_layer_head_list_follows_the_shrunk_head_counts():
    from enablebot.model.shrink import shrink_dict

    d = {"model_type": "x", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 16,
         "num_key_value_attention_heads": 8, "num_key_value_heads_per_layer": [16, 8, 8, 16]}
    changes = shrink_dict(d)
    heads, kv = d["num_attention_heads"], d["num_key_value_attention_heads"]
    assert kv < 8 and heads % kv == 0
    assert set(d["num_key_value_heads_per_layer"]) <= {heads, kv}  # full-attention and GQA layers kept
    assert "num_key_value_heads_per_layer" in changes


def test_processor_tensors_reach_the_forward_only_by_name_or_the_image_pixel_synonym():
    import torch

    from enablebot.model.processor_inputs import _by_parameter, from_processor

    params = {"pixel_values": None, "pixel_position_ids": None, "target_sizes": None}
    out = {"pixel_values": torch.zeros(1), "image_position_ids": torch.zeros(1), "num_soft_tokens_per_image": torch.zeros(1),
           "grids": [[0, 0]]}
    args, renamed = _by_parameter(out, params)
    assert sorted(args) == ["pixel_position_ids", "pixel_values"] and renamed == {"pixel_position_ids": "image_position_ids"}
    # a text model has no image argument: no processor is asked, whatever its type registers
    llama = transformers.LlamaModel(transformers.LlamaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1,
                                                             num_attention_heads=2, intermediate_size=32))
    assert from_processor(llama, llama.config, "llama", batch=2, gen=torch.Generator(), runs=lambda m, x: None) is None


@_needs("gemma4_vision")
def test_processor_inputs_that_do_not_run_the_model_are_not_kept(no_entry):
    """Gemma 4's processor covers its tower's arguments, but a forward that refuses them (here: a
    verdict of the trial) leaves nothing: the rule never hands out inputs that did not run."""
    import torch

    from enablebot.model.processor_inputs import from_processor

    b = build_model(resolve("gemma4_vision", no_entry), task="base")
    refused = from_processor(b.model, b.config, "gemma4_vision", batch=2, gen=torch.Generator().manual_seed(0),
                             runs=lambda m, x: RuntimeError("no"))
    assert refused is None
    got = from_processor(b.model, b.config, "gemma4_vision", batch=2, gen=torch.Generator().manual_seed(0),
                         runs=lambda m, x: None)
    assert got is not None and got.owner == "gemma4" and got.inputs["pixel_values"].shape[0] == 2


def test_a_per_label_list_is_filled_by_its_name_even_where_no_annotation_admits_only_a_list():
    """PP-DocLayoutV2 at 5.3.0 declares `class_thresholds=None` in a plain __init__ (no annotation,
    which admits an int too): the per-label rule comes before the count rule. Names it does not know
    get nothing."""
    from enablebot.model.unset import _count

    class Plain:
        def __init__(self):
            self.num_labels, self.class_thresholds, self.class_order, self.class_colors = 3, None, None, None

    c = Plain()
    assert [f.value for f in _count(c, "class_thresholds", "x")] == [[0.5, 0.5, 0.5]]
    assert c.class_order is None and _count(c, "class_order", "x")[0].value == [0, 1, 2]
    assert all(f.name != "class_colors" or not isinstance(f.value, list) for f in _count(c, "class_colors", "x"))


@_needs("timesfm2_5")
def test_a_sequence_of_1d_series_gets_one_series_per_batch_item_and_runs(no_entry):
    # TimesFM 2.5's head documents `past_values` as `Sequence[torch.Tensor]`, "Each tensor is a 1D
    # time series"; the registry's recipe gives it a tensor, day 0 has only the docstring.
    assert Registry.load().entries["timesfm2_5"].inputs
    b = build_model(resolve("timesfm2_5", no_entry), task="head")
    x = build_inputs(b.model, b.config, b.modality, None, seq_len=32)
    assert isinstance(x["past_values"], list) and [t.shape for t in x["past_values"]] == [(32,), (32,)]
    r = run_spec(RunSpec(model_id="timesfm2_5", task="head", mode="eval", pass_name="build", registry=str(no_entry.path)))
    assert r.verdict == "eager_ok", r.error


def test_only_a_sequence_documented_as_1d_tensors_is_given_series():
    from enablebot.model.documented import documented_tensor

    class M:
        def forward(self, a, b):
            """
            Args:
                a (`list[torch.Tensor]`):
                    One image per sample.
                b (`Sequence[torch.FloatTensor]`):
                    Each tensor is a 1D signal.
            """

    gen = torch.Generator().manual_seed(0)
    assert documented_tensor(M(), "a", config=None, batch=2, seq_len=8, gen=gen) is None  # shape unknown
    got = documented_tensor(M(), "b", config=None, batch=3, seq_len=8, gen=gen)
    assert [t.shape for t in got] == [(8,)] * 3
