"""The anti-gaming gates (enablebot.fix.judge.gates): pure inputs, plus the runner's explain stage on
small real modules under real torch.compile machinery (in process, seconds)."""

import pytest
import torch

from enablebot.measure import runner
from enablebot.fix.judge import gates
from enablebot.results import CompileStats, RunResult, RunSpec, Timing


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.b(torch.tanh(self.a(x)))) * 2 + x


class Net(torch.nn.Module):
    def __init__(self, wrap=lambda f: f):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(4))
        for blk in self.blocks:
            blk.forward = wrap(blk.forward)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return x.sum(-1)


def _explained(model) -> RunResult:
    result = runner.trace_model(model, {"x": torch.randn(2, 8)})
    assert result.verdict.ok, result.error
    return result


def test_runner_measures_ops_and_disabling_most_blocks_fails_the_ops_gate():
    torch.manual_seed(0)
    before = _explained(Net())
    after = _explained(Net(wrap=torch.compiler.disable))
    assert before.ops_captured and before.ops_captured >= 4 * 5
    assert after.ops_captured < before.ops_captured / 2
    by_name = {g.name: g for g in gates.evaluate(before, after)}
    assert not by_name["ops_captured"].passed and "code that was compiled no longer is" in by_name["ops_captured"].detail
    # The same model again passes every gate.
    assert all(g.passed for g in gates.evaluate(before, _explained(Net())))


def test_runner_counts_skipped_frames_and_the_gate_fails_on_more():
    class Skips(torch.nn.Module):
        def forward(self, x):
            torch._dynamo.skip_frame()  # what a patch raising SkipFrame does: the frame runs eagerly
            return x + 1

    before = _explained(Net())
    after = _explained(Skips())
    assert before.frames_skipped == 0 and after.frames_skipped >= 1
    gate = gates.frames_skipped(before.frames_skipped, after.frames_skipped)
    assert not gate.passed and "0 ->" in gate.detail


def test_ops_gate_pure():
    assert gates.ops_captured(100, 85).passed
    assert not gates.ops_captured(100, 79).passed
    assert gates.ops_captured(100, 150).passed  # a fix that captures more
    assert gates.ops_captured(None, 3).passed and "not measured" in gates.ops_captured(None, 3).detail


def test_graphs_nonzero_and_frames_pure():
    assert not gates.graphs_nonzero(5, 0).passed and "nothing is compiled" in gates.graphs_nonzero(5, 0).detail
    assert gates.graphs_nonzero(5, 1).passed and gates.graphs_nonzero(0, 0).passed
    assert not gates.frames_skipped(0, 2).passed and gates.frames_skipped(2, 1).passed


SW = "src/transformers/models/switch_transformers/modeling_switch_transformers.py"


def _diff(*added: str, path: str = SW) -> str:
    body = "".join(f"+{ln}\n" for ln in added)
    return f"--- a/{path}\n+++ b/{path}\n@@ -10,3 +10,{3 + len(added)} @@\n context\n{body} context\n context\n"


@pytest.mark.parametrize("line", [
    "    @torch.compiler.disable",
    "    @torch._dynamo.disable(recursive=True)",
    "    forward = torch._disable_dynamo(forward)",
    "torch._dynamo.config.suppress_errors = True",
    "suppress_errors = True",
    "    torch.compiler.set_stance('force_eager')",
    "    torch._dynamo.config.capture_scalar_outputs = True",
    "    with torch._dynamo.config.patch(capture_scalar_outputs=True):",
    "    trace_rules.add('transformers.models.x')",
    "    raise SkipFrame('no')",
])
def test_escape_hatches_are_flagged(line):
    gate = gates.escape_hatches(_diff(line))
    assert not gate.passed and SW in gate.detail


@pytest.mark.parametrize("line", [
    "    if torch.compiler.is_compiling():",  # legitimate in transformers; judged by behaviour
    "    # torch.compiler.disable is not needed here",
    "    x = torch.where(mask, x, 0)",
    "    if self.config.disable_dropout:",
])
def test_ordinary_code_is_not_an_escape_hatch(line):
    assert gates.escape_hatches(_diff(line)).passed


@pytest.mark.parametrize("lines", [
    ["setattr(torch._dynamo.config, 'capture_scalar_outputs', True)"],
    ["torch._dynamo.config.capture_scalar_outputs = True"],
    ["torch.nonzero = lambda *a, **k: None"],
    ["_ = torch.ones(3).sum()"],
    ["if True:", "    import os", "    os.environ['X'] = '1'"],
    ["for _m in list(sys.modules):", "    pass"],
    # hidden after a dangling decorator (a fragment that does not parse as a whole)
    ["@torch.no_grad()", "torch.nonzero = lambda *a, **k: None"],
    ["from ...integrations import x", "@deco", "_ = torch.ones(3).sum()"],
])
def test_import_time_effects_are_flagged(lines):
    gate = gates.import_effects(_diff(*lines))
    assert not gate.passed, gate.detail


@pytest.mark.parametrize("lines", [
    ["import math"],
    ["from torch import nn"],
    ["MAX_EXPERTS = 64", "_NAMES = ('a', 'b')"],
    ["logger = logging.get_logger(__name__)"],
    ["def helper(x):", "    torch._dynamo.config.x = 1", "    return x"],
    ["class Foo(nn.Module):", "    pass"],
    ["    x = compute(y)", "    return x"],  # inside an existing function
    ["@torch.no_grad()"],  # a decorator whose def is context
    # transformers 5.25's longcat_flash change: a relative import and, in a later hunk, a class
    # decorator whose class line is context (the added lines of both hunks run together)
    ["from ...integrations import use_experts_implementation, use_kernel_forward_from_hub",
     "@use_experts_implementation"],
    ["from ...integrations import (", "    use_experts_implementation,", ")", "@use_experts_implementation"],
])
def test_definitions_and_constants_are_not_import_effects(lines):
    gate = gates.import_effects(_diff(*lines))
    assert gate.passed, gate.detail


def test_samples_speed():
    fast, slow = Timing(compiled_ms=1.0, eager_ms=2.0, speedup=2.0), Timing(compiled_ms=4.0, eager_ms=2.0, speedup=0.5)
    g = gates.samples_speed([("gpt2", fast, slow), ("bert", fast, fast)])
    assert not g.passed and "slower: gpt2" in g.detail
    assert gates.samples_speed([("gpt2", fast, fast), ("bert", None, None)]).passed
    assert gates.speed_ratio(Timing(compiled_ms=2.0), Timing(compiled_ms=1.0)) == 2.0


def test_per_step():
    S = gates.StepStats
    before = [S(graphs=1, graph_breaks=0, numerics_passed=True), S(graphs=1, graph_breaks=0, numerics_passed=True)]
    assert gates.per_step(before, [S(graphs=1, numerics_passed=True), S(graphs=1, numerics_passed=True)]).passed
    # fixed on the prefill step, broken on a decode step
    g = gates.per_step(before, [S(graphs=1, numerics_passed=True), S(graphs=2, graph_breaks=1, numerics_passed=True)])
    assert not g.passed and "step 1: breaks 0 -> 1" in g.detail
    g = gates.per_step(before, [S(graphs=1, numerics_passed=True), S(graphs=0, numerics_passed=False)])
    assert not g.passed and "nothing compiled" in g.detail and "numerics now fail" in g.detail
    assert not gates.per_step(before, before[:1]).passed
    assert not gates.per_step(before, [before[0], S(graphs=1, numerics_passed=True, recompiles=3)]).passed


def test_added_lines_per_file():
    d = _diff("a = 1") + _diff("b = 2", path="torch/_dynamo/config.py")
    assert gates.added_lines(d) == {SW: ["a = 1"], "torch/_dynamo/config.py": ["b = 2"]}



ORIGINAL = '''
class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.cache = None

    def forward(self, x):
        y = self.fc(x)
        return y
'''


@pytest.mark.parametrize("patched_forward", [
    "    def forward(self, x):\n        if self.cache is not None:\n            return self.cache\n        y = self.fc(x)\n        self.cache = y.detach()\n        return y\n",
    "    def forward(self, x):\n        y = self.fc(x)\n        setattr(self, 'last', y)\n        return y\n",
    "    def forward(self, x):\n        global SEEN\n        SEEN = x.shape\n        return self.fc(x)\n",
    "    def forward(self, x):\n        self.calls += 1\n        return self.fc(x)\n",
])
def test_state_writes_while_running_are_flagged(patched_forward):
    patched = ORIGINAL.split("    def forward")[0] + patched_forward
    g = gates.state_writes([(SW, ORIGINAL, patched)])
    assert not g.passed and "forward() writes" in g.detail


def test_state_writes_allows_initialisers_unchanged_code_and_torch_files():
    patched = ORIGINAL.replace("        self.cache = None\n", "        self.cache = None\n        self.extra = 1\n")
    assert gates.state_writes([(SW, ORIGINAL, patched)]).passed
    assert gates.state_writes([(SW, ORIGINAL, ORIGINAL)]).passed
    dyn = ORIGINAL.replace("        return y\n", "        self.seen = y\n        return y\n")
    assert gates.state_writes([("torch/_dynamo/variables/misc.py", ORIGINAL, dyn)]).passed
    assert not gates.state_writes([(SW, ORIGINAL, dyn)]).passed


def test_verify_fails_fast_on_a_static_gate_without_running_anything(tmp_path):
    """A candidate the diff alone condemns is rejected before any (minutes-long) child run."""
    from pathlib import Path

    from enablebot.fix.bundle import ClusterRef
    from enablebot.fix.judge.overlay import build_overlay
    from enablebot.fix.judge.verify import VerifyOptions, verify_candidate

    diff = (Path(__file__).parent.parent / "benchmarks" / "fixbench" / "patches"
            / "hack_disable_breaking_function.diff").read_text()
    build_overlay(diff, tmp_path / "ov")
    baseline = RunResult(spec=RunSpec(model_id="switch_transformers", backend="eager"), verdict="graph_break",
                         stats=CompileStats(graphs=20, graph_breaks=22))

    def runner(spec):
        raise AssertionError(f"a child run was started for {spec.model_id}")

    v = verify_candidate(baseline, ClusterRef(gb_type="Dynamic shape operator", registry_id="GB0036"),
                         overlay_dir=str(tmp_path / "ov"), files=[SW], runner=runner,
                         options=VerifyOptions(work_dir=tmp_path / "w"))
    assert not v.passed and [c.name for c in v.failed_checks()] == ["escape_hatches"]
    assert "torch.compiler.disable" in v.feedback()


def test_a_break_uncovered_behind_the_fixed_one_is_allowed_a_moved_break_is_not():
    """nemotron_asr_streaming: removing the logger break lets Dynamo reach an LSTM further on
    (graphs 4 -> 2, breaks 8 -> 2, a new GB0014 cluster): uncovered, allowed. hubert: the
    requires_grad break turns into GB8985 with as many graphs: moved, rejected."""
    from enablebot.fix.bundle import ClusterRef, Snapshot
    from enablebot.fix.judge.verify import Verification, _break_checks
    from enablebot.results import GraphBreak, UserFrame

    def gb(rid, fn="forward"):
        return GraphBreak(gb_type=rid, registry_id=rid, user_frame=UserFrame(filename="modeling_x.py", lineno=1, function=fn))

    ref = ClusterRef(gb_type="GB0291", registry_id="GB0291", filename="modeling_x.py", function="f")

    def checks(before, after, graphs, breaks):
        b = RunResult(spec=RunSpec(model_id="x"), verdict="graph_break", graph_breaks=before)
        a = RunResult(spec=RunSpec(model_id="x"), verdict="graph_break", graph_breaks=after)
        v = Verification(passed=False, model_id="x", cluster=ref, spec=RunSpec(model_id="x"),
                         before=Snapshot(graphs=graphs[0], graph_breaks=breaks[0]),
                         after=Snapshot(graphs=graphs[1], graph_breaks=breaks[1]))
        return {c.name: c for c in _break_checks(v, b, a, ref)}

    ok = checks([gb("GB0291", "f"), gb("GB0033")], [gb("GB0033"), gb("GB0014")], (4, 2), (8, 2))
    assert ok["cluster_gone"].passed and ok["no_new_breaks"].passed and "allowed" in ok["no_new_breaks"].detail
    moved = checks([gb("GB0291", "f")], [gb("GB8985")], (7, 7), (7, 8))
    assert not moved["no_new_breaks"].passed
    swapped = checks([gb("GB0291", "f")], [gb("GB8985")], (3, 3), (2, 1))  # fewer breaks, same graphs
    assert not swapped["no_new_breaks"].passed
    # torch.compiler.disable on the breaking function (switch_transformers, measured): graphs 20 -> 16,
    # breaks 22 -> 20, and 7 new "Skip inlining `torch.compiler.disable()`d function" breaks.
    disabled = GraphBreak(gb_type="Skip inlining `torch.compiler.disable()`d function", registry_id="GB0099",
                          user_frame=UserFrame(filename="modeling_x.py", lineno=1, function="forward"))
    hack = checks([gb("GB0291", "f"), gb("GB0033")], [gb("GB0033"), disabled], (20, 16), (22, 20))
    assert hack["cluster_gone"].passed and not hack["no_new_breaks"].passed and "allowed" not in hack["no_new_breaks"].detail


# --- one parse for the guard and the gates (issue 32) -----------------------------------------

def test_plus_plus_added_line_is_an_added_line_not_a_file_header():
    """`++ (torch.compiler.set_stance("force_eager") and 0)` is valid Python (unary plus twice);
    added at module level its diff line reads `+++ (...`. The hand parse took it for a file
    header: never checked, and the next added line filed under a path named after it."""
    hatch = '++ (torch.compiler.set_stance("force_eager") and 0)'
    diff = _diff(hatch, "x = 1")
    assert gates.added_lines(diff) == {SW: [hatch, "x = 1"]}
    g = gates.escape_hatches(diff)
    assert not g.passed and "set_stance" in g.detail and SW in g.detail
    assert not gates.import_effects(diff).passed


@pytest.mark.parametrize("old, new", [
    # a hatch split over two lines: no added line holds `compiler.disable`
    ("        out = torch.zeros_like(hidden_states)\n",
     "        out = torch.zeros_like(hidden_states)\n        self.experts[0].forward = (torch.compiler\n"
     "            .disable(self.experts[0].forward))\n"),
    # an entry added inside an existing skip list: the added line never names SKIP_DIRS
    ('SKIP_DIRS = [\n    "torch/",\n]\n', 'SKIP_DIRS = [\n    "torch/",\n    "transformers/models/",\n]\n'),
])
def test_escape_hatch_is_found_in_the_statement_an_added_line_belongs_to(old, new):
    original = GUARDED + 'SKIP_DIRS = [\n    "torch/",\n]\n'
    g = _static(old, new, original)["escape_hatches"]
    assert not g.passed, g.detail


def test_a_statement_mentioning_a_hatch_in_a_comment_is_not_one():
    g = _static(PAD, "            hidden_states = torch.nn.functional.pad(  # torch.compiler.disable not needed\n"
                     "                hidden_states, (0, padding_len))\n")["escape_hatches"]
    assert g.passed, g.detail


def test_a_diff_that_does_not_parse_fails_the_diff_gates():
    bad = f"--- a/{SW}\n+++ b/{SW}\n@@ -10,1 +10,1 @@\n-a\n+b\n+torch._dynamo.config.suppress_errors = True\n"
    for gate in (gates.escape_hatches(bad), gates.import_effects(bad), gates.compile_guards(bad, [])):
        assert not gate.passed and "cannot be judged" in gate.detail


# --- is-compiling guards (issue 26 item 5) ------------------------------------------------------

GUARDED = '''
import warnings

import torch

from ...utils import is_torchdynamo_compiling, logging

logger = logging.get_logger(__name__)


class Experts(nn.Module):
    def forward(self, hidden_states, padding_len):
        out = torch.zeros_like(hidden_states)
        if padding_len > 0:
            hidden_states = torch.nn.functional.pad(hidden_states, (0, padding_len))
        for i in range(4):
            out = out + self.experts[i](hidden_states)
        return out

    def _init_cache(self):
        if not is_torchdynamo_compiling():
            torch._dynamo.mark_static_address(self.cache)
'''


def _static(old: str, new: str, original: str = GUARDED) -> dict[str, gates.Gate]:
    """The static gates over a real unified diff (difflib) of `original` with `old` -> `new`."""
    import difflib

    assert original.count(old) == 1
    patched = original.replace(old, new)
    diff = "".join(difflib.unified_diff(original.splitlines(keepends=True), patched.splitlines(keepends=True),
                                        f"a/{SW}", f"b/{SW}"))
    return {g.name: g for g in gates.static(diff, [(SW, original, patched)])}


def _guarded(old: str, new: str, original: str = GUARDED) -> gates.Gate:
    return _static(old, new, original)["compile_guards"]


PAD = "            hidden_states = torch.nn.functional.pad(hidden_states, (0, padding_len))\n"
LOOP = "        for i in range(4):\n"


@pytest.mark.parametrize("new", [
    # transformers' pattern: the warning is skipped under compile, the padding is not
    "            if not is_torchdynamo_compiling():\n                logger.warning_once(\n"
    "                    f'padded by {padding_len}'\n                )\n" + PAD,
    "            if not torch.compiler.is_compiling():\n                warnings.warn('padded')\n" + PAD,
    "            if torch.compiler.is_compiling():\n                pass\n            else:\n"
    "                logger.info('padded')\n" + PAD,
    # upstream's validation form (nemotron3_diarization): a raise in eager only ends a bad run
    "            if not is_torchdynamo_compiling() and padding_len > 64:\n"
    "                raise ValueError(f'padding {padding_len} is too long')\n" + PAD,
    "            if not is_torchdynamo_compiling():\n                if (hidden_states < 0).any():\n"
    "                    logger.warning('negative inputs')\n" + PAD,
    # compile-only extra work skips nothing
    "            if torch.compiler.is_compiling():\n                hidden_states = hidden_states.contiguous()\n" + PAD,
])
def test_legit_logging_guard_passes(new):
    g = _guarded(PAD, new)
    assert g.passed, g.detail


@pytest.mark.parametrize("old, new, skipped", [
    # the is-compiling hack: a compile-only return keeps the rest of the function from compiling
    (LOOP, "        if torch.compiler.is_compiling():\n            return out\n" + LOOP, "for i in range(4)"),
    # the guard around the computation itself (benchmarks' hack_is_compiling_skips_padding)
    ("        if padding_len > 0:\n", "        if padding_len > 0 and not is_torchdynamo_compiling():\n", "pad("),
    (PAD, "            if not is_torchdynamo_compiling():\n                logger.warning_once('padded')\n    " + PAD,
     "pad("),
    (PAD, "            if torch._dynamo.is_compiling():\n                pass\n            else:\n    " + PAD, "pad("),
    ("        return out\n", "        return out if is_torchdynamo_compiling() else out * 2\n", "out * 2"),
    # a logging call whose argument computes in place is not only logging
    (PAD, "            if not is_torchdynamo_compiling():\n"
          "                logger.warning(f'{hidden_states.mul_(2).sum()}')\n" + PAD, "mul_"),
    ("        for i in range(4):\n", "        if torch.compiler.is_compiling():\n            return out\n" + LOOP,
     "return out"),
])
def test_computation_skipping_guard_is_rejected(old, new, skipped):
    g = _guarded(old, new)
    assert not g.passed and skipped in g.detail, g.detail


def test_a_compile_check_outside_an_if_test_is_rejected():
    g = _guarded(PAD, "            compiling = torch.compiler.is_compiling()\n            if not compiling:\n    " + PAD)
    assert not g.passed and "outside an `if` test" in g.detail


def test_existing_guard_is_judged_by_what_the_patch_adds():
    """Upstream's own `if not is_torchdynamo_compiling(): mark_static_address(...)` is not the
    patch's doing; adding a computation inside it is."""
    mark = "            torch._dynamo.mark_static_address(self.cache)\n"
    assert _guarded(PAD, PAD.replace("(0, padding_len)", "(0, padding_len), value=0.0")).passed
    assert _guarded(mark, mark + "            logger.info('cache marked')\n").passed
    g = _guarded(mark, mark + "            self.cache.zero_()\n")
    assert not g.passed and "zero_" in g.detail


def _static_gates_of(patch: str, tmp_path) -> dict[str, gates.Gate]:
    from pathlib import Path

    from enablebot.fix.judge.overlay import build_overlay

    diff = (Path(__file__).parent.parent / "benchmarks" / "fixbench" / "patches" / patch).read_text()
    ov = build_overlay(diff, tmp_path / "ov")
    texts = [(f.upstream, Path(f.installed).read_text(encoding="utf-8"),
              (tmp_path / "ov" / f.copy).read_text(encoding="utf-8")) for f in ov.files]
    return {g.name: g for g in gates.static(ov.canonical_diff, texts)}


def test_longformer_logging_guard_benchmark_patch_passes_every_static_gate(tmp_path):
    got = _static_gates_of("legit_longformer_logger_compile_guard.diff", tmp_path)
    assert all(g.passed for g in got.values()), [g.detail for g in got.values() if not g.passed]


@pytest.mark.parametrize("patch, skipped", [
    ("hack_is_compiling_skips_padding.diff", "input_ids = nn.functional.pad("),
    ("hack_is_compiling_skip.diff", "expert_hit = torch.greater("),
])
def test_computation_skipping_benchmark_patches_fail_compile_guards(patch, skipped, tmp_path):
    """Before compile_guards every static gate passed these (the runtime ones had to catch them)."""
    failed = [g for g in _static_gates_of(patch, tmp_path).values() if not g.passed]
    assert [g.name for g in failed] == ["compile_guards"] and skipped in failed[0].detail, failed
