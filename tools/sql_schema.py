"""The NovaOps relational schema as data: tables, columns, comments, enums and foreign keys.

Text-to-SQL with a small model fails mostly on wrong table and column names (measured on this project's questions), so the
prompt gets a compact summary built from `schema.sql` itself (its comments are the documentation)
and only the tables a question needs (schema linking). Both read the same parsed schema, which
sqlglot extracts from the DDL; the `--` comments, which sqlglot does not keep reliably, are taken
from the lines of each CREATE TABLE.
"""

from __future__ import annotations

import re
import unicodedata
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import sqlglot
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlglot import exp

from tramita.base.paths import POLICIES_DIR, SAMPLE_DIR

__all__ = [
    "SYNONYMS_FILE",
    "Column",
    "Schema",
    "SynonymsFile",
    "Table",
    "dataset_tables",
    "join_hints",
    "link_schema",
    "load_schema",
    "load_synonyms",
    "schema_summary",
]

SYNONYMS_FILE = POLICIES_DIR / "sql_synonyms.yaml"
_CREATE_RE = re.compile(r"^\s*CREATE\s+TABLE\s+(\w+)", re.IGNORECASE)


@dataclass(frozen=True)
class Column:
    """One column of schema.sql: type, `--` comment, key, foreign key and CHECK-IN values."""

    name: str
    type: str
    comment: str = ""
    primary_key: bool = False
    references: str | None = None  # "table.column"
    enum: tuple[str, ...] = ()


@dataclass(frozen=True)
class Table:
    """One CREATE TABLE of schema.sql with the comment lines right above it."""

    name: str
    comment: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()

    @property
    def references(self) -> set[str]:
        """Tables this one points at through foreign keys."""
        return {c.references.split(".")[0] for c in self.columns if c.references}


@dataclass(frozen=True)
class Schema:
    """The parsed schema.sql: tables in CREATE order, plus a lookup by name."""

    tables: tuple[Table, ...]
    by_name: dict[str, Table] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        """Fill `by_name` by mutating it: a frozen dataclass cannot assign the attribute."""
        self.by_name.update({t.name: t for t in self.tables})

    @property
    def names(self) -> list[str]:
        """The table names in CREATE order, which is the load order."""
        return [t.name for t in self.tables]


def _comment_blocks(text: str) -> dict[str, tuple[str, dict[str, str]]]:
    """Per CREATE TABLE: the comment lines right above it and each column line's `--` comment."""
    lines = text.splitlines()
    out: dict[str, tuple[str, dict[str, str]]] = {}
    for i, line in enumerate(lines):
        match = _CREATE_RE.match(line)
        if not match:
            continue
        above: list[str] = []
        j = i - 1
        while j >= 0 and lines[j].strip().startswith("--"):
            above.insert(0, lines[j].strip()[2:].strip())
            j -= 1
        cols: dict[str, str] = {}
        k = i + 1
        while k < len(lines) and not lines[k].strip().startswith(");"):
            body, sep, comment = lines[k].partition("--")
            words = body.split()
            if sep and words:
                cols[words[0]] = comment.strip()
            k += 1
        out[match.group(1)] = (" ".join(above), cols)
    return out


def _in_list(check: exp.Expression, column: str) -> tuple[str, ...]:
    """Values of `CHECK (column IN ('a', 'b'))`, or () for other checks."""
    for node in check.find_all(exp.In):
        target = node.this
        if isinstance(target, exp.Column) and target.name == column:
            return tuple(v.name for v in node.expressions if isinstance(v, exp.Literal))
    return ()


def _parse_table(create: exp.Create, comments: tuple[str, dict[str, str]]) -> Table:
    schema = create.this
    assert isinstance(schema, exp.Schema)
    name = schema.this.name
    table_comment, column_comments = comments
    columns: list[Column] = []
    primary: tuple[str, ...] = ()
    for item in schema.expressions:
        if isinstance(item, exp.ColumnDef):
            pk = False
            ref: str | None = None
            enum: tuple[str, ...] = ()
            for constraint in item.constraints:
                kind = constraint.kind
                if isinstance(kind, exp.PrimaryKeyColumnConstraint):
                    pk = True
                elif isinstance(kind, exp.Reference):
                    target = kind.this  # Schema(this=Table, expressions=[Identifier])
                    ref_table = target.this.name if isinstance(target, exp.Schema) else target.name
                    ref_cols = [c.name for c in target.expressions] if isinstance(target, exp.Schema) else []
                    ref = f"{ref_table}.{ref_cols[0] if ref_cols else ''}"
                elif isinstance(kind, exp.CheckColumnConstraint):
                    enum = _in_list(kind, item.name) or enum
            col_type = item.args["kind"].sql() if item.args.get("kind") else ""
            columns.append(Column(item.name, col_type, column_comments.get(item.name, ""), pk, ref, enum))
            if pk:
                primary = (item.name,)
        elif isinstance(item, exp.PrimaryKey):
            primary = tuple(e.name for e in item.expressions)
    columns = [Column(c.name, c.type, c.comment, c.primary_key or c.name in primary, c.references, c.enum)
               for c in columns]
    return Table(name, table_comment, tuple(columns), primary)


@lru_cache(maxsize=8)
def load_schema(path: Path = SAMPLE_DIR / "schema.sql") -> Schema:
    """Parse `schema.sql` (tables in CREATE order = load order)."""
    text = path.read_text(encoding="utf-8")
    comments = _comment_blocks(text)
    tables = [
        _parse_table(stmt, comments.get(stmt.this.this.name, ("", {})))
        for stmt in sqlglot.parse(text, read="postgres")
        if isinstance(stmt, exp.Create) and stmt.kind == "TABLE" and isinstance(stmt.this, exp.Schema)
    ]
    return Schema(tuple(tables))


def dataset_tables(path: Path = SAMPLE_DIR / "schema.sql") -> list[str]:
    """The dataset's table names in load order."""
    return load_schema(path).names


# --------------------------------------------------------------------------------------- summary

def _short(text: str, limit: int) -> str:
    text = text.strip().rstrip(".")
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _column_text(col: Column, comment: str = "") -> str:
    text = col.name + (" PK" if col.primary_key else "")
    if col.references:
        text += "→" + col.references.split(".")[0]
    if col.enum:
        text += " [" + "|".join(col.enum) + "]"
    elif comment:
        text += f" ({comment})"
    return text


def _render(tables: list[Table], comments: dict[tuple[str, str], str], table_chars: int) -> str:
    lines = [_HEADER]
    for t in tables:
        cols = ", ".join(_column_text(c, comments.get((t.name, c.name), "")) for c in t.columns)
        line = f"{t.name}({cols})"
        if t.comment and table_chars:
            line += f" -- {_short(t.comment, table_chars)}"
        lines.append(line)
    return "\n".join(lines)


def _comment_limit(col: Column) -> int:
    """A value list cut in the middle misleads, so lists get more room than prose."""
    return 100 if "|" in col.comment else 45


def _comment_priority(col: Column) -> int:
    """Value lists and examples ('A' | 'B', 'T01'..'T08') help a model most, then the rest."""
    if "|" in col.comment:
        return 0
    if "'" in col.comment or any(ch.isdigit() for ch in col.comment):
        return 1
    return 2


_HEADER = "Money in USD (_usd); DATE 'YYYY-MM-DD'; TIMESTAMP 'YYYY-MM-DD HH:MM:SS'; today 2026-05-15."


def schema_summary(max_chars: int = 3000, tables: list[str] | None = None,
                   schema: Schema | None = None) -> str:
    """A compact, prompt-ready description: one line per table with its columns, primary keys,
    foreign keys (→table), enum values and the table's comment; then column comments are added,
    value lists and examples first, while the text stays within `max_chars`.
    """
    schema = schema or load_schema()
    unknown = sorted(set(tables or ()) - set(schema.names))
    if unknown:
        raise ValueError(f"unknown table(s) for schema_summary: {', '.join(unknown)}")
    chosen = [schema.by_name[n] for n in schema.names if tables is None or n in tables]
    candidates = sorted(
        ((_comment_priority(c), i, t.name, c) for i, t in enumerate(chosen) for c in t.columns
         if c.comment and not c.enum and not c.references),
        key=lambda item: (item[0], item[1]))
    best: tuple[int, int, str] | None = None
    for table_chars in (90, 60, 45, 30, 0):
        text = _render(chosen, {}, table_chars)
        if len(text) > max_chars:
            continue
        comments: dict[tuple[str, str], str] = {}
        worth = 0
        for prio, _i, table, col in candidates:
            comments[(table, col.name)] = _short(col.comment, _comment_limit(col))
            trial = _render(chosen, comments, table_chars)
            if len(trial) <= max_chars:
                text, worth = trial, worth + (30, 3, 1)[prio]
            else:
                del comments[(table, col.name)]
        worth += len(chosen) * table_chars // 8  # table comments carry counts and caveats
        if best is None or (worth, table_chars) > best[:2]:
            best = (worth, table_chars, text)
    if best is None:
        text = _render(chosen, {}, 0)
        return text[: max_chars - 1] + "…"
    return best[2]


def join_hints(tables: list[str], schema: Schema | None = None) -> list[str]:
    """`a.x = b.y` for every foreign key between the chosen tables. The summary's `x→b` arrows
    say the same, but the 1.5B model joins more reliably when the ON clause is spelled out.
    """
    schema = schema or load_schema()
    chosen = set(tables)
    hints: list[str] = []
    for name in schema.names:
        if name not in chosen:
            continue
        for col in schema.by_name[name].columns:
            if col.references and col.references.split(".")[0] in chosen:
                hints.append(f"{name}.{col.name} = {col.references}")
    return hints


# ------------------------------------------------------------------------------- schema linking

class SynonymsFile(BaseModel):
    """`policies/sql_synonyms.yaml`: question words (pt/en) → tables, and graph-only words."""

    model_config = ConfigDict(extra="forbid")
    synonyms: dict[str, list[str]] = Field(description="word or phrase → tables it points at")
    graph_only: list[str] = Field(default_factory=list,
                                  description="words whose data lives only in the graph")


def _fold(text: str) -> str:
    """Lowercase without accents, so 'orçamento' matches 'orcamento'."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def _stem(word: str) -> str:
    """A crude plural stripper, the same on both sides of every comparison."""
    for suffix in ("oes", "aes", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)] + ("ao" if suffix in ("oes", "aes") else "")
    return word


def _words(text: str) -> list[str]:
    return [_stem(w) for w in re.findall(r"[a-z0-9]+", _fold(text))]


@lru_cache(maxsize=4)
def load_synonyms(path: Path = SYNONYMS_FILE, schema_path: Path = SAMPLE_DIR / "schema.sql") -> SynonymsFile:
    """Load and validate the synonyms file; errors name the file and the field."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        data = SynonymsFile.model_validate(raw)
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read: {exc}") from exc
    except ValidationError as exc:
        fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"{path}: {fields}") from exc
    known = set(dataset_tables(schema_path))
    for word, tables in data.synonyms.items():
        bad = [t for t in tables if t not in known]
        if bad:
            raise ValueError(f"{path}: synonyms.{word}: unknown table(s) {', '.join(bad)}")
    return data


def _fk_graph(schema: Schema) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {t.name: set() for t in schema.tables}
    for table in schema.tables:
        for other in table.references:
            if other != table.name and other in graph:
                graph[table.name].add(other)
                graph[other].add(table.name)
    return graph


def _path(graph: dict[str, set[str]], start: str, goal: str) -> list[str]:
    """Shortest FK path (breadth-first, neighbours in sorted order for determinism)."""
    previous: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            break
        for nxt in sorted(graph[node]):
            if nxt not in previous:
                previous[nxt] = node
                queue.append(nxt)
    if goal not in previous:
        return []
    path: list[str] = []
    cur: str | None = goal
    while cur is not None:
        path.append(cur)
        cur = previous[cur]
    return path[::-1]


def _table_scores(question: str, schema: Schema, synonyms: SynonymsFile) -> dict[str, float]:
    words = _words(question)
    word_set = set(words)
    folded = " " + " ".join(words) + " "
    scores: dict[str, float] = {t.name: 0.0 for t in schema.tables}
    graph_only = {" ".join(_words(w)) for w in synonyms.graph_only}
    for term, tables in synonyms.synonyms.items():
        key = " ".join(_words(term))
        if key and key not in graph_only and f" {key} " in folded:
            for t in tables:
                scores[t] += 3.0
    for table in schema.tables:
        name_words = set(_words(table.name.replace("_", " ")))
        shared = name_words & word_set
        # all of a table's name words → strong; part of a compound name ("budget" of
        # budget_requests) → weak, so that the plain table wins
        scores[table.name] += 2.0 * len(shared) if shared == name_words else 0.5 * len(shared)
        for col in table.columns:
            if col.references and col.references.split(".")[0] != table.name:
                continue  # a foreign key names the other table, not this one
            col_words = set(_words(col.name.replace("_", " "))) - {"id", "at", "usd", "name"}
            if col_words and col_words <= word_set:
                scores[table.name] += 1.0
            if any(_stem(_fold(v)) in word_set for v in col.enum):
                scores[table.name] += 0.5
        comment_words = {w for w in _words(table.comment) if len(w) > 3}
        scores[table.name] += 0.25 * len(comment_words & word_set)
    return scores


LINK_RELATIVE = 0.35


def link_schema(question: str, k: int = 6, schema: Schema | None = None,
                synonyms: SynonymsFile | None = None, relative: float = LINK_RELATIVE) -> list[str]:
    """Tables relevant to `question`, in schema order: the top-k by lexical overlap with table and
    column names, comments, enum values and the pt/en synonyms, plus every table on the shortest
    foreign-key path between two chosen ones (so the join can be written). With no overlap at all,
    every table (the caller then falls back to the whole summary).

    A table scoring under `relative` × the best score is left out: a stray word ("approved",
    "quarter") otherwise pulls in a table that the 1.5B model then joins by mistake. On the dev
    questions this drops 17 of 27 extra tables and loses no gold table (benchmarks/schema_linking.py).
    """
    schema = schema or load_schema()
    synonyms = synonyms or load_synonyms()
    scores = _table_scores(question, schema, synonyms)
    floor = max(1.0, relative * max(scores.values(), default=0.0))
    ranked = sorted((s, -i, t) for i, (t, s) in enumerate(scores.items()) if s >= floor)
    chosen = [t for _, _, t in sorted(ranked, reverse=True)[:k]]
    if not chosen:
        return schema.names
    graph = _fk_graph(schema)
    needed = set(chosen)
    for i, a in enumerate(chosen):
        for b in chosen[i + 1:]:
            needed.update(_path(graph, a, b))
    return [n for n in schema.names if n in needed]
