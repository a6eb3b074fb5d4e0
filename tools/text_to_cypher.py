"""Text-to-Cypher with the graph's own schema prompt, dialect notes per backend, and repair."""

from __future__ import annotations

from datetime import date

from pydantic import BaseModel, Field

from tools.backends.base import QueryRun, generate_validate_repair
from tools.graph_tool import GraphTool
from tools.llm import Usage, structured_call

MAX_REPAIRS = 2


# no docstring: pydantic would put it into the JSON schema that the model is sent
class CypherAnswer(BaseModel):  # noqa: D101
    cypher: str = Field(description="one read-only openCypher query")


def iso_week(today: str) -> str:
    """`today`'s ISO week (2026-W19): the graph's on-call weeks are written that way."""
    y, w, _ = date.fromisoformat(today).isocalendar()
    return f"{y}-W{w:02d}"


def answer_cypher(question: str, tool: GraphTool, *, today: str, backend: str | None, usage: Usage) -> QueryRun:
    """Generate a read-only Cypher query for the question, then validate, run and repair it."""
    from tools.graph_tool import GraphUnavailable

    schema = tool.schema_text()
    notes = tool.dialect_notes()

    def generate(q: str) -> str:
        return structured_call("text_to_cypher", CypherAnswer, "text_to_cypher", backend=backend, usage=usage,
                               today=today, week=iso_week(today), schema_text=schema, dialect_notes=notes,
                               question=q).cypher

    return generate_validate_repair(question, generate, tool.query, fatal=(GraphUnavailable,), max_repairs=MAX_REPAIRS)
