"""Prompt templates live in `prompts/*.txt`; this renders them with `string.Template` ($name),
which leaves the JSON braces in the prompts alone.
"""

from __future__ import annotations

from functools import lru_cache
from string import Template

from tramita.base.paths import PROMPTS_DIR


@lru_cache(maxsize=64)
def _template(name: str) -> Template:
    path = PROMPTS_DIR / f"{name}.txt"
    if not path.exists():
        raise FileNotFoundError(f"prompt template {path} is missing")
    return Template(path.read_text(encoding="utf-8"))


def render(name: str, **values: object) -> str:
    """Fill a template; a missing value is an error (a silently blank slot misleads the model)."""
    return _template(name).substitute({k: str(v) for k, v in values.items()})


def split(name: str, **values: object) -> tuple[str, str]:
    """(static system prefix, dynamic part): the text before the `---` line never changes between
    calls, so llama.cpp can reuse its KV cache for it.
    """
    full = render(name, **values)
    head, sep, tail = full.partition("\n---\n")
    return (head, tail) if sep else ("", full)


def head(name: str, **values: object) -> str:
    """The static prefix of `name` alone, filled with `values` (the dynamic part's slots stay unfilled):
    what every call of that prompt shares, so it can be evaluated once before any question.
    """
    text, sep, _ = _template(name).template.partition("\n---\n")
    return Template(text).substitute({k: str(v) for k, v in values.items()}) if sep else ""
