"""References to the thread and to the user (tramita/core/thread_refs.py).

Pure first: "ele"/"it" resolve to the last entity of the missing parameter's kind, "pra mim"/"to me"
to the user, "meu time"/"my team" to the user's team; a reference never overrides a value the
message carries. Then through the graph (scripted model, fresh database): "passa ele pra <name>"
right after a ticket lookup resolves the ticket, the summary names the reference, and nothing runs
without the confirmation turn.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_graph import audit_rows, db_changes, db_snapshot, scalar, scripted_session

from graph.state import merge_entities
from tramita.core.thread_refs import from_args, id_patterns, mentioned, note, resolve, thread_ref_rules

REASSIGN = {
    "ticket_id": {"type": "string", "pattern": "^TCK-\\d{4}$", "x-references": "tickets.ticket_id"},
    "assignee_id": {"type": "string", "pattern": "^E\\d{3}$", "x-references": "employees.employee_id",
                    "x-resolve": "employee"},
}
BUDGET = {
    "team_id": {"type": "string", "x-references": "teams.team_id", "x-resolve": "team"},
    "quarter": {"type": "string", "pattern": "^2026-Q[1-4]$"},
    "justification": {"type": "string", "minLength": 20},
}
THREAD = {"tickets": "TCK-1141", "employees": "E020", "expenses": "EXP-0263"}


def _resolve(props: dict[str, Any], pending: list[str], text: str, entities: dict[str, str] | None = None,
             own: dict[str, str] | None = None) -> dict[str, str]:
    return resolve(props, pending, text, THREAD if entities is None else entities, user_id="E044",
                   directory_table="employees", own=own or {}).values


@pytest.mark.parametrize(("text", "expected"), [
    ("passa ele pra mim", {"ticket_id": "TCK-1141", "assignee_id": "E044"}),
    ("assign it to me", {"ticket_id": "TCK-1141", "assignee_id": "E044"}),
    ("coloca esse no meu nome", {"ticket_id": "TCK-1141", "assignee_id": "E044"}),
    ("move that one to me", {"ticket_id": "TCK-1141", "assignee_id": "E044"}),
])
def test_anaphora_and_self(text: str, expected: dict[str, str]) -> None:
    assert _resolve(REASSIGN, ["ticket_id", "assignee_id"], text) == expected


def test_an_anaphor_fills_the_first_missing_parameter_with_an_entity() -> None:
    """"passa ele pro <name>": the name is found by the extractor; "ele" is the ticket."""
    assert _resolve(REASSIGN, ["ticket_id"], "passa ele pro Otávio") == {"ticket_id": "TCK-1141"}


def test_nothing_to_point_at_resolves_nothing() -> None:
    assert _resolve(REASSIGN, ["ticket_id", "assignee_id"], "passa ele pro Otávio", entities={}) == {}
    assert _resolve(REASSIGN, ["ticket_id"], "reatribui um ticket") == {}
    # "for me" is a benefactive, not an assignee: nobody is assumed
    assert _resolve(REASSIGN, ["assignee_id"], "reassign TCK-1141 for me") == {}


def test_only_missing_parameters_are_resolved() -> None:
    assert _resolve(REASSIGN, [], "passa ele pra mim") == {}


@pytest.mark.parametrize("text", ["quero +9000 no meu time pro 2026-Q4", "I need +9000 for my team in 2026-Q4",
                                  "pedido para o nosso time"])
def test_my_team_is_the_users_team(text: str) -> None:
    assert _resolve(BUDGET, ["team_id", "quarter"], text, own={"teams": "T06"}) == {"team_id": "T06"}


def test_entities_from_values_and_mentions() -> None:
    assert from_args(REASSIGN, {"ticket_id": "TCK-1141", "assignee_id": "E051"}) == {
        "tickets": "TCK-1141", "employees": "E051"}
    patterns = id_patterns(REASSIGN.values())
    assert mentioned("o tck-1100 e depois o TCK-1141, com E020", patterns) == {"tickets": "TCK-1141",
                                                                                "employees": "E020"}
    assert merge_entities({"tickets": "TCK-1100", "expenses": "EXP-0263"}, {"tickets": "TCK-1141"}) == {
        "tickets": "TCK-1141", "expenses": "EXP-0263"}


def test_the_summary_note_names_each_reference() -> None:
    line = note({"ticket_id": "ele", "assignee_id": "pra mim"}, {"ticket_id": "TCK-1141", "assignee_id": "E044"},
                "pt")
    assert "“ele” = TCK-1141" in line and "“pra mim” = E044" in line
    assert note({}, {}, "en") == ""
    assert thread_ref_rules().own_row == {"teams": "team_id"}


# ------------------------------------------------------------------------------ through the graph

@pytest.fixture(autouse=True)
def _shared_models(pristine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAMITA_MODELS_DIR", os.environ.get("TRAMITA_MODELS_DIR") or str(pristine / "models"))


@pytest.fixture
def desk(novaops_services: Any) -> Iterator[Any]:
    """A session as E044 (service desk, incident commander, budget owner of T06 SRE)."""
    with scripted_session(user="E044", services=novaops_services) as s:
        yield s


def test_passa_ele_pra_name_after_a_lookup_resolves_the_ticket(desk: Any, novaops: Path) -> None:
    lookup = desk.turn("t", "como está o TCK-1141?")
    assert lookup.trace["executed_tool"] == "get_ticket_status" and lookup.status == "idle"
    before = db_snapshot(novaops)
    r = desk.turn("t", "passa ele pra Aline Cunha")
    assert r.status == "awaiting_confirmation", r.answer
    assert r.transaction["tool"] == "reassign_ticket"
    assert r.transaction["args"] == {"ticket_id": "TCK-1141", "assignee_id": "E051"}
    assert r.transaction["resolved"] == {"ticket_id": "ele"}
    assert "TCK-1141" in r.answer and "“ele” = TCK-1141" in r.answer  # shown in the summary
    assert r.trace["executed_tool"] is None and r.trace["llm_calls"] == 0
    assert db_changes(novaops, before) == {}
    done = desk.turn("t", "sim")
    assert done.trace["executed_tool"] == "reassign_ticket"
    assert scalar(novaops, "SELECT assignee_id FROM tickets WHERE ticket_id = 'TCK-1141'") == "E051"
    assert audit_rows(novaops, "TCK-1141") == 1


def test_it_to_me_in_english(desk: Any, novaops: Path) -> None:
    desk.turn("t", "what's the status of TCK-1146?")
    r = desk.turn("t", "assign it to me")
    assert r.status == "awaiting_confirmation", r.answer
    assert r.transaction["args"] == {"ticket_id": "TCK-1146", "assignee_id": "E044"}
    assert set(r.transaction["resolved"]) == {"ticket_id", "assignee_id"}
    assert audit_rows(novaops, "TCK-1146") == 0


def test_my_team_resolves_to_the_users_team(desk: Any) -> None:
    r = desk.turn("t", "quero pedir +6000 de orçamento pro meu time no 2026-Q4")
    assert r.transaction["tool"] == "request_budget_change", r.answer
    assert r.transaction["args"]["team_id"] == "T06" and r.transaction["resolved"] == {"team_id": "meu time"}


def test_a_lookup_from_a_reference_is_confirmed_before_it_runs(novaops_services: Any) -> None:
    """Even a read-only lookup waits for the confirmation turn when "ele" chose what it reads; the
    same lookup with an explicit id runs at once."""
    from graph.context import Context
    from nodes.common import tool_context
    from tramita.core.transactions import advance, new_transaction

    reg = novaops_services.registry
    spec = reg.get("get_ticket_status")
    tctx = tool_context(Context(user_id="E044", today="2026-05-15", services=novaops_services), "pt",
                        novaops_services)
    tx = new_transaction(spec, tctx.now)
    tx["args"], tx["pending"] = {"ticket_id": "TCK-1141"}, []
    assert advance(spec, tx, tctx, reg)[0] == "ready"
    tx["resolved"] = {"ticket_id": "ele"}
    stage, errors = advance(spec, tx, tctx, reg)
    assert stage == "awaiting_confirmation" and not errors
    assert tx["confirmation_hash"] and "“ele” = TCK-1141" in tx["summary"]
