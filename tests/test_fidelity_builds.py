"""Items that failed to build or run eager where an independent harness ran them (issue 28),
each through the `call` scenario on a real tiny model: the generic rules and the registry data
that fixed them. On transformers 5.17 and 5.25 alike (the rules read no version)."""

from __future__ import annotations

import pytest
import torch

from enablebot.measure import scenarios
from enablebot.model.build import build_model
from enablebot.model.inputs import build_inputs
from enablebot.model.registry import Registry
from enablebot.model.resolve import resolve


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry.load_cached(None)


def _known(model_type: str) -> bool:
    """Whether this transformers release has the model type (some are 5.25-only)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return model_type in CONFIG_MAPPING_NAMES


def _newer(model_type: str, task: str = "head"):
    """A (model_type, task) case skipped on a release that lacks the type."""
    return pytest.param(model_type, task, marks=pytest.mark.skipif(
        not _known(model_type), reason=f"{model_type} is not in this transformers release"))


def _newer1(model_type: str):
    """A model_type case skipped on a release that lacks the type."""
    return pytest.param(model_type, marks=pytest.mark.skipif(
        not _known(model_type), reason=f"{model_type} is not in this transformers release"))


def _call(model_type: str, registry: Registry, task: str = "base"):
    res = resolve(model_type, registry)
    b = build_model(res, task=task)
    x = build_inputs(b.model, b.config, b.modality, res.entry.inputs if res.entry else None)
    plan = scenarios.plan("call", b.model, b.config, x, b.modality, "eval")
    return b, x, plan


def test_pad_id_stays_inside_the_vocabulary_the_ids_came_from(registry):
    # Dia's text config is the audio decoder's (pad 1025) and its byte encoder has 256 rows;
    # get_input_embeddings is not implemented, so the ids bound the vocabulary.
    b, x, plan = _call("dia", registry)
    inp = plan.steps[0].make_inputs()
    mask, ids = inp["attention_mask"], inp["input_ids"]
    assert plan.padding.side == "right" and bool((mask == 0).any())
    assert int(ids.max()) < b.config.encoder_config.vocab_size
    assert int(ids.max()) <= int(x["input_ids"].max())
    with torch.no_grad():
        b.model(**inp)


def test_audio_mask_that_the_forward_rejects_is_left_out(registry):
    # AST's attention_mask masks its patch sequence, not frames; its feature extractor returns
    # none by default: the padded audio goes alone.
    b, x, plan = _call("audio-spectrogram-transformer", registry)
    inp = plan.steps[0].make_inputs()
    assert "attention_mask" not in inp and plan.padding.key is None
    lengths = plan.padding.lengths
    assert lengths[-1] < lengths[0]
    assert bool((inp["input_values"][-1, lengths[-1]:] == 0).all())  # the padded frames are silence
    with torch.no_grad():
        b.model(**inp)


def test_an_encoder_that_rejects_a_frame_mask_runs_on_the_padded_audio(registry):
    # Voxtral Realtime's encoder: on 5.17 its `attention_mask` is over the downsampled frames (its
    # own head never passes one) and its extractor returns none unless asked: the padded audio
    # goes alone. On 5.25 the encoder takes the frame mask. Either way the padded call runs.
    b, _, plan = _call("voxtral_realtime_encoder", registry)
    inp = plan.steps[0].make_inputs()
    assert plan.padding.lengths[-1] < plan.padding.lengths[0]
    with torch.no_grad():
        b.model(**inp)


def test_audio_mask_stays_where_the_forward_takes_one(registry):
    b, _, plan = _call("wav2vec2", registry)
    assert plan.padding.key == "attention_mask"


# Registry data (no rule in code): hybrid models keep an attention layer as released
# checkpoints have (the default cache needs one), BLT's top-level layer count, CSM's text ids;
# Qwen3-Omni's talker codebook and code2wav width (over the parameter budget without them).
# Dory's layer counts in its (attention, mlp) pair layout (5.24+).
@pytest.mark.parametrize("model_type", ["bamba", "granitemoehybrid", "recurrent_gemma", "blt", "csm", "qwen3_omni_moe",
                                        pytest.param("dory", marks=pytest.mark.skipif(
                                            not _known("dory"), reason="dory is not in this transformers release"))])
def test_registry_data_makes_the_call_run(model_type, registry):
    b, _, plan = _call(model_type, registry, task="head")
    with torch.no_grad():
        b.model(**plan.steps[0].make_inputs())


# Towers that did not run on transformers 5.17 (the H200's release), by generic rules.
def test_image_feature_rows_read_an_attribute_only_pooler_output():
    # transformers 5.17's Mistral3 sets `pooler_output` (one tensor per image) on a
    # BaseModelOutput, which has no such field: it is an attribute, not a key.
    from transformers.modeling_outputs import BaseModelOutput

    from enablebot.model.images import _feature_rows

    out = BaseModelOutput(last_hidden_state=torch.zeros(1, 8, 64))
    out.pooler_output = (torch.zeros(4, 64), torch.zeros(4, 64))
    assert _feature_rows(out, 2) == 4


def test_shrink_keeps_vision_feature_layers_inside_the_tower():
    from transformers import AutoConfig

    from enablebot.model.shrink import shrink_config

    cfg, _ = shrink_config(AutoConfig.for_model("vipllava"), "tiny")
    n = cfg.vision_config.num_hidden_layers
    layers = cfg.vision_feature_layers
    assert len(layers) == 5  # the projector's input width counts them
    assert all(-(n + 1) <= i <= n for i in layers)


def test_shrink_sets_the_merger_width_to_the_text_width():
    # GLM-OCR's default config: text hidden 1024, merger out_hidden_size 1536.
    from transformers import AutoConfig

    from enablebot.model.shrink import shrink_config

    cfg, _ = shrink_config(AutoConfig.for_model("glm_ocr"), "tiny")
    assert cfg.vision_config.out_hidden_size == cfg.text_config.hidden_size


def test_shrink_sets_the_tower_text_width_to_the_text_width():
    # Inkling-2 (5.25): vision_config.text_hidden_size 4608 by default, which the merger projects to;
    # the composite config requires it to equal the text hidden size but does not set it.
    from transformers import AutoConfig

    from enablebot.model.shrink import shrink_config

    if not _known("inkling2"):
        pytest.skip("inkling2 is not in this transformers release")
    cfg, _ = shrink_config(AutoConfig.for_model("inkling2"), "tiny")
    assert cfg.vision_config.text_hidden_size == cfg.text_config.hidden_size


@pytest.mark.parametrize("model_type", ["glm_ocr", "vipllava", "audioflamingo3"])
def test_multimodal_call_runs_its_tower(model_type, registry):
    # audioflamingo3: a clip per sample, its placeholders counted by get_audio_features (audio.py)
    from enablebot.measure.towers import count_towers

    b, _, plan = _call(model_type, registry, task="head")
    with count_towers(b.model, b.config) as rep, torch.no_grad():
        b.model(**plan.steps[0].make_inputs())
    assert rep.not_run == [] and rep.missing_kinds == []


def test_config_init_fills_a_composite_part_only_where_the_release_defaults_to_another():
    # 5.17's composites had no default parts (EncoderDecoderConfig() raised) or another one
    # (Granite 4 Vision's text model was Llama): the registry's `config_init` names the part.
    # Where the release already defaults to it (5.25 here) the config is built exactly as before.
    from transformers import AutoConfig

    from enablebot.model.build import default_config

    same = default_config("encoder-decoder", {}, {"encoder": {"model_type": "bert"}, "decoder": {"model_type": "bert"}})
    assert same.to_dict() == AutoConfig.for_model("encoder-decoder").to_dict()
    other = default_config("encoder-decoder", {"encoder.num_hidden_layers": 1},
                           {"encoder": {"model_type": "roberta"},
                            "decoder": {"model_type": "bert", "is_decoder": True}})
    assert other.encoder.model_type == "roberta" and other.decoder.model_type == "bert"
    # The part is rebuilt with its overrides, which its validation may need (shrink_config
    # applies every override again later); a part already of the named type is left alone.
    assert other.encoder.num_hidden_layers == 1
    assert other.decoder.to_dict() == same.decoder.to_dict()


def test_an_inference_session_moves_to_the_model_device_with_its_containers(registry):
    # SAM-video forwards take a session, not tensors: to_device used to leave it on the CPU,
    # and on CUDA the frames met CUDA weights (5 items on the H200/H100 pass).
    from enablebot.measure.tensors import to_device

    res = resolve("sam2_video", registry)
    b = build_model(res)
    x = build_inputs(b.model, b.config, b.modality, res.entry.inputs)
    session = x["inference_session"]
    kinds = {k: type(v) for k, v in vars(session).items()}
    moved = to_device(x, "meta")
    assert moved["inference_session"] is session
    assert session.inference_device == session.cache.inference_device == "meta"
    assert all(f.device.type == "meta" for f in session.processed_frames.values())
    assert {k: type(v) for k, v in vars(session).items()} == kinds  # defaultdicts stay defaultdicts


def test_a_named_audio_mask_pads_its_own_input(registry):
    # NeuCodec takes a waveform and the semantic encoder's features: `input_features_mask` covers
    # the features' 16 frames. Padding it over the waveform's 5,120 samples failed in eager.
    b, x, plan = _call("neucodec", registry)
    inp = plan.steps[0].make_inputs()
    frames = inp["input_features"].shape[1]
    assert plan.padding.key == "input_features_mask"
    assert tuple(inp["input_features_mask"].shape) == (inp["input_features"].shape[0], frames)
    lengths = plan.padding.lengths
    assert lengths[-1] < lengths[0] == frames
    assert bool((inp["input_features"][-1, lengths[-1]:] == 0).all())  # padded frames are zeros
    assert int(inp["input_values"].shape[-1]) == int(x["input_values"].shape[-1])
    with torch.no_grad():
        b.model(**inp)


def _towers_not_run(b, inputs):
    from enablebot.measure.towers import count_towers

    with count_towers(b.model, b.config) as rep, torch.no_grad():
        b.model(**inputs)
    return rep.not_run


@pytest.mark.parametrize("model_type", [
    "musicflamingo",  # get_audio_features reads the placeholders: counted by the tower's output lengths
    "voxtral",  # the head's get_audio_features(*args, **kwargs) read through to the inner model's
    "qwen2_5_omni_thinker",  # feature_attention_mask named for its input; audio after image and video
    "fun_asr_nano",  # the registry shapes the stacked features; they still get their placeholders
    "vibevoice",  # a waveform with its padding_mask
    # 5.25-only types:
    _newer1("omniasr"),  # the registry's mono (batch, 1, samples) waveform
    _newer1("nemo_speechlm"),  # frames-first features, mels two configs deep; the diarization head's width
    _newer1("moss_transcribe_diarize"),  # the inner get_audio_features requires padding_mask: read through to it
    _newer1("dots3_note"),  # features with per-chunk sample lengths; audio after the image and video runs
    _newer1("muse_spark"),  # a waveform a multiple of samples_per_token, its `<input>_mask`
])
def test_an_audio_lm_call_runs_its_audio_tower(model_type, registry):
    from enablebot.model.audio import audio_token

    b, x, plan = _call(model_type, registry, task="head")
    inp = plan.steps[0].make_inputs()
    assert bool((inp["input_ids"] == audio_token(b.config)).any())
    assert _towers_not_run(b, inp) == []
    # Hostile twin: the same call without its audio leaves the audio tower unrun.
    audio_keys = {"input_features", "input_values", "input_features_mask", "feature_attention_mask", "padding_mask",
                  "input_values_mask", "chunk_sample_lengths"}
    text = {k: v for k, v in inp.items() if k not in audio_keys}
    text["input_ids"] = torch.where(text["input_ids"] == audio_token(b.config), 1, text["input_ids"])
    assert any("audio_tower" in name for name in _towers_not_run(b, text))


@pytest.mark.parametrize("model_type,task", [("granite_speech", "head"), _newer("granite_speech_plus")])
def test_granite_speech_call_runs_its_speech_encoder(model_type, task, registry):
    """Registry data (the projector's encoder width, frames-first features) gives Granite Speech its
    audio call. Its speech encoder is named `encoder`: it counts as the audio tower because
    `get_audio_features` calls it (`towers.features_calls`); before the data, the call was text only
    and that tower did not run."""
    b, x, plan = _call(model_type, registry, task=task)
    inp = plan.steps[0].make_inputs()
    assert bool((inp["input_ids"] == b.config.audio_token_id).any())
    assert _towers_not_run(b, inp) == []
    text = {k: v for k, v in inp.items() if k != "input_features"}
    text["input_ids"] = torch.where(text["input_ids"] == b.config.audio_token_id, 1, text["input_ids"])
    assert _towers_not_run(b, text) == ["model.encoder"]


def test_padded_audio_keeps_one_placeholder_per_encoded_row(registry):
    # Qwen2-Audio: clips of different lengths padded as the feature extractor pads them, with the
    # processor's feature_attention_mask, and in each row as many <|AUDIO|> placeholders as its
    # real frames encode to (the tower's own output lengths).
    b, x, plan = _call("qwen2_audio", registry, task="head")
    inp = plan.steps[0].make_inputs()
    mask = inp["feature_attention_mask"]
    real = mask.sum(-1)
    assert plan.steps and int(real[-1]) < int(real[0]) == mask.shape[1]
    assert bool((inp["input_features"][-1, :, int(real[-1]):] == 0).all())  # padded frames are zeros
    token = b.config.audio_token_id
    tower = getattr(b.model, "audio_tower", None) or b.model.model.audio_tower
    _, encoded = tower._get_feat_extract_output_lengths(real)
    assert (inp["input_ids"] == token).sum(-1).tolist() == encoded.tolist()
    assert encoded[-1] < encoded[0]
    assert _towers_not_run(b, inp) == []
    # Hostile twin: the padded audio with the full-length placeholder run in every row is
    # rejected by the model (more placeholders than encoded rows).
    bad = dict(inp, input_ids=x["input_ids"], attention_mask=torch.ones_like(x["input_ids"]))
    with pytest.raises(Exception), torch.no_grad():
        b.model(**bad)


@pytest.mark.parametrize("model_type,mask", [
    _newer("omniasr", "padding_mask"), _newer("nemo_speechlm", "input_features_mask"),
    _newer("moss_transcribe_diarize", "input_features_mask"), _newer("muse_spark", "input_values_mask"),
])
def test_padded_audio_of_a_525_audio_lm_keeps_its_rows_placeholders(model_type, mask, registry):
    # Transformers 5.25-only audio LMs: clips padded under the mask their feature extractor returns,
    # each row keeping as many placeholders as its real audio encodes to, and every tower run.
    from enablebot.model.audio import audio_token, rows_per_sample

    b, _, plan = _call(model_type, registry, task="head")
    inp = plan.steps[0].make_inputs()
    real = inp[mask].sum(-1)
    assert int(real[-1]) < int(real[0]) == inp[mask].shape[1]
    counts = (inp["input_ids"] == audio_token(b.config)).sum(-1).tolist()
    assert counts == rows_per_sample(b.model, b.config, inp) and counts[-1] < counts[0]
    assert _towers_not_run(b, inp) == []


@pytest.mark.parametrize("model_type", ["seamless_m4t", "seamless_m4t_v2"])
def test_a_text_or_speech_base_gets_the_speech_call(model_type, registry):
    # SeamlessM4T(v2)Model takes text or speech per call; the audio type's base call is speech,
    # with its frame mask padded (registry by_class data).
    b, _, plan = _call(model_type, registry, task="base")
    inp = plan.steps[0].make_inputs()
    assert "input_ids" not in inp and plan.padding.key == "attention_mask"
    assert _towers_not_run(b, inp) == []


# Vision towers that did not run on transformers 5.17 (issue 28, "towers on 5.17").
def _not_run(b, inp):
    from enablebot.measure.towers import count_towers

    with count_towers(b.model, b.config) as rep, torch.no_grad():
        b.model(**inp)
    return rep.not_run


_IMAGE_KEYS = {"pixel_values", "pixel_values_images", "pixel_values_videos", "image_grid_thw", "video_grid_thw",
               "image_sizes", "image_merge_sizes", "high_res_pixel_values", "target_sizes", "mm_token_type_ids",
               "pixel_attention_mask", "spatial_shapes", "token_type_ids"}


@pytest.mark.parametrize("model_type", [
    "hunyuan_vl",  # 5.17: one (1, rows of every image, width) sequence, read per image
    "llama4",  # 5.17: get_image_features requires vision_feature_select_strategy: the config's value
    "video_llava",  # 5.17: images are `pixel_values_images`; the video tower's feature layer from the config
    "deepseek_vl_hybrid",  # high_res_pixel_values at the high-resolution tower's size
    "video_llama_3",  # 5.17: image_merge_sizes, which the head's function hands on through **kwargs
    "paddleocr_vl",  # patches (rows, C, patch, patch), not flattened
    "kimi_k25",  # the same, with a [2, 2] merge kernel
    "minicpmv4_6",  # the head's get_image_features(*args, **kwargs): the inner model's is read
    "granite4_vision",  # features per LLM layer (deepstack_features), counted by the first
    "neomme",  # flattened patches (patches, C * patch * patch) with no grid argument
])
def test_a_vlm_call_runs_its_vision_tower_by_generic_rules(model_type, registry):
    from enablebot.model.tensors import image_token

    b, _, plan = _call(model_type, registry, task="head")
    inp = plan.steps[0].make_inputs()
    assert bool((inp["input_ids"] == image_token(b.config)).any())
    assert _not_run(b, inp) == []
    # Hostile twin: the same text without the images (placeholders made ordinary) leaves a tower unrun.
    from enablebot.model.videos import video_token

    text = {k: v for k, v in inp.items() if k not in _IMAGE_KEYS}
    for token in (image_token(b.config), video_token(b.config)):
        if token is not None:
            text["input_ids"] = torch.where(text["input_ids"] == int(token), 3, text["input_ids"])
    assert _not_run(b, text) != []


@pytest.mark.parametrize("model_type,task", [
    ("aria", "head"),  # a patch-count -> queries entry for the tiny image
    ("florence2", "head"), ("janus", "head"),  # the tower's projection_dim is the text width
    ("shieldgemma2", "head"), ("t5gemma2_encoder", "base"),  # Gemma 3's mm_tokens_per_image
    ("modernvbert", "head"),  # a pixel-shuffle factor that divides the patch grid
    ("deepseek_ocr2", "head"),  # the SAM neck's width is the encoder's
    ("muse_glimmer", "head"),  # the merger's output width
    ("lfm2_vl", "head"),  # NaFlex patches with their mask and grid
    ("kosmos-2.5", "head"),  # flattened patches and the image-embedding positions
    ("glm_image", "base"),  # image-to-image prompt: source grid, target grid
    # 5.25-only types:
    _newer("minicpm_ocr"), _newer("minicpmv4_7"),  # as minicpmv4_6: image_token_id, insert_layer_id, NaViT
    _newer("granite_docling"),  # tiles with a per-tile pixel_attention_mask; 4x4-patch tiles
    _newer("ultravbert"),  # as modernvbert: a pixel-shuffle factor that divides the patch grid
    _newer("inkling2"), _newer("inkling2_loop"),  # channels-last token squares, grid in tokens
    _newer("molmo2"),  # crops of patches with the pooling indices, grids and crop counts
    _newer("ovis2_5"),  # the image run between image_start/image_end tokens (generic retry)
    _newer("unlimited_ocr"),  # as deepseek_ocr2: the SAM neck's width is the encoder's
])
def test_registry_data_runs_the_vision_tower(model_type, task, registry):
    b, _, plan = _call(model_type, registry, task=task)
    inp = plan.steps[0].make_inputs()
    assert _not_run(b, inp) == []


def test_image_feature_rows_per_image_from_one_sequence_or_per_layer():
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    from enablebot.model.images import _feature_rows

    # HunYuan-VL (5.17): every image's rows in one (1, rows, width) sequence.
    assert _feature_rows(BaseModelOutputWithPooling(pooler_output=torch.zeros(1, 8, 4)), 2) == 4
    # One sequence per image, as before; and one image (audio clips) reads the rows as they are.
    assert _feature_rows(BaseModelOutputWithPooling(pooler_output=torch.zeros(2, 8, 4)), 2) == 8
    assert _feature_rows(BaseModelOutputWithPooling(pooler_output=torch.zeros(1, 8, 4)), 1) == 8

    from dataclasses import dataclass

    @dataclass
    class Stack(BaseModelOutputWithPooling):  # Granite 4 Vision: (LLM layer, per-image features)
        deepstack_features: list | None = None

    out = Stack(deepstack_features=[(0, [torch.zeros(5, 4), torch.zeros(5, 4)]), (1, [torch.zeros(5, 4)] * 2)])
    assert _feature_rows(out, 2) == 5
    # A video's features as one (frames, rows, width) piece per clip (LLaVA-NeXT-Video, 5.17): frames x rows.
    from enablebot.model.videos import _rows_per_clip

    clips = BaseModelOutputWithPooling(pooler_output=(torch.zeros(4, 3, 8), torch.zeros(4, 3, 8)))
    assert _rows_per_clip(clips, 2) == 12


def test_a_features_argument_the_config_does_not_name_is_not_invented(registry):
    # Hostile twin of the config-setting rule: a required argument with neither a rule nor a
    # config value leaves the count unknown (no image rather than a made-up value).
    from enablebot.model.images import _pass_through, config_settings, image_token_count
    from enablebot.model.tensors import Ctx

    res = resolve("llama4", registry)
    b = build_model(res, task="head")
    ctx = Ctx(model=b.model, config=b.config, batch=2, seq_len=8, gen=torch.Generator().manual_seed(0),
              out={"pixel_values": torch.randn(2, 3, 28, 28)})

    def needs_setting(pixel_values, vision_feature_select_strategy): ...

    def needs_unknown(pixel_values, no_such_setting): ...

    assert config_settings(needs_setting, ctx) == {"vision_feature_select_strategy": "default"}
    assert config_settings(needs_unknown, ctx) == {}
    b.model.get_image_features = needs_unknown
    assert image_token_count(b.model, ctx) is None

    def passes(*args, **kwargs): ...

    assert _pass_through(passes) and not _pass_through(needs_setting)


def test_decode_drops_audio_merged_under_its_own_name(registry):
    # Inkling's audio comes as discretised mel ids (`audio_input_ids`), merged at placeholders in
    # the prefill; generate() passes them on the first iteration only (prepare_inputs_for_generation),
    # so the decode step carries none: with them it fails (features for no placeholder).
    b, x, _ = _call("inkling_mm_model", registry, task="head")
    assert "audio_input_ids" in x
    p = scenarios.plan("decode", b.model, b.config, x, b.modality, "eval")
    b.model.eval()
    with torch.no_grad():
        out = b.model(**p.steps[0].make_inputs())
        decode = p.steps[1].make_inputs()
        assert "audio_input_ids" not in decode
        b.model(**decode)
        # Hostile twin: the same decode step with the prefill's audio is rejected.
        with pytest.raises(Exception):
            b.model(**{**decode, "audio_input_ids": x["audio_input_ids"]})
    assert out is not None
