"""The fallback's deterministic mends (`tools.sql_mend`): SQL the model wrote that runs but answers
another question, mended before the guard runs it, and checked by its rows on the test database.

The questions and queries are this file's own (written for it), not the dev set's.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tools.semantic_layer import SemanticLayer, layer_for
from tools.sql_mend import Scale, mend, scale_side
from tools.sql_tool import SQLTool
from tramita.base.paths import SAMPLE_DIR
from tramita.lab.evaluation.questions import results_match

MODEL = SAMPLE_DIR / "semantic_model.yaml"
URGENCY = Scale(("P1", "P2", "P3", "P4"), ("more urgent",), ("less urgent",))


@pytest.fixture
def tool(novaops: Path) -> SQLTool:
    return SQLTool(f"sqlite:///{novaops}")


@pytest.fixture
def layer(tool: SQLTool) -> SemanticLayer:
    return layer_for(MODEL, tool)


def _rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


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
