"""Request forms (policies/request_forms.yaml, tramita/core/request_forms.py), pure, in both languages.

An imperative with a question mark, "pode/poderia … ?", "can/could you … ?", "… pra mim / for me" and
"coloca … no meu nome" ask the assistant to act (and name the tool by their verb); a modal about
someone else ("a Luciana pode aprovar?", "can Luciana approve?") is a question. The graph-level
effect (the write tool, or the permission refusal) is in tests/test_one_sentence_requests.py.
"""

from __future__ import annotations

import pytest

from tramita.core.request_forms import read_form, request_forms


@pytest.mark.parametrize(("text", "tools"), [
    # pt: imperative with a question mark, openers, benefactive, "no meu nome"
    ("aprova a EXP-0263?", ("approve_expense",)),
    ("libera a EXP-0263 pra mim?", ("approve_expense",)),
    ("pode rejeitar a EXP-0263?", ("reject_expense",)),
    ("poderia escalar o INC-2078 pra SEV2?", ("escalate_incident",)),
    ("você pode passar o TCK-1141 pra Aline Cunha?", ("reassign_ticket",)),
    ("dá pra transferir o TCK-1141?", ("reassign_ticket",)),
    ("consegue abrir um chamado no web-frontend pra mim?", ("create_ticket",)),
    ("bota o TCK-1141 no meu nome?", ("reassign_ticket",)),
    ("e aprova a EXP-0263 pra mim", ("approve_expense",)),
    ("ok, então sobe o INC-2078 pra SEV2", ("escalate_incident",)),
    # en
    ("approve EXP-0263?", ("approve_expense",)),
    ("can you reject EXP-0263 for me?", ("reject_expense",)),
    ("could you reassign TCK-1141 to me?", ("reassign_ticket",)),
    ("would you please escalate INC-2078 to SEV2?", ("escalate_incident",)),
    ("please submit a taxi expense for me", ("submit_expense",)),
    ("give it to Aline Cunha", ("reassign_ticket",)),
])
def test_a_request_names_its_tool(text: str, tools: tuple[str, ...]) -> None:
    form = read_form(text)
    assert form.request and not form.about_others, form
    assert form.tools == tools, form


def test_a_shared_verb_narrows_to_several_tools() -> None:
    form = read_form("could you file a budget change for me?")
    assert form.request and set(form.tools) == {"create_ticket", "submit_expense", "request_budget_change"}
    assert read_form("quero pedir reembolso de um curso").tools == ("submit_expense",)
    assert read_form("quero pedir aumento de orçamento").tools == ("request_budget_change",)


@pytest.mark.parametrize("text", [
    "a Luciana pode aprovar a EXP-0263?",
    "o Diego consegue aprovar essa despesa?",
    "pode a Fernanda aprovar a EXP-0263?",
    "quem pode aprovar a EXP-0263?",
    "can Luciana approve EXP-0263?",
    "could the CFO approve EXP-0263?",
    "can she reassign TCK-1141?",
])
def test_someone_elses_ability_is_a_question(text: str) -> None:
    form = read_form(text)
    assert form.about_others and not form.request and not form.tools, form


@pytest.mark.parametrize("text", [
    "qual o status do TCK-1141?",
    "eu posso aprovar a EXP-0263?",
    "quantas despesas estão pendentes?",
    "what's the meals limit?",
    "how many tickets are open on search-service?",
])
def test_ordinary_questions_are_not_requests(text: str) -> None:
    form = read_form(text)
    assert not form.request and not form.about_others and not form.tools, form


def test_a_benefactive_alone_makes_a_request() -> None:
    assert read_form("o TCK-1141 pra mim, por favor").request
    assert read_form("EXP-0263 for me please").request


def test_the_policy_file_is_validated_and_names_real_tools() -> None:
    from tramita.base.paths import POLICIES_DIR
    from tramita.base.policyfile import read_yaml

    forms = request_forms()
    tools = {t["name"] for t in read_yaml(POLICIES_DIR / "tools.yaml")["tools"]}
    assert set(forms.actions) <= tools
    assert all(isinstance(w, str) for per in forms.actions.values() for ws in per.values() for w in ws)


def test_a_bare_opening_verb_reports_the_word_after_it() -> None:
    """`bare` and `after` let the intent read "Open tickets per priority" as a noun phrase: only a
    verb that opens the message with no opener nor benefactive is bare."""
    form = read_form("Open tickets per priority")
    assert form.tools == ("create_ticket",) and form.bare and form.after == "tickets"
    assert read_form("ok, open tickets by service").after == "tickets"
    for asked in ("could you open tickets for me", "please open a ticket", "open a ticket for me"):
        form = read_form(asked)
        assert form.tools == ("create_ticket",) and not form.bare, asked
    assert read_form("open").after == ""
