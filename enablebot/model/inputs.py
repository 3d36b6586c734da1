"""Inputs for a tiny model, from its forward signature, its config and a recipe.

Generic rules pick the tensors a forward needs (its main input, every required
argument, and companions such as attention masks, decoder ids, both towers of a dual
encoder) and make each one by its name: token ids, masks, images, videos, audio
waveforms and features, layout boxes, patchified images with their `grid_thw`.
A registry entry's `inputs` recipe adds or replaces tensors as data:

    inputs:
      drop: [attention_mask]
      tensors:
        pixel_values: {shape: [B, config.vision_config.num_channels, 32, 32]}
        input_features: {shape: [B, config.num_mel_bins, "2 * config.max_source_positions"]}
        image_grid_thw: {value: [[1, 4, 4]], repeat_batch: true, dtype: long}
        bbox: {rule: bbox}            # one of the generic rules below, by name
        shared_kv_states: {items: {full_attention: {tuple: [{shape: [...]}, {shape: [...]}]}}}  # nested
        input_values: {rule: input_values, unsqueeze: 1}      # ... with a channel axis
        input_features: {rule: input_features, transpose: [1, 2]}  # ... frames first
      kwargs: {return_loss: false}    # non-tensor arguments
      seq_len: 16
      tokens: {audio_token_id: "config.audio_config.max_source_positions // 2"}  # placeholders per sample
      replace: true                   # only the recipe's tensors
      hook: enablebot.model.hooks:video_session  # code for inputs data cannot express
      by_class:                       # per model class, merged over the above
        WhisperForConditionalGeneration: {drop: [decoder_attention_mask]}

The rules by name are in tensors.py; real images with their placeholder tokens in images.py;
trial forwards that complete missing arguments in trial.py.
When neither the image path nor these inputs run, extended rules try (`add_image_tokens(...,
extended=True)`): the image encoder deeper in the module tree, (batch, images, C, H, W) images
counted per image, all-true pixel masks, and arguments the trial forward reports missing, shaped
as the sub-model that requires them documents them (documented.py). An argument with no rule by
name gets its documented shape, else (batch, config.<name>_dim). None of this per architecture.

Shape entries are ints, `B` (batch), `S` (sequence length), or arithmetic over
`config.<path>` attributes with + - * // % and max()/min(). Batch is >= 2 so that
shapes do not specialise on 0/1.
"""

from __future__ import annotations

import inspect
from typing import Any

from .configs import first_attr, text_config
from .images import add_image_tokens, image_arg
from .tensors import IMAGE_TOKEN_SUBS, RULES, Ctx, config_width_vector, eval_dim, image_token, rule_for
from .trial import run_completing, runs

# The start of the error where no rule makes a required input (prepare may then ask a composite).
NO_GENERIC_INPUT = "no generic input for"


def _required(model: Any) -> list[str]:
    out = []
    for name, p in inspect.signature(model.forward).parameters.items():
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            out.append(name)
    return out


def wanted_inputs(model: Any, config: Any, modality: str) -> list[str]:
    """The argument names a forward gets: main input, required ones, companions."""
    params = set(inspect.signature(model.forward).parameters)
    main = getattr(model, "main_input_name", "input_ids")
    names: list[str] = []

    def want(n: str) -> None:
        if n in params and n not in names:
            names.append(n)

    if isinstance(main, (list, tuple)):  # several main inputs (e.g. image and task)
        for n in main:
            want(n)
        main = main[0] if main else "input_ids"
    if main in params:
        want(main)
    elif modality == "vision" and "pixel_values" in params:
        want("pixel_values")
    elif "input_ids" in params:
        want("input_ids")
    for n in _required(model):
        want(n)
    # Dual encoders (CLIP-like: text and image towers, no image placeholder token) run
    # both towers; models that merge images at placeholder tokens get text only unless a
    # recipe adds images with their tokens.
    has_image_token = image_token(config) is not None
    if not has_image_token and {"input_ids", "pixel_values"} <= params and ({"input_ids", "pixel_values"} & set(names)):
        want("input_ids")
        want("pixel_values")
    if has_image_token and "pixel_values" in names:
        want("input_ids")  # image placeholders go in the text (see add_image_tokens)
    if "input_ids" in names:
        want("attention_mask")
        want("bbox")  # layout models: boxes per token
    if "input_features" in names:
        want("input_features_mask")
    if "qformer_input_ids" in names:
        want("qformer_attention_mask")
    if getattr(config, "is_encoder_decoder", False):
        want("decoder_input_ids")
    return names


def default_inputs(model: Any, config: Any, modality: str, *, batch: int, seq_len: int, gen: Any,
                   skip: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """Generic inputs; names in `skip` (given or dropped by a recipe) are left out."""
    ctx = Ctx(model=model, config=config, batch=batch, seq_len=seq_len, gen=gen, out={})
    names = [n for n in wanted_inputs(model, config, modality) if n not in skip]
    # A (t, h, w) patch grid means the image comes already cut into flattened patches.
    patch_arg = None
    if "grid_thw" in names or "image_grid_thw" in names:
        patch_arg = next((n for n in ("hidden_states", "pixel_values") if n in names), None)
    for name in names:
        rule = RULES["patchified"] if name == patch_arg else rule_for(name)
        if rule is None:
            from .documented import documented_tensor

            # No rule by name: the shape the model's own docstring gives the argument, else a
            # per-sample vector as wide as the config's width for that name (`state`: max_state_dim).
            t = documented_tensor(model, name, config=config, batch=batch, seq_len=seq_len, gen=gen)
            if t is None:
                t = config_width_vector(ctx, name)
            if t is None:
                raise ValueError(f"{NO_GENERIC_INPUT} {type(model).__name__}.{name}; "
                                 "add an `inputs` recipe to the registry")
            ctx.out[name] = t
            continue
        ctx.out[name] = rule(ctx)
    params = inspect.signature(model.forward).parameters
    with_images = False
    arg = image_arg(model)
    merges_images = arg is not None and arg not in skip and image_token(config) is not None
    if merges_images and "input_ids" in ctx.out:
        with_images = add_image_tokens(model, ctx)
    if merges_images and not with_images and not runs(model, ctx.out):
        # Neither images by the rules above nor these inputs run: the extended image rules,
        # with the text that carries the image placeholders where the main input is another
        # (a policy's robot `state`).
        saved = dict(ctx.out)
        for n in ("input_ids", "attention_mask"):
            if n in params and n not in skip and n not in ctx.out:
                ctx.out[n] = RULES[n](ctx)
        with_images = add_image_tokens(model, ctx, extended=True)
        if not with_images:
            ctx.out.clear()
            ctx.out.update(saved)
    from .audio import add_audio_tokens, wants_audio

    if wants_audio(model, ctx, skip):  # audio LMs: a clip per sample with its placeholders
        add_audio_tokens(model, ctx)
    from .videos import add_video_tokens, wants_video

    if wants_video(model, ctx, skip):  # video LMs: a clip per sample after the image, its tower too
        add_video_tokens(model, ctx)
    if not with_images:
        from .documented import hidden_requirements

        # A sub-model needs an argument the top forward only passes on: find it by trial.
        if hidden_requirements(model) - set(ctx.out) - set(skip):
            run_completing(model, ctx)
    return ctx.out


# ---- recipes ---------------------------------------------------------------------------


def _dtype(name: str | None, default: Any) -> Any:
    import torch

    return {"long": torch.long, "int": torch.int32, "float": torch.float32, "bool": torch.bool}.get(name or "", default)


def recipe_tensor(spec: dict[str, Any], *, config: Any, batch: int, seq_len: int, gen: Any,
                  ctx: Ctx | None = None) -> Any:
    import torch

    # Structured arguments (a dict of (key, value) tensor pairs per layer type...): nested specs.
    if "items" in spec:
        return {k: recipe_tensor(v, config=config, batch=batch, seq_len=seq_len, gen=gen, ctx=ctx)
                for k, v in spec["items"].items()}
    if "tuple" in spec:
        return tuple(recipe_tensor(v, config=config, batch=batch, seq_len=seq_len, gen=gen, ctx=ctx)
                     for v in spec["tuple"])
    if "rule" in spec:
        rule = rule_for(spec["rule"])
        if ctx is None or rule is None:
            raise ValueError(f"unknown input rule {spec['rule']!r}; known: {', '.join(sorted(RULES))}")
        t = rule(ctx)
        # Layout adjustments of a generic tensor: frames-first features, a channel axis.
        if "transpose" in spec:
            t = t.transpose(*spec["transpose"]).contiguous()
        if "unsqueeze" in spec:
            t = t.unsqueeze(int(spec["unsqueeze"]))
        return t
    if "value" in spec:
        t = torch.tensor(spec["value"], dtype=_dtype(spec.get("dtype"), None))
        if spec.get("repeat_batch"):
            t = t.repeat(batch, *([1] * (t.dim() - 1))) if t.dim() else t
        return t
    shape = [eval_dim(d, config=config, batch=batch, seq_len=seq_len) for d in spec["shape"]]
    dtype = _dtype(spec.get("dtype"), torch.float32)
    if "fill" in spec:
        return torch.full(shape, spec["fill"], dtype=dtype)
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=gen, dtype=dtype)
    if dtype == torch.bool:
        return torch.ones(*shape, dtype=torch.bool)
    high = spec.get("high", "config.vocab_size")
    high = eval_dim(high, config=config, batch=batch, seq_len=seq_len)
    return torch.randint(int(spec.get("low", 0)), high, shape, generator=gen, dtype=dtype)


def build_inputs(model: Any, config: Any, modality: str, recipe: dict[str, Any] | None, *,
                 batch: int = 2, seq_len: int = 32, seed: int = 0, notes: list[str] | None = None,
                 failure: list[BaseException] | None = None) -> dict[str, Any]:
    """The inputs; where the generic layout of a tensor does not run and another does
    (layouts.py), the other, with what changed appended to `notes`. Where nothing runs, the
    trial forward's error is appended to `failure` (prepare.py tries other widths on it)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    recipe = for_class(recipe or {}, type(model).__name__)
    seq_len = int(recipe.get("seq_len", seq_len))
    # Text no longer than the learned position table (CLIP-like text towers have 16-77).
    maxpos = first_attr(text_config(config), ("max_position_embeddings", "n_positions", "max_seq_len"))
    if isinstance(maxpos, int) and 2 <= maxpos < seq_len:
        seq_len = maxpos
    batch = int(recipe.get("batch", batch))
    skip = set(recipe.get("drop", [])) | set(recipe.get("tensors") or {}) | set(recipe.get("kwargs") or {})
    out = {} if recipe.get("replace") else default_inputs(model, config, modality, batch=batch, seq_len=seq_len,
                                                          gen=gen, skip=skip)
    for name in recipe.get("drop", []):
        out.pop(name, None)
    generic = set(out) - set(recipe.get("tensors") or {})
    ctx = Ctx(model=model, config=config, batch=batch, seq_len=seq_len, gen=gen, out=out)
    for name, spec in (recipe.get("tensors") or {}).items():
        out[name] = recipe_tensor(spec, config=config, batch=batch, seq_len=seq_len, gen=gen, ctx=ctx)
    for name, value in (recipe.get("kwargs") or {}).items():
        out[name] = value
    # Images a recipe shapes (e.g. (batch, images, C, H, W)) still get their placeholder tokens;
    # after the kwargs, which the trial forward in add_image_tokens needs too.
    given = recipe.get("tensors") or {}
    if "pixel_values" in given and "input_ids" in out and "input_ids" not in given \
            and image_token(config) is not None:
        add_image_tokens(model, ctx)
    from .audio import add_audio_tokens, recipe_audio

    if recipe_audio(model, ctx, given):  # audio a recipe shapes gets its placeholders likewise
        add_audio_tokens(model, ctx)
    if recipe.get("tokens"):
        place_tokens(ctx, recipe["tokens"])
    if recipe.get("hook"):  # inputs no tensor recipe can express (e.g. a video inference session)
        hooked = call_inputs_hook(recipe["hook"], model=model, config=config, batch=batch, seq_len=seq_len,
                                  gen=gen, out=out)
        out.update(hooked)
        generic -= set(hooked)
    for name in recipe.get("drop", []):
        out.pop(name, None)
    from .layouts import relayout

    merges = image_token(config) is not None
    out, changed, err = relayout(model, out, generic, merges_images=merges)
    if err is not None and not recipe.get("tensors"):
        from .trial import one_of

        ctx.out = out
        named = one_of(model, err, ctx)  # the forward wants one of two arguments and got neither
        if named:
            tried, more, err2 = relayout(model, {**out, **named}, generic | set(named), merges_images=merges)
            if err2 is None:
                out, err = tried, None
                changed = [*changed, *(f"{n}: by its rule (the forward asks for one of the arguments it names)"
                                       for n in named), *more]
    if err is None and not recipe.get("tensors"):
        from .trial import add_training_inputs

        ctx.out = out
        changed = [*changed, *(f"{n}: by its rule (the forward requires it in training)"
                               for n in add_training_inputs(model, ctx))]
    if notes is not None:
        notes.extend(changed)
    if failure is not None and err is not None:
        failure.append(err)
    return out


def place_tokens(ctx: Ctx, tokens: dict[str, Any]) -> None:
    """A recipe's `tokens: {config_key: count}`: in every sample, `count` copies of the token
    id the config names, in a run from position 1 (after the first token), as a processor
    expands `<image>`/`<|AUDIO|>` placeholders. For models whose placeholder count no
    image-features function gives (audio towers, cross-attention VLMs)."""
    ids = ctx.out.get("input_ids")
    if ids is None:
        raise ValueError("inputs recipe `tokens` needs input_ids")
    pos = 1
    for key, expr in tokens.items():
        token = first_attr(ctx.config, (key,), IMAGE_TOKEN_SUBS)
        if not isinstance(token, int):
            raise ValueError(f"inputs recipe `tokens`: the config has no token id {key!r}")
        n = eval_dim(expr, config=ctx.config, batch=ctx.batch, seq_len=ctx.seq_len)
        if pos + n + 2 > ids.shape[1]:
            raise ValueError(f"inputs recipe `tokens`: {n} x {key} do not fit in {ids.shape[1]} tokens; "
                             "raise the recipe's seq_len")
        ids[:, pos:pos + n] = token
        pos += n


def call_inputs_hook(ref: str, **kwargs: Any) -> dict[str, Any]:
    """An `inputs: {hook: "enablebot.module:function"}` recipe: the function returns more inputs."""
    import importlib

    mod_name, _, fn_name = ref.partition(":")
    if not mod_name.startswith("enablebot."):
        raise ValueError(f"inputs hook {ref!r}: only enablebot.* hooks are allowed")
    return dict(getattr(importlib.import_module(mod_name), fn_name)(**kwargs) or {})


def for_class(recipe: dict[str, Any], class_name: str) -> dict[str, Any]:
    """The recipe for one model class: `by_class: {ClassName: {...}}` entries are merged
    over the shared recipe (tensors and kwargs by name; drop lists added)."""
    special = (recipe.get("by_class") or {}).get(class_name)
    if not special:
        return recipe
    merged = {k: v for k, v in recipe.items() if k != "by_class"}
    for key in ("tensors", "kwargs"):
        if key in special:
            merged[key] = {**(recipe.get(key) or {}), **special[key]}
    merged["drop"] = list(recipe.get("drop", [])) + list(special.get("drop", []))
    merged.update({k: v for k, v in special.items() if k not in ("tensors", "kwargs", "drop")})
    return merged
