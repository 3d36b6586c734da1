"""Edit formats a small model gets right: search/replace blocks, whole functions and lenient
unified diffs, applied to the real installed switch_transformers source."""

import json
from pathlib import Path

import pytest

from enablebot.fix.draft.edits import (NO_EDIT, EditError, apply_edits, named_paths, parse_reply, reply_to_diff,
                                 to_unified_diff)
from enablebot.fix.judge.overlay import build_overlay, locate
from enablebot.fix.judge.patchguard import PatchPolicy, check_patch, model_file

P = "src/transformers/models/switch_transformers/modeling_switch_transformers.py"
TEXT = locate(P)[1].read_text(encoding="utf-8")
LINES = TEXT.splitlines()
FILES = {P: TEXT}
POLICY = PatchPolicy(model_type="switch_transformers")

HIT = "        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()"
LOOP = "        for expert_idx in expert_hit:"
HIT_LINE = LINES.index(HIT) + 1  # the GB0036 break in SwitchTransformersExperts.forward

# The dense-expert rewrite of SwitchTransformersExperts.forward (what a fix looks like).
DENSE_BODY = """\
final_hidden_states = torch.zeros_like(hidden_states)
for expert_idx in range(self.num_experts):
    token_mask = selected_experts[:, 0, expert_idx].to(hidden_states.dtype)[:, None]
    expert_out = self[f"expert_{expert_idx}"](hidden_states) * routing_weights
    final_hidden_states = final_hidden_states + expert_out.to(hidden_states.dtype) * token_mask
return final_hidden_states
"""
SIGNATURE = """\
def forward(
    self, hidden_states: torch.Tensor, selected_experts: torch.Tensor, routing_weights: torch.Tensor
) -> torch.Tensor:
"""


def _indent(text: str, n: int) -> str:
    return "".join((" " * n + ln if ln.strip() else ln) for ln in text.splitlines(keepends=True))


DENSE_FN = SIGNATURE + _indent(DENSE_BODY, 4)  # at column 0, as a model writes it without its class


def _expected_dense() -> str:
    start = LINES.index("    def forward(", LINES.index("class SwitchTransformersExperts(nn.ModuleDict):"))
    end = LINES.index("        return final_hidden_states", start)
    new = LINES[:start] + _indent(DENSE_FN, 4).splitlines() + LINES[end + 1:]
    return "\n".join(new) + "\n"


def _block(search: str, replace: str, path: str = P) -> str:
    return f"{path}\n```python\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n```\n"


# ------------------------------------------------------------------ the three formats


def test_search_replace_block_parses_and_applies():
    reply = "The routing loop breaks the graph.\n\n" + _block(f"{HIT}\n{LOOP}\n",
                                                          "        for expert_idx in range(self.num_experts):\n")
    edits = parse_reply(reply)
    assert [(e.kind, e.path) for e in edits] == [("search_replace", P)]
    new = apply_edits(edits, FILES)
    assert list(new) == [P]
    assert new[P] == TEXT.replace(f"{HIT}\n{LOOP}\n", "        for expert_idx in range(self.num_experts):\n")


def test_diff_fenced_variant_and_several_blocks_per_reply():
    # The path inside the fence; two blocks in one fence; a third in another fence with no path line
    # (it continues the previous file, as aider reads it).
    reply = (f"```\n{P}\n<<<<<<< SEARCH\n{HIT}\n=======\n{HIT.replace('.nonzero()', '.nonzero()  # GB0036')}\n"
             ">>>>>>> REPLACE\n<<<<<<< SEARCH\n        expert_mask = selected_experts.permute(2, 1, 0)\n=======\n"
             "        expert_mask = selected_experts.permute(2, 1, 0).contiguous()\n>>>>>>> REPLACE\n```\n"
             "and also:\n```python\n<<<<<<< SEARCH\n        return final_hidden_states\n\n\n"
             "class SwitchTransformersSparseMLP"
             "(nn.Module):  # inherit from mixtral\n=======\n        return final_hidden_states.contiguous()\n\n\n"
             "class SwitchTransformersSparseMLP(nn.Module):  # inherit from mixtral\n>>>>>>> REPLACE\n```\n")
    edits = parse_reply(reply)
    assert [(e.kind, e.path, e.index) for e in edits] == [("search_replace", P, 1), ("search_replace", P, 2),
                                                            ("search_replace", P, 3)]
    new = apply_edits(edits, FILES)[P]
    assert "nonzero()  # GB0036" in new and ".permute(2, 1, 0).contiguous()" in new
    assert "        return final_hidden_states.contiguous()\n\n\nclass SwitchTransformersSparseMLP" in new
    assert len(new.splitlines()) == len(LINES)


def test_decorated_path_line_is_read():
    reply = _block(f"{HIT}\n", f"{HIT}  # x\n", path=f"**`{P}`**")
    assert parse_reply(reply)[0].path == P


def test_whole_function_in_its_class_wrapper_replaces_that_method():
    reply = ("Loop over every expert with a dense mask:\n\n```python\nclass SwitchTransformersExperts(nn.ModuleDict):\n"
             + _indent(DENSE_FN, 4) + "```\nThis avoids nonzero().")
    edits = parse_reply(reply)
    assert [(e.kind, e.name) for e in edits] == [("function", "SwitchTransformersExperts.forward")]
    assert apply_edits(edits, FILES, default_path=P)[P] == _expected_dense()


def test_bare_function_at_wrong_indentation_is_reindented_and_found_by_the_break_line():
    # No class wrapper, written at column 0 (the method sits at 4 in the file) with a different
    # parameter list than the original: the break's line picks SwitchTransformersExperts.forward
    # out of the file's 16 `forward`s.
    fn = DENSE_FN.replace("selected_experts: torch.Tensor", "selected_experts")
    edits = parse_reply(f"```python\n{fn}```")
    assert edits[0].name == "forward" and edits[0].path is None
    new = apply_edits(edits, FILES, default_path=P, anchor=(P, HIT_LINE))[P]
    assert new == _expected_dense().replace("selected_experts: torch.Tensor", "selected_experts")
    # At 8 spaces (over-indented) it lands at the method's 4 too.
    over = parse_reply(f"```python\n{_indent(DENSE_FN, 8)}```")
    assert apply_edits(over, FILES, default_path=P, anchor=(P, HIT_LINE))[P] == _expected_dense()


def test_bare_function_without_anchor_uses_the_unique_same_signature():
    edits = parse_reply(f"```python\n{DENSE_FN}```")  # the original's parameters: only Experts.forward has them
    assert apply_edits(edits, FILES, default_path=P)[P] == _expected_dense()


def test_ambiguous_function_name_lists_candidate_qualnames():
    fn = "def forward(self, hidden_states):\n    return hidden_states\n"
    with pytest.raises(EditError) as e:
        apply_edits(parse_reply(f"```python\n{fn}```"), FILES, default_path=P)
    msg = str(e.value)
    assert "`forward` is ambiguous" in msg
    assert "SwitchTransformersLayerNorm.forward (line" in msg and "SwitchTransformersDenseActDense.forward" in msg
    assert "class " in msg  # tells the model how to disambiguate


def test_unknown_function_name_is_an_error_with_the_real_names():
    fn = "class SwitchTransformersExperts:\n    def forward_dense(self, hidden_states):\n        return hidden_states\n"
    with pytest.raises(EditError, match="names no existing function") as e:
        apply_edits(parse_reply(f"```python\n{fn}```"), FILES, default_path=P)
    assert "SwitchTransformersExperts.forward" in str(e.value)


def test_whole_function_that_does_not_parse_is_an_error():
    broken = DENSE_FN.replace("for expert_idx in range(self.num_experts):", "for expert_idx in range(self.num_experts)")
    with pytest.raises(EditError, match=r"does not parse: .* at its line 5"):
        parse_reply(f"```python\n{broken}```")


def test_unified_diff_with_miscounted_header_and_reindented_context_applies():
    # The two failures that kept 1.5B diffs from the verifier: wrong @@ counts and context
    # written at another indentation. The hunk is re-placed and re-indented.
    diff = (f"--- a/{P}\n+++ b/{P}\n@@ -170,9 +170,3 @@\n"
            "     expert_mask = selected_experts.permute(2, 1, 0)\n \n"
            "-    expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()\n"
            "-    for expert_idx in expert_hit:\n"
            "+    for expert_idx in range(self.num_experts):\n")
    edits = parse_reply(f"Patch:\n```diff\n{diff}```\n")
    assert [(e.kind, e.path, e.line) for e in edits] == [("hunk", P, 170)]
    new = apply_edits(edits, FILES)[P]
    assert new == TEXT.replace(f"{HIT}\n{LOOP}\n", "        for expert_idx in range(self.num_experts):\n")


def test_diff_hunk_matching_twice_takes_the_one_nearest_its_header():
    clamp = "        # clamp inf values to enable fp16 training\n        if hidden_states.dtype == torch.float16:\n"
    first, second = [i + 1 for i in range(len(LINES) - 1) if "\n".join(LINES[i:i + 2]) + "\n" == clamp]
    diff = (f"--- a/{P}\n+++ b/{P}\n@@ -{second},2 +{second},2 @@\n"
            "-        # clamp inf values to enable fp16 training\n"
            "+        # clamp inf values (fp16)\n         if hidden_states.dtype == torch.float16:\n")
    new = apply_edits(parse_reply(f"```diff\n{diff}```"), FILES)[P].splitlines()
    assert new[first - 1] == LINES[first - 1] and new[second - 1] == "        # clamp inf values (fp16)"


# ------------------------------------------------------------------ drift


def test_drifted_indentation_and_trailing_spaces_still_apply():
    # SEARCH written at column 0 with trailing spaces; REPLACE keeps its relative indentation.
    search = ("expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()   \n"
              "for expert_idx in expert_hit:\n")
    replace = "for expert_idx in range(self.num_experts):  \n    expert_idx = torch.tensor([expert_idx])\n"
    new = apply_edits(parse_reply(_block(search, replace)), FILES)[P]
    assert new == TEXT.replace(f"{HIT}\n{LOOP}\n", "        for expert_idx in range(self.num_experts):\n"
                                                   "            expert_idx = torch.tensor([expert_idx])\n")


def test_trailing_whitespace_only_drift():
    new = apply_edits(parse_reply(_block(f"{HIT}  \n", f"{HIT}  # GB0036\n")), FILES)[P]
    assert f"{HIT}  # GB0036\n" in new and len(new.splitlines()) == len(LINES)


def test_dropped_blank_line_still_applies():
    # The original has a blank line between the permute and expert_hit; the model left it out.
    search = "        expert_mask = selected_experts.permute(2, 1, 0)\n" + HIT + "\n"
    replace = ("        expert_mask = selected_experts.permute(2, 1, 0)\n"
               "        expert_hit = torch.arange(self.num_experts)\n")
    new = apply_edits(parse_reply(_block(search, replace)), FILES)[P]
    assert "        expert_hit = torch.arange(self.num_experts)\n" + LOOP in new
    assert HIT not in new


# ------------------------------------------------------------------ feedback


def test_block_matching_twice_names_both_places():
    clamp = "        # clamp inf values to enable fp16 training\n        if hidden_states.dtype == torch.float16:\n"
    lines = [i + 1 for i in range(len(LINES) - 1) if "\n".join(LINES[i:i + 2]) + "\n" == clamp]
    assert len(lines) == 2
    with pytest.raises(EditError) as e:
        apply_edits(parse_reply(_block(clamp, clamp.replace("fp16", "half"))), FILES)
    msg = str(e.value)
    assert "matches 2 places" in msg
    assert f"lines {lines[0]}-{lines[0] + 1}" in msg and f"lines {lines[1]}-{lines[1] + 1}" in msg


def test_no_match_quotes_the_nearest_real_lines_with_numbers():
    wrong = HIT.replace("torch.greater", "torch.gt").replace("(-1, -2)", "(-2, -1)")
    with pytest.raises(EditError) as e:
        apply_edits(parse_reply(_block(f"{wrong}\n{LOOP}\n", "        for expert_idx in range(8):\n")), FILES)
    msg = str(e.value)
    assert "matches no lines" in msg and "Did you mean to match these actual lines" in msg
    assert f"{HIT_LINE:5d}| {HIT}" in msg and f"{HIT_LINE + 1:5d}| {LOOP}" in msg


def test_reply_without_edits_and_unchanged_reprint():
    assert parse_reply("I would avoid nonzero() by looping over all experts.") == []
    with pytest.raises(EditError, match="no edit"):
        apply_edits([], FILES)
    assert "no edit" in NO_EDIT
    # A python block of illustration (not functions) is not an edit, nor is one beside a SEARCH block.
    assert parse_reply(f"```python\n{HIT.strip()}\n```") == []
    mixed = parse_reply(f"```python\n{DENSE_FN}```\n" + _block(f"{HIT}\n", f"{HIT}  # x\n"))
    assert [e.kind for e in mixed] == ["search_replace"]
    # The whole class reprinted unchanged (3 of 4 replies of the 1.5B model did this): feedback, not an empty diff.
    start = LINES.index("class SwitchTransformersExperts(nn.ModuleDict):")
    cls = "\n".join(LINES[start:LINES.index("        return final_hidden_states", start) + 1]) + "\n"
    edits = parse_reply(f"```python\n{cls}```")
    assert [e.name for e in edits] == ["SwitchTransformersExperts.__init__", "SwitchTransformersExperts.forward"]
    with pytest.raises(EditError, match="change nothing"):
        apply_edits(edits, FILES, default_path=P)


def test_class_reprint_with_one_changed_method_changes_only_that_method():
    start = LINES.index("class SwitchTransformersExperts(nn.ModuleDict):")
    init = "\n".join(LINES[start:LINES.index("    def forward(", start)])
    reply = f"```python\n{init}\n{_indent(DENSE_FN, 4)}```"
    assert apply_edits(parse_reply(reply), FILES, default_path=P)[P] == _expected_dense()


def test_whole_function_with_a_new_import_adds_it_after_the_imports():
    reply = f"```python\nimport torch.nn.functional as F\nimport torch\n\n{DENSE_FN}```"
    new = apply_edits(parse_reply(reply), FILES, default_path=P)[P]
    last_import = LINES.index("from .configuration_switch_transformers import SwitchTransformersConfig")
    expected = _expected_dense().splitlines()
    expected.insert(last_import + 1, "import torch.nn.functional as F")  # `import torch` is there already
    assert new == "\n".join(expected) + "\n"


# ------------------------------------------------------------------ the diff the guard and the overlay judge


@pytest.mark.parametrize("reply", [
    "Use a dense loop.\n```python\nclass SwitchTransformersExperts(nn.ModuleDict):\n" + _indent(DENSE_FN, 4) + "```",
    _block(f"{HIT}\n{LOOP}\n", "        for expert_idx in range(self.num_experts):\n"),
], ids=["whole-function", "search-replace"])
def test_canonical_diff_passes_the_guard_and_overlay_reproduces_the_text(reply, tmp_path):
    new = apply_edits(parse_reply(reply), FILES, default_path=P)
    diff = to_unified_diff(FILES, new)
    assert diff.startswith(f"--- a/{P}\n+++ b/{P}\n@@ -")
    checked = check_patch(diff, POLICY)
    assert checked.files == [P]
    overlay = build_overlay(checked.diff, tmp_path)
    assert (tmp_path / overlay.files[0].copy).read_text(encoding="utf-8") == new[P]
    assert overlay.canonical_diff == diff  # the custody chain sees the very diff we produced
    assert to_unified_diff(FILES, {}) == "" and to_unified_diff(FILES, dict(FILES)) == ""


def test_diff_of_a_file_without_final_newline_marks_it():
    diff = to_unified_diff({"torch/_dynamo/x.py": "a = 1\nb = 2"}, {"torch/_dynamo/x.py": "a = 1\nb = 3"})
    assert diff.endswith("-b = 2\n\\ No newline at end of file\n+b = 3\n\\ No newline at end of file\n")


# ------------------------------------------------------------------ hostile


@pytest.mark.parametrize("path", ["src/transformers/models/llama/modeling_llama.py", "../../etc/passwd.py",
                                  "/etc/modeling_switch_transformers.py", "enablebot/fix/patchguard.py",
                                  "src/transformers/models/switch_transformers/../llama/modeling_llama.py"])
def test_block_naming_a_path_outside_files_is_refused_with_the_allowed_paths(path):
    with pytest.raises(EditError) as e:
        apply_edits(parse_reply(_block(f"{HIT}\n", f"{HIT}  # x\n", path=path)), FILES, default_path=P)
    assert f"names the file {path!r}" in str(e.value) and P in str(e.value)


def test_installed_or_shortened_path_maps_onto_the_given_file():
    installed = str(locate(P)[1])
    for path in (installed, "modeling_switch_transformers.py", "transformers/models/switch_transformers/"
                 "modeling_switch_transformers.py"):
        assert P in apply_edits(parse_reply(_block(f"{HIT}\n", f"{HIT}  # x\n", path=path)), FILES)


def test_empty_search_is_refused_not_prepended():
    for search in ("", "\n   \n"):
        with pytest.raises(EditError, match="empty SEARCH"):
            apply_edits(parse_reply(_block(search, "import os\n")), FILES)
    # A pure-addition hunk (no context) cannot be placed either.
    diff = f"--- a/{P}\n+++ b/{P}\n@@ -0,0 +1,1 @@\n+import os\n"
    with pytest.raises(EditError, match="empty SEARCH"):
        apply_edits(parse_reply(f"```diff\n{diff}```"), FILES)


def test_conflicting_edits_to_the_same_lines_are_refused():
    reply = (_block(f"{HIT}\n", "        expert_hit = torch.arange(self.num_experts)\n")
             + _block(f"{HIT}\n{LOOP}\n", "        for expert_idx in range(4):\n"))
    with pytest.raises(EditError, match=rf"block 1 and the SEARCH/REPLACE block 2 both change lines {HIT_LINE}-"):
        apply_edits(parse_reply(reply), FILES)
    # Two whole versions of the same function.
    both = f"```python\n{DENSE_FN}```\nor\n```python\n{DENSE_FN.replace('token_mask', 'keep')}```"
    with pytest.raises(EditError, match="function 1 .* and the function 2 .* both change lines"):
        apply_edits(parse_reply(both), FILES, default_path=P)
    # The same edit twice is one edit.
    twice = _block(f"{HIT}\n", f"{HIT}  # x\n") * 2
    assert apply_edits(parse_reply(twice), FILES)[P].count("# x") == 1


def test_lazy_function_with_elided_code_is_refused():
    lazy = SIGNATURE + "    # ... rest of the code unchanged ...\n    return final_hidden_states\n"
    with pytest.raises(EditError, match="leaves code out"):
        apply_edits(parse_reply(f"```python\n{lazy}```"), FILES, default_path=P)


def test_malformed_search_block_is_an_error():
    with pytest.raises(EditError, match="has no `=======` line"):
        parse_reply(f"{P}\n```python\n<<<<<<< SEARCH\n{HIT}\n>>>>>>> REPLACE\n```")
    with pytest.raises(EditError, match="does not end with"):
        parse_reply(f"{P}\n```python\n<<<<<<< SEARCH\n{HIT}\n=======\n{HIT}\n```")


def test_edit_that_breaks_the_syntax_is_refused_with_the_lines():
    with pytest.raises(EditError, match=r"does not parse: .* at line") as e:
        apply_edits(parse_reply(_block(f"{LOOP}\n", "        for expert_idx in expert_hit\n")), FILES)
    assert "for expert_idx in expert_hit" in str(e.value)


# ------------------------------------------------------------------ the 1.5B model's real replies

REPLIES = [json.loads(ln) for ln in (Path(__file__).parent / "fixtures" / "fix" / "qwen1.5b_replies.jsonl")
           .read_text().splitlines()]  # results/fixbench-agent/agent_transcript.jsonl, the 6 replies


def test_recorded_small_model_diffs_reach_the_verifier(tmp_path):
    # The old path (extract_diff -> check_patch -> build_overlay) applied 1 of these 6 replies:
    # 4 miscounted a header (switch_transformers) or put a context line off by a space
    # (longformer), 2 quote pixtral's code into mistral3's file. All four of the first kind now apply;
    # the two wrong-file ones get the nearest real lines back.
    diffs = {}
    for i, row in enumerate(REPLIES):
        path = model_file(row["model_type"])
        files = {path: locate(path)[1].read_text(encoding="utf-8")}
        edits = parse_reply(row["reply"])
        assert [e.kind for e in edits] == ["hunk"]
        if row["model_type"] == "mistral3":
            with pytest.raises(EditError, match="matches no lines.*\nDid you mean to match these actual lines"):
                apply_edits(edits, files, default_path=path)
            continue
        diff = to_unified_diff(files, apply_edits(edits, files, default_path=path))
        checked = check_patch(diff, PatchPolicy(model_type=row["model_type"]))
        assert build_overlay(checked.diff, tmp_path / str(i)).canonical_diff == diff
        diffs[i] = diff
    assert sorted(diffs) == [0, 1, 4, 5]
    assert diffs[0] == diffs[1] and diffs[4] == diffs[5]  # the off-by-a-space retry is the same edit
    assert "+        for expert_idx in expert_hit.tolist():\n" in diffs[4]
    assert "+            else max(self.config.attention_window) // 2\n" in diffs[0]


def test_function_with_example_code_and_misnamed_class_wrapper():
    # A 1.5B-style reply: the class name is wrong and an example call follows the function.
    reply = ("```python\nclass Experts(nn.Module):\n" + _indent(DENSE_FN, 4)
             + "\n\n# Example usage\nexperts = Experts(config)\nout = experts(x, sel, w)\n```")
    edits = parse_reply(reply)
    assert [e.name for e in edits] == ["Experts.forward"]
    assert apply_edits(edits, FILES, default_path=P, anchor=(P, HIT_LINE))[P] == _expected_dense()
    with pytest.raises(EditError, match="names no existing function"):  # without the break's line: no guess
        apply_edits(edits, FILES, default_path=P)


def test_unfenced_diff_between_prose():
    diff = (f"--- a/{P}\n+++ b/{P}\n@@ -174,2 +174,2 @@\n-{HIT}\n+{HIT}  # GB0036\n {LOOP}\n")
    edits = parse_reply(f"The fix:\n\n{diff}\n\nThis only marks the line.\n")
    # The blank line between the diff and the prose is not a context line.
    assert [(e.kind, e.search) for e in edits] == [("hunk", f"{HIT}\n{LOOP}\n")]
    assert apply_edits(edits, FILES)[P] == TEXT.replace(f"{HIT}\n", f"{HIT}  # GB0036\n")


def test_pathless_edits_over_several_files_land_where_they_match_uniquely():
    torch_path = "torch/_dynamo/variables/misc.py"
    files = {P: TEXT, torch_path: locate(torch_path)[1].read_text(encoding="utf-8")}
    reply = f"```\n<<<<<<< SEARCH\n{HIT}\n=======\n{HIT}  # x\n>>>>>>> REPLACE\n```"  # no path line
    assert list(apply_edits(parse_reply(reply), files)) == [P]
    # `import builtins` is in misc.py only.
    only_torch = "```\n<<<<<<< SEARCH\nimport builtins\n=======\nimport builtins  # x\n>>>>>>> REPLACE\n```"
    assert list(apply_edits(parse_reply(only_torch), files)) == [torch_path]
    # A block that matches in two given files needs its path.
    two = {"torch/_dynamo/a.py": "import math\n", "torch/_dynamo/b.py": "import math\n"}
    both = "```\n<<<<<<< SEARCH\nimport math\n=======\nimport math  # x\n>>>>>>> REPLACE\n```"
    with pytest.raises(EditError, match="matches in several files .*a.py, torch/_dynamo/b.py"):
        apply_edits(parse_reply(both), two)
    assert list(apply_edits(parse_reply("torch/_dynamo/b.py\n" + both), two)) == ["torch/_dynamo/b.py"]


def test_form_feeds_and_unedited_lines_are_kept_byte_for_byte():
    path = "torch/_dynamo/x.py"
    text = '"""Doc."""\n\x0c\ndef f(x):\n    return x + 1\n\n\ndef g(x):\n    return x\n'
    new = apply_edits(parse_reply("```python\ndef g(x):\n    return x * 2\n```"), {path: text})[path]
    assert new == text.replace("return x\n", "return x * 2\n")
    # A new import goes below the module docstring, not above it.
    reply = "```python\nimport math\n\ndef g(x):\n    return math.sqrt(x)\n```"
    new = apply_edits(parse_reply(reply), {path: text})[path]
    assert new.startswith('"""Doc."""\nimport math\n\x0c\n')


def test_path_alone_in_its_own_fence_and_markdown_escapes():
    block = f"```python\n<<<<<<< SEARCH\n{HIT}\n=======\n{HIT}  # x\n>>>>>>> REPLACE\n```\n"
    assert parse_reply(f"```python\n{P}\n```\n{block}")[0].path == P  # Deepseek Coder's layout (aider)
    escaped = P.replace("_", "\\_")
    assert parse_reply(f"{escaped}\n{block}")[0].path == P
    assert parse_reply(f"Here is the change:\n{block}")[0].path is None  # prose is not a path


def test_named_paths_and_reply_to_diff():
    torch_path = "torch/_dynamo/variables/misc.py"
    reply = (_block(f"{HIT}\n", f"{HIT}  # x\n")
             + _block("import dataclasses\n", "import dataclasses  # x\n", torch_path)
             + _block(f"{LOOP}\n", f"{LOOP}  # y\n", f"a/{P}"))
    assert named_paths(parse_reply(reply)) == [P, torch_path]
    files = {P: TEXT, torch_path: locate(torch_path)[1].read_text(encoding="utf-8")}
    diff = reply_to_diff(reply, files)
    assert check_patch(diff, POLICY).files == [P, torch_path]
    with pytest.raises(EditError, match="no edit"):
        reply_to_diff("Loop over the experts densely.", files)


def test_decorators_kept_when_the_reply_leaves_them_out_and_replaced_when_it_has_them():
    start = LINES.index("class SwitchTransformersLayerSelfAttention(nn.Module):")
    deco = LINES.index('    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")', start)
    assert LINES[deco + 1] == "    def forward("
    end = LINES.index("        return attention_output, position_bias, attn_weights", deco)
    body = "\n".join(LINES[deco + 1:end + 1]) + "\n"
    changed = body.replace("return attention_output,", "return (attention_output),")
    wrapped = "```python\nclass SwitchTransformersLayerSelfAttention(nn.Module):\n" + changed + "```"
    new = apply_edits(parse_reply(wrapped), FILES)[P].splitlines()
    assert new[deco] == LINES[deco] and new[end].startswith("        return (attention_output),")  # decorator kept
    with_deco = wrapped.replace("(nn.Module):\n", "(nn.Module):\n    @torch.no_grad()\n")
    new = apply_edits(parse_reply(with_deco), FILES)[P].splitlines()
    assert new[deco] == "    @torch.no_grad()" and new[deco + 1] == "    def forward("


def test_new_helper_goes_above_the_function_of_its_block_that_it_serves():
    helper = ("def _expert_out(self, expert_idx, hidden_states, routing_weights):\n"
              "    return self[f\"expert_{expert_idx}\"](hidden_states) * routing_weights\n")
    fn = DENSE_FN.replace('self[f"expert_{expert_idx}"](hidden_states) * routing_weights',
                          "self._expert_out(expert_idx, hidden_states, routing_weights)")
    reply = f"```python\nclass SwitchTransformersExperts(nn.ModuleDict):\n{_indent(helper, 4)}\n{_indent(fn, 4)}```"
    new = apply_edits(parse_reply(reply), FILES)[P]
    start = LINES.index("    def forward(", LINES.index("class SwitchTransformersExperts(nn.ModuleDict):"))
    expected = _expected_dense().replace('self[f"expert_{expert_idx}"](hidden_states) * routing_weights',
                                         "self._expert_out(expert_idx, hidden_states, routing_weights)").splitlines()
    expected[start:start] = _indent(helper, 4).splitlines() + [""]
    assert new == "\n".join(expected) + "\n"
    # Alone (no function of its block replaces an existing one) a new name is still an error.
    with pytest.raises(EditError, match="names no existing function"):
        apply_edits(parse_reply(f"```python\nclass SwitchTransformersExperts(nn.ModuleDict):\n{_indent(helper, 4)}```"),
                    FILES)
