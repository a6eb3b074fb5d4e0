"""Small read helpers shared by the handlers (same SQL on SQLite and PostgreSQL)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, text

from tools.business.audit import jsonable
from tools.business.catalog import Localized, part


def fetch_one(conn: Connection, sql: str, **params: Any) -> dict[str, Any] | None:
    """The first row as a dict of JSON-friendly values (dates as ISO text), or None."""
    row = conn.execute(text(sql), params).mappings().first()
    return None if row is None else jsonable(dict(row))


def money(value: Any) -> Decimal:
    """A NUMERIC column (float on SQLite, Decimal on PostgreSQL) as an exact Decimal."""
    return value if isinstance(value, Decimal) else Decimal(str(value if value is not None else 0))


def employee(conn: Connection, employee_id: str | None) -> dict[str, Any] | None:
    """The employee's id, name, team and approval limit, or None for no id or an unknown one."""
    if not employee_id:
        return None
    return fetch_one(conn, "SELECT employee_id, full_name, team_id, approval_limit_usd FROM employees "
                           "WHERE employee_id = :id", id=employee_id)


def person(conn: Connection, employee_id: str | None) -> Localized:
    """"Lucas Oliveira (E047)", or "nobody (unassigned)" for NULL."""
    row = employee(conn, employee_id)
    if row is None:
        return part("unassigned") if not employee_id else (str(employee_id), str(employee_id))
    label = f"{row['full_name']} ({row['employee_id']})"
    return label, label
