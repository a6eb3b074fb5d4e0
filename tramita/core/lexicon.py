"""Deterministic confirm / reject / cancel recognition from `policies/lexicons.yaml`.

The lexicon decides the common replies with zero LLM calls; only replies it cannot classify go to
the LLM fallback. Matching is on whole phrases after removing filler words, so "ok, sim" confirms
but "sim, mas com prioridade P2" does not (it carries a change and is handled as a correction).

A cancel is also recognised as a leading *clause* (`cancel_clause`): people wrap it in a lead-in
("pensando bem, deixa quieto") or follow it with the request they want instead ("cancel that, I
want to reassign TCK-… to …"), and the part after the cancel clause is then a new request. Wider
paraphrases ("mudei de ideia") are left to the prototypes (tramita.core.confirmation), so this
list stays short.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict

from tools.registry_models import load_model
from tramita.base.paths import POLICIES_DIR
from tramita.base.text import fold

Reply = Literal["confirm", "reject", "cancel"]


class Lexicons(BaseModel):
    """`policies/lexicons.yaml`: each table maps a language to its phrases."""

    model_config = ConfigDict(extra="forbid")
    confirm: dict[str, list[str]]
    reject: dict[str, list[str]]
    cancel: dict[str, list[str]]
    correction: dict[str, list[str]]
    request: dict[str, list[str]]
    filler: dict[str, list[str]]
    revert_first: dict[str, list[str]]
    revert_previous: dict[str, list[str]]


@lru_cache(maxsize=1)
def lexicons() -> Lexicons:
    """The validated lexicons, read once per process."""
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
    """Confirm / reject / cancel when the whole reply (fillers aside) is one such phrase,
    possibly repeated ("sim, sim", "não, cancela"); None otherwise.
    """
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


# A clause ends at punctuation or a spaced dash: "na real, esquece o ticket: passa o TCK-1107 …"
_CLAUSE_END = re.compile(r"[,;:.!?…]+|\s[-–—]\s")
_LEAD_IN_WORDS = 3  # a clause before the cancel ("pensando bem", "ah", "on second thought") is this short
_LEADING_CLAUSES = 3  # the cancel clause is one of the first few


@dataclass(frozen=True)
class CancelClause:
    """Where a message cancels: `cancel` when a leading clause is a cancel phrase; `rest` is the
    user's text after that clause (possibly a new request), "" when nothing follows.
    """

    cancel: bool
    rest: str = ""


def clauses(text: str) -> list[tuple[str, int]]:
    """(clause, end offset in `text`) for each non-empty clause, in order."""
    out: list[tuple[str, int]] = []
    start = 0
    for m in [*_CLAUSE_END.finditer(text), None]:
        end = m.start() if m else len(text)
        piece = text[start:end].strip()
        if piece:
            out.append((piece, m.end() if m else len(text)))
        if m:
            start = m.end()
    return out


def _is_cancel_phrase(clause: str) -> bool:
    """The clause is a cancel phrase (fillers aside), or opens with a long one ("esquece o ticket").

    Short phrases ("stop", "pare", "sair") count only as the whole clause: at the start of a longer
    clause they are ordinary words of a title or a reason ("stop charging twice").
    """
    core = _strip_fillers(clause)
    if not core:
        return False
    phrases = _phrases(lexicons().cancel)
    return core in phrases or any(core.startswith(p + " ") for p in phrases if len(p) > 4)


def cancel_clause(text: str) -> CancelClause:
    """Whether one of the leading clauses cancels, and the text after it.

    The clauses before the cancel must be short lead-ins without values ("pensando bem", "ah",
    "na real"); a cancel deep inside a long message is content ("o cliente pediu pra cancelar").
    A negated cancel ("não cancela") is not a cancel phrase, so it never matches.
    """
    parts = clauses(text)
    for clause, end in parts[:_LEADING_CLAUSES]:
        if _is_cancel_phrase(clause):
            return CancelClause(True, text[end:].strip(" \t\n,;:.!?…-–—"))
        if len(fold(clause).split()) > _LEAD_IN_WORDS or any(c.isdigit() for c in clause):
            break
    return CancelClause(False)


def mentions_cancel(text: str) -> bool:
    """A cancel phrase in a leading clause ("cancela isso, por favor", "pensando bem, deixa quieto")."""
    return cancel_clause(text).cancel


def revert_cue(text: str) -> str | None:
    """"first" or "previous" when the message points back at an earlier value ("a primeira mesmo",
    "the previous one"), else None. Only meaningful while a transaction has replaced values.
    """
    f = f" {fold(text)} "
    lex = lexicons()
    if any(f" {p} " in f for p in _phrases(lex.revert_first)):
        return "first"
    if any(f" {p} " in f for p in _phrases(lex.revert_previous)):
        return "previous"
    return None


def has_correction_cue(text: str) -> bool:
    """"na verdade", "make it", … anywhere in the message."""
    f = f" {fold(text)} "
    return any(f" {p} " in f for p in _phrases(lexicons().correction))


def is_polite_request(text: str) -> bool:
    """The message opens with a request addressed to the assistant ("pode aprovar…?")."""
    f = fold(text)
    f = " ".join(w for w in f.split() if w not in {"e", "and", "ok", "entao", "so", "hey", "oi", "ola"})
    return any(f == p or f.startswith(p + " ") for p in _phrases(lexicons().request))
