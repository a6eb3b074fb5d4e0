"""The semantic layer (issue 13): the model file, its checks, the query object, the compiled SQL and
the mends of the fallback's raw SQL.

Compiled queries are checked by their rows: each hand-written query object must give the rows of a
hand-written gold SQL on the test database (execution accuracy, scored as the eval scores it). The
questions and queries here are this file's own, not the dev set's.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools.semantic_layer import (
    SemanticLayer,
    SemanticQueryError,
    answer_object,
    answer_semantic,
    check_model,
    layer_for,
    period_bounds,
    period_labels,
    question_durations,
    question_periods,
    stored_values,
    trie_pattern,
)
from tools.semantic_model import (
    catalog_from_engine,
    check_against_catalog,
    draft_model,
    load_semantic_model,
)
from tools.sql_mend import Scale, mend, scale_side
from tools.sql_tool import SQLExecutionError, SQLTool
from tramita.base.paths import SAMPLE_DIR
from tramita.base.policyfile import PolicyError
from tramita.lab.evaluation.questions import results_match, sql_is_ordered

MODEL = SAMPLE_DIR / "semantic_model.yaml"



def _rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


def _answer(layer: SemanticLayer, tool: SQLTool, q: Any) -> list[tuple[Any, ...]]:
    """The rows the compiled query gives on the real database, with its stored values linked."""
    return [tuple(r.values()) for r in tool.query(layer.compile(q, stored_values(tool)).sql)]


def _engine(db: Path) -> Any:
    from sqlalchemy import create_engine

    return create_engine(f"sqlite:///{db}")


# ------------------------------------------------------------------------------- the model file

def test_the_model_loads_and_validates_against_the_live_schema(novaops: Path) -> None:
    spec = load_semantic_model(MODEL)
    assert {"expenses", "employees", "teams", "tickets", "incidents"} <= set(spec.entities)
    assert spec.entities["expenses"].dimensions["amount_usd"].unit == "USD"
    assert spec.entities["expenses"].measures["sum_amount_usd"].agg == "sum"
    assert set(spec.entities["tickets"].dimensions["created_at"].time_grains) == {"day", "week", "month", "quarter",
                                                                                   "year"}
    engine = _engine(novaops)
    counts = check_model(MODEL, engine)
    assert counts["entities"] == len(spec.entities) and counts["examples"] == len(spec.examples) >= 2
    aggs = {m.agg for e in spec.entities.values() for m in e.measures.values()}
    assert aggs == {"count", "sum", "avg", "min", "max", "count_distinct"}


def test_a_malformed_model_names_the_file_and_the_field(tmp_path: Path) -> None:
    data = yaml.safe_load(MODEL.read_text(encoding="utf-8"))
    data["entities"]["expenses"]["measures"]["sum_amount_usd"]["agg"] = "total"  # not an aggregation
    data["entities"]["teams"]["colour"] = "blue"  # an unknown key (extra="forbid")
    bad = tmp_path / "semantic_model.yaml"
    bad.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    with pytest.raises(PolicyError) as err:
        load_semantic_model(bad)
    text = str(err.value)
    assert f"{bad}: field entities.expenses.measures.sum_amount_usd.agg" in text
    assert f"{bad}: field entities.teams.colour" in text

    data = yaml.safe_load(MODEL.read_text(encoding="utf-8"))
    data["entities"]["expenses"]["measures"]["avg_amount_usd"]["column"] = "amount"  # not a dimension
    data["entities"]["expenses"]["joins"]["approver"]["entity"] = "staff"  # not an entity
    data["entities"]["tickets"]["measures"]["count"]["drill_members"] = ["ticket_id", "owner"]  # not a dimension
    bad.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    with pytest.raises(PolicyError) as err:
        load_semantic_model(bad)
    assert "field entities.expenses.measures.avg_amount_usd.column: 'amount' is not a dimension" in str(err.value)
    assert "field entities.tickets.measures.count.drill_members: 'owner' is not a dimension" in str(err.value)
    assert "field entities.expenses.joins.approver.entity: unknown entity 'staff'" in str(err.value)


def test_an_entry_naming_a_missing_column_fails_against_the_live_schema(novaops: Path, tmp_path: Path) -> None:
    data = yaml.safe_load(MODEL.read_text(encoding="utf-8"))
    data["entities"]["expenses"]["dimensions"]["amount_usd"]["column"] = "amount_brl"
    data["entities"]["tickets"]["joins"]["assignee"]["column"] = "owner_id"
    bad = tmp_path / "semantic_model.yaml"
    bad.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    load_semantic_model(bad)  # consistent in itself: only the database can tell
    with pytest.raises(PolicyError) as err:
        check_model(bad, _engine(novaops))
    text = str(err.value)
    assert f"{bad}: field entities.expenses.dimensions.amount_usd: column 'amount_brl' is not in table expenses" in text
    assert "field entities.tickets.joins.assignee.column: column 'owner_id' is not in table tickets" in text


def test_ingest_runs_the_check_and_fails_naming_the_entry(novaops: Path, tmp_path: Path) -> None:
    from dataclasses import replace

    from ingest.run import ingest_all
    from tramita.base.settings import Settings

    data = yaml.safe_load(MODEL.read_text(encoding="utf-8"))
    data["entities"]["budgets"]["table"] = "budget"
    bad = tmp_path / "semantic_model.yaml"
    bad.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    settings = replace(Settings.embedded(tmp_path), sql_url=f"sqlite:///{novaops}", semantic_model=bad)
    with pytest.raises(PolicyError, match=r"field entities\.budgets\.table: table 'budget' is not in the database"):
        ingest_all(settings, models=False, progress=False, say=lambda *_: None)


def test_a_join_to_a_non_unique_column_is_refused(novaops: Path) -> None:
    spec = load_semantic_model(MODEL)
    join = spec.entities["expenses"].joins["approver"]
    spec.entities["expenses"].joins["approver"] = join.model_copy(update={"target_column": "team_id"})
    problems = check_against_catalog(spec, catalog_from_engine(_engine(novaops)))
    assert problems == ["entities.expenses.joins.approver.target_column: employees.team_id is not unique, "
                        "so the join would repeat rows"]


def test_a_draft_from_the_database_is_a_valid_model(novaops: Path) -> None:
    """`tramita semantic draft`: tables, foreign keys and comments become a model that loads,
    passes the live check and answers a query; joins are named after their key columns."""
    from tools.semantic_model import SemanticModelSpec, check_spec

    catalog = catalog_from_engine(_engine(novaops))
    draft = draft_model(catalog, "draft")
    spec = SemanticModelSpec.model_validate(draft)
    assert check_spec(spec) == [] and check_against_catalog(spec, catalog) == []
    exp = draft["entities"]["expenses"]
    assert exp["joins"]["approver"] == {"entity": "employees", "column": "approver_id"}
    assert exp["dimensions"]["status"]["values"] == {"pending": [], "approved": [], "rejected": []}
    assert exp["dimensions"]["amount_usd"]["description"] == "amount in USD"  # the DDL's comment
    assert "sum_amount_usd" in exp["measures"] and "expense_date" in exp["dimensions"]
    layer = SemanticLayer(spec, catalog, "sqlite")
    sql = layer.compile(layer.parse({"measures": ["expenses.count"], "dimensions": ["approver.full_name"]})).sql
    assert _rows(novaops, sql)


def test_the_cli_writes_a_draft(novaops: Path, tmp_path: Path) -> None:
    from tramita.shell.cli import main

    out = tmp_path / "draft.yaml"
    assert main(["--profile", "scripted", "semantic", "draft", "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Semantic model drafted from") and "tool_executions" not in text
    assert main(["--profile", "scripted", "semantic", "draft", "--out", str(out)]) == 2  # kept without --force


# --------------------------------------------------------------------- compiled rows = gold rows

CASES: dict[str, tuple[dict[str, Any], str]] = {
    "several measures by month, period filter": (
        {"measures": ["expenses.count", "expenses.sum_amount_usd", "expenses.max_amount_usd"],
         "dimensions": ["expenses.expense_date__month"],
         "filters": [{"field": "expenses.status", "op": "=", "value": "approved"},
                     {"field": "expenses.expense_date", "op": "=", "value": "2026-H1"}],
         "order": [{"field": "expenses.expense_date__month", "direction": "asc"}]},
        "SELECT date(expense_date, 'start of month'), COUNT(*), SUM(amount_usd), MAX(amount_usd) FROM expenses "
        "WHERE status = 'approved' AND expense_date >= '2026-01-01' AND expense_date < '2026-07-01' "
        "GROUP BY 1 ORDER BY 1"),
    "two-hop join, order by a measure": (
        {"measures": ["expenses.sum_amount_usd"], "dimensions": ["teams.name"],
         "filters": [{"field": "expenses.category", "op": "=", "value": "software"}],
         "order": [{"field": "expenses.sum_amount_usd", "direction": "desc"}]},
        "SELECT t.name, SUM(x.amount_usd) AS s FROM expenses x JOIN employees e ON e.employee_id = x.employee_id "
        "JOIN teams t ON t.team_id = e.team_id WHERE x.category = 'software' GROUP BY t.name ORDER BY s DESC"),
    "a role join, a segment and a measure filter (HAVING)": (
        {"measures": ["expenses.count"], "dimensions": ["approver.full_name"], "segments": ["expenses.decided"],
         "filters": [{"field": "expenses.count", "op": ">=", "value": 10}]},
        "SELECT a.full_name, COUNT(*) FROM expenses x JOIN employees a ON a.employee_id = x.approver_id "
        "WHERE x.status IN ('approved', 'rejected') GROUP BY a.full_name HAVING COUNT(*) >= 10"),
    "ISO weeks of a timestamp, between two weeks": (
        {"measures": ["tickets.count"], "dimensions": ["tickets.created_at__week"],
         "filters": [{"field": "tickets.created_at", "op": "between", "value": ["2026-W10", "2026-W12"]}]},
        "SELECT datetime(created_at, 'weekday 0', '-6 days', 'start of day'), COUNT(*) FROM tickets "
        "WHERE created_at >= '2026-03-02' AND created_at < '2026-03-23' GROUP BY 1"),
    "a derived dimension, listed": (
        {"dimensions": ["budget_requests.request_id", "budget_requests.change_usd"],
         "filters": [{"field": "budget_requests.status", "op": "in", "value": ["pending", "approved"]}]},
        "SELECT request_id, requested_amount_usd - current_amount_usd FROM budget_requests "
        "WHERE status IN ('pending', 'approved')"),
    "count distinct over a bridge entity": (
        {"measures": ["project_members.count_distinct_employee_id"], "dimensions": ["projects.status"]},
        "SELECT p.status, COUNT(DISTINCT m.employee_id) FROM project_members m "
        "JOIN projects p ON p.project_id = m.project_id GROUP BY p.status"),
    "no measures: a role and a date before a quarter": (
        {"dimensions": ["projects.name", "lead.full_name"],
         "filters": [{"field": "projects.end_date", "op": "<", "value": "2026-Q3"}]},
        "SELECT p.name, e.full_name FROM projects p JOIN employees e ON e.employee_id = p.lead_id "
        "WHERE p.end_date < '2026-07-01'"),
    "average and minimum through a join, numeric filter": (
        {"measures": ["incidents.avg_minutes_to_ack", "incidents.count"], "dimensions": ["incidents.severity"],
         "filters": [{"field": "services.tier", "op": "=", "value": "1"}]},
        "SELECT i.severity, AVG(i.minutes_to_ack), COUNT(*) FROM incidents i "
        "JOIN services s ON s.service_id = i.service_id WHERE s.tier = 1 GROUP BY i.severity"),
    "a null segment, top 3": (
        {"measures": ["tickets.count"], "dimensions": ["services.name"], "segments": ["tickets.unassigned"],
         "order": [{"field": "tickets.count", "direction": "desc"}], "limit": 3},
        "SELECT s.name, COUNT(*) AS n FROM tickets t JOIN services s ON s.service_id = t.service_id "
        "WHERE t.assignee_id IS NULL GROUP BY s.name ORDER BY n DESC, s.name LIMIT 3"),
    "a filter value linked to the stored one in a sibling column": (
        {"dimensions": ["services.service_id"], "filters": [{"field": "teams.name", "op": "=",
                                                             "value": "data & analytics"}]},
        "SELECT s.service_id FROM services s WHERE s.owner_team_id = 'T04'"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_compiled_query_gives_the_gold_rows(case: str, layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    query, gold = CASES[case]
    compiled = layer.compile(layer.parse(query), stored_values(tool))
    ours = [tuple(r.values()) for r in tool.query(compiled.sql)]  # through the guard and read-only connection
    expected = _rows(novaops, gold)
    assert expected, "a gold query with no rows proves nothing"
    assert results_match(expected, ours, ordered=sql_is_ordered(gold)), (compiled.sql, ours[:5], expected[:5])


def test_filter_values_are_linked_to_stored_values(layer: SemanticLayer, tool: SQLTool) -> None:
    linked = layer.compile(layer.parse({"measures": ["expenses.count"], "filters": [
        {"field": "expenses.category", "op": "=", "value": "Passagens aéreas"},  # a value synonym
        {"field": "employees.office_city", "op": "=", "value": "florianopolis"},  # case and accents
        {"field": "teams.name", "op": "=", "value": "Teams"},  # "all teams": the entity's own word, dropped
    ]}), stored_values(tool)).query
    assert linked.filters == [("expenses.category", "=", "airfare"), ("employees.office_city", "=", "Florianópolis")]
    with pytest.raises(SemanticQueryError, match=r"expenses.status: 'paid' is not a stored value; stored values: "
                                                 r"'pending', 'approved', 'rejected'"):
        layer.compile(layer.parse({"measures": ["expenses.count"],
                                   "filters": [{"field": "expenses.status", "op": "=", "value": "paid"}]}))


# A small model's habit: every column it filters by, and every entity it sees, copied into the
# dimensions. `settle` drops them; each case pairs the question with the object as a model filled it.
SETTLE_CASES: dict[str, tuple[str, dict[str, Any], list[str], str]] = {
    "a count filtered to one status is one number": (
        "How many tickets are in progress right now?",
        {"measures": ["tickets.count"], "dimensions": ["tickets.status"],
         "filters": [{"field": "tickets.status", "op": "=", "value": "in_progress"}]},
        [], "SELECT COUNT(*) FROM tickets WHERE status = 'in_progress'"),
    "a total over a team and a quarter drops the team, the date and an unasked person": (
        "Qual o total gasto em despesas aprovadas pelo time de Dados no 2025-Q4?",
        {"measures": ["expenses.sum_amount_usd"], "dimensions": ["teams.name", "employees.full_name", "expenses.expense_date"],
         "filters": [{"field": "teams.name", "op": "=", "value": "Dados"},
                     {"field": "expenses.status", "op": "=", "value": "approved"},
                     {"field": "expenses.expense_date", "op": "=", "value": "2025-Q4"}]},
        [], "SELECT SUM(x.amount_usd) FROM expenses x JOIN employees e ON e.employee_id = x.employee_id "
            "JOIN teams t ON t.team_id = e.team_id WHERE t.name = 'Dados' AND x.status = 'approved' "
            "AND x.expense_date >= '2025-10-01' AND x.expense_date < '2026-01-01'"),
    "a breakdown the question asks for stays": (
        "Total de despesas aprovadas por categoria",
        {"measures": ["expenses.sum_amount_usd"], "dimensions": ["expenses.category", "teams.name"],
         "filters": [{"field": "expenses.status", "op": "=", "value": "approved"}]},
        ["expenses.category"],
        "SELECT category, SUM(amount_usd) FROM expenses WHERE status = 'approved' GROUP BY category"),
    "an entity after a grouping cue stays": (
        "Which service had the most incidents?",
        {"measures": ["incidents.count"], "dimensions": ["services.service_id"],
         "order": [{"field": "incidents.count", "direction": "desc"}], "limit": 1},
        ["services.service_id"],
        "SELECT service_id, COUNT(*) AS n FROM incidents GROUP BY service_id ORDER BY n DESC LIMIT 1"),
    "a grain bucket the filter fixes goes, another breakdown stays": (
        "Quantos incidentes por severidade houve no 2026-Q1?",
        {"measures": ["incidents.count"], "dimensions": ["incidents.severity", "incidents.opened_at__quarter"],
         "filters": [{"field": "incidents.opened_at", "op": "=", "value": "2026-Q1"}]},
        ["incidents.severity"],
        "SELECT severity, COUNT(*) FROM incidents WHERE opened_at >= '2026-01-01' AND opened_at < '2026-04-01' "
        "GROUP BY severity"),
    "one 'which … most' row gets limit 1": (
        "Qual time tem o maior orçamento somado em 2026?",
        {"measures": ["budgets.sum_amount_usd"], "dimensions": ["teams.name"],
         "order": [{"field": "budgets.sum_amount_usd", "direction": "desc"}]},
        ["teams.name"],
        "SELECT t.name, SUM(b.amount_usd) AS s FROM budgets b JOIN teams t ON t.team_id = b.team_id "
        "GROUP BY t.name ORDER BY s DESC LIMIT 1"),
    "a plural 'which … most' keeps the ranking": (
        "Which services had the most incidents?",
        {"measures": ["incidents.count"], "dimensions": ["services.service_id"],
         "order": [{"field": "incidents.count", "direction": "desc"}]},
        ["services.service_id"],
        "SELECT service_id, COUNT(*) AS n FROM incidents GROUP BY service_id ORDER BY n DESC, service_id"),
    "a list keeps its dated rows": (
        "List the expenses of 2026-03 with their dates",
        {"dimensions": ["expenses.expense_id", "expenses.expense_date"],
         "filters": [{"field": "expenses.expense_date", "op": "=", "value": "2026-03"}]},
        ["expenses.expense_id", "expenses.expense_date"],
        "SELECT expense_id, expense_date FROM expenses WHERE expense_date >= '2026-03-01' AND expense_date < '2026-04-01'"),
}


@pytest.mark.parametrize("case", list(SETTLE_CASES))
def test_settle_drops_the_dimensions_the_question_did_not_ask_for(case: str, layer: SemanticLayer, tool: SQLTool,
                                                                   novaops: Path) -> None:
    question, filled, kept, gold = SETTLE_CASES[case]
    raw = layer.parse(filled)
    settled, dropped = layer.settle(raw, question)
    assert settled.dimensions == kept
    # a role rewritten ("written as") is no dimension dropped
    dims_dropped = [d for d in dropped if not d.startswith(("limit", "order")) and " written as " not in d]
    assert len(dims_dropped) == len(raw.dimensions) - len(kept)
    expected = _rows(novaops, gold)
    assert expected, "a gold query with no rows proves nothing"
    ours = _answer(layer, tool, settled)
    assert results_match(expected, ours, ordered=sql_is_ordered(gold), strict=True), (ours[:5], expected[:5])
    changed = [d for d in dropped if not d.startswith("order")]  # an order alone changes no unordered gold
    if changed and not sql_is_ordered(gold) or settled.limit != raw.limit:  # the object as filled must fail
        unsettled = _answer(layer, tool, raw)
        assert not results_match(expected, unsettled, ordered=sql_is_ordered(gold), strict=True)


@pytest.mark.parametrize(("question", "filled", "want", "category"), [
    ("What's the mean value of an approved airfare expense?", "expenses.sum_amount_usd", "expenses.avg_amount_usd",
     "airfare"),
    ("Quanto deu a soma das despesas de hospedagem aprovadas?", "expenses.avg_amount_usd", "expenses.sum_amount_usd",
     "lodging"),
    ("Qual o valor médio e o total das despesas aprovadas?", "expenses.sum_amount_usd", "expenses.sum_amount_usd", None),
    ("Média de despesas aprovadas", "expenses.count", "expenses.count", None),
])
def test_settle_takes_the_aggregation_the_question_names(question: str, filled: str, want: str, category: str | None,
                                                         layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """One named aggregation swaps in the sibling measure of the same column; two named, or a count,
    are left to the model. The swapped query gives the gold rows; the one as filled does not.
    """
    said = [{"field": "expenses.category", "op": "=", "value": category}] if category else []
    raw = layer.parse({"measures": [filled], "filters": [{"field": "expenses.status", "op": "=", "value": "approved"},
                                                         *said],
                       "order": [{"field": filled, "direction": "desc"}]})
    settled, notes = layer.settle(raw, question)
    assert settled.measures == [want] and settled.order == []  # one figure has no order
    assert bool([n for n in notes if "no order" not in n]) == (want != filled)
    if want != filled:
        agg = "AVG" if want.endswith("avg_amount_usd") else "SUM"
        gold = _rows(novaops, f"SELECT {agg}(amount_usd) FROM expenses WHERE status = 'approved' "
                              f"AND category = '{category}'")
        ours = _answer(layer, tool, settled)
        unsettled = _answer(layer, tool, raw)
        assert results_match(gold, ours, ordered=False, strict=True)
        assert not results_match(gold, unsettled, ordered=False, strict=True)


def test_settle_drops_a_filter_that_only_names_its_column(layer: SemanticLayer, tool: SQLTool,
                                                         novaops: Path) -> None:
    """"Per office" filled as office_city = 'office' is a breakdown, not a filter; a real city stays."""
    filled = {"measures": ["employees.count"], "dimensions": ["employees.office_city"],
              "filters": [{"field": "employees.office_city", "op": "=", "value": "Offices"}]}
    settled, notes = layer.settle(layer.parse(filled), "How many people work in each office?")
    assert settled.filters == [] and settled.dimensions == ["employees.office_city"] and notes
    gold = _rows(novaops, "SELECT office_city, COUNT(*) FROM employees GROUP BY office_city")
    ours = _answer(layer, tool, settled)
    assert results_match(gold, ours, ordered=False, strict=True)
    lead = {"dimensions": ["projects.name"], "filters": [{"field": "projects.lead_id", "op": "=", "value": "lidera"}]}
    led, notes = layer.settle(layer.parse(lead), "Que projetos existem, e quem lidera cada um?")
    assert led.filters == [] and notes  # the join's word for a key column ("lidera" for lead_id)
    assert led.dimensions == ["projects.name", "lead.full_name"]  # … which the question asks to see
    real = {**filled, "filters": [{"field": "employees.office_city", "op": "=", "value": "Recife"}]}
    kept, _ = layer.settle(layer.parse(real), "How many people work in the Recife office?")
    assert kept.filters == [("employees.office_city", "=", "Recife")]


def test_settle_counts_the_entity_the_question_names_not_a_link_table(layer: SemanticLayer, tool: SQLTool,
                                                                     novaops: Path) -> None:
    """Written for this test. "Quantos colaboradores trabalham em Porto?" filled as the distinct
    people of the project staffing counts only the people on a project: the question never names
    the staffing, so the people are counted. A question that names the staffing, or a filter on
    the staffing's other join, keeps the fill."""
    filled = {"measures": ["project_members.count_distinct_employee_id"],
              "filters": [{"field": "employee.office_city", "op": "=", "value": "Porto"}]}
    settled, notes = layer.settle(layer.parse(filled), "Quantos colaboradores trabalham em Porto?")
    assert settled.measures == ["employees.count"] and any("counted as" in n for n in notes)
    gold = _rows(novaops, "SELECT COUNT(*) FROM employees WHERE office_city = 'Porto'")
    assert results_match(gold, _answer(layer, tool, settled), ordered=False, strict=True)
    kept, _ = layer.settle(layer.parse(filled), "How many people of Porto are allocated to projects?")
    assert kept.measures == ["project_members.count_distinct_employee_id"]
    project = {"measures": ["project_members.count_distinct_employee_id"],
               "filters": [{"field": "project.name", "op": "=", "value": "Ledger v2"}]}
    on_project, _ = layer.settle(layer.parse(project), "Quantos colaboradores trabalham no Ledger v2?")
    assert on_project.measures == ["project_members.count_distinct_employee_id"]


def test_settle_shows_the_role_a_who_question_asks_for_beside_a_figure(layer: SemanticLayer, tool: SQLTool,
                                                                     novaops: Path) -> None:
    """Written for this test. "Quem lidera os projetos ativos e qual o orçamento total?" filled with
    the total alone leaves out the person asked for: the role the question names is shown, one
    group per person. Without a who-word nothing is added."""
    filled = {"measures": ["projects.sum_budget_usd"],
              "filters": [{"field": "projects.status", "op": "=", "value": "active"}]}
    settled, notes = layer.settle(layer.parse(filled), "Quem lidera os projetos ativos e qual o orçamento total?")
    assert settled.dimensions == ["lead.full_name"] and notes
    gold = _rows(novaops, "SELECT e.full_name, SUM(p.budget_usd) FROM projects p JOIN employees e "
                          "ON e.employee_id = p.lead_id WHERE p.status = 'active' GROUP BY e.full_name")
    assert results_match(gold, _answer(layer, tool, settled), ordered=False, strict=True)
    plain, _ = layer.settle(layer.parse(filled), "Qual o orçamento total dos projetos ativos?")
    assert plain.dimensions == []


def test_settle_reads_figures_over_one_record_as_its_columns(layer: SemanticLayer, tool: SQLTool,
                                                             novaops: Path) -> None:
    """Written for this test. An average over the one project a name fixes is that project's
    column, shown only when the question names it; the columns and roles the question names are
    shown instead ("quando ele termina": the end date; "quem lidera": the lead). Over several
    records the figure stays."""
    filled = {"measures": ["projects.avg_budget_usd"],
              "filters": [{"field": "projects.name", "op": "=", "value": "Ledger v2"}]}
    settled, notes = layer.settle(layer.parse(filled), "Quem lidera o Ledger v2 e quando ele termina?")
    assert settled.measures == [] and set(settled.dimensions) == {"lead.full_name", "projects.end_date"}, notes
    gold = _rows(novaops, "SELECT e.full_name, p.end_date FROM projects p JOIN employees e "
                          "ON e.employee_id = p.lead_id WHERE p.name = 'Ledger v2'")
    assert results_match(gold, _answer(layer, tool, settled), ordered=False, strict=True)
    budget, _ = layer.settle(layer.parse(filled), "What is the project budget of Ledger v2?")
    assert budget.measures == [] and budget.dimensions == ["projects.budget_usd"]
    several = {"measures": ["projects.avg_budget_usd"],
               "filters": [{"field": "projects.status", "op": "=", "value": "active"}]}
    kept, _ = layer.settle(layer.parse(several), "What is the average budget of the active projects?")
    assert kept.measures == ["projects.avg_budget_usd"]


def test_settle_shows_a_condition_on_one_record_instead_of_filtering_by_it(layer: SemanticLayer, tool: SQLTool,
                                                                          novaops: Path) -> None:
    """Written for this test. "Was BR-0001 approved, and who asked for it?" filled with status =
    'approved' beside the request's key: the request is rejected, so the filter leaves no row and
    the answer would say there is no such request; the status is shown instead. Over many records
    the status stays a filter."""
    filled = {"dimensions": ["requester.full_name"],
              "filters": [{"field": "budget_requests.request_id", "op": "=", "value": "BR-0001"},
                          {"field": "budget_requests.status", "op": "=", "value": "approved"}]}
    settled, notes = layer.settle(layer.parse(filled), "Was BR-0001 approved, and who asked for it?")
    assert settled.filters == [("budget_requests.request_id", "=", "BR-0001")], notes
    assert settled.dimensions[0] == "budget_requests.request_id" and "budget_requests.status" in settled.dimensions
    gold = _rows(novaops, "SELECT r.request_id, e.full_name, r.status FROM budget_requests r JOIN employees e "
                          "ON e.employee_id = r.requested_by WHERE r.request_id = 'BR-0001'")
    assert results_match(gold, _answer(layer, tool, settled), ordered=False, strict=True)
    many = {"dimensions": ["budget_requests.request_id"],
            "filters": [{"field": "budget_requests.status", "op": "=", "value": "approved"}]}
    kept, _ = layer.settle(layer.parse(many), "Which budget requests were approved?")
    assert kept.filters == [("budget_requests.status", "=", "approved")]


def test_settle_moves_a_value_from_a_pointed_role_to_the_role_the_other_words_name(
        layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """Written for this test. "Who manages X, and how many expenses did that manager approve?": the
    earlier source's manager was filled through the spender's manager and counted the expenses of
    her reports. The words after "that" say what the value is; "approve" names its role here. A
    question that still names the pointed role elsewhere ("the reports of that manager", "that
    manager's team") keeps it."""
    filled = {"measures": ["expenses.count"],
              "filters": [{"field": "manager.full_name", "op": "=", "value": "Patrícia Gomes"}]}
    given = {"patricia gomes"}  # what the earlier source found, as settle hears it
    settled, notes = layer.settle(layer.parse(filled), "how many expenses did that manager approve", heard=given)
    assert settled.filters == [("approver.full_name", "=", "Patrícia Gomes")], notes
    gold = _rows(novaops, "SELECT COUNT(*) FROM expenses x JOIN employees e ON e.employee_id = x.approver_id "
                          "WHERE e.full_name = 'Patrícia Gomes'")
    assert results_match(gold, _answer(layer, tool, settled), strict=True)
    pt, notes = layer.settle(layer.parse(filled), "quantas despesas essa gestora aprovou", heard=given)
    assert ("approver.full_name", "=", "Patrícia Gomes") in pt.filters, notes  # "aprovou" also says the status
    assert not any(f.startswith("manager.") for f, _, _ in pt.filters)
    for kept in ("how many expenses did the reports of that manager submit",
                 "how many expenses did that manager's team submit"):
        settled, _ = layer.settle(layer.parse(filled), kept, heard=given)
        assert settled.filters == [("manager.full_name", "=", "Patrícia Gomes")], kept


def test_a_role_said_in_the_plural_names_its_kind_of_referent(layer: SemanticLayer) -> None:
    """Written for this test. "quantos tickets abertos estão atribuídos a ele" after a passage naming
    a person and a service: the role's words ("atribuído a") are said in the plural, and the person
    was not taken for what "ele" points at, so the count ran over another name. Each word of a
    role's phrase may be plural; a phrase whose words are not said names nothing."""
    hits = [("employees", "full_name", "Gonçalo Pereira"), ("services", "service_id", "auth-service")]
    assert layer.referents("quantos tickets abertos estão atribuídos a ele", hits) == ["Gonçalo Pereira"]
    assert layer.referents("quantos tickets abertos ele tem", hits) == []


def test_a_count_per_listed_group_gives_the_groups_no_row_counts_a_zero(novaops: Path) -> None:
    """Written for this test, real database: open tickets per service over three services, one of
    which has none. The query's rows hold two groups; the third is a zero, not a gap the small
    model fills with a count of its own."""
    tool = SQLTool(f"sqlite:///{novaops}")
    listed = ["ledger-service", "postgres-main", "redis-cache"]
    obj = {"measures": ["tickets.count"], "dimensions": ["services.service_id"],
           "filters": [{"field": "services.service_id", "op": "in", "value": listed},
                       {"field": "tickets.status", "op": "=", "value": "open"}]}
    rows = answer_object(obj, tool, MODEL).rows
    gold = dict(_rows(novaops, "SELECT service_id, COUNT(*) FROM tickets WHERE status = 'open' AND service_id IN "
                               "('ledger-service', 'postgres-main', 'redis-cache') GROUP BY service_id"))
    assert "ledger-service" not in gold
    assert {r["services.service_id"]: r["tickets.count"] for r in rows} == {**gold, "ledger-service": 0}
    # a count not filtered by a list of its groups gets no rows the query did not give
    every = {**obj, "filters": obj["filters"][1:]}
    assert len(answer_object(every, tool, MODEL).rows) == len(
        _rows(novaops, "SELECT service_id FROM tickets WHERE status = 'open' GROUP BY service_id"))


def test_settle_lists_records_in_their_own_order(layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """Written for this test. A list that names no order reads by the date a period is on ("hired
    in 2024": by hire date), else by the records' key; before, it read by its first column (names
    in alphabetical order), which fails a gold query in date or id order. A named order, a list
    with neither field, and a role's fields are left as they were."""
    hired = {"dimensions": ["employees.full_name", "employees.hire_date"],
             "filters": [{"field": "employees.hire_date", "op": "=", "value": "2024"}]}
    settled, notes = layer.settle(layer.parse(hired), "Quem entrou na empresa em 2024, e quando?")
    assert settled.order == [("employees.hire_date", "asc")] and any("own order" in n for n in notes)
    gold = _rows(novaops, "SELECT full_name, hire_date FROM employees WHERE hire_date >= '2024-01-01' "
                          "AND hire_date < '2025-01-01' ORDER BY hire_date")
    assert len(gold) > 2
    assert results_match(gold, _answer(layer, tool, settled), ordered=True, strict=True)
    assert not results_match(gold, _answer(layer, tool, layer.parse(hired)), ordered=True, strict=True)
    keyed = {"dimensions": ["incidents.incident_id", "incidents.severity"],
             "filters": [{"field": "incidents.service_id", "op": "=", "value": "auth-service"}]}
    assert layer.settle(layer.parse(keyed), "Which incidents had auth-service as primary service, and how bad?"
                        )[0].order == [("incidents.incident_id", "asc")]
    named = {**hired, "order": [{"field": "employees.full_name", "direction": "asc"}]}
    assert layer.settle(layer.parse(named), "Quem entrou em 2024, em ordem alfabética?")[0].order == \
        [("employees.full_name", "asc")]
    stale = {"dimensions": ["tickets.ticket_id", "tickets.updated_at"],
             "filters": [{"field": "tickets.updated_at", "op": "<", "value": "2026-03-01"}]}
    assert layer.settle(layer.parse(stale), "Which tickets were last touched before March 2026?")[0].order == \
        [("tickets.ticket_id", "asc")]  # a bound is a condition, not the span the list covers
    people = {"dimensions": ["employees.full_name", "employees.role"],
              "filters": [{"field": "employees.office_city", "op": "=", "value": "Recife"}]}
    settled = layer.settle(layer.parse(people), "Who works in the Recife office, and in what role?")[0]
    assert settled.order == [("employees.employee_id", "asc")]  # named by their label: the records' key orders them
    gold = _rows(novaops, "SELECT full_name, role FROM employees WHERE office_city = 'Recife' ORDER BY employee_id")
    assert len(gold) > 2 and gold != sorted(gold)
    ours = _answer(layer, tool, settled)
    assert results_match(gold, ours, ordered=True, strict=True) and len(ours[0]) == 2  # the key orders, unseen
    assert not results_match(gold, _answer(layer, tool, layer.parse(people)), ordered=True, strict=True)
    cities = {"dimensions": ["employees.office_city"]}  # distinct values, no records: no key to order by
    assert layer.settle(layer.parse(cities), "Em que cidades temos escritório?")[0].order == []


def test_settle_orders_a_breakdown_by_its_groups(layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """A count per group with no order named reads in its groups' order (a ranking is asked for by
    its own words, which fill an order); a named order or one total is left alone."""
    filled = {"measures": ["employees.count"], "dimensions": ["employees.office_city"]}
    settled, notes = layer.settle(layer.parse(filled), "Quantas pessoas trabalham em cada cidade de escritório?")
    assert settled.order == [("employees.office_city", "asc")] and any(n.startswith("order") for n in notes)
    gold = _rows(novaops, "SELECT office_city, COUNT(*) AS n FROM employees GROUP BY office_city ORDER BY office_city")
    largest_first = _rows(novaops, "SELECT office_city, COUNT(*) AS n FROM employees GROUP BY office_city "
                                   "ORDER BY n DESC, office_city")
    assert gold != largest_first  # the order this replaced fails the gold
    ours = _answer(layer, tool, settled)
    assert results_match(gold, ours, ordered=True, strict=True)
    assert not results_match(largest_first, ours, ordered=True, strict=True)
    ranked = {**filled, "order": [{"field": "employees.count", "direction": "desc"}]}  # the model's own order
    unasked, notes = layer.settle(layer.parse(ranked), "Quantas pessoas trabalham em cada cidade de escritório?")
    assert unasked.order == [("employees.office_city", "asc")] and any("no ranking" in n for n in notes)
    assert results_match(gold, _answer(layer, tool, unasked), ordered=True, strict=True)
    for asked in ("Ranking of offices by headcount", "Quais cidades de escritório têm mais pessoas?",
                  "Headcount per office, sorted descending"):
        assert layer.settle(layer.parse(ranked), asked)[0].order[0] == ("employees.count", "desc"), asked
    asc = {**filled, "order": [{"field": "employees.count", "direction": "asc"}]}
    assert layer.settle(layer.parse(asc), "which office has the fewest people, fewest first")[0].order == \
        [("employees.count", "asc")]
    total = {"measures": ["employees.count"]}
    assert layer.settle(layer.parse(total), "how many people work here?")[0].order == []


def test_settle_drops_a_filter_value_the_question_does_not_say(layer: SemanticLayer, tool: SQLTool,
                                                                novaops: Path) -> None:
    """ "… with their severity" filled with severity = 'SEV3' answers another question: the unsaid
    value goes, and the list is the gold; the query as filled is not."""
    filled = {"dimensions": ["incidents.incident_id", "incidents.severity"],
              "filters": [{"field": "incidents.opened_at", "op": "=", "value": "2025-11"},
                          {"field": "incidents.severity", "op": "=", "value": "SEV3"}]}
    question = "Quais incidentes foram abertos em novembro de 2025, com a severidade de cada um?"
    settled, notes = layer.settle(layer.parse(filled), question)
    assert [f for f, _, _ in settled.filters] == ["incidents.opened_at"] and any("does not say" in n for n in notes)
    gold = _rows(novaops, "SELECT incident_id, severity FROM incidents WHERE opened_at >= '2025-11-01' "
                          "AND opened_at < '2025-12-01'")
    ours = _answer(layer, tool, settled)
    unsettled = _answer(layer, tool, layer.parse(filled))
    assert results_match(gold, ours, strict=True) and not results_match(gold, unsettled, strict=True)


def test_a_date_columns_phrase_says_no_value(layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """ "abertos em março de 2026" says when the tickets were created; its "abertos" does not also
    say status = open, so the model's status filter goes. Without a period after it, "abertos" is
    the status, and the filter stays."""
    filled = {"measures": ["tickets.count"],
              "filters": [{"field": "tickets.service_id", "op": "=", "value": "event-bus"},
                          {"field": "tickets.status", "op": "=", "value": "open"},
                          {"field": "tickets.created_at", "op": "=", "value": "2026-03"}]}
    question = "Quantos tickets do event-bus foram abertos em março de 2026?"
    settled, notes = layer.settle(layer.parse(filled), question)
    assert "tickets.status" not in [f for f, _, _ in settled.filters]
    assert any("tickets.status" in n and "does not say" in n for n in notes)
    gold = _rows(novaops, "SELECT COUNT(*) FROM tickets WHERE service_id = 'event-bus' "
                          "AND created_at >= '2026-03-01' AND created_at < '2026-04-01'")
    assert results_match(gold, _answer(layer, tool, settled), strict=True)
    assert not results_match(gold, _answer(layer, tool, layer.parse(filled)), strict=True)
    still = layer.settle(layer.parse({"measures": ["tickets.count"], "filters": [
        {"field": "tickets.status", "op": "=", "value": "open"}]}), "Quantos tickets abertos o event-bus tem?")[0]
    assert [f for f, _, _ in still.filters] == ["tickets.status"]


def test_counts_nobody_asked_for_list_the_rows(layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """A list question filled as the counts of two entities (no query compiles that) lists the rows
    of the entity it names first, with the other's column; a question asking how many keeps them."""
    filled = {"measures": ["services.count", "teams.count"], "dimensions": ["teams.name"],
              "filters": [{"field": "services.tier", "op": "=", "value": 1}]}
    question = "Which services are tier 1, and which team runs each of them?"
    with pytest.raises(SemanticQueryError):
        _answer(layer, tool, layer.parse(filled))
    settled, notes = layer.settle(layer.parse(filled), question)
    assert settled.measures == [] and any("teams.count (counts the question does not ask for)" in n for n in notes)
    gold = _rows(novaops, "SELECT s.service_id, t.name FROM services s JOIN teams t ON t.team_id = s.owner_team_id "
                          "WHERE s.tier = 1")
    assert len(gold) > 1 and results_match(gold, _answer(layer, tool, settled), strict=True)
    counted = layer.settle(layer.parse(filled), "How many tier 1 services and teams are there?")[0]
    assert counted.measures == ["services.count", "teams.count"]


def test_a_top_n_question_ranks_that_many_groups(layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """ "Which five teams …" keeps the team the model grouped by (the number sits between the cue
    and the entity); without a number before the entity the team stays a column nobody asked for."""
    filled = layer.parse({"measures": ["tickets.count"], "dimensions": ["teams.name"],
                          "order": [{"field": "tickets.count", "direction": "desc"}], "limit": 4})
    settled, _ = layer.settle(filled, "Which four teams have the most open tickets?")
    assert settled.dimensions == ["teams.name"]
    gold = _rows(novaops, "SELECT t.name, COUNT(*) FROM tickets k JOIN services s ON s.service_id = k.service_id "
                          "JOIN teams t ON t.team_id = s.owner_team_id WHERE k.status = 'open' "
                          "GROUP BY t.name ORDER BY 2 DESC LIMIT 4")  # "open" is said: a filter
    assert results_match(gold, _answer(layer, tool, settled), strict=True)
    assert layer.settle(filled, "How many open tickets are there, at most four?")[0].dimensions == []
    assert layer.settle(filled, "Os 4 times com mais chamados?")[0].dimensions == ["teams.name"]


def test_a_top_n_count_of_the_ranked_entity_counts_what_it_is_ranked_by(layer: SemanticLayer, tool: SQLTool,
                                                                        novaops: Path) -> None:
    """ "Os 2 serviços com mais incidentes" filled as the count of services (one per service), with
    the role's own words as a filter value and the number as a tier: the incidents are counted per
    service, the role's words name no row, and the number is how many rows to show."""
    filled = layer.parse({"measures": ["services.count"], "dimensions": ["incidents.opened_at"],
                          "filters": [{"field": "services.service_id", "op": "=", "value": "serviço principal"},
                                      {"field": "services.tier", "op": "=", "value": 3}],
                          "order": [{"field": "services.count", "direction": "desc"}], "limit": 3})
    question = "Quais os três serviços com mais incidentes como serviço principal?"
    settled, notes = layer.settle(filled, question)
    assert settled.measures == ["incidents.count"] and settled.filters == []
    assert settled.dimensions == ["services.service_id"] and settled.limit == 3
    assert any("the number of rows asked for" in n for n in notes)
    gold = _rows(novaops, "SELECT service_id, COUNT(*) FROM incidents GROUP BY service_id ORDER BY 2 DESC LIMIT 3")
    assert results_match(gold, _answer(layer, tool, settled), strict=True)
    tiered = layer.settle(filled, "Quais os 3 serviços tier 3 com mais incidentes?")[0]
    assert ("services.tier", "=", 3) in tiered.filters  # the number said twice is also a value


def test_a_top_n_count_of_rows_by_themselves_lists_those_rows(layer: SemanticLayer, tool: SQLTool,
                                                               novaops: Path) -> None:
    """ "Os 4 incidentes mais recentes" filled as a count per incident (1 each): that many rows, in
    the model's order, and no count column."""
    filled = layer.parse({"measures": ["incidents.count"], "dimensions": ["incidents.incident_id"],
                          "order": [{"field": "incidents.opened_at", "direction": "desc"}], "limit": 4})
    settled, notes = layer.settle(filled, "Quais são os 4 incidentes mais recentes?")
    assert settled.measures == [] and settled.dimensions == ["incidents.incident_id"] and settled.limit == 4
    assert any("lists 4 of them" in n for n in notes)
    gold = _rows(novaops, "SELECT incident_id, opened_at FROM incidents ORDER BY opened_at DESC LIMIT 4")
    assert results_match(gold, _answer(layer, tool, settled), strict=True)


def test_a_key_shown_alone_gets_the_name_of_the_row_it_points_at(layer: SemanticLayer, tool: SQLTool,
                                                                  novaops: Path) -> None:
    """ "Quem comandou o INC-…?" filled with the incident's `commander_id` alone answered "E0xx": the
    commander's name joins it. A key whose entity is named by the key itself (a service's id) is left."""
    incident = _rows(novaops, "SELECT incident_id FROM incidents ORDER BY incident_id LIMIT 1")[0][0]
    filled = layer.parse({"dimensions": ["incidents.commander_id"],
                          "filters": [{"field": "incidents.incident_id", "op": "=", "value": incident}]})
    settled, notes = layer.settle(filled, f"Quem comandou o {incident}?")
    assert settled.dimensions == ["incidents.commander_id", "commander.full_name"]
    assert any("names the rows of the key shown" in n for n in notes)
    gold = _rows(novaops, "SELECT i.commander_id, e.full_name FROM incidents i JOIN employees e "
                          f"ON e.employee_id = i.commander_id WHERE i.incident_id = '{incident}'")
    assert results_match(gold, _answer(layer, tool, settled), strict=True)
    assert not results_match(gold, _answer(layer, tool, filled), strict=True)
    service = layer.parse({"dimensions": ["incidents.service_id"],
                           "filters": [{"field": "incidents.incident_id", "op": "=", "value": incident}]})
    assert layer.settle(service, f"Qual serviço o {incident} atingiu?")[0].dimensions == ["incidents.service_id"]


def test_a_filter_value_stored_in_another_column_moves_there(layer: SemanticLayer, tool: SQLTool,
                                                              novaops: Path) -> None:
    """A team's name filed under the services' names is refused (a repair call); the value index
    heard it as a team name, so the filter moves there and the count is the gold. A value the filter's own column
    stores, or one the index did not hear, stays."""
    from tools.semantic_layer import _holds
    from tools.sql_schema import load_schema
    from tools.sql_values import value_index

    index = value_index(tool.url, tool.query, load_schema(tool.schema_path))
    question = "Quantos serviços o time Pagamentos opera?"
    hits = [(h.table, h.column, h.value) for h in index.match(question)]
    filled = layer.parse({"measures": ["services.count"],
                          "filters": [{"field": "services.name", "op": "=", "value": "Pagamentos"}]})
    moved, notes = layer.relink_heard(filled, hits, _holds(tool, index.columns))
    assert [f for f, _, _ in moved.filters] == ["teams.name"] and "moved to teams.name" in notes[0]
    gold = _rows(novaops, "SELECT COUNT(*) FROM services s JOIN teams t ON t.team_id = s.owner_team_id "
                          "WHERE t.name = 'Pagamentos'")
    assert gold[0][0] > 0
    assert results_match(gold, _answer(layer, tool, moved), strict=True)
    with pytest.raises(SemanticQueryError, match="not a stored value"):  # as filled: refused, a repair call
        _answer(layer, tool, filled)
    own = layer.parse({"measures": ["services.count"],
                       "filters": [{"field": "services.name", "op": "=", "value": "Payments API"}]})
    assert layer.relink_heard(own, [*hits, ("services", "name", "Payments API")],
                              _holds(tool, index.columns))[0].filters == own.filters
    assert layer.relink_heard(filled, [], _holds(tool, index.columns))[0].filters == filled.filters
    # a key column given a person's name is value linking's (it follows the column's join), not moved
    # to the people's own names, which the tickets reach by two roles
    keyed = layer.parse({"measures": ["tickets.count"],
                         "filters": [{"field": "tickets.assignee_id", "op": "=", "value": "Rui Almeida"}]})
    heard = [(h.table, h.column, h.value) for h in index.match("How many tickets does Rui Almeida have?")]
    assert ("employees", "full_name", "Rui Almeida") in heard
    assert layer.relink_heard(keyed, heard, _holds(tool, index.columns)) == (keyed, [])


def test_a_distinct_count_a_who_question_does_not_ask_for_lists_the_values(layer: SemanticLayer, tool: SQLTool,
                                                                          novaops: Path) -> None:
    """Written for this test: "quem lidera o projeto X?" filled by the 1.5B model as the number of
    distinct members with the lead role. The question asks who: the member, by name. Asked "how
    many different people", the count stays."""
    filled = {"measures": ["project_members.count_distinct_employee_id"], "dimensions": ["project.name"],
              "filters": [{"field": "project.name", "op": "=", "value": "Lakehouse Migration"},
                          {"field": "project_members.role", "op": "=", "value": "lead"}]}
    settled, notes = layer.settle(layer.parse(filled), "Quem lidera o projeto Lakehouse Migration?")
    assert not settled.measures and any("asks for no number" in n for n in notes), notes
    gold = _rows(novaops, "SELECT e.full_name FROM project_members m JOIN projects p ON p.project_id = m.project_id "
                          "JOIN employees e ON e.employee_id = m.employee_id "
                          "WHERE p.name = 'Lakehouse Migration' AND m.role = 'lead'")
    assert gold and results_match(gold, _answer(layer, tool, settled))
    counted, _ = layer.settle(layer.parse(filled), "Quantas pessoas diferentes lideram o projeto Lakehouse Migration?")
    assert counted.measures == ["project_members.count_distinct_employee_id"]


def test_a_word_for_another_column_of_the_entity_is_no_value(layer: SemanticLayer) -> None:
    """Written for this test: "… com decisão tomada em abril" filled with approver_id = 'decisão',
    the decision date's word; the compiler found no such approver and the query was refused. A
    name the question says that is no column's word stays."""
    filled = {"measures": ["expenses.count"], "dimensions": ["approver.full_name"],
              "filters": [{"field": "expenses.approver_id", "op": "=", "value": "decisão"},
                          {"field": "expenses.decided_at", "op": "=", "value": "2026-04"}]}
    settled, notes = layer.settle(layer.parse(filled), "Quem mais aprovou despesas com decisão tomada em abril de 2026?")
    assert any("a word for a column" in n for n in notes)
    # (and "aprovou", the approver's word the query groups by, also says the state: approved)
    assert sorted(f for f, _, _ in settled.filters) == ["expenses.decided_at", "expenses.status"], notes
    named = {**filled, "filters": [{"field": "approver.full_name", "op": "=", "value": "Patrícia Gomes"}]}
    kept, _ = layer.settle(layer.parse(named), "Quantas despesas a Patrícia Gomes aprovou com decisão em abril?")
    assert ("approver.full_name", "=", "Patrícia Gomes") in kept.filters


def test_settle_drops_a_date_written_on_a_column_of_numbers(layer: SemanticLayer, tool: SQLTool,
                                                           novaops: Path) -> None:
    """Written for this test: the 1.5B model filled "the largest budget" with budget = today's
    date, and the whole query was refused. The filter goes; a number on that column stays."""
    filled = {"dimensions": ["projects.name", "projects.budget_usd"],
              "filters": [{"field": "projects.budget_usd", "op": "=", "value": "2026-05-15"}],
              "order": [{"field": "projects.budget_usd", "direction": "desc"}], "limit": 1}
    settled, notes = layer.settle(layer.parse(filled), "Which project has the largest budget?")
    assert settled.filters == [] and any("a date on a column of numbers" in n for n in notes)
    gold = _rows(novaops, "SELECT name, budget_usd FROM projects ORDER BY budget_usd DESC LIMIT 1")
    assert results_match(gold, _answer(layer, tool, settled), strict=True)
    with pytest.raises(SemanticQueryError):
        _answer(layer, tool, layer.parse(filled))
    number = {**filled, "filters": [{"field": "projects.budget_usd", "op": ">", "value": 100000}]}
    kept, _ = layer.settle(layer.parse(number), "Which projects have a budget above 100000?")
    assert kept.filters == [("projects.budget_usd", ">", 100000)]


def test_settle_drops_a_period_the_question_never_names(layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """A question with no time in it, filled with "today" as the expense date, answers about one day:
    the period goes, and the total is the gold; the query as filled is not."""
    filled = {"measures": ["expenses.sum_amount_usd"],
              "filters": [{"field": "expenses.category", "op": "=", "value": "hardware"},
                          {"field": "expenses.status", "op": "=", "value": "approved"},
                          {"field": "expenses.expense_date", "op": "=", "value": "2026-03-02"}]}
    question = "Qual o total das despesas de hardware que foram aprovadas?"
    settled, notes = layer.settle(layer.parse(filled), question)
    assert [f for f, _, _ in settled.filters] == ["expenses.category", "expenses.status"]
    assert any("names no period" in n for n in notes)
    gold = _rows(novaops, "SELECT SUM(amount_usd) FROM expenses WHERE category = 'hardware' AND status = 'approved'")
    ours = _answer(layer, tool, settled)
    unsettled = _answer(layer, tool, layer.parse(filled))
    assert results_match(gold, ours, strict=True) and not results_match(gold, unsettled, strict=True)
    by_id = {"dimensions": ["expenses.expense_id", "expenses.status"],
             "filters": [{"field": "expenses.expense_id", "op": "=", "value": "EXP-2026"},
                         {"field": "expenses.expense_date", "op": ">=", "value": "2026-01-01"}]}
    kept, _ = layer.settle(layer.parse(by_id), "qual o status da despesa EXP-2026?", heard=("EXP-2026",))
    assert [f for f, _, _ in kept.filters] == ["expenses.expense_id"]  # the number in an id is not a year


def test_a_date_value_in_the_users_words_reads_as_its_period(layer: SemanticLayer, tool: SQLTool,
                                                              novaops: Path) -> None:
    """The model copies "setembro de 2025" instead of the hinted period: the compiler refuses the
    words, and the period they name gives the gold total. Words that name no period stay refused."""
    question = "quanto foi gasto em hospedagem em setembro de 2025?"
    filled = {"measures": ["expenses.sum_amount_usd"],
              "filters": [{"field": "expenses.category", "op": "=", "value": "lodging"},
                          {"field": "expenses.expense_date", "op": "=", "value": "setembro de 2025"}]}
    with pytest.raises(SemanticQueryError, match="not a period"):
        _answer(layer, tool, layer.parse(filled))
    read, notes = layer.read_periods(layer.parse(filled), question, "2026-05-15")
    assert read.filters[1] == ("expenses.expense_date", "=", "2025-09") and "2025-09" in notes[0]
    gold = _rows(novaops, "SELECT SUM(amount_usd) FROM expenses WHERE category = 'lodging' "
                          "AND expense_date >= '2025-09-01' AND expense_date < '2025-10-01'")
    assert results_match(gold, _answer(layer, tool, read), strict=True)
    between = {"measures": ["expenses.count"], "filters": [
        {"field": "expenses.expense_date", "op": "between", "value": ["last month", "2026-05"]}]}
    read, _ = layer.read_periods(layer.parse(between), "expenses from last month to May", "2026-05-15")
    assert read.filters[0][2] == ["2026-04", "2026-05"]
    vague = {"measures": ["expenses.count"],
             "filters": [{"field": "expenses.expense_date", "op": "=", "value": "recently"},
                         {"field": "expenses.category", "op": "=", "value": "march 2026"}]}
    kept, notes = layer.read_periods(layer.parse(vague), "expenses filed recently", "2026-05-15")
    assert kept.filters == layer.parse(vague).filters and notes == []  # no period named; a text column untouched
    # a day the question never names, where it names one period: that period (settle dropped the
    # day, and the year with it)
    today = {"measures": ["incidents.count"],
             "filters": [{"field": "incidents.opened_at", "op": "=", "value": "2026-05-15"}]}
    read, notes = layer.read_periods(layer.parse(today), "quantos incidentes foram abertos em 2025 no auth-service?",
                                     "2026-05-15")
    assert read.filters == [("incidents.opened_at", "=", "2025")] and notes
    for named_day in ("quantos incidentes foram abertos em 15/05/2026?", "incidents opened in 2025 or 2026?"):
        kept, _ = layer.read_periods(layer.parse(today), named_day, "2026-05-15")
        assert kept.filters == layer.parse(today).filters, named_day  # a day said, or two periods: untouched


def test_another_entitys_date_phrase_spends_no_word_of_the_question(layer: SemanticLayer, tool: SQLTool,
                                                                      novaops: Path) -> None:
    """Written for this test: "aprovados em 2026" of budget requests. "aprovado em" is a date phrase
    of the expenses (their decision date), not of the requests: the status the question says stays."""
    filled = {"measures": ["budget_requests.count"],
              "filters": [{"field": "budget_requests.status", "op": "=", "value": "approved"},
                          {"field": "budget_requests.created_at", "op": "=", "value": "2026"}]}
    settled, notes = layer.settle(layer.parse(filled), "Quantos pedidos de orçamento foram aprovados em 2026?")
    assert ("budget_requests.status", "=", "approved") in settled.filters, notes
    gold = _rows(novaops, "SELECT COUNT(*) FROM budget_requests WHERE status = 'approved' "
                          "AND created_at >= '2026-01-01' AND created_at < '2027-01-01'")
    every = _rows(novaops, "SELECT COUNT(*) FROM budget_requests WHERE created_at >= '2026-01-01' "
                           "AND created_at < '2027-01-01'")
    assert gold != every and results_match(gold, _answer(layer, tool, settled), strict=True)


def test_a_period_moves_to_the_date_column_the_question_names(layer: SemanticLayer, tool: SQLTool,
                                                              novaops: Path) -> None:
    """Written for this test: "enviadas em abril" dates the submission, and the model put April on
    the expense's own date. Moved, the count is the gold's; a question that names no other date,
    or asks to see that date, keeps the filter where it is."""
    filled = {"measures": ["expenses.count"],
              "filters": [{"field": "expenses.expense_date", "op": "=", "value": "2026-04"},
                          {"field": "expenses.status", "op": "=", "value": "approved"}]}
    question = "Quantas despesas enviadas em abril de 2026 foram aprovadas?"
    read, notes = layer.read_periods(layer.parse(filled), question, "2026-05-15")
    assert read.filters[0] == ("expenses.submitted_at", "=", "2026-04") and "moved to" in notes[0]
    gold = _rows(novaops, "SELECT COUNT(*) FROM expenses WHERE status = 'approved' "
                          "AND submitted_at >= '2026-04-01' AND submitted_at < '2026-05-01'")
    spent = _rows(novaops, "SELECT COUNT(*) FROM expenses WHERE status = 'approved' "
                           "AND expense_date >= '2026-04-01' AND expense_date < '2026-05-01'")
    assert gold != spent, "the column must change the answer"
    assert results_match(gold, _answer(layer, tool, read), strict=True)
    assert layer.read_periods(layer.parse(filled), "Quantas despesas de abril de 2026 foram aprovadas?",
                              "2026-05-15")[0].filters == layer.parse(filled).filters
    shown = {**filled, "dimensions": ["expenses.submitted_at"]}
    assert layer.read_periods(layer.parse(shown), question, "2026-05-15")[0].filters == layer.parse(shown).filters
    # the measure's own words ("acknowledgement time") name no date: the incidents' period stays
    longest = {"measures": ["incidents.max_minutes_to_ack"],
               "filters": [{"field": "incidents.opened_at", "op": "=", "value": "2025"}]}
    kept, notes = layer.read_periods(layer.parse(longest), "What was the longest acknowledgement time in 2025?",
                                     "2026-05-15")
    assert kept.filters == layer.parse(longest).filters, notes
    resolved, _ = layer.read_periods(layer.parse({"measures": ["incidents.count"], "filters": longest["filters"]}),
                                     "How many incidents were resolved in 2025?", "2026-05-15")
    assert resolved.filters == [("incidents.resolved_at", "=", "2025")]


def test_a_day_written_on_a_column_of_no_date_is_the_period_the_question_names(layer: SemanticLayer, tool: SQLTool,
                                                                              novaops: Path) -> None:
    """Written for this test: "quem aprovou mais despesas em 2026?" filled with today's date as the
    approver's id; settle then drops it as a value nobody said, and the year with it. The year is
    the user's, on the expenses' date. No period named, two periods, or a date filter already
    there: untouched."""
    filled = {"measures": ["expenses.count"], "dimensions": ["approver.full_name"],
              "filters": [{"field": "expenses.approver_id", "op": "=", "value": "2026-05-15"}],
              "order": [{"field": "expenses.count", "direction": "desc"}], "limit": 1}
    read, notes = layer.read_periods(layer.parse(filled), "Quem aprovou mais despesas em 2026?", "2026-05-15")
    assert read.filters == [("expenses.expense_date", "=", "2026")] and "the period the question names" in notes[0]
    gold = _rows(novaops, "SELECT e.full_name, COUNT(*) AS n FROM expenses x JOIN employees e "
                          "ON e.employee_id = x.approver_id WHERE x.expense_date >= '2026-01-01' "
                          "AND x.expense_date < '2027-01-01' GROUP BY e.full_name ORDER BY n DESC LIMIT 1")
    everyone = _rows(novaops, "SELECT e.full_name, COUNT(*) AS n FROM expenses x JOIN employees e "
                              "ON e.employee_id = x.approver_id GROUP BY e.full_name ORDER BY n DESC LIMIT 1")
    assert gold != everyone, "the year must change the answer"
    assert results_match(gold, _answer(layer, tool, read), strict=True)
    for other in ("Quem aprovou mais despesas?", "Quem aprovou mais despesas em 2025 ou 2026?"):
        assert layer.read_periods(layer.parse(filled), other, "2026-05-15")[0].filters == layer.parse(filled).filters
    dated = {**filled, "filters": [*filled["filters"], {"field": "expenses.decided_at", "op": "=", "value": "2026"}]}
    assert layer.read_periods(layer.parse(dated), "Quem aprovou mais despesas em 2026?", "2026-05-15")[0].filters \
        == layer.parse(dated).filters


def test_settle_counts_the_records_a_question_ranks_by_how_many(layer: SemanticLayer, tool: SQLTool,
                                                                novaops: Path) -> None:
    """Written for this test: "who approved the most expenses?" filled with the largest amount per
    approver answers whoever approved one big claim; the question ranks by how many."""
    filled = {"measures": ["expenses.max_amount_usd"], "dimensions": ["approver.full_name"],
              "order": [{"field": "expenses.max_amount_usd", "direction": "desc"}], "limit": 1}
    for question in ("Who approved the most expenses?", "Quem mais aprovou despesas?", "Quem aprovou menos despesas?"):
        settled, notes = layer.settle(layer.parse(filled), question)
        assert settled.measures == ["expenses.count"] and settled.order[0][0] == "expenses.count", (question, notes)
    settled, _ = layer.settle(layer.parse(filled), "Who approved the most expenses?")
    gold = _rows(novaops, "SELECT e.full_name, COUNT(*) AS n FROM expenses x JOIN employees e "
                          "ON e.employee_id = x.approver_id WHERE x.status = 'approved' "
                          "GROUP BY e.full_name ORDER BY n DESC LIMIT 1")
    assert results_match(gold, _answer(layer, tool, settled), strict=True)
    assert not results_match(gold, _answer(layer, tool, layer.parse(filled)), strict=True)


@pytest.mark.parametrize("question", [
    "Quem gastou mais em despesas?",  # an amount spent on them
    "Which employee spent the most on expenses?",
    "Whose expenses have the most total amount?",  # the aggregation said
    "Qual a maior despesa de cada aprovador?",  # a superlative of the amount
])
def test_settle_keeps_an_amount_the_question_ranks_by(question: str, layer: SemanticLayer) -> None:
    filled = {"measures": ["expenses.sum_amount_usd"], "dimensions": ["employees.full_name"],
              "order": [{"field": "expenses.sum_amount_usd", "direction": "desc"}], "limit": 1}
    settled, notes = layer.settle(layer.parse(filled), question)
    assert settled.measures == ["expenses.sum_amount_usd"], notes


@pytest.mark.parametrize(("question", "op", "value"), [
    ("quanto foi gasto em hardware em 2025?", "=", "2025"),
    ("hardware spend since March", ">=", "2026-03"),
    ("gastos de hardware na semana 2026-W10", "=", "2026-W10"),
    ("despesas de hardware do último mês", "=", "2026-04"),
    ("hardware expenses filed before 15/03", "<", "2026-03-15"),
    ("despesas de hardware por mês", ">=", "2026-01"),  # a grain word
    ("hardware expenses in april 2026", "=", "2026-04"),
    ("quais despesas de hardware estão sem registro?", "is_null", None),  # no period: a null check stays
])
def test_settle_keeps_a_period_when_the_question_places_itself_in_time(question: str, op: str, value: Any,
                                                                       layer: SemanticLayer) -> None:
    flt = {"field": "expenses.expense_date", "op": op, "value": value}
    hardware = {"field": "expenses.category", "op": "=", "value": "hardware"}
    q = layer.parse({"measures": ["expenses.sum_amount_usd"], "filters": [hardware, flt]})
    settled, _ = layer.settle(q, question)
    assert [f for f, _, _ in settled.filters] == ["expenses.category", "expenses.expense_date"]


def test_settle_takes_the_column_the_question_names(layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """ "tempo médio de reconhecimento" filled as the average time to resolve is another number:
    the measure over the named column replaces it, and gives the gold."""
    filled = {"measures": ["incidents.avg_minutes_to_resolve"],
              "filters": [{"field": "incidents.severity", "op": "=", "value": "SEV1"}]}
    question = "Qual o tempo médio de reconhecimento dos incidentes SEV1?"
    settled, notes = layer.settle(layer.parse(filled), question)
    assert settled.measures == ["incidents.avg_minutes_to_ack"] and any("names minutes_to_ack" in n for n in notes)
    gold = _rows(novaops, "SELECT AVG(minutes_to_ack) FROM incidents WHERE severity = 'SEV1'")
    ours = _answer(layer, tool, settled)
    unsettled = _answer(layer, tool, layer.parse(filled))
    assert results_match(gold, ours, strict=True) and not results_match(gold, unsettled, strict=True)


@pytest.mark.parametrize("question", [
    "Qual o tempo médio de resolução dos incidentes SEV1?",  # its own column is said
    "tempo de reconhecimento e tempo de resolução médios dos SEV1",  # both are said
    "qual a média dos incidentes SEV1?",  # no column is said
])
def test_settle_keeps_the_measure_unless_only_another_column_is_named(question: str, layer: SemanticLayer) -> None:
    q = layer.parse({"measures": ["incidents.avg_minutes_to_resolve"]})
    assert layer.settle(q, question)[0].measures == ["incidents.avg_minutes_to_resolve"]


def test_settle_shows_the_entity_a_list_question_asks_for(layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """ "Qual projeto … e quem é o líder?" filled with the leader's name alone answers half: the
    project's label joins the rows, which are then the gold; the query as filled is not."""
    filled = {"dimensions": ["lead.full_name"],
              "filters": [{"field": "projects.start_date", "op": "=", "value": "2025-03"}]}
    question = "Qual projeto começou em março de 2025, e quem é o líder dele?"
    settled, notes = layer.settle(layer.parse(filled), question)
    assert settled.dimensions == ["projects.name", "lead.full_name"] and any("asks which projects" in n for n in notes)
    gold = _rows(novaops, "SELECT p.name, e.full_name FROM projects p JOIN employees e ON e.employee_id = p.lead_id "
                          "WHERE p.start_date >= '2025-03-01' AND p.start_date < '2025-04-01'")
    ours = _answer(layer, tool, settled)
    unsettled = _answer(layer, tool, layer.parse(filled))
    assert gold and results_match(gold, ours, strict=True) and not results_match(gold, unsettled, strict=True)


@pytest.mark.parametrize(("question", "filled", "gold"), [
    ("Qual despesa de hardware teve o menor valor?",
     {"measures": ["expenses.min_amount_usd"], "filters": [{"field": "expenses.category", "op": "=", "value": "hardware"}]},
     "SELECT expense_id, amount_usd FROM expenses WHERE category = 'hardware' ORDER BY amount_usd LIMIT 1"),
    ("Which SEV2 incident took the longest to resolve?",
     {"measures": ["incidents.max_minutes_to_resolve"],
      "filters": [{"field": "incidents.severity", "op": "=", "value": "SEV2"}]},
     "SELECT incident_id, minutes_to_resolve FROM incidents WHERE severity = 'SEV2' "
     "ORDER BY minutes_to_resolve DESC LIMIT 1"),
    ("Qual foi o projeto concluído com o maior orçamento, e quem liderou?",  # the model's own column stays
     {"measures": ["projects.max_budget_usd"], "dimensions": ["lead.full_name"],
      "filters": [{"field": "projects.status", "op": "=", "value": "completed"}]},
     "SELECT p.name, e.full_name, p.budget_usd FROM projects p JOIN employees e ON e.employee_id = p.lead_id "
     "WHERE p.status = 'completed' ORDER BY p.budget_usd DESC LIMIT 1"),
])
def test_settle_answers_which_row_holds_the_extreme_with_that_row(question: str, filled: dict[str, Any], gold: str,
                                                                  layer: SemanticLayer, tool: SQLTool,
                                                                  novaops: Path) -> None:
    """ "Which expense was the smallest?" asks for the expense: the min of the amount alone (or per
    lead) is not the gold, the row ordered by the amount is."""
    settled, notes = layer.settle(layer.parse(filled), question)
    assert not settled.measures and settled.limit == 1 and any("that row" in n for n in notes)
    want = _rows(novaops, gold)
    assert want and results_match(want, _answer(layer, tool, settled), ordered=True, strict=True)
    assert not results_match(want, _answer(layer, tool, layer.parse(filled)), strict=True)


@pytest.mark.parametrize(("question", "filled", "gold"), [
    ("Qual foi a despesa mais recente da categoria software?",  # a list of the category's expenses filled
     {"dimensions": ["expenses.expense_id"], "filters": [{"field": "expenses.category", "op": "=", "value": "software"}]},
     "SELECT expense_id, expense_date FROM expenses WHERE category = 'software' ORDER BY expense_date DESC LIMIT 1"),
    ("What was the latest SEV2 incident, and on which service?",  # "latest" read as the longest time
     {"measures": ["incidents.max_minutes_to_resolve"], "dimensions": ["incidents.service_id"],
      "filters": [{"field": "incidents.severity", "op": "=", "value": "SEV2"}]},
     "SELECT incident_id, service_id, opened_at FROM incidents WHERE severity = 'SEV2' ORDER BY opened_at DESC LIMIT 1"),
    ("Which was the oldest ticket for the search-service?",
     {"dimensions": ["tickets.ticket_id"], "filters": [{"field": "tickets.service_id", "op": "=",
                                                        "value": "search-service"}]},
     "SELECT ticket_id, created_at FROM tickets WHERE service_id = 'search-service' ORDER BY created_at LIMIT 1"),
    ("Which is the oldest incident still unresolved?",  # ordered by the date already, but every row listed
     {"dimensions": ["incidents.incident_id"], "order": [{"field": "incidents.opened_at", "direction": "asc"}],
      "filters": [{"field": "incidents.resolved_at", "op": "is_null", "value": None}]},
     "SELECT incident_id, opened_at FROM incidents WHERE resolved_at IS NULL ORDER BY opened_at LIMIT 1"),
    ("What is the oldest ticket still open?",  # a count per day filled: first the rows behind it, then the oldest
     {"measures": ["tickets.count"], "dimensions": ["tickets.ticket_id", "tickets.created_at__day"],
      "filters": [{"field": "tickets.status", "op": "=", "value": "open"}]},
     "SELECT ticket_id, created_at FROM tickets WHERE status = 'open' ORDER BY created_at LIMIT 1"),
])
def test_settle_answers_the_newest_or_oldest_row_by_the_entitys_date(
        question: str, filled: dict[str, Any], gold: str, layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """ "The most recent incident" is the row with the latest date of the entity's period
    dimension; the model's list of every row, or its largest value, is not the gold."""
    settled, notes = layer.settle(layer.parse(filled), question)
    assert not settled.measures and settled.limit == 1 and any("row:" in n for n in notes), notes
    want = _rows(novaops, gold)
    assert want and results_match(want, _answer(layer, tool, settled), ordered=True, strict=True)
    assert not results_match(want, _answer(layer, tool, layer.parse(filled)), ordered=True, strict=True)


def test_a_later_part_that_asks_for_a_column_adds_it_to_the_list(layer: SemanticLayer, tool: SQLTool,
                                                                  novaops: Path) -> None:
    """Written for this test: the model listed the newest ticket's id and date, and the second part
    of the question asks for its priority by its word; the column is added. One part alone, or a
    column named only as a condition, adds nothing."""
    filled = {"dimensions": ["tickets.ticket_id", "tickets.created_at"],
              "filters": [{"field": "tickets.service_id", "op": "=", "value": "search-service"}],
              "order": [{"field": "tickets.created_at", "direction": "desc"}], "limit": 1}
    settled, notes = layer.settle(layer.parse(filled), "Qual o chamado mais novo do search-service, e qual a prioridade?")
    assert "tickets.priority" in settled.dimensions and any("priority" in n for n in notes), notes
    gold = _rows(novaops, "SELECT ticket_id, created_at, priority FROM tickets WHERE service_id = 'search-service' "
                          "ORDER BY created_at DESC LIMIT 1")
    assert results_match(gold, _answer(layer, tool, settled), ordered=True, strict=True)
    alone, _ = layer.settle(layer.parse(filled), "Qual o chamado mais novo do search-service com prioridade?")
    assert "tickets.priority" not in alone.dimensions


RANKED = {"measures": ["expenses.count"], "dimensions": ["approver.full_name"],
          "filters": [{"field": "expenses.status", "op": "=", "value": "rejected"}]}


@pytest.mark.parametrize(("question", "gold"), [
    ("Quem decidiu mais despesas rejeitadas?", "SELECT e.full_name, COUNT(*) AS n FROM expenses x JOIN employees e "
     "ON e.employee_id = x.approver_id WHERE x.status = 'rejected' GROUP BY e.full_name ORDER BY n DESC LIMIT 1"),
    ("Who rejected the fewest expenses?", "SELECT e.full_name, COUNT(*) AS n FROM expenses x JOIN employees e "
     "ON e.employee_id = x.approver_id WHERE x.status = 'rejected' GROUP BY e.full_name ORDER BY n LIMIT 1"),
])
def test_settle_ranks_an_unordered_answer_that_asks_for_one(question: str, gold: str, layer: SemanticLayer,
                                                            tool: SQLTool, novaops: Path) -> None:
    """ "Quem decidiu mais despesas rejeitadas?" filled as the count per approver with no order is the one
    approver with the most: the model's rows (every approver) fail the gold, the settled row passes.
    "Fewest" ranks from the smallest."""
    settled, notes = layer.settle(layer.parse(RANKED), question)
    assert settled.limit == 1 and any("limit 1" in n for n in notes), notes
    want = _rows(novaops, gold)
    assert results_match(want, _answer(layer, tool, settled), ordered=True, strict=True)
    assert not results_match(want, _answer(layer, tool, layer.parse(RANKED)), strict=True)


@pytest.mark.parametrize("question", [
    "Quem decidiu mais de 5 despesas rejeitadas?",  # a bound, not a ranking
    "Who rejected more than five expenses?",
    "Quem decidiu mais despesas rejeitadas, por pessoa?",  # every group, ranked
    "Quais pessoas decidiram mais despesas rejeitadas?",  # plural: several
])
def test_settle_leaves_a_bound_or_a_breakdown_uncut(question: str, layer: SemanticLayer) -> None:
    assert layer.settle(layer.parse(RANKED), question)[0].limit is None


def test_settle_shows_the_column_a_list_question_names(layer: SemanticLayer) -> None:
    """ "… e qual a severidade?" filled with the time to resolve shows the severity; a column the
    question names stays, and two named columns leave the model's choice alone."""
    filled = {"dimensions": ["incidents.incident_id", "incidents.minutes_to_resolve"],
              "filters": [{"field": "incidents.service_id", "op": "=", "value": "auth-service"}]}
    settled, notes = layer.settle(layer.parse(filled), "Quais incidentes do auth-service, e com qual severidade?")
    assert settled.dimensions == ["incidents.incident_id", "incidents.severity"] and any("names severity" in n
                                                                                        for n in notes)
    asked = "Quais incidentes do auth-service, e quantos minutos levou a resolução de cada?"
    assert layer.settle(layer.parse(filled), asked)[0].dimensions == filled["dimensions"]
    both = "Quais incidentes do auth-service, com severidade e status?"
    assert "incidents.minutes_to_resolve" in layer.settle(layer.parse(filled), both)[0].dimensions


def test_settle_drops_a_key_whose_row_a_filter_fixes(layer: SemanticLayer) -> None:
    """Projects of the team named Payments: the owning team's id is the same in every row."""
    filled = {"dimensions": ["projects.name", "projects.owner_team_id", "projects.status"],
              "filters": [{"field": "teams.name_en", "op": "=", "value": "Payments"}]}
    settled, notes = layer.settle(layer.parse(filled), "Which projects does the Payments team own, and their status?")
    assert settled.dimensions == ["projects.name", "projects.status"], notes
    free = {**filled, "filters": [{"field": "projects.status", "op": "=", "value": "active"}]}
    assert "projects.owner_team_id" in layer.settle(layer.parse(free), "Which active projects, and whose are they?")[0].dimensions


def test_settle_drops_a_day_the_question_does_not_name(layer: SemanticLayer) -> None:
    """ "The most recent incident" filled with "opened today" asks about a day nobody named; a day
    the question names (a date, "ontem", a month) stays."""
    filled = {"dimensions": ["incidents.incident_id"], "order": [{"field": "incidents.opened_at", "direction": "desc"}],
              "limit": 1, "filters": [{"field": "incidents.opened_at", "op": "=", "value": "2026-05-15"}]}
    settled, notes = layer.settle(layer.parse(filled), "Qual foi o incidente mais recente?")
    assert settled.filters == [] and any("names no day" in n for n in notes)
    for named in ("Qual foi o incidente mais recente de ontem?", "Which incident opened on 2026-05-15 was the latest?",
                  "Qual o incidente mais recente aberto em 15 de maio?"):
        assert layer.settle(layer.parse(filled), named)[0].filters, named


@pytest.mark.parametrize("question", [
    "Qual o maior gasto com hardware até hoje, e de quem foi?",
    "Which hardware claim has been the largest up to today, and who filed it?",
    "What is the largest hardware expense until today?",
])
def test_a_phrase_that_bounds_nothing_names_no_day(question: str, layer: SemanticLayer, tool: SQLTool,
                                                   novaops: Path) -> None:
    """ "até hoje", "until today" say every row up to now: the day the model fixed to today goes,
    and the largest claim of all time is found (fixed to today, the query finds none)."""
    filled = {"dimensions": ["expenses.expense_id", "employee.full_name", "expenses.amount_usd"],
              "order": [{"field": "expenses.amount_usd", "direction": "desc"}], "limit": 1,
              "filters": [{"field": "expenses.category", "op": "=", "value": "hardware"},
                          {"field": "expenses.expense_date", "op": "=", "value": "2026-05-15"}]}
    settled, notes = layer.settle(layer.parse(filled), question)
    assert [f for f, _, _ in settled.filters] == ["expenses.category"], notes
    gold = _rows(novaops, "SELECT x.expense_id, e.full_name, x.amount_usd FROM expenses x JOIN employees e "
                          "ON e.employee_id = x.employee_id WHERE x.category = 'hardware' "
                          "ORDER BY x.amount_usd DESC LIMIT 1")
    assert results_match(gold, _answer(layer, tool, settled), strict=True)
    assert not results_match(gold, _answer(layer, tool, layer.parse(filled)), strict=True)
    today = layer.settle(layer.parse(filled), "What is the largest hardware expense filed today?")[0]
    assert "expenses.expense_date" in [f for f, _, _ in today.filters]  # a day the question names stays


@pytest.mark.parametrize(("question", "filled"), [
    ("How many incidents were opened last week?", {"measures": ["incidents.count"]}),  # "last" bounds a period
    ("Quais foram as últimas despesas de software?", {"dimensions": ["expenses.expense_id"]}),  # plural: a list
    ("What is the total of the latest expenses?", {"measures": ["expenses.sum_amount_usd"]}),  # a sum stays
])
def test_settle_leaves_recency_words_that_ask_for_no_single_row(question: str, filled: dict[str, Any],
                                                                 layer: SemanticLayer) -> None:
    settled, _ = layer.settle(layer.parse(filled), question)
    assert settled.limit is None and settled.measures == layer.parse(filled).measures


def test_settle_reads_each_one_as_a_column_of_the_listed_rows(layer: SemanticLayer, tool: SQLTool,
                                                               novaops: Path) -> None:
    """ "Quais serviços … e qual o status de cada um?" lists the services with their status; "cada
    um" points at those rows, it asks for no count per status. A real breakdown keeps its count."""
    filled = {"measures": ["services.count"], "dimensions": ["services.status"],
              "filters": [{"field": "services.tier", "op": "=", "value": 1}]}
    settled, _ = layer.settle(layer.parse(filled), "Quais serviços são tier 1, e qual o status de cada um?")
    gold = _rows(novaops, "SELECT service_id, status FROM services WHERE tier = 1")
    assert not settled.measures and results_match(gold, _answer(layer, tool, settled), strict=True)
    # a later stage's part, over the rows an earlier source found: each row keeps its name
    earlier = {"dimensions": ["services.status"], "filters": [{"field": "services.service_id", "op": "in",
                                                               "value": ["auth-service", "payments-api"]}]}
    part, _ = layer.settle(layer.parse(earlier), "e qual o status de cada um?")
    assert part.dimensions == ["services.service_id", "services.status"]
    per_status, _ = layer.settle(layer.parse(filled), "Quantos serviços tier 1 há em cada status?")
    assert per_status.measures == ["services.count"] and per_status.dimensions == ["services.status"]


@pytest.mark.parametrize(("question", "filled"), [
    ("What is the longest time to resolve among SEV4 incidents?", {"measures": ["incidents.max_minutes_to_resolve"]}),
    ("Qual o maior valor de despesa de hardware?", {"measures": ["expenses.max_amount_usd"]}),
    ("Which incidents took longest to resolve?", {"measures": ["incidents.max_minutes_to_resolve"]}),  # several rows
    ("Which team has the largest single expense?", {"measures": ["expenses.max_amount_usd"],
                                                    "dimensions": ["teams.name"]}),  # not an expense asked for
])
def test_settle_keeps_an_extreme_value_when_no_row_is_asked_for(question: str, filled: dict[str, Any],
                                                                layer: SemanticLayer) -> None:
    settled, _ = layer.settle(layer.parse(filled), question)
    assert settled.measures == layer.parse(filled).measures


@pytest.mark.parametrize(("question", "query"), [
    ("quem lidera os projetos ativos?", {"dimensions": ["lead.full_name"],  # no "which project"
                                         "filters": [{"field": "projects.status", "op": "=", "value": "active"}]}),
    ("qual o maior orçamento de um projeto?", {"measures": ["projects.max_budget_usd"]}),  # a value, not a row
    ("quais chamados do serviço de busca estão abertos?",  # the service is fixed: one row named already
     {"dimensions": ["tickets.ticket_id"], "filters": [{"field": "services.name", "op": "=", "value": "Search"}]}),
    ("quantos chamados por serviço?", {"dimensions": ["tickets.service_id"]}),  # "por" is not a question word
])
def test_settle_adds_no_label_the_question_does_not_ask_for(question: str, query: dict[str, Any],
                                                            layer: SemanticLayer) -> None:
    q = layer.parse(query)
    settled, _ = layer.settle(q, question)
    assert not [d for d in settled.dimensions if d not in q.dimensions]


def test_settle_drops_a_time_grain_the_question_does_not_name(layer: SemanticLayer, tool: SQLTool,
                                                              novaops: Path) -> None:
    """ "How many … in the second half of 2025?" filled per month gives six counts, not one."""
    filled = {"measures": ["tickets.count"], "dimensions": ["tickets.created_at__month"],
              "filters": [{"field": "tickets.priority", "op": "=", "value": "P1"},
                          {"field": "tickets.created_at", "op": "=", "value": "2025-H2"}]}
    question = "How many P1 tickets came in during the second half of 2025?"
    settled, notes = layer.settle(layer.parse(filled), question)
    assert settled.dimensions == [] and any("grain the question does not name" in n for n in notes)
    gold = _rows(novaops, "SELECT COUNT(*) FROM tickets WHERE priority = 'P1' AND created_at >= '2025-07-01' "
                          "AND created_at < '2026-01-01'")
    ours = _answer(layer, tool, settled)
    unsettled = _answer(layer, tool, layer.parse(filled))
    assert results_match(gold, ours, strict=True) and not results_match(gold, unsettled, strict=True)
    monthly = layer.settle(layer.parse(filled), "How many P1 tickets came in per month in the second half of 2025?")
    assert monthly[0].dimensions == ["tickets.created_at__month"]


def test_settle_adds_a_segment_the_question_names(layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """ "outstanding tickets per priority" filled without the segment counts every ticket."""
    filled = {"measures": ["tickets.count"], "dimensions": ["tickets.priority"]}
    question = "How many outstanding tickets does each priority have?"
    settled, notes = layer.settle(layer.parse(filled), question)
    assert settled.segments == ["tickets.active"] and any("segment tickets.active added" in n for n in notes)
    gold = _rows(novaops, "SELECT priority, COUNT(*) FROM tickets WHERE status IN ('open', 'in_progress') "
                          "GROUP BY priority")
    ours = _answer(layer, tool, settled)
    unsettled = _answer(layer, tool, layer.parse(filled))
    assert results_match(gold, ours, strict=True) and not results_match(gold, unsettled, strict=True)


@pytest.mark.parametrize(("question", "query"), [
    ("How many outstanding tickets were closed?",  # a filter already sets the segment's column
     {"measures": ["tickets.count"], "filters": [{"field": "tickets.status", "op": "=", "value": "closed"}]}),
    ("is the outstanding ticket TCK-1001 a P1?",  # one row the question names
     {"dimensions": ["tickets.priority"], "filters": [{"field": "tickets.ticket_id", "op": "=", "value": "TCK-1001"}]}),
    ("How many tickets are there per priority?", {"measures": ["tickets.count"], "dimensions": ["tickets.priority"]}),
    ("tickets per service of the unresolved incidents",  # another entity's segment word
     {"measures": ["tickets.count"], "dimensions": ["tickets.service_id"]}),
])
def test_settle_adds_no_segment_the_question_does_not_name(question: str, query: dict[str, Any],
                                                           layer: SemanticLayer) -> None:
    assert layer.settle(layer.parse(query), question)[0].segments == []


@pytest.mark.parametrize(("question", "field", "value", "heard"), [
    ("incidentes SEV3 abertos em novembro de 2025", "incidents.severity", "SEV3", ()),
    ("quanto foi gasto com passagens aereas aprovadas?", "expenses.category", "airfare", ()),  # a declared word
    ("Who sits in the Portto office?", "employees.office_city", "Porto", ()),  # a one-letter typo
    ("who works in the Porto office?", "employees.office_city", ["Porto", "Lisboa"], ()),  # one of two said
    ("quantos chamados do ledger estão abertos?", "tickets.service_id", "ledger-service", ("ledger-service",)),
    ("how many active tickets does the team have?", "tickets.status", ["open", "in_progress"], ()),  # a segment's
])
def test_settle_keeps_a_value_the_question_says(question: str, field: str, value: Any, heard: tuple[str, ...],
                                                layer: SemanticLayer) -> None:
    op = "in" if isinstance(value, list) else "="
    q = layer.parse({"measures": ["employees.count"] if field.startswith("employees") else [],
                     "dimensions": [] if field.startswith("employees") else [f"{field.split('.')[0]}.{field.split('.')[1]}"],
                     "filters": [{"field": field, "op": op, "value": value}]})
    settled, _ = layer.settle(q, question, heard=heard)
    # (a value said of another column may be added beside it: "aprovadas")
    assert [x for x in settled.filters if x[0] == field] == [(field, op, ["Porto"] if value == ["Porto", "Lisboa"]
                                                             else value)]


@pytest.mark.parametrize(("question", "filled", "gold"), [
    ("Quantos chamados abertos tem cada prioridade?",
     {"measures": ["tickets.count"], "dimensions": ["tickets.priority"]},
     "SELECT priority, COUNT(*) FROM tickets WHERE status = 'open' GROUP BY priority"),
    ("Which person has the most rejected expense claims?",
     {"measures": ["expenses.count"], "dimensions": ["employee.full_name"],
      "order": [{"field": "expenses.count", "direction": "desc"}], "limit": 1},
     "SELECT e.full_name, COUNT(*) AS n FROM expenses x JOIN employees e ON e.employee_id = x.employee_id "
     "WHERE x.status = 'rejected' GROUP BY e.full_name ORDER BY n DESC, e.full_name LIMIT 1"),
    # "rejeitou" is the approver's role (the query groups by it) and the state: both
    ("Quem mais rejeitou despesas em 2026, e quantas?",
     {"measures": ["expenses.count"], "dimensions": ["approver.full_name"],
      "filters": [{"field": "expenses.decided_at", "op": "=", "value": "2026"}],
      "order": [{"field": "expenses.count", "direction": "desc"}], "limit": 1},
     "SELECT e.full_name, COUNT(*) AS n FROM expenses x JOIN employees e ON e.employee_id = x.approver_id "
     "WHERE x.status = 'rejected' AND x.decided_at >= '2026-01-01' AND x.decided_at < '2027-01-01' "
     "GROUP BY e.full_name ORDER BY n DESC LIMIT 1"),
])
def test_settle_adds_a_value_the_question_says(question: str, filled: dict[str, Any], gold: str,
                                               layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """The mirror of the span rule: a declared value the question says and the model left out is
    a filter; without it every row is counted."""
    settled, notes = layer.settle(layer.parse(filled), question)
    assert any("added (the question says it)" in n for n in notes)
    want = _rows(novaops, gold)
    assert results_match(want, _answer(layer, tool, settled), strict=True)
    assert not results_match(want, _answer(layer, tool, layer.parse(filled)), strict=True)


@pytest.mark.parametrize(("question", "filled"), [
    # a date column's phrase, with the preposition joined to its article
    ("Quantos chamados foram abertos no último trimestre de 2025?", {"measures": ["tickets.count"]}),
    ("How many new tickets came in last week?", {"measures": ["tickets.count"]}),  # a word of time
    ("Is ticket TCK-1001 open?", {"dimensions": ["tickets.status"],  # one row named by its key
                                  "filters": [{"field": "tickets.ticket_id", "op": "=", "value": "TCK-1001"}]}),
    ("How many tickets are open and how many are closed?",  # two values of one column
     {"measures": ["tickets.count"], "dimensions": ["tickets.status"]}),
    ("How many tickets do the degraded services have?",  # a value of another entity's column
     {"measures": ["tickets.count"], "dimensions": ["service.name"]}),
    # "aprovou" may be the approver's role, and the query goes through the spender instead
    ("Quantas despesas a Patrícia Gomes aprovou?",
     {"measures": ["expenses.count"], "filters": [{"field": "employee.full_name", "op": "=", "value": "Patrícia Gomes"}]}),
    ("Em quantos projetos cada líder trabalha?",  # "líder" is also the projects' lead
     {"measures": ["project_members.count_distinct_project_id"], "dimensions": ["employee.full_name"]}),
    ("How many outstanding tickets does each priority have, open ones included?",  # a segment bounds it
     {"measures": ["tickets.count"], "dimensions": ["tickets.priority"], "segments": ["tickets.active"]}),
])
def test_settle_adds_no_value_said_another_way_or_not_at_all(question: str, filled: dict[str, Any],
                                                             layer: SemanticLayer) -> None:
    settled, notes = layer.settle(layer.parse(filled), question)
    assert not any("added (the question says it)" in n for n in notes)
    assert settled.filters == layer.parse(filled).filters


def test_a_date_phrase_joined_to_its_article_says_no_value(layer: SemanticLayer) -> None:
    """ "abertos no mês de fevereiro" is "abertos em", with the preposition joined to its article:
    the model's status filter goes, as it does for "abertos em 2026"."""
    filled = {"measures": ["tickets.count"], "filters": [{"field": "tickets.status", "op": "=", "value": "open"},
                                                         {"field": "tickets.created_at", "op": "=", "value": "2026-02"}]}
    settled, notes = layer.settle(layer.parse(filled), "Quantos chamados foram abertos no mês de fevereiro de 2026?")
    assert [f for f, _, _ in settled.filters] == ["tickets.created_at"]
    kept = layer.settle(layer.parse(filled), "Quantos chamados abertos no sistema foram criados em 2026?")[0]
    assert "tickets.status" in [f for f, _, _ in kept.filters]  # no time word follows: the status


def test_settle_lists_the_rows_behind_a_count_the_question_does_not_ask_for(layer: SemanticLayer, tool: SQLTool,
                                                                            novaops: Path) -> None:
    """ "Which open tickets …?" filled as a count answers with a number nobody asked for: the count's
    drill members list the rows (with the column the question bounds), which the gold list's columns
    are among; the count as filled is not the list."""
    question = "Which open tickets have not been updated since before 2026-03?"
    filled = {"measures": ["tickets.count"], "dimensions": ["tickets.updated_at__month"],
              "filters": [{"field": "tickets.status", "op": "=", "value": "open"},
                          {"field": "tickets.updated_at", "op": "<", "value": "2026-03"}]}
    settled, notes = layer.settle(layer.parse(filled), question)
    assert settled.measures == [] and "tickets.ticket_id" in settled.dimensions and "tickets.updated_at" in \
        settled.dimensions and any("no number" in n for n in notes)
    gold = _rows(novaops, "SELECT ticket_id, updated_at FROM tickets WHERE status = 'open' AND updated_at < '2026-03-01'")
    assert gold, "a gold query with no rows proves nothing"
    ours = _answer(layer, tool, settled)
    unsettled = _answer(layer, tool, layer.parse(filled))
    assert results_match(gold, ours) and not results_match(gold, unsettled)


def test_a_span_s_comparison_word_ranks_nothing_and_one_figure_has_no_order(layer: SemanticLayer, tool: SQLTool,
                                                                          novaops: Path) -> None:
    """Written for this test: "menos" in "há menos de 90 dias" bounds a date, it asks for no
    number, so "Quem …" filled as a count lists the people; "which tickets …" filled as their count
    ordered by it lists the tickets (one figure has no order). "Quantos …" stays a count."""
    since = {"field": "employees.hire_date", "op": ">=", "value": "2026-02-14"}
    filled = {"measures": ["employees.count"], "filters": [since]}
    settled, notes = layer.settle(layer.parse(filled), "Quem entrou há menos de 90 dias?")
    assert not settled.measures and "employees.full_name" in settled.dimensions, notes
    gold = _rows(novaops, "SELECT full_name FROM employees WHERE hire_date >= '2026-02-14'")
    assert len(gold) > 1 and results_match(gold, _answer(layer, tool, settled))
    count, _ = layer.settle(layer.parse(filled), "Quantas pessoas entraram há menos de 90 dias?")
    assert count.measures == ["employees.count"]
    ordered = {"measures": ["tickets.count"], "order": [{"field": "tickets.count", "direction": "desc"}],
               "filters": [{"field": "tickets.created_at", "op": ">=", "value": "2026-05-05"}]}
    listed, notes = layer.settle(layer.parse(ordered), "Which tickets were opened in the last 10 days?")
    assert not listed.measures and "tickets.ticket_id" in listed.dimensions, notes
    assert any("one figure has no order" in n for n in notes)


def test_settle_lists_what_the_model_chose_to_show_instead_of_a_count_per_row(layer: SemanticLayer, tool: SQLTool,
                                                                              novaops: Path) -> None:
    """ "Quais categorias …?" filled as a count per category: the categories, without the count."""
    filled = {"measures": ["expenses.count"], "dimensions": ["expenses.category"],
              "filters": [{"field": "expenses.status", "op": "=", "value": "rejected"}]}
    settled, _ = layer.settle(layer.parse(filled), "Quais categorias de despesa tiveram pedidos rejeitados?")
    assert settled.measures == [] and settled.dimensions == ["expenses.category"]
    gold = _rows(novaops, "SELECT DISTINCT category FROM expenses WHERE status = 'rejected'")
    ours = _answer(layer, tool, settled)
    unsettled = _answer(layer, tool, layer.parse(filled))
    assert results_match(gold, ours, strict=True) and not results_match(gold, unsettled, strict=True)


def test_settle_lists_the_records_a_question_asks_for_instead_of_a_sum(layer: SemanticLayer, tool: SQLTool,
                                                                      novaops: Path) -> None:
    """Written for this test: "Quais despesas acima de 1500 dólares foram rejeitadas?" filled as a
    sum per category answers with figures nobody asked for: the expenses themselves, with their
    amounts, are the answer."""
    filled = {"measures": ["expenses.sum_amount_usd"], "dimensions": ["expenses.category"],
              "filters": [{"field": "expenses.amount_usd", "op": ">", "value": 1500},
                          {"field": "expenses.status", "op": "=", "value": "rejected"}]}
    settled, notes = layer.settle(layer.parse(filled), "Quais despesas acima de 1500 dólares foram rejeitadas?")
    assert settled.measures == [] and "expenses.expense_id" in settled.dimensions
    assert any("asks which expenses" in n for n in notes)
    gold = _rows(novaops, "SELECT expense_id, amount_usd FROM expenses WHERE status = 'rejected' AND amount_usd > 1500")
    assert len(gold) > 1, "one row or none proves nothing"
    ours = _answer(layer, tool, settled)
    unsettled = _answer(layer, tool, layer.parse(filled))
    assert results_match(gold, ours) and not results_match(gold, unsettled)


@pytest.mark.parametrize("question", [
    "Qual o valor total das despesas rejeitadas acima de 1500 dólares?",  # the aggregate said
    "Qual é o gasto em despesas rejeitadas acima de 1500 dólares?",  # no plural word for the records
    "Quais despesas rejeitadas acima de 1500 dólares somam mais, por categoria?",  # a breakdown word
])
def test_settle_keeps_a_sum_the_question_asks_for(question: str, layer: SemanticLayer) -> None:
    filled = {"measures": ["expenses.sum_amount_usd"], "dimensions": ["expenses.category"],
              "filters": [{"field": "expenses.amount_usd", "op": ">", "value": 1500},
                          {"field": "expenses.status", "op": "=", "value": "rejected"}]}
    settled, notes = layer.settle(layer.parse(filled), question)
    assert settled.measures == ["expenses.sum_amount_usd"], notes


@pytest.mark.parametrize("question", [
    "Quantos chamados abertos não são atualizados desde antes de 2026-03?",  # a count word
    "Which service has the most open tickets?",  # a superlative
    "open tickets per month before 2026-03",  # a breakdown word
])
def test_settle_keeps_a_count_the_question_asks_for(question: str, layer: SemanticLayer) -> None:
    filled = {"measures": ["tickets.count"], "dimensions": ["tickets.updated_at__month"],
              "filters": [{"field": "tickets.status", "op": "=", "value": "open"},
                          {"field": "tickets.updated_at", "op": "<", "value": "2026-03"}]}
    assert layer.settle(layer.parse(filled), question)[0].measures == ["tickets.count"]


def test_settle_orders_a_series_over_time_in_time_order(layer: SemanticLayer) -> None:
    filled = {"measures": ["incidents.count"], "dimensions": ["incidents.opened_at__month"],
              "filters": [{"field": "incidents.opened_at", "op": "=", "value": "2025"}]}
    settled, _ = layer.settle(layer.parse(filled), "incidentes por mês em 2025")
    assert settled.order == [("incidents.opened_at__month", "asc")]


def test_settle_turns_a_value_that_names_a_segment_into_the_segment(layer: SemanticLayer, tool: SQLTool,
                                                                     novaops: Path) -> None:
    """status = 'active' is no stored status; active tickets are a segment (open or in progress)."""
    filled = {"measures": ["tickets.count"], "filters": [{"field": "tickets.status", "op": "=", "value": "active"}]}
    settled, notes = layer.settle(layer.parse(filled), "how many active tickets are there?")
    assert settled.filters == [] and settled.segments == ["tickets.active"] and notes
    gold = _rows(novaops, "SELECT COUNT(*) FROM tickets WHERE status IN ('open', 'in_progress')")
    ours = _answer(layer, tool, settled)
    assert results_match(gold, ours, strict=True)
    with pytest.raises(SemanticQueryError):
        layer.compile(layer.parse(filled), stored_values(tool))  # as filled: not a stored value


@pytest.mark.parametrize("question", ["Apart from the executives, who holds the largest approval limit?",
                                      "Excluindo os executivos, quem tem o maior limite de aprovação?"])
@pytest.mark.parametrize("filled", [
    {"measures": ["employees.max_approval_limit_usd"], "segments": ["employees.c_level"]},
    # the segment's word filed as a role no row holds, or as the value of a count
    {"measures": ["employees.max_approval_limit_usd"],
     "filters": [{"field": "employees.role", "op": "=", "value": "executives"}]},
    {"measures": ["employees.max_approval_limit_usd"],
     "filters": [{"field": "employees.count", "op": "=", "value": "executivos"}]},
])
def test_settle_reads_a_segment_after_an_exclusion_word_as_the_rows_outside_it(
        question: str, filled: dict[str, Any], layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """ "Apart from the executives, who …": everyone but the segment's rows, and "who has the
    largest" is that person's row, not the value alone."""
    settled, notes = layer.settle(layer.parse(filled), question)
    assert settled.segments == [] and settled.filters == [("employees.level", "<", 7)], notes
    assert settled.dimensions == ["employees.full_name", "employees.approval_limit_usd"] and settled.limit == 1
    gold = _rows(novaops, "SELECT full_name, approval_limit_usd FROM employees WHERE level < 7 AND approval_limit_usd = "
                          "(SELECT MAX(approval_limit_usd) FROM employees WHERE level < 7)")
    assert results_match(gold, _answer(layer, tool, settled), strict=True)
    inside = _answer(layer, tool, layer.parse({**filled, "filters": [], "segments": ["employees.c_level"]}))
    assert not results_match(gold, inside, strict=True)  # the executives' own figure is another answer


@pytest.mark.parametrize("question", ["Among the executives, who holds the largest approval limit?",
                                      "What is the largest approval limit of the executives?"])
def test_settle_keeps_a_segment_no_exclusion_word_stands_before(question: str, layer: SemanticLayer) -> None:
    filled = {"measures": ["employees.max_approval_limit_usd"], "segments": ["employees.c_level"]}
    settled, _ = layer.settle(layer.parse(filled), question)
    assert settled.segments == ["employees.c_level"] and settled.filters == []
    # a person cue names the row only when the question says it
    assert ("employees.full_name" in settled.dimensions) is question.startswith("Among")


def test_a_key_filter_given_the_name_of_the_row_it_points_at_follows_the_join(layer: SemanticLayer, tool: SQLTool,
                                                                              novaops: Path) -> None:
    """employees.team_id = 'Pagamentos' names a team, not a key: the filter moves to team.name."""
    team = _rows(novaops, "SELECT name FROM teams ORDER BY team_id LIMIT 1")[0][0]
    q = layer.parse({"measures": ["employees.count"],
                     "filters": [{"field": "employees.team_id", "op": "=", "value": team.upper()}]})
    compiled = layer.compile(q, stored_values(tool))
    assert compiled.query.filters == [("team.name", "=", team)]
    gold = _rows(novaops, f"SELECT COUNT(*) FROM employees e JOIN teams t ON t.team_id = e.team_id WHERE t.name = '{team}'")
    assert results_match(gold, [tuple(r.values()) for r in tool.query(compiled.sql)], strict=True)
    with pytest.raises(SemanticQueryError, match="not a stored value"):
        layer.compile(layer.parse({"measures": ["employees.count"], "filters": [
            {"field": "employees.team_id", "op": "=", "value": "Nenhum Time Assim"}]}), stored_values(tool))


def test_settle_keeps_one_field(layer: SemanticLayer) -> None:
    """A query whose only dimension is filtered keeps it: an empty query cannot be compiled."""
    q = layer.parse({"dimensions": ["tickets.status"], "filters": [{"field": "tickets.status", "op": "=",
                                                                    "value": "open"}]})
    assert layer.settle(q, "tickets open")[0].dimensions == ["tickets.status"]


def test_the_sql_still_goes_through_the_guard(layer: SemanticLayer, tool: SQLTool) -> None:
    sql = layer.compile(layer.parse({"measures": ["tickets.count"]})).sql
    checked = tool.validate(sql)
    assert checked.upper().startswith(("SELECT", "WITH")) and "LIMIT" in checked.upper()


# ---------------------------------------------------------------------------- refused objects

@pytest.mark.parametrize(("query", "message"), [
    ({"measures": ["expenses.total_spent"]}, r"measures\.0: unknown measure 'expenses\.total_spent'"),
    ({"measures": ["expenses.sum_amount"]}, r"did you mean expenses\.sum_amount_usd"),
    ({"measures": ["expenses.count"], "filters": [{"field": "expenses.status", "op": "like", "value": "p%"}]},
     r"filters\.0\.op: unknown operator 'like'; operators: = != > >= < <= in not_in between contains"),
    ({"dimensions": ["expenses.colour"]}, r"dimensions\.0: unknown dimension 'expenses\.colour'"),
    ({"measures": ["expenses.count"], "extra": 1}, r"extra: Extra inputs are not permitted"),
])
def test_an_invalid_query_object_is_refused_clearly(layer: SemanticLayer, query: dict[str, Any], message: str) -> None:
    with pytest.raises(SemanticQueryError, match=message):
        layer.parse(query)


@pytest.mark.parametrize(("query", "message"), [
    ({"measures": ["expenses.count", "tickets.count"]}, "measures of one entity per query, not of expenses and tickets"),
    ({"measures": ["teams.count"], "dimensions": ["expenses.category"]}, "expenses is not reachable from teams"),
    ({"measures": ["tickets.count"], "dimensions": ["employees.full_name"]},
     "employees is not reachable from tickets.*assignee.<field>, requester.<field>"),
    ({"measures": ["expenses.count"], "filters": [{"field": "expenses.expense_date", "op": "=", "value": "March"}]},
     "'March' is not a period"),
    ({"measures": ["expenses.count"], "filters": [{"field": "expenses.amount_usd", "op": "in", "value": 5}]},
     "expenses.amount_usd: in takes a list"),
    ({"measures": ["expenses.count"], "filters": [{"field": "expenses.amount_usd", "op": ">", "value": "lots"}]},
     "'lots' is not a number"),
    ({}, "name at least one measure or dimension"),
])
def test_a_query_the_model_cannot_answer_is_refused_clearly(layer: SemanticLayer, query: dict[str, Any],
                                                            message: str) -> None:
    with pytest.raises(SemanticQueryError, match=message):
        layer.compile(layer.parse(query))


def test_the_query_schema_is_generated_from_the_model(layer: SemanticLayer) -> None:
    """Names are enums for validation; the grammar gets them as a prefix-tree regex that llama.cpp
    converts (a flat enum of ~300 names made sampling crawl)."""
    import json
    import re

    from llama_cpp import llama_grammar

    fields = layer.query_model.model_fields
    assert list(fields) == ["expressible", "measures", "dimensions", "segments", "filters", "order", "limit"]
    schema = layer.query_model.model_json_schema()
    assert schema["required"] == ["expressible"]  # empty lists cost tokens: left out, as the examples show
    pattern = schema["$defs"]["Dimension"]["pattern"]
    assert all(re.fullmatch(pattern, n) for n in layer.dimension_names)
    assert not re.fullmatch(pattern, "expenses.amount") and not re.fullmatch(pattern, "expenses.amount_usd__hour")
    assert "expenses.expense_date__week" in layer.dimension_names and "approver.full_name" in layer.dimension_names
    assert schema["$defs"]["Operator"]["enum"] == ["=", "!=", ">", ">=", "<", "<=", "in", "not_in", "between",
                                                   "contains", "is_null", "not_null"]  # a short list stays an enum
    assert trie_pattern(["ab.c", "ab.cd", "b"]) == "^(ab[.]c(d)?|b)$"
    grammar = llama_grammar.json_schema_to_gbnf(json.dumps(schema))
    llama_grammar.LlamaGrammar.from_string(grammar, verbose=False)  # parses: no silent fallback to plain JSON


def test_periods() -> None:
    import datetime as dt

    assert period_bounds("2026-W15") == (dt.date(2026, 4, 6), dt.date(2026, 4, 13))
    assert period_bounds("2025-H2") == (dt.date(2025, 7, 1), dt.date(2026, 1, 1))
    assert period_bounds("2026-Q4") == (dt.date(2026, 10, 1), dt.date(2027, 1, 1))
    assert period_bounds("2026-12") == (dt.date(2026, 12, 1), dt.date(2027, 1, 1))
    assert period_bounds("2026-02-28") == (dt.date(2026, 2, 28), dt.date(2026, 3, 1))
    found = dict((p, w) for w, p in question_periods(
        "gastos de setembro de 2025 e do segundo trimestre de 2026, last month, 2º semestre de 2024", "2026-05-15"))
    assert {"2025-09", "2026-Q2", "2026-04", "2024-H2"} <= set(found)


@pytest.mark.parametrize(("question", "op", "day"), [
    ("Quantos chamados entraram nas últimas três semanas?", ">=", "2026-04-24"),
    ("Which expenses were filed in the past 2 months?", ">=", "2026-03-15"),
    ("Incidents from more than one year ago", "<", "2025-05-15"),
    ("Quais tickets estão parados há mais de 45 dias?", "<", "2026-03-31"),
    ("Which tickets have stayed open for over 10 days?", "<", "2026-05-05"),
    ("Who has been with the company for less than 60 days?", ">=", "2026-03-16"),
    ("Quem tem menos de 90 dias de casa?", ">=", "2026-02-14"),
    ("Quem tem mais de dois anos de casa?", "<", "2024-05-15"),
])
def test_a_span_counted_back_from_today_is_a_day(question: str, op: str, day: str) -> None:
    assert [(o, d) for _, o, d in question_durations(question, "2026-05-15")] == [(op, day)]


@pytest.mark.parametrize("question", [
    "Quais incidentes demoraram mais de 3 dias para resolver?",  # a duration of the row, not a bound
    "Quantos tickets foram abertos em 30 de abril?",
    "What did the last 2 incidents have in common?",  # no unit: a count of rows
])
def test_a_duration_of_the_rows_is_no_span(question: str) -> None:
    assert question_durations(question, "2026-05-15") == []


def test_a_span_bounds_the_date_column_the_model_wrote(layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """ "nos últimos 20 dias" written as "2026-05-15-20" and a per-day breakdown: the date column is
    bounded by the computed day, and "dias" asks for no breakdown; with no date filter at all, the
    counted entity's own date takes the bound."""
    filled = layer.parse({"measures": ["incidents.count"], "dimensions": ["incidents.opened_at__day"],
                          "filters": [{"field": "incidents.opened_at", "op": ">", "value": "2026-05-15-20"}]})
    question = "Quantos incidentes tivemos nos últimos 60 dias?"
    with pytest.raises(SemanticQueryError):
        _answer(layer, tool, filled)
    read, notes = layer.read_durations(filled, question, "2026-05-15")
    assert read.filters == [("incidents.opened_at", ">=", "2026-03-16")] and read.dimensions == [] and len(notes) == 2
    gold = _rows(novaops, "SELECT COUNT(*) FROM incidents WHERE opened_at >= '2026-03-16'")
    assert gold[0][0] > 0 and results_match(gold, _answer(layer, tool, read), strict=True)
    bare = layer.parse({"measures": ["incidents.count"]})
    assert layer.read_durations(bare, question, "2026-05-15")[0].filters == [("incidents.opened_at", ">=", "2026-03-16")]
    assert layer.read_durations(bare, "Quantos incidentes tivemos em 2026?", "2026-05-15") == (bare, [])
    # the date column the question names wins over the one the model filtered
    claims = layer.parse({"dimensions": ["expenses.expense_id"],
                          "filters": [{"field": "expenses.expense_date", "op": "<", "value": "2026-05-15"}]})
    sent = layer.read_durations(claims, "Quais despesas foram submetidas há mais de 10 dias?", "2026-05-15")[0]
    assert sent.filters == [("expenses.submitted_at", "<", "2026-05-05")]


def test_hints_name_stored_values_synonyms_and_periods(layer: SemanticLayer, tool: SQLTool) -> None:
    from tools.sql_schema import load_schema
    from tools.sql_values import value_index

    question = "Quanto gastamos com hospedagem aprovada pelo pessoal de Recife em abril de 2026?"
    hits = [(h.table, h.column, h.value) for h in
            value_index(tool.url, tool.query, load_schema(tool.schema_path)).match(question)]
    hints = layer.hints(question, hits, "2026-05-15")
    assert "employees.office_city = 'Recife'" in hints
    assert "expenses.category = 'lodging'" in hints and "expenses.status = 'approved'" in hints
    assert "'abril de 2026' = period 2026-04" in hints


def test_the_prompt_keeps_its_static_part_first(layer: SemanticLayer) -> None:
    from tramita.base.prompts import split

    a = split("semantic_query", model=layer.describe(), examples=layer.examples_text(), today="2026-05-15",
              hints="x", question="one")
    b = split("semantic_query", model=layer.describe(), examples=layer.examples_text(), today="2026-05-16",
              hints="y", question="two")
    assert a[0] == b[0] and "expenses: expense reimbursement requests" in a[0]
    assert a[1].rstrip().endswith('Question: """one"""')


# ----------------------------------------------------------------------------- the SQL backend

def _services(novaops: Path, profile: str) -> Any:
    from tools.services import Services
    from tramita.base.settings import Settings

    return Services(Settings.embedded(novaops.parent, llm_profile=profile))


def test_the_backend_falls_back_to_text_to_sql_and_says_so(novaops: Path) -> None:
    """The scripted model cannot fill the query object: the answer comes from raw text-to-SQL. (The
    question has a word the direct fill cannot account for, "sistema", so the LLM is asked.)"""
    from tools.backends.base import BackendCall
    from tools.backends.sql import SQLBackend
    from tools.llm import Usage

    call = BackendCall(question="Quantas despesas estão pendentes no sistema?", today="2026-05-15", profile="scripted",
                       services=_services(novaops, "scripted"), usage=Usage())
    ctx = SQLBackend().run(call)
    assert ctx["path"] == "fallback" and ctx["semantic_error"] and not ctx["error"]
    assert ctx["rows"] == [{"n": 44}] and "expenses" in ctx["query"]


def test_the_backend_answers_on_the_semantic_path(novaops: Path) -> None:
    """A model that fills the object: one LLM call, the compiled SQL, the rows; path=semantic."""
    import json

    from tools.backends.base import BackendCall
    from tools.backends.sql import SQLBackend
    from tools.llm import Usage, override_model
    from tools.scripted_model import ScriptedChatModel, rule_based

    def respond(prompt: str) -> str:
        if prompt.startswith("You turn a question about the database"):
            assert 'Question: """How many expenses are pending on paper?"""' in prompt
            return json.dumps({"expressible": True, "measures": ["expenses.count"], "dimensions": [], "segments": [],
                               "filters": [{"field": "expenses.status", "op": "=", "value": "pendente"}],
                               "order": [], "limit": None})
        return rule_based(prompt)

    usage = Usage()
    override_model("scripted", ScriptedChatModel(responder=respond))
    try:
        # "paper": a word the direct fill cannot account for, so the LLM fills the object
        call = BackendCall(question="How many expenses are pending on paper?", today="2026-05-15", profile="scripted",
                           services=_services(novaops, "scripted"), usage=usage)
        ctx = SQLBackend().run(call)
    finally:
        override_model("scripted", None)
    assert ctx["path"] == "semantic" and ctx["error"] is None and usage.calls == 1
    assert [list(r.values()) for r in ctx["rows"]] == [[44]]
    assert ctx["semantic_query"]["filters"] == [{"field": "expenses.status", "op": "=", "value": "pending"}]
    assert "FROM" in ctx["query"].upper() and "expenses" in ctx["query"]


# ------------------------------------------------------------------------------------ PostgreSQL

@pytest.mark.postgres
def test_the_same_queries_compile_for_postgresql(pg_database: str) -> None:
    from ingest.sql_loader import load_sql

    load_sql(pg_database, SAMPLE_DIR, progress=False)
    tool = SQLTool(pg_database)
    layer = layer_for(MODEL, tool)
    pg = {"two-hop join, order by a measure", "a role join, a segment and a measure filter (HAVING)",
          "a derived dimension, listed", "no measures: a role and a date before a quarter",
          "a filter value linked to the stored one in a sibling column", "a null segment, top 3"}
    for case in sorted(pg):
        query, gold = CASES[case]
        ours = _answer(layer, tool, layer.parse(query))
        expected = [tuple(r.values()) for r in tool.query(gold)]
        assert expected and results_match(expected, ours, ordered=sql_is_ordered(gold)), case
    weeks = layer.compile(layer.parse({"measures": ["tickets.count"], "dimensions": ["tickets.created_at__week"],
                                       "filters": [{"field": "tickets.created_at", "op": "=", "value": "2026-W11"}]}))
    rows = tool.query(weeks.sql)
    assert len(rows) == 1 and str(rows[0]["tickets.created_at"]).startswith("2026-03-09")
    # the fallback's date part as PostgreSQL reads it (it has no YEAR() either)
    wrote = "SELECT COUNT(*) AS n FROM incidents WHERE YEAR(opened_at) = 2025"
    mended, notes = mend(wrote, "postgres", {}, " ")
    assert "EXTRACT(YEAR FROM opened_at)" in mended and notes
    gold = tool.query("SELECT COUNT(*) AS n FROM incidents WHERE opened_at >= '2025-01-01' AND opened_at < '2026-01-01'")
    assert tool.query(mended) == gold and gold[0]["n"] > 0


# ---------------------------------------------------------------------------- the real local model

RIGHT: list[bool] = []
REAL_QUESTIONS = [
    ("How many incidents of each severity were opened in the first quarter of 2026?",
     "SELECT severity, COUNT(*) FROM incidents WHERE opened_at >= '2026-01-01' AND opened_at < '2026-04-01' "
     "GROUP BY severity"),
    ("Qual o valor total das despesas de treinamento aprovadas?",
     "SELECT SUM(amount_usd) FROM expenses WHERE category = 'training' AND status = 'approved'"),
    ("What is the average approval limit per country?",
     "SELECT country, AVG(approval_limit_usd) FROM employees GROUP BY country"),
]


@pytest.fixture
def _models(pristine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Models live with the pristine data dir (or TRAMITA_MODELS_DIR), never per test."""
    monkeypatch.setenv("TRAMITA_MODELS_DIR", os.environ.get("TRAMITA_MODELS_DIR") or str(pristine / "models"))


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.parametrize(("question", "gold"), REAL_QUESTIONS)
def test_real_model_answers_on_the_semantic_path(question: str, gold: str, tool: SQLTool, novaops: Path,
                                                 _models: None) -> None:
    from tools.llm import Usage

    usage = Usage()
    run = answer_semantic(question, tool, MODEL, today="2026-05-15", backend="local", usage=usage)
    assert run.ok, (run.reason, run.query_object)
    assert usage.calls == run.attempts <= 2
    ours = [tuple(r.values()) for r in run.rows]
    RIGHT.append(results_match(_rows(novaops, gold), ours))


@pytest.mark.real_model
@pytest.mark.slow
def test_real_model_gets_most_semantic_queries_right() -> None:
    """After the cases above: at least two of the three query objects give the gold rows. One case is
    not a reliable signal at temperature 0 (a reused prompt prefix can flip a near-tie: the model
    once added a filter to "average approval limit per country" that matched no row)."""
    if len(RIGHT) < len(REAL_QUESTIONS):
        pytest.skip("run together with test_real_model_answers_on_the_semantic_path")
    assert sum(RIGHT) >= 2, RIGHT


def test_passages_found_before_give_values_only_to_a_question_that_points_back() -> None:
    """Written for this test: a passage's names are the question's only when it points back at them;
    a set of rows an earlier source found is always handed on."""
    from tools.backends.base import Finding
    from tools.semantic_layer import heard_before

    given = [Finding("docs", text="Only the CFO and the Finance Manager approve."), Finding("graph", values=("E001",))]
    assert heard_before("How many expenses did they approve?", given) == given
    assert heard_before("Quantas despesas essas pessoas aprovaram?", given) == given
    kept = heard_before("Which employee has the highest approval limit?", given)
    assert [f.text for f in kept] == ["", ""] and kept[1].values == ("E001",)


POLICY_ROLES = ("Expense policy, section 4: only members of the finance approvers group (the CFO and the "
                "Finance Manager) approve or reject expenses, each up to their own approval limit.")


@pytest.mark.real_model
@pytest.mark.slow
def test_real_model_answers_a_records_question_after_a_passage_it_does_not_point_at(
        tool: SQLTool, novaops: Path, _models: None) -> None:
    """Written for this test: the documents were read first (the question is near a rule question);
    the question asks for the highest limit of all employees and points at nothing, so the roles the
    passage names do not bound it."""
    from tools.backends.base import Finding
    from tools.llm import Usage

    run = answer_semantic("Which employee has the highest approval limit?", tool, MODEL, today="2026-05-15",
                          backend="local", usage=Usage(), given=(Finding("docs", text=POLICY_ROLES),))
    gold = _rows(novaops, "SELECT full_name, approval_limit_usd FROM employees ORDER BY approval_limit_usd DESC LIMIT 1")
    assert run.ok and results_match(gold, [tuple(r.values()) for r in run.rows]), (run.query_object, run.rows)


def test_two_equalities_on_one_column_become_either_value(layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """"x = a AND x = b" matches no row: the model wrote the two services a question named as two
    equalities, and the count was 0. One `in` filter answers it; one equality stays as it is."""
    filled = {"expressible": True, "measures": ["tickets.count"], "segments": ["tickets.active"],
              "filters": [{"field": "services.service_id", "op": "=", "value": "api-gateway"},
                          {"field": "services.service_id", "op": "=", "value": "web-frontend"}]}
    question = "how many active tickets do api-gateway and web-frontend have?"
    raw = layer.parse(filled)
    settled, notes = layer.settle(raw, question)
    gold = _rows(novaops, "SELECT COUNT(*) FROM tickets WHERE status IN ('open', 'in_progress') "
                          "AND service_id IN ('api-gateway', 'web-frontend')")
    assert _answer(layer, tool, settled) == gold and gold != [(0,)]
    assert _answer(layer, tool, raw) == [(0,)]
    assert any("cannot equal 2 values" in n for n in notes)
    one = layer.parse({**filled, "filters": filled["filters"][:1]})
    assert layer.settle(one, question)[0].filters == one.filters


@pytest.mark.parametrize(("question", "kept"), [
    ("how many active tickets do those services carry", False),  # "those services": the earlier set
    ("quantos chamados ativos esses serviços têm", False),
    ("how many active tickets does each of those services carry", True),  # a breakdown word
    ("how many active tickets per service", True),
    # a clause pointing back qualifies the word: the set an earlier source named, not a breakdown
    ("how many active tickets do the services that team runs carry", False),
    ("quantos chamados ativos os serviços que esse time opera têm", False),
    ("how many active tickets do the services that run on this host carry", False),
    ("how many active tickets do the services that are tier 1 carry per service", True),
    ("quantos chamados ativos os serviços que são tier 1 têm", True),  # "que são": no pointing back
])
def test_a_reference_to_an_earlier_set_is_not_a_breakdown(question: str, kept: bool, layer: SemanticLayer) -> None:
    """The model groups "how many tickets do those services carry" by service: the word after a
    reference word points at the set an earlier source found (bound later), it does not ask for
    one count per service."""
    q = layer.parse({"measures": ["tickets.count"], "dimensions": ["services.service_id"], "segments": ["tickets.active"]})
    settled, _ = layer.settle(q, question)
    assert (settled.dimensions == ["services.service_id"]) is kept


def test_settle_reads_in_total_as_one_figure_over_the_named_rows(layer: SemanticLayer, tool: SQLTool,
                                                                  novaops: Path) -> None:
    """ "How many open tickets in total for the services a, b and c" names the services and asks one
    figure: one count over them all, not a count per service. A grouping cue keeps the breakdown."""
    ids = ["billing-engine", "legacy-invoicing", "payments-api"]
    filled = {"measures": ["tickets.count"], "dimensions": ["services.service_id"], "segments": ["tickets.active"],
              "filters": [{"field": "services.service_id", "op": "in", "value": ids}]}
    question = "How many active tickets are there in total for the services billing-engine, legacy-invoicing, payments-api?"
    settled, notes = layer.settle(layer.parse(filled), question)
    gold = _rows(novaops, "SELECT COUNT(*) FROM tickets WHERE service_id IN ('billing-engine', 'legacy-invoicing', "
                          "'payments-api') AND status IN ('open', 'in_progress')")
    assert settled.dimensions == [] and any("one figure" in n for n in notes), notes
    assert results_match(gold, _answer(layer, tool, settled), strict=True)
    # the model's per-service rows are a wrong answer to that question
    assert not results_match(gold, _answer(layer, tool, layer.parse(filled)), strict=False)
    for grouped in ("Quantos chamados ativos ao todo por serviço, entre billing-engine, legacy-invoicing e payments-api?",
                    "How many active tickets does each service have in total: billing-engine, legacy-invoicing, "
                    "payments-api?"):
        assert layer.settle(layer.parse(filled), grouped)[0].dimensions == ["services.service_id"], grouped


def test_settle_writes_a_field_through_the_role_the_measures_entity_has(layer: SemanticLayer, tool: SQLTool,
                                                                         novaops: Path) -> None:
    """A count of tickets filtered by "employee.full_name" (a role expenses have, not tickets) is
    written through the role the question names: "atribuídos a" is the assignee, "opened by" the
    requester. With neither named, the two roles stay the model's problem (the refusal asks)."""
    filled = {"measures": ["tickets.count"], "segments": ["tickets.active"],
              "filters": [{"field": "employee.full_name", "op": "=", "value": "Marcelo Vieira"}]}
    settled, notes = layer.settle(layer.parse(filled), "Quantos chamados ativos estão atribuídos ao Marcelo Vieira?")
    assert settled.filters == [("assignee.full_name", "=", "Marcelo Vieira")] and any("assignee" in n for n in notes)
    gold = _rows(novaops, "SELECT COUNT(*) FROM tickets t JOIN employees e ON e.employee_id = t.assignee_id "
                          "WHERE e.full_name = 'Marcelo Vieira' AND t.status IN ('open', 'in_progress')")
    assert results_match(gold, _answer(layer, tool, settled), strict=True) and gold[0][0] > 0
    opened, _ = layer.settle(layer.parse(filled), "How many active tickets were opened by Marcelo Vieira?")
    assert opened.filters == [("requester.full_name", "=", "Marcelo Vieira")]
    assert not results_match(gold, _answer(layer, tool, opened), strict=False)  # the requester's count differs
    neither, _ = layer.settle(layer.parse(filled), "Quantos chamados ativos tem o Marcelo Vieira?")
    assert neither.filters == [("employee.full_name", "=", "Marcelo Vieira")]


def test_a_key_given_part_of_a_rows_name_is_linked_to_that_one_row(layer: SemanticLayer, tool: SQLTool,
                                                                   novaops: Path) -> None:
    """ "Tickets of the services the Reliability team owns" filled as owner_team_id = 'Reliability'
    links to the one team whose name holds that word; a surname two people share links to neither."""
    def filled(value: str) -> Any:
        return layer.parse({"measures": ["tickets.count"],
                            "filters": [{"field": "services.owner_team_id", "op": "=", "value": value}]})

    linked = layer.compile(filled("Reliability"), stored_values(tool)).query
    assert linked.filters == [("owner_team.name_en", "=", "Site Reliability Engineering")]
    gold = _rows(novaops, "SELECT COUNT(*) FROM tickets t JOIN services s ON s.service_id = t.service_id "
                          "WHERE s.owner_team_id = 'T06'")
    assert results_match(gold, _answer(layer, tool, linked), strict=True)
    assignee = {"measures": ["tickets.count"], "filters": [{"field": "tickets.assignee_id", "op": "=", "value": "Vieira"}]}
    assert layer.compile(layer.parse(assignee), stored_values(tool)).query.filters == [
        ("assignee.full_name", "=", "Marcelo Vieira")]
    shared = {**assignee, "filters": [{"field": "tickets.assignee_id", "op": "=", "value": "Ferreira"}]}
    with pytest.raises(SemanticQueryError, match="is not a stored value"):  # two people share the surname
        layer.compile(layer.parse(shared), stored_values(tool))


def test_settle_takes_the_role_the_question_names_over_the_default_one(layer: SemanticLayer, tool: SQLTool,
                                                                       novaops: Path) -> None:
    """Expenses per "employees.full_name" follow the default role (who spent); "quem aprovou" names
    the approver's words only, so the breakdown is per approver. A question that names the
    spender's words, both roles' words, or neither keeps the model's field."""
    filled = {"measures": ["expenses.count"], "dimensions": ["employees.full_name"],
              "filters": [{"field": "expenses.status", "op": "=", "value": "rejected"}]}
    settled, notes = layer.settle(layer.parse(filled), "Quem aprovou ou recusou mais despesas rejeitadas, por pessoa?")
    assert settled.dimensions == ["approver.full_name"] and any("approver" in n for n in notes), notes
    gold = _rows(novaops, "SELECT e.full_name, COUNT(*) FROM expenses x JOIN employees e ON e.employee_id = x.approver_id "
                          "WHERE x.status = 'rejected' GROUP BY e.full_name")
    assert results_match(gold, _answer(layer, tool, settled), strict=True)
    assert not results_match(gold, _answer(layer, tool, layer.parse(filled)), strict=False)  # per spender
    for kept in ("Quais pessoas tiveram mais despesas rejeitadas, por pessoa?",
                 "De quem são as despesas rejeitadas, e quem aprovou, por pessoa?"):
        assert layer.settle(layer.parse(filled), kept)[0].dimensions == ["employees.full_name"], kept


def test_a_list_names_a_person_through_the_role_its_rows_have(layer: SemanticLayer, tool: SQLTool,
                                                               novaops: Path) -> None:
    """ "Who led incident X?" filled with the plain employees' name beside the incident's filter
    resolves from no entity (refused: a repair call); the incident's one role to people does."""
    filled = layer.parse({"dimensions": ["incidents.commander_id", "employees.full_name"],
                          "filters": [{"field": "incidents.incident_id", "op": "=", "value": "INC-2041"}]})
    with pytest.raises(SemanticQueryError, match="not reachable"):
        _answer(layer, tool, filled)
    settled, notes = layer.settle(filled, "Who led the response to INC-2041?")
    assert "commander.full_name" in settled.dimensions and any("commander" in n for n in notes), notes
    gold = _rows(novaops, "SELECT i.commander_id, e.full_name FROM incidents i JOIN employees e "
                          "ON e.employee_id = i.commander_id WHERE i.incident_id = 'INC-2041'")
    assert gold and results_match(gold, _answer(layer, tool, settled), strict=True)
    # a list that already resolves keeps its fields
    plain = layer.parse({"dimensions": ["employees.full_name"],
                         "filters": [{"field": "employees.office_city", "op": "=", "value": "Porto"}]})
    assert layer.settle(plain, "Who works in Porto?")[0].dimensions == ["employees.full_name"]


def test_a_count_counts_the_entity_the_question_counts(layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """ "How many tickets … per service" filled as the count of the services named counts one per
    service; the count the question's cue names gives the gold. A question that counts the
    services themselves, or names no counted entity, keeps the model's count."""
    filled = layer.parse({"measures": ["services.count"], "dimensions": ["services.service_id"],
                          "filters": [{"field": "services.name", "op": "in", "value": ["Payments API", "Auth Service"]}]})
    question = "How many tickets were raised against Payments API and Auth Service, per service?"
    recounted, notes = layer.recount(filled, question)
    assert recounted.measures == ["tickets.count"] and "counts tickets" in notes[0]
    gold = _rows(novaops, "SELECT service_id, COUNT(*) FROM tickets WHERE service_id IN ('payments-api', 'auth-service') "
                          "GROUP BY service_id")
    assert results_match(gold, _answer(layer, tool, recounted), strict=True)
    assert not results_match(gold, _answer(layer, tool, filled), strict=True)
    for kept in ("How many services are Payments API and Auth Service together?",
                 "Show Payments API and Auth Service, per service."):
        assert layer.recount(filled, kept) == (filled, []), kept


def test_a_role_is_named_by_its_whole_phrase() -> None:
    """ "approved meal expense" does not say "approved by"; "atribuídos ao" says "atribuído a"."""
    from tools.semantic_layer import _says

    assert _says("quantos chamados estao atribuidos ao marcelo".split(), "atribuído a")
    assert not _says("the average approved meal expense".split(), "approved by")
    assert not _says("quem mais aprovou despesas".split(), "de quem")
    assert _says("quem aprovou mais".split(), "aprovou")


def test_a_measure_moves_to_the_entity_the_filters_name_when_its_column_carries_the_word(
        layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """ "Add up the budgets of the completed projects" filled as the sum of the budgets entity with a
    filter on projects: budgets cannot reach projects, and the compiler refuses. The projects'
    own budget column is the budget meant, and gives the gold; a filter on an entity with no such
    column leaves the query as filled."""
    filled = layer.parse({"measures": ["budgets.sum_amount_usd"],
                          "filters": [{"field": "projects.status", "op": "=", "value": "completed"}]})
    with pytest.raises(SemanticQueryError, match="not reachable"):
        layer.plan(filled)
    moved, notes = layer.rebase_measures(filled)
    assert moved.measures == ["projects.sum_budget_usd"] and "not reachable" in notes[0]
    gold = _rows(novaops, "SELECT SUM(budget_usd) FROM projects WHERE status = 'completed'")
    assert results_match(gold, _answer(layer, tool, moved), strict=True)
    other = layer.parse({"measures": ["budgets.sum_amount_usd"],
                         "filters": [{"field": "incidents.severity", "op": "=", "value": "SEV1"}]})
    assert layer.rebase_measures(other) == (other, [])  # incidents have no budget column
    reachable = layer.parse({"measures": ["budgets.sum_amount_usd"],
                             "filters": [{"field": "budgets.quarter", "op": "=", "value": "2026-Q1"}]})
    assert layer.rebase_measures(reachable) == (reachable, [])


# ------------------------------------------------------------------------------- ranked values

@pytest.mark.parametrize(("question", "op", "value", "side"), [
    ("Quais chamados abertos têm prioridade P2 ou mais urgente?", ">=", "P2", ["P1", "P2"]),
    ("Which open tickets are less urgent than P2?", "<", "P2", ["P3", "P4"]),
    ("Quais chamados abertos têm prioridade P2 ou menor?", ">=", "P2", ["P2", "P3", "P4"]),  # the words win
    ("Which open tickets rank above P3 in priority?", ">", "P3", ["P1", "P2"]),
    ("Which open tickets have priority beyond P3?", ">", "P3", ["P1", "P2"]),  # no words: the comparative
])
def test_a_comparison_on_a_scale_is_the_values_on_its_side(question: str, op: str, value: str, side: list[str],
                                                           layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """Written for this test: "P2 or more urgent" compared as text is P2 to P4, the opposite of
    urgency; on the declared scale it is P1 and P2, and the rows are the gold's."""
    filled = {"dimensions": ["tickets.ticket_id"],
              "filters": [{"field": "tickets.priority", "op": op, "value": value},
                          {"field": "tickets.status", "op": "=", "value": "open"}]}
    settled, notes = layer.settle(layer.parse(filled), question)
    assert ("tickets.priority", "in", side) in settled.filters and any("on its scale" in n for n in notes)
    listed = ", ".join(f"'{v}'" for v in side)
    gold = _rows(novaops, f"SELECT ticket_id FROM tickets WHERE status = 'open' AND priority IN ({listed})")
    assert gold and results_match(gold, _answer(layer, tool, settled))
    as_text = [v for v in ("P1", "P2", "P3", "P4") if {">": v > value, ">=": v >= value, "<": v < value}[op]]
    if as_text != side:  # as text, it is other rows
        assert not results_match(gold, _answer(layer, tool, layer.parse(filled)))


def test_a_comparison_off_a_scale_is_left_as_it_is(layer: SemanticLayer) -> None:
    """Written for this test: a number column, or a value the scale does not hold, is compared as filled."""
    amount = {"dimensions": ["expenses.expense_id"], "filters": [{"field": "expenses.amount_usd", "op": ">", "value": 900}]}
    assert layer.settle(layer.parse(amount), "Which expenses are above 900 dollars?")[0].filters == \
        [("expenses.amount_usd", ">", 900)]
    odd = {"dimensions": ["tickets.ticket_id"], "filters": [{"field": "tickets.priority", "op": ">=", "value": "P9"}]}
    assert layer.settle(layer.parse(odd), "Which tickets are P9 or more urgent?")[0].filters == \
        [("tickets.priority", ">=", "P9")]


def test_a_scale_needs_two_values(tmp_path: Path) -> None:
    data = yaml.safe_load(MODEL.read_text(encoding="utf-8"))
    data["entities"]["teams"]["dimensions"]["name"]["ranked"] = {"up": ["above"], "down": ["below"]}  # no values
    bad = tmp_path / "semantic_model.yaml"
    bad.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    with pytest.raises(PolicyError) as err:
        load_semantic_model(bad)
    assert f"{bad}: field entities.teams.dimensions.name" in str(err.value) and "ranked" in str(err.value)


def test_a_list_question_shows_the_rows_an_adjective_names(layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """Written for this test: "which open tickets … have no assignee" filled with the empty assignee
    column alone names no ticket; a column an is-null filter fixes is empty in every row."""
    filled = {"dimensions": ["tickets.assignee_id"],
              "filters": [{"field": "tickets.status", "op": "=", "value": "open"},
                          {"field": "tickets.assignee_id", "op": "is_null", "value": None}]}
    settled, notes = layer.settle(layer.parse(filled), "Which open tickets have no assignee?")
    assert settled.dimensions == ["tickets.ticket_id"], notes
    gold = _rows(novaops, "SELECT ticket_id FROM tickets WHERE status = 'open' AND assignee_id IS NULL")
    assert gold and results_match(gold, _answer(layer, tool, settled), strict=True)
    assert not results_match(gold, _answer(layer, tool, layer.parse(filled)), strict=True)


# ------------------------------------------------------------------------------- roles named by their words

def test_a_role_the_question_names_is_shown(layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """Written for this test: "…and who opened it?" filled with the ticket's own columns alone
    does not answer who; the requester's name is added, and the rows are the gold's."""
    filled = {"dimensions": ["tickets.ticket_id", "tickets.created_at"],
              "filters": [{"field": "tickets.status", "op": "=", "value": "in_progress"}],
              "order": [{"field": "tickets.created_at", "direction": "desc"}], "limit": 1}
    question = "Which in-progress ticket is the newest, and who opened it?"
    gold = _rows(novaops, "SELECT t.ticket_id, t.created_at, e.full_name FROM tickets t JOIN employees e "
                          "ON e.employee_id = t.requester_id WHERE t.status = 'in_progress' "
                          "ORDER BY t.created_at DESC LIMIT 1")
    settled, notes = layer.settle(layer.parse(filled), question)
    assert "requester.full_name" in settled.dimensions and any("role requester" in n for n in notes)
    assert results_match(gold, _answer(layer, tool, settled), strict=True)
    assert not results_match(gold, _answer(layer, tool, layer.parse(filled)))  # as filled: no name


@pytest.mark.parametrize(("question", "filled"), [
    # the role is a condition (a segment on its column), not a column to show
    ("Liste os chamados P4 sem responsável.",
     {"dimensions": ["tickets.ticket_id"], "segments": ["tickets.unassigned"],
      "filters": [{"field": "tickets.priority", "op": "=", "value": "P4"}]}),
    # the role's entity is filtered on: its name would repeat the filter
    ("Which people of the Dados team have a manager in Porto?",
     {"dimensions": ["employees.full_name"], "filters": [{"field": "manager.office_city", "op": "=", "value": "Porto"}]}),
    ("Which in-progress ticket is the newest?",  # no role named
     {"dimensions": ["tickets.ticket_id"], "filters": [{"field": "tickets.status", "op": "=", "value": "in_progress"}]}),
])
def test_a_role_that_is_a_condition_or_unnamed_is_not_added(layer: SemanticLayer, question: str,
                                                            filled: dict[str, Any]) -> None:
    settled, _ = layer.settle(layer.parse(filled), question)
    assert not any(d.split(".", 1)[0] in ("requester", "assignee", "manager") for d in settled.dimensions)


def test_a_filter_on_one_person_goes_through_the_role_the_question_names(layer: SemanticLayer, tool: SQLTool,
                                                                        novaops: Path) -> None:
    """Written for this test: "how many people report to X" filled as a count of X is 1; through
    the manager role the question names it is X's reports, the gold's count."""
    filled = {"measures": ["employees.count"],
              "filters": [{"field": "employees.full_name", "op": "=", "value": "Priscila Antunes"}]}
    gold = _rows(novaops, "SELECT COUNT(*) FROM employees e JOIN employees m ON e.manager_id = m.employee_id "
                          "WHERE m.full_name = 'Priscila Antunes'")
    settled, notes = layer.settle(layer.parse(filled), "Quantas pessoas reportam diretamente à Priscila Antunes?")
    assert ("manager.full_name", "=", "Priscila Antunes") in settled.filters and notes
    assert gold[0][0] > 1 and results_match(gold, _answer(layer, tool, settled), strict=True)
    assert not results_match(gold, _answer(layer, tool, layer.parse(filled)))
    # no role named: a count of the people called so stays one
    alone, _ = layer.settle(layer.parse(filled), "Quantas pessoas se chamam Priscila Antunes?")
    assert ("employees.full_name", "=", "Priscila Antunes") in alone.filters


# ------------------------------------------------------------------------------- the fallback's mends
# SQL the model wrote that runs but answers another question, mended before the guard runs it
# (`tools.sql_mend`, `SemanticLayer.mend_sql`), checked by its rows on the test database.

URGENCY = Scale(("P1", "P2", "P3", "P4"), ("more urgent",), ("less urgent",))


def _ours(tool: SQLTool, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in tool.query(sql)]


def test_an_anti_join_written_as_an_inner_join_becomes_a_left_join(layer: SemanticLayer, tool: SQLTool,
                                                                  novaops: Path) -> None:
    """"Which tickets were never handed to anyone?" written with an inner join is empty by
    construction; mended, it gives the gold rows."""
    wrote = ("SELECT t.ticket_id, e.full_name FROM tickets t INNER JOIN employees e ON t.assignee_id = e.employee_id "
             "WHERE e.employee_id IS NULL")
    gold = _rows(novaops, "SELECT ticket_id FROM tickets WHERE assignee_id IS NULL")
    mended, notes = layer.mend_sql(wrote, "Which tickets were never handed to anyone?")
    assert "LEFT JOIN" in mended and notes and "LEFT" in notes[0]
    assert gold and _ours(tool, wrote) == []
    assert results_match(gold, _ours(tool, mended))


@pytest.mark.parametrize("wrote", [
    # a column of the joined table that may be NULL: a real filter, not an anti-join
    "SELECT e.full_name FROM tickets t JOIN employees e ON t.assignee_id = e.employee_id WHERE e.manager_id IS NULL",
    # IS NOT NULL, and a left join already
    "SELECT t.ticket_id FROM tickets t JOIN employees e ON t.assignee_id = e.employee_id WHERE e.employee_id IS NOT NULL",
    "SELECT t.ticket_id FROM tickets t LEFT JOIN employees e ON t.assignee_id = e.employee_id WHERE e.employee_id IS NULL",
])
def test_other_joins_are_left_as_written(layer: SemanticLayer, wrote: str) -> None:
    assert layer.mend_sql(wrote, "Which tickets have an assignee?") == (wrote, [])


@pytest.mark.parametrize(("question", "wrote", "side"), [
    ("Which open tickets are P2 or more urgent?", "SELECT ticket_id FROM tickets WHERE status = 'open' AND priority >= 'P2'",
     ["P1", "P2"]),
    ("Quais chamados abertos são P3 ou menos urgentes?", "SELECT ticket_id FROM tickets WHERE status = 'open' AND priority <= 'P3'",
     ["P3", "P4"]),
    ("Which open tickets are P2 or more urgent?", "SELECT ticket_id FROM tickets t WHERE t.status = 'open' AND 'P2' <= t.priority",
     ["P1", "P2"]),
])
def test_a_comparison_on_a_scale_is_read_by_the_questions_words(question: str, wrote: str, side: list[str],
                                                                 layer: SemanticLayer, tool: SQLTool,
                                                                 novaops: Path) -> None:
    listed = ", ".join(f"'{v}'" for v in side)
    gold = _rows(novaops, f"SELECT ticket_id FROM tickets WHERE status = 'open' AND priority IN ({listed})")
    mended, notes = layer.mend_sql(wrote, question)
    assert gold and results_match(gold, _ours(tool, mended)) and "on its scale" in notes[0]
    assert not results_match(gold, _ours(tool, wrote))  # as text it is other rows


def test_without_words_for_a_side_the_model_s_text_comparison_stays(layer: SemanticLayer) -> None:
    """`priority <= 'P3'` is P1..P3 as text, which may be what the model meant: only words decide."""
    wrote = "SELECT ticket_id FROM tickets WHERE priority <= 'P3'"
    assert layer.mend_sql(wrote, "Which tickets are in the top three priorities?") == (wrote, [])


def test_a_subquery_is_mended_in_its_own_scope() -> None:
    wrote = ("SELECT owner FROM svc WHERE id IN (SELECT s FROM tk WHERE tk.priority > 'P3') "
             "AND grade > 'P3'")
    mended, notes = mend(wrote, "sqlite", {("tk", "priority"): URGENCY}, " more urgent than p3 ")
    assert "tk.priority IN ('P1', 'P2', 'P3')" not in mended and "IN ('P1', 'P2')" in mended
    assert "grade > 'P3'" in mended and len(notes) == 1  # svc.grade has no scale


def test_a_mysql_date_part_is_read_as_sqlite_reads_it(layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """ "The services with the most incidents in 2025" written with YEAR(), which SQLite lacks:
    mended to strftime, it gives the gold rows; a query with no date part is left as written."""
    wrote = ("SELECT i.service_id, COUNT(*) AS n FROM incidents i WHERE YEAR(i.opened_at) = 2025 AND "
             "MONTH(i.opened_at) <= 6 GROUP BY i.service_id ORDER BY n DESC, i.service_id")
    gold = _rows(novaops, "SELECT service_id, COUNT(*) AS n FROM incidents WHERE opened_at >= '2025-01-01' AND "
                          "opened_at < '2025-07-01' GROUP BY service_id ORDER BY n DESC, service_id")
    with pytest.raises(SQLExecutionError, match="no such function"):
        tool.query(wrote)
    mended, notes = layer.mend_sql(wrote, "Which services had incidents in the first half of 2025?")
    assert gold and results_match(gold, _ours(tool, mended), ordered=True) and len(notes) == 2
    plain = "SELECT service_id FROM incidents WHERE opened_at >= '2025-01-01'"
    assert layer.mend_sql(plain, "Which services had incidents since 2025?") == (plain, [])


def test_a_column_under_the_wrong_alias_moves_to_the_one_table_that_has_it(layer: SemanticLayer, tool: SQLTool,
                                                                           novaops: Path) -> None:
    """Written for this test: "the open tickets each person holds, with their priority" qualified
    the priority by the people's alias; employees has no priority, tickets has, so it is the ticket's."""
    wrote = ("SELECT e.full_name, e.priority FROM tickets t JOIN employees e ON t.assignee_id = e.employee_id "
             "WHERE t.status = 'open'")
    gold = _rows(novaops, "SELECT e.full_name, t.priority FROM tickets t JOIN employees e "
                          "ON t.assignee_id = e.employee_id WHERE t.status = 'open'")
    mended, notes = layer.mend_sql(wrote, "Which open tickets does each person hold, and how urgent are they?")
    with pytest.raises(SQLExecutionError, match="no such column"):
        tool.query(wrote)
    assert gold and results_match(gold, _ours(tool, mended))
    assert notes == ["e.priority read as t.priority: employees has no column priority, tickets has"]


@pytest.mark.parametrize("wrote", [
    # two other tables have the column: which one is meant is not for a rule to say
    "SELECT e.status FROM tickets t JOIN employees e ON t.assignee_id = e.employee_id JOIN projects p ON 1 = 1",
    # no table of the SELECT has it: the guard's error goes to the repair call
    "SELECT e.colour FROM tickets t JOIN employees e ON t.assignee_id = e.employee_id",
    # the alias's own table has it
    "SELECT t.status FROM tickets t JOIN employees e ON t.assignee_id = e.employee_id",
])
def test_other_qualifiers_are_left_as_written(layer: SemanticLayer, wrote: str) -> None:
    assert layer.mend_sql(wrote, "Which tickets does each person hold?") == (wrote, [])


def test_scale_side_rules() -> None:
    assert scale_side(URGENCY, ">=", "P2", " p2 or more urgent ") == (["P1", "P2"], "the words say toward the top")
    assert scale_side(URGENCY, ">", "P2", " beyond p2 ") == (["P1"], "the operator says toward the top")
    assert scale_side(URGENCY, ">", "P2", " beyond p2 ", words_only=True) is None
    assert scale_side(URGENCY, "=", "P2", " more urgent ") is None
    assert scale_side(URGENCY, ">", "P9", " more urgent ") is None
    assert scale_side(URGENCY, ">", "P1", " more urgent than p1 ") is None  # nothing above the top


def test_unparsable_sql_is_left_to_the_guard() -> None:
    assert mend("SELEC priority >= 'P2' FROM", "sqlite", {("tickets", "priority"): URGENCY}, " more urgent ") == \
        ("SELEC priority >= 'P2' FROM", [])


def test_an_aggregate_of_the_column_it_is_grouped_by_is_each_row_s_value(layer: SemanticLayer, tool: SQLTool,
                                                                        novaops: Path) -> None:
    """Written for this test: "the pending hardware claims, and the amount of each one" filled as a
    sum of the amount per amount is one value per amount, which hides which claim asked it; the
    rows are each claim's own. When the question asks for the total, the total is kept instead."""
    filled = {"measures": ["expenses.sum_amount_usd"], "dimensions": ["expenses.amount_usd"],
              "filters": [{"field": "expenses.status", "op": "=", "value": "pending"},
                          {"field": "expenses.category", "op": "=", "value": "hardware"}]}
    rows, notes = layer.settle(layer.parse(filled), "Quais despesas de hardware estão pendentes, e qual o valor de cada uma?")
    gold = _rows(novaops, "SELECT expense_id, amount_usd FROM expenses WHERE status = 'pending' AND category = 'hardware'")
    assert not rows.measures and any("each row's own value" in n for n in notes)
    assert len(gold) > 1 and results_match(gold, _answer(layer, tool, rows))
    assert not results_match(gold, _answer(layer, tool, layer.parse(filled)))  # as filled: no claim named
    total, _ = layer.settle(layer.parse(filled), "Qual o valor total das despesas de hardware pendentes?")
    gold_total = _rows(novaops, "SELECT SUM(amount_usd) FROM expenses WHERE status = 'pending' AND category = 'hardware'")
    assert total.measures == ["expenses.sum_amount_usd"] and results_match(gold_total, _answer(layer, tool, total),
                                                                           strict=True)


def test_an_aggregate_of_the_column_only_the_order_names_is_each_row_s_value(layer: SemanticLayer, tool: SQLTool,
                                                                            novaops: Path) -> None:
    """The same mistake with the column named only in the order (the compiler groups by it too):
    "the pending training claims, largest first, and what each one costs"."""
    filled = {"measures": ["expenses.sum_amount_usd"], "dimensions": [],
              "filters": [{"field": "expenses.status", "op": "=", "value": "pending"},
                          {"field": "expenses.category", "op": "=", "value": "training"}],
              "order": [{"field": "expenses.amount_usd", "direction": "desc"}]}
    question = "Which training claims are still pending, largest first, and what does each one cost?"
    rows, notes = layer.settle(layer.parse(filled), question)
    gold = _rows(novaops, "SELECT expense_id, amount_usd FROM expenses WHERE status = 'pending' AND category = 'training'")
    assert not rows.measures and any("each row's own value" in n for n in notes)
    assert len(gold) > 1 and results_match(gold, _answer(layer, tool, rows))
    assert not results_match(gold, _answer(layer, tool, layer.parse(filled)))


# ------------------------------------------------------------------ a text column that names periods

def test_a_period_reads_as_the_labels_of_a_column_that_names_periods() -> None:
    """A year is four quarters, a half two, a month lies in one quarter but is not all of it."""
    assert period_labels("2026", "quarter") == (["2026-Q1", "2026-Q2", "2026-Q3", "2026-Q4"], True)
    assert period_labels("2026-H2", "quarter") == (["2026-Q3", "2026-Q4"], True)
    assert period_labels("2026-Q3", "quarter") == (["2026-Q3"], True)
    assert period_labels("2026-03", "quarter") == (["2026-Q1"], False)
    assert period_labels("2026-Q1", "month") == (["2026-01", "2026-02", "2026-03"], True)
    with pytest.raises(SemanticQueryError):
        period_labels("Q3", "quarter")


@pytest.mark.parametrize(("question", "filled", "gold"), [
    # written for this test: the budget "for" a quarter or a year is the quarter column's, not the
    # approval date's (every budget was approved on one day of the year before)
    ("Qual o orçamento total aprovado para o time de Dados em 2026?",
     {"measures": ["budgets.sum_amount_usd"], "filters": [{"field": "teams.name", "op": "=", "value": "Dados"},
                                                          {"field": "budgets.approved_on", "op": "=", "value": "2026"}]},
     "SELECT SUM(b.amount_usd) FROM budgets b JOIN teams t ON t.team_id = b.team_id "
     "WHERE t.name = 'Dados' AND b.quarter LIKE '2026-%'"),
    ("Which budget change requests are for the second half of 2026?",
     {"dimensions": ["budget_requests.request_id"],
      "filters": [{"field": "budget_requests.quarter", "op": "=", "value": "second half of 2026"}]},
     "SELECT request_id FROM budget_requests WHERE quarter IN ('2026-Q3', '2026-Q4') ORDER BY request_id"),
    ("Quais pedidos de mudança de orçamento são para o 2º trimestre de 2026?",
     {"dimensions": ["budget_requests.request_id"],
      "filters": [{"field": "budget_requests.quarter", "op": "=", "value": "2026-Q2"}]},
     "SELECT request_id FROM budget_requests WHERE quarter = '2026-Q2'"),
])
def test_a_period_the_question_names_reads_on_a_column_that_names_periods(
        question: str, filled: dict[str, Any], gold: str, layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    q, _ = layer.read_periods(layer.parse(filled), question, "2026-05-15")
    q, notes = layer.settle(q, question)
    assert any(f == filled["filters"][-1]["field"].replace("approved_on", "quarter") for f, _, _ in q.filters), notes
    assert results_match(_rows(novaops, gold), _answer(layer, tool, q), ordered=sql_is_ordered(gold), strict=True)


def test_a_period_stays_on_the_date_a_question_names_or_when_it_is_part_of_one(layer: SemanticLayer) -> None:
    """Written for this test: "criados em 2026" dates the requests; "em março" is a part of a
    quarter, so the approval date keeps it (no quarter holds March alone)."""
    created = {"measures": ["budget_requests.count"],
               "filters": [{"field": "budget_requests.created_at", "op": "=", "value": "2026"}]}
    kept, _ = layer.read_periods(layer.parse(created), "Quantos pedidos de orçamento foram criados em 2026?",
                                 "2026-05-15")
    assert kept.filters == [("budget_requests.created_at", "=", "2026")]
    moved, notes = layer.read_periods(layer.parse(created), "Quantos pedidos de orçamento são de 2026?", "2026-05-15")
    assert moved.filters == [("budget_requests.quarter", "=", "2026")] and "moved to" in notes[0]
    march = {"measures": ["budgets.count"], "filters": [{"field": "budgets.approved_on", "op": "=", "value": "2026-03"}]}
    assert layer.read_periods(layer.parse(march), "Quantos orçamentos de março de 2026?",
                              "2026-05-15")[0].filters == [("budgets.approved_on", "=", "2026-03")]


def test_a_bound_on_a_column_that_names_periods_compares_its_labels(layer: SemanticLayer, tool: SQLTool,
                                                                   novaops: Path) -> None:
    before = layer.parse({"dimensions": ["budget_requests.request_id"],
                          "filters": [{"field": "budget_requests.quarter", "op": "<", "value": "2026-H2"}],
                          "order": [{"field": "budget_requests.request_id", "direction": "asc"}]})
    gold = "SELECT request_id FROM budget_requests WHERE quarter < '2026-Q3' ORDER BY request_id"
    assert results_match(_rows(novaops, gold), _answer(layer, tool, before), ordered=True, strict=True)
    wrong = layer.parse({"measures": ["budgets.count"],
                         "filters": [{"field": "budgets.quarter", "op": "=", "value": "third quarter"}]})
    with pytest.raises(SemanticQueryError, match="budgets.quarter"):
        layer.compile(wrong, stored_values(tool))


def test_a_stored_value_that_names_no_period_fails_the_check_naming_the_entry(novaops: Path) -> None:
    with closing(sqlite3.connect(novaops)) as conn:
        conn.execute("UPDATE budgets SET quarter = 'Q3/2026' WHERE budget_id = "
                     "(SELECT MIN(budget_id) FROM budgets)")
        conn.commit()
    with pytest.raises(PolicyError) as err:
        check_model(MODEL, _engine(novaops))
    assert "field entities.budgets.dimensions.quarter.names_period: stored value 'Q3/2026' does not name a quarter" \
        in str(err.value)


# ------------------------------------------------- session 31: rules found on fresh SQL probes

def test_a_value_said_once_filters_one_column(layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """Written for this test: "escritório de Recife" filled on the people's office AND the team's
    home city counts fewer people; the column named right before the value keeps it."""
    filled = {"measures": ["employees.count"],
              "filters": [{"field": "employees.office_city", "op": "=", "value": "Recife"},
                          {"field": "teams.home_office", "op": "=", "value": "Recife"}]}
    question = "Quantas pessoas trabalham no escritório de Recife?"
    settled, notes = layer.settle(layer.parse(filled), question)
    assert settled.filters == [("employees.office_city", "=", "Recife")], notes
    gold = _rows(novaops, "SELECT COUNT(*) FROM employees WHERE office_city = 'Recife'")
    assert results_match(gold, _answer(layer, tool, settled), strict=True)
    assert not results_match(gold, _answer(layer, tool, layer.parse(filled)), strict=True)
    # said twice, or with no column word right before it: both stay
    twice = "Quantas pessoas do escritório de Recife estão em times sediados em Recife?"
    assert len(layer.settle(layer.parse(filled), twice)[0].filters) == 2


def test_a_who_question_grouped_by_a_persons_key_shows_the_name(layer: SemanticLayer, tool: SQLTool,
                                                                 novaops: Path) -> None:
    filled = {"measures": ["expenses.max_amount_usd"], "dimensions": ["expenses.approver_id"],
              "filters": [{"field": "expenses.category", "op": "=", "value": "hardware"}],
              "order": [{"field": "expenses.max_amount_usd", "direction": "desc"}], "limit": 1}
    settled, notes = layer.settle(layer.parse(filled), "Who approved the priciest hardware expense?")
    assert "approver.full_name" in settled.dimensions, notes
    gold = _rows(novaops, "SELECT a.full_name FROM expenses x JOIN employees a ON a.employee_id = x.approver_id "
                          "WHERE x.category = 'hardware' ORDER BY x.amount_usd DESC LIMIT 1")
    assert results_match(gold, _answer(layer, tool, settled), ordered=True)
    assert not results_match(gold, _answer(layer, tool, layer.parse(filled)), ordered=True)
    # not a who-question: the key stays alone
    assert "approver.full_name" not in layer.settle(layer.parse(filled), "Which approver id has the "
                                                    "priciest hardware expense?")[0].dimensions


@pytest.mark.parametrize(("question", "gold"), [
    ("Quanto se gastou em refeições por cidade de escritório?",
     "SELECT e.office_city, SUM(x.amount_usd) FROM expenses x JOIN employees e ON e.employee_id = x.employee_id "
     "WHERE x.category = 'meals' GROUP BY e.office_city ORDER BY e.office_city"),
    ("Total spent on meals per country?",
     "SELECT e.country, SUM(x.amount_usd) FROM expenses x JOIN employees e ON e.employee_id = x.employee_id "
     "WHERE x.category = 'meals' GROUP BY e.country ORDER BY e.country"),
])
def test_a_breakdown_the_question_names_is_added(question: str, gold: str, layer: SemanticLayer, tool: SQLTool,
                                                 novaops: Path) -> None:
    """Written for this test: one total filled for a question that asks for it per a column of
    the spender; the column after the breakdown word groups it."""
    filled = {"measures": ["expenses.sum_amount_usd"],
              "filters": [{"field": "expenses.category", "op": "=", "value": "meals"}]}
    settled, notes = layer.settle(layer.parse(filled), question)
    assert len(settled.dimensions) == 1, notes
    assert results_match(_rows(novaops, gold), _answer(layer, tool, settled), ordered=True, strict=True)
    # no breakdown word: one total
    assert layer.settle(layer.parse(filled), "Quanto se gastou em refeições no escritório?")[0].dimensions == []


@pytest.mark.parametrize(("question", "filled", "gold"), [
    ("Which incidents needed more than 250 hours to resolve?",  # the model reported the longest time
     {"measures": ["incidents.max_minutes_to_resolve"]},
     "SELECT incident_id, minutes_to_resolve FROM incidents WHERE minutes_to_resolve > 15000 ORDER BY incident_id"),
    ("Quantos incidentes levaram mais de 40 minutos para serem reconhecidos?",  # counted per value
     {"measures": ["incidents.count"], "dimensions": ["incidents.minutes_to_ack"],
      "filters": [{"field": "incidents.minutes_to_ack", "op": ">", "value": 40}]},
     "SELECT COUNT(*) FROM incidents WHERE minutes_to_ack > 40"),
    ("Quais despesas acima de 3000 dólares foram aprovadas?",  # the figure read as a year
     {"dimensions": ["expenses.expense_id"],
      "filters": [{"field": "expenses.status", "op": "=", "value": "approved"},
                  {"field": "expenses.expense_date", "op": "=", "value": "3000"}]},
     "SELECT expense_id, amount_usd FROM expenses WHERE status = 'approved' AND amount_usd > 3000 ORDER BY expense_id"),
])
def test_a_figure_the_question_states_bounds_its_column(question: str, filled: dict[str, Any], gold: str,
                                                        layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """Written for this test: the number and unit the question states are the filter, in the
    column's unit; what the model wrote in their place goes."""
    raw = layer.parse(filled)
    asked = {"expenses.status = 'approved'"} if "aprovadas" in question else set()
    bounded, notes = layer.stated_bound(raw, question, asked)
    assert any("the figure the question states" in n for n in notes), notes
    settled, _ = layer.settle(bounded, question)
    expected = _rows(novaops, gold)
    assert expected and results_match(expected, _answer(layer, tool, settled), ordered=sql_is_ordered(gold))
    assert not results_match(expected, _answer(layer, tool, layer.settle(raw, question)[0]),
                             ordered=sql_is_ordered(gold))
    # no figure stated: unchanged
    assert layer.stated_bound(raw, "Which incidents took long to resolve?", set()) == (raw, [])


def test_a_period_goes_on_the_date_named_right_before_it(layer: SemanticLayer) -> None:
    """Written for this test: both dates named; the model's date shown in the list had spent its
    words, and the period went to the other one."""
    filled = {"dimensions": ["incidents.incident_id", "incidents.opened_at"],
              "filters": [{"field": "incidents.opened_at", "op": "=", "value": "2025"}]}
    question = "Which incidents opened in 2025 were resolved after a week?"
    kept, notes = layer.read_periods(layer.parse(filled), question, "2026-05-15")
    assert kept.filters == [("incidents.opened_at", "=", "2025")], notes
    moved, notes = layer.read_periods(layer.parse({**filled, "filters": [
        {"field": "incidents.resolved_at", "op": "=", "value": "2025"}]}), question, "2026-05-15")
    assert moved.filters == [("incidents.opened_at", "=", "2025")] and "right before" in notes[0]


def test_an_amount_in_a_question_that_lists_becomes_the_rows(layer: SemanticLayer, tool: SQLTool,
                                                            novaops: Path) -> None:
    filled = {"measures": ["budget_requests.sum_change_usd"],
              "filters": [{"field": "budget_requests.status", "op": "=", "value": "pending"}]}
    settled, notes = layer.settle(layer.parse(filled), "Which budget requests are still waiting for a decision?")
    assert not settled.measures and "budget_requests.request_id" in settled.dimensions, notes
    gold = _rows(novaops, "SELECT request_id FROM budget_requests WHERE status = 'pending'")
    assert results_match(gold, _answer(layer, tool, settled))
    # asked as a total: the sum stays
    total = layer.settle(layer.parse(filled), "What is the total change asked by the pending budget requests?")[0]
    assert total.measures == ["budget_requests.sum_change_usd"]


def test_a_count_of_the_listed_entity_over_another_entitys_rows_lists_it(layer: SemanticLayer, tool: SQLTool,
                                                                        novaops: Path) -> None:
    """Written for this test: "Which teams …" filled as a count of teams, the entity's own word as
    a name, and the budgets' filters (which the teams cannot reach). The word goes, the period's
    "first" ranks nothing, and the teams are listed from the budgets."""
    filled = {"measures": ["teams.count"],
              "filters": [{"field": "teams.name", "op": "=", "value": "Teams"},
                          {"field": "budgets.quarter", "op": "=", "value": "2026-Q2"},
                          {"field": "budgets.amount_usd", "op": ">", "value": 450000}]}
    question = "Which teams have a budget above 450000 USD for the second quarter of 2026?"
    settled, notes = layer.settle(layer.parse(filled), question)
    assert settled.measures == [] and "teams.name" in settled.dimensions, notes
    gold = _rows(novaops, "SELECT t.name FROM budgets b JOIN teams t ON t.team_id = b.team_id "
                          "WHERE b.quarter = '2026-Q2' AND b.amount_usd > 450000")
    assert gold and results_match(gold, _answer(layer, tool, settled))
    with pytest.raises(SemanticQueryError):
        layer.compile(layer.parse(filled), stored_values(tool))  # as filled, no query
    # "the first" as a ranking still ranks
    assert layer.settle(layer.parse(filled), "Which team has the first place in budget for 2026-Q2?")[0].measures


def test_a_filter_that_is_its_entitys_word_shows_no_column(layer: SemanticLayer) -> None:
    """Written for this test: "staff" filled as a job title goes as the entity's word, and the job
    title is then no column the question asked to see (a count per title answered a count)."""
    filled = {"measures": ["expenses.count"], "dimensions": ["employees.role"],
              "filters": [{"field": "employees.role", "op": "=", "value": "staff"},
                          {"field": "expenses.status", "op": "=", "value": "approved"}]}
    settled, notes = layer.settle(layer.parse(filled), "How many claims from Lisbon-based staff were approved?")
    assert settled.dimensions == [] and ("employees.role", "=", "staff") not in settled.filters, notes



def test_a_question_that_ranks_or_counts_records_is_told_from_one_that_bounds_or_compares(novaops: Path) -> None:
    """Written for this test: a superlative next to a record's word ranks records; one followed by
    a comparative or a number compares, one that also names a limit bounds, and a superlative far
    from any record's word ranks nothing the model holds. A count cue right before a record's word
    counts records; before another noun, or with no count cue, it does not."""
    layer = layer_for(MODEL, SQLTool(f"sqlite:///{novaops}"))
    for ranks in ("Qual foi a despesa mais cara de março?", "Quem pediu o maior orçamento do semestre?",
                  "Which team has the largest budget this year?", "Qual chamado ficou mais tempo aberto?"):
        assert layer.ranks_records(ranks), ranks
    for other in ("Quem tem mais de 3 despesas rejeitadas?", "Há mais despesas do que no ano passado?",
                  "Qual é o valor máximo por despesa de hospedagem?", "What is the maximum amount per expense?",
                  "Qual é a política de despesas?", "Posso pedir mais prazo para a entrega?"):
        assert not layer.ranks_records(other), other
    for counts in ("Quantas despesas de hardware passaram do limite?", "How many open tickets are there?",
                   "Qual o número de incidentes em março?"):
        assert layer.counts_records(counts), counts
    for other in ("Quantos dias tenho para enviar o recibo?", "How many hours a week can I work from abroad?",
                  "Quais despesas passaram do limite?"):
        assert not layer.counts_records(other), other


def test_names_beyond_tells_a_column_or_role_a_fixed_query_does_not_hold(novaops: Path) -> None:
    """Written for this test: a fixed query listing the team that owns a service holds neither the
    team's cost center nor the service's tier; one listing a project's members is no project lead;
    a word its shown column answers to ("role": the member's role on the project) names no other
    entity's column of that name, and the words its parameter took name nothing."""
    layer = layer_for(MODEL, SQLTool(f"sqlite:///{novaops}"))
    owner = {"dimensions": ["owner_team.name"], "filters": [{"field": "services.service_id", "op": "=", "value": "x"}]}
    assert layer.names_beyond(owner, "What is the cost centre of the team that owns quote-store?") == ["teams.cost_center"]
    assert layer.names_beyond(owner, "Qual o tier do quote-store e quem é o dono?") == ["services.tier"]
    assert layer.names_beyond(owner, "Which team owns quote-store?") == []
    members = {"dimensions": ["employee.full_name", "project_members.role"],
               "filters": [{"field": "project_members.project_id", "op": "=", "value": "PRJ-1"}]}
    assert "projects.lead" in layer.names_beyond(members, "Who is the project lead of Atlas, and who else works on it?")
    assert layer.names_beyond(members, "Who works on the Atlas project, and in which role?") == []
    # the parameter's own words: a team named "Cost Center Ops" names no cost center
    assert layer.names_beyond(owner, "Which team owns cost center ops?", ("cost center ops",)) == []


def test_a_record_named_by_its_key_is_looked_up_by_the_columns_and_roles_asked(novaops: Path) -> None:
    """Written for this test, real database. When the semantic fill fails, the one record a question
    names by its key answers it: the columns and roles it names, a column whose declared value it
    says ("foi resolvido?"), else the whole record within the query's width. A record code the
    value index does not hold (a table of more distinct ids than a list of choices) is looked up.
    Records that point at the named one ("how many tickets does X have"), two records, or none,
    give no lookup."""
    from tools.backends.sql import _stored_codes, _values

    tool = SQLTool(f"sqlite:///{novaops}")
    layer = layer_for(MODEL, tool)

    def lookup(question: str) -> dict[str, Any] | None:
        hits = _values(tool).triples(question)
        return layer.record_query(question, [*hits, *_stored_codes(question, layer, tool, hits)])

    asked = lookup("Who reviewed budget request BR-0001, and what amount was requested?")
    assert asked is not None and asked["dimensions"] == [
        "budget_requests.request_id", "budget_requests.current_amount_usd", "budget_requests.requested_amount_usd",
        "reviewer.full_name"]
    run = answer_object(asked, tool, MODEL)
    gold = _rows(novaops, "SELECT r.request_id, r.current_amount_usd, r.requested_amount_usd, e.full_name "
                          "FROM budget_requests r LEFT JOIN employees e ON e.employee_id = r.reviewed_by "
                          "WHERE r.request_id = 'BR-0001'")
    assert results_match(gold, [tuple(r.values()) for r in run.rows], ordered=False, strict=True)
    status = lookup("O TCK-1014 foi resolvido? Quem abriu?")
    assert status is not None and status["dimensions"] == ["tickets.ticket_id", "tickets.status", "requester.full_name"]
    named = lookup("Who leads Design System Aurora and what was its project budget?")  # by its label
    assert named is not None and named["dimensions"] == ["projects.name", "projects.budget_usd", "lead.full_name"]
    assert answer_object(named, tool, MODEL).rows == [
        {"projects.name": "Design System Aurora", "projects.budget_usd": 90000, "lead.full_name": "Rita Gouveia"}]
    # the entity's own words left out of a column's synonym ("orçamento do projeto"): said of one
    # named project, "o orçamento dele" is its budget
    own = lookup("Quem lidera o Design System Aurora e qual o orçamento dele?")
    assert own is not None and own["dimensions"] == ["projects.name", "projects.budget_usd", "lead.full_name"]
    policy = lookup("According to the expense policy, can Ana approve EXP-0150?")  # "expense" names no column
    assert policy is not None and "expenses.expense_date" in policy["dimensions"] and len(policy["dimensions"]) == 8
    claim = lookup("Qual a categoria da EXP-0150?")  # not in the value index: read from the key column
    assert claim is not None and claim["filters"] == [{"field": "expenses.expense_id", "op": "=", "value": "EXP-0150"}]
    whole = lookup("Segundo a política de SLA, o INC-2040 foi reconhecido dentro do prazo?")
    assert whole is not None and len(whole["dimensions"]) == 8
    assert {"incidents.severity", "incidents.minutes_to_ack", "commander.full_name"} <= set(whole["dimensions"])
    assert answer_object(whole, tool, MODEL).rows
    for none in ("Quantos tickets tem o payments-api?", "Compare INC-2040 with INC-2012.", "Who is on call?",
                 "Compare Ledger v2 with Pix Automático.",
                 "What about XYZ-9?"):
        assert lookup(none) is None, none


def test_names_beyond_tells_a_said_value_and_a_column_of_the_row_a_key_filter_names(novaops: Path) -> None:
    """Written for this test: a fixed query that shows a team's services with their status, filtered
    on the team only, does not hold "which of them are degraded" (the reader would have to pick the
    rows); one filtered on a project's key reaches that project, whose budget it does not show. A
    value the query filters on is held."""
    layer = layer_for(MODEL, SQLTool(f"sqlite:///{novaops}"))
    services = {"dimensions": ["services.service_id", "services.status"],
                "filters": [{"field": "services.owner_team_id", "op": "=", "value": "T01"}]}
    assert layer.names_beyond(services, "Quais serviços do time Borda estão degradados?") == ["services.status = degraded"]
    assert layer.names_beyond(services, "Which services does the Edge team own?") == []
    held = {**services, "filters": [*services["filters"], {"field": "services.status", "op": "=", "value": "degraded"}]}
    assert layer.names_beyond(held, "Quais serviços do time Borda estão degradados?") == []
    members = {"dimensions": ["employee.full_name"],
               "filters": [{"field": "project_members.project_id", "op": "=", "value": "PRJ-1"}]}
    assert "projects.budget_usd" in layer.names_beyond(members, "Who works on Atlas, and what is the project budget?")
    assert layer.names_beyond(members, "Who works on Atlas?") == []


def test_a_figure_of_one_record_named_by_its_key_is_the_databases(novaops: Path) -> None:
    """Written for this test: a record named by its key (a stored primary key) and a quantity of it,
    or of a record its joins reach, asks the database; a column without a unit beside the key is as
    often a condition, and a key alone, or a quantity with no record's key, asks nothing of it."""
    layer = layer_for(MODEL, SQLTool(f"sqlite:///{novaops}"))
    incident = [("incidents", "incident_id", "INC-2047")]
    assert layer.asks_about_record("Qual a alçada de quem comandou o INC-2047?", incident)  # the commander's
    assert layer.asks_about_record("What was the time to acknowledge of INC-2047?", incident)
    assert not layer.asks_about_record("Qual foi a causa raiz do INC-2047?", incident)
    assert not layer.asks_about_record("Which tier 1 services did INC-2047 hit?", incident)  # a condition
    # a column without a unit that a question word asks for, of the record itself
    assert layer.asks_about_record("Qual a severidade e o status do INC-2047?", incident)
    assert layer.asks_about_record("What is the status of INC-2047?", incident)
    service = [("services", "service_id", "auth-service")]
    assert not layer.asks_about_record("Se o auth-service cair, quais serviços tier 1 seriam impactados?", service)
    assert not layer.asks_about_record("Qual a alçada de um Head?", [])
    assert not layer.asks_about_record("Qual a alçada de quem comandou o INC-2047?",
                                       [("incidents", "title", "INC-2047")])  # not a key column


def test_by_before_a_name_is_who_not_a_breakdown(layer: SemanticLayer, tool: SQLTool, novaops: Path) -> None:
    """Written for this test: "requested by <name>" names the requester; filled as a count per status
    it is still a list of the tickets. "by team" stays a breakdown."""
    filled = {"measures": ["tickets.count"], "dimensions": ["tickets.status"],
              "filters": [{"field": "requester.full_name", "op": "=", "value": "Tatiane Lacerda"}]}
    settled, _ = layer.settle(layer.parse(filled), "List the tickets requested by Tatiane Lacerda and their status.")
    assert settled.measures == [] and "tickets.ticket_id" in settled.dimensions
    gold = _rows(novaops, "SELECT t.ticket_id, t.status FROM tickets t JOIN employees e ON e.employee_id = t.requester_id "
                          "WHERE e.full_name = 'Tatiane Lacerda'")
    assert results_match(gold, _answer(layer, tool, settled), ordered=False)
    per = {"measures": ["tickets.count"], "dimensions": ["tickets.status"]}
    kept, _ = layer.settle(layer.parse(per), "How many tickets are there by status?")
    assert kept.measures == ["tickets.count"] and "tickets.status" in kept.dimensions


def test_the_role_a_name_follows_is_the_one_whose_words_stand_before_it(layer: SemanticLayer, tool: SQLTool,
                                                                          novaops: Path) -> None:
    """Written for this test: the model put the named person in the role the question asks about.
    "abertos pela X" is the requester (and "abertos" then no status "open"); "the expenses of X"
    is the spender, while the approver the question asks for is shown. A name after the other
    role's words keeps that role."""
    opened = {"dimensions": ["tickets.ticket_id"],
              "filters": [{"field": "assignee.full_name", "op": "=", "value": "Jéssica Barbosa"},
                          {"field": "tickets.status", "op": "=", "value": "open"}]}
    settled, notes = layer.settle(layer.parse(opened), "Quais tickets foram abertos pela Jéssica Barbosa?")
    assert settled.filters == [("requester.full_name", "=", "Jéssica Barbosa")], notes
    gold = _rows(novaops, "SELECT t.ticket_id FROM tickets t JOIN employees e ON e.employee_id = t.requester_id "
                          "WHERE e.full_name = 'Jéssica Barbosa'")
    assert gold and results_match(gold, _answer(layer, tool, settled), ordered=False)
    kept, _ = layer.settle(layer.parse(opened), "Quais tickets abertos estão atribuídos à Jéssica Barbosa?")
    assert ("assignee.full_name", "=", "Jéssica Barbosa") in kept.filters
    spent = {"dimensions": ["expenses.expense_id"],
             "filters": [{"field": "approver.full_name", "op": "=", "value": "Tiago Carvalho"}]}
    settled, _ = layer.settle(layer.parse(spent), "Who approved the expenses of Tiago Carvalho?")
    assert ("employee.full_name", "=", "Tiago Carvalho") in settled.filters and "approver.full_name" in settled.dimensions
    assert not any(f.startswith("approver.") for f, _, _ in settled.filters)
    gold = _rows(novaops, "SELECT x.expense_id, a.full_name FROM expenses x JOIN employees e ON e.employee_id = x.employee_id "
                          "JOIN employees a ON a.employee_id = x.approver_id WHERE e.full_name = 'Tiago Carvalho'")
    assert gold and results_match(gold, _answer(layer, tool, settled), ordered=False)
    by, _ = layer.settle(layer.parse(spent), "Which expenses were approved by Tiago Carvalho?")
    assert ("approver.full_name", "=", "Tiago Carvalho") in by.filters


def test_a_key_the_question_writes_and_no_filter_holds_bounds_the_rows(layer: SemanticLayer, tool: SQLTool,
                                                                       novaops: Path) -> None:
    """Written for this test: "the tickets opened since X for auth-service" filled with the service
    as a column and no filter lists every service's tickets; the key the question writes bounds
    them. Two keys of one entity, or a key a filter already holds, add nothing."""
    filled = layer.parse({"expressible": True, "dimensions": ["tickets.ticket_id", "service.service_id"],
                          "filters": [{"field": "tickets.created_at", "op": ">=", "value": "2026-04-01"}]})
    hits = [("services", "service_id", "auth-service"), ("services", "name", "Auth Service")]
    keys = layer.unfiltered_keys(filled, hits)
    assert keys == [("services", "service_id", ("auth-service",))]
    bound, notes = layer.bind(filled, keys, "Quais tickets foram abertos desde abril para o auth-service?")
    assert notes
    gold = _rows(novaops, "SELECT ticket_id, service_id FROM tickets WHERE created_at >= '2026-04-01' "
                          "AND service_id = 'auth-service'")
    every = _rows(novaops, "SELECT ticket_id, service_id FROM tickets WHERE created_at >= '2026-04-01'")
    assert gold and len(every) > len(gold)
    assert results_match(gold, _answer(layer, tool, bound)) and not results_match(gold, _answer(layer, tool, filled))
    assert layer.unfiltered_keys(filled, [*hits, ("services", "service_id", "api-gateway")]) == []
    held = layer.parse({"expressible": True, "dimensions": ["tickets.ticket_id"],
                        "filters": [{"field": "service.service_id", "op": "=", "value": "auth-service"}]})
    assert layer.unfiltered_keys(held, hits) == []


def test_an_entity_s_own_word_does_not_ask_for_its_date_column(layer: SemanticLayer, tool: SQLTool,
                                                               novaops: Path) -> None:
    """Written for this test: "how many expenses did she submit?" filled with a count per expense
    date answered "1" over three dates: "expenses" is the entity's word, no cognate of
    "expense_date". A breakdown the question names stays."""
    filled = {"measures": ["expenses.count"], "dimensions": ["expenses.expense_date"],
              "filters": [{"field": "employee.full_name", "op": "=", "value": "Mariana Figueiredo"}]}
    settled, notes = layer.settle(layer.parse(filled), "how many expenses did Mariana Figueiredo submit?")
    assert settled.dimensions == [] and any("not asked for" in n for n in notes), notes
    gold = _rows(novaops, "SELECT COUNT(*) FROM expenses x JOIN employees e ON e.employee_id = x.employee_id "
                          "WHERE e.full_name = 'Mariana Figueiredo'")
    assert gold[0][0] > 1 and results_match(gold, _answer(layer, tool, settled), strict=True)
    kept, _ = layer.settle(layer.parse(filled), "how many expenses per expense date did Mariana Figueiredo submit?")
    assert kept.dimensions == ["expenses.expense_date"]
