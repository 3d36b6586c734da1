"""Which towers run in the project's `call` inputs: build (head class), pad, one eager call under count_towers.
Usage: python benchmarks/fidelity/towers_check.py TASK TYPE ... > rows.jsonl"""
import sys, json, torch, warnings
warnings.filterwarnings("ignore")
import transformers; transformers.logging.set_verbosity_error()
from enablebot.results import RunSpec
from enablebot.model.prepare import prepare
from enablebot.model.padding import pad_batch
from enablebot.measure.towers import count_towers
for t in sys.argv[2:]:
    try:
        p = prepare(RunSpec(model_id=t, device="cpu", task=sys.argv[1]), reuse=False)
        x, _ = pad_batch(p.model, p.config, p.inputs)
        with count_towers(p.model, p.config) as rep, torch.no_grad():
            p.model(**x)
        print(json.dumps({"type": t, "class": p.class_name, "not_run": rep.not_run, "inputs": sorted(x)}), flush=True)
    except Exception as e:
        print(json.dumps({"type": t, "error": f"{type(e).__name__}: {str(e)[:200]}"}), flush=True)
