"""Where the files that ship with enablebot are: the registry and the prompt templates.

In a source checkout they are the repository's own top-level files (`model_registry.yaml`,
`prompts/`), so edits apply at once. An installed wheel carries copies under
`enablebot/_shipped/` (setup.py's build step puts them there), so `enablebot run llama` works
from any directory. Package data proper (`enablebot/data/*.yaml`) sits inside the package.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
_CHECKOUT = PACKAGE_DIR.parent
_SHIPPED = PACKAGE_DIR / "_shipped"


def in_checkout() -> bool:
    return (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "model_registry.yaml").is_file()


def shipped(name: str) -> Path:
    """Path of a top-level shipped file or folder (`model_registry.yaml`, `prompts`)."""
    return (_CHECKOUT if in_checkout() else _SHIPPED) / name


def package_data(*parts: str) -> Path:
    """A file inside the package (`data/recipes.yaml`)."""
    return PACKAGE_DIR.joinpath(*parts)
