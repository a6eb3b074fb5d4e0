"""Lexical planner hints from `policies/planner.yaml` (see the file's header for why)."""

from __future__ import annotations

from functools import lru_cache

from pydantic import BaseModel, ConfigDict

from tools.backends import BACKENDS
from tools.registry_models import load_model
from tramita.base.paths import POLICIES_DIR
from tramita.base.text import fold


class HintFile(BaseModel):
    """`policies/planner.yaml`: per-backend planner lines and lexical hints."""

    model_config = ConfigDict(extra="forbid")
    descriptions: dict[str, str] = {}
    hints: dict[str, list[str]]


@lru_cache(maxsize=1)
def _file() -> HintFile:
    f: HintFile = load_model(POLICIES_DIR / "planner.yaml", HintFile)
    for name, table in (("hints", f.hints), ("descriptions", f.descriptions)):
        unknown = set(table) - set(BACKENDS)
        if unknown:
            raise ValueError(f"{POLICIES_DIR / 'planner.yaml'}: field {name}: unknown backends {sorted(unknown)}; "
                             f"known: {sorted(BACKENDS)}")
    return f


@lru_cache(maxsize=1)
def _hints() -> dict[str, list[str]]:
    return {k: [fold(w) for w in ws] for k, ws in _file().hints.items()}


def descriptions() -> dict[str, str]:
    """The planner line of each backend that the policy file describes."""
    return dict(_file().descriptions)


def hinted(question: str) -> set[str]:
    """Backends whose hint words start a word of the question."""
    text = " " + fold(question).replace("-", " ") + " "
    out = set()
    for backend, words in _hints().items():
        if any(f" {w.replace('-', ' ')}" in text for w in words):
            out.add(backend)
    return out
