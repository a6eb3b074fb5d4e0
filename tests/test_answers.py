"""Answers that read right (synthesis): language, units, numbers, no raw rows or internal text, gaps
said plainly, only the citations the answer used — on every path (answered, no rows, model failed).

The scripted model stands in for the LLM, with a responder that records the prompt and returns a
chosen answer; one test asks the real local model (`real_model`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from graph.context import Context
from nodes.synthesize import (
    LIST_ROWS,
    clean_answer,
    complete_list,
    name_records,
    render_contexts,
    stored_spelling,
    synthesize,
    without_column_names,
    without_preamble,
)
from tools.llm import override_model
from tools.scripted_model import ScriptedChatModel
from tramita.base.text import detect_language
from tramita.lab.evaluation.facts import fact_in, leaks

SQL_TOTAL = {"backend": "sql", "error": None,
             "query": "SELECT e.full_name, ROUND(SUM(x.amount_usd), 2) AS total FROM expenses x "
                      "JOIN employees e ON e.employee_id = x.employee_id GROUP BY e.full_name",
             "rows": [{"full_name": "Carolina Mendes", "total": 23183.12}]}
DOC = {"backend": "docs", "items": [{"source": "doc-pol-expense", "score": 0.9,
                                     "text": "Política de Reembolso — Limites: refeições até 80 USD por pedido."}]}


@pytest.fixture
def model() -> Iterator[Callable[[Callable[[str], str]], list[str]]]:
    """Install a scripted model whose answers come from a function of the prompt; yields a setter
    that returns the list the prompts are recorded in."""
    def install(answer: Callable[[str], str]) -> list[str]:
        prompts: list[str] = []

        def respond(prompt: str) -> str:
            prompts.append(prompt)
            return answer(prompt)

        override_model("scripted", ScriptedChatModel(responder=respond))
        return prompts

    yield install
    override_model("scripted", None)


def _run(question: str, lang: str, contexts: list[dict[str, Any]], plan: list[str] | None = None,
         backend: str = "scripted") -> dict[str, Any]:
    runtime: Any = SimpleNamespace(context=Context(llm_backend=backend))
    state: Any = {"messages": [HumanMessage(question)], "lang": lang, "contexts": contexts,
                  "plan": {"backends": plan or [c["backend"] for c in contexts], "reason": ""}}
    return synthesize(state, runtime)


def _shown(out: dict[str, Any]) -> str:
    return "\n\n".join([out["answer"], *out.get("notices", [])])


# ------------------------------------------------------------------------------- language

@pytest.mark.parametrize("question", ["Minimum password length?", "Juliana Costa approval limit?",
                                      "avg amount of an approved lodging claim?", "Who sits in the Porto office?"])
def test_short_english_questions_are_english(question: str) -> None:
    assert detect_language(question, "pt") == "en"


@pytest.mark.parametrize("text", ["EXP-0264", "ok", "sim", "P1 tickets?", "Houve algum deploy ontem?"])
def test_ids_and_one_word_replies_do_not_switch_to_english(text: str) -> None:
    assert detect_language(text, "pt") == "pt"


def test_synthesis_is_asked_in_the_question_language(model: Any) -> None:
    prompts = model(lambda _p: "Meals are limited to 80 USD per claim [doc-pol-expense].")
    out = _run("meal limit?", "en", [DOC])
    assert "Answer in English" in prompts[0]
    assert out["answer"] == "Meals are limited to 80 USD per claim [doc-pol-expense]."


# ------------------------------------------------------------------------- numbers, units

def test_numbers_and_units_are_written_in_code_per_language() -> None:
    pt = render_contexts([SQL_TOTAL], "pt", {"amount_usd": "USD"})
    en = render_contexts([SQL_TOTAL], "en", {"amount_usd": "USD"})
    assert "US$ 23.183,12" in pt and "23.183.12" not in pt and "R$" not in pt
    assert "USD 23,183.12" in en
    for block in (pt, en):
        assert set(leaks(block)) <= {"result label", "table line", "api label"}  # no `rows:`, no `query:`; the
        # count heading and the table are there on purpose, and clean_answer drops them when copied
        assert "SELECT" not in block and "full_name" in block  # column names, not the query


def test_units_come_from_column_conventions_without_a_model() -> None:
    ctx = {"backend": "sql", "query": "SELECT AVG(minutes_to_ack) AS avg_ack FROM incidents", "rows": [{"avg_ack": 17.2857}]}
    assert "17,29 min" in render_contexts([ctx], "pt", {})


def test_an_invented_currency_is_corrected(model: Any) -> None:
    model(lambda _p: "A Carolina Mendes gastou R$ 23.183,12 [SQL].")
    out = _run("quanto a Carolina gastou?", "pt", [SQL_TOTAL])
    assert "R$" not in out["answer"] and "US$ 23.183,12" in out["answer"]
    assert fact_in("23183.12", out["answer"])


# ------------------------------------------------------------------ no raw rows or errors

def test_labels_rows_and_exception_text_never_reach_the_user(model: Any) -> None:
    model(lambda _p: "[SQL] query: SELECT 1\n[SQL] rows: [{\"total\": 23183.12}]\n"
                     "O total da Carolina Mendes é US$ 23.183,12 [SQL]. OperationalError: database is locked")
    out = _run("quanto a Carolina gastou?", "pt", [SQL_TOTAL])
    assert not leaks(out["answer"]), out["answer"]
    assert "US$ 23.183,12 [SQL]" in out["answer"]


def test_no_rows_path_is_plain(model: Any) -> None:
    prompts = model(lambda _p: "should not be asked")
    out = _run("orçamento do time X?", "pt", [{"backend": "sql", "query": "SELECT 1 WHERE 0", "rows": [], "error": None}])
    assert not prompts and not leaks(_shown(out)) and "[" not in out["answer"]
    assert out["turn"]["route"] == "answer:no-rows"


def test_model_failure_says_so_without_internal_text(model: Any) -> None:
    def fail(_p: str) -> str:
        raise RuntimeError("llama_decode returned -3 (ValueError: kv cache full)")

    model(fail)
    out = _run("quanto a Carolina gastou?", "pt", [SQL_TOTAL])
    assert out["turn"]["route"] == "answer:llm-failed"
    assert not leaks(_shown(out)) and "llama" not in _shown(out) and "kv cache" not in _shown(out)
    assert out["answer"].startswith("O modelo de linguagem não respondeu")


# --------------------------------------------------------------------------------- gaps

def test_a_needed_backend_that_failed_is_one_plain_sentence(model: Any) -> None:
    model(lambda _p: "Refeições: até 80 USD por pedido [doc-pol-expense].")
    failed = {"backend": "sql", "error": "OperationalError: unable to open database file"}
    out = _run("limite de refeições e quanto gastamos?", "pt", [DOC, failed])
    shown = _shown(out)
    assert "Não consegui consultar o banco de dados" in shown
    assert "OperationalError" not in shown and "unable to open" not in shown and not leaks(shown)


def test_a_backend_outside_the_plan_is_not_mentioned(model: Any) -> None:
    model(lambda _p: "Refeições: até 80 USD por pedido [doc-pol-expense].")
    failed = {"backend": "graph", "error": "RuntimeError: lock held"}
    out = _run("limite de refeições?", "pt", [DOC, failed], plan=["docs"])
    assert out["notices"] == [] and "grafo" not in _shown(out)


def test_only_failures_gives_the_plain_sentence_as_the_answer() -> None:
    out = _run("quem está de plantão?", "en", [{"backend": "graph", "error": "TimeoutError: 30 s"}])
    assert out["answer"] == "I could not query the company graph just now, so that part could not be checked."


def test_a_query_that_named_an_unsaid_record_is_told_as_such_not_as_an_outage() -> None:
    """The graph's fallback could write its query only with a service the question never named:
    the user hears that the question's words were not enough (naming the thing helps), not that
    the graph could not be reached; another source that was down keeps its own sentence."""
    unnamed = {"backend": "graph", "error": "UnsaidValueError: the query names 'x-api', which the question "
                                            "does not name; leave that condition out"}
    out = _run("who covers more than one week?", "en", [unnamed])
    assert out["answer"].startswith("With only what the question says, I could not query the company graph")
    assert "just now" not in out["answer"] and "x-api" not in out["answer"] and "UnsaidValueError" not in out["answer"]
    both = _run("quem cobre mais de uma semana, e quanto custou?", "pt",
                [unnamed, {"backend": "sql", "error": "OperationalError: unable to open database file"}],
                plan=["sql", "graph"])
    assert "Não consegui consultar o banco de dados agora" in both["answer"]
    assert "Só com o que a pergunta diz, não consegui consultar o grafo da empresa" in both["answer"]


def test_a_query_the_model_could_not_write_is_told_as_such_not_as_an_outage() -> None:
    """Written for this test: the SQL fallback's every attempt failed with the database up
    (`unwritten`): the user hears that no query could be written for that part, not "just now";
    the same error from a store that is down keeps the outage sentence."""
    unwritten = {"backend": "sql", "error": "OperationalError: no such column: T2.amount_usd", "unwritten": True}
    out = _run("who leads it and what was its budget?", "en", [unwritten], plan=["sql"])
    assert out["answer"] == ("I could not write a query that answers that part (the database); rephrasing the "
                             "question may help.")
    pt = _run("quem lidera e qual o orçamento?", "pt", [unwritten], plan=["sql"])
    assert pt["answer"].startswith("Não consegui montar uma consulta que responda a essa parte (o banco de dados)")
    down = {"backend": "sql", "error": "OperationalError: unable to open database file"}
    assert "just now" in _run("who leads it?", "en", [down], plan=["sql"])["answer"]


def test_a_source_the_question_gave_nothing_to_ask_is_no_outage() -> None:
    """Written for this test: the API backend found no declared operation for its part, or a
    required value the question does not say (`unasked`); the user hears that the question's words
    were not enough, not that the source could not be reached."""
    unasked = {"backend": "api", "error": "missing parameters for getServiceStatus: service_id", "unasked": True}
    out = _run("and how is it doing now?", "en", [unasked], plan=["api"])
    assert out["answer"].startswith("With only what the question says, I could not query") and "just now" not in out["answer"]
    down = {"backend": "api", "error": "ConnectError: connection refused"}
    assert "just now" in _run("and how is it doing now?", "en", [down], plan=["api"])["answer"]


# ---------------------------------------------------------------------------- citations

def test_citations_keep_only_sources_the_answer_used(model: Any) -> None:
    model(lambda _p: "Meals: up to 80 USD per claim [doc-pol-expense] [doc-pol-travel]. "
                     "Carolina Mendes spent USD 23,183.12 [SQL] [graph].")
    out = _run("meal limit and Carolina's spend?", "en", [DOC, SQL_TOTAL])
    answer = out["answer"]
    assert "[doc-pol-expense]" in answer and "[SQL]" in answer
    assert "[doc-pol-travel]" not in answer and "[graph]" not in answer  # invented / not in the context


def test_a_tag_on_a_sentence_that_did_not_use_its_source_is_dropped() -> None:
    block = render_contexts([DOC, SQL_TOTAL], "en", {"amount_usd": "USD"})
    cleaned = clean_answer("Carolina Mendes spent USD 23,183.12 [SQL] [doc-pol-expense].", block)
    assert cleaned == "Carolina Mendes spent USD 23,183.12 [SQL]."
    assert re.search(r"\[SQL\]", clean_answer("[SQL]: no data at all here.", block)) is None


def test_a_tag_the_token_limit_cut_goes() -> None:
    """Written for this test: the answer stopped inside a tag; a closed tag and a bracket in the
    middle of the text stay."""
    block = render_contexts([DOC, SQL_TOTAL], "en", {"amount_usd": "USD"})
    assert clean_answer("Carolina Mendes spent USD 23,183.12 [SQL].\n- Ana Prado [doc", block) \
        == "Carolina Mendes spent USD 23,183.12 [SQL].\n- Ana Prado"
    assert clean_answer("Carolina Mendes spent USD 23,183.12 [SQL].", block) == "Carolina Mendes spent USD 23,183.12 [SQL]."


def test_a_copied_result_label_line_is_removed() -> None:
    """The model copies the context's "[SQL] 2 results:" heading: that line goes, the sentence stays."""
    block = render_contexts([DOC, SQL_TOTAL], "en", {"amount_usd": "USD"})
    cleaned = clean_answer("The SQL query [SQL] 1 result:\nCarolina Mendes spent USD 23,183.12 [SQL].", block)
    assert cleaned == "Carolina Mendes spent USD 23,183.12 [SQL]."
    assert "no matching records" not in clean_answer("[graph] no matching records.\nNothing found.", block)


def test_a_label_copied_after_a_sentence_takes_only_itself_away() -> None:
    """Written for this test: the model ends a real sentence with the context's empty-result label
    on the same line; the sentence stays and the label goes, where the whole line used to go."""
    block = render_contexts([DOC, SQL_TOTAL], "en", {"amount_usd": "USD"})
    cleaned = clean_answer("The billing-worker has no on-call rota. [graph] no matching records.", block)
    assert cleaned == "The billing-worker has no on-call rota."
    assert clean_answer("[graph] no matching records. [SQL] 1 result:", block) == ""


def test_a_question_copied_back_into_the_answer_goes() -> None:
    """Written for this test: one of the user's two questions restated inside the answer's line."""
    question = "O billing-worker tem plantão? E quantos chamados dele estão abertos?"
    out = without_preamble("O billing-worker não tem plantão. E quantos chamados dele estão abertos?", question, "")
    assert out == "O billing-worker não tem plantão."
    # a question the user did not ask stays: it is the answer's own
    kept = without_preamble("Nenhum plantão. Quer que eu procure outro serviço?", question, "")
    assert kept == "Nenhum plantão. Quer que eu procure outro serviço?"


DEPS = {"backend": "graph", "rows": [{"service": s, "hops": h} for s, h in
                                      [("api-gateway", 1), ("auth-service", 2), ("event-bus", 2), ("redis-cache", 3)]]}


def test_a_list_cut_short_gets_the_full_list() -> None:
    """Two of four rows named: the full list follows, in the answer's language."""
    out = complete_list("web-frontend depends on api-gateway and auth-service.", [DEPS], "en")
    assert out.endswith("Full list: api-gateway, auth-service, event-bus, redis-cache.")
    pt = complete_list("Depende do api-gateway e do event-bus.", [DEPS], "pt")
    assert pt.endswith("Lista completa: api-gateway, auth-service, event-bus, redis-cache.")


def test_one_row_named_of_a_list_the_question_asks_for_gets_the_full_list() -> None:
    """A chain answered with its first level only: the question asks for no single row."""
    chain = {"backend": "graph", "rows": [{"manager": m, "distance": d} for m, d in
                                          [("Ana Lima", 1), ("Rui Costa", 2), ("Eva Prado", 3)]]}
    out = complete_list("A linha de reporte da Joana passa pela Ana Lima.", [chain], "pt",
                        "Por quais gestores passa a linha de reporte da Joana?")
    assert out.endswith("Lista completa: Ana Lima, Rui Costa, Eva Prado.")
    # a wrong completion must not pass: the one row a superlative asks for stays alone
    one = complete_list("A gestora mais próxima é a Ana Lima.", [chain], "pt", "Quem é a gestora mais próxima da Joana?")
    assert one == "A gestora mais próxima é a Ana Lima."


def test_an_answer_that_names_no_row_gets_the_rows() -> None:
    """The model read four rows as none. When they are all the turn found, the rows replace the
    denial; beside another source's passages, they follow it. Stating their count is reading them."""
    rows = "api-gateway, auth-service, event-bus, redis-cache."
    denial = "Nenhum serviço depende de outro."
    assert complete_list(denial, [DEPS], "pt", "Quais serviços o web-frontend chama?") == f"Encontrei: {rows}"
    beside = complete_list(denial, [DOC, DEPS], "pt", "Quais serviços o web-frontend chama?")
    assert beside == f"{denial}\nLista completa: {rows}"
    for stated in ("O web-frontend chama 4 serviços.", "There are 4 of them."):
        assert complete_list(stated, [DEPS], "pt", "Quantos serviços o web-frontend chama?") == stated
    # a different number is no count of these rows, and a decimal is no count at all
    for other in ("O web-frontend chama 3 serviços.", "O custo é 4.5 mil."):
        assert complete_list(other, [DEPS], "pt") == f"Encontrei: {rows}"
        assert complete_list(other, [DOC, DEPS], "pt").endswith(f"Lista completa: {rows}")


def test_a_denial_of_the_one_row_the_only_source_found_is_replaced() -> None:
    """Written for this test: "is anyone on call?" answered "no" over the one person the graph
    found. The contradiction is not kept; a one-row answer that names the row is left alone."""
    hit = {"backend": "graph", "rows": [{"name": "Zé Quinto", "role": "primary"}]}
    out = complete_list("No, nobody from that team is on call next week.", [hit], "en",
                        "Is anyone from the Data team on call next week?")
    assert out.startswith("Found: Zé Quinto") and "nobody" not in out
    named = "Yes: Zé Quinto is the primary."
    assert complete_list(named, [hit], "en", "Is anyone from the Data team on call next week?") == named


def test_an_answer_that_denies_the_one_row_found_gets_it() -> None:
    """Written for this test: the graph found one service and the answer says there is none; the
    row follows. A one-row lookup the answer reads (by any of its cells), or does not deny, is left."""
    hit = {"backend": "graph", "rows": [{"service": "svc-q"}]}
    lookup = {"backend": "sql", "rows": [{"commander_id": "E900", "full_name": "Ana Prado"}]}
    denied = "Ana Prado comandou o INC-9. Não há serviços tier 1 atingidos nele."
    assert complete_list(denied, [hit, lookup], "pt", "Quem comandou o INC-9? E algum serviço foi atingido?") \
        == f"{denied}\nLista completa: svc-q."
    read = "Ana Prado comandou o INC-9 e não houve outro comandante."
    assert complete_list(read, [lookup], "pt", "Quem comandou o INC-9?") == read
    plain = "O INC-9 atingiu o svc-q."
    assert complete_list(plain, [hit], "pt", "Que serviço o INC-9 atingiu?") == plain


def test_a_one_row_result_the_answer_does_not_read_follows_with_its_figure() -> None:
    """Written for this test: the model announced an answer ("Here it is:") and gave none, or wrote
    around the row; the row, the only source's, replaces it with its one figure. An answer that writes the name, or only
    the figure (in either language's marks), read the row and is left."""
    top = {"backend": "sql", "query": "SELECT a.full_name, COUNT(*) AS n FROM x JOIN a ON 1 GROUP BY a.full_name",
           "rows": [{"approver.full_name": "Ana Prado", "expenses.count": 12345}]}
    question = "Quem mais aprovou despesas?"
    assert complete_list("Aqui está a resposta:", [top], "pt", question) == "Encontrei: Ana Prado (12.345)."
    assert complete_list("O INC-9 atingiu um serviço.", [{"backend": "graph", "rows": [{"service": "svc-q"}]}], "pt",
                         "Que serviço o INC-9 atingiu?") == "Encontrei: svc-q."
    for read in ("Ana Prado aprovou mais.", "Foram 12.345 despesas.", "There were 12,345 of them."):
        assert complete_list(read, [top], "pt", question) == read
    assert complete_list("Foram 12.354 despesas.", [top], "pt", question) == "Encontrei: Ana Prado (12.345)."
    # a report row (an API's, with lists in it) or a row named by when it was read is no answer to list
    for row in ({"as_of": "2026-05-15T08:00:00-03:00", "services": [{"id": "svc-q", "status": "degraded"}]},
                {"checked_at": "2026-05-15T08:00:00-03:00", "state": "degraded"}):
        assert complete_list("Três serviços estão degradados.", [{"backend": "api", "rows": [row]}], "pt",
                             "Tem algum serviço degradado?") == "Três serviços estão degradados."


def test_a_one_row_result_the_answer_does_not_read_follows_with_its_other_text() -> None:
    """Written for this test: the database found a project's lead and the project's name, and the
    model named another person from the passages; the row follows with both of its texts. Only a
    row's one other text is written beside it (two others: the label alone), and an answer that
    writes a cell of the row is left."""
    lead = {"backend": "sql", "query": "SELECT e.full_name, p.name FROM p JOIN e ON 1",
            "rows": [{"lead.full_name": "Ana Prado", "projects.name": "Atlas Sync"}]}
    question = "Quem lidera esse projeto?"
    wrong = "O projeto é liderado por Rui Costa."
    assert complete_list(wrong, [lead], "pt", question) == "Encontrei: Ana Prado (Atlas Sync)."
    two = {"backend": "sql", "query": "SELECT 1",
           "rows": [{"lead.full_name": "Ana Prado", "projects.name": "Atlas Sync", "projects.status": "active"}]}
    assert complete_list(wrong, [two], "pt", question) == "Encontrei: Ana Prado."
    # beside the passages the wrong name came from, the row follows the answer
    assert complete_list(wrong, [DOC, lead], "pt", question) == f"{wrong}\nLista completa: Ana Prado (Atlas Sync)."
    for read in ("Ana Prado lidera o projeto.", "O Atlas Sync é liderado pela pessoa do registro."):
        assert complete_list(read, [lead], "pt", question) == read


def test_a_lone_figure_the_answer_does_not_write_follows_in_its_unit() -> None:
    """Written for this test: the database counted (or summed) and the model wrote around it ("the
    handbook does not give the number"); the figure follows, in the column's unit. An answer that
    writes it, in either language's marks, is left; so is a wrong figure not mistaken for it."""
    count = {"backend": "sql", "query": "SELECT COUNT(*) AS n FROM x", "rows": [{"employees.count": 23}]}
    around = "The handbook does not give the number of people in those offices."
    assert complete_list(around, [count], "en", "How many people work there?") == f"{around}\nQuery result: 23."
    spent = {"backend": "sql", "query": "SELECT SUM(amount_usd) FROM x", "rows": [{"expenses.sum_amount_usd": 1234.5}]}
    assert complete_list("Não sei.", [spent], "pt", "Quanto gastaram?", {"amount_usd": "USD"}).endswith(
        "Resultado da consulta: US$ 1.234,50.")
    for read in ("There are 23 of them.", "Twenty-three: 23."):
        assert complete_list(read, [count], "en", "How many people work there?") == read
    assert complete_list("There are 32 of them.", [count], "en", "How many?").endswith("Query result: 23.")


def test_a_one_row_answer_a_later_stage_queried_by_follows_when_the_answer_drops_it() -> None:
    """Written for this test: the graph found the owning team and the database took its name for
    the cost center; an answer with the cost center alone gets the team. A one-row result no later
    query took, or an answer that names it, is left."""
    owner = {"backend": "graph", "query": "MATCH (t:Team)-[:OWNS_SERVICE]->(s:Service {service_id: 'svc-q'}) "
                                          "RETURN t.name AS team", "rows": [{"team": "Equipe Q"}]}
    center = {"backend": "sql", "query": "SELECT cost_center FROM teams WHERE name = 'Equipe Q'",
              "rows": [{"cost_center": "CC-900"}]}
    dropped = "O svc-q é do time que o opera; o centro de custo é CC-900."
    question = "De quem é o svc-q e qual o centro de custo desse time?"
    assert complete_list(dropped, [owner, center], "pt", question) == f"{dropped}\nLista completa: Equipe Q."
    read = "O svc-q é da Equipe Q, centro de custo CC-900."
    assert complete_list(read, [owner, center], "pt", question) == read
    # no later query took it: it follows all the same, since the answer reads none of its row
    other = {**center, "query": "SELECT cost_center FROM teams WHERE name = 'Equipe R'"}
    assert complete_list(dropped, [owner, other], "pt", question) == f"{dropped}\nLista completa: Equipe Q."
    # the later stage's row, which the answer does not read either, follows too
    assert complete_list("A Equipe Q é dona do svc-q.", [owner, center], "pt", question) \
        == "A Equipe Q é dona do svc-q.\nLista completa: CC-900."


def test_the_list_names_the_column_that_tells_the_rows_apart() -> None:
    """Written for this test: ten shifts of one role; the role names none of them, the services do."""
    rows = [{"role": "secondary", "service": s} for s in ("svc-a", "svc-b", "svc-c")]
    out = complete_list("Ela não está de plantão.", [{"backend": "graph", "rows": rows}], "pt", "Ela está de plantão?")
    assert out == "Encontrei: svc-a (secondary); svc-b (secondary); svc-c (secondary)."
    assert not out.endswith("Lista completa: secondary.")


@pytest.mark.parametrize(("answer", "expected"), [
    ("The team that owns svc-q is Equipe Q, and its head is owner_team.name.", "The team that owns svc-q is Equipe Q."),
    ("O time é a Equipe Q e o líder é `owner_team.name`. Mais nada.", "O time é a Equipe Q. Mais nada."),
    ("owner_team.name is the owner.\nEquipe Q owns it.", "Equipe Q owns it."),
    ("The team on record is Equipe Q.", "The team on record is Equipe Q."),  # a plain word "team" is no column
    # beside its value: a copied label, no gap; the label goes and the value stays
    ("owner_team.name: Equipe Q.", "Equipe Q."),
    ("O Lucas é do time Equipe Q owner_team.name, de Engenharia.", "O Lucas é do time Equipe Q, de Engenharia."),
])
def test_a_clause_that_writes_a_column_name_for_its_value_goes(answer: str, expected: str) -> None:
    contexts = [{"backend": "sql", "rows": [{"owner_team.name": "Equipe Q", "team": "Equipe Q"}]}]
    assert without_column_names(answer, contexts) == expected


def test_a_column_of_lists_is_left_to_the_answer() -> None:
    """An API's open incidents are a list per row: the line that copies them stays."""
    contexts = [{"backend": "api", "rows": [{"open_incidents": [{"incident_id": "INC-9"}]}]}]
    line = "open_incidents: INC-9 (SEV2)."
    assert without_column_names(line, contexts) == line


@pytest.mark.parametrize("answer", [
    "web-frontend depends on api-gateway, auth-service, event-bus and redis-cache.",  # complete already
    "The closest dependency is api-gateway.",  # one named: an answer about one row, not a list
    "web-frontend has 4 dependencies.",  # a count
])
def test_a_complete_or_non_list_answer_is_left_alone(answer: str) -> None:
    assert complete_list(answer, [DEPS], "en") == answer
    assert complete_list(answer, [DEPS], "en", "Which service is the closest dependency of web-frontend?") == answer
    many = {"backend": "sql", "rows": [{"name": f"svc-{i}"} for i in range(LIST_ROWS + 1)]}
    assert complete_list("svc-1 and svc-2 and more.", [many], "en") == "svc-1 and svc-2 and more."


def test_a_chained_answer_lists_the_last_stages_figures_not_the_set_it_counted_over() -> None:
    """The graph found three services, the database counted each one's tickets; the answer named
    two counts. The full list is the database's, with each figure: the graph's bare names, listed
    first, left the third count out of the answer."""
    services = {"backend": "graph", "rows": [{"service": s} for s in ("svc-a", "svc-b", "svc-c")]}
    counts = {"backend": "sql", "query": "SELECT service_id, COUNT(*) AS n FROM tickets GROUP BY service_id",
              "rows": [{"service_id": "svc-a", "n": 4}, {"service_id": "svc-b", "n": 2}, {"service_id": "svc-c", "n": 1}]}
    out = complete_list("svc-b has 2 open tickets and svc-c has 1.", [services, counts], "en",
                        "How many open tickets does each service that calls svc-x have?")
    assert "svc-a (4)" in out and out.count("Full list") == 1, out


# ---------------------------------------------------------------------------- real model

@pytest.mark.real_model
@pytest.mark.slow
def test_real_model_answers_in_english_with_usd_and_no_labels(pristine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setenv("TRAMITA_MODELS_DIR", os.environ.get("TRAMITA_MODELS_DIR") or str(pristine / "models"))
    out = _run("Who spent the most?", "en", [SQL_TOTAL], backend="local")
    answer = out["answer"]
    assert out["turn"]["route"] == "answer", out
    assert not leaks(answer), answer
    assert fact_in("23183.12", answer) and "R$" not in answer, answer
    assert detect_language(answer, "en") == "en", answer


def test_a_copied_two_column_table_is_removed() -> None:
    block = render_contexts([DOC, SQL_TOTAL], "en", {"amount_usd": "USD"})
    cleaned = clean_answer("full_name | total\nCarolina Mendes | USD 23,183.12\nCarolina Mendes spent USD 23,183.12 [SQL].",
                           block)
    assert cleaned == "Carolina Mendes spent USD 23,183.12 [SQL]."


def test_an_answer_that_is_only_a_copied_table_becomes_a_plain_list() -> None:
    """Nothing else to keep: the rows stay, as a list without pipes or the header."""
    block = render_contexts([DOC, SQL_TOTAL], "en", {"amount_usd": "USD"})
    cleaned = clean_answer("(manager | role | distance)\nAna Lima | Engineering Manager | 1\nRui Sá | CTO | 2", block)
    assert cleaned == "- Ana Lima, Engineering Manager, 1\n- Rui Sá, CTO, 2"
    assert not leaks(cleaned)


def test_a_table_under_a_line_that_only_announces_it_is_the_answer() -> None:
    """"Here is the answer:" over a markdown table said nothing; dropping the table left only that
    line. The rows become the list, without the header or the rule under it."""
    block = render_contexts([SQL_TOTAL], "pt", {"amount_usd": "USD"})
    cleaned = clean_answer("Aqui está a resposta em português:\n\n| full_name | total |\n|---|---|\n"
                           "| Carolina Mendes | 23183.12 |", block)
    assert cleaned.endswith("- Carolina Mendes, 23183.12") and "---" not in cleaned and "full_name" not in cleaned
    # prose that says what the context holds is the answer, and the copied table still goes
    said = clean_answer("Carolina Mendes gastou mais.\n| full_name | total |\n| Carolina Mendes | 23183.12 |", block)
    assert said == "Carolina Mendes gastou mais."


def test_a_copied_line_on_what_the_rows_are_is_removed() -> None:
    """Written for this test: the model answered with the context's line on what the rows are, and
    nothing else; that line is a label. A sentence with a parenthesis of its own stays."""
    block = ("[graph] 2 results:\n(The on-call schedule of one employee)\nweek | role | service\n"
             "2026-W30 | primary | svc-a\n2026-W30 | primary | svc-b")
    assert clean_answer("(The on-call schedule of one employee)", block) == ""
    assert clean_answer("Ela está de plantão na 2026-W30 (primary).", block) == "Ela está de plantão na 2026-W30 (primary)."


def test_a_copied_api_label_line_is_removed() -> None:
    block = render_contexts([DOC, SQL_TOTAL], "en", {"amount_usd": "USD"})
    cleaned = clean_answer("Three services are degraded.\n[api:listServiceStatuses] data: service_id: api-gateway", block)
    assert cleaned == "Three services are degraded." and not leaks(cleaned)


def test_a_result_value_written_in_brackets_is_kept_as_text() -> None:
    """The 1.5B model sometimes writes a one-column list's values in brackets, like citation tags:
    dropping them as unknown tags left "são:,,,,". A value the results show keeps its text; a
    bracketed word the results do not show still goes."""
    block = "[graph] 3 results:\nservice\napi-gateway\nauth-service\nbilling-engine"
    cleaned = clean_answer("Os serviços são: [api-gateway], [auth-service], [billing-engine].", block)
    assert cleaned == "Os serviços são: api-gateway, auth-service, billing-engine."
    assert clean_answer("Os serviços são: [api-gate], [payments-api].", block) == "Os serviços são:,."


def test_a_restyled_record_id_is_written_as_stored() -> None:
    rows = [{"s.service_id": "billing-sync", "t.name": "Operações"}, {"s.service_id": "quote-store", "t.name": "Vendas"},
            {"k.ticket_id": "REQ-0042", "k.status": "waiting_customer"}]
    contexts = [{"backend": "sql", "rows": rows}]
    answer = "Billing Sync e Quote-Store são do time de Operações e Vendas; o req 0042 está waiting customer."
    fixed = stored_spelling(answer, contexts)
    assert fixed == "billing-sync e quote-store são do time de Operações e Vendas; o REQ-0042 está waiting customer."
    assert fact_in("billing-sync", fixed) and not fact_in("billing-sync", answer)
    # other words are not ids: a longer run, a part alone, a name cell and an enum code stay as written
    other = "billing-sync-v2, quote, Operações, waiting customer"
    assert stored_spelling(other, contexts) == other
    # an API's one record nests its list of records: their ids are stored values too
    nested = [{"backend": "api", "rows": [{"count": 2, "services": [{"service_id": "quote-store", "status": "degraded"},
                                                                     {"service_id": "billing-sync", "status": "down"}]}]}]
    assert stored_spelling("Quote Store e Billing Sync estão fora.", nested) == "quote-store e billing-sync estão fora."


def test_the_synthesis_node_writes_ids_as_stored(model: Any) -> None:
    rows = [{"service_id": "billing-sync", "tier": 3}]
    model(lambda _p: "Billing Sync é o único serviço tier 3.")
    out = _run("quais serviços são tier 3?", "pt", [{"backend": "sql", "error": None, "query": "SELECT 1", "rows": rows}])
    assert "billing-sync" in out["answer"] and "Billing Sync" not in out["answer"]


def test_a_restated_question_and_an_announcing_line_are_left_out() -> None:
    """Written for this test: the answer starts at the answer; a line that introduces a list, or
    that says something the results hold, stays."""
    block = "[SQL]\n| approver | count |\n| Helena Prado | 9 |"
    question = "Who approved the most claims in June? How many?"
    answer = "Here is the answer in English:\n\nWho approved the most claims in June? How many?\n\nHelena Prado, 9 [SQL]."
    assert without_preamble(answer, question, block) == "Helena Prado, 9 [SQL]."
    listed = "Here are the approvers:\n- Helena Prado\n- Ivo Lima"
    assert without_preamble(listed, question, block) == listed
    stated = "Helena Prado approved the most:\n9 claims in June [SQL]."
    assert without_preamble(stated, question, block) == stated
    assert without_preamble(question, question, block) == question  # nothing else: the text stays


def test_a_looping_answer_says_each_line_once_and_an_answer_that_only_announces_lists_the_rows() -> None:
    """Written for this test: the 1.5B model, over two rows, wrote its opening line twenty times and
    nothing else; the rows are the answer. A list item said twice is said once."""
    block = "[SQL]\n| full_name | hire_date |\n| Helena Prado | 2026-03-02 |\n| Ivo Lima | 2026-04-06 |"
    looped = "\n".join(["Aqui está a resposta em português:"] * 20)
    assert without_preamble(looped, "Quem entrou há pouco?", block) == ""
    twice = "- Helena Prado\n- Ivo Lima\n- Helena Prado"
    assert without_preamble(twice, "Quem entrou há pouco?", block) == "- Helena Prado\n- Ivo Lima"
    rows = [{"employees.full_name": "Helena Prado", "employees.hire_date": "2026-03-02"},
            {"employees.full_name": "Ivo Lima", "employees.hire_date": "2026-04-06"}]
    ctx = [{"backend": "sql", "error": None, "query": "SELECT full_name, hire_date FROM employees", "rows": rows}]
    out = complete_list(without_preamble(looped, "Quem entrou há pouco?", block), ctx, "pt", "Quem entrou há pouco?")
    assert "Helena Prado" in out and "Ivo Lima" in out and "Aqui está" not in out, out


CLAIM = {"backend": "sql", "rows": [{"expenses.expense_id": "EXP-0931", "employees.full_name": "Rita Sol",
                                     "expenses.amount_usd": 812.5}]}


def test_an_answer_about_records_it_does_not_name_gets_their_ids() -> None:
    """The largest claim answered by its person and amount: the id follows, in the answer's language."""
    out = name_records("A maior despesa foi de US$ 812,50, da Rita Sol.", [CLAIM], "pt", "Qual foi a maior despesa?")
    assert out.endswith("Registros: EXP-0931.")
    two = {"backend": "sql", "rows": [{"request_id": "BQ-0007", "delta": 5}, {"request_id": "BQ-0009", "delta": 7}]}
    assert name_records("Two requests, for 5 and 7.", [two], "en").endswith("Records: BQ-0007, BQ-0009.")


def test_the_one_record_every_row_shares_is_no_record_to_name() -> None:
    """The members of one project: each row carries the project's id, which the question named by
    its name; the rows are the members, so no "Records: PRJ-7" follows. One row still gets its id."""
    members = {"backend": "sql", "rows": [{"project_id": "PRJ-7", "full_name": n} for n in ("Ana Lima", "Rui Sol")]}
    answer = "Ana Lima and Rui Sol work on Atlas."
    assert name_records(answer, [members], "en", "Who works on Atlas?") == answer
    one = {"backend": "sql", "rows": [{"project_id": "PRJ-7", "full_name": "Ana Lima"}]}
    assert name_records("Ana Lima.", [one], "en", "Who leads Atlas?").endswith("Records: PRJ-7.")


def test_rows_named_by_another_column_are_read_and_a_cut_list_is_not() -> None:
    """The engineers of a project listed by name over rows whose first varying column is their id:
    the answer read every row, and no list of ids follows. Two of three names still get the list."""
    rows = [{"employee_id": e, "full_name": n} for e, n in (("E01", "Ana Lima"), ("E02", "Rui Sol"), ("E03", "Bia Luz"))]
    context = {"backend": "sql", "rows": rows}
    answer = "The engineers are Ana Lima, Rui Sol and Bia Luz."
    assert complete_list(answer, [context], "en", "Which members are engineers?") == answer
    cut = complete_list("The engineers are Ana Lima and Rui Sol.", [context], "en", "Which members are engineers?")
    assert cut != "The engineers are Ana Lima and Rui Sol." and "E03" in cut


@pytest.mark.parametrize(("answer", "question", "context"), [
    ("A despesa EXP-0931 foi da Rita Sol.", "De quem é a maior despesa?", CLAIM),  # named already
    ("Foi da Rita Sol.", "De quem é a EXP-0931?", CLAIM),  # the question names it
    ("Rita Sol.", "Quem?", {"backend": "sql", "rows": [{"employee_id": "E031", "name": "Rita Sol"}]}),  # no code
    ("Rita Sol.", "Quem?", {"backend": "sql", "rows": [{"owner": "EXP-0931"}]}),  # not an id column
    ("Many.", "?", {"backend": "sql", "rows": [{"ticket_id": f"TK-{i}"} for i in range(LIST_ROWS + 1)]}),  # too long
])
def test_records_named_or_not_records_are_left_alone(answer: str, question: str, context: dict[str, Any]) -> None:
    assert name_records(answer, [context], "pt", question) == answer


def test_a_breakdown_cut_short_gets_each_groups_figure() -> None:
    """Written for this test: a sum per team answered with one team's total. The full list gives
    every team with its own sum, in the answer's language and the column's unit; the labels alone
    (what the list gave before) miss the figures the question asked for."""
    query = "SELECT t.name, SUM(x.amount_usd) AS total FROM expenses x JOIN teams t ON 1 GROUP BY t.name"
    ctx = {"backend": "sql", "query": query,
           "rows": [{"name": "Segurança", "total": 1840.5}, {"name": "Produto", "total": 961.0},
                    {"name": "SRE", "total": 12034.25}]}
    units = {"amount_usd": "USD"}
    out = complete_list("O gasto da Segurança foi US$ 1.840,50.", [ctx], "pt", "Gasto por time em 2025", units)
    assert out.endswith("Lista completa: Segurança (US$ 1.840,50); Produto (US$ 961,00); SRE (US$ 12.034,25).")
    en = complete_list("Security spent USD 1,840.50.", [ctx], "en", "Spend per team in 2025", units)
    assert en == "Found: Segurança (USD 1,840.50); Produto (USD 961.00); SRE (USD 12,034.25)."
    # not a breakdown: an ungrouped result, two numeric columns, or a repeated label keep the labels
    plain = {**ctx, "query": "SELECT name, total FROM t"}
    assert complete_list("Segurança.", [plain], "pt", "Gasto por time", units).endswith(
        "Lista completa: Segurança, Produto, SRE.")
    two = {**ctx, "rows": [{**r, "n": 1} for r in ctx["rows"]]}
    assert complete_list("Segurança.", [two], "pt", "Gasto por time", units).endswith(
        "Lista completa: Segurança, Produto, SRE.")


def test_a_breakdown_whose_groups_are_named_without_their_figures_gets_each_groups_figure() -> None:
    """Written for this test: a count per service, answered with every service named and one figure
    for all of them ("each had 8"). The list gives each service its own count; an answer that
    writes every group's figure is left as it is."""
    query = "SELECT s.service_id, COUNT(*) AS n FROM incidents i JOIN services s ON 1 GROUP BY s.service_id"
    ctx = {"backend": "sql", "query": query,
           "rows": [{"service_id": "svc-a", "n": 8}, {"service_id": "svc-b", "n": 3}, {"service_id": "svc-c", "n": 0}]}
    wrong = complete_list("svc-a, svc-b e svc-c tiveram 8 incidentes cada.", [ctx], "pt",
                          "Quantos incidentes teve cada um desses serviços?")
    assert wrong.endswith("Lista completa: svc-a (8); svc-b (3); svc-c (0).")
    right = "svc-a teve 8 incidentes, svc-b teve 3 e svc-c teve 0."
    assert complete_list(right, [ctx], "pt", "Quantos incidentes teve cada um desses serviços?") == right


def test_a_list_of_rows_with_one_attribute_keeps_each_rows_attribute() -> None:
    """Written for this test: services and the team of each, answered for two of three rows. The
    full list gives each service with its team; the names alone lose the one left out."""
    ctx = {"backend": "sql", "query": "SELECT s.service_id, t.name FROM services s JOIN teams t ON 1",
           "rows": [{"service_id": "svc-a", "name": "Equipe Azul"}, {"service_id": "svc-b", "name": "Equipe Verde"},
                    {"service_id": "svc-c", "name": "Equipe Azul"}]}
    out = complete_list("svc-a é da Equipe Azul e svc-b da Equipe Verde.", [ctx], "pt", "De que time é cada serviço?")
    assert out.endswith("Lista completa: svc-a (Equipe Azul); svc-b (Equipe Verde); svc-c (Equipe Azul).")
    # every row named, but one team given for all of them: the rows' teams follow
    wrong = complete_list("svc-a, svc-b e svc-c são da Equipe Azul.", [ctx], "pt", "De que time é cada serviço?")
    assert wrong.endswith("Lista completa: svc-a (Equipe Azul); svc-b (Equipe Verde); svc-c (Equipe Azul).")
    right = "svc-a e svc-c são da Equipe Azul; svc-b, da Equipe Verde."
    assert complete_list(right, [ctx], "pt", "De que time é cada serviço?") == right
    # two other text columns, or a label repeated over rows, keep the labels alone
    wide = {**ctx, "rows": [{**r, "city": "Porto"} for r in ctx["rows"]]}
    assert complete_list("svc-a e svc-b.", [wide], "pt", "Quais serviços?").endswith("Lista completa: svc-a, svc-b, svc-c.")
    repeated = {**ctx, "rows": [*ctx["rows"], {"service_id": "svc-a", "name": "Equipe Verde"}]}
    assert complete_list("svc-a e svc-b.", [repeated], "pt", "Quais serviços?").endswith(
        "Lista completa: svc-a, svc-b, svc-c.")


def test_long_passages_never_push_a_result_table_out_of_the_block() -> None:
    """Passages share what the result tables leave: a long section planned first used to cut the
    database's rows off the block, and the model said that nothing matched."""
    long_doc = {"backend": "docs", "items": [{"source": "doc-pol-expense", "score": 0.9, "text": "Limites. " * 900}]}
    block = render_contexts([long_doc, SQL_TOTAL], "en", {"amount_usd": "USD"}, max_chars=1200)
    assert len(block) <= 1200 and "[SQL]" in block and "Carolina Mendes" in block
    assert "[doc-pol-expense]" in block  # the passage stays, cut to the room left
    short = render_contexts([DOC, SQL_TOTAL], "en", {"amount_usd": "USD"})
    assert "refeições até 80 USD por pedido" in short and "Carolina Mendes" in short


def test_a_passage_table_reaches_the_model_row_by_row() -> None:
    """Written for this test: a two-column-value table; each row comes out as one line with every
    cell behind its header, so no value can be read under the wrong column; prose is unchanged."""
    from tramita.base.text import tables_as_lines

    text = ("Prazos\n\n| Tipo | Primeira resposta | Solução |\n|---|:--:|---|\n| P1 | 20 min | 6 h |\n"
            "| P2 | 1 h | |\nDepois disso, escale.")
    out = tables_as_lines(text)
    assert "- Tipo: P1; Primeira resposta: 20 min; Solução: 6 h" in out
    assert "- Tipo: P2; Primeira resposta: 1 h" in out  # an empty cell is left out, not shown blank
    assert out.startswith("Prazos\n\n") and out.endswith("Depois disso, escale.")
    assert "|" not in out and "Solução: 20 min" not in out
    # a line with pipes but no rule under it is no table
    assert tables_as_lines("a | b | c\n| x | y |") == "a | b | c\n| x | y |"


def test_an_answer_that_reads_other_cells_of_the_rows_keeps_its_text() -> None:
    """Written for this test: "who approved the expenses of X?" answered with the approvers, not the
    expense ids the list is labelled by. The answer read the rows: the list follows it."""
    rows = [{"expenses.expense_id": f"EXP-09{i}", "approver.full_name": name}
            for i, name in ((1, "Lia Ramos"), (2, "Teo Brás"), (3, "Lia Ramos"))]
    answer = "Lia Ramos e Teo Brás aprovaram as despesas."
    out = complete_list(answer, [{"backend": "sql", "rows": rows}], "pt", "Quem aprovou as despesas do Zé?")
    assert out.startswith(answer) and "EXP-091" in out


def test_a_superlative_that_compares_with_a_number_asks_for_every_row() -> None:
    """Written for this test: "menos de 100 dias" bounds the rows, it asks for no single one, so an
    answer naming one of two rows gets the list; "quem tem menos tempo de casa?" asks for one."""
    rows = [{"employees.full_name": "Helena Prado", "employees.hire_date": "2026-03-02"},
            {"employees.full_name": "Ivo Lima", "employees.hire_date": "2026-04-06"}]
    ctx = [{"backend": "sql", "error": None, "query": "SELECT full_name, hire_date FROM employees", "rows": rows}]
    answer = "Helena Prado tem menos de 100 dias de casa."
    assert "Ivo Lima" in complete_list(answer, ctx, "pt", "Quem tem menos de 100 dias de casa?")
    assert complete_list(answer, ctx, "pt", "Quem tem menos tempo de casa?") == answer
