"""Markdown for the bot's pull requests and its dashboard issue: pure functions of data.

Both documents start with a hidden HTML comment carrying JSON, so the bot can recognise
its own PRs (fix key, patch digest, verification state) and the dashboard when it reads
them back. Text that may come from an LLM or the Hub is untrusted: it is defanged so it
cannot mention people or link and close issues, and table cells are escaped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..fix.bundle import FixBundle, Snapshot
from ..verdict import Verdict

GITHUB_BODY_LIMIT = 65536  # characters GitHub accepts in an issue or PR body
_BODY_BUDGET = 60000  # leave room for the metadata comment and the footer

PR_META = "enablebot:pr"
DASHBOARD_META = "enablebot:dashboard"
_META_RE = re.compile(r"<!--\s*(enablebot:[a-z]+)\s+(\{.*?\})\s*-->", re.S)


# ---- hidden metadata -------------------------------------------------------------------
def meta_comment(kind: str, data: dict[str, Any]) -> str:
    # "<" and ">" are escaped so the JSON can never close the comment early.
    text = json.dumps(data, sort_keys=True).replace("<", "\\u003c").replace(">", "\\u003e")
    return f"<!-- {kind} {text} -->"


def read_meta(body: str | None, kind: str) -> dict[str, Any] | None:
    for m in _META_RE.finditer(body or ""):
        if m.group(1) == kind:
            try:
                data = json.loads(m.group(2))
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


# ---- untrusted text --------------------------------------------------------------------
_ZWSP = "\u200b"


def defang(text: str) -> str:
    """Neutralise @mentions, #123 / owner/repo#123 references and closing keywords' targets."""
    text = re.sub(r"@(?=[A-Za-z0-9_-])", "@" + _ZWSP, text)
    text = re.sub(r"#(?=\d)", "#" + _ZWSP, text)
    return re.sub(r"github\.com/", "github" + _ZWSP + ".com/", text, flags=re.I)


def cell(value: Any, limit: int = 160) -> str:
    """A value made safe for one Markdown table cell."""
    text = "" if value is None else str(value)
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return defang(text).replace("|", "\\|")


def code_block(text: str, lang: str = "") -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}"


def truncate(text: str, limit: int, note: str) -> str:
    if len(text) <= limit:
        return text
    return text[:limit].rsplit("\n", 1)[0] + f"\n\n_{note}_\n"


# ---- formatting of figures ---------------------------------------------------------------
def fmt_bool(v: bool | None, yes: str = "pass", no: str = "FAIL") -> str:
    return "–" if v is None else (yes if v else no)


def fmt_speedup(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}x"


def fmt_ms(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f} ms"


def fmt_int(v: int | None) -> str:
    return "–" if v is None else str(v)


def location(bundle: FixBundle) -> str:
    c = bundle.cluster
    where = c.filename or "?"
    if c.lineno:
        where += f":{c.lineno}"
    return f"{where} in {c.function}" if c.function else where


def _snapshot_rows(before: Snapshot, after: Snapshot) -> list[tuple[str, str, str]]:
    return [
        ("verdict", before.verdict or "–", after.verdict or "–"),
        ("graphs", fmt_int(before.graphs), fmt_int(after.graphs)),
        ("graph breaks", fmt_int(before.graph_breaks), fmt_int(after.graph_breaks)),
        ("breaks of this cluster", fmt_int(before.cluster_breaks), fmt_int(after.cluster_breaks)),
        ("numerics vs fp64 reference", fmt_bool(before.numerics_passed), fmt_bool(after.numerics_passed)),
        ("speedup (eager / compiled)", fmt_speedup(before.speedup), fmt_speedup(after.speedup)),
        ("compiled latency (median)", fmt_ms(before.compiled_ms), fmt_ms(after.compiled_ms)),
    ]


# ---- pull request --------------------------------------------------------------------------
def verification_passed(bundle: FixBundle, verification: dict[str, Any] | None) -> bool:
    if isinstance(verification, dict) and isinstance(verification.get("passed"), bool):
        return verification["passed"]
    return bundle.verified


def pr_title(bundle: FixBundle) -> str:
    """Short and specific; the target is a label and the full break message is in the body."""
    c = bundle.cluster
    what = c.registry_id or c.gb_type
    where = c.function or c.filename or "model code"
    return cell(f"[enablebot] {bundle.model_id}: remove graph break {what} in {where}", limit=120)


def _verification_section(verification: dict[str, Any] | None, passed: bool) -> list[str]:
    out = [f"### Verification: {'passed ✅' if passed else 'FAILED ❌'}", ""]
    if not isinstance(verification, dict):
        return out + ["_No verification.json in the bundle._", ""]
    checks = verification.get("checks")
    if isinstance(checks, list) and checks:
        out += ["| check | result | detail |", "|---|---|---|"]
        for c in checks:
            if not isinstance(c, dict):
                continue
            out.append(f"| {cell(c.get('name'))} | {fmt_bool(c.get('passed'))} | {cell(c.get('detail'))} |")
        out.append("")
    extras = {
        k: v
        for k, v in verification.items()
        if k not in ("passed", "checks") and isinstance(v, (str, int, float, bool)) and v is not None
    }
    if extras:
        out += [", ".join(f"{cell(k)}: `{cell(v, 80)}`" for k, v in sorted(extras.items())), ""]
    return out


def _produced_by(bundle: FixBundle) -> list[str]:
    lines = ["### How this patch was produced", ""]
    src = bundle.fix_source or ""
    tried = f", the verified one of {bundle.attempts} candidate{'s' if bundle.attempts != 1 else ''}" if bundle.attempts else ""
    if src.startswith("rewrite:"):
        lines.append(
            f"- The idea came from enablebot's playbook: the rewrite `{cell(src.split(':', 1)[1], 80)}` "
            f"(`enablebot/data/playbook.yaml`), matched on the graph-break id and the code at the break site{tried}; "
            "no LLM wrote it."
        )
    elif bundle.llm_model:
        idea = f" with the playbook idea(s) `{cell(src.split(':', 1)[1], 120)}` in its prompt" if src.startswith("model+idea:") else ""
        lines.append(
            f"- Drafted by an LLM agent (model `{cell(bundle.llm_model, 80)}`){idea}{tried}; the tool turned its "
            "edit into a unified diff applied in an overlay of the installed sources."
        )
    else:
        lines.append("- Written without an LLM (a rule-based fix).")
    lines.append(
        "- Checked by enablebot's verifier, which the agent cannot reach: it re-runs the model eager "
        "and compiled with the patch, counts graph breaks, compares numerics against an fp64 "
        "reference and times both (interleaved, median)."
    )
    if bundle.versions:
        vers = ", ".join(f"{cell(k)} `{cell(v, 60)}`" for k, v in sorted(bundle.versions.items()))
        lines.append(f"- Versions: {vers}.")
    if bundle.created_at:
        lines.append(f"- Bundle created {cell(bundle.created_at, 40)}.")
    return lines + [""]


def render_pr_body(
    bundle: FixBundle,
    *,
    verification: dict[str, Any] | None,
    report_md: str | None,
    files: list[str],
    patch_sha256: str,
) -> str:
    passed = verification_passed(bundle, verification)
    meta = meta_comment(
        PR_META,
        {
            "fix_key": bundle.fix_key,
            "patch_sha256": patch_sha256,
            "verified": passed,
            "target": bundle.target,
            "bundle": bundle.to_dict(),
        },
    )
    c = bundle.cluster
    gb = f"**{cell(c.registry_id)}** " if c.registry_id else ""
    head = [
        meta,
        f"## torch.compile: remove a graph break in `{cell(location(bundle), 120)}`",
        "",
        f"enablebot found that `{cell(bundle.model_id)}` breaks the `torch.compile` graph at "
        f"`{cell(location(bundle), 120)}` with {gb}\"{cell(c.gb_type)}\", and drafted this "
        f"**{cell(bundle.target)}** change.",
        "",
        "### Before / after",
        "",
        "| | before | after |",
        "|---|---|---|",
        *[f"| {name} | {b} | {a} |" for name, b, a in _snapshot_rows(bundle.before, bundle.after)],
        "",
        *_verification_section(verification, passed),
        "### Reproduce",
        "",
        code_block(bundle.repro or f"enablebot run {bundle.model_id}", "bash"),
        "",
        *_produced_by(bundle),
        "Files: " + ", ".join(f"`{cell(f, 120)}`" for f in files),
        "",
    ]
    footer = [
        "---",
        f"<sub>One PR per fix key (`{cell(bundle.fix_key, 100)}`). enablebot updates it in place: it "
        "force-pushes the branch when the fix changes and refreshes this description. "
        "Close it to reject the fix; the bot will not reopen it.</sub>",
        "",
    ]
    text = "\n".join(head)
    if report_md:
        room = _BODY_BUDGET - len(text) - 400
        report = truncate(defang(report_md), max(room, 0), "report truncated; the full report is in the bundle")
        text += "\n<details><summary>Full verification report</summary>\n\n" + report + "\n</details>\n\n"
    return text + "\n".join(footer)


# ---- dashboard ---------------------------------------------------------------------------------
@dataclass
class ArchRow:
    model_type: str
    status: dict[str, dict[str, Any]] = field(default_factory=dict)  # "<device>/<mode>" -> {...}


@dataclass
class ClusterRow:
    gb_type: str
    registry_id: str | None = None
    location: str | None = None
    n_models: int = 0
    models: list[str] = field(default_factory=list)
    classification: str | None = None


@dataclass
class PrRow:
    repo: str
    number: int
    title: str
    url: str
    fix_key: str | None = None
    target: str | None = None
    verified: bool | None = None
    updated_at: str | None = None


@dataclass
class RecipeRow:
    fix_key: str
    model_id: str
    gb_type: str
    recipe: dict[str, Any]
    verified: bool


DASHBOARD_TITLE = "enablebot dashboard"
ATTENTION_ROWS = 150
CLUSTER_ROWS = 20

_GOOD = Verdict.FULL_GRAPH.value


def _status_cell(s: dict[str, Any] | None) -> str:
    if not s:
        return "–"
    parts = [str(s.get("verdict") or "?")]
    if s.get("numerics_passed") is False or s.get("numerics") is False:
        parts.append("numerics ✗")
    if isinstance(s.get("speedup"), (int, float)):
        parts.append(fmt_speedup(s["speedup"]))
    return cell(" · ".join(parts), 60)


def _needs_attention(row: ArchRow) -> bool:
    return any(
        s.get("verdict") != _GOOD or s.get("numerics_passed") is False or s.get("numerics") is False
        for s in row.status.values()
    )


def render_dashboard(
    archs: list[ArchRow],
    clusters: list[ClusterRow],
    prs: list[PrRow] | None,
    recipes: list[RecipeRow],
    *,
    updated_at: str,
    run_url: str | None = None,
) -> str:
    keys = sorted({k for a in archs for k in a.status})
    verdicts = sorted({s.get("verdict") or "?" for a in archs for s in a.status.values()})
    lines = [
        meta_comment(DASHBOARD_META, {"updated_at": updated_at}),
        f"# {DASHBOARD_TITLE}",
        "",
        f"Updated {cell(updated_at, 40)}" + (f" by [the nightly run]({run_url})." if run_url else "."),
        "This issue is rewritten in place by every nightly run; edits to it are overwritten.",
        "",
        f"## Architectures ({len(archs)} tracked)",
        "",
    ]
    if keys:
        lines += [
            "| device/mode | " + " | ".join(cell(v) for v in verdicts) + " | numerics ✗ | not run |",
            "|---|" + "---|" * (len(verdicts) + 2),
        ]
        for k in keys:
            counts = [sum(1 for a in archs if (a.status.get(k) or {}).get("verdict") == v) for v in verdicts]
            bad_num = sum(
                1 for a in archs if (a.status.get(k) or {}).get("numerics_passed") is False
            )
            missing = sum(1 for a in archs if k not in a.status)
            lines.append(f"| {cell(k)} | " + " | ".join(map(str, counts)) + f" | {bad_num} | {missing} |")
        lines.append("")
        attention = [a for a in archs if _needs_attention(a)]
        if attention:
            shown = attention[:ATTENTION_ROWS]
            lines += [
                f"<details><summary>Architectures needing attention ({len(attention)})</summary>",
                "",
                "| architecture | " + " | ".join(cell(k) for k in keys) + " |",
                "|---|" + "---|" * len(keys),
                *[
                    f"| {cell(a.model_type)} | " + " | ".join(_status_cell(a.status.get(k)) for k in keys) + " |"
                    for a in shown
                ],
            ]
            if len(attention) > len(shown):
                lines.append(f"\n_…and {len(attention) - len(shown)} more (see the sweep report)._")
            lines += ["", "</details>", ""]
    else:
        lines += ["_No run results in the registry yet._", ""]

    lines += ["## Top graph-break clusters", ""]
    if clusters:
        top = sorted(clusters, key=lambda c: (-c.n_models, c.gb_type))[:CLUSTER_ROWS]
        lines += [
            "| # | graph break | id | location | models | class | examples |",
            "|---|---|---|---|---|---|---|",
        ]
        for i, c in enumerate(top, 1):
            examples = ", ".join(c.models[:3]) + (" …" if len(c.models) > 3 else "")
            lines.append(
                f"| {i} | {cell(c.gb_type, 80)} | {cell(c.registry_id) or '–'} | `{cell(c.location, 80)}` | "
                f"{c.n_models} | {cell(c.classification) or '–'} | {cell(examples, 100)} |"
            )
        lines.append("")
    else:
        lines += ["_No graph-break clusters in the latest sweep._", ""]

    lines += ["## Open bot pull requests", ""]
    if prs is None:
        lines += ["_Not queried (no GITHUB_TOKEN)._", ""]
    elif prs:
        lines += ["| PR | target | fix key | verification | updated |", "|---|---|---|---|---|"]
        for p in sorted(prs, key=lambda p: (p.repo, p.number)):
            lines.append(
                f"| [{cell(p.repo)}#{p.number}]({p.url}) {cell(p.title, 80)} | {cell(p.target) or '–'} | "
                f"`{cell(p.fix_key, 60)}` | {fmt_bool(p.verified, 'passed ✅', 'failed ❌')} | "
                f"{cell(p.updated_at, 25) or '–'} |"
            )
        lines.append("")
    else:
        lines += ["_None open._", ""]

    if recipes:
        lines += [
            "## Config recipes (not PR-able as code)",
            "",
            "| fix key | model | graph break | torch._dynamo.config | verified |",
            "|---|---|---|---|---|",
        ]
        for r in sorted(recipes, key=lambda r: r.fix_key):
            settings = ", ".join(f"{k}={v!r}" for k, v in sorted(r.recipe.items()))
            lines.append(
                f"| `{cell(r.fix_key, 60)}` | {cell(r.model_id)} | {cell(r.gb_type, 80)} | "
                f"`{cell(settings, 120)}` | {fmt_bool(r.verified, 'yes', 'no')} |"
            )
        lines.append("")
    text = "\n".join(lines)
    return truncate(text, GITHUB_BODY_LIMIT - 200, "dashboard truncated to GitHub's size limit")
