"""The documents backend: what it retrieves (the trace and document recall see all of it) and
what synthesis reads (the passages close to their search's best), on the ingested store."""

from __future__ import annotations

from typing import Any

import pytest

from tools.backends import BACKENDS
from tools.backends.base import BackendCall
from tools.backends.docs import (
    PASSAGE_GAP,
    _best_of,
    _other_record,
    named_document,
    search,
    search_ranked,
    shown_items,
    with_asked_section,
)
from tools.llm import Usage


def test_shown_items_keep_the_passages_near_their_searchs_best() -> None:
    items = [{"source": "doc-a", "text": "best", "gap": 0.0}, {"source": "doc-b", "text": "near", "gap": PASSAGE_GAP},
             {"source": "doc-c", "text": "far", "gap": PASSAGE_GAP + 0.001}, {"source": "doc-d", "text": "old"}]
    assert [it["text"] for it in shown_items(items)] == ["best", "near", "old"]  # an item without a gap is shown
    rendered = BACKENDS["docs"].render({"backend": "docs", "items": items})
    assert "[doc-a] best" in rendered and "[doc-b] near" in rendered and "far" not in rendered


def test_the_backend_retrieves_all_and_synthesis_reads_the_close_ones(novaops_services: Any) -> None:
    question = "qual é o limite diário de refeição numa viagem nacional?"
    call = BackendCall(question=question, today="2026-05-15", profile="scripted", services=novaops_services,
                       usage=Usage(), top_k=5)
    out = BACKENDS["docs"].run(call)
    items = out["items"]
    assert [(it["source"], it["text"]) for it in items] == [(d, p) for d, p, _ in search(
        novaops_services.doc_store, question, 5)]
    best = max(it["score"] for it in items)
    # each passage's gap is its distance below the best, except the one section read because its
    # heading is what the question asks about (`with_asked_section`: gap 0, one at most)
    off = [it for it in items if it["gap"] != pytest.approx(best - it["score"], abs=1e-3)]
    assert len(off) <= 1 and all(it["gap"] == 0.0 for it in off), off
    shown = shown_items(items)
    assert 1 <= len(shown) < len(items), [(it["source"], it["gap"]) for it in items]
    rendered = BACKENDS["docs"].render(out)
    assert all(it["text"] in rendered for it in shown)
    assert not any(it["text"] in rendered for it in items if it not in shown)


def test_each_part_of_a_two_part_question_keeps_its_own_best_passage(novaops_services: Any) -> None:
    store = novaops_services.doc_store
    first, second = "qual o limite diário de refeição numa viagem?", "quantos dias de home office por semana?"
    hits = search_ranked(store, f"{first} E {second}", 5)
    for part in (first, second):
        top = store.retrieve_docs(part, 5, passages=3)[0]
        assert any(p == top[1] and g == 0.0 for _, p, _, g in hits), part


def test_a_record_code_names_one_document_only_by_its_title() -> None:
    titles = {"doc-a": "Postmortem ABC-101: queue backlog", "doc-b": "Postmortem ABC-102: disk full",
              "doc-c": "Runbook: queue (see ABC-101)", "doc-d": "Travel policy (POL-009)"}
    assert named_document(titles, "what caused ABC-102?") == "doc-b"
    assert named_document(titles, "o que diz a pol-009 sobre hotel?") == "doc-d"  # case does not matter
    assert named_document(titles, "what caused ABC-101?") is None  # two titles carry it: no single subject
    assert named_document(titles, "what caused ABC-1021?") is None  # a longer code is another record
    assert named_document(titles, "what caused the disk to fill up?") is None


def test_a_document_the_question_names_by_code_comes_first_with_the_section_asked(novaops_services: Any) -> None:
    store = novaops_services.doc_store
    question = "Quais foram os fatores contribuintes do INC-2063?"
    # the words alone rank the Portuguese postmortems above the English one the code names
    assert store.retrieve_docs(question, 5)[0][0] != "doc-pm-inc-2063"
    hits = search_ranked(store, question, 5)
    assert hits[0][0] == "doc-pm-inc-2063"
    shown = [p for d, p, _, g in hits if d == "doc-pm-inc-2063" and g <= PASSAGE_GAP]
    assert any("Contributing factors" in p for p in shown), shown
    # the other postmortems stay ranked (trace, recall) but none of their passages is read
    others = [(d, g) for d, _, _, g in hits if d.startswith("doc-pm-") and d != "doc-pm-inc-2063"]
    assert others and all(g > PASSAGE_GAP for _, g in others), others
    assert len({d for d, *_ in hits}) <= 5


def test_only_records_of_the_named_kind_are_set_aside() -> None:
    titles = {"pm-1": "Postmortem ABC-101: queue backlog", "pm-2": "Postmortem ABC-102: disk full",
              "pol": "Change policy (POL-004)", "plain": "Onboarding handbook", "both": "Review of ABC-101 and ABC-102"}
    assert _other_record(titles, "pm-1", "pm-2")
    assert not _other_record(titles, "pm-1", "pol")  # another kind of record: may hold the rule asked about
    assert not _other_record(titles, "pm-1", "plain")
    assert not _other_record(titles, "pm-1", "both")  # it is about the named record too


def test_the_section_a_question_asks_for_is_read_beside_the_best_passage(novaops_services: Any) -> None:
    store = novaops_services.doc_store
    question = "Por que apareceram valores nulos nas partições do data-warehouse?"
    ranked = store.retrieve_docs(question, 5, passages=3)
    best = ranked[0][1]
    assert "— Causa raiz" not in best  # the words match the summary best; the cause is a heading away
    hits = search_ranked(store, question, 5)
    assert hits[0][1] == best
    cause = [(p, g) for d, p, _, g in hits if d == "doc-pm-inc-2071" and "— Causa raiz" in p]
    assert len(cause) == 1 and cause[0][1] == 0.0, [(d, p[:60], g) for d, p, _, g in hits]
    # a question in two parts that names no code has no single subject: its ranking is kept as found
    found = [(d, p, s, 0.05) for d, p, s in ranked]
    assert with_asked_section(store, "what went wrong with the pool?", found, 5, whole=False) == found
    assert with_asked_section(store, "what went wrong with the pool?", found, 5, whole=True) != found


def test_several_searches_of_one_question_count_each_passage_at_its_best() -> None:
    pt = [("doc-a", "a1", 0.84), ("doc-b", "b1", 0.83), ("doc-a", "a2", 0.82)]
    en = [("doc-c", "c1", 0.90), ("doc-a", "a1", 0.86), ("doc-c", "c2", 0.85)]
    merged = _best_of(2, 1, pt, en)
    assert merged == [("doc-c", "c1", 0.90), ("doc-a", "a1", 0.86), ("doc-c", "c2", 0.85)]  # two documents, one more
    assert _best_of(3, 0, pt, en) == [("doc-c", "c1", 0.90), ("doc-a", "a1", 0.86), ("doc-b", "b1", 0.83)]


@pytest.mark.real_model
@pytest.mark.parametrize(("question", "doc"), [
    ("What is the deadline for sending the receipt of a reimbursement?", "doc-pol-expense"),  # English, Portuguese policy
    ("Quantos caracteres no mínimo uma senha precisa ter?", "doc-pol-access"),  # Portuguese, English policy
])
def test_a_question_is_also_searched_in_the_other_language_of_the_documents(question: str, doc: str,
                                                                            novaops_services: Any) -> None:
    """Written for this test, the real local model and store: e5-small ranks a passage in the
    question's own language above the one in the other language that answers it; the question
    translated by the model finds it first."""
    alone = search_ranked(novaops_services.doc_store, question, 5)
    assert not (alone[0][0] == doc and alone[0][3] == 0.0), alone[:2]
    call = BackendCall(question=question, today="2026-05-15", profile="local", services=novaops_services,
                       usage=Usage(), top_k=5)
    out = BACKENDS["docs"].run(call)
    assert len(out["translations"]) == 1 and call.usage.calls == 1, out.get("translation_errors")
    assert out["items"][0]["source"] == doc and out["items"][0]["gap"] == 0.0, out["items"][:2]


def test_a_translation_that_changes_nothing_leaves_the_search_on_the_question(novaops_services: Any) -> None:
    """The scripted model answers the translation prompt with the question itself: no second search,
    and what the backend returns is the plain search's."""
    question = "Quantos caracteres no mínimo uma senha precisa ter?"
    call = BackendCall(question=question, today="2026-05-15", profile="scripted", services=novaops_services,
                       usage=Usage(), top_k=5)
    out = BACKENDS["docs"].run(call)
    assert "translations" not in out
    assert [(it["source"], it["text"]) for it in out["items"]] == \
        [(d, p) for d, p, _, _ in search_ranked(novaops_services.doc_store, question, 5)]
