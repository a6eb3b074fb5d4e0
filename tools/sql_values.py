"""Value linking for text-to-SQL: the literal values a question names, with the column storing them.

Why: the 1.5B model often picks the right table but the wrong column for a literal
(`teams.name_en = 'Plataforma'` while 'Plataforma' is in `teams.name`). Looking the question's
words up in the database's own low-cardinality text values, and telling the model where they
live, is the field's standard remedy (value retrieval in CHESS / CodeS). The values are read
through SQLTool itself, so this stays read-only by construction.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tools.sql_schema import Schema
from tramita.base.text import fold as fold_text

MAX_DISTINCT = 150  # a column with more distinct values is free text or ids: not linked
MAX_VALUE_CHARS = 60
MIN_VALUE_CHARS = 3
# names of things run to three or four words ("Fechamento Contábil Automatizado"); titles, comments and
# descriptions run past thirty characters on average
MAX_MEAN_CHARS = 24
MAX_HITS = 8
CACHE_SECONDS = 300.0
Query = Callable[[str], list[dict[str, Any]]]
TEXT_TYPES = ("TEXT", "CHAR", "VARCHAR", "CLOB", "STRING")


def fold(text: str) -> str:
    """tramita.base.text.fold with '-' and '_' as separators too ('payments-api' = 'Payments API'),
    padded with spaces so that `f" {value} " in fold(question)` is a whole-word test.
    """
    return " " + " ".join(w for w in re.split(r"[\s_-]+", fold_text(text)) if w) + " "


@dataclass(frozen=True)
class ValueHit:
    """A stored value the question names, with the table and column that hold it."""

    table: str
    column: str
    value: str

    def render(self) -> str:
        """The hint as the SQL condition the model should write (`teams.name = 'Plataforma'`)."""
        return f"{self.table}.{self.column} = '{self.value}'"


class ValueIndex:
    """Distinct short text values per (table, column), matched as whole words in a question."""

    def __init__(self, values: dict[tuple[str, str], list[str]]) -> None:
        """Index the values read per column, keeping those of MIN_VALUE_CHARS or more that are not bare numbers."""
        self._entries: list[tuple[str, ValueHit]] = []
        for (table, column), vals in values.items():
            for v in vals:
                key = fold(v).strip()
                if len(key) >= MIN_VALUE_CHARS and not key.replace(" ", "").isdigit():
                    self._entries.append((key, ValueHit(table, column, v)))
        # longest first: 'Plataforma de Dados' wins over 'Plataforma' at the same place
        self._entries.sort(key=lambda e: (-len(e[0]), e[1].table, e[1].column, e[1].value))
        # the (table, column) pairs whose values are indexed: a value heard elsewhere is not in these
        self.columns = frozenset((hit.table, hit.column) for _, hit in self._entries)

    def __len__(self) -> int:
        """The number of indexed values; `value_index` does not cache an empty index (the database may be down)."""
        return len(self._entries)


    def match(self, question: str, tables: Iterable[str] | None = None, limit: int | None = MAX_HITS
              ) -> list[ValueHit]:
        """Values written in the question, longest first; only in `tables` when given (the
        linked ones: a hint about a table the prompt does not show only confuses the model).
        `limit`: the most hits kept (None: all, for a passage read for its names rather than a prompt).
        """
        text = fold(question)
        allowed = set(tables) if tables is not None else None
        hits: list[ValueHit] = []
        covered: list[str] = []
        for key, hit in self._entries:
            if allowed is not None and hit.table not in allowed:
                continue
            needle = f" {key} "
            if needle not in text or any(needle in f" {c} " for c in covered if c != key):
                continue
            hits.append(hit)
            covered.append(key)
            if limit is not None and len(hits) >= limit:
                break
        return hits

    def triples(self, question: str, limit: int | None = MAX_HITS) -> list[tuple[str, str, str]]:
        """`match`'s hits as (table, column, value): the form the semantic layer reads them in."""
        return [(h.table, h.column, h.value) for h in self.match(question, limit=limit)]


def text_columns(schema: Schema) -> list[tuple[str, str]]:
    """(table, column) pairs that may hold names and labels: text, not a foreign key, not an enum
    (the schema summary already lists an enum's values).
    """
    return [(t.name, c.name) for t in schema.tables for c in t.columns
            if not c.references and not c.enum and any(k in c.type.upper() for k in TEXT_TYPES)]


def read_values(query: Query, columns: Iterable[tuple[str, str]]) -> dict[tuple[str, str], list[str]]:
    """Distinct values of each column through `query` (SQLTool.query); columns with too many
    values, or that fail to read, are left out (value linking is a hint, never a requirement).
    """
    values: dict[tuple[str, str], list[str]] = {}
    for table, column in columns:
        try:
            rows = query(f'SELECT DISTINCT "{column}" AS v FROM "{table}" LIMIT {MAX_DISTINCT + 1}')
        except Exception:  # noqa: BLE001 - a missing column or a down database only loses the hint
            continue
        vals = [str(r["v"]) for r in rows if r.get("v") is not None and len(str(r["v"])) <= MAX_VALUE_CHARS]
        # names and labels are short; a column of sentences (comments, notes) is free text
        if 0 < len(rows) <= MAX_DISTINCT and vals and sum(map(len, vals)) / len(vals) <= MAX_MEAN_CHARS:
            values[(table, column)] = vals
    return values


_cache: dict[str, tuple[float, ValueIndex]] = {}
_lock = threading.Lock()


def value_index(url: str, query: Query, schema: Schema) -> ValueIndex:
    """The index for a database URL, rebuilt after CACHE_SECONDS (rows written by business tools
    rarely change these low-cardinality columns, so a short staleness is harmless).
    """
    with _lock:
        cached = _cache.get(url)
        if cached and time.monotonic() - cached[0] < CACHE_SECONDS:
            return cached[1]
        index = ValueIndex(read_values(query, text_columns(schema)))
        if len(index):  # an empty index (database down) is not cached
            _cache[url] = (time.monotonic(), index)
        return index
