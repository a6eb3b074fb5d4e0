"""Document figures bound database queries: a policy's number, read with its unit from a passage,
filters the rows the question compares with it, with no LLM call.

Passages and questions are written for these tests (other wording than any evaluation item); the
semantic layer, the value index and the database are the real ones on the sample data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tramita.core.planner_hints as ph
from tools.backends import BACKENDS
from tools.backends.base import BackendCall, Finding
from tools.doc_figures import UnitFile, amounts, before, bounding_lines, figures, units
from tools.llm import Usage
from tools.semantic_layer import QueryObject, SemanticLayer, answer_semantic
from tools.sql_tool import SQLTool
from tramita.base.paths import SAMPLE_DIR
from tramita.base.policyfile import PolicyError, load_model

MODEL = SAMPLE_DIR / "semantic_model.yaml"

# written for these tests: a response-time table, a capped-amount table cut in two passages (the
# second has rows and no header), and prose with ids, dates and business days
TARGETS = """Service levels — targets

| Severity | Acknowledged within | Resolution within |
|---|---|---|
| SEV1 | 10 minutes | 2 hours |
| SEV3 | 3 hours | 48 hours (2 days) |
"""
CAPS_TAIL = """Caps — continued

| meals (refeições) | 60 | per person |
| hardware | 2000 | laptops need a manager's note |
"""
CAPS_HEAD = """Caps — per claim

| Category | Limit per claim (USD) | Notes |
|---|---|---|
| transport (transporte local) | 120 | taxis and trains |
"""
PROSE = "INC-2034 was opened on 2026-05-15. Claims are paid within 5 business days; receipts within 20 dias corridos."



def _found(text: str) -> list[tuple[str, float, str]]:
    return [(f.label, f.number, f.unit) for f in figures(text)]


def test_table_figures_take_their_row_and_header_and_a_bare_number_the_headers_unit() -> None:
    found = _found(TARGETS + CAPS_HEAD)
    assert ("SEV1 · Acknowledged within", 10.0, "minutes") in found
    assert ("SEV3 · Resolution within", 48.0, "hours") in found  # the first quantity of "48 hours (2 days)"
    assert ("SEV3 · Resolution within", 2.0, "days") not in found
    assert ("transport (transporte local) · Limit per claim (USD)", 120.0, "USD") in found
    assert not any(label.startswith("Severity") for label, _, _ in found)  # the header is no row


def test_rows_cut_from_their_header_take_the_nearest_header_with_as_many_cells() -> None:
    found = _found(CAPS_TAIL + "\n" + CAPS_HEAD)
    assert ("hardware · Limit per claim (USD)", 2000.0, "USD") in found
    assert ("meals (refeições) · Limit per claim (USD)", 60.0, "USD") in found


def test_numbers_inside_ids_and_dates_are_no_figures_and_business_days_are_not_converted() -> None:
    found = figures(PROSE)
    assert [(f.number, f.unit) for f in found] == [(5.0, "business days"), (20.0, "days")]
    table = units()
    assert table.convert(5, ("duration", "business days"), ("duration", "minutes")) is None
    assert table.convert(2, ("duration", "hours"), ("duration", "minutes")) == 120
    assert table.convert(2, ("duration", "hours"), ("money", "USD")) is None  # across kinds
    assert before("2026-05-15", found[1]) == "2026-04-25"
    assert before("2026-05-15", figures("| SEV1 | 10 minutes |")[0]) is None  # shorter than a day


# written for these tests: brackets in prose (who signs) and in a table (what an order needs), and a
# sentence of several brackets at once
BRACKETS = """Signatures
- Leases up to 80000 USD per year are signed by the finance director.
- Leases above 80000 USD per year are signed by the managing partner.
- Analysts decide leases up to 1000 USD, the office manager up to 5000 USD.

| Order value (USD) | Needs |
|---|---|
| above 5000 | two quotes for the lease |
"""


def test_a_questions_amounts_take_multipliers_and_units_and_skip_ids_dates_weeks_and_years() -> None:
    assert amounts("Who signs a 120k/year lease?") == [(120000.0, None)]
    assert amounts("uma compra de 20 mil, paga em US$ 500 e 3 horas") == [
        (20000.0, None), (500.0, ("money", "USD")), (3.0, ("duration", "hours"))]
    # digits inside ids, dates, weeks and quarters, and a bare year, are no amounts
    assert amounts("INC-2034 on 2026-05-15, week 2026-W21, 2026-Q3, SEV2, em 2026") == []
    assert amounts("10kg") == []  # a multiplier letter that starts a word is no multiplier


def test_the_lines_whose_bounds_hold_the_questions_figure_are_the_ones_it_is_about() -> None:
    about = "Who signs a 120k lease?"
    assert bounding_lines(BRACKETS, 120000, None, about) == [
        "Leases above 80000 USD per year are signed by the managing partner.",
        "above 5000 | two quotes for the lease"]
    small = bounding_lines(BRACKETS, 50000, None, "Who signs a 50k lease?")
    assert small == ["Leases up to 80000 USD per year are signed by the finance director.",
                     "above 5000 | two quotes for the lease"]
    # a sentence of several brackets is read clause by clause, the tightest bracket first
    assert bounding_lines(BRACKETS, 800, ("money", "USD"), "who decides an 800 USD lease?") == [
        "Analysts decide leases up to 1000 USD", "the office manager up to 5000 USD.",
        "Leases up to 80000 USD per year are signed by the finance director."]
    assert bounding_lines(BRACKETS, 3000, None, "who decides a 3000 lease?")[0] == "the office manager up to 5000 USD."
    # a figure in another kind of unit is not read against the money brackets, and a line sharing
    # no word with the question is not about it
    assert bounding_lines(BRACKETS, 90, ("duration", "minutes"), "a lease pending for 90 minutes") == []
    assert bounding_lines(BRACKETS, 120000, None, "Who signs a 120k deal?") == []
    # a figure in the lines' own unit needs no shared word (a Portuguese question, an English policy;
    # a bare row number takes its header's unit)
    assert bounding_lines(BRACKETS, 120000, ("money", "USD"), "Quem assina um contrato de 120 mil dólares?") == [
        "Leases above 80000 USD per year are signed by the managing partner.", "above 5000 | two quotes for the lease"]


def test_a_malformed_units_file_names_the_file_and_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "units.yaml"
    bad.write_text("kinds:\n  duration:\n    minutes: {size: -1, words: [minute]}\n", encoding="utf-8")
    with pytest.raises(PolicyError) as err:
        load_model(bad, UnitFile)
    assert "units.yaml" in str(err.value) and "size" in str(err.value)


def test_the_bound_picks_the_row_the_question_names_and_the_column_its_words_name(layer: SemanticLayer) -> None:
    found = figures(TARGETS)
    asked = {"incidents.severity = 'SEV3'"}
    bound = layer.document_bound("Which SEV3 incidents took longer to be fixed than the target allows? "
                                 "I mean time to resolve.", asked, [f for f in found if f.key == "SEV3"])
    assert bound is not None
    (q,), note = bound
    assert ("incidents.minutes_to_resolve", ">", 2880) in q.filters  # 48 hours in minutes
    assert ("incidents.severity", "=", "SEV3") in q.filters
    assert q.dimensions == ["incidents.incident_id", "incidents.minutes_to_resolve"] and "48 hours" in note
    within = layer.document_bound("Quais incidentes SEV3 tiveram o tempo de reconhecimento dentro da meta?",
                                  asked, [f for f in found if f.key == "SEV3"])
    assert within is not None and ("incidents.minutes_to_ack", "<=", 180) in within[0][0].filters
    negated = layer.document_bound("Which SEV3 incidents did not meet the time to acknowledge target?",
                                   asked, [f for f in found if f.key == "SEV3"])
    assert negated is not None and ("incidents.minutes_to_ack", ">", 180) in negated[0][0].filters
    counted = layer.document_bound("Quantos incidentes SEV3 passaram do prazo de resolução?", asked,
                                   [f for f in found if f.key == "SEV3"])
    assert counted is not None and counted[0][0].measures == ["incidents.count"] and not counted[0][0].dimensions


def test_no_bound_without_a_side_or_with_no_column_named_among_several(layer: SemanticLayer) -> None:
    found = [f for f in figures(TARGETS) if f.key == "SEV1"]
    asked = {"incidents.severity = 'SEV1'"}
    assert layer.document_bound("List the SEV1 incidents and the service level targets.", asked, found) is None
    # two duration columns, and the question names neither: no guess
    assert layer.document_bound("Which SEV1 incidents were over the target?", asked, found) is None
    # a column named, and two figures of the row whose headers say nothing of it: no guess either
    unnamed = [f for f in figures(TARGETS.replace("Acknowledged", "First reply").replace("Resolution", "Done"))
               if f.key == "SEV1"]
    assert layer.document_bound("Which SEV1 incidents took longer to resolve than the target?", asked,
                                unnamed) is None
    # values of two entities: not one set of rows to bound
    assert layer.document_bound("Which SEV1 incidents exceeded the limit for transport expenses?",
                                asked | {"expenses.category = 'transport'"}, found) is None


def test_a_figure_copied_in_its_own_unit_is_read_in_the_columns(layer: SemanticLayer) -> None:
    found = [f for f in figures(TARGETS) if f.key == "SEV1"]
    q = QueryObject(filters=[("incidents.minutes_to_resolve", ">", 2), ("incidents.severity", "=", "SEV1")])
    rebased, notes = layer.rebase_figures(q, found)
    assert rebased.filters[0] == ("incidents.minutes_to_resolve", ">", 120) and "2 hours" in notes[0]
    # a number that is no figure, or an equality, is left as written
    same, none = layer.rebase_figures(QueryObject(filters=[("incidents.minutes_to_resolve", ">", 7),
                                                           ("incidents.minutes_to_ack", "=", 2)]), found)
    assert same.filters == [("incidents.minutes_to_resolve", ">", 7), ("incidents.minutes_to_ack", "=", 2)] and not none


def test_the_database_answers_a_document_bound_with_no_llm_call(tool: SQLTool, novaops: Path) -> None:
    import sqlite3
    from contextlib import closing

    usage = Usage()
    question = "Quais despesas de hardware ultrapassaram o teto por pedido da política?"
    run = answer_semantic(question, tool, MODEL, today="2026-05-15", backend="local", usage=usage,
                          given=(Finding("docs", text=CAPS_TAIL + "\n" + CAPS_HEAD),))
    assert run.ok and run.document and usage.calls == 0, (run.reason, run.settled)
    with closing(sqlite3.connect(novaops)) as con:
        gold = con.execute("SELECT expense_id FROM expenses WHERE category = 'hardware' AND amount_usd > 2000 "
                           "ORDER BY expense_id").fetchall()
    assert gold and sorted(r["expenses.expense_id"] for r in run.rows) == [g[0] for g in gold]


def test_the_planner_adds_the_database_to_a_named_document_only_for_a_comparison_of_its_records(
        novaops_services: Any) -> None:
    """Real e5 and stores. With a kind of document named, a comparison of named records with it
    needs the database too; "below someone" in a hierarchy names no document and is no such
    comparison, and a question about the document alone does not compare records."""
    sql = BACKENDS["sql"]
    compares = "Which transport expenses went over the cap written in the expense policy?"
    assert sql.compares_with_documents(novaops_services, compares)
    routed = ph.route(compares, novaops_services)
    assert {"docs", "sql"} <= set(routed.required), routed.trace()
    assert not sql.compares_with_documents(novaops_services, "What does the expense policy say about meals?")
    hierarchy = "Quantos colaboradores ficam abaixo da Beatriz Nunes no organograma?"
    assert "sql" not in ph.route(hierarchy, novaops_services).required


def test_the_sql_backend_names_the_document_path_and_says_what_the_rows_are(novaops_services: Any) -> None:
    call = BackendCall(question="Which SEV1 incidents took longer to resolve than the service level target?",
                       today="2026-05-15", profile="local", services=novaops_services, usage=Usage(),
                       given=(Finding("docs", text=TARGETS),))
    context = BACKENDS["sql"].run(call)
    assert context["path"] == "semantic:document" and "2 hours = 120" in context["about"], context
    assert call.usage.calls == 0


def test_a_table_of_one_figure_per_value_bounds_each_row_by_its_own_value(tool: SQLTool, novaops: Path) -> None:
    """No category named: each category's row of the table bounds that category's claims, one
    statement through the guard, with no LLM call; its rows equal the hand-written CASE query."""
    import sqlite3
    from contextlib import closing

    usage = Usage()
    question = "Which approved claims went over the cap per claim of their category?"
    run = answer_semantic(question, tool, MODEL, today="2026-05-15", backend="local", usage=usage,
                          given=(Finding("docs", passages=CAPS_TAIL + "\n" + CAPS_HEAD),))
    assert run.ok and usage.calls == 0 and "UNION ALL" in run.sql, (run.reason, run.settled)
    assert "meals: 60 USD" in run.document and "hardware: 2000 USD" in run.document
    with closing(sqlite3.connect(novaops)) as con:
        gold = con.execute("SELECT expense_id FROM expenses WHERE status = 'approved' AND amount_usd > CASE category "
                           "WHEN 'meals' THEN 60 WHEN 'hardware' THEN 2000 WHEN 'transport' THEN 120 END "
                           "ORDER BY expense_id").fetchall()
    assert gold and [r["expenses.expense_id"] for r in run.rows] == [g[0] for g in gold]
    assert all("expenses.category" in r for r in run.rows)  # each row shows the value its figure is for
    counted = answer_semantic("How many approved claims went over the cap per claim of their category?", tool, MODEL,
                              today="2026-05-15", backend="local", usage=usage,
                              given=(Finding("docs", passages=CAPS_TAIL + "\n" + CAPS_HEAD),))
    assert counted.ok and usage.calls == 0 and counted.rows == [{"expenses.count": len(gold)}], counted.rows


def test_per_value_figures_need_one_table_the_words_pick_and_one_value_per_row(layer: SemanticLayer) -> None:
    two_tables = CAPS_TAIL + "\n" + CAPS_HEAD + "\nFloors — per claim\n\n| Category | Floor per claim (USD) | Notes |\n" \
        "|---|---|---|\n| transport (transporte local) | 5 | none |\n| hardware | 50 | none |\n| meals | 2 | none |\n"
    found = figures(two_tables)

    def named(text: str) -> set[str]:
        return {f"expenses.category = {v!r}" for v in ("transport", "hardware", "meals") if v in text}

    # the words name neither table's header, and each gives a figure for three rows: they rank alike
    assert layer.document_bound("Which expenses went over the figure of their category?", set(), found, named) is None
    picked = layer.document_bound("Which expenses went over the limit of their category?", set(), found, named)
    assert picked is not None and len(picked[0]) == 3 and "Limit per claim" in picked[1]
    # a notes column with a figure for one row of three loses to the column that has one for each
    noted = figures(CAPS_TAIL.replace("per person", "at most 15 USD per person") + "\n"
                    + CAPS_HEAD.replace("taxis and trains", "at most 30 USD a ride"))
    both = layer.document_bound("Which expenses went over the figure of their category?", set(), noted, named)
    assert both is not None and "Limit per claim" in both[1]
    # a figure whose row names the question's value but which no column of the entity keeps is none
    asked = {"expenses.status = 'rejected'"}
    assert layer.document_bound("Which rejected expenses went over the figure of their category?", asked,
                                figures("Rejected claims are archived after 30 days.\n" + CAPS_TAIL + CAPS_HEAD),
                                lambda t: asked if "Rejected" in t else named(t)) is not None
    # a row that names two values of the column is no row of a per-value table
    mixed = figures("| Category | Limit per claim (USD) |\n|---|---|\n| transport or hardware | 100 |\n| meals | 40 |\n")
    assert layer.document_bound("Which expenses went over the limit of their category?", set(), mixed, named) is None


def test_a_question_that_asks_why_reaches_the_documents(novaops_services: Any) -> None:
    """Real e5 and stores. Written for this test: a reason is written in a document (a decision's
    grounds, a postmortem), not in a row, so "why was this request turned down?" reaches the
    documents beside the database its words match; the same question without "why" does not."""
    for why in ("Por que o pedido de orçamento BR-0003 foi recusado?", "Why was budget request BR-0003 turned down?"):
        routed = ph.route(why, novaops_services)
        assert "docs" in routed.required, routed.trace()  # the plan keeps what is required
    plain = ph.route("Quem revisou o pedido de orçamento BR-0003?", novaops_services)
    assert "docs" not in plain.required, plain.trace()
