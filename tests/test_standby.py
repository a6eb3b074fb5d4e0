"""A planned backend whose query fails is answered for by the plan's standby (`Route.standby`, `Plan.standby`).

The database and the graph hold many of the same records; a question near both is sometimes matched
to the one whose query the small model cannot write. The standby is the best-ranked other backend
that writes its own query; documents never stand in, a query the guard refused is never retried
elsewhere, and a gap the standby did not fill is still told to the user.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

import tramita.core.planner_hints as ph
from graph.context import Context
from tools.backends import BACKENDS
from tools.backends.base import BackendCall, Finding, row_findings
from tools.services import Services
from tramita.base.settings import Settings


def _route(chosen: list[str], ranked: list[tuple[str, float]]) -> ph.Route:
    whole = ph.Match("q", ranked, "clear", ranked[0][0], [ranked[0][0]])
    return ph.Route("clear", chosen, chosen, [whole], "vocabulary match")


def test_the_standby_is_the_best_other_backend_that_writes_its_own_query() -> None:
    ranked = [("graph", 0.9), ("docs", 0.88), ("api", 0.87), ("sql", 0.85)]
    assert _route(["graph"], ranked).standby(["graph"]) == "sql"  # documents and the API never stand in
    assert _route(["sql"], [("sql", 0.9), ("graph", 0.8)]).standby(["sql"]) == "graph"
    assert _route(["docs"], [("docs", 0.9), ("sql", 0.8)]).standby(["docs"]) is None  # passages don't fail a query
    assert _route(["graph", "sql"], ranked).standby(["graph", "sql"]) is None  # both query writers planned already
    assert _route(["docs", "graph"], ranked).standby(["docs", "graph"]) == "sql"
    assert _route(["graph"], [("graph", 0.9), ("docs", 0.8)]).standby(["graph"]) is None


class _Source:
    """A backend that answers with fixed rows or a fixed error, and records its calls."""

    stands_in = True

    def __init__(self, name: str, *, rows: list[dict[str, Any]] | None = None, error: str | None = None) -> None:
        self.name, self.citation, self.planner_description = name, name, name
        self.rows, self.error = rows or [], error
        self.calls: list[BackendCall] = []

    def available(self, services: Services) -> bool:
        return True

    def run(self, call: BackendCall) -> dict[str, Any]:
        self.calls.append(call)
        return {"backend": self.name, "rows": self.rows, "error": self.error}

    def render(self, context: dict[str, Any]) -> str:
        return f"[{self.name}]"

    def findings(self, context: dict[str, Any]) -> list[Finding]:
        return row_findings(context)


def _retrieve(monkeypatch: pytest.MonkeyPatch, first: _Source, second: _Source, standby: str | None = "second"
              ) -> dict[str, Any]:
    from nodes.retrieve import retrieve

    monkeypatch.setitem(BACKENDS, "first", first)
    monkeypatch.setitem(BACKENDS, "second", second)
    plan: dict[str, Any] = {"backends": ["first"], "parts": {"first": "a part"}}
    if standby:
        plan["standby"] = standby
    state: Any = {"messages": [HumanMessage("the whole question")], "plan": plan}
    return retrieve(state, SimpleNamespace(context=Context()))  # type: ignore[arg-type]


@pytest.mark.parametrize("error", ["CypherExecutionError: no such table",
                                   "MissedLabelError: the query reads no Project record, which the question asks for"])
def test_a_failed_query_is_answered_by_the_standby_with_the_failed_part(error: str, monkeypatch: pytest.MonkeyPatch
                                                                        ) -> None:
    first = _Source("first", error=error)
    second = _Source("second", rows=[{"n": 9}])
    out = _retrieve(monkeypatch, first, second)
    failed, answered = out["contexts"]
    assert failed["replaced_by"] == "second" and answered["rows"] == [{"n": 9}]
    assert [c.question for c in second.calls] == ["a part"]  # what the failed backend was asked
    assert out["turn"]["standby"] == "second" and out["turn"]["errors"] == [f"first: {error}"]


@pytest.mark.parametrize("error", ["UnsafeCypherError: write clause CREATE", "timed out after 60 s",
                                   "LLMError: the model failed twice", "GraphUnavailable: no such file"])
def test_a_refused_or_slow_query_a_down_store_or_a_failed_model_is_not_retried_elsewhere(error: str, monkeypatch: pytest.MonkeyPatch) -> None:
    second = _Source("second", rows=[{"n": 9}])
    out = _retrieve(monkeypatch, _Source("first", error=error), second)
    assert len(out["contexts"]) == 1 and not second.calls and "standby" not in out["turn"]


def test_no_standby_runs_when_the_plan_answered_or_names_none(monkeypatch: pytest.MonkeyPatch) -> None:
    second = _Source("second", rows=[{"n": 9}])
    assert len(_retrieve(monkeypatch, _Source("first", rows=[{"n": 1}]), second)["contexts"]) == 1
    failed = _Source("first", error="SQLExecutionError: no such column")
    assert len(_retrieve(monkeypatch, failed, second, standby=None)["contexts"]) == 1
    assert not second.calls


def test_a_standby_that_fails_too_leaves_the_planned_gap_to_tell(monkeypatch: pytest.MonkeyPatch) -> None:
    from nodes.synthesize import synthesize

    out = _retrieve(monkeypatch, _Source("first", error="SQLExecutionError: no such column"),
                    _Source("second", error="CypherExecutionError: bad path"))
    assert not any(c.get("replaced_by") for c in out["contexts"])
    state: Any = {"messages": [HumanMessage("the whole question")], "plan": {"backends": ["first"]},
                  "contexts": out["contexts"], "language": "en"}
    said = synthesize(state, SimpleNamespace(context=Context()))  # type: ignore[arg-type]
    assert "first" in said["answer"]  # the planned source's gap sentence names it


def test_a_gap_the_standby_filled_is_not_told(monkeypatch: pytest.MonkeyPatch) -> None:
    from nodes.synthesize import synthesize

    out = _retrieve(monkeypatch, _Source("first", error="SQLExecutionError: no such column"), _Source("second", rows=[]))
    state: Any = {"messages": [HumanMessage("the whole question")], "plan": {"backends": ["first"]},
                  "contexts": out["contexts"], "language": "en"}
    said = synthesize(state, SimpleNamespace(context=Context()))  # type: ignore[arg-type]
    assert said["notices"] == [] and "first" not in said["answer"] and "second" in said["answer"]


def test_a_graph_that_is_down_is_a_gap_not_a_question_for_the_database(novaops_settings: Settings, tmp_path: Path
                                                                       ) -> None:
    """Real stores: the graph file is missing. The database would answer an on-call question from
    data it does not hold, so the standby does not run and the graph's gap is told."""
    from nodes.retrieve import retrieve
    from nodes.synthesize import gap_sentence

    broken = dataclasses.replace(novaops_settings, graph_url=f"ladybug://{tmp_path / 'missing.lbug'}")
    question = "Who covers search-service on call in 2026-W30?"
    state: Any = {"messages": [HumanMessage(question)], "plan": {"backends": ["graph"], "standby": "sql"}}
    ctx = Context(services=Services(broken), today="2026-05-15")
    out = retrieve(state, SimpleNamespace(context=ctx))  # type: ignore[arg-type]
    (graph,) = out["contexts"]
    assert graph["error"] and "replaced_by" not in graph and "standby" not in out["turn"]
    from nodes.synthesize import synthesize

    said = synthesize({**state, "contexts": out["contexts"], "language": "en"},
                      SimpleNamespace(context=ctx))  # type: ignore[arg-type]
    assert said["answer"] in (gap_sentence(["graph"], "en"), gap_sentence(["graph"], "pt"))  # the gap, told
