"""Database snapshots and diffs for `final_db` and `no_other_writes`."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sqlalchemy import Engine, text

from tools.sql_schema import dataset_tables


def _norm(v: Any) -> Any:
    if isinstance(v, Decimal | float):
        return round(float(v), 6)
    return v


def snapshot(engine: Engine) -> dict[str, dict[str, tuple[Any, ...]]]:
    """{table: {primary-key-ish string: row}} for every dataset table."""
    out: dict[str, dict[str, tuple[Any, ...]]] = {}
    with engine.connect() as conn:
        for table in dataset_tables():
            rows = conn.execute(text(f"SELECT * FROM {table}")).all()
            out[table] = {str(r[0]) if table not in ("service_dependencies", "project_members") else f"{r[0]}|{r[1]}":
                          tuple(_norm(v) for v in r) for r in rows}
    return out


def diff(before: dict[str, dict[str, tuple[Any, ...]]], after: dict[str, dict[str, tuple[Any, ...]]]) -> dict[str, set[str]]:
    """Changed, added or removed keys per table."""
    changed: dict[str, set[str]] = {}
    for table in before.keys() | after.keys():
        b, a = before.get(table, {}), after.get(table, {})
        keys = {k for k in b.keys() | a.keys() if b.get(k) != a.get(k)}
        if keys:
            changed[table] = keys
    return changed


def rows_equal(got: list[list[Any]], want: list[list[Any]]) -> bool:
    """Exact rows, numbers compared numerically (612 = 612.00), NULL = None."""
    if len(got) != len(want):
        return False
    for g, w in zip(got, want, strict=True):
        if len(g) != len(w):
            return False
        for gv, wv in zip(g, w, strict=True):
            if isinstance(gv, int | float | Decimal) and isinstance(wv, int | float) and not isinstance(gv, bool):
                if abs(float(gv) - float(wv)) > 1e-6:
                    return False
            elif gv != wv:
                return False
    return True


def audited_writes(engine: Engine, before: dict[str, dict[str, tuple[Any, ...]]]) -> list[tuple[str, str]]:
    """(tool_name, target_table) of every audit row added since `before`, in audit order. Every
    business write records its table in its own audit row, in the same database transaction.
    """
    known = set(before.get("audit_log", {}))
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT audit_id, tool_name, target_table FROM audit_log ORDER BY audit_id")).all()
    return [(str(tool), str(table)) for audit_id, tool, table in rows if str(audit_id) not in known]


def only_these_writes(changes: dict[str, set[str]], executed_writes: list[str], audited: list[tuple[str, str]]) -> bool:
    """`no_other_writes`: the tables that changed are the executed writes' own (each as its audit
    row names it) plus one audit row per write, and no table changed more rows than writes hit it.
    """
    table_of = dict(audited)
    tables = [table_of.get(tool) for tool in executed_writes]
    if any(t is None for t in tables):
        return False  # a write the run reported without its audit row
    allowed = {str(t) for t in tables} | ({"audit_log"} if executed_writes else set())
    ok = set(changes) <= allowed and len(changes.get("audit_log", set())) == len(executed_writes)
    return ok and all(len(changes.get(t, set())) <= tables.count(t) for t in allowed - {"audit_log"})
