"""The direct fill (tools/semantic_direct.py): a count, aggregate or list question whose every word
the semantic model accounts for is filled without an LLM call; anything else is left to the LLM.

The check set `benchmarks/data/direct_fill.jsonl` (written for this, not from the eval sets) holds
questions the fill must take, each with a gold query verified against the database, and questions it
must leave to the LLM (a breakdown, a negation, a superlative, a bound, two readings).
"""

from __future__ import annotations

import json
import re
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tools.semantic_direct import direct_query
from tools.semantic_layer import SemanticLayer, layer_for, stored_values
from tools.sql_schema import load_schema
from tools.sql_tool import SQLTool
from tools.sql_values import value_index
from tramita.base.paths import SAMPLE_DIR
from tramita.base.policyfile import PolicyError
from tramita.base.text import fold
from tramita.lab.evaluation.questions import results_match, sql_is_ordered

MODEL = SAMPLE_DIR / "semantic_model.yaml"
CHECKS = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "direct_fill.jsonl"
TODAY = "2026-05-15"


@pytest.fixture(scope="module")
def db(pristine: Path) -> Path:
    """The ingested database, shared: these tests only read (SQLTool's connection is read-only)."""
    return pristine / "novaops.db"


@pytest.fixture(scope="module")
def tool(db: Path) -> SQLTool:
    return SQLTool(f"sqlite:///{db}")


@pytest.fixture(scope="module")
def layer(tool: SQLTool) -> SemanticLayer:
    return layer_for(MODEL, tool)


def _hits(tool: SQLTool, question: str) -> list[tuple[str, str, str]]:
    index = value_index(tool.url, tool.query, load_schema(tool.schema_path))
    return [(h.table, h.column, h.value) for h in index.match(question)]


def _gold(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


ITEMS = [json.loads(line) for line in CHECKS.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_check_set_covers_both_languages_and_both_outcomes() -> None:
    taken = [i for i in ITEMS if i["direct"]]
    declined = [i for i in ITEMS if not i["direct"]]
    assert len(taken) >= 20 and len(declined) >= 10
    assert {i["lang"] for i in taken} == {"pt", "en"} == {i["lang"] for i in declined}
    assert all(i.get("gold_sql") for i in taken) and all(i.get("why") for i in declined)


@pytest.mark.parametrize("item", [i for i in ITEMS if i["direct"]], ids=lambda i: i["id"])
def test_a_question_the_model_accounts_for_is_filled_without_the_llm_and_gives_the_gold(
        item: dict[str, Any], tool: SQLTool, layer: SemanticLayer, db: Path) -> None:
    fill = direct_query(layer, item["question"], _hits(tool, item["question"]), TODAY)
    assert fill is not None, item["question"]
    ours = [tuple(r.values()) for r in tool.query(layer.compile(fill.query, stored_values(tool)).sql)]
    gold = _gold(db, item["gold_sql"])
    assert results_match(gold, ours, ordered=sql_is_ordered(item["gold_sql"]), strict=True), (fill.query, ours, gold)
    # every word of the question has its reading in the trace
    assert set(fill.words) == set(re.findall(r"[^\W_]+", fold(item["question"]))) and all(fill.words.values())


@pytest.mark.parametrize("item", [i for i in ITEMS if not i["direct"]], ids=lambda i: i["id"])
def test_a_question_with_a_word_the_model_does_not_account_for_is_left_to_the_llm(
        item: dict[str, Any], tool: SQLTool, layer: SemanticLayer) -> None:
    assert direct_query(layer, item["question"], _hits(tool, item["question"]), TODAY) is None, item["why"]


def test_a_state_word_next_to_a_period_is_two_readings_but_alone_it_is_the_state(
        tool: SQLTool, layer: SemanticLayer) -> None:
    """'abertos' is the status 'open' and the event of the date 'aberto em': with a period, the
    status reading answers another question (open now, or opened then), so the LLM decides."""
    with_period = "Em 2025, quantos chamados foram abertos?"
    assert direct_query(layer, with_period, _hits(tool, with_period), TODAY) is None
    alone = "Quantos chamados estão abertos?"
    fill = direct_query(layer, alone, _hits(tool, alone), TODAY)
    assert fill is not None and fill.query.filters == [("tickets.status", "=", "open")]


def test_a_value_inside_a_segment_phrase_is_part_of_it(tool: SQLTool, layer: SemanticLayer, db: Path) -> None:
    """'não resolvidos' is the segment; read as the value 'resolvidos' too, the count is of
    incidents both resolved and unresolved: 0 (the wrong answer this guards against)."""
    q = "Quantos incidentes não resolvidos o billing-engine tem?"
    fill = direct_query(layer, q, _hits(tool, q), TODAY)
    assert fill is not None and fill.query.segments == ["incidents.unresolved"]
    assert all(f != "incidents.status" for f, _, _ in fill.query.filters)
    ours = tool.query(layer.compile(fill.query, stored_values(tool)).sql)
    assert [tuple(r.values()) for r in ours] == _gold(
        db, "SELECT COUNT(*) FROM incidents WHERE service_id = 'billing-engine' AND status <> 'resolved'") != [(0,)]


def test_a_period_goes_on_the_date_the_question_names_else_on_the_entity_time_dimension(
        tool: SQLTool, layer: SemanticLayer) -> None:
    named = "How many expenses were submitted in March 2026?"
    fill = direct_query(layer, named, _hits(tool, named), TODAY)
    assert fill is not None and ("expenses.submitted_at", "=", "2026-03") in fill.query.filters
    default = "How many expenses were there in March 2026?"
    fill = direct_query(layer, default, _hits(tool, default), TODAY)
    assert fill is not None and ("expenses.expense_date", "=", "2026-03") in fill.query.filters


def test_a_list_question_shows_the_rows_without_the_column_its_filter_fixes(
        tool: SQLTool, layer: SemanticLayer) -> None:
    q = "Which services are degraded?"
    fill = direct_query(layer, q, _hits(tool, q), TODAY)
    assert fill is not None and not fill.query.measures
    assert "services.status" not in fill.query.dimensions and "services.service_id" in fill.query.dimensions


def test_the_sql_backend_answers_a_clear_question_with_no_llm_call(novaops: Path) -> None:
    """The scripted model answers any text-to-SQL prompt with the pending-expense count; the
    question here asks for P1 tickets, so only the direct path gives the right number, and no
    call is counted."""
    from tools.backends.base import BackendCall
    from tools.backends.sql import SQLBackend
    from tools.llm import Usage
    from tools.services import Services
    from tramita.base.settings import Settings

    usage = Usage()
    call = BackendCall(question="How many P1 tickets are there?", today=TODAY, profile="scripted",
                       services=Services(Settings.embedded(novaops.parent, llm_profile="scripted")), usage=usage)
    ctx = SQLBackend().run(call)
    assert ctx["path"] == "semantic:direct" and ctx["error"] is None and usage.calls == 0
    assert [list(r.values()) for r in ctx["rows"]] == [list(r) for r in _gold(
        novaops, "SELECT COUNT(*) FROM tickets WHERE priority = 'P1'")]
    assert ctx["accounted"]["tickets"] == "entity tickets" and ctx["accounted"]["p1"].startswith("value ")


def test_a_time_dimension_that_is_not_a_dated_dimension_is_refused_by_name(tmp_path: Path) -> None:
    from tools.semantic_model import load_semantic_model

    text = MODEL.read_text(encoding="utf-8").replace("time_dimension: opened_at", "time_dimension: severity", 1)
    bad = tmp_path / "model.yaml"
    bad.write_text(text, encoding="utf-8")
    with pytest.raises(PolicyError, match=r"model\.yaml: field entities\.incidents\.time_dimension"):
        load_semantic_model(bad)


def test_a_count_named_by_its_own_words_stays_a_count(layer: SemanticLayer) -> None:
    """'headcount' is the employees count's own word: settle used to read a count with no count
    cue as a list question and show the rows instead of the number."""
    q = layer.parse({"measures": ["employees.count"],
                     "filters": [{"field": "employees.office_city", "op": "=", "value": "Porto"}]})
    assert layer.settle(q, "Headcount of the Porto office?")[0].measures == ["employees.count"]
    assert layer.settle(q, "The people of the Porto office?")[0].measures == []  # no word asks for a number


def test_a_reference_to_what_an_earlier_source_found_is_bounded_by_that_set(
        tool: SQLTool, layer: SemanticLayer, db: Path) -> None:
    """The later stage of "which services did the incident hit, and how many active tickets do those
    services have?": "those services" is the set the graph found. With the set, the count is bounded
    by it and needs no LLM call; without one, the words are not accounted for and the LLM reads them."""
    services = ("api-gateway", "web-frontend")
    q = "and how many active tickets do those services have?"
    assert direct_query(layer, q, _hits(tool, q), TODAY) is None
    fill = direct_query(layer, q, _hits(tool, q), TODAY, [("services", "service_id", services)])
    assert fill is not None and fill.words["those"] == "reference"
    ours = [tuple(r.values()) for r in tool.query(layer.compile(fill.query, stored_values(tool)).sql)]
    gold = _gold(db, "SELECT COUNT(*) FROM tickets WHERE status IN ('open', 'in_progress') "
                     f"AND service_id IN {services!r}")
    every = _gold(db, "SELECT COUNT(*) FROM tickets WHERE status IN ('open', 'in_progress')")
    assert ours == gold != every
    pt = "quantos chamados ativos esses serviços têm?"
    fill = direct_query(layer, pt, _hits(tool, pt), TODAY, [("services", "service_id", services)])
    assert fill is not None and [tuple(r.values()) for r in tool.query(layer.compile(fill.query).sql)] == gold
