"""Re-judge a replay fix bundle's patch on the decode scenario (prefill + one cached decode step) with the
fix loop's own verifier (overlay, gates, numerics vs the unpatched fp64 model, per-step checks).
Run with the release environment first on PYTHONPATH (enablebot.replay.envs.child_env)."""
import json, sys, tempfile
from pathlib import Path
from enablebot.fix.judge.verify import VerifyOptions, verify_candidate, default_runner
from enablebot.fix.judge.overlay import build_overlay
from enablebot.fix.judge.patchguard import PatchPolicy, check_patch
from enablebot.results import RunSpec
from enablebot.fix.bundle import ClusterRef

bundle = Path(sys.argv[1]); scenario = sys.argv[2] if len(sys.argv) > 2 else "decode"
v = json.loads((bundle / "verification.json").read_text())
spec = RunSpec.from_dict({**v["spec"], "scenario": scenario, "timing": False})
ref = ClusterRef.from_dict(v["cluster"]) if hasattr(ClusterRef, "from_dict") else ClusterRef(**v["cluster"])
diff = (bundle / "patch.diff").read_text()
work = Path(tempfile.mkdtemp(prefix="gb0170-"))
base = default_runner(spec)
print("baseline", scenario, base.verdict, base.stats.graphs if base.stats else None, base.stats.graph_breaks if base.stats else None)
ov = build_overlay(diff, work / "overlay")
ver = verify_candidate(base, ref, overlay_dir=str(work / "overlay"), files=v["files"],
                       options=VerifyOptions(work_dir=work / "verify", sample_models=[], speed_threshold=0.0),
                       runner=default_runner)
print("passed", ver.passed, "after", ver.after)
for c in ver.checks:
    print(f"  {c.name}: {'pass' if c.passed else 'FAIL'}  {c.detail[:300]}")
