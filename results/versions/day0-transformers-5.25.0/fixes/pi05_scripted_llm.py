"""pi05 (new in transformers 5.25) through `draft_entry`, the LLM replaced by the local fake OpenAI
server scripted with the entry reached by iterating on the errors the loop feeds back."""
import json, sys
from pathlib import Path
import yaml
from enablebot.registry import Registry
from enablebot.fix.entry import draft_entry
from enablebot.fix.llm import LLMClient, Transcript
from enablebot.testing.fake_openai import FakeOpenAI
entry = {"inputs": {"tensors": {
    "pixel_values": {"shape": ["B", 1, "config.vlm_config.vision_config.num_channels",
                               "config.vlm_config.vision_config.image_size", "config.vlm_config.vision_config.image_size"]},
    "pixel_attention_mask": {"shape": ["B", 1], "dtype": "bool"},
    "timestep_embeds": {"shape": ["B", "config.dit_config.hidden_size"]}},
    # the head makes timestep_embeds itself, and samples noise and the timestep unless given
    "by_class": {"PI05ForConditionalGeneration": {"drop": ["timestep_embeds"], "tensors": {
        "noise": {"shape": ["B", "config.chunk_size", "config.max_action_dim"]},
        "timestep": {"shape": ["B"], "fill": 0.5}}}}}}
out = Path(sys.argv[1])
with FakeOpenAI(api_key="sk-local-fake-000000", script=["```yaml\n" + yaml.safe_dump(entry) + "```"]) as s:
    llm = LLMClient(model="scripted-fake", base_url=s.base_url, api_key="sk-local-fake-000000", backoff_s=0.01,
                    transcript=Transcript(out / "transcript.jsonl", secrets=("sk-local-fake-000000",)))
    res = draft_entry("pi05", Registry.load("/tmp/day0-reg.yaml"), llm, out, attempts=1, timeout_s=600)
print(json.dumps(res.to_dict(), indent=1))
