"""A question whose later part is about an earlier part's answer is answered in stages.

Retrieval runs the planned backends in the planner policy's `chain` order; a later backend answers its
own part of the question with what the earlier ones found (`Finding`), and a set found by an earlier
backend's rows bounds the database query of a part that names no stored value of its own
(`SemanticLayer.bind`). The real-store tests use the graph pattern and the SQL database of the sample;
the last one asks the real local model.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

import tramita.core.planner_hints as ph
from graph.context import Context
from tools.backends import BACKENDS
from tools.backends.base import BackendCall, Finding, question_parts, row_findings
from tools.llm import Usage
from tools.services import Services
from tools.sql_tool import SQLTool
from tramita.base.text import fold

MODEL = Path(__file__).resolve().parents[1] / "sample" / "novaops" / "semantic_model.yaml"
INCIDENT = "INC-2080"  # an incident that hit three services, one that no question set asks about


# ------------------------------------------------------------------------------- stages

def test_stages_follow_the_chain_and_an_unlisted_backend_runs_last(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ph.stages(["sql", "graph", "docs"]) == [["docs"], ["graph"], ["sql"]]
    assert ph.stages(["sql"]) == [["sql"]]
    f = ph._file().model_copy(update={"chain": ["graph"]})
    monkeypatch.setattr(ph, "_file", lambda: f)
    assert ph.stages(["sql", "docs", "graph"]) == [["graph"], ["sql", "docs"]]  # the rest run together, last


def test_a_part_that_points_back_runs_after_the_part_it_points_at() -> None:
    """The database's part comes first in the question and the graph's points back at its answer:
    the question's order. Parts that do not point back, or in the chain's order already, keep it."""
    question = "Quem lidera o projeto Lakehouse Migration, e essa pessoa está de plantão em maio?"
    parts = {"sql": "Quem lidera o projeto Lakehouse Migration", "graph": "essa pessoa está de plantão em maio"}
    assert ph.stages(["sql", "graph"], parts, question) == [["sql"], ["graph"]]
    assert ph.stages(["sql", "graph", "docs"], parts, question) == [["docs"], ["sql"], ["graph"]]
    plain = {"sql": "Quantos incidentes SEV1 tivemos em 2026", "graph": "quem está de plantão em maio"}
    assert ph.stages(["sql", "graph"], plain, "Quantos incidentes SEV1 tivemos em 2026, e quem está de plantão "
                                              "em maio?") == [["graph"], ["sql"]]
    named = {"sql": "Quem comandou o INC-2066", "graph": "E algum serviço tier 1 foi atingido indiretamente nele"}
    assert ph.stages(["sql", "graph"], named, "Quem comandou o INC-2066? E algum serviço tier 1 foi atingido "
                                              "indiretamente nele?") == [["graph"], ["sql"]]  # "nele": the incident
    spoken = {"graph": "Quem foi o primário do auth-service em 2026-W19",
              "sql": "quantos chamados abertos essa pessoa tem"}
    assert ph.stages(["sql", "graph"], spoken, "Quem foi o primário do auth-service em 2026-W19, e quantos chamados "
                                               "abertos essa pessoa tem?") == [["graph"], ["sql"]]


def test_the_planner_file_rejects_a_chain_with_an_unknown_backend(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    (tmp_path / "planner.yaml").write_text("matching: {}\nchain: [docs, ledger, sql]\n", encoding="utf-8")
    monkeypatch.setattr(ph, "POLICIES_DIR", tmp_path)
    with pytest.raises(ValueError, match=r"planner\.yaml: field chain: unknown backends \['ledger'\]"):
        ph._file.__wrapped__()


def _match(text: str, ranked: list[tuple[str, float]], decision: ph.Decision = "clear") -> ph.Match:
    best = ranked[0][0] if decision == "clear" else None
    return ph.Match(text, ranked, decision, best, [ranked[0][0]])


def test_each_backend_gets_the_parts_whose_top_source_it_is() -> None:
    whole = _match("w", [("graph", 0.9), ("sql", 0.8)])
    route = ph.Route("clear", ["graph", "sql"], ["graph", "sql"],
                     [whole, _match("which services did it hit", [("graph", 0.9), ("sql", 0.8)]),
                      _match("how many open tickets do they have", [("sql", 0.9), ("graph", 0.8)], "close"),
                      _match("and the urgent ones", [("sql", 0.9), ("graph", 0.85)])], "vocabulary match")
    assert route.parts(["graph", "sql"]) == {"graph": "which services did it hit",
                                             "sql": "how many open tickets do they have; and the urgent ones"}
    # a part whose top source is not planned gives nothing; one planned source alone needs no parts
    assert route.parts(["sql"]) == {}
    one = ph.Route("clear", ["sql"], ["sql"], [whole, _match("a", [("sql", 0.9)]), _match("b", [("sql", 0.9)])], "")
    assert one.parts(["sql"]) == {}


def test_a_part_whose_words_require_a_source_goes_to_it_and_a_close_part_to_another() -> None:
    """Written for this test: the first part ranks the graph a hair above the database, the second
    requires the graph by its words ("indirectly"). By rank alone each source got the other's part;
    the required one takes its part, and the close part goes to the best source left."""
    whole = _match("w", [("graph", 0.9), ("sql", 0.85)])
    first = _match("who led INC-1", [("graph", 0.87), ("sql", 0.86)], "close")
    second = _match("was any tier 1 service hit indirectly in it", [("sql", 0.88), ("graph", 0.87)], "close")
    second.required = ["graph"]
    route = ph.Route("close", [], ["graph", "sql"], [whole, first, second], "")
    assert route.parts(["graph", "sql"]) == {"sql": "who led INC-1", "graph": "was any tier 1 service hit indirectly in it"}
    # a source that answers only the relation of a part claims nothing: that part is a chain
    chained = ph.Route("close", [], ["graph", "sql"], [whole, first, second], "", hands_on=["graph"])
    assert chained.parts(["graph", "sql"]) == {"graph": "who led INC-1", "sql": "was any tier 1 service hit indirectly in it"}


@pytest.mark.parametrize(("question", "parts"), [
    # a column of the rows the part before asks for: one thing, not two
    ("Which projects does the Payments team own, and what is the status of each one?", []),
    ("Quais serviços são tier 3, e de que time é cada um?", []),
    # two things: the second part asks about another set
    ("Which services did INC-2080 hit, and how many open tickets does each of those services have?",
     ["Which services did INC-2080 hit", "how many open tickets does each of those services have"]),
    ("Quem comandou o INC-2066? E algum serviço tier 1 foi atingido?",
     ["Quem comandou o INC-2066", "E algum serviço tier 1 foi atingido"]),
])
def test_a_part_about_each_listed_row_stays_with_its_list(question: str, parts: list[str]) -> None:
    assert question_parts(question) == parts



@pytest.mark.parametrize(("question", "parts"), [
    # one more column of what the part before finds: one word of its own is no second question
    ("Which ticket has stayed open the longest, and for how many days?", []),
    ("Qual foi o maior reembolso negado, e qual o valor?", []),
    ("Who approved EXP-0042, and when was it?", []),
    # a second part that names two things of its own is still a second question
    ("Who commanded INC-2031, and which services did it hit?", ["Who commanded INC-2031", "which services did it hit"]),
    ("Quem é o dono do ledger-service, e qual o centro de custo desse time?",
     ["Quem é o dono do ledger-service", "qual o centro de custo desse time"]),
])
def test_an_elliptic_part_continues_the_part_before(question: str, parts: list[str]) -> None:
    from tramita.core.planner_hints import _stopwords

    assert question_parts(question, stop=_stopwords()) == parts


@pytest.mark.parametrize(("question", "parts"), [
    # a partitive clause put first names a set; the question after its comma asks about it
    ("Dos serviços que o ledger-service chama, quais tiveram incidente SEV2?",
     ["Dos serviços que o ledger-service chama", "quais tiveram incidente SEV2"]),
    ("Of the people under Camila Rocha, who approved the most expenses?",
     ["Of the people under Camila Rocha", "who approved the most expenses"]),
    # no partitive word first, or no question after the comma: one thing
    ("Para cada serviço billing-engine, notification-service, quantos tickets foram abertos?", []),
    ("Dos serviços tier 1, billing-engine é o mais antigo?", []),
])
def test_a_fronted_set_is_a_part_of_its_own(question: str, parts: list[str]) -> None:
    assert question_parts(question) == parts


def test_without_function_words_an_elliptic_part_stays_apart() -> None:
    # the document search calls it without them: each piece is one more passage query
    assert question_parts("Which ticket has stayed open the longest, and for how many days?") == [
        "Which ticket has stayed open the longest", "for how many days"]

# ------------------------------------------------------------------------------- the retrieve node

class _Recorder:
    """A backend that records the call it got and answers one row (pure routing logic, no store)."""

    citation = "rec"
    planner_description = "a recorder"

    def __init__(self, name: str, rows: list[dict[str, Any]]) -> None:
        self.name, self.rows, self.calls = name, rows, []  # type: list[BackendCall]

    def available(self, services: Services) -> bool:
        return True

    def run(self, call: BackendCall) -> dict[str, Any]:
        self.calls.append(call)
        return {"backend": self.name, "rows": self.rows}

    def render(self, context: dict[str, Any]) -> str:
        return "[rec]"

    def findings(self, context: dict[str, Any]) -> list[Finding]:
        return row_findings(context)


def test_a_later_stage_answers_its_own_part_with_what_the_earlier_stage_found(monkeypatch: pytest.MonkeyPatch
                                                                              ) -> None:
    from nodes.retrieve import retrieve

    first = _Recorder("first", [{"service": "svc-a", "impact": "primary"}, {"service": "svc-b", "impact": None}])
    second = _Recorder("second", [{"n": 3}])
    monkeypatch.setitem(BACKENDS, "first", first)
    monkeypatch.setitem(BACKENDS, "second", second)
    f = ph._file().model_copy(update={"chain": ["first", "second"]})
    monkeypatch.setattr(ph, "_file", lambda: f)
    question = "which services did it hit, and how many tickets do they have?"
    state: Any = {"messages": [HumanMessage(question)],
                  "plan": {"backends": ["second", "first"], "parts": {"first": "which services did it hit",
                                                                     "second": "how many tickets do they have"}}}
    out = retrieve(state, SimpleNamespace(context=Context()))  # type: ignore[arg-type]
    assert [c["backend"] for c in out["contexts"]] == ["first", "second"]
    (early,), (late,) = first.calls, second.calls
    assert early.question == "which services did it hit" and early.whole == question
    assert early.feeds and not early.given
    assert late.question == "how many tickets do they have" and late.whole == question and not late.feeds
    assert Finding("first", column="service", values=("svc-a", "svc-b")) in late.given
    assert Finding("first", column="impact", values=("primary",)) in late.given  # empty cells say nothing


def test_a_part_stated_before_the_earlier_stages_part_does_not_read_its_rows(monkeypatch: pytest.MonkeyPatch
                                                                            ) -> None:
    """The chain runs `first` before `second`, but the question asks `second`'s part first: that
    part names its own record and cannot point at rows asked for after it. Given them, a query
    took the later part's services for the incident it names."""
    from nodes.retrieve import reads, retrieve

    first = _Recorder("first", [{"service": "svc-a"}, {"service": "svc-b"}])
    second = _Recorder("second", [{"name": "Ana"}])
    monkeypatch.setitem(BACKENDS, "first", first)
    monkeypatch.setitem(BACKENDS, "second", second)
    f = ph._file().model_copy(update={"chain": ["first", "second"]})
    monkeypatch.setattr(ph, "_file", lambda: f)
    question = "who led INC-9? and was any tier 1 service hit by it indirectly?"
    parts = {"second": "who led INC-9", "first": "and was any tier 1 service hit by it indirectly"}
    state: Any = {"messages": [HumanMessage(question)], "plan": {"backends": ["first", "second"], "parts": parts}}
    retrieve(state, SimpleNamespace(context=Context()))  # type: ignore[arg-type]
    (late,) = second.calls
    assert late.question == "who led INC-9" and late.given == ()
    # the order of the question decides, whichever source runs first; a source with no part reads all
    assert reads(question, parts, "first", "second") and not reads(question, parts, "second", "first")
    assert reads(question, {"second": "who led INC-9"}, "second", "first")


def test_rows_hand_on_only_their_text_columns_and_a_failed_run_hands_on_nothing() -> None:
    ctx = {"backend": "graph", "rows": [{"name": "Ana", "n": 2, "week": "2026-W19"},
                                        {"name": "Rui", "n": 3, "week": "2026-W19"}]}
    assert row_findings(ctx) == [Finding("graph", column="name", values=("Ana", "Rui")),
                                 Finding("graph", column="week", values=("2026-W19",))]
    assert row_findings({**ctx, "error": "timed out"}) == []
    assert row_findings({"backend": "graph", "rows": []}) == []


# ------------------------------------------------------------------------------- real stores


def _graph_findings(services: Services, part: str, whole: str = "", *, feeds: bool = True
                    ) -> tuple[dict[str, Any], list[Finding]]:
    call = BackendCall(question=part, today="2026-05-15", profile="scripted", services=services, usage=Usage(),
                       whole=whole or part, feeds=feeds)
    ctx = BACKENDS["graph"].run(call)
    return ctx, BACKENDS["graph"].findings(ctx)  # type: ignore[attr-defined]


def test_a_graph_pattern_that_feeds_a_later_backend_answers_despite_an_aggregate_word(
        novaops_services: Services) -> None:
    question = f"Which services did {INCIDENT} hit, and how many tickets does each have?"
    alone, _ = _graph_findings(novaops_services, question, feeds=False)
    assert alone["path"] == "fallback" and "aggregate" in alone["pattern_reason"]  # tickets are not its answers
    fed, found = _graph_findings(novaops_services, question, feeds=True)  # a later backend counts them
    assert fed["path"].startswith("pattern:") and len(fed["rows"]) == 3 and found
    # counting the pattern's own answers is the graph's job, fed or not
    counted, _ = _graph_findings(novaops_services, f"How many services did {INCIDENT} hit?", feeds=False)
    assert counted["path"] == "pattern:incident_services" and counted["rows"] == [{"count": 3}]


def test_a_fed_pattern_is_not_failed_for_the_records_a_later_source_counts(novaops_services: Services) -> None:
    """Written for this test, real graph. "Os serviços que dependem do postgres-main tiveram quantos
    incidentes no total?" and "…, and how many incidents did each of them have?": the graph holds
    incidents too, so its dependency pattern was failed as reading no incident, and its fallback
    wrote a query that did not run. Fed to a later source, what the question counts and the piece
    that points back are that source's; alone, the check stands."""
    for question in ("Os serviços que dependem do postgres-main tiveram quantos incidentes no total?",
                     "Which services depend on postgres-main, and how many incidents did each of them have?"):
        fed, found = _graph_findings(novaops_services, question, feeds=True)
        assert fed["path"] == "pattern:service_dependents" and found, (question, fed.get("pattern_reason"))
        alone, _ = _graph_findings(novaops_services, question, feeds=False)
        assert not alone["path"].startswith("pattern:"), question


def test_the_graph_tries_the_whole_question_when_its_part_names_too_little(novaops_services: Services) -> None:
    ctx, _ = _graph_findings(novaops_services, "name those services too",
                             f"Which services did {INCIDENT} hit? Name those services too.")
    assert ctx["path"].startswith("pattern:") and len(ctx["rows"]) == 3, ctx.get("pattern_reason")


def test_graph_rows_bound_a_later_count_on_the_real_database(novaops_services: Services, tool: SQLTool,
                                                              novaops: Path) -> None:
    from tools.semantic_layer import earlier_values, layer_for
    from tools.sql_schema import load_schema
    from tools.sql_values import value_index

    ctx, found = _graph_findings(novaops_services, f"Which services did {INCIDENT} hit",
                                 f"Which services did {INCIDENT} hit, and how many active tickets do they have?")
    assert ctx["path"].startswith("pattern:"), ctx.get("pattern_reason")
    layer = layer_for(MODEL, tool)
    index = value_index(tool.url, tool.query, load_schema(tool.schema_path))
    hits, bound = earlier_values(index, found)
    services = sorted(r["service"] for r in ctx["rows"])
    assert ("services", "service_id", tuple(sorted(services))) in [(t, c, tuple(sorted(v))) for t, c, v in bound]
    asked = layer.parse({"expressible": True, "measures": ["tickets.count"], "segments": ["tickets.active"]})
    settled, notes = layer.bind(asked, bound)
    assert notes and "an earlier source found" in notes[0]
    gold = _rows(novaops, "SELECT COUNT(*) FROM tickets WHERE status IN ('open', 'in_progress') AND service_id IN "
                          f"({', '.join(repr(s) for s in services)})")
    ours = [tuple(r.values()) for r in tool.query(layer.compile(settled).sql)]
    unbound = [tuple(r.values()) for r in tool.query(layer.compile(asked).sql)]
    assert ours == gold and unbound != gold  # without the set the count is every active ticket


def test_a_part_that_points_back_is_bounded_by_what_the_rest_of_the_question_names(
        novaops_services: Services, novaops: Path) -> None:
    """Written for this test: the graph ran first and found no shift, so no set bounds "quantos
    chamados dele"; the service the other part names does (no LLM call: the direct fill accounts for
    every word). Without a word that points back, or with a set an earlier source found, nothing is added."""
    whole = "O search-service tem plantão esta semana? E quantos chamados dele estão ativos agora?"
    part = "E quantos chamados dele estão ativos agora?"

    def run(question: str, given: tuple[Finding, ...]) -> dict[str, Any]:
        return BACKENDS["sql"].run(BackendCall(question=question, today="2026-05-15", profile="scripted",
                                               services=novaops_services, usage=Usage(), whole=whole, given=given))

    gold = _rows(novaops, "SELECT COUNT(*) FROM tickets WHERE service_id = 'search-service' "
                          "AND status IN ('open', 'in_progress')")
    every = _rows(novaops, "SELECT COUNT(*) FROM tickets WHERE status IN ('open', 'in_progress')")
    assert gold != every
    ours = run(part, (Finding(backend="graph"),))
    assert [tuple(r.values()) for r in ours["rows"]] == gold, ours.get("semantic_query")
    plain = run("E quantos chamados estão ativos agora?", (Finding(backend="graph"),))
    assert [tuple(r.values()) for r in plain["rows"]] == every, plain.get("semantic_query")
    found = run(part, (Finding(backend="graph", column="service", values=("reporting-portal",)),))
    assert "search-service" not in str(found.get("query")) and "reporting-portal" in str(found.get("query"))


def test_a_figure_for_each_of_an_earlier_set_is_one_row_per_member(tool: SQLTool, novaops: Path) -> None:
    """Written for this test: a count over a set an earlier source found, asked for each member,
    is grouped by the set's column; asked with no breakdown word, or "by those services", it stays
    one figure."""
    from tools.semantic_layer import layer_for

    layer = layer_for(MODEL, tool)
    services = ("billing-engine", "ledger-service", "user-profile")
    bound = [("services", "service_id", services)]
    asked = layer.parse({"expressible": True, "measures": ["tickets.count"], "segments": ["tickets.active"]})
    settled, notes = layer.bind(asked, bound, "and how many active tickets does each have?")
    assert any("for each of the set" in n for n in notes), notes
    gold = _rows(novaops, "SELECT service_id, COUNT(*) FROM tickets WHERE status IN ('open', 'in_progress') AND "
                          f"service_id IN {services!r} GROUP BY service_id")
    ours = [tuple(r.values()) for r in tool.query(layer.compile(settled).sql)]
    assert sorted(ours) == sorted(gold) and len(gold) > 1
    pt, _ = layer.bind(asked, bound, "e quantos chamados ativos cada um tem?")
    assert pt.dimensions == settled.dimensions
    for one in ("and how many active tickets do they have in all?", "how many active tickets were opened by those services?"):
        total, _ = layer.bind(asked, bound, one)
        assert not total.dimensions, one


def test_a_query_that_bounds_the_entity_itself_is_left_alone(tool: SQLTool) -> None:
    from tools.semantic_layer import layer_for

    layer = layer_for(MODEL, tool)
    own = layer.parse({"expressible": True, "measures": ["tickets.count"],
                       "filters": [{"field": "services.service_id", "op": "=", "value": "auth-service"}]})
    assert layer.bind(own, [("services", "service_id", ("api-gateway", "web-frontend"))]) == (own, [])
    # a set no dimension reads (or none the query reaches) bounds nothing either
    assert layer.bind(own, [("document_references", "entity_id", ("x",))]) == (own, [])


def test_earlier_values_take_the_form_each_column_stores(tool: SQLTool) -> None:
    from tools.semantic_layer import earlier_values
    from tools.sql_schema import load_schema
    from tools.sql_values import value_index

    index = value_index(tool.url, tool.query, load_schema(tool.schema_path))
    _, bound = earlier_values(index, [Finding("graph", column="s", values=("api-gateway", "web-frontend"))])
    columns = [(t, c) for t, c, _ in bound]
    # ids exactly as the rows show them come before a column that stores them another way (a name)
    assert columns.index(("services", "service_id")) < columns.index(("services", "name"))
    names = dict(((t, c), v) for t, c, v in bound)[("services", "name")]
    assert names != ("api-gateway", "web-frontend")  # the stored names, which filters must use
    # a value no column stores bounds nothing
    assert earlier_values(index, [Finding("graph", column="s", values=("api-gateway", "no-such-thing"))])[1] == []


def _rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


@pytest.mark.real_model
@pytest.mark.slow
def test_real_model_counts_over_the_set_the_graph_found(novaops_settings: Any, novaops: Path, pristine: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole chain with the real local model: the graph's pattern finds the services, then the
    semantic layer's LLM fill answers "how many active tickets do those services carry" over them
    ("carry" is a word the direct fill does not account for, so the model fills the query)."""
    from nodes.retrieve import retrieve

    monkeypatch.setenv("TRAMITA_MODELS_DIR", os.environ.get("TRAMITA_MODELS_DIR") or str(pristine / "models"))
    services = Services(dataclasses.replace(novaops_settings, llm_profile="local"))
    question = f"Which services did {INCIDENT} hit? And how many active tickets do those services carry?"
    state: Any = {"messages": [HumanMessage(question)],
                  "plan": {"backends": ["graph", "sql"], "parts": {
                      "graph": f"Which services did {INCIDENT} hit",
                      "sql": "how many active tickets do those services carry"}}}
    out = retrieve(state, SimpleNamespace(context=Context(services=services, llm_backend="local",  # type: ignore[arg-type]
                                                          today="2026-05-15")))
    graph, sql = out["contexts"]
    assert graph["backend"] == "graph" and graph["path"].startswith("pattern:"), graph
    hit = sorted(r["service"] for r in graph["rows"])
    gold = _rows(novaops, "SELECT COUNT(*) FROM tickets WHERE status IN ('open', 'in_progress') AND service_id IN "
                          f"({', '.join(repr(s) for s in hit)})")
    assert sql["backend"] == "sql" and sql["path"] == "semantic", sql
    assert [tuple(r.values()) for r in sql["rows"]] == gold, sql
    # the same stage in words the direct fill reads: the same count, with no model call
    state["plan"]["parts"]["sql"] = "how many active tickets do those services have"
    _, direct = retrieve(state, SimpleNamespace(context=Context(services=services, llm_backend="local",  # type: ignore[arg-type]
                                                                today="2026-05-15")))["contexts"]
    assert direct["path"] == "semantic:direct" and [tuple(r.values()) for r in direct["rows"]] == gold, direct


def test_a_backend_asked_both_pieces_of_a_chain_answers_them_in_turn() -> None:
    """Written for this test: "Who is X's manager, and how many expenses did that manager approve?"
    is the database's twice; one query cannot do both. The piece that points back is asked after
    the one before it. Not for a backend that does not aggregate over what it is given, a text of
    several planner parts, a question whose pieces do not point back, or a piece that asks a column
    of each row the piece before lists (one query answers both)."""
    from nodes.retrieve import own_chain

    question = "Who is Ana Prado's manager, and how many expenses did that manager approve?"
    assert own_chain("sql", question) == ("Who is Ana Prado's manager", "how many expenses did that manager approve?")
    assert own_chain("graph", question) is None
    assert own_chain("sql", "Who leads Atlas; how many tickets does that person have?") is None  # planner parts
    assert own_chain("sql", "Who leads Atlas, and how many tickets are open?") is None
    assert own_chain("sql", "Quais serviços são tier 3, e de que time é cada um?") is None  # the same rows'
    assert own_chain("sql", "Which services are tier 3, and who owns each of them?") is None
    # a bare pronoun may point at what the piece before names (the project, not its lead), and a
    # demonstrative's noun that piece says is about what it names
    assert own_chain("sql", "Quem lidera o Novo App Mobile e qual o orçamento dele?") is None
    assert own_chain("sql", "Quem lidera o projeto Atlas e qual o orçamento desse projeto?") is None


def test_a_piece_that_names_nothing_of_its_own_stays_with_the_query_before(novaops_services: Services) -> None:
    """Written for this test, real semantic model and database: "how many did that person approve?"
    after "who approved the most expenses" names nothing the database holds beyond the person; it
    is the same query's count. "how many expenses did that manager approve?" names the expenses."""
    from nodes.retrieve import own_chain

    assert own_chain("sql", "Who approved the most expenses, and how many did that person approve?",
                     novaops_services) is None
    assert own_chain("sql", "Who is Ana Prado's manager, and how many expenses did that manager approve?",
                     novaops_services) is not None


@pytest.mark.real_model
@pytest.mark.slow
def test_real_model_answers_a_chain_of_two_database_pieces_in_turn(novaops_settings: Any, novaops: Path,
                                                                   pristine: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Written for this test, the real local model and database: the manager is found by the
    mirrored pattern's form, then her approvals are counted through the approver (the pointed words
    "that manager" say what the value is, "approve" its role), not through the spender's manager."""
    from nodes.retrieve import retrieve

    monkeypatch.setenv("TRAMITA_MODELS_DIR", os.environ.get("TRAMITA_MODELS_DIR") or str(pristine / "models"))
    services = Services(dataclasses.replace(novaops_settings, llm_profile="local"))
    question = "Who is Sofia Marques's manager, and how many expenses did that manager approve?"
    state: Any = {"messages": [HumanMessage(question)], "plan": {"backends": ["sql"], "parts": {}}}
    out = retrieve(state, SimpleNamespace(context=Context(services=services, llm_backend="local",  # type: ignore[arg-type]
                                                          today="2026-05-15")))
    head, tail = out["contexts"]
    manager = _rows(novaops, "SELECT m.full_name FROM employees e JOIN employees m ON m.employee_id = e.manager_id "
                             "WHERE e.full_name = 'Sofia Marques'")
    assert [tuple(r.values()) for r in head["rows"]] == manager, head
    gold = _rows(novaops, "SELECT COUNT(*) FROM expenses x JOIN employees a ON a.employee_id = x.approver_id "
                          "JOIN employees e ON a.employee_id = e.manager_id WHERE e.full_name = 'Sofia Marques'")
    assert tail["backend"] == "sql" and [tuple(r.values()) for r in tail["rows"]] == gold, tail


def test_a_set_of_people_bounds_through_the_role_the_question_names_and_no_other(tool: SQLTool,
                                                                                 novaops: Path) -> None:
    from tools.semantic_layer import layer_for

    layer = layer_for(MODEL, tool)
    people = [("employees", "full_name", ("Samuel Dias", "Rafaela Lima"))]
    asked = layer.parse({"expressible": True, "measures": ["tickets.count"], "segments": ["tickets.active"]})
    settled, notes = layer.bind(asked, people, "how many active tickets are assigned to those people?")
    gold = _rows(novaops, "SELECT COUNT(*) FROM tickets t JOIN employees e ON e.employee_id = t.assignee_id "
                          "WHERE t.status IN ('open', 'in_progress') AND e.full_name IN ('Samuel Dias', 'Rafaela Lima')")
    assert notes and [tuple(r.values()) for r in tool.query(layer.compile(settled).sql)] == gold
    # tickets reach people as requester or as assignee: a question that names neither binds nothing
    assert layer.bind(asked, people, "how many active tickets do those people have?") == (asked, [])


def test_a_later_source_reads_the_found_set_in_place_of_the_clause_it_answers() -> None:
    """The database's part "tickets of the services that depend on X" becomes "tickets of the
    services a, b": the relation is the graph's, already answered. A clause the part does not
    contain, or a finding with no values, leaves the question as it is."""
    from tools.backends.base import Finding, bounded_question

    found = Finding("graph", column="service", values=("billing-engine", "payments-api"),
                    clause="that depend on ledger-service, directly or indirectly")
    part = "How many open tickets in total for the services that depend on ledger-service, directly or indirectly"
    assert bounded_question(part, [found]) == "How many open tickets in total for the services billing-engine, payments-api"
    assert bounded_question("How many open tickets?", [found]) == "How many open tickets?"
    empty = Finding("graph", column="service", values=(), clause=found.clause)
    assert bounded_question(part, [empty]) == part
    assert bounded_question(part, [Finding("graph", column="service", values=found.values)]) == part


def test_a_later_piece_that_points_back_is_the_later_sources_question() -> None:
    """Written for this test: "Which services does X depend on, and how many open tickets does each
    of them have?" with the dependencies written in X's place asked which services they depend on.
    The piece that points back ("each of them") is the later source's question over the set it is
    given; a piece that holds the answered clause, or no piece that points back, keeps the clause
    replaced as before."""
    from tools.backends.base import Finding, bounded_question

    found = Finding("graph", column="service", values=("event-bus", "redis-cache"), clause="svc-x")
    asked = "Which services does svc-x depend on, and how many open tickets does each of them have?"
    assert bounded_question(asked, [found]) == "how many open tickets does each of them have"
    pt = "Quais serviços o svc-x chama? E quantos incidentes esses serviços tiveram?"
    assert bounded_question(pt, [found]) == "quantos incidentes esses serviços tiveram"
    plain = "How many open tickets do the services svc-x calls have?"
    assert bounded_question(plain, [found]) == "How many open tickets do the services event-bus, redis-cache calls have?"
    again = "Which services does svc-x depend on, and do they depend on svc-x too?"
    assert bounded_question(again, [found]) == again.replace("svc-x", "event-bus, redis-cache", 1)


def test_a_pronoun_after_a_passage_is_asked_about_the_one_name_it_holds(novaops_services: Services) -> None:
    """Written for this test: the passage (an earlier source's) names one person and a team; the
    database part that points back at "her" asks about people, so it is about that person. Two
    people named, no word that points back, or a set an earlier source found: the part is left as it is."""
    from tools.backends.sql import _named_referent

    part = "E quantas pessoas reportam diretamente a ela?"
    one = "A coordenação do programa fica com Priscila Antunes, com apoio do time Dados."
    two = "A coordenação fica com Priscila Antunes e com Fábio Queiroz."

    def call(question: str, given: tuple[Finding, ...]) -> str:
        c = BackendCall(question=question, today="2026-05-15", profile="scripted", services=novaops_services,
                        usage=Usage(), whole=f"Quem coordena o programa? {question}", given=given)
        return _named_referent(c, question)

    assert call(part, (Finding(backend="docs", text=one),)) == f"{part} (ela: Priscila Antunes)"
    assert call(part, (Finding(backend="docs", text=two),)) == part
    assert call("E quantas pessoas trabalham em Lisboa?", (Finding(backend="docs", text=one),)) == \
        "E quantas pessoas trabalham em Lisboa?"
    assert call(part, (Finding(backend="docs", text=one), Finding(backend="sql", values=("E001",)))) == part
    # a passage that names many longer values first: the person is still found
    crowded = ("Ver doc-pol-data-retention, doc-pol-incident-sla, doc-pol-change-mgmt, doc-pol-hybrid-work e "
               "doc-pol-procurement; times Site Reliability Engineering e Platform Engineering; serviço "
               "notification-service. " + one)
    assert call(part, (Finding(backend="docs", text=crowded),)) == f"{part} (ela: Priscila Antunes)"


def test_a_pointer_after_passages_naming_many_people_takes_the_field_the_question_names(
        novaops_services: Services) -> None:
    """Written for this test: two records' headers (the best-ranked first) name several people each;
    the question names the field ("lead reviewer"), so "that person" is the one the first such
    field holds. No field the question names, or a field that holds two of them: left as it is."""
    from tools.backends.sql import _named_referent

    part = "How many incidents has that person commanded?"
    passages = ("**Lead reviewer:** Priscila Antunes · **Authors:** Fábio Queiroz, Lucas Oliveira\n"
                "Some text.\n**Lead reviewer:** Fábio Queiroz · **Authors:** Priscila Antunes")

    def call(whole: str, text: str) -> str:
        c = BackendCall(question=part, today="2026-05-15", profile="scripted", services=novaops_services,
                        usage=Usage(), whole=f"{whole} {part}", given=(Finding(backend="docs", text=text),))
        return _named_referent(c, part)

    assert call("The review names a lead reviewer.", passages) == f"{part} (that: Priscila Antunes)"
    assert call("The review names someone.", passages) == part  # no field named: three people
    assert call("Who are the review's authors?", passages) == part  # the authors field holds two


def test_a_pointer_after_bracketed_passages_takes_the_person_of_the_bracket_the_questions_figure_is_in(
        novaops_services: Services) -> None:
    """Written for this test: a rule names one person per bracket; the question's own figure says
    which bracket it is in, so "that person" is the one that bracket's line names. A figure in no
    bracket, or none at all: left as it is."""
    from tools.backends.sql import _named_referent

    part = "what is that person's approval limit?"
    passages = ("- Leases up to 80000 USD per year are signed by Fábio Queiroz.\n"
                "- Leases above 80000 USD per year are signed by Priscila Antunes.")

    def call(whole: str) -> str:
        c = BackendCall(question=part, today="2026-05-15", profile="scripted", services=novaops_services,
                        usage=Usage(), whole=f"{whole} {part}", given=(Finding(backend="docs", text=passages),))
        return _named_referent(c, part)

    assert call("We are renting a 120k/year lease. Who signs it,") == f"{part} (that: Priscila Antunes)"
    assert call("We are renting a 50 mil lease. Who signs it,") == f"{part} (that: Fábio Queiroz)"
    assert call("We are renting a lease. Who signs it,") == part  # no figure: both people
    assert call("We are buying a 120k car. Who pays it,") == part  # no bracket about it
    # a bracket that names its person by a job title alone: that title
    titled = ("| Lease value (USD) | Sign-off |\n|---|---|\n| up to 30000 | the Finance Manager |\n"
              "| above 30000 | the Finance Manager and the CFO |\n| above 90000 | the CEO |\n\n"
              "Questions go to Fábio Queiroz or Priscila Antunes.")

    def by_title(whole: str) -> str:
        c = BackendCall(question=part, today="2026-05-15", profile="scripted", services=novaops_services,
                        usage=Usage(), whole=f"{whole} {part}", given=(Finding(backend="docs", text=titled),))
        return _named_referent(c, part)

    assert by_title("Who signs off a 120k lease,") == f"{part} (that: CEO)"  # the tightest bracket
    assert by_title("Who signs off a 45k lease,") == part  # its bracket names two
    assert by_title("Who signs off a 12k lease,") == f"{part} (that: Finance Manager)"
    assert by_title("Who signs off a lease,") == part
    # the bracket wins over the one name the passages hold elsewhere
    titled = titled.replace(" or Priscila Antunes", "")
    assert by_title("Who signs off a 12k lease,") == f"{part} (that: Finance Manager)"
    assert by_title("Who signs off a lease,") == f"{part} (that: Fábio Queiroz)"


def test_a_pointer_to_a_case_of_a_rule_takes_the_values_of_the_clause_holding_the_questions_value(
        novaops_services: Services) -> None:
    """Written for this test: a passage lists its cases in clauses; the question names one city of
    a case, and the part asks about the offices "that lead covers": the cities of that clause. No
    city named, a city two clauses hold with other cities, or a part that names a city itself: left."""
    from tools.backends.sql import _named_referent

    part = "how many people work in the offices that lead covers?"
    passages = "Regional leads: Priscila Antunes covers Recife and São Paulo; Fábio Queiroz covers Lisboa, Porto and Florianópolis."

    def call(whole: str, text: str = passages, question: str = part) -> str:
        c = BackendCall(question=question, today="2026-05-15", profile="scripted", services=novaops_services,
                        usage=Usage(), whole=f"{whole} {question}", given=(Finding(backend="docs", text=text),))
        return _named_referent(c, question)

    assert call("Who is the regional lead for Lisboa, and") == f"{part} (that: Lisboa, Porto, Florianópolis)"
    assert call("Who is the regional lead for Recife, and") == f"{part} (that: Recife, São Paulo)"
    assert call("Who is the regional lead, and") == part  # no case named: two people, no clause
    assert call("Who is the regional lead for Lisboa, and", passages + " Backup: Recife and Lisboa.") == part
    own = "how many people work in the offices that lead covers besides Porto?"
    assert call("Who is the regional lead for Lisboa, and", question=own) == own


def test_a_pointer_means_the_kind_it_names_and_a_record_named_by_its_id_alone(novaops_services: Services) -> None:
    """Written for this test: the passage names a person and a project by its id alone. "Quem
    lidera esse projeto?" points at the project (the lead is what it asks), so it is about PRJ-110,
    not the person the passage names; "that person" still means the person."""
    from tools.backends.sql import _named_referent

    passage = "Exceções precisam do aval de Priscila Antunes. O projeto PRJ-110 está suspenso."

    def call(part: str) -> str:
        c = BackendCall(question=part, today="2026-05-15", profile="scripted", services=novaops_services,
                        usage=Usage(), whole=f"A política cita um projeto. {part}",
                        given=(Finding(backend="docs", text=passage),))
        return _named_referent(c, part)

    assert call("Quem lidera esse projeto?") == "Quem lidera esse projeto? (esse: PRJ-110)"
    assert call("What is that person's approval limit?") == "What is that person's approval limit? (that: Priscila Antunes)"


def test_a_graph_part_pointing_back_takes_the_one_record_of_the_kind_the_question_points_at(
        novaops_services: Services) -> None:
    """Written for this test: the passage names people, services and one project; the whole
    question points at "that project", so the later part's "any member of it" is about the project
    (the project's on-call pattern answers with its members on shift). Two projects named, or no
    kind pointed at: the part is left as it stands."""
    from tools.graph_patterns import PatternEngine

    engine = PatternEngine.for_file(novaops_services.settings.graph_patterns_file())
    part = "are any of its members on call in 2026-W20?"
    passage = ("Action items: move the trust store of auth-service to automatic rotation under PRJ-103 "
               "(owner Priscila Antunes; reviewer Fábio Queiroz).")

    def referent(whole: str, text: str = passage) -> str:
        return engine.referent(part, text, [], engine=novaops_services.engine, tool=novaops_services.graph_tool,
                               whole=f"{whole} {part}")

    assert referent("The review cites a project. Who leads that project, and") == f"{part} (its: PRJ-103)"
    assert referent("The review cites a project. Who leads it, and") == part  # no kind pointed at
    assert referent("The review cites a project. Who leads that project, and", passage + " See also PRJ-102.") == part
    rows = novaops_services.graph_tool.query(
        "MATCH (e:Employee)-[:WORKS_ON]->(:Project {project_id: 'PRJ-103'}) MATCH (e)-[o:ON_CALL_FOR]->(:Service) "
        "WHERE o.week = '2026-W20' RETURN DISTINCT e.name AS name")
    c = BackendCall(question=part, today="2026-05-15", profile="scripted", services=novaops_services, usage=Usage(),
                    whole=f"The review cites a project. Who leads that project, and {part}",
                    given=(Finding(backend="docs", text=passage),))
    found = BACKENDS["graph"].run(c)
    assert found["path"] == "pattern:project_on_call" and found["params"]["project"] == "PRJ-103", found
    assert rows and {r["name"] for r in found["rows"]} == {r["name"] for r in rows}


def test_a_graph_part_pointing_back_takes_the_person_of_the_field_the_question_names(
        novaops_services: Services) -> None:
    """Written for this test: "is that person on call?" after passages naming three people. The
    whole question names the field ("lead reviewer"), so the person of its first such field is
    written into the part and a pattern that takes a person answers; without the field named, or
    without a word pointing back, the part is matched as it stands (the week's roster)."""
    part = "Is that person on call in 2026-W21?"
    passages = ("**Lead reviewer:** Priscila Antunes · **Authors:** Fábio Queiroz, Lucas Oliveira\n"
                "Some text.\n**Lead reviewer:** Fábio Queiroz · **Authors:** Priscila Antunes")

    def run(whole: str, question: str = part) -> dict[str, Any]:
        c = BackendCall(question=question, today="2026-05-15", profile="scripted", services=novaops_services,
                        usage=Usage(), whole=f"{whole} {question}", given=(Finding(backend="docs", text=passages),))
        return BACKENDS["graph"].run(c)

    priscila = novaops_services.graph_tool.query(
        "MATCH (e:Employee) WHERE e.name = 'Priscila Antunes' RETURN e.employee_id AS id")[0]["id"]
    named = run("The review names a lead reviewer.")
    assert named["path"] == "pattern:on_call_of_person" and named["params"]["person"] == priscila, named
    # no field named: no person is written in, and the week's roster ranks first (close to the
    # person's schedule once the week is masked, so the scripted router's empty pick falls back)
    unnamed = run("The review names someone.")
    assert unnamed["path"] != "pattern:on_call_of_person", unnamed
    assert unnamed["pattern_choice"]["scores"][0][0] == "on_call_roster", unnamed["pattern_choice"]
    assert run("The review names a lead reviewer.", "Who is on call in 2026-W21?")["path"] == "pattern:on_call_roster"



def test_a_passage_heading_with_a_colon_is_no_field_and_its_names_are_not_the_referent(
        novaops_services: Services) -> None:
    """Written for this test: a stored passage opens with "Title — Section" and a blank line; a
    title with a colon ("Review RV-42: …") whose words the question says was read as a field the
    question asks for, and the service its title names was taken for "that project". The heading
    is where the passage comes from; a field of its body is still read."""
    from tools.graph_patterns import PatternEngine
    from tramita.base.text import fields_asked, labelled_fields

    passage = ("Review RV-42: search-service outage after a config push — Timeline\n\n"
               "- 10:05 the config change ships under PRJ-103.\n**Incident lead:** Priscila Antunes")
    whole = ("The RV-42 review cites the project behind the config push. Who leads that project, and are any of "
             "its members on call in 2026-W20?")
    assert labelled_fields(passage) == [("Incident lead", "Priscila Antunes")]
    assert fields_asked(passage, whole) == []
    assert fields_asked(passage, "The RV-42 review names an incident lead. Is that person on call?") == [
        "Priscila Antunes"]
    # a label's word said in another form of its root ("commanded" for "commander"), and not a
    # word that only shares its first letters ("autorizou" is no "Autores")
    fields = "**Incident commander:** Ana Prado · **Autores:** Rui Lobo, Eva Sá"
    assert fields_asked(fields, "Who commanded that incident, and how many tickets does that person have?") == [
        "Ana Prado"]
    assert fields_asked(fields, "Quem comandou o incidente e quantos tickets ele tem?") == []  # "commander" unsaid
    assert fields_asked("**Comandante do incidente:** Ana Prado", "Quem comandou o incidente?") == ["Ana Prado"]
    assert fields_asked(fields, "Quem autorizou a mudança?") == []
    # without the blank line after it, a "Label: value" line is a field as before
    assert labelled_fields("Owner: Lucas Oliveira — SRE\nmore") == [("Owner", "Lucas Oliveira — SRE")]
    engine = PatternEngine.for_file(novaops_services.settings.graph_patterns_file())
    part = "are any of its members on call in 2026-W20?"
    assert engine.referent(part, passage, fields_asked(passage, whole), engine=novaops_services.engine,
                           tool=novaops_services.graph_tool, whole=whole) == f"{part} (its: PRJ-103)"


def test_a_lookup_bounded_by_a_value_the_user_did_not_say_shows_that_value(tool: SQLTool) -> None:
    """Written for this test: a query of rows bounded by a name an earlier source found returns the
    name's column beside what it asks; a count stays one figure, and a value not in `found` (the
    user said it) adds nothing."""
    from tools.semantic_layer import layer_for

    layer = layer_for(MODEL, tool)
    lookup = layer.parse({"expressible": True, "dimensions": ["employees.role"],
                          "filters": [{"field": "employees.full_name", "op": "=", "value": "Priscila Antunes"}]})
    shown, notes = layer.show_found(lookup, {fold("Priscila Antunes")})
    assert shown.dimensions == ["employees.role", "employees.full_name"] and notes
    rows = tool.query(layer.compile(shown).sql)
    assert [r["employees.full_name"] for r in rows] == ["Priscila Antunes"], rows
    assert layer.show_found(lookup, {fold("Fábio Queiroz")}) == (lookup, [])
    count = layer.parse({"expressible": True, "measures": ["employees.count"],
                         "filters": [{"field": "employees.full_name", "op": "=", "value": "Priscila Antunes"}]})
    assert layer.show_found(count, {fold("Priscila Antunes")}) == (count, [])


def test_a_part_pointing_at_a_person_a_passage_names_shows_who_it_is_about(novaops_services: Services) -> None:
    """Written for this test: "qual o cargo dessa pessoa?" after a passage naming one person is asked
    about that person (no LLM call: the direct fill accounts for every word), and the rows say who."""
    part = "E qual o cargo dessa pessoa?"
    passage = "A coordenação do programa fica com Priscila Antunes, com apoio do time Dados."
    ctx = BACKENDS["sql"].run(BackendCall(question=part, today="2026-05-15", profile="scripted",
                                          services=novaops_services, usage=Usage(),
                                          whole=f"Quem coordena o programa? {part}",
                                          given=(Finding(backend="docs", text=passage),)))
    assert ctx["rows"] and all(r.get("employees.full_name") == "Priscila Antunes" for r in ctx["rows"]), ctx
