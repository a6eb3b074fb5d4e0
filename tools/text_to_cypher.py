"""Text-to-Cypher with the graph's own schema prompt, dialect notes per backend, and repair."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import Any

from pydantic import BaseModel, Field

from tools.backends.base import QueryRun, generate_validate_repair
from tools.graph_tool import GraphTool
from tools.llm import Usage, structured_call, warm

MAX_REPAIRS = 2


# no docstring: pydantic would put it into the JSON schema that the model is sent
class CypherAnswer(BaseModel):  # noqa: D101
    cypher: str = Field(description="one read-only openCypher query")


def iso_week(today: str) -> str:
    """`today`'s ISO week (2026-W19): the graph's on-call weeks are written that way."""
    y, w, _ = date.fromisoformat(today).isocalendar()
    return f"{y}-W{w:02d}"


class UnsaidValueError(ValueError):
    """A generated query names a record the question does not (fed back to the repair prompt)."""


class MissedLabelError(ValueError):
    """A generated query reads none of the records the question asks for (another store may hold them)."""


def answer_cypher(question: str, tool: GraphTool, *, today: str, backend: str | None, usage: Usage,
                  unsaid: Callable[[str], list[str]] | None = None) -> QueryRun:
    """Generate a read-only Cypher query for the question, then validate, run and repair it.
    `unsaid` lists the values a query names that the question does not: their conditions are left
    out (`drop_conditions`, noted in `QueryRun.mended`), and a query where that cannot be done is
    not run but repaired, like one the guard refuses.
    """
    from tools.cypher_guard import drop_conditions
    from tools.graph_tool import GraphUnavailable

    static = _static(tool, today)
    mended: list[str] = []
    checked: dict[str, list[str]] = {}  # query -> its unsaid values: `generate` checks, `execute` reads

    def named_in(query: str) -> list[str]:
        if query not in checked:
            checked[query] = unsaid(query) if unsaid is not None else []
        return checked[query]

    def generate(q: str) -> str:
        cypher = structured_call("text_to_cypher", CypherAnswer, "text_to_cypher", backend=backend, usage=usage,
                                 question=q, **static).cypher
        named = named_in(cypher)
        fixed = drop_conditions(cypher, named) if named else None
        if fixed is not None and not named_in(fixed):
            mended.append(f"left out the conditions on {', '.join(repr(v) for v in named)}: the question does "
                          "not name them")
            return fixed
        return cypher

    def execute(query: str) -> list[dict[str, Any]]:
        named = named_in(query)
        if named:
            raise UnsaidValueError(f"the query names {', '.join(repr(v) for v in named)}, which the question "
                                   "does not name; leave that condition out")
        return tool.query(query)

    run = generate_validate_repair(question, generate, execute, fatal=(GraphUnavailable,), max_repairs=MAX_REPAIRS)
    run.mended = mended
    return run


def _static(tool: GraphTool, today: str) -> dict[str, str]:
    """The prompt's static prefix values: the same for every question asked on `today`."""
    return {"today": today, "week": iso_week(today), "schema_text": tool.schema_text(),
            "dialect_notes": tool.dialect_notes()}


def warm_cypher(tool: GraphTool, *, today: str, backend: str | None) -> object:
    """Evaluate the text-to-Cypher prompt's static prefix for `today` ahead of the first question."""
    return warm("text_to_cypher", "text_to_cypher", backend=backend, **_static(tool, today))
