"""Text-to-SQL with schema linking, validation and a bounded repair loop.

FACTS.md: the small model's SQL failures are mostly syntax errors and wrong names, so the schema
prompt holds only the linked tables, every query passes SQLTool's validator (read-only by
construction), and a failure is fed back to the model at most twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from tools.llm import Usage, structured_call
from tools.sql_tool import SQLTool
from tramita.prompts import render

MAX_REPAIRS = 2


class SQLAnswer(BaseModel):
    sql: str = Field(description="one read-only SELECT statement")


@dataclass
class SQLRun:
    sql: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 0
    error: str | None = None


def answer_sql(question: str, tool: SQLTool, *, today: str, backend: str | None, usage: Usage) -> SQLRun:
    tables = tool.link_schema(question)
    schema = tool.schema_summary(max_chars=3000, tables=tables or None)
    hints = _hints(tool, question, tables)
    dialect = "PostgreSQL" if tool.dialect == "postgres" else "SQLite"
    run = SQLRun()
    out = structured_call("text_to_sql", SQLAnswer, "text_to_sql", backend=backend, usage=usage, dialect=dialect,
                          today=today, schema_text=schema, hints=hints, question=question)
    sql = out.sql
    for attempt in range(MAX_REPAIRS + 1):
        run.attempts = attempt + 1
        run.sql = sql
        try:
            run.rows = tool.query(sql)
            run.error = None
            return run
        except Exception as exc:  # noqa: BLE001 - UnsafeSQLError, SQLExecutionError: repair with the message
            from tools.database import DatabaseUnavailable

            if isinstance(exc, DatabaseUnavailable):
                run.error = str(exc)
                return run
            run.error = f"{type(exc).__name__}: {exc}"[:400]
        if attempt == MAX_REPAIRS:
            break
        fixed = structured_call("text_to_sql", SQLAnswer, "text_to_sql", backend=backend, usage=usage, dialect=dialect,
                                today=today, schema_text=schema, hints=hints,
                                question=f"{question}\n{render('repair', query=sql, error=run.error)}")
        sql = fixed.sql
    return run


def _hints(tool: SQLTool, question: str, tables: list[str]) -> str:
    """The join conditions between the linked tables and the stored values the question names:
    the two mistakes the small model makes most (FACTS.md) are wrong joins and wrong columns."""
    lines = []
    joins = tool.join_hints(tables)
    if joins:
        lines.append("Joins: " + "; ".join(joins))
    values = tool.value_hints(question, tables)
    if values:
        lines.append("Values named in the question: " + "; ".join(values))
    return "\n".join(lines)
