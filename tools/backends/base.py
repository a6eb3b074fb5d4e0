"""The retrieval-backend protocol: what the planner, retrieval and synthesis need from a source.

A backend declares its name (the plan's vocabulary and the context's `backend`), the citation tag
answers use, one line the planner reads, whether it is available, how to run a question, and how its
result reads in the synthesis prompt. Nodes only ever go through this protocol, so a new source is
one module here plus one line in `tools.backends.BACKENDS`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tools.llm import Usage
from tools.services import Services
from tramita.base.prompts import render


@dataclass
class BackendCall:
    """One question for one backend, with what it may use."""

    question: str
    today: str
    profile: str
    services: Services
    usage: Usage
    top_k: int = 5


@runtime_checkable
class RetrievalBackend(Protocol):
    """A source the planner can choose and retrieval can run in parallel with the others."""

    name: str
    citation: str
    planner_description: str

    def available(self, services: Services) -> bool:
        """Whether this deployment has the backend configured (no network call needed)."""
        ...

    def run(self, call: BackendCall) -> dict[str, Any]:
        """Answer material for the question: a context dict with at least `backend`."""
        ...

    def render(self, context: dict[str, Any]) -> str:
        """The context as the synthesis prompt reads it, every fact tagged with its citation."""
        ...


def render_rows(tag: str, context: dict[str, Any], max_rows: int = 25) -> str:
    """Rows of a query backend for synthesis: the query and its rows, both tagged."""
    rows = context.get("rows", [])
    body = json.dumps(rows[:max_rows], ensure_ascii=False, default=str) if rows else "(no rows)"
    return f"[{tag}] query: {context.get('query', '')}\n[{tag}] rows: {body}"


@dataclass
class QueryRun:
    """The outcome of a generate-validate-repair loop."""

    query: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 0
    error: str | None = None


def generate_validate_repair(question: str, generate: Callable[[str], str],
                             execute: Callable[[str], list[dict[str, Any]]], *,
                             fatal: tuple[type[BaseException], ...] = (), max_repairs: int = 2) -> QueryRun:
    """Generate a query, run it through the backend's guard, and feed any error back, at most
    `max_repairs` times. An error of a `fatal` type (the database is down) ends the loop at once:
    repairing the query cannot help. The guard runs on every attempt, so a repaired query is as
    read-only as the first."""
    run = QueryRun()
    prompt = question
    for attempt in range(max_repairs + 1):
        run.attempts = attempt + 1
        run.query = generate(prompt)
        try:
            run.rows = execute(run.query)
            run.error = None
            return run
        except fatal as exc:
            run.error = str(exc)[:400]
            return run
        except Exception as exc:  # noqa: BLE001 - guard refusals and execution errors are fed back
            run.error = f"{type(exc).__name__}: {exc}"[:400]
        prompt = f"{question}\n{render('repair', query=run.query, error=run.error)}"
    return run
