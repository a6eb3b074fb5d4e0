"""The documents backend: what it retrieves (the trace and document recall see all of it) and
what synthesis reads (the passages close to their search's best), on the ingested store."""

from __future__ import annotations

from typing import Any

import pytest

from tools.backends import BACKENDS
from tools.backends.base import BackendCall
from tools.backends.docs import PASSAGE_GAP, search, search_ranked, shown_items
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
    assert all(it["gap"] == pytest.approx(best - it["score"], abs=1e-3) for it in items)
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
