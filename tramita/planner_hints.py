"""Lexical planner hints from `policies/planner.yaml` (see the file's header for why)."""

from __future__ import annotations

from functools import lru_cache

from pydantic import BaseModel, ConfigDict

from tools.registry_models import load_model
from tramita.paths import POLICIES_DIR
from tramita.text import fold


class HintFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hints: dict[str, list[str]]


@lru_cache(maxsize=1)
def _hints() -> dict[str, list[str]]:
    f: HintFile = load_model(POLICIES_DIR / "planner.yaml", HintFile)
    unknown = set(f.hints) - {"sql", "graph", "docs"}
    if unknown:
        raise ValueError(f"{POLICIES_DIR / 'planner.yaml'}: field hints: unknown backends {sorted(unknown)}")
    return {k: [fold(w) for w in ws] for k, ws in f.hints.items()}


def hinted(question: str) -> set[str]:
    """Backends whose hint words start a word of the question."""
    text = " " + fold(question).replace("-", " ") + " "
    out = set()
    for backend, words in _hints().items():
        if any(f" {w.replace('-', ' ')}" in text for w in words):
            out.add(backend)
    return out
