"""Prompt templates live in `prompts/*.md` (reviewed as text, not code) and are rendered with
string.Template (`$name`), so braces in quoted source code need no escaping.
`ENABLEBOT_PROMPTS_DIR` points elsewhere (a fork's own prompts)."""

from __future__ import annotations

import os
import string
from pathlib import Path
from typing import Any

from ...shipped import shipped

DEFAULT_DIR = shipped("prompts")


def prompts_dir() -> Path:
    return Path(os.environ.get("ENABLEBOT_PROMPTS_DIR") or DEFAULT_DIR)


def render(name: str, **values: Any) -> str:
    """Render prompts/<name>.md; a placeholder without a value is an error (KeyError)."""
    path = prompts_dir() / f"{name}.md"
    if not path.is_file():
        raise FileNotFoundError(f"prompt template {path} is missing")
    return string.Template(path.read_text(encoding="utf-8")).substitute(
        {k: ("" if v is None else str(v)) for k, v in values.items()})


def placeholders(name: str) -> set[str]:
    """Placeholder names a template uses (for tests and for building the context)."""
    text = (prompts_dir() / f"{name}.md").read_text(encoding="utf-8")
    return {m.group("named") or m.group("braced") for m in string.Template.pattern.finditer(text)
            if m.group("named") or m.group("braced")}
