"""Reference kinds: which table a human label (a person's name, a team's name) is looked up in.

`policies/references.yaml` names, per `x-resolve` kind, the table, its id column and the label
columns a person may type instead of the id. Every lookup query is built here from that file, with
validated identifiers that SQLAlchemy quotes for the dialect, so no table or column name of the
dataset is written in code. The name matching itself lives with its callers:
`tools.business.resolvers.resolve_reference` (one typed value -> one id) and the extraction
gazetteer in `tramita.core.extraction` (names found inside a message).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import Connection, Engine, Select, column, literal_column, select, table

from tramita.base.paths import POLICIES_DIR
from tramita.base.policyfile import PolicyError, load_model

REFERENCES_FILE = POLICIES_DIR / "references.yaml"
IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
KIND_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def check_identifier(name: str) -> str:
    """Return `name` when it is a plain SQL identifier (`^[A-Za-z_][A-Za-z0-9_]*$`), else raise ValueError."""
    if not isinstance(name, str) or not IDENTIFIER_RE.match(name):
        raise ValueError(f"{name!r} is not a plain SQL identifier (letters, digits and _, not starting with a digit)")
    return name


class ReferenceKind(BaseModel):
    """One `x-resolve` kind: the table, its id column and the columns that hold human labels."""

    model_config = ConfigDict(extra="forbid")

    table: str = Field(description="table whose rows the kind names")
    id: str = Field(description="column holding the canonical id the tools store")
    labels: list[str] = Field(min_length=1, description="columns a person may type instead of the id; the first is shown")

    @field_validator("table", "id")
    @classmethod
    def _identifier(cls, value: str) -> str:
        return check_identifier(value)

    @field_validator("labels")
    @classmethod
    def _label_identifiers(cls, value: list[str]) -> list[str]:
        return [check_identifier(v) for v in value]

    @property
    def reference(self) -> str:
        """The `x-references` value (`table.column`) a parameter of this kind must carry."""
        return f"{self.table}.{self.id}"

    def query(self) -> Select[Any]:
        """SELECT id, label1, label2, ... FROM table: identifiers quoted by SQLAlchemy for the dialect."""
        names = [self.id, *self.labels]
        target = table(self.table, *[column(n) for n in dict.fromkeys(names)])
        return select(*[target.c[n] for n in names])


class ReferenceFile(BaseModel):
    """`policies/references.yaml`: the reference kinds by name."""

    model_config = ConfigDict(extra="forbid")

    kinds: dict[str, ReferenceKind] = Field(description="x-resolve kind -> where its rows live")

    @field_validator("kinds")
    @classmethod
    def _kind_names(cls, value: dict[str, ReferenceKind]) -> dict[str, ReferenceKind]:
        bad = [k for k in value if not KIND_RE.match(k)]
        if bad:
            raise ValueError(f"kind names must be snake_case: {bad}")
        return value


@dataclass(frozen=True)
class ReferenceCandidate:
    """One row a reference may name: its id, its display label and every form a person may type."""

    id: str
    label: str
    names: tuple[str, ...]


@lru_cache(maxsize=8)
def load_references(path: Path = REFERENCES_FILE) -> ReferenceFile:
    """The reference kinds of `path` (cached per path); errors name the file and the field."""
    loaded: ReferenceFile = load_model(path, ReferenceFile)
    return loaded


def reference_kind(kind: str, path: Path = REFERENCES_FILE) -> ReferenceKind:
    """The kind named `kind`; PolicyError (a ValueError) naming the file and the known kinds when absent."""
    kinds = load_references(path).kinds
    if kind not in kinds:
        raise PolicyError(f"{path}: no reference kind {kind!r}; kinds: {', '.join(sorted(kinds)) or 'none'}")
    return kinds[kind]


def reference_candidates(kind: str, engine: Engine, path: Path = REFERENCES_FILE) -> list[ReferenceCandidate]:
    """Every row of the kind's table as a candidate.

    A candidate's names are its id, each non-empty label and the id with `-`/`_` read as spaces
    ("expense-portal" -> "expense portal").
    """
    spec = reference_kind(kind, path)
    with engine.connect() as conn:
        rows = conn.execute(spec.query()).all()
    out: list[ReferenceCandidate] = []
    for row in rows:
        ident = str(row[0])
        labels = [str(v) for v in row[1:] if v is not None and str(v).strip()]
        spaced = re.sub(r"[-_]+", " ", ident)
        names = tuple(dict.fromkeys([ident, *labels, spaced]))
        out.append(ReferenceCandidate(ident, labels[0] if labels else ident, names))
    return out


def unique_titles(kind: str, columns: list[str], engine: Engine, path: Path = REFERENCES_FILE
                  ) -> list[tuple[str, str]]:
    """(id, value) for each value of the kind's `columns` that exactly one row holds: a title that
    names one row ("CTO", "Head of Data") the way a label does. A value two rows share names no one.
    """
    spec = reference_kind(kind, path)
    out: list[tuple[str, str]] = []
    with engine.connect() as conn:  # one connection for every title column
        for name in columns:
            target = table(spec.table, column(spec.id), column(check_identifier(name)))
            owners: dict[str, set[str]] = {}
            for ident, value in conn.execute(select(target.c[spec.id], target.c[name])):
                if value is not None and str(value).strip():
                    owners.setdefault(str(value).strip(), set()).add(str(ident))
            out += [(next(iter(ids)), value) for value, ids in owners.items() if len(ids) == 1]
    return out


def row_exists(conn: Connection, table_name: str, column_name: str, value: Any) -> bool:
    """Whether `table_name` has a row whose `column_name` equals `value` (identifiers validated and quoted)."""
    target = table(check_identifier(table_name), column(check_identifier(column_name)))
    query: Select[Any] = select(literal_column("1")).select_from(target).where(target.c[column_name] == value).limit(1)
    return conn.execute(query).first() is not None
