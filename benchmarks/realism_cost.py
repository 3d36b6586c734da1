"""What padding and the cache cost Dynamo per eval item, in one process: CPU seconds of the trace
stage (the lesser of two runs), ops captured, verdict and breaks for `call`, `call_unpadded` and
`call_nocache` of each base model type given (after one warm-up trace, so no row pays Dynamo's
first-trace start-up).

    PYTHONPATH=.:/work/tfenv/5.17.0 python benchmarks/realism_cost.py llama qwen2 gpt2 bert bart t5
"""
import time, statistics, sys, json
import enablebot.execute.preload
import torch, transformers
torch.set_num_threads(1)
from enablebot.results import RunSpec
from enablebot.measure.runner import run_spec
run_spec(RunSpec(model_id="gpt2", task="base", mode="eval", scenario="naive", pass_name="dynamo", backend="eager"))
out={}
for mt in sys.argv[1:]:
    res={}
    for sc in ["call","call_unpadded","call_nocache"]:
        v=[]
        for _ in range(2):
            r=run_spec(RunSpec(model_id=mt, task="base", mode="eval", scenario=sc, pass_name="dynamo", backend="eager"))
            v.append(r.stage_cpu_s.get("trace",0))
        res[sc]=(round(min(v),2), r.ops_captured, str(r.verdict), r.explain_breaks)
    out[mt]=res
    print(transformers.__version__, mt, res, flush=True)
