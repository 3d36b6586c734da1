"""One redaction for everything the bot writes: reports, bundles, PR bodies, step summaries,
results and logs. A key can reach text from anywhere (an endpoint that echoes it in an error,
a child's traceback), so writers redact the text, not only the transcript.

`redact` removes the values of the secret environment variables, any extra secrets given, and
anything token-shaped (OpenAI, GitHub, Hugging Face tokens; bearer headers).
`write_text` / `append_text` are the writers to use for any file the bot produces.
"""

from __future__ import annotations

import os
import re
from typing import Iterable

SECRET_ENV = ("OPENAI_API_KEY", "GITHUB_TOKEN", "GH_TOKEN", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "ANTHROPIC_API_KEY",
              "ENABLEBOT_GITHUB_TOKEN", "PR_TOKEN")
_TOKEN_RE = re.compile(r"\b(?:sk-[A-Za-z0-9_\-]{8,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|hf_[A-Za-z0-9]{20,})")
_BEARER_RE = re.compile(r"(Bearer\s+)[^\s\"'\\]+", re.I)
MARK = "[REDACTED]"


def _env_secrets() -> list[str]:
    names = set(SECRET_ENV) | {k for k in os.environ if re.search(r"(TOKEN|API_KEY|SECRET)$", k)}
    return [os.environ[k] for k in names if os.environ.get(k)]


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Remove secret values (explicit, from the environment, or token-shaped) from text."""
    if not text:
        return text
    values = [s for s in secrets if s] + _env_secrets()
    for v in sorted(set(values), key=len, reverse=True):
        if len(v) >= 6:
            text = text.replace(v, MARK)
    text = _TOKEN_RE.sub(MARK, text)
    return _BEARER_RE.sub(r"\1" + MARK, text)
