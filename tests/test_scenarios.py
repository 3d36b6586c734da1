"""Scenarios on real tiny models (CPU): the call a user makes (cache on, padded batch, every
tower), a decode step fed back its cache, two shapes through one compiled model, and break
locations in model code. Eager and explain run here directly, not through the runner."""

from __future__ import annotations

import re

import pytest
import torch

from enablebot.measure import graph_breaks
from enablebot.measure import scenarios
from enablebot.model.build import build_model
from enablebot.model.inputs import build_inputs
from enablebot.model.registry import Registry
from enablebot.model.resolve import resolve
from enablebot.results import UserFrame
from enablebot.measure.towers import count_towers


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry.load_cached(None)


_BUILT: dict = {}


def built(model_type: str, registry: Registry, task: str = "head"):
    """Model, config, inputs and modality of a tiny model (built once per test module)."""
    key = (model_type, task)
    if key not in _BUILT:
        res = resolve(model_type, registry)
        b = build_model(res, task=task)
        x = build_inputs(b.model, b.config, b.modality, res.entry.inputs if res.entry else None)
        _BUILT[key] = (b, x, res.entry.inputs if res.entry else None)
    return _BUILT[key]


def run_steps(model, plan):
    outs = []
    for step in plan.steps:
        with torch.no_grad():
            outs.append((step, model(**step.make_inputs())))
    return outs


def test_builder_keeps_the_models_cache_default(registry):
    b, _, _ = built("llama", registry)
    assert b.config.use_cache is True  # no longer forced off
    assert getattr(b.config, "attention_dropout", 0.0) == 0.0  # dropout still zeroed


def test_decode_llama_round_trips_the_cache(registry):
    b, x, _ = built("llama", registry)
    p = scenarios.plan("decode", b.model, b.config, x, b.modality, "eval")
    assert p.skip_reason is None
    assert [s.name for s in p.steps] == ["prefill", "decode"]
    prefill, decode = (s.make_inputs() for s in p.steps)
    batch, seq = prefill["input_ids"].shape
    assert prefill["use_cache"] is True
    # the decode step is what generate() passes: one token, the cache, a grown mask, next positions
    assert decode["input_ids"].shape == (batch, 1)
    assert decode["attention_mask"].shape == (batch, seq + 1)
    assert torch.equal(decode["position_ids"][:, 0], prefill["position_ids"][:, -1] + 1)
    cache = decode[scenarios.cache_arg(b.model)]
    assert scenarios.cache_length(cache) == seq
    with torch.no_grad():
        out = b.model(**decode)
    assert scenarios.cache_length(scenarios.output_cache(out)) == seq + 1  # the cache grew by the new token
    # each call gets its own cache: the forward above grew its copy, not the plan's
    assert scenarios.cache_length(p.steps[1].make_inputs()[scenarios.cache_arg(b.model)]) == seq
    # and the decode step equals the last position of a full no-cache forward over prompt + token
    full = dict(prefill)
    full.pop("use_cache")
    full["input_ids"] = torch.cat([prefill["input_ids"], decode["input_ids"]], dim=1)
    full["attention_mask"] = decode["attention_mask"]
    full["position_ids"] = torch.cat([prefill["position_ids"], decode["position_ids"]], dim=1)
    with torch.no_grad():
        ref = b.model(**full, use_cache=False).logits[:, -1]
    torch.testing.assert_close(out.logits[:, -1], ref, rtol=1e-4, atol=1e-4)


def test_decode_steps_compile(registry):
    """Both steps through one compiled model (Dynamo only), the decode step on the cache."""
    b, x, _ = built("llama", registry)
    p = scenarios.plan("decode", b.model, b.config, x, b.modality, "eval")
    torch._dynamo.reset()
    compiled = torch.compile(b.model, backend="eager")
    with torch.no_grad():
        outs = [compiled(**s.make_inputs()) for s in p.steps]
    seq = p.steps[0].make_inputs()["input_ids"].shape[1]
    assert [scenarios.cache_length(scenarios.output_cache(o)) for o in outs] == [seq, seq + 1]


@pytest.mark.parametrize("model_type", ["bart", "t5"])
def test_seq2seq_decode_with_the_cache_on(model_type, registry):
    b, x, _ = built(model_type, registry)
    p = scenarios.plan("decode", b.model, b.config, x, b.modality, "eval")
    assert [s.name for s in p.steps] == ["prefill", "decode"]
    decode = p.steps[1].make_inputs()
    assert "encoder_outputs" in decode and "input_ids" not in decode  # the encoder is not run again
    assert decode["decoder_input_ids"].shape[1] == 1
    lens = [scenarios.cache_length(scenarios.output_cache(o)) for _, o in run_steps(b.model, p)]
    assert lens == [1, 2]
    # `call` keeps the config's default: the cache is built and returned
    (_, out), = run_steps(b.model, scenarios.plan("call", b.model, b.config, x, b.modality, "eval"))
    assert scenarios.output_cache(out) is not None


def test_a_decoder_that_prepares_its_own_start_ids_decodes_as_generate_does(registry):
    """MusicGen starts one decoder row per codebook, (batch x codebooks, 1), in its own
    `_prepare_decoder_input_ids_for_generation`; the generic (batch, 1) start fails its prefill."""
    b, x, _ = built("musicgen", registry)
    p = scenarios.plan("decode", b.model, b.config, x, b.modality, "eval")
    prefill, decode = (s.make_inputs() for s in p.steps)
    batch, books = x["input_ids"].shape[0], b.model.decoder.num_codebooks
    assert prefill["decoder_input_ids"].shape == (batch * books, 1)
    assert decode["decoder_input_ids"].shape == (batch * books, 1) and "encoder_outputs" in decode
    lens = [scenarios.cache_length(scenarios.output_cache(o)) for _, o in run_steps(b.model, p)]
    assert lens == [1, 2]
    generic = dict(prefill, decoder_input_ids=scenarios._start_ids(b.config, batch))
    with pytest.raises(RuntimeError), torch.no_grad():
        b.model(**generic)
    # A model that keeps GenerationMixin's preparation is left to the generic start.
    t5, _, _ = built("t5", registry)
    assert scenarios._own_decoder_start(t5.model, t5.config, 2, None) is None


def test_decode_drops_the_image_position_mask_after_the_prefill(registry):
    """Kosmos-2.5's generate() sets `image_embeds_position_mask` to None once the cache holds the
    prompt; kept in the one-token step, it no longer fits the step's embeddings."""
    b, x, _ = built("kosmos-2.5", registry)
    p = scenarios.plan("decode", b.model, b.config, x, b.modality, "eval")
    prefill, decode = (s.make_inputs() for s in p.steps)
    assert "image_embeds_position_mask" in prefill and "image_embeds_position_mask" not in decode
    lens = [scenarios.cache_length(scenarios.output_cache(o)) for _, o in run_steps(b.model, p)]
    assert lens[1] == lens[0] + 1
    kept = dict(decode, image_embeds_position_mask=prefill["image_embeds_position_mask"])
    with pytest.raises((IndexError, RuntimeError)), torch.no_grad():
        b.model(**kept)


@pytest.mark.parametrize("model_type", [
    "idefics",  # generate() feeds the prefill's image states back as perceiver_embeddings
    "cpmant",  # its prepare_inputs_for_generation passes the whole ids every step
    "dia",  # classifier-free guidance: generate() doubles the batch
])
def test_a_head_that_generates_its_own_way_decodes_with_the_calls_generate_makes(model_type, registry):
    """Where the step built the common way does not run, the decode scenario's two calls are the
    forward calls the model's own generate() makes (recorded by a pre-hook): they run, the cache
    grows by one, and the plan says where they came from."""
    from enablebot.measure.generate_capture import generate_calls

    b, x, _ = built(model_type, registry)
    p = scenarios.plan("decode", b.model, b.config, x, b.modality, "eval")
    assert [s.name for s in p.steps] == ["prefill", "decode"]
    assert any("generate()" in n and "common-way" in n for n in p.notes)
    outs = run_steps(b.model, p)
    lens = [scenarios.cache_length(scenarios.output_cache(o)) for _, o in outs]
    assert None in lens or lens[1] == lens[0] + 1
    # The recorded calls are generate()'s own: replaying them gives the same decode logits.
    prompt, _ = scenarios.pad_batch(b.model, b.config, x)
    again = generate_calls(b.model, prompt)
    with torch.no_grad():
        ref = b.model(**again.calls[1])
    assert torch.equal(scenarios._logits(ref), scenarios._logits(outs[1][1]))


def test_a_head_whose_generate_does_not_call_its_forward_keeps_its_failure(registry):
    """Kosmos-2's generate() runs its text model's generate(), never the head's forward: nothing is
    recorded, and the scenario's own failure stands (no made-up step). A head that decodes the
    common way never reaches generate()."""
    from enablebot.measure.generate_capture import generate_calls

    b, x, _ = built("kosmos-2", registry)
    prompt, _ = scenarios.pad_batch(b.model, b.config, x)
    assert generate_calls(b.model, prompt) is None
    with pytest.raises(Exception):
        p = scenarios.plan("decode", b.model, b.config, x, b.modality, "eval")
        run_steps(b.model, p)
    llama, lx, _ = built("llama", registry)
    p = scenarios.plan("decode", llama.model, llama.config, lx, llama.modality, "eval")
    assert not any("generate()" in n for n in p.notes)


def test_text_call_gets_a_padded_batch(registry):
    b, x, _ = built("bert", registry, task="base")
    assert bool((x["attention_mask"] == 1).all())  # the builder's inputs: no padding
    p = scenarios.plan("call", b.model, b.config, x, b.modality, "eval")
    inp = p.steps[0].make_inputs()
    lengths = inp["attention_mask"].sum(1).tolist()
    assert len(set(lengths)) > 1 and lengths == p.padding.lengths
    assert p.padding.side == "right" and inp["attention_mask"][-1, -1] == 0  # encoders pad on the right
    pad = b.config.pad_token_id
    assert bool((inp["input_ids"][inp["attention_mask"] == 0] == pad).all())
    with torch.no_grad():
        b.model(**inp)


def test_diagnostic_call_variants_change_one_thing_each(registry):
    """call_unpadded keeps the cache default and drops the padding; call_nocache keeps the padding
    and turns the cache off as a user does: between them a call-only break is attributed."""
    b, x, _ = built("t5", registry)
    call = scenarios.plan("call", b.model, b.config, x, b.modality, "eval").steps[0].make_inputs()
    unpadded = scenarios.plan("call_unpadded", b.model, b.config, x, b.modality, "eval")
    nocache = scenarios.plan("call_nocache", b.model, b.config, x, b.modality, "eval")
    u, n = unpadded.steps[0].make_inputs(), nocache.steps[0].make_inputs()
    assert bool((u["attention_mask"] == 1).all()) and not unpadded.padding.lengths
    assert torch.equal(n["attention_mask"], call["attention_mask"]) and n["use_cache"] is False
    (_, out_u), = run_steps(b.model, unpadded)
    (_, out_n), = run_steps(b.model, nocache)
    assert scenarios.output_cache(out_u) is not None and scenarios.output_cache(out_n) is None
    # in train, every scenario but call is skipped, the diagnostics included
    assert scenarios.plan("call_nocache", b.model, b.config, x, b.modality, "train").skip_reason


def test_decoder_only_pads_on_the_left(registry):
    b, x, _ = built("llama", registry)
    p = scenarios.plan("call", b.model, b.config, x, b.modality, "eval")
    mask = p.steps[0].make_inputs()["attention_mask"]
    assert p.padding.side == "left"
    assert mask[-1, 0] == 0 and bool((mask[:, -1] == 1).all())
    assert mask[0].sum() > mask[-1].sum()
    # the real tokens of the shorter row are the prompt's first tokens, shifted right
    n = int(mask[-1].sum())
    assert torch.equal(p.steps[0].make_inputs()["input_ids"][-1, -n:], x["input_ids"][-1, :n])


def test_audio_call_gets_a_mask_over_samples(registry):
    b, x, _ = built("wav2vec2", registry)
    assert "attention_mask" not in x
    inp = scenarios.plan("call", b.model, b.config, x, b.modality, "eval").steps[0].make_inputs()
    mask, wave = inp["attention_mask"], inp["input_values"]
    assert mask.shape == wave.shape
    lengths = mask.sum(1).tolist()
    assert lengths[0] == wave.shape[1] and lengths[-1] < wave.shape[1]
    assert bool((wave[-1, lengths[-1]:] == 0).all())  # padded samples are silence, as the extractor pads
    with torch.no_grad():
        b.model(**inp)


def test_vlm_runs_its_vision_tower(registry):
    b, x, _ = built("qwen2_vl", registry)
    assert {"pixel_values", "image_grid_thw", "mm_token_type_ids"} <= set(x)
    inp = scenarios.plan("call", b.model, b.config, x, b.modality, "eval").steps[0].make_inputs()
    with count_towers(b.model, b.config) as rep, torch.no_grad():
        b.model(**inp)
    assert rep.towers == {"model.visual": "vision"}
    assert rep.calls["model.visual"] >= 1 and rep.not_run == [] and rep.missing_kinds == []
    assert rep.calls["model.language_model"] >= 1
    # hostile: the same model on text alone reports the tower that did not run
    text = {k: inp[k] for k in ("input_ids", "attention_mask")}
    text["input_ids"] = text["input_ids"].masked_fill(text["input_ids"] == b.config.image_token_id, 5)
    with count_towers(b.model, b.config) as rep2, torch.no_grad():
        b.model(**text)
    assert rep2.not_run == ["model.visual"] and rep2.missing_kinds == ["vision"]


# Image/audio inputs whose layout the generic rules derive (anyres tiles from the scaled
# pinpoints) or registry recipes give (gemma3's pooled tokens and token types, mllama's tiles and
# cross-attention mask, qwen2_audio's features and expanded placeholders): the tower that must run.
TOWER_RUNS = {
    "gemma3": "model.vision_tower",
    "llava_next": "model.vision_tower",
    "llava_next_video": "model.vision_resampler",  # runs on video frames only
    "llava_onevision": "model.vision_tower",
    "qwen3_vl": "model.visual",
    "mllama": "model.vision_model",
    "qwen2_audio": "model.audio_tower",
}


@pytest.mark.parametrize("model_type", sorted(TOWER_RUNS))
def test_multimodal_call_runs_every_tower(model_type, registry):
    from enablebot.model.tensors import special_ids

    b, x, _ = built(model_type, registry)
    p = scenarios.plan("call", b.model, b.config, x, b.modality, "eval")
    inp = p.steps[0].make_inputs()
    assert p.padding.side == "left" and len(set(p.padding.lengths)) > 1  # a padded batch, as a user's
    b.model.eval()
    with count_towers(b.model, b.config) as rep, torch.no_grad():
        b.model(**inp)
    if "feature_attention_mask" in inp:  # padded audio: each row's placeholders count its real frames
        real = inp["feature_attention_mask"].sum(-1)
        per_row = (inp["input_ids"] == b.config.audio_token_id).sum(-1)
        assert int(real[-1]) < int(real[0]) and int(per_row[-1]) < int(per_row[0])
        assert p.padding.key == "attention_mask"
    tower = TOWER_RUNS[model_type]
    assert rep.active[tower] and rep.not_run == [] and rep.missing_kinds == []
    # hostile: the same ids with placeholders made ordinary, no image/audio: the tower does not run
    ids = inp["input_ids"].clone()
    for t in special_ids(b.config):
        ids[ids == t] = 5
    with count_towers(b.model, b.config) as rep2, torch.no_grad():
        b.model(input_ids=ids, attention_mask=inp["attention_mask"])
    assert tower in rep2.not_run and rep2.missing_kinds


@pytest.mark.parametrize("model_type,groups", [("qwen2_vl", 1), ("qwen3_vl", 2)])
def test_a_video_lm_gets_a_clip_with_its_placeholders_after_the_image(model_type, groups, registry):
    """A clip per sample (two temporal patches), as many video placeholders as the clip's features,
    after the image's; one run for Qwen2-VL, one run per frame for Qwen3-VL (whose position ids
    read each frame as its own group): the layout is the one the forward accepts."""
    b, x, _ = built(model_type, registry)
    assert {"pixel_values_videos", "video_grid_thw"} <= set(x) and x["video_grid_thw"][:, 0].tolist() == [2, 2]
    row = (x["input_ids"][0] == b.config.video_token_id).long()
    runs_of = int(row[0]) + int(((row[1:] - row[:-1]) == 1).sum())
    assert runs_of == groups and int(row.sum()) > 0
    assert bool((x["mm_token_type_ids"][0][row.bool()] == 2).all())
    image_at = (x["input_ids"][0] == b.config.image_token_id).nonzero()
    assert len(image_at) and int(image_at.max()) < int(row.nonzero().min())
    with count_towers(b.model, b.config) as rep, torch.no_grad():
        b.model(**x)
    assert rep.not_run == []


def test_anyres_images_are_tiled_by_the_shrunk_pinpoints(registry):
    """LLaVA-NeXT pinpoints are pixels of the vision tower's image: they shrink with it, and the
    image comes as its resized whole plus the tiles of the best pinpoint, as the processor cuts it."""
    b, x, _ = built("llava_next", registry)
    size = b.config.vision_config.image_size
    assert [28, 56] in b.config.image_grid_pinpoints and size == 28  # 336 -> 28: [336, 672] -> [28, 56]
    assert all(h % size == 0 and w % size == 0 for h, w in b.config.image_grid_pinpoints)
    assert x["pixel_values"].shape == (2, 1 + 2, 3, size, size)  # a 28x28 image fits [28, 56]: 1x2 tiles
    assert x["image_sizes"].tolist() == [[size, size]] * 2


def test_mllama_decode_grows_the_cross_attention_mask(registry):
    b, x, _ = built("mllama", registry)
    assert int((x["input_ids"] == b.config.image_token_id).sum()) == 2  # one <|image|> per sample
    p = scenarios.plan("decode", b.model, b.config, x, b.modality, "eval")
    prefill, decode = (s.make_inputs() for s in p.steps)
    xm = prefill["cross_attention_mask"]
    assert decode["cross_attention_mask"].shape[1] == xm.shape[1] + 1  # as generate() grows it
    assert torch.equal(decode["cross_attention_mask"][:, -1], xm[:, -1])
    assert "pixel_values" not in decode  # the cross-attention cache holds the image
    run_steps(b.model, p)


def test_recipe_tokens_that_do_not_fit_say_what_to_do(registry):
    res = resolve("qwen2_audio", registry)
    b, _, recipe = built("qwen2_audio", registry)
    short = {**recipe, "seq_len": 16}
    with pytest.raises(ValueError, match="raise the recipe's seq_len"):
        build_inputs(b.model, b.config, b.modality, short)
    with pytest.raises(ValueError, match="no token id 'nope_token_id'"):
        build_inputs(b.model, b.config, b.modality, {**recipe, "tokens": {"nope_token_id": 1}})
    assert res.entry.inputs["tokens"]


def test_hybrid_cache_error_is_per_scenario(registry):
    """granitemoehybrid's default config (only linear-attention layers; the registry adds an
    attention layer, as released checkpoints have) raises in eager once the cache is on. The
    decode scenario fails alone while it is planned; the other scenarios still plan, and the
    call's eager error is its own verdict (never a reason to turn the cache off)."""
    import dataclasses

    res = resolve("granitemoehybrid", registry)
    res.entry = dataclasses.replace(res.entry, config={})  # the default config's layer kinds
    b = build_model(res, task="head")
    assert "full_attention" not in b.config.layer_types
    recipe = res.entry.inputs or None
    x = build_inputs(b.model, b.config, b.modality, recipe)
    with pytest.raises(scenarios.ScenarioError) as err:
        scenarios.plan("decode", b.model, b.config, x, b.modality, "eval")
    assert err.value.scenario == "decode" and err.value.stage == "prefill"
    # transformers 5.24 raised in get_seq_length, 5.25 in get_mask_sizes: both are the cache's
    cache_error = r"get_seq_length|get_mask_sizes"
    assert re.search(cache_error, str(err.value))
    call = scenarios.plan("call", b.model, b.config, x, b.modality, "eval")
    dynamic = scenarios.plan("dynamic", b.model, b.config, x, b.modality, "eval", recipe=recipe)
    assert call.steps and dynamic.steps
    with pytest.raises(ValueError, match=cache_error), torch.no_grad():
        b.model(**call.steps[0].make_inputs())
    with torch.no_grad():  # the same call with the cache off runs: the error is the cache's
        assert b.model(**call.steps[0].make_inputs(), use_cache=False).logits is not None


def test_train_runs_only_call(registry):
    b, x, _ = built("llama", registry)
    for name in ("decode", "dynamic"):
        assert scenarios.plan(name, b.model, b.config, x, b.modality, "train").skip_reason
    assert scenarios.plan("call", b.model, b.config, x, b.modality, "train").steps
    bert, bx, _ = built("bert", registry, task="base")
    assert "not a generative head" in scenarios.plan("decode", bert.model, bert.config, bx, "text", "eval").skip_reason
    with pytest.raises(ValueError, match="unknown scenario"):
        scenarios.plan("generate", b.model, b.config, x, b.modality, "eval")


def test_a_model_without_forward_is_skipped_not_an_eager_error():
    # transformers 5.0's GlmImageVQVAE (glm_image_vqmodel) is used through encode(): nobody calls
    # model(**inputs), so no scenario applies to it.
    class Codebook(torch.nn.Module):
        def encode(self, x):
            return x

    for name in ("call", "decode"):
        assert "defines no forward" in scenarios.plan(name, Codebook(), None, {}, "vision", "eval").skip_reason
    assert scenarios.has_forward(torch.nn.Linear(2, 2))


@pytest.mark.slow  # two compiles of the same model (~100 s on a loaded 2-core machine)
def test_dynamic_two_shapes_and_recompile_reasons(registry):
    b, x, recipe = built("llama", registry)
    p = scenarios.plan("dynamic", b.model, b.config, x, b.modality, "eval", recipe=recipe)
    a, c = (s.make_inputs() for s in p.steps)
    assert a["input_ids"].shape != c["input_ids"].shape
    assert p.mark_dynamic["input_ids"] == [0, 1]
    torch._dynamo.reset()
    compiled = torch.compile(b.model, backend="eager")
    with scenarios.recompile_reasons() as reasons, torch.no_grad():
        compiled(**a)
        compiled(**c)
    assert reasons and any("size mismatch" in r for r in reasons), reasons
    # with the differing dims marked dynamic before the first call, the second shape does not recompile
    torch._dynamo.reset()
    compiled = torch.compile(b.model, backend="eager")
    with scenarios.recompile_reasons() as marked, torch.no_grad():
        compiled(**scenarios.apply_mark_dynamic(p.steps[0].make_inputs(), p.mark_dynamic))
        compiled(**p.steps[1].make_inputs())
    assert not any("size mismatch" in r for r in marked), marked


def test_ctrl_break_points_into_model_code(registry):
    b, x, _ = built("ctrl", registry)
    torch._dynamo.reset()
    with torch.no_grad():
        ex = torch._dynamo.explain(b.model)(**x)
    breaks = graph_breaks.from_explain(ex, graph_breaks.model_files(b.model))
    assert breaks
    frames = [br.user_frame for br in breaks]
    assert all(f.filename.endswith("modeling_ctrl.py") for f in frames), frames
    # the raw stack ends in torch (register_buffer), which must not be the reported frame
    raw = [fr.filename for br in ex.break_reasons for fr in br.user_stack]
    assert any("torch/nn/modules/module.py" in f for f in raw)


def test_user_frame_prefers_model_code_over_torch_and_shared_utils():
    f = lambda path, line: UserFrame(path, line, "fn", "")  # noqa: E731
    stack = [f("/sp/transformers/utils/generic.py", 1), f("/sp/transformers/models/ctrl/modeling_ctrl.py", 319),
             f("/sp/transformers/cache_utils.py", 9), f("torch/nn/modules/module.py", 587)]  # relative torch path
    assert graph_breaks.user_frame(stack).lineno == 319
    overlay = [f("/tmp/overlay/my_model.py", 7), f("/sp/torch/nn/modules/module.py", 587)]
    assert graph_breaks.user_frame(overlay, {"/tmp/overlay/my_model.py"}).lineno == 7
    remote = [f("/hf/modules/transformers_modules/org/repo/modeling_x.py", 3), f("/sp/transformers/utils/generic.py", 4)]
    assert graph_breaks.user_frame(remote).lineno == 3
    assert graph_breaks.user_frame([f("/sp/transformers/utils/generic.py", 4), f("/sp/torch/x.py", 1)]).lineno == 4


def test_a_streaming_head_decodes_once_its_audio_outlasts_the_prompt(registry):
    """Voxtral Realtime's generate() makes exactly as many tokens as its audio lasts, prompt
    included; with a prompt as long as the audio it refuses to start. The prompt's audio is
    lengthened (doubled) until generate() runs, the padded prompt is kept, and the plan says so."""
    from enablebot.measure.generate_capture import generate_calls

    b, x, _ = built("voxtral_realtime", registry)
    prompt, _ = scenarios.pad_batch(b.model, b.config, x)
    got = generate_calls(b.model, prompt)
    assert got is not None and len(got.calls) == 2
    assert any("generate() derives its length from the audio" in n for n in got.notes)
    assert torch.equal(got.calls[0]["input_ids"], prompt["input_ids"])  # the prompt itself unchanged
    p = scenarios.plan("decode", b.model, b.config, x, b.modality, "eval")
    assert [s.name for s in p.steps] == ["prefill", "decode"]
    assert any("derives its length from the audio" in n for n in p.notes)
    outs = run_steps(b.model, p)
    assert scenarios._logits(outs[1][1]).shape[1] == 1


def test_only_a_prompt_that_fills_the_audio_derived_length_gets_longer_audio():
    """generate_capture._longer_audio: only generate()'s "prompt fills max_length" error doubles the
    audio; a mask over the audio's frames grows with it, the text's mask never (even at the audio's
    length), and nothing is lengthened past MAX_FRAMES or without an audio input."""
    from enablebot.measure.generate_capture import MAX_FRAMES, _longer_audio

    filled = ValueError("Input length of input_ids is 8, but `max_length` is set to 8. This can lead to ...")
    text = {"input_ids": torch.ones(2, 8, dtype=torch.long), "attention_mask": torch.ones(2, 8, dtype=torch.long)}
    prompt = {**text, "input_features": torch.randn(2, 4, 12), "feature_mask": torch.ones(2, 12, dtype=torch.long)}
    out, note = _longer_audio(prompt, filled)
    assert out["input_features"].shape == (2, 4, 24)
    assert torch.equal(out["input_features"][..., 12:], prompt["input_features"])
    assert out["feature_mask"].shape == (2, 24)
    assert out["attention_mask"] is prompt["attention_mask"] and out["input_ids"] is prompt["input_ids"]
    assert "12 -> 24" in note and "max_length" in note
    same = _longer_audio({**text, "input_features": torch.randn(2, 4, 8)}, filled)[0]
    assert same["input_features"].shape[-1] == 16 and same["attention_mask"].shape == (2, 8)
    assert _longer_audio(prompt, ValueError("something else")) is None
    assert _longer_audio(prompt, RuntimeError(str(filled))) is None
    assert _longer_audio(text, filled) is None
    assert _longer_audio(dict(prompt, input_features=torch.randn(2, 4, MAX_FRAMES)), filled) is None
