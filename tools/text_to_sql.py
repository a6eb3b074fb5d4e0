"""Text-to-SQL with schema linking, validation and a bounded repair loop.

Measured here: the small model's SQL failures are mostly syntax errors and wrong names, so the schema
prompt holds only the linked tables, every query passes SQLTool's validator (read-only by
construction), and a failure is fed back to the model at most twice.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

from tools.backends.base import QueryRun, generate_validate_repair
from tools.llm import Usage, structured_call
from tools.sql_tool import SQLTool

MAX_REPAIRS = 2


# no docstring: pydantic would put it into the JSON schema that the model is sent
class SQLAnswer(BaseModel):  # noqa: D101
    sql: str = Field(description="one read-only SELECT statement")


def answer_sql(question: str, tool: SQLTool, *, today: str, backend: str | None, usage: Usage,
               mend: Callable[[str], tuple[str, list[str]]] | None = None) -> QueryRun:
    """Generate a SELECT for the question over the linked schema, then validate, run and repair it.
    `mend`: deterministic fixes applied to every generated query first (the semantic layer's
    `mend_sql`); their notes go to `QueryRun.mended`.
    """
    from tools.database import DatabaseUnavailable

    tables = tool.link_schema(question)
    schema = tool.schema_summary(max_chars=3000, tables=tables or None)
    hints = _hints(tool, question, tables)
    dialect = "PostgreSQL" if tool.dialect == "postgres" else "SQLite"

    mended: list[str] = []

    def generate(q: str) -> str:
        sql = structured_call("text_to_sql", SQLAnswer, "text_to_sql", backend=backend, usage=usage, dialect=dialect,
                              today=today, schema_text=schema, hints=hints, question=q).sql
        if mend is None:
            return sql
        sql, notes = mend(sql)
        mended.extend(notes)
        return sql

    run = generate_validate_repair(question, generate, tool.query, fatal=(DatabaseUnavailable,),
                                   max_repairs=MAX_REPAIRS)
    run.mended = mended
    return run


def _hints(tool: SQLTool, question: str, tables: list[str]) -> str:
    """The join conditions between the linked tables and the stored values the question names:
    the two mistakes the small model makes most (measured on this project's questions) are wrong joins and wrong columns.
    """
    lines = []
    joins = tool.join_hints(tables)
    if joins:
        lines.append("Joins: " + "; ".join(joins))
    values = tool.value_hints(question, tables)
    if values:
        lines.append("Values named in the question: " + "; ".join(values))
    return "\n".join(lines)
