"""`tramita warm`: every static prompt prefix is evaluated once before the first question."""

from __future__ import annotations

import pytest

from tools.services import Services
from tramita.shell.warm import CONVERSATION_PROMPTS, warm_all


def test_a_model_without_a_local_cache_is_left_alone(novaops_services: Services) -> None:
    rows = warm_all(novaops_services, today="2026-05-15", profile="scripted")
    names = [r.name for r in rows]
    assert "sql: semantic_query" in names and "graph: text_to_cypher" in names
    assert {"synthesis (pt)", "synthesis (en)"} <= set(names)
    assert {"docs: translate_query (pt)", "docs: translate_query (en)"} <= set(names)  # the documents' languages
    assert len(names) == len(set(names)) == 6 + len(CONVERSATION_PROMPTS)
    assert {r.status for r in rows} == {"no local cache"}  # nothing fails, nothing is claimed warmed


def test_a_broken_prefix_is_reported_and_the_others_still_warm(novaops_services: Services,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import tools.semantic_layer as semantic

    def broken(*args: object, **kwargs: object) -> object:
        raise ValueError("semantic model unreadable")

    monkeypatch.setattr(semantic, "warm_semantic", broken)
    rows = {r.name: r for r in warm_all(novaops_services, today="2026-05-15", profile="scripted")}
    assert rows["sql"].status.startswith("failed: ValueError: semantic model unreadable")
    assert rows["graph: text_to_cypher"].status == "no local cache"


@pytest.mark.real_model
def test_warming_the_local_model_keeps_the_semantic_prefix(novaops_services: Services) -> None:
    rows = {r.name: r for r in warm_all(novaops_services, today="2026-05-15", profile="local")}
    semantic = rows["sql: semantic_query"]
    assert semantic.status in {"evaluated", "kept"} and semantic.tokens > 1000
    again = {r.name: r for r in warm_all(novaops_services, today="2026-05-15", profile="local")}
    assert {r.status for r in again.values()} == {"kept"}, "a second warm only restores"
