"""Inputs from what a model documents and reports: the generic rules that took transformers
5.25's pi05 (a PaliGemma-based robotics policy) from 0 to 4 of 4 items with no registry entry.

pi05 needs, beyond input_ids: images as (batch, cameras, C, H, W) with a (batch, cameras)
camera mask (without images its forward has no VLM prefix cache and raises), an image
encoder two modules down (`model.model.vlm`), and, for the base model, a `timestep_embeds`
that reaches the action expert only through `**kwargs` and is documented there.
"""

from __future__ import annotations

import pytest
import torch
import transformers

from enablebot.measure.runner import run_spec
from enablebot.model.build import build_model
from enablebot.model.documented import (DocArg, doc_arg, doc_shape, documented_tensor, hidden_requirements,
                                        missing_arguments)
from enablebot.model.images import add_image_tokens
from enablebot.model.inputs import build_inputs, default_inputs
from enablebot.model.tensors import Ctx
from enablebot.model.trial import run_completing
from enablebot.model.registry import Registry
from enablebot.model.resolve import resolve
from enablebot.results import RunSpec

HAS_PI05 = hasattr(transformers, "PI05ForConditionalGeneration")
needs_pi05 = pytest.mark.skipif(not HAS_PI05, reason=f"pi05 is new in transformers 5.25 "
                                                     f"(installed: {transformers.__version__})")

DOC = """
        Args:
            inputs_embeds (`torch.Tensor` of shape `(batch_size, sequence_length, hidden_size)`):
                Embedded inputs.
            timestep_embeds (`torch.Tensor` of shape `(batch_size, hidden_size)`):
                Embedding of the denoising timestep.
            cameras (`torch.BoolTensor` of shape `(batch_size, num_cameras)`):
                Which cameras are present.
            action_embeds (`torch.Tensor`, *optional*):
                No shape documented.
"""


@pytest.fixture(scope="module")
def no_entry(tmp_path_factory) -> Registry:
    """A registry with no entries: no recipe, no config override, for any type."""
    reg = Registry(path=tmp_path_factory.mktemp("reg") / "model_registry.yaml")
    reg.save()
    return reg


class _Cfg:
    hidden_size = 48
    num_cameras = 3


def test_documented_shapes_are_read_by_dim_name():
    a = doc_arg(DOC, "timestep_embeds")
    assert a == DocArg("timestep_embeds", "torch.Tensor", ("batch_size", "hidden_size"))
    assert doc_shape(a, config=_Cfg(), batch=2, seq_len=7) == [2, 48]
    assert doc_shape(doc_arg(DOC, "inputs_embeds"), config=_Cfg(), batch=2, seq_len=7) == [2, 7, 48]
    assert doc_shape(doc_arg(DOC, "cameras"), config=_Cfg(), batch=2, seq_len=7) == [2, 3]


def test_undocumented_or_unknown_dims_give_no_shape():
    # No guess made with the model's authority: a dim the config does not name, or no shape.
    class Bare:
        hidden_size = 48

    assert doc_shape(doc_arg(DOC, "cameras"), config=Bare(), batch=2, seq_len=7) is None
    assert doc_arg(DOC, "action_embeds").dims is None
    assert doc_shape(doc_arg(DOC, "action_embeds"), config=_Cfg(), batch=2, seq_len=7) is None
    assert doc_arg(DOC, "embeds") is None  # a suffix of a documented name is not that name
    assert doc_arg(None, "inputs_embeds") is None


def test_missing_arguments_only_from_a_missing_argument_type_error():
    assert missing_arguments(TypeError("Expert.forward() missing 1 required positional argument: 'timestep_embeds'")) \
        == ["timestep_embeds"]
    assert missing_arguments(TypeError("f() missing 2 required positional arguments: 'a' and 'b'")) == ["a", "b"]
    assert missing_arguments(TypeError("f() missing 1 required keyword-only argument: 'k'")) == ["k"]
    assert missing_arguments(TypeError("f() got an unexpected keyword argument 'x'")) == []
    assert missing_arguments(AttributeError("missing 1 required positional argument: 'x'")) == []


def test_a_failing_forward_keeps_its_inputs_unchanged(no_entry):
    """run_completing adds nothing when the failure is not a missing argument."""
    b = build_model(resolve("bert", no_entry), task="base")
    bad = {"input_ids": torch.full((2, 8), 10**6, dtype=torch.long)}  # past the vocabulary: IndexError
    ctx = Ctx(model=b.model, config=b.config, batch=2, seq_len=8, gen=torch.Generator().manual_seed(0), out=dict(bad))
    assert run_completing(b.model, ctx) is False
    assert set(ctx.out) == set(bad)
    assert hidden_requirements(b.model) == set()  # nothing a plain model passes on


@needs_pi05
def test_pi05_text_only_has_no_prefix_cache(no_entry):
    """What failed at day 0, and why it is the harness's inputs, not an eager bug: pi05's
    forward builds its VLM prefix cache only from images; text alone leaves it None."""
    b = build_model(resolve("pi05", no_entry), task="head")
    gen = torch.Generator().manual_seed(0)
    ctx = Ctx(model=b.model, config=b.config, batch=2, seq_len=32, gen=gen,
              out={"input_ids": torch.randint(3, 100, (2, 32), generator=gen),
                   "attention_mask": torch.ones(2, 32, dtype=torch.long)})
    assert add_image_tokens(b.model, ctx) is False  # the rules before 5.25 find no image encoder
    with pytest.raises(AttributeError, match="get_seq_length"):
        b.model(**ctx.out)


@needs_pi05
@pytest.mark.parametrize("task", ["head", "base"])
def test_pi05_gets_images_camera_mask_and_documented_kwargs(task, no_entry):
    b = build_model(resolve("pi05", no_entry), task=task)
    x = build_inputs(b.model, b.config, b.modality, None)
    pv, mask = x["pixel_values"], x["pixel_attention_mask"]
    assert pv.dim() == 5 and pv.shape[:2] == (2, 1) and mask.shape == (2, 1) and mask.dtype == torch.bool
    # the image encoder is not on the model or its .model (found deeper: model.model.vlm / model.vlm)
    assert not hasattr(b.model, "get_image_features") and not hasattr(getattr(b.model, "model", None),
                                                                       "get_image_features")
    n_image = (x["input_ids"] == b.config.vlm_config.image_token_id).sum(-1)
    assert (n_image == n_image[0]).all() and n_image[0] > 0  # one camera's image features per sample
    if task == "base":  # documented by the action expert, passed on through PI05Model's **kwargs
        assert "timestep_embeds" in hidden_requirements(b.model)
        assert x["timestep_embeds"].shape == (2, b.config.dit_config.hidden_size)
    out = b.model(**x)
    assert torch.isfinite(out[0]).all()


@needs_pi05
@pytest.mark.parametrize("task,mode", [("head", "eval"), ("head", "train"), ("base", "train")])
def test_pi05_build_pass_without_registry_entry(task, mode, no_entry):
    """The sweep's build pass (build tiny, one eager step, backward in train) on a registry
    that has no pi05 entry."""
    r = run_spec(RunSpec(model_id="pi05", task=task, mode=mode, pass_name="build", registry=str(no_entry.path)))
    assert r.verdict == "eager_ok", r.error


@needs_pi05
def test_documented_tensor_for_a_sub_model_argument(no_entry):
    b = build_model(resolve("pi05", no_entry), task="base")
    t = documented_tensor(b.model.dit, "timestep_embeds", config=b.model.dit.config, batch=3, seq_len=5,
                          gen=torch.Generator().manual_seed(0))
    assert t.shape == (3, b.config.dit_config.hidden_size) and t.dtype == torch.float32
    assert documented_tensor(b.model, "action_embeds", config=b.config, batch=3, seq_len=5,
                             gen=torch.Generator()) is None  # documented without a shape
    # default_inputs on the base: the required action_embeds by name, the rest by trial
    x = default_inputs(b.model, b.config, b.modality, batch=2, seq_len=16, gen=torch.Generator().manual_seed(0))
    assert {"input_ids", "action_embeds", "pixel_values", "pixel_attention_mask", "timestep_embeds"} <= set(x)


@pytest.mark.parametrize("task,mode", [("head", "train"), ("base", "eval")])
def test_pi0_builds_and_runs_without_its_hand_written_recipe(task, mode, no_entry):
    """pi0 (transformers 5.24) has the same needs and a hand-written registry recipe; the
    generic rules alone run it: the policy's main input is its robot `state` (a vector as
    wide as `config.max_state_dim`), the prompt and camera images are added because its
    forward does not run without them."""
    assert no_entry.get("pi0") is None and Registry.load().entries["pi0"].inputs  # the recipe it does without
    b = build_model(resolve("pi0", no_entry), task=task)
    x = build_inputs(b.model, b.config, b.modality, None)
    assert x["pixel_values"].dim() == 5 and x["pixel_attention_mask"].shape == (2, 1)
    if task == "head":
        assert x["state"].shape == (2, b.config.max_state_dim)
    r = run_spec(RunSpec(model_id="pi0", task=task, mode=mode, pass_name="build", registry=str(no_entry.path)))
    assert r.verdict == "eager_ok", r.error


def test_config_width_vector_only_for_a_width_the_config_names(no_entry):
    from enablebot.model.tensors import config_width_vector

    class Cfg:
        max_state_dim = 12
        proprio_dim = 0  # a zero width is no width

    ctx = Ctx(model=None, config=Cfg(), batch=2, seq_len=8, gen=torch.Generator().manual_seed(0), out={})
    assert config_width_vector(ctx, "state").shape == (2, 12)
    assert config_width_vector(ctx, "proprio") is None
    assert config_width_vector(ctx, "joints") is None
