"""References to the thread and to the user: "ele", "it", "pra mim", "my team".

People point at what the conversation already named: "como tá o TCK-1150?" then "passa ele pro
Otávio Medeiros"; "assign it to me"; "+9000 for my team". The thread keeps, per referenced table
(the `x-references` table of a parameter: tickets, expenses, incidents, services, employees, teams),
the last id it mentioned (`entities` in the graph state, updated each turn from the values filled,
the tools' results and the ids the user and the assistant wrote). Before any extraction, a missing
parameter is resolved deterministically:

- a self reference ("pra mim", "to me") fills a parameter that names a row of the user directory
  (policies/groups.yaml `directory`) with the user;
- an own reference ("meu time", "my team") fills a parameter of a table listed under `own_row` with
  the user's own row (read from the user's directory row);
- an anaphor ("ele", "esse", "it") fills the first missing parameter, in the tool's order, whose
  table has an entity in the thread.

A resolved value is an ordinary candidate (validated like any other), it is named in the summary
(`note`), and the transaction always waits for an explicit confirmation before it runs, even for a
lookup (`tramita.core.transactions.advance`). The word lists are `policies/thread_refs.yaml`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Engine, column, select, table

from tools.references import check_identifier
from tramita.base.paths import POLICIES_DIR
from tramita.base.policyfile import load_model
from tramita.base.text import fold

THREAD_REFS_FILE = POLICIES_DIR / "thread_refs.yaml"

Entities = dict[str, str]  # referenced table -> the last id of it the thread mentioned


class ThreadRefRules(BaseModel):
    """`policies/thread_refs.yaml`: the words of each kind of reference, per language."""

    model_config = ConfigDict(extra="forbid")
    anaphora: dict[str, list[str]] = Field(description="words that point at the last entity of a kind")
    self_refs: dict[str, list[str]] = Field(description="words that name the user")
    own_refs: dict[str, list[str]] = Field(description="words that name the user's own row (my team)")
    own_row: dict[str, str] = Field(description="table -> column of the user's directory row that holds it")
    note: dict[str, str] = Field(description="summary line per language, with {items}")


@lru_cache(maxsize=4)
def thread_ref_rules(path: Path = THREAD_REFS_FILE) -> ThreadRefRules:
    """The validated rules of `path`, read once per process."""
    rules: ThreadRefRules = load_model(path, ThreadRefRules)
    for tbl, col in rules.own_row.items():
        check_identifier(tbl)
        check_identifier(col)
    return rules


def ref_table(schema: Mapping[str, Any]) -> str | None:
    """The table a parameter names a row of (`x-references: table.column`), or None."""
    ref = schema.get("x-references")
    return str(ref).split(".", 1)[0] if ref else None


# ------------------------------------------------------------------------------------- entities

def id_patterns(properties: Iterable[Mapping[str, Any]]) -> dict[str, re.Pattern[str]]:
    """Table -> a search pattern for its ids, from every parameter with both `pattern` and
    `x-references` (TCK-nnnn → tickets, EXP-nnnn → expenses, INC-nnnn → incidents).
    """
    out: dict[str, re.Pattern[str]] = {}
    for schema in properties:
        tbl, pattern = ref_table(schema), schema.get("pattern")
        if not tbl or not pattern or tbl in out:
            continue
        try:
            out[tbl] = re.compile(rf"(?<![\w-]){str(pattern).strip('^$')}(?![\w-])", re.IGNORECASE)
        except re.error:
            continue
    return out


def mentioned(text: str, patterns: Mapping[str, re.Pattern[str]]) -> Entities:
    """The last id of each table that `text` writes (upper-cased, as ids are stored)."""
    out: Entities = {}
    for tbl, pattern in patterns.items():
        hits = [m.group(0).upper() for m in pattern.finditer(text or "")]
        if hits:
            out[tbl] = hits[-1]
    return out


def from_args(properties: Mapping[str, Mapping[str, Any]], args: Mapping[str, Any]) -> Entities:
    """The referenced rows among a tool's arguments (ticket_id → tickets, assignee_id → employees)."""
    out: Entities = {}
    for name, value in args.items():
        tbl = ref_table(properties.get(name, {}))
        if tbl and value not in (None, ""):
            out[tbl] = str(value)
    return out


# ------------------------------------------------------------------------------------- resolve

def _has_phrase(text: str, phrases: Iterable[str]) -> str | None:
    """The first of `phrases` (longest first) that occurs in `text` as whole words, or None."""
    padded = f" {fold(text)} "
    for phrase in sorted({fold(p) for p in phrases if fold(p)}, key=len, reverse=True):
        if f" {phrase} " in padded:
            return phrase
    return None


def _words(table_: Mapping[str, list[str]]) -> list[str]:
    return [p for phrases in table_.values() for p in phrases]


@dataclass
class Resolution:
    """Values resolved from references (parameter → id) and the words that named each."""

    values: dict[str, str] = field(default_factory=dict)
    words: dict[str, str] = field(default_factory=dict)


def resolve(properties: Mapping[str, Mapping[str, Any]], pending: Iterable[str], text: str, entities: Mapping[str, str],
            *, user_id: str, directory_table: str | None, own: Mapping[str, str],
            path: Path = THREAD_REFS_FILE) -> Resolution:
    """Fill missing parameters from the references in `text` (see the module doc).

    `pending` are the parameters still missing after the message's own values, in the tool's
    order; `own` maps a table to the user's own row of it (see `own_rows`). Pure: no database.
    """
    rules = thread_ref_rules(path)
    out = Resolution()
    missing = [p for p in pending if ref_table(properties.get(p, {}))]
    self_word = _has_phrase(text, _words(rules.self_refs))
    own_word = _has_phrase(text, _words(rules.own_refs))
    anaphor = _has_phrase(text, _words(rules.anaphora))
    for name in missing:
        tbl = ref_table(properties[name])
        if self_word and tbl == directory_table and user_id:
            out.values[name], out.words[name] = user_id, self_word
            self_word = None
        elif own_word and tbl is not None and tbl in own:
            out.values[name], out.words[name] = own[tbl], own_word
            own_word = None
    if anaphor:
        for name in missing:
            tbl = ref_table(properties[name])
            if name not in out.values and tbl in entities:
                out.values[name], out.words[name] = entities[str(tbl)], anaphor
                break
    return out


def own_rows(engine: Engine, directory_table: str, directory_id: str, user_id: str,
             path: Path = THREAD_REFS_FILE) -> dict[str, str]:
    """Table -> the user's own row of it, read from the user's directory row (`own_row`)."""
    own_row = thread_ref_rules(path).own_row
    if not own_row or not user_id:
        return {}
    cols = [check_identifier(c) for c in own_row.values()]
    target = table(check_identifier(directory_table), column(check_identifier(directory_id)), *[column(c) for c in cols])
    query = select(*[target.c[c] for c in cols]).where(target.c[directory_id] == user_id).limit(1)
    with engine.connect() as conn:
        row = conn.execute(query).first()
    if row is None:
        return {}
    return {tbl: str(row[i]) for i, tbl in enumerate(own_row) if row[i] is not None}


def note(words: Mapping[str, str], values: Mapping[str, Any], lang: str, path: Path = THREAD_REFS_FILE) -> str:
    """The summary line naming what each reference resolved to ("(Entendi “ele” = TCK-1150.)");
    `words` maps a parameter to the words that named it, `values` holds the parameters' values.
    """
    shown = [p for p in words if p in values]
    if not shown:
        return ""
    items = "; ".join(f"“{words[p]}” = {values[p]}" for p in shown)
    template = thread_ref_rules(path).note
    return template.get(lang, template.get("pt", "{items}")).format(items=items)
