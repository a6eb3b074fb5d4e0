"""Confirmation that generalises, cancel, cancel-and-switch and bare assent, through the graph.

Scripted model for routing (its confirmation fallback always answers "other", so every reply below
is decided by the lexicon or the e5 prototypes and guards of tramita/core/confirmation.py), a fresh
database per test, both languages. Each case checks what executed, what was written and what the
transaction holds afterwards. The last two tests run the real local model.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_graph import audit_rows, db_changes, db_snapshot, expense_status, scalar, scripted_session

from tramita.base.text import fold
from tramita.core.confirmation import cancel_split, is_assent
from tramita.core.lexicon import cancel_clause, revert_cue
from tramita.core.replies import say

Opener = Callable[..., AbstractContextManager[Any]]


@pytest.fixture(autouse=True)
def _shared_models(pristine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedding model lives with the pristine data dir: no per-test conversion."""
    monkeypatch.setenv("TRAMITA_MODELS_DIR", os.environ.get("TRAMITA_MODELS_DIR") or str(pristine / "models"))


@pytest.fixture
def open_as(novaops_services: Any) -> Opener:
    """`with open_as("E044") as s:` a scripted session for that user on this test's database."""
    def opener(user: str = "E006", **context: Any) -> AbstractContextManager[Any]:
        return scripted_session(user=user, services=novaops_services, **context)

    return opener


@pytest.fixture
def session(open_as: Opener) -> Iterator[Any]:
    with open_as("E006") as s:
        yield s


def fill(session: Any, thread: str, first: str, answers: dict[str, str]) -> Any:
    """Start with `first`, then answer whatever is asked from `answers` until the summary shows."""
    r = session.turn(thread, first)
    for _ in range(len(answers) + 1):
        if r.status != "collecting":
            break
        r = session.turn(thread, answers[r.transaction["pending"][0]])
    assert r.status == "awaiting_confirmation", r.answer
    return r


# ----------------------------------------------------------------------------- colloquial confirm / reject
@pytest.mark.parametrize(("request_text", "reply", "again"), [
    ("aprova a EXP-0261", "beleza, pode mandar", "sim"),
    ("aprova a EXP-0261", "só essa mesma, pode", "sim"),  # repeats the target, then assents
    ("aprova a EXP-0261", "EXP-0261 mesmo, pode mandar", "sim"),
    ("approve EXP-0261", "sure thing, proceed", "yes"),
    ("approve EXP-0261", "that one, yes, go ahead", "yes"),
])
def test_colloquial_confirm_executes_exactly_once(session: Any, novaops: Path, request_text: str, reply: str,
                                                  again: str) -> None:
    assert session.turn("t", request_text).status == "awaiting_confirmation"
    before = db_snapshot(novaops)
    r = session.turn("t", reply)
    assert r.trace["executed_tool"] == "approve_expense", r.answer
    assert r.trace["llm_calls"] == 0 and r.status == "idle"
    assert r.last_transaction["outcome"] == "executed"
    assert expense_status(novaops, "EXP-0261") == "approved" and audit_rows(novaops, "EXP-0261") == 1
    r = session.turn("t", again)  # a second assent has nothing left to confirm
    assert r.trace["executed_tool"] is None and r.status == "idle"
    assert audit_rows(novaops, "EXP-0261") == 1
    assert {t: len(k) for t, k in db_changes(novaops, before).items()} == {"expenses": 1, "audit_log": 1}


@pytest.mark.parametrize(("request_text", "reply"), [
    ("aprova a EXP-0261", "não, melhor deixar assim"),
    ("aprova a EXP-0261", "não, deixa pra outra hora"),
    ("approve EXP-0261", "nah, let's not do that"),
    ("approve EXP-0261", "no, leave it for now"),
])
def test_colloquial_reject_writes_nothing(session: Any, novaops: Path, request_text: str, reply: str) -> None:
    session.turn("t", request_text)
    before = db_snapshot(novaops)
    r = session.turn("t", reply)
    assert r.status == "idle" and r.transaction is None and r.trace["executed_tool"] is None, r.answer
    assert r.last_transaction["outcome"] == "cancelled" and r.last_transaction["tool"] == "approve_expense"
    assert r.trace["llm_calls"] == 0
    assert db_changes(novaops, before) == {}
    assert expense_status(novaops, "EXP-0261") == "pending"


@pytest.mark.parametrize("reply", ["approve it", "aprova"])
def test_an_action_verb_for_another_tool_is_never_a_confirmation(session: Any, novaops: Path, reply: str) -> None:
    """The prototypes hear assent in "approve it"; while a REJECTION awaits, that is another request."""
    r = fill(session, "t", "rejeita a EXP-0261", {"reason": "o recibo está ilegível"})
    assert r.transaction["tool"] == "reject_expense"
    before = db_snapshot(novaops)
    r = session.turn("t", reply)
    assert r.trace["executed_tool"] is None, r.answer
    assert (r.transaction or {}).get("tool") != "reject_expense" or r.status == "awaiting_confirmation"
    assert db_changes(novaops, before) == {} and expense_status(novaops, "EXP-0261") == "pending"


# ----------------------------------------------------------------------------- "yes, but …": a correction
@pytest.mark.parametrize(("lang", "first", "reply", "new", "yes"), [
    ("pt", "quero abrir um chamado", "sim, mas com prioridade P2", "P2", "sim"),
    ("en", "I want to open a ticket", "yes but make it P1", "P1", "yes"),
])
def test_yes_but_a_new_value_is_a_correction_with_a_new_summary(session: Any, novaops: Path, lang: str, first: str,
                                                                  reply: str, new: str, yes: str) -> None:
    answers = {"service_id": "payments-api", "title": "checkout devolve erro 502 no cartão", "priority": "P3"}
    shown = fill(session, "t", first, answers).transaction
    assert shown["args"]["priority"] == "P3"
    before = db_snapshot(novaops)
    r = session.turn("t", reply)
    assert r.status == "awaiting_confirmation" and r.trace["executed_tool"] is None, r.answer
    assert r.transaction["args"]["priority"] == new and r.transaction["args"]["service_id"] == "payments-api"
    assert r.transaction["confirmation_hash"] != shown["confirmation_hash"]
    assert r.transaction["summary"] != shown["summary"] and r.transaction["summary"] in r.answer
    assert db_changes(novaops, before) == {}
    r = session.turn("t", yes)
    assert r.trace["executed_tool"] == "create_ticket", r.answer
    newest = "SELECT {} FROM tickets ORDER BY ticket_id DESC LIMIT 1"
    assert (scalar(novaops, newest.format("service_id")), scalar(novaops, newest.format("priority"))) == ("payments-api", new)
    assert {t: len(k) for t, k in db_changes(novaops, before).items()} == {"tickets": 1, "audit_log": 1}


# ----------------------------------------------------------------------------- cancel and switch
def test_cancel_and_switch_while_collecting_starts_the_new_request_with_its_values(open_as: Opener,
                                                                                   novaops: Path) -> None:
    with open_as("E044") as s:
        r = s.turn("t", "escala o INC-2077 pra SEV2")
        assert (r.status, r.transaction["tool"]) == ("collecting", "escalate_incident")
        before = db_snapshot(novaops)
        r = s.turn("t", "cancela isso, quero reatribuir o TCK-1014 pra Juliana Costa")
        assert r.status == "awaiting_confirmation", r.answer
        assert r.transaction["tool"] == "reassign_ticket"
        assert r.transaction["args"] == {"ticket_id": "TCK-1014", "assignee_id": "E045"}
        assert r.last_transaction["tool"] == "escalate_incident" and r.last_transaction["outcome"] == "cancelled"
        assert "reason" not in r.last_transaction["args"]  # the cancel message never became the reason
        assert "escalate_incident" in r.answer and r.trace["executed_tool"] is None
        assert db_changes(novaops, before) == {}
        r = s.turn("t", "sim")
    assert r.trace["executed_tool"] == "reassign_ticket"
    assert scalar(novaops, "SELECT assignee_id FROM tickets WHERE ticket_id = 'TCK-1014'") == "E045"
    assert scalar(novaops, "SELECT severity FROM incidents WHERE incident_id = 'INC-2077'") == "SEV4"
    assert {t: len(k) for t, k in db_changes(novaops, before).items()} == {"tickets": 1, "audit_log": 1}


def test_cancel_and_switch_while_awaiting_confirmation(open_as: Opener, novaops: Path) -> None:
    with open_as("E001") as s:
        assert s.turn("t", "approve EXP-0261").status == "awaiting_confirmation"
        before = db_snapshot(novaops)
        r = s.turn("t", "cancel that, I need to reject EXP-0262 instead")
        assert (r.status, r.transaction["tool"]) == ("collecting", "reject_expense"), r.answer
        assert r.transaction["args"] == {"expense_id": "EXP-0262"}  # no reason taken from the switch message
        assert r.last_transaction["outcome"] == "cancelled" and r.last_transaction["args"] == {"expense_id": "EXP-0261"}
        assert db_changes(novaops, before) == {}
        r = s.turn("t", "the receipt belongs to a personal weekend trip")
        assert r.status == "awaiting_confirmation" and r.transaction["args"]["expense_id"] == "EXP-0262"
        r = s.turn("t", "yes")
    assert r.trace["executed_tool"] == "reject_expense"
    assert expense_status(novaops, "EXP-0262") == "rejected" and expense_status(novaops, "EXP-0261") == "pending"


@pytest.mark.parametrize(("first", "cancel"), [
    ("rejeita a EXP-0261", "pensando bem, deixa quieto"),
    ("rejeita a EXP-0261", "esquece"),
    ("rejeita a EXP-0261", "deixa pra lá"),
    ("rejeita a EXP-0261", "mudei de ideia"),  # no lexicon phrase: a close paraphrase of a reject prototype
    ("reject EXP-0261", "forget it"),
    ("reject EXP-0261", "never mind"),
])
def test_a_cancel_phrase_cancels_and_never_becomes_the_reason(session: Any, novaops: Path, first: str,
                                                              cancel: str) -> None:
    r = session.turn("t", first)
    assert r.status == "collecting" and r.transaction["pending"] == ["reason"]
    before = db_snapshot(novaops)
    r = session.turn("t", cancel)
    assert r.status == "idle" and r.transaction is None, r.answer
    assert r.last_transaction["outcome"] == "cancelled" and r.last_transaction["args"] == {"expense_id": "EXP-0261"}
    assert r.trace["llm_calls"] == 0 and r.trace["executed_tool"] is None
    assert db_changes(novaops, before) == {}


# ----------------------------------------------------------------------------- back to an earlier value
@pytest.mark.parametrize(("first", "change", "back", "yes"), [
    ("aprova a EXP-0261", "não, na verdade é a EXP-0262", "não, a primeira mesmo", "sim"),
    ("approve EXP-0261", "wait, make it EXP-0262", "no, the first one after all", "yes"),
])
def test_back_to_the_first_value_is_a_correction_not_a_cancel(session: Any, novaops: Path, first: str, change: str,
                                                              back: str, yes: str) -> None:
    shown = session.turn("t", first).transaction
    r = session.turn("t", change)
    assert r.transaction["args"] == {"expense_id": "EXP-0262"}
    assert r.transaction["history"] == [{"param": "expense_id", "value": "EXP-0261"}]
    r = session.turn("t", back)
    assert r.status == "awaiting_confirmation" and r.trace["executed_tool"] is None, r.answer
    assert r.transaction["args"] == {"expense_id": "EXP-0261"} and not r.last_transaction
    assert r.transaction["id"] == shown["id"]  # the same transaction, corrected
    assert "EXP-0261" in r.transaction["summary"] and r.transaction["summary"] in r.answer
    assert r.transaction["confirmation_hash"] == shown["confirmation_hash"]  # the same arguments as first shown
    r = session.turn("t", yes)
    assert r.trace["executed_tool"] == "approve_expense"
    assert expense_status(novaops, "EXP-0261") == "approved" and expense_status(novaops, "EXP-0262") == "pending"


# ----------------------------------------------------------------------------- bare assent while collecting
@pytest.mark.parametrize(("first", "assent", "param"), [
    ("quero rejeitar uma despesa", "sim, pode continuar", "expense_id"),
    ("quero rejeitar uma despesa", "ok", "expense_id"),
    ("I want to reject an expense", "yes, go on", "expense_id"),
    ("rejeita a EXP-0261", "beleza, pode continuar", "reason"),  # a free-text parameter pending
    ("reject EXP-0261", "alright, keep going", "reason"),
])
def test_bare_assent_while_collecting_asks_the_pending_parameter_again(session: Any, novaops: Path, first: str,
                                                                       assent: str, param: str) -> None:
    tx = session.turn("t", first).transaction
    assert tx["tool"] == "reject_expense" and tx["pending"][0] == param
    before = db_snapshot(novaops)
    r = session.turn("t", assent)
    assert r.status == "collecting", r.answer
    assert r.transaction["tool"] == "reject_expense" and r.transaction["args"] == tx["args"]  # nothing filled
    assert r.transaction["pending"] == tx["pending"] and r.transaction["reprompts"] == 0
    assert param in r.answer
    assert not r.last_transaction and not r.trace.get("refused") and r.trace["executed_tool"] is None
    assert r.trace["llm_calls"] == 0 and "select_intent" not in r.trace["nodes"]
    assert db_changes(novaops, before) == {}


def test_assent_with_nothing_pending_says_so(session: Any) -> None:
    for reply, lang in (("sim", "pt"), ("yes", "en")):
        r = session.turn("t", reply)
        assert r.status == "idle" and r.trace["executed_tool"] is None and r.transaction is None
        assert fold(say("nothing_pending", lang)) in fold(r.answer)


# ----------------------------------------------------------------------------- the detectors alone
@pytest.mark.parametrize(("text", "cancel", "rest"), [
    ("pensando bem, deixa quieto", True, ""),
    ("ah, deixa pra depois, cancela", True, ""),
    ("cancela isso, quero reatribuir o TCK-1014 pra Juliana Costa", True, "quero reatribuir o TCK-1014 pra Juliana Costa"),
    ("na real, esquece o chamado: passa o TCK-1014 pra Juliana Costa", True, "passa o TCK-1014 pra Juliana Costa"),
    ("Cancel that, I want to reassign TCK-1014 to Juliana Costa", True, "I want to reassign TCK-1014 to Juliana Costa"),
    ("não cancela", False, ""),
    ("o cliente pediu pra cancelar a viagem", False, ""),
    ("stop charging customers twice", False, ""),
    ("esqueceram de anexar o recibo", False, ""),
    ("não, a primeira mesmo", False, ""),
])
def test_cancel_clause(text: str, cancel: bool, rest: str) -> None:
    assert cancel_clause(text).cancel is cancel
    assert cancel_clause(text).rest == rest


@pytest.mark.parametrize("text", [
    # short free-text answers that e5 finds refusal-like: a reason or a title, never a cancel
    "o recibo chegou fora do prazo", "não tem nota fiscal", "no receipt attached", "not a business expense",
    "nada foi entregue", "o cliente cancelou o evento", "the event was cancelled", "search returns nothing",
])
def test_short_free_text_answers_are_not_cancels(text: str) -> None:
    assert not cancel_split(text).cancel
    assert not is_assent(text)


@pytest.mark.parametrize(("text", "assent"), [
    ("sim, pode continuar", True), ("ok", True), ("yes, go on", True), ("alright, keep going", True),
    ("sim, P2", False), ("EXP-0261", False), ("ok?", False), ("talvez", False), ("não", False),
    ("sim, mas depois", False), ("o recibo chegou fora do prazo de 30 dias", False),
])
def test_bare_assent(text: str, assent: bool) -> None:
    assert is_assent(text) is assent


def test_revert_cue() -> None:
    assert revert_cue("ih, não, a primeira mesmo") == "first"
    assert revert_cue("no, the first one after all") == "first"
    assert revert_cue("volta pro anterior") == "previous"
    assert revert_cue("sim") is None


# ----------------------------------------------------------------------------- the real local model
@pytest.mark.real_model
@pytest.mark.slow
def test_real_model_cancel_and_bare_assent_cost_no_llm_call(open_as: Opener, novaops: Path) -> None:
    """With the real model too, a bare assent and a cancel while a reason is pending fill nothing."""
    with open_as("E006", llm_backend="local") as s:
        assert s.turn("t", "rejeita a EXP-0261").transaction["pending"] == ["reason"]
        r = s.turn("t", "beleza, pode continuar")
        assert r.status == "collecting" and "reason" not in r.transaction["args"], r.answer
        r = s.turn("t", "pensando bem, deixa quieto")
    assert r.status == "idle" and r.last_transaction["outcome"] == "cancelled"
    assert r.last_transaction["args"] == {"expense_id": "EXP-0261"} and r.trace["llm_calls"] == 0
    assert audit_rows(novaops) == 11


@pytest.mark.real_model
@pytest.mark.slow
def test_real_model_unsure_reply_is_never_a_false_confirm(open_as: Opener, novaops: Path) -> None:
    """A reply the prototypes leave to the LLM: one constrained call, and a doubtful one never executes."""
    with open_as("E006", llm_backend="local") as s:
        assert s.turn("t", "aprova a EXP-0261").status == "awaiting_confirmation"
        r = s.turn("t", "segura aí")  # "hold on": the prototypes cannot tell; the LLM decides
        assert r.trace["llm_calls"] >= 1 and r.trace["executed_tool"] is None, r.answer
        assert expense_status(novaops, "EXP-0261") == "pending"
        if r.status == "awaiting_confirmation":  # read as "other": the summary is still open
            r = s.turn("t", "sim")
            assert r.trace["executed_tool"] == "approve_expense" and r.trace["llm_calls"] == 0
            assert audit_rows(novaops, "EXP-0261") == 1
        else:  # read as "not now": cancelled, nothing written
            assert r.status == "idle" and r.last_transaction["outcome"] == "cancelled"
            assert audit_rows(novaops) == 11
