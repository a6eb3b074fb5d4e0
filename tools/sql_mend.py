"""Deterministic mends of a SELECT the model wrote, before the guard runs it.

Why: two mistakes of the small model return rows (none, or the wrong ones) without an error, so the
repair loop never sees them:
- a comparison with a code of a ranked scale ("P3 or more urgent" as `priority >= 'P3'`): stored
  codes compare as text, the opposite of urgency; when the question's words say which side it
  means, it is read on the scale as a list of codes;
- an anti-join written as an inner join (`JOIN employees e ON t.assignee_id = e.employee_id WHERE
  e.employee_id IS NULL`): an inner join never yields a NULL join key, so the query is empty by
  construction; the writer meant the rows with no match, a left join.

A third mistake fails with an error the repair call rarely mends (it rewrites the query and keeps
the slip): a column qualified by the wrong alias (`T2.status` where `T2` is employees and the
status is the request's). When the live schema puts that column in exactly one other table of the
same SELECT, the qualifier is that table's alias.

A fourth fails with "no such function": a date part written as MySQL writes it (`YEAR(opened_at)
= 2025`). SQLite has `strftime`, so the part becomes the integer it reads; PostgreSQL's rendering of
the part is `EXTRACT`.

The rules are sound on their own terms (the second changes only a query that cannot return a row,
the third only a query that cannot run); the scales and columns come from the semantic model and
the live schema, so no domain word is here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from tramita.base.text import fold

_COMPARISONS: dict[type[exp.Expression], str] = {exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_FLIPPED = {">": "<", ">=": "<=", "<": ">", "<=": ">="}


@dataclass(frozen=True)
class Scale:
    """A ranked column's stored values from the top down, and the words for each side of one."""

    values: tuple[str, ...]
    up: tuple[str, ...]
    down: tuple[str, ...]


def scale_side(scale: Scale, op: str, value: str, text: str, *, words_only: bool = False
               ) -> tuple[list[str], str] | None:
    """The values on the side of `value` that `op` means, and what decided the side: the question's
    words (`text`: folded words, spaced) when they name one side only, else (unless `words_only`)
    the operator read as a comparative ("worse than SEV2" is `> SEV2`); `value` itself is in for
    `>=`/`<=`. None when `value` is not on the scale, `op` is not a comparison, the side is empty,
    or only the operator could decide under `words_only`.
    """
    at = next((i for i, v in enumerate(scale.values) if fold(v) == fold(value)), None)
    if at is None or op not in _FLIPPED:
        return None
    up, down = (any(f" {fold(w)} " in text for w in words) for words in (scale.up, scale.down))
    if words_only and up == down:
        return None
    toward_top = up if up != down else op in (">", ">=")
    inclusive = op in ("<=", ">=")
    side = list(scale.values[:at + inclusive] if toward_top else scale.values[at + (not inclusive):])
    if not side:
        return None
    return side, (f"{'the words say' if up != down else 'the operator says'} toward the "
                  f"{'top' if toward_top else 'bottom'}")


def mend(sql: str, dialect: str, scales: Mapping[tuple[str, str], Scale], text: str,
         columns: Mapping[str, frozenset[str]] | None = None) -> tuple[str, list[str]]:
    """`sql` with the mends applied (module docstring), and a note per mend for the trace; the
    text as it came, and no note, when nothing applies or it does not parse (the guard reports that).
    `columns`: table -> its live columns, for the qualifier mend (none without it).
    """
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except sqlglot.errors.SqlglotError:
        return sql, []
    if tree is None:
        return sql, []
    notes: list[str] = []
    for select in list(tree.find_all(exp.Select)):
        tables = _tables(select)
        notes += _requalified(select, tables, columns or {})
        notes += _left_anti_joins(select)
        notes += _on_scales(select, tables, scales, text)
    notes += _date_parts(tree, dialect)
    return (tree.sql(dialect=dialect), notes) if notes else (sql, [])


_PARTS: dict[type[exp.Expr], str] = {exp.Year: "%Y", exp.Month: "%m", exp.Day: "%d"}


def _date_parts(tree: exp.Expr, dialect: str) -> list[str]:
    """YEAR(x), MONTH(x) and DAY(x) as the dialect reads them, in place, and a note per part: on
    SQLite the integer `strftime` gives; elsewhere the dialect's own rendering (`EXTRACT`), which
    the mended query gets when it is written again.
    """
    notes: list[str] = []
    for node in [n for kind in _PARTS for n in tree.find_all(kind)]:
        if dialect != "sqlite":
            notes.append(f"{node.sql(dialect='mysql')} read as {node.sql(dialect=dialect)}")
            continue
        fmt = _PARTS[type(node)]
        part = exp.Cast(this=exp.Anonymous(this="STRFTIME", expressions=[exp.Literal.string(fmt), node.this.copy()]),
                        to=exp.DataType.build("INTEGER"))
        notes.append(f"{node.sql(dialect='mysql')} read as {part.sql(dialect='sqlite')} (SQLite has no {node.key.upper()}())")
        node.replace(part)
    return notes


def _tables(select: exp.Select) -> dict[str, str]:
    """Alias (or name) -> table name of the tables in this SELECT's own FROM and JOINs."""
    sources = [select.args.get("from_") or select.args.get("from")] + list(select.args.get("joins") or [])
    out: dict[str, str] = {}
    for src in sources:
        table = src.this if src is not None else None
        if isinstance(table, exp.Table):
            out[table.alias_or_name] = table.name
    return out


def _own(node: exp.Expression, select: exp.Select) -> bool:
    """Whether `node` belongs to `select` itself, not to a subquery inside it."""
    return node.find_ancestor(exp.Select) is select


def _requalified(select: exp.Select, tables: Mapping[str, str], columns: Mapping[str, frozenset[str]]
                 ) -> list[str]:
    """Columns qualified by an alias whose table lacks them, moved to the one other alias whose table
    has them (module docstring); a column no table, or two, of this SELECT has stays for the guard.
    """
    notes = []
    for column in list(select.find_all(exp.Column)):
        alias = column.table
        if not alias or alias not in tables or not _own(column, select):
            continue
        held = columns.get(tables[alias])
        if held is None or column.name in held:
            continue
        owners = {a for a, t in tables.items() if column.name in columns.get(t, frozenset())}
        if len(owners) != 1:
            continue
        (owner,) = owners
        column.set("table", exp.to_identifier(owner))
        notes.append(f"{alias}.{column.name} read as {owner}.{column.name}: {tables[alias]} has no column "
                     f"{column.name}, {tables[owner]} has")
    return notes


def _left_anti_joins(select: exp.Select) -> list[str]:
    where = select.args.get("where")
    if where is None:
        return []
    notes = []
    for join in select.args.get("joins") or []:
        inner = (join.args.get("kind") or "").upper() in ("", "INNER") and not join.args.get("side")
        on, table = join.args.get("on"), join.this
        if not inner or not isinstance(on, exp.EQ) or not isinstance(table, exp.Table):
            continue
        alias = table.alias_or_name
        keys = {c.name for c in (on.this, on.expression) if isinstance(c, exp.Column) and c.table == alias}
        tested = [node for node in where.find_all(exp.Is)
                  if _own(node, select) and isinstance(node.expression, exp.Null)
                  and isinstance(node.this, exp.Column) and node.this.table == alias and node.this.name in keys
                  and not isinstance(node.parent, exp.Not)]
        if tested:
            join.set("kind", None)
            join.set("side", "LEFT")
            notes.append(f"join {table.name} made LEFT: its join key is tested IS NULL, which an inner join never yields")
    return notes


def _on_scales(select: exp.Select, tables: Mapping[str, str], scales: Mapping[tuple[str, str], Scale],
               text: str) -> list[str]:
    where = select.args.get("where")
    if where is None or not scales:
        return []
    notes = []
    for kind, op in _COMPARISONS.items():
        for node in list(where.find_all(kind)):
            if not _own(node, select):
                continue
            column, literal, said = node.this, node.expression, op
            if isinstance(column, exp.Literal):
                column, literal, said = literal, column, _FLIPPED[op]
            if not (isinstance(column, exp.Column) and isinstance(literal, exp.Literal) and literal.is_string):
                continue
            scale = _scale_of(column, tables, scales)
            # SQL the model wrote may mean the text order ("priority <= 'P3'" is P1..P3): only words decide
            found = scale_side(scale, said, literal.this, text, words_only=True) if scale is not None else None
            if found is None:
                continue
            side, why = found
            node.replace(exp.In(this=column.copy(), expressions=[exp.Literal.string(v) for v in side]))
            notes.append(f"{column.sql()} {said} {literal.sql()} read on its scale as {side} ({why})")
    return notes


def _scale_of(column: exp.Column, tables: Mapping[str, str], scales: Mapping[tuple[str, str], Scale]
              ) -> Scale | None:
    """The scale of the column's table and name; an unqualified column only when one table in scope has it."""
    if column.table:
        return scales.get((tables.get(column.table, column.table), column.name))
    found = [scales[(t, column.name)] for t in set(tables.values()) if (t, column.name) in scales]
    return found[0] if len(found) == 1 else None


def scales_of(pairs: Sequence[tuple[tuple[str, str], Scale]]) -> dict[tuple[str, str], Scale]:
    """A (table, column) -> scale map; a column two dimensions rank differently ranks nothing."""
    out: dict[tuple[str, str], Scale] = {}
    clash: set[tuple[str, str]] = set()
    for key, scale in pairs:
        if key in out and out[key] != scale:
            clash.add(key)
        out[key] = scale
    return {k: v for k, v in out.items() if k not in clash}
