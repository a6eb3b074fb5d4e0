"""Policy refusals that never change state (bulk actions, injection, raw writes).

Patterns live in `policies/safety.yaml`; the check is deterministic so a refusal costs no LLM call
and cannot be talked out of by the model. The engines stay read-only regardless: this is only the
first layer, with a clear message.
"""

from __future__ import annotations

import re
from functools import lru_cache

from pydantic import BaseModel, ConfigDict

from tools.registry_models import load_model
from tramita.core.lexicon import is_polite_request
from tramita.base.paths import POLICIES_DIR
from tramita.base.text import fold, is_question


class Category(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason_pt: str
    reason_en: str
    patterns: list[str]
    questions_exempt: bool = False


class SafetyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    categories: dict[str, Category]


@lru_cache(maxsize=1)
def _compiled() -> list[tuple[str, Category, list[re.Pattern[str]]]]:
    f: SafetyFile = load_model(POLICIES_DIR / "safety.yaml", SafetyFile)
    out = []
    for name, cat in f.categories.items():
        try:
            pats = [re.compile(p, re.IGNORECASE | re.MULTILINE) for p in cat.patterns]
        except re.error as exc:
            raise ValueError(f"{POLICIES_DIR / 'safety.yaml'}: category {name!r}: field patterns: {exc}") from exc
        out.append((name, cat, pats))
    return out


def _variants(text: str) -> list[str]:
    """The raw text (for SQL/Cypher syntax) and its folded form (accents and case removed)."""
    return [text, fold(text), " ".join(text.lower().split())]


def screen(text: str) -> tuple[str, str, str] | None:
    """(category, reason_pt, reason_en) for a message that must be refused, else None."""
    variants = _variants(text)
    asking = is_question(text) and not is_polite_request(text)
    for name, cat, pats in _compiled():
        if cat.questions_exempt and asking:
            continue
        for pat in pats:
            if any(pat.search(v) for v in variants):
                return name, cat.reason_pt, cat.reason_en
    return None
