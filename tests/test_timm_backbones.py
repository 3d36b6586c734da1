"""Tiny timm backbones: the data table and its rule (no timm needed: the rule edits the config
dict that a TimmWrapperConfig turns into, and the keyword arguments timm would receive)."""

from __future__ import annotations

from enablebot.model import timm_backbones
from enablebot.model.shrink import shrink_dict


def test_longest_prefix_wins_and_unknown_families_are_left_alone():
    rules = {"fastvit_mci": {"layers": [1, 1, 1, 1]}, "fastvit_mci3": {"layers": [1, 1, 1, 1, 1]}}
    assert timm_backbones.tiny_args("fastvit_mci3", rules) == {"layers": [1, 1, 1, 1, 1]}
    assert timm_backbones.tiny_args("fastvit_mci1", rules) == {"layers": [1, 1, 1, 1]}
    assert timm_backbones.tiny_args("resnet50", rules) == {}


def test_shipped_table_covers_the_backbones_transformers_configs_name():
    # Gemma 3n, FastVLM, PE Video / Audio-Video, EdgeTAM (transformers 5.17 and 5.25 defaults)
    for arch in ("mobilenetv5_300m_enc", "fastvit_mci3", "vit_pe_core_large_patch14_336", "repvit_m1"):
        assert timm_backbones.tiny_args(arch), arch


def test_shrink_merges_into_the_configs_own_model_args_and_sizes_the_image():
    d = {"model_type": "pe_video", "hidden_size": 1024,
         "vision_config": {"model_type": "timm_wrapper", "architecture": "vit_pe_core_large_patch14_336",
                           "model_args": {"num_classes": 1024}, "num_labels": 2}}
    changes = shrink_dict(d, "tiny")
    args = d["vision_config"]["model_args"]
    assert args == {"num_classes": 1024, "depth": 2, "img_size": 32}  # the profile's image side
    assert changes["vision_config.model_args"] == args


def test_a_config_without_model_args_or_a_known_family_is_untouched():
    d = {"architecture": "resnet50", "model_args": None}
    changes: dict = {}
    timm_backbones.shrink_timm(d, changes)
    assert d["model_args"] is None and changes == {}
    not_timm = {"architecture": "something", "hidden_size": 8}  # no model_args: not a timm wrapper
    timm_backbones.shrink_timm(not_timm, changes)
    assert "model_args" not in not_timm
