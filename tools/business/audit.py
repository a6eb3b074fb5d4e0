"""The write path shared by every business tool: one transaction, one audit row, one idempotency key.

`run_write` is the only way a tool writes. Inside ONE database transaction it (1) replays a stored
result when the idempotency key was already used, (2) re-runs the tool's checks, (3) does the
business write, (4) passes the `after_business_write` crash point, (5) inserts the audit_log row and
(6) records the key in `tool_executions`. Writers are serialised (SQLite: BEGIN IMMEDIATE;
PostgreSQL: a SHARE ROW EXCLUSIVE lock on audit_log), so "max + 1" ids never collide and a retried
turn never writes twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, Engine, text

from tools.business.base import ToolContext, ToolError, ToolResult
from tramita.base.faults import crash_point

EXECUTIONS_DDL = (
    "CREATE TABLE IF NOT EXISTS tool_executions ("
    "idempotency_key TEXT PRIMARY KEY, tool_name TEXT NOT NULL, target_table TEXT, target_id TEXT, "
    "result_json TEXT NOT NULL, executed_at TEXT NOT NULL)"
)
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S"


def ensure_execution_table(engine: Engine) -> None:
    """Create `tool_executions` if it is not there (same DDL as the SQL loader's)."""
    with engine.begin() as conn:
        conn.execute(text(EXECUTIONS_DDL))


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """One serialised write transaction: committed on exit, rolled back on any exception."""
    if engine.dialect.name == "sqlite":
        # pysqlite would BEGIN lazily (DEFERRED); AUTOCOMMIT hands the transaction to us so that
        # BEGIN IMMEDIATE takes the write lock before the first read.
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.exec_driver_sql("ROLLBACK")
                raise
            conn.exec_driver_sql("COMMIT")
        return
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("LOCK TABLE audit_log IN SHARE ROW EXCLUSIVE MODE"))
        yield conn


def canonical_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as audited: unset (None) ones dropped, integral floats as ints (20000, not
    20000.0), Decimals as numbers.
    """
    out: dict[str, Any] = {}
    for key, value in args.items():
        if value is None:
            continue
        if isinstance(value, Decimal):
            value = float(value)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        out[key] = value
    return out


def arguments_json(args: Mapping[str, Any]) -> str:
    """The audit_log's arguments_json: canonical and key-sorted, so the same call always reads the same."""
    return json.dumps(canonical_args(args), sort_keys=True, ensure_ascii=False)


def jsonable(value: Any) -> Any:
    """Database values as JSON: Decimal -> float, dates -> ISO text, timestamps -> 'YYYY-MM-DD HH:MM:SS'."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime):
        return value.strftime(TIMESTAMP_FORMAT)
    if isinstance(value, date):
        return value.isoformat()
    return value


def next_id(conn: Connection, table: str, column: str, prefix: str, width: int) -> str:
    """Numeric suffix of the current maximum + 1, same prefix and width (TCK-1151, EXP-0301)."""
    if not (table.isidentifier() and column.isidentifier() and prefix.isalnum()):
        raise ValueError(f"bad id spec {table}.{column} {prefix!r}")
    start = len(prefix) + 2  # SQL strings are 1-based; skip "PREFIX-"
    row = conn.execute(
        text(f"SELECT MAX(CAST(SUBSTR({column}, {start}) AS INTEGER)) FROM {table} WHERE {column} LIKE :like"),
        {"like": f"{prefix}-%"},
    ).scalar()
    return f"{prefix}-{int(row or 0) + 1:0{width}d}"


def _stored_result(conn: Connection, key: str) -> ToolResult | None:
    row = conn.execute(text("SELECT result_json FROM tool_executions WHERE idempotency_key = :k"), {"k": key}).first()
    if row is None:
        return None
    stored = json.loads(row[0])
    return ToolResult(stored["message_pt"], stored["message_en"], stored.get("data", {}),
                      stored.get("target_table"), stored.get("target_id"), replayed=True)


def find_execution(engine: Engine, key: str) -> ToolResult | None:
    """The stored result of an idempotency key, if that action already ran (read-only)."""
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            exists = conn.execute(text("SELECT 1 FROM sqlite_master WHERE type='table' AND name='tool_executions'")).first()
        else:
            exists = conn.execute(text("SELECT to_regclass('tool_executions')")).scalar()
        return _stored_result(conn, key) if exists else None


def first_error(errors: Mapping[str, ToolError]) -> ToolError | None:
    """The first error of a check, in the order the check found them: a write raises only that one."""
    return next(iter(errors.values()), None)


def run_write(ctx: ToolContext, tool_name: str, args: Mapping[str, Any], idempotency_key: str,
              check: Callable[[Connection], Mapping[str, ToolError]],
              write: Callable[[Connection], ToolResult]) -> ToolResult:
    """Execute one confirmed write (steps in the module doc). Raises the first ToolError of `check`;
    any exception rolls everything back.
    """
    if not idempotency_key:
        raise ValueError("a write needs an idempotency key")
    with write_transaction(ctx.engine) as conn:
        conn.execute(text(EXECUTIONS_DDL))
        replay = _stored_result(conn, idempotency_key)
        if replay is not None:
            return replay
        error = first_error(check(conn))
        if error is not None:
            raise error
        result = write(conn)
        if not (result.target_table and result.target_id):
            raise RuntimeError(f"{tool_name}: the write did not say which row it wrote")
        crash_point("after_business_write")
        audit_id = int(conn.execute(text("SELECT COALESCE(MAX(audit_id), 0) FROM audit_log")).scalar() or 0) + 1
        now = ctx.now.strftime(TIMESTAMP_FORMAT)
        conn.execute(
            text("INSERT INTO audit_log (audit_id, occurred_at, actor_id, tool_name, target_table, target_id, "
                 "arguments_json, outcome) VALUES (:id, :at, :actor, :tool, :tt, :tid, :args, 'success')"),
            {"id": audit_id, "at": now, "actor": ctx.user_id, "tool": tool_name, "tt": result.target_table,
             "tid": result.target_id, "args": arguments_json(args)},
        )
        result.data = jsonable({**result.data, "audit_id": audit_id})
        stored = {"message_pt": result.message_pt, "message_en": result.message_en, "data": result.data,
                  "target_table": result.target_table, "target_id": result.target_id}
        conn.execute(
            text("INSERT INTO tool_executions (idempotency_key, tool_name, target_table, target_id, result_json, "
                 "executed_at) VALUES (:k, :tool, :tt, :tid, :res, :at)"),
            {"k": idempotency_key, "tool": tool_name, "tt": result.target_table, "tid": result.target_id,
             "res": json.dumps(stored, sort_keys=True, ensure_ascii=False), "at": now},
        )
    return result
