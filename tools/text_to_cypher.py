"""Text-to-Cypher with the graph's own schema prompt, dialect notes per backend, and repair."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any

from pydantic import BaseModel, Field

from tools.graph_tool import GraphTool
from tools.llm import Usage, structured_call
from tramita.prompts import render

MAX_REPAIRS = 2


class CypherAnswer(BaseModel):
    cypher: str = Field(description="one read-only openCypher query")


@dataclass
class CypherRun:
    cypher: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 0
    error: str | None = None


def iso_week(today: str) -> str:
    y, w, _ = date.fromisoformat(today).isocalendar()
    return f"{y}-W{w:02d}"


def answer_cypher(question: str, tool: GraphTool, *, today: str, backend: str | None, usage: Usage) -> CypherRun:
    schema = tool.schema_text()
    notes = tool.dialect_notes()
    run = CypherRun()
    q = question
    for attempt in range(MAX_REPAIRS + 1):
        out = structured_call("text_to_cypher", CypherAnswer, "text_to_cypher", backend=backend, usage=usage,
                              today=today, week=iso_week(today), schema_text=schema, dialect_notes=notes,
                              question=q)
        run.attempts = attempt + 1
        run.cypher = out.cypher
        try:
            run.rows = tool.query(out.cypher)
            run.error = None
            return run
        except Exception as exc:  # noqa: BLE001 - UnsafeCypherError, CypherExecutionError → repair
            from tools.graph_tool import GraphUnavailable

            run.error = f"{type(exc).__name__}: {exc}"[:400]
            if isinstance(exc, GraphUnavailable):
                return run
        q = f"{question}\n{render('repair', query=out.cypher, error=run.error)}"
    return run
