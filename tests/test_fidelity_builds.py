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


def test_audio_mask_stays_where_the_forward_takes_one(registry):
    b, _, plan = _call("wav2vec2", registry)
    assert plan.padding.key == "attention_mask"


# Registry data (no rule in code): hybrid models keep an attention layer as released
# checkpoints have (the default cache needs one), BLT's top-level layer count, CSM's text ids.
@pytest.mark.parametrize("model_type", ["bamba", "granitemoehybrid", "recurrent_gemma", "blt", "csm"])
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
