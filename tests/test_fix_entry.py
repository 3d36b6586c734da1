"""Registry entries drafted by the LLM: data only, validated, verified by building and running eager."""

import json

import pytest
import yaml

from enablebot.fix.draft.entry import EntryRejected, draft_entry, parse_reply, validate_entry
from enablebot.fix.draft.llm import LLMClient, Transcript
from enablebot.model.registry import Registry
from enablebot.testing.fake_openai import FakeOpenAI

from conftest import ROOT

KEY = "sk-test-entry-0123456789"
RECIPE = {"tensors": {"states": {"shape": ["B", "S", "config.state_dim"]},
                      "actions": {"shape": ["B", "S", "config.act_dim"]},
                      "rewards": {"shape": ["B", "S", 1]},
                      "returns_to_go": {"shape": ["B", "S", 1]},
                      "timesteps": {"shape": ["B", "S"], "dtype": "long", "high": "config.max_ep_len"},
                      "attention_mask": {"shape": ["B", "S"], "dtype": "long", "fill": 1}}}


def _reply(entry) -> str:
    return "Here is the entry.\n\n```yaml\n" + yaml.safe_dump(entry, sort_keys=False) + "```\nIt adds the inputs."


def test_plain_data_entries_are_accepted():
    assert validate_entry({"inputs": RECIPE}) == []
    assert validate_entry({"config": {"vision_config.image_size": 32, "num_hidden_layers": 2,
                                      "layer_types": ["full_attention", "sliding_attention"],
                                      "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
                           "inputs": {"drop": ["token_type_ids"], "kwargs": {"return_loss": False}, "seq_len": 16,
                                      "by_class": {"XForCausalLM": {"drop": ["pixel_values"]}}}}) == []


@pytest.mark.parametrize("text, why", [
    ("```yaml\ninputs: !!python/object/apply:os.system ['touch /tmp/pwned']\n```", "not plain YAML"),
    ("```yaml\n- a list\n```", "must be a mapping"),
])
def test_code_disguised_as_yaml_is_refused_when_parsed(text, why):
    with pytest.raises(EntryRejected, match=why):
        parse_reply(text)


@pytest.mark.parametrize("entry, why", [
    ({"hook": "enablebot.model.hooks:video_session"}, "hook: code"),
    ({"inputs": {"hook": "enablebot.model.hooks:video_session"}}, "hooks are code"),
    ({"inputs": {"by_class": {"X": {"hook": "evil:fn"}}}}, "hooks are code"),
    ({"config": {"model_type": "llama"}}, "identity"),
    ({"config": {"architectures": ["LlamaForCausalLM"]}}, "identity"),
    ({"config": {"text_config.model_type": "gpt2"}}, "identity"),
    ({"config": {"vision_config": {"model_type": "clip_vision_model"}}}, "identity"),
    ({"config": {"auto_map": {"AutoModel": "x.Y"}}}, "identity"),
    ({"config": {"num_hidden_layers": 48}}, "layers is beyond the budget"),
    ({"config": {"text_config.num_hidden_layers": 12}}, "layers is beyond the budget"),
    ({"config": {"hidden_size": 1_000_000}}, "size budget"),
    ({"config": {"attn_implementation": "__import__('os').system('id')"}}, "looks like code"),
    ({"inputs": {"tensors": {"x": {"shape": ["B", "__import__('os').getpid()"]}}}}, "looks like code"),
    ({"inputs": {"tensors": {"x": {"shape": ["B", "[i for i in config]"]}}}}, "outside the recipe language"),
    ({"inputs": {"tensors": {"x": {"shape": ["B", "open('/etc/passwd')"]}}}}, "looks like code"),
    ({"inputs": {"tensors": {"x": {"shape": ["B", "abs(S)"]}}}}, "calls something other"),
    ({"inputs": {"tensors": {"x": {"shape": ["B", "config._private"]}}}}, "private attribute"),
    ({"inputs": {"tensors": {"x": {"rule": "not_a_rule"}}}}, "not a generic rule"),
    ({"inputs": {"tensors": {"x": {"shape": ["B"], "code": "print(1)"}}}}, "not a tensor-spec key"),
    ({"inputs": {"kwargs": {"fn": "lambda x: x"}}}, "looks like code"),
    ({"requires": ["timm"]}, "not allowed in a drafted entry"),
    ({}, "neither"),
])
def test_hostile_entries_are_rejected(entry, why):
    problems = validate_entry(entry)
    assert any(why in p for p in problems), problems


@pytest.mark.slow
def test_a_drafted_entry_is_verified_and_bundled_after_a_hostile_one_is_rejected(tmp_path):
    """decision_transformer without its recipe fails to build (no generic input for `states`). The fake
    LLM first answers with a hook (code: rejected, never run), then with the recipe (verified)."""
    reg = Registry.load(ROOT / "model_registry.yaml")
    reg.get("decision_transformer").inputs = {}
    reg.path = tmp_path / "registry.yaml"
    reg.save()
    with FakeOpenAI(api_key=KEY, script=[_reply({"inputs": {"hook": "enablebot.model.hooks:anything"}}),
                                         _reply({"inputs": RECIPE})]) as server:
        llm = LLMClient(model="fake-coder", base_url=server.base_url, api_key=KEY, backoff_s=0.01,
                        transcript=Transcript(tmp_path / "t.jsonl", secrets=(KEY,)))
        out = draft_entry("decision_transformer", Registry.load(reg.path), llm, tmp_path / "fixes", attempts=2,
                          modes=("eval",), timeout_s=300)
        second_prompt = server.chat_requests[1].body["messages"][-1]["content"]
    assert out.before == {"base/eval": "create_error"}
    assert out.status == "verified", out
    assert out.attempts[0].rejected and not out.attempts[0].verdicts  # the hostile entry never ran
    assert "hooks are code" in second_prompt  # the rejection went back to the LLM
    assert out.attempts[1].verdicts["base/eval"] in ("full_graph", "graph_break")
    bundle = tmp_path / "fixes" / "decision_transformer-registry"
    meta = json.loads((bundle / "bundle.json").read_text())
    assert (meta["target"], meta["kind"], meta["files"], meta["verified"]) == \
        ("config", "registry", ["model_registry.yaml"], True)
    diff = (bundle / "patch.diff").read_text()
    assert diff.startswith("--- a/model_registry.yaml")
    assert any(ln.startswith("+") and ln.strip("+ ") == "states:" for ln in diff.splitlines())
    assert Registry.load(reg.path).get("decision_transformer").inputs == {}  # the registry itself is untouched
    assert KEY not in (tmp_path / "t.jsonl").read_text()
