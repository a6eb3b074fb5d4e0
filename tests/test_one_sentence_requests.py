"""Parameters people actually give, through the graph (scripted model, fresh database per test).

- One-sentence requests fill every parameter the starting message carries, free text included when a
  clear marker gives its span (":", "porque", "because", "reason:"), and go straight to the summary
  with zero LLM calls; without a marker the free text is asked for.
- Long one-sentence requests still select the tool (the head clause is matched first) and their
  details neither make a parameter ambiguous nor become values.
- A turn that is only an apology fills no reason; the real reason is stored verbatim.
- Request forms: "pode …?", "could you … for me?" are the write tool, or the permission refusal;
  a question about someone else's ability is a question.
- Unknown entities are refused with NOT_FOUND naming them; a lookup of a missing id ends there.
- A digression mid-transaction is answered exactly as the same question asked on its own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_graph import audit_rows, scalar, scripted_session

from tramita.core.spans import is_span


@pytest.fixture(autouse=True)
def _shared_models(pristine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAMITA_MODELS_DIR", os.environ.get("TRAMITA_MODELS_DIR") or str(pristine / "models"))


@pytest.fixture
def as_user(novaops_services: Any) -> Iterator[Any]:
    """`as_user(user)` opens a scripted session as that user on the test's fresh database."""
    opened: list[Any] = []

    def open_as(user: str) -> Any:
        cm = scripted_session(user=user, services=novaops_services)
        opened.append(cm)
        return cm.__enter__()

    yield open_as
    for cm in opened:
        cm.__exit__(None, None, None)


# ------------------------------------------------------------------------- one-sentence requests

def test_a_one_sentence_ticket_goes_straight_to_the_summary(as_user: Any, novaops: Path) -> None:
    s = as_user("E028")
    msg = "abre um chamado P3 no web-frontend: o carrinho perde os itens ao trocar de aba"
    r = s.turn("t", msg)
    assert r.status == "awaiting_confirmation", r.answer
    assert r.transaction["args"] == {"service_id": "web-frontend", "priority": "P3",
                                     "title": "o carrinho perde os itens ao trocar de aba"}
    assert r.trace["llm_calls"] == 0 and r.trace["executed_tool"] is None
    done = s.turn("t", "sim")
    assert done.trace["executed_tool"] == "create_ticket"
    title = scalar(novaops, "SELECT title FROM tickets WHERE ticket_id = 'TCK-1151'")
    assert title == "o carrinho perde os itens ao trocar de aba" and is_span(title, [msg])


@pytest.mark.parametrize(("user", "msg", "tool", "param", "value"), [
    ("E045", "escalate INC-2078 to SEV2 because the nightly load failed again and finance is blocked",
     "escalate_incident", "reason", "the nightly load failed again and finance is blocked"),
    ("E006", "reject EXP-0263, reason: the taxi receipt shows a different date",
     "reject_expense", "reason", "the taxi receipt shows a different date"),
    ("E006", "rejeita a EXP-0263 porque o recibo do táxi é de outro dia", "reject_expense", "reason",
     "o recibo do táxi é de outro dia"),
    ("E044", "pedir mais 6000 pro SRE no 2026-Q4, justificativa: plantão extra durante a migração do banco",
     "request_budget_change", "justification", "plantão extra durante a migração do banco"),
    ("E028", "submit an expense: transport, 18.20 USD, 2026-05-13, bus from the airport to the office",
     "submit_expense", "description", "bus from the airport to the office"),
])
def test_one_sentence_requests_with_a_clear_marker(as_user: Any, user: str, msg: str, tool: str, param: str,
                                                   value: str) -> None:
    r = as_user(user).turn("t", msg)
    assert r.status == "awaiting_confirmation", r.answer
    assert r.transaction["tool"] == tool and r.transaction["args"][param] == value
    assert r.trace["llm_calls"] == 0


def test_without_a_marker_the_free_text_is_asked_for(as_user: Any) -> None:
    r = as_user("E028").turn("t", "abre um chamado P3 no web-frontend")
    assert r.status == "collecting" and r.transaction["pending"] == ["title"]
    assert r.trace["llm_calls"] == 0


# ---------------------------------------------------------------------------- long requests

def test_a_long_request_still_selects_the_tool_and_its_details_are_not_values(as_user: Any) -> None:
    msg = ("open a P2 ticket on search-service: since this morning the autocomplete suggests items that were "
           "removed from the catalog, user-profile and redis-cache look healthy, the on-call engineer restarted "
           "the indexer twice without any change and three enterprise customers already complained about it")
    r = as_user("E028").turn("t", msg)
    assert r.status == "awaiting_confirmation", r.answer
    args = r.transaction["args"]
    assert args["service_id"] == "search-service" and args["priority"] == "P2"
    assert len(args["title"]) <= 120 and is_span(args["title"], [msg]) and is_span(args["description"], [msg])


def test_a_long_rejection_is_a_rejection(as_user: Any) -> None:
    reason = ("a nota é de um restaurante em outra cidade, a data não bate com a viagem registrada no portal, o "
              "colaborador já recebeu diária para esse dia e a política não permite acumular diária com refeição")
    r = as_user("E006").turn("t", f"rejeita a EXP-0263: {reason}")
    assert r.transaction["tool"] == "reject_expense" and r.status == "awaiting_confirmation", r.answer
    assert r.transaction["args"]["reason"] == reason


# ---------------------------------------------------------------------------- no invented values

@pytest.mark.parametrize("apology", ["desculpa, é o INC-2078 mesmo", "foi mal, SEV2", "sorry, it's INC-2078",
                                     "hmm, peraí, um segundo"])
def test_an_apology_turn_fills_no_reason(as_user: Any, novaops: Path, apology: str) -> None:
    s = as_user("E045")
    s.turn("t", "escala o INC-2078 pra SEV2")
    r = s.turn("t", apology)
    assert r.status == "collecting" and r.transaction["pending"] == ["reason"], r.answer
    assert "reason" not in r.transaction["args"]
    real = "a carga noturna falhou de novo e o fechamento depende dela"
    r = s.turn("t", real)
    assert r.status == "awaiting_confirmation" and r.transaction["args"]["reason"] == real
    assert s.turn("t", "sim").trace["executed_tool"] == "escalate_incident"
    assert audit_rows(novaops, "INC-2078") == 1


# ------------------------------------------------------------------------------ request forms

@pytest.mark.parametrize(("user", "msg", "tool"), [
    ("E006", "pode aprovar a EXP-0263?", "approve_expense"),
    ("E006", "libera a EXP-0263 pra mim?", "approve_expense"),
    ("E006", "could you approve EXP-0263 for me?", "approve_expense"),
    ("E051", "coloca o TCK-1146 no meu nome?", "reassign_ticket"),
    ("E051", "can you move TCK-1146 to me?", "reassign_ticket"),
])
def test_a_request_in_question_form_is_the_write_tool(as_user: Any, user: str, msg: str, tool: str) -> None:
    r = as_user(user).turn("t", msg)
    assert r.transaction and r.transaction["tool"] == tool, (r.trace, r.answer)
    assert r.status == "awaiting_confirmation" and r.trace["executed_tool"] is None


@pytest.mark.parametrize("msg", ["pode aprovar a EXP-0263 pra mim?", "consegue rejeitar a EXP-0263?",
                                 "could you approve EXP-0263 for me?", "can you escalate INC-2078 to SEV2?",
                                 "dá pra passar o TCK-1146 pra Aline Cunha?"])
def test_a_request_the_user_may_not_make_is_refused_with_the_permission_message(as_user: Any, novaops: Path,
                                                                                msg: str) -> None:
    r = as_user("E028").turn("t", msg)
    assert r.status == "idle" and r.transaction is None and r.trace["refused"], r.answer
    assert "permiss" in r.answer.lower() or "not allowed" in r.answer.lower()
    assert r.trace["executed_tool"] is None and audit_rows(novaops) == 11


@pytest.mark.parametrize("msg", ["o Diego pode aprovar a EXP-0263?", "can Diego approve EXP-0263?"])
def test_someone_elses_ability_stays_a_question(as_user: Any, msg: str) -> None:
    r = as_user("E006").turn("t", msg)
    assert r.transaction is None and not r.trace["executed_tool"] and not r.trace["refused"]
    assert "plan" in r.trace["nodes"]


@pytest.mark.parametrize("msg", ["Chamados abertos por prioridade", "Gasto com treinamento por equipe em 2025",
                                 "Incidentes por severidade no último trimestre", "Incidents by severity last quarter"])
def test_a_report_title_is_a_question_not_a_guessed_tool_or_a_refusal(as_user: Any, msg: str) -> None:
    """Written for this test: no request verb, no question mark, no clear tool and no value of a
    near tool's: a report is asked for. Before, the router guessed a write tool for the first two
    and the last two met the permission refusal of the tool they resemble."""
    r = as_user("E006").turn("t", msg)
    assert r.transaction is None and not r.trace["executed_tool"] and not r.trace["refused"], r.answer
    assert "plan" in r.trace["nodes"]


@pytest.mark.parametrize("msg", ["Open tickets per priority", "Open incidents by severity?",
                                 "open tickets for search-api"])
def test_a_verb_that_is_the_state_of_the_rows_it_precedes_is_a_question(as_user: Any, msg: str) -> None:
    """Written for this test: "open" before a word for tickets or incidents is their status (the
    semantic model's value), so the message names rows. Before, the verb "open" chose the create
    tool, and the user was asked for a service and a title."""
    r = as_user("E006").turn("t", msg)
    assert r.transaction is None and not r.trace["executed_tool"] and not r.trace["refused"], r.answer
    assert "plan" in r.trace["nodes"]


@pytest.mark.parametrize("msg", ["Lista os chamados abertos do payments-api", "Mostra os últimos 3 deploys do search-service",
                                 "List the pending expenses of Rui Almeida"])
def test_a_verb_that_only_reads_asks_for_data_not_for_a_write(as_user: Any, msg: str) -> None:
    """Written for this test: "lista", "mostra", "list" name only the lookup tools, and no lookup
    finds its id in the message, so the message asks for data. Before, the registry's scores read
    the first as the create tool (a permitted user was asked for a title) and the second as
    approving an expense (the permission refusal)."""
    r = as_user("E006").turn("t", msg)
    assert r.transaction is None and not r.trace["executed_tool"] and not r.trace["refused"], r.answer
    assert "plan" in r.trace["nodes"]


def test_a_reading_verb_with_a_lookups_id_is_still_the_lookup(as_user: Any) -> None:
    """The counter-case: the same verb with a ticket's id is the lookup tool, run with no confirmation."""
    r = as_user("E006").turn("t", "Mostra o chamado TCK-1001")
    assert r.trace["executed_tool"] == "get_ticket_status", r.answer


@pytest.mark.parametrize("msg", ["Open a ticket for search-api", "please open tickets for search-api",
                                 "Open ticket for search-api: the login page times out"])
def test_the_same_verb_before_an_article_an_opener_or_a_detail_still_opens_a_ticket(as_user: Any, msg: str) -> None:
    """The counter-cases: an article, an opener or a free-text marker keep "open" a request."""
    r = as_user("E006").turn("t", msg)
    assert r.transaction is not None and r.transaction["tool"] == "create_ticket", r.answer


def test_a_terse_request_that_carries_its_values_is_still_a_request(as_user: Any) -> None:
    """The counter-case: the same shape with the tool's own values (an amount, a quarter) is the
    tool's, refused here with the permission message because E006 may not run it."""
    r = as_user("E006").turn("t", "another 7000 for my team in 2026-Q2")
    assert r.trace["refused"] and "plan" not in r.trace["nodes"], r.answer


# ----------------------------------------------------------------------------- unknown entities

def test_an_unknown_service_is_named_in_the_refusal(as_user: Any) -> None:
    r = as_user("E028").turn("t", "abre um chamado P3 no sistema-de-compras: não consigo lançar pedidos")
    assert r.status == "collecting" and r.trace["refused"] and r.trace["refusal"] == "NOT_FOUND", r.answer
    assert "sistema-de-compras" in r.answer
    assert "service_id" in r.transaction["pending"] and r.transaction["args"]["title"] == "não consigo lançar pedidos"


@pytest.mark.parametrize("msg", ["passa o TCK-1146 pro Fulano Beltrano", "reassign TCK-1146 to Fulano Beltrano"])
def test_an_unknown_person_is_named_and_the_ticket_kept(as_user: Any, msg: str) -> None:
    r = as_user("E051").turn("t", msg)
    assert r.status == "collecting" and r.trace["refusal"] == "NOT_FOUND", r.answer
    assert "Fulano Beltrano" in r.answer and r.transaction["args"] == {"ticket_id": "TCK-1146"}


@pytest.mark.parametrize("msg", ["qual o status do TCK-1999?", "status of expense EXP-0999?"])
def test_a_lookup_of_a_missing_id_ends_with_the_refusal(as_user: Any, msg: str) -> None:
    s = as_user("E028")
    r = s.turn("t", msg)
    assert r.status == "idle" and r.transaction is None and r.trace["refused"], r.answer
    assert msg.split()[-1].rstrip("?") in r.answer
    assert s.turn("t", "qual o status do TCK-1146?").trace["executed_tool"] == "get_ticket_status"


# ---------------------------------------------------------------------------------- digressions

@pytest.mark.parametrize(("start", "question"), [
    ("escala o INC-2078 pra SEV2", "qual é o prazo para reconhecer um incidente SEV1 na política?"),
    ("reassign TCK-1146", "who is Aline Cunha's manager?"),
])
def test_a_digression_is_answered_like_the_same_question_on_its_own(novaops_services: Any, start: str,
                                                                     question: str) -> None:
    with scripted_session(user="E045", services=novaops_services) as s:
        alone = s.turn("alone", question)
        s.turn("mid", start)
        mid = s.turn("mid", question)
    assert mid.status == "collecting" and mid.transaction["args"] == s_args(start)
    assert "plan" in mid.trace["nodes"] and mid.plan == alone.plan
    assert [c.get("query") for c in mid.contexts or []] == [c.get("query") for c in alone.contexts or []]
    assert mid.answer.startswith(alone.answer), (alone.answer, mid.answer)


def s_args(start: str) -> dict[str, str]:
    return {"incident_id": "INC-2078", "new_severity": "SEV2"} if "INC" in start else {"ticket_id": "TCK-1146"}
