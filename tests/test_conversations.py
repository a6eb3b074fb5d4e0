"""The dev conversations of sample/novaops/conversations.dev.jsonl, end to end through the graph.

All 15 pass on the scripted backend (every turn's status, tool, parameters, execution, refusal and
answer facts; the final database rows; no other writes; no write without an explicit confirmation).
Three of them, plus a parameter-extraction turn and a text-to-SQL question with its synthesis, run
on the REAL local model (marked `real_model`; a handful only, the CI machine has 2 cores).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_graph import audit_rows, copy_settings, drive, scripted_session

from tramita.base.paths import SAMPLE_DIR
from tramita.base.settings import Settings
from tramita.base.text import fold
from tramita.lab.evaluation.conversations import ConversationResult, load_items, run_item
from tramita.lab.evaluation.facts import fact_in

ITEMS = load_items(SAMPLE_DIR / "conversations.dev.jsonl")
REAL_MODEL_ITEMS = ["c-dev-001", "c-dev-006", "c-dev-011"]


@pytest.fixture(autouse=True)
def _shared_models(pristine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Models live with the pristine data dir (or TRAMITA_MODELS_DIR), never per test."""
    monkeypatch.setenv("TRAMITA_MODELS_DIR", os.environ.get("TRAMITA_MODELS_DIR") or str(pristine / "models"))


@pytest.fixture
def stores(pristine: Path) -> Path:
    """The pristine dataset that run_item copies for each conversation (never written)."""
    return pristine / "novaops.db"


@pytest.fixture
def settings(pristine: Path, tmp_path: Path) -> Settings:
    """Graph and documents from the pristine dir (read-only), the scripted model; run_item
    replaces the SQL and checkpoint URLs with its own copies."""
    return copy_settings(pristine, tmp_path, tmp_path / "unused.db")


def explain(result: ConversationResult) -> str:
    lines = [f"{result.id}: failed {result.failed_checks()} error={result.error}"]
    for i, t in enumerate(result.turns, 1):
        lines.append(f"  turn {i} {t.user!r} -> {t.status} {t.checks} route={t.trace.get('route')} "
                     f"llm={t.trace.get('llm_calls')} answer={t.answer[:300]!r}")
    return "\n".join(lines)


@pytest.mark.parametrize("item", ITEMS, ids=[i["id"] for i in ITEMS])
def test_dev_conversation_scripted(item: dict[str, Any], stores: Path, settings: Settings, tmp_path: Path) -> None:
    result = run_item(item, stores, tmp_path / "run", settings)
    assert result.ok, explain(result)
    assert result.unconfirmed_writes == 0
    assert len(result.turns) == len(item["turns"])


def test_dev_set_is_the_one_documented() -> None:
    """15 items, every turn with an expectation; a mis-parsed file would make the suite vacuous."""
    assert len(ITEMS) == 15
    assert all(t["expect"].get("status_after") for i in ITEMS for t in i["turns"])
    assert {i["id"] for i in ITEMS} >= set(REAL_MODEL_ITEMS)


def test_a_failing_expectation_is_reported(stores: Path, settings: Settings, tmp_path: Path) -> None:
    """The runner can fail: the same conversation with a wrong expected status is not ok."""
    item = dict(next(i for i in ITEMS if i["id"] == "c-dev-001"))
    turns = [dict(t, expect=dict(t["expect"])) for t in item["turns"]]
    turns[1]["expect"]["status_after"] = "collecting"
    result = run_item({**item, "turns": turns}, stores, tmp_path / "run", settings)
    assert not result.ok and result.failed_checks() == ["turn2.status_after"]


# ----------------------------------------------------------------------------- real local model
@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.parametrize("item_id", REAL_MODEL_ITEMS)
def test_dev_conversation_real_model(item_id: str, stores: Path, settings: Settings, tmp_path: Path) -> None:
    item = next(i for i in ITEMS if i["id"] == item_id)
    result = run_item(item, stores, tmp_path / "run", settings.with_profile("local"))
    assert result.ok, explain(result)
    assert result.unconfirmed_writes == 0


@pytest.mark.real_model
@pytest.mark.slow
def test_real_model_parameter_extraction_turn(novaops: Path) -> None:
    """Collecting reject_expense: the reason comes from ONE extraction call, and nothing executes."""
    with scripted_session(llm_backend="local") as s:
        first = drive(s, "t", ["rejeita a EXP-0297"])[0]
        assert first.status == "collecting" and first.transaction["pending"] == ["reason"]
        r = s.turn("t", "o recibo chegou fora do prazo de 30 dias")
    assert r.status == "awaiting_confirmation", r.answer
    assert r.transaction["tool"] == "reject_expense"
    assert r.transaction["args"]["expense_id"] == "EXP-0297"
    reason = fold(r.transaction["args"]["reason"])
    assert "prazo" in reason and "recibo" in reason, reason
    assert r.trace["llm_calls"] == 1 and r.trace["prompt_tokens"] > 0
    assert r.trace["executed_tool"] is None and audit_rows(novaops) == 11


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.usefixtures("llm_planner")
def test_real_model_sql_question_and_synthesis(novaops: Path) -> None:
    """Text-to-SQL on the real schema, executed read-only, then a synthesised answer that states it."""
    with scripted_session(llm_backend="local") as s:
        r = s.turn("q", "Quantas despesas estão pendentes de aprovação neste momento?")
    assert r.status == "idle" and r.transaction is None and r.trace["executed_tool"] is None
    assert r.plan and "sql" in r.plan["backends"], r.plan
    sql = [c for c in r.contexts or [] if c.get("backend") == "sql"]
    assert sql and not sql[0].get("error"), r.contexts
    assert "expenses" in sql[0]["query"].lower() and sql[0]["rows"], sql[0]
    assert any(fact_in("44", str(v)) for row in sql[0]["rows"] for v in row.values()), sql[0]["rows"]
    assert "synthesize" in r.trace["nodes"] and r.trace["route"] == "answer", r.trace
    assert fact_in("44", r.answer), r.answer
    # text-to-SQL and synthesis are real calls, and so is the planner when the vocabulary match is close
    close = (r.trace.get("plan_match") or {}).get("decision") != "clear"
    assert r.trace["llm_calls"] >= 2 + close, r.trace
    assert audit_rows(novaops) == 11


def test_a_write_counts_as_confirmed_only_by_the_lexicon_or_the_gold(stores: Path, settings: Settings,
                                                                      tmp_path: Path) -> None:
    """The unconfirmed-writes count does not trust tramita's own classifier: "go for it" after the
    summary executes the approval (the prototypes call it a confirmation), and that write counts as
    confirmed only where the item's gold expects it in that turn."""
    def item(expect_write: bool) -> dict[str, Any]:
        second: dict[str, Any] = {"status_after": "idle"}
        if expect_write:
            second["executed"] = "approve_expense"
        return {"id": f"c-test-{expect_write}", "lang": "en", "user_id": "E006", "description": "",
                "turns": [{"user": "approve EXP-0264", "expect": {"status_after": "awaiting_confirmation"}},
                          {"user": "go for it", "expect": second}], "final_db": [], "no_other_writes": False}

    gold = run_item(item(True), stores, tmp_path / "gold", settings)
    assert gold.turns[1].trace.get("executed_tool") == "approve_expense" and gold.unconfirmed_writes == 0
    unmarked = run_item(item(False), stores, tmp_path / "unmarked", settings)
    assert unmarked.unconfirmed_writes == 1 and not unmarked.ok
