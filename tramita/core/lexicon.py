"""Deterministic confirm / reject / cancel recognition from `policies/lexicons.yaml`.

The lexicon decides the common replies with zero LLM calls; only replies it cannot classify go to
the LLM fallback. Matching is on whole phrases after removing filler words, so "ok, sim" confirms
but "sim, mas com prioridade P2" does not (it carries a change and is handled as a correction).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict

from tools.registry_models import load_model
from tramita.base.paths import POLICIES_DIR
from tramita.base.text import fold

Reply = Literal["confirm", "reject", "cancel"]


class Lexicons(BaseModel):
    model_config = ConfigDict(extra="forbid")
    confirm: dict[str, list[str]]
    reject: dict[str, list[str]]
    cancel: dict[str, list[str]]
    correction: dict[str, list[str]]
    request: dict[str, list[str]]
    filler: dict[str, list[str]]


@lru_cache(maxsize=1)
def lexicons() -> Lexicons:
    lex: Lexicons = load_model(POLICIES_DIR / "lexicons.yaml", Lexicons)
    return lex


def _phrases(table: dict[str, list[str]]) -> set[str]:
    return {fold(p) for phrases in table.values() for p in phrases}


def _strip_fillers(text: str) -> str:
    fillers = sorted(_phrases(lexicons().filler), key=len, reverse=True)
    ws = f" {fold(text)} "
    changed = True
    while changed:
        changed = False
        for f in fillers:
            if f" {f} " in ws and ws.strip() != f:
                ws = ws.replace(f" {f} ", " ")
                changed = True
    return " ".join(ws.split())


def classify(text: str) -> Reply | None:
    """confirm / reject / cancel when the whole reply (fillers aside) is one such phrase,
    possibly repeated ("sim, sim", "não, cancela"); None otherwise."""
    core = _strip_fillers(text)
    if not core:
        return None
    lex = lexicons()
    tables: dict[Reply, set[str]] = {"confirm": _phrases(lex.confirm), "reject": _phrases(lex.reject),
                                     "cancel": _phrases(lex.cancel)}
    hits: set[Reply] = set()
    rest = core
    # greedy longest-phrase cover of the reply
    all_phrases = sorted(((p, k) for k, ps in tables.items() for p in ps), key=lambda pk: len(pk[0]), reverse=True)
    while rest:
        for phrase, kind in all_phrases:
            if rest == phrase or rest.startswith(phrase + " "):
                hits.add(kind)
                rest = rest[len(phrase):].strip()
                break
        else:
            return None
    if hits == {"confirm"}:
        return "confirm"
    if "cancel" in hits and "confirm" not in hits:
        return "cancel"
    if hits == {"reject"}:
        return "reject"
    return None


def mentions_cancel(text: str) -> bool:
    """A cancel phrase at the start of the message ("cancela isso, por favor")."""
    f = fold(text)
    return any(f == p or f.startswith(p + " ") for p in _phrases(lexicons().cancel) if len(p) > 4)


def has_correction_cue(text: str) -> bool:
    """"na verdade", "make it", … anywhere in the message."""
    f = f" {fold(text)} "
    return any(f" {p} " in f for p in _phrases(lexicons().correction))


def is_polite_request(text: str) -> bool:
    """The message opens with a request addressed to the assistant ("pode aprovar…?")."""
    f = fold(text)
    f = " ".join(w for w in f.split() if w not in {"e", "and", "ok", "entao", "so", "hey", "oi", "ola"})
    return any(f == p or f.startswith(p + " ") for p in _phrases(lexicons().request))
