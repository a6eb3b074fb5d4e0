"""The planner routes by the backends' own vocabularies: clear matches cost no LLM call, close ones
take the best candidate (or, with the policy on, ask the LLM among the close candidates only), a failing LLM never widens the plan to every backend,
a policy/rule/deadline/process question reaches the documents, and the vectors are cached per data
revision.

A deterministic bag-of-words embedding stands in for e5, so these tests say what the rule does
with scores, not how good e5 is (benchmarks/planner_accuracy.py measures that on the own set).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.messages import HumanMessage

import tramita.core.planner_hints as ph
from tools.backends import BACKENDS

VOCAB = {
    "docs": ["Política de Reembolso de Despesas", "Política de Reembolso de Despesas — Limites por categoria",
             "Runbook: payments-api — Rollback", "Security Access Policy — Password rules"],
    "sql": ["expenses: despesa despesas reembolso expense", "tickets: chamado chamados ticket tickets",
            "how many tickets were opened per priority", "quantas despesas pendentes por categoria"],
    "graph": ["who is on call: plantão primário secundário on call primary secondary",
              "quem está de plantão na semana", "which services depend on a service directly or indirectly",
              "dependências diretas ou indiretas de um serviço"],
    "api": ["deploys: last deploys of a service, deploy status, rollback in production",
            "quais deploys falharam"],
}


class BagOfWords(Embeddings):
    """Hashed word counts: texts that share words are close; `documents` counts embedded texts."""

    model_name = "bag-of-words-test"

    def __init__(self) -> None:
        self.documents = 0

    def _vec(self, text: str) -> list[float]:
        v = [0.0] * 256
        for w in re.findall(r"\w+", text.lower()):
            v[int(hashlib.md5(w.encode()).hexdigest(), 16) % 256] += 1.0
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        return [0.3 + 0.7 * x / norm for x in v]  # an offset, so unrelated texts score like e5 (high, bunched)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents += len(texts)
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)


@pytest.fixture
def planner(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[BagOfWords]:
    """The planner on VOCAB with the bag-of-words model, a fresh vector cache in tmp_path, and a
    planner file whose margin suits that model."""
    emb = BagOfWords()
    monkeypatch.setenv("TRAMITA_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setattr(ph, "vocabularies", lambda _s: {k: [ph.description(k), *v] for k, v in VOCAB.items()})
    monkeypatch.setattr(ph, "_masker", lambda _s: ph.Masker({"service": [("payments-api", "payments-api")]}))
    monkeypatch.setattr(ph, "_default_embeddings", lambda: emb)
    f = ph._file().model_copy(update={"matching": ph.Matching(top_k=1, lexical_weight=0.02, margin=0.03, floor=0.0)})
    monkeypatch.setattr(ph, "_file", lambda: f)
    monkeypatch.setattr(ph, "_INDEXES", {})
    monkeypatch.setattr(ph, "_VECTORS", {})
    yield emb


def test_planner_yaml_has_no_hand_kept_hint_lists() -> None:
    text = (ph.POLICIES_DIR / "planner.yaml").read_text(encoding="utf-8")
    assert "\nhints:" not in text
    assert set(ph._file().model_fields_set) <= {"descriptions", "matching", "document_kinds", "stopwords", "chain",
                                                "rule_questions", "reason_words", "back_pronouns", "pointing_pronouns",
                                                "person_openers"}
    rules = ph._file().rule_questions
    assert rules is not None
    for prototype in (*rules.rule, *rules.records):  # shapes of questions, naming no record of any deployment
        assert not re.search(r"\d|[A-Z]{2,}-", prototype), prototype


def test_a_clear_match_is_one_backend(planner: BagOfWords) -> None:
    r = ph.route("quem está de plantão primário na semana?", SimpleNamespace())
    assert (r.decision, r.chosen) == ("clear", ["graph"]), r.trace()


def test_each_clear_part_adds_its_backend(planner: BagOfWords) -> None:
    r = ph.route("quem está de plantão primário na semana? E quantas despesas pendentes por categoria?",
                 SimpleNamespace())
    assert r.decision == "clear" and set(r.chosen) == {"graph", "sql"}, r.trace()


def test_a_rule_or_deadline_question_reaches_the_documents(planner: BagOfWords) -> None:
    r = ph.route("qual o prazo de reembolso?", SimpleNamespace())
    assert "docs" in r.candidates and ("docs" in r.chosen or r.decision == "close"), r.trace()
    r = ph.route("which rule applies to password rules?", SimpleNamespace())
    assert "docs" in r.chosen, r.trace()


def test_vectors_are_cached_per_revision(planner: BagOfWords, monkeypatch: pytest.MonkeyPatch) -> None:
    ph.route("quantas despesas pendentes?", SimpleNamespace())
    first = planner.documents
    assert first == sum(len(v) + 1 for v in VOCAB.values())
    ph.route("quem está de plantão?", SimpleNamespace())
    assert planner.documents == first  # same data: nothing re-embedded
    monkeypatch.setattr(ph, "_INDEXES", {})
    monkeypatch.setattr(ph, "_VECTORS", {})
    ph.route("quem está de plantão?", SimpleNamespace())
    assert planner.documents == first  # a new process: read from the cache file
    changed = {**VOCAB, "api": [*VOCAB["api"], "deploy frequency per month"]}
    monkeypatch.setattr(ph, "vocabularies", lambda _s: {k: [ph.description(k), *v] for k, v in changed.items()})
    ph.route("quem está de plantão?", SimpleNamespace())
    assert planner.documents == first + len(changed["api"]) + 1  # only the changed backend re-embeds


# ------------------------------------------------------------------------------- the node

def _plan(question: str, responder: Any, monkeypatch: pytest.MonkeyPatch, route: ph.Route, *,
          llm_when_close: bool = True) -> dict[str, Any]:
    from graph.context import Context
    from nodes import plan as plan_node
    from tools.llm import override_model
    from tools.scripted_model import ScriptedChatModel

    monkeypatch.setattr(plan_node, "route", lambda _q, _s: route)
    monkeypatch.setattr(plan_node, "llm_when_close", lambda: llm_when_close)
    override_model("scripted", ScriptedChatModel(responder=responder))
    try:
        state: Any = {"messages": [HumanMessage(question)]}
        return plan_node.plan(state, SimpleNamespace(context=Context(llm_backend="scripted")))  # type: ignore[arg-type]
    finally:
        override_model("scripted", None)


def test_a_clear_route_costs_no_llm_call(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(_p: str) -> str:
        raise AssertionError("the LLM planner was asked")

    out = _plan("q", never, monkeypatch, ph.Route("clear", ["graph"], ["graph"], [], "vocabulary match"))
    assert out["plan"]["backends"] == ["graph"] and out["turn"].get("llm_calls", 0) == 0


def test_a_close_route_asks_the_llm_among_the_candidates_only(monkeypatch: pytest.MonkeyPatch) -> None:
    prompts: list[str] = []

    def respond(prompt: str) -> str:
        prompts.append(prompt)
        return json.dumps({"use_sql": True, "use_docs": True, "reason": "both parts"})

    out = _plan("q", respond, monkeypatch, ph.Route("close", [], ["sql", "docs"], [], "close"))
    assert len(prompts) == 1 and "use_sql" in prompts[0] and "use_docs" in prompts[0]
    assert "use_graph" not in prompts[0] and "use_api" not in prompts[0]
    assert out["plan"]["backends"] == ["docs", "sql"]


def test_by_default_a_close_route_takes_its_best_candidate_without_a_call(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(_p: str) -> str:
        raise AssertionError("the LLM planner was asked")

    assert ph.llm_when_close() is False  # the shipped policy
    out = _plan("q", never, monkeypatch, ph.Route("close", [], ["graph", "sql"], [], "close"), llm_when_close=False)
    assert out["plan"]["backends"] == ["graph"] and not out["turn"].get("errors")
    out = _plan("q", never, monkeypatch, ph.Route("close", [], ["sql", "docs"], [], "close", ["docs"]),
                llm_when_close=False)
    assert out["plan"]["backends"] == ["docs", "sql"]  # a named kind of document still joins
    out = _plan("q", never, monkeypatch, ph.Route("none", [], ["api", "sql", "docs", "graph"], [], "none"),
                llm_when_close=False)
    assert out["plan"]["backends"] == ["api"]


def test_a_failing_llm_takes_the_best_candidate_not_every_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _plan("q", lambda _p: "not json", monkeypatch, ph.Route("close", [], ["sql", "graph"], [], "close"))
    assert out["plan"]["backends"] == ["sql"] and out["plan"]["backends"] != list(BACKENDS)
    assert out["turn"]["errors"]


def test_a_named_kind_of_document_stays_in_the_plan_whatever_the_llm_says(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _plan("q", lambda _p: json.dumps({"use_sql": True, "use_docs": False}), monkeypatch,
                ph.Route("close", [], ["sql", "docs"], [], "close", ["docs"]))
    assert out["plan"]["backends"] == ["docs", "sql"]


def test_without_the_llm_a_two_part_question_takes_each_parts_top_source(planner: BagOfWords) -> None:
    """Parts that are not clear still each bring their top source: one source would lose a part."""
    r = ph.route("deploys e plantão? E despesas pendentes por categoria e chamados?", SimpleNamespace())
    tops = {m.ranked[0][0] for m in r.matches[1:]}
    assert r.decision == "close" and len(tops) == 2, r.trace()
    assert set(r.best) == tops and r.best == [n for n in BACKENDS if n in tops]


def test_a_close_route_with_each_parts_best_plans_them_all_without_a_call(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(_p: str) -> str:
        raise AssertionError("the LLM planner was asked")

    route = ph.Route("close", [], ["sql", "graph", "docs"], [], "close", [], ["sql", "graph"])
    out = _plan("q", never, monkeypatch, route, llm_when_close=False)
    assert out["plan"]["backends"] == ["sql", "graph"] and not out["turn"].get("errors")


# ------------------------------------------------------------------------- content evidence

def _with_offset(monkeypatch: pytest.MonkeyPatch, offset: float | None) -> None:
    f = ph._file()
    m = f.matching.model_copy(update={"evidence_offset": offset})
    monkeypatch.setattr(ph, "_file", lambda: f.model_copy(update={"matching": m}))


def test_passage_evidence_above_the_other_vocabularies_takes_the_documents(
        planner: BagOfWords, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule stated in a passage, not in any heading: the vocabularies say sql, the passage wins."""
    question = "quantas despesas pendentes por categoria"
    assert ph.route(question, SimpleNamespace()).matches[0].ranked[0][0] == "sql"
    asked: list[str] = []

    def found(text: str, _s: Any) -> dict[str, float]:
        asked.append(text)
        return {"docs": 2.0}

    monkeypatch.setattr(ph, "evidence", found)
    _with_offset(monkeypatch, 0.01)
    r = ph.route(question, SimpleNamespace())
    assert r.matches[0].ranked[0] == ("docs", pytest.approx(1.99)) and "docs" in (r.chosen or r.best or r.candidates[:1])
    assert asked == [question]


def test_weak_passage_evidence_changes_nothing_and_no_offset_asks_for_none(
        planner: BagOfWords, monkeypatch: pytest.MonkeyPatch) -> None:
    question = "quantas despesas pendentes por categoria"
    before = ph.route(question, SimpleNamespace())
    monkeypatch.setattr(ph, "evidence", lambda _t, _s: {"docs": 0.0})
    _with_offset(monkeypatch, 0.01)
    assert ph.route(question, SimpleNamespace()).matches[0].ranked == before.matches[0].ranked

    def never(_t: str, _s: Any) -> dict[str, float]:
        raise AssertionError("evidence asked with the offset off")

    monkeypatch.setattr(ph, "evidence", never)
    _with_offset(monkeypatch, None)
    assert ph.route(question, SimpleNamespace()).matches[0].ranked == before.matches[0].ranked


def test_a_backend_whose_evidence_fails_gives_none() -> None:
    assert ph.evidence("qual o prazo?", SimpleNamespace()) == {}  # no doc store: no evidence, no error


def test_document_evidence_is_the_best_passage_of_the_real_store(novaops_services: Any) -> None:
    """The docs hook on the ingested store and e5: a question a passage answers scores above one
    about row counts, and the value is that passage's cosine."""
    docs = BACKENDS["docs"]
    question = "qual é o limite diário de refeição numa viagem nacional?"
    rule = docs.evidence(novaops_services, question)
    best = max(h.score for h in novaops_services.doc_store.search(question, 3))
    assert rule == pytest.approx(best) and rule <= 1.0
    for about_rows in ("sum of budget amounts per quarter", "list employee ids hired after a date"):
        assert 0.0 < docs.evidence(novaops_services, about_rows) < rule - 0.02


def test_a_failing_llm_on_a_two_part_question_takes_each_parts_top_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """The LLM's failure falls back exactly as the no-LLM path does (`Route.best`), not to one source."""
    route = ph.Route("close", [], ["sql", "graph", "docs"], [], "close", [], ["sql", "graph"])
    out = _plan("q", lambda _p: "not json", monkeypatch, route)
    assert out["plan"]["backends"] == ["sql", "graph"] and out["turn"]["errors"]


def test_a_backend_offset_moves_only_that_backends_score(planner: BagOfWords, monkeypatch: pytest.MonkeyPatch) -> None:
    """The calibration offset is added to one backend's score, after its evidence, and to no other."""
    question = "quantas despesas pendentes por categoria"
    f = ph._file()
    plain = f.matching.model_copy(update={"offsets": {}})
    monkeypatch.setattr(ph, "_file", lambda: f.model_copy(update={"matching": plain}))
    before = dict(ph.route(question, SimpleNamespace()).matches[0].ranked)
    top = max(before, key=before.__getitem__)
    shifted = f.matching.model_copy(update={"offsets": {top: -0.5}})
    monkeypatch.setattr(ph, "_file", lambda: f.model_copy(update={"matching": shifted}))
    after = ph.route(question, SimpleNamespace()).matches[0]
    assert dict(after.ranked)[top] == pytest.approx(before[top] - 0.5)
    assert all(dict(after.ranked)[n] == pytest.approx(s) for n, s in before.items() if n != top)
    assert after.ranked[0][0] != top


def test_the_planner_file_rejects_an_offset_that_is_not_a_number(tmp_path: Any) -> None:
    from tramita.base.policyfile import PolicyError, load_model

    bad = tmp_path / "planner.yaml"
    bad.write_text("descriptions: {}\nmatching: {offsets: {api: lots}}\n", encoding="utf-8")
    with pytest.raises(PolicyError, match=r"planner\.yaml: field matching\.offsets\.api"):
        load_model(bad, ph.PlannerFile)


# ------------------------------------------------------------------ relation, then aggregate

def test_a_source_that_answers_only_the_relation_is_followed_by_one_that_aggregates(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The graph matched best, but it only lists the people under X: the database sums their
    expenses after it. Without the hook's word, or with an aggregating source already planned,
    the plan is left as matched."""
    def never(_p: str) -> str:
        raise AssertionError("the LLM planner was asked")

    ranked = [("graph", 0.91), ("docs", 0.90), ("sql", 0.89), ("api", 0.80)]
    whole = ph.Match("q", ranked, "close", None, ["graph", "docs"])
    route = ph.Route("close", [], ["graph", "docs"], [whole], "close", hands_on=["graph"])
    out = _plan("q", never, monkeypatch, route, llm_when_close=False)
    assert out["plan"]["backends"] == ["sql", "graph"] and "aggregate" in out["plan"]["reason"]
    plain = ph.Route("close", [], ["graph", "docs"], [whole], "close")
    assert _plan("q", never, monkeypatch, plain, llm_when_close=False)["plan"]["backends"] == ["graph"]
    both = ph.Route("close", [], ["graph", "sql"], [whole], "close", [], ["graph", "sql"], ["graph"])
    assert _plan("q", never, monkeypatch, both, llm_when_close=False)["plan"]["backends"] == ["sql", "graph"]
    other = ph.Route("clear", ["docs"], ["docs"], [whole], "clear", hands_on=["graph"])
    assert _plan("q", never, monkeypatch, other)["plan"]["backends"] == ["docs"]  # the graph is not planned


def test_an_aggregate_over_a_relation_only_another_source_holds_plans_that_source_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The database matched best ("how many tickets"), but the set it counts over is the graph's
    (`hands_on`): the graph is planned with it. Without the hook's word, or when the chosen
    source does not aggregate, nothing is added."""
    def never(_p: str) -> str:
        raise AssertionError("the LLM planner was asked")

    ranked = [("sql", 0.91), ("graph", 0.90), ("docs", 0.85)]
    whole = ph.Match("q", ranked, "close", None, ["sql", "graph"])
    route = ph.Route("close", [], ["sql", "graph"], [whole], "close", hands_on=["graph"])
    out = _plan("q", never, monkeypatch, route, llm_when_close=False)
    assert out["plan"]["backends"] == ["sql", "graph"] and "relation" in out["plan"]["reason"]
    plain = ph.Route("close", [], ["sql", "graph"], [whole], "close")
    assert _plan("q", never, monkeypatch, plain, llm_when_close=False)["plan"]["backends"] == ["sql"]
    docs = ph.Route("clear", ["docs"], ["docs"], [whole], "clear", hands_on=["graph"])
    assert _plan("q", never, monkeypatch, docs)["plan"]["backends"] == ["docs"]


def test_a_required_backend_that_counts_the_answer_itself_is_planned_alone(monkeypatch: pytest.MonkeyPatch,
                                                                            novaops_services: Any) -> None:
    """A close route whose required backend answers a one-part question's count itself (`alone`)
    plans it alone; without it the best match stays beside the required one. The real hook reads
    the patterns: "how many people" under someone at any depth is the pattern's own count, a
    count of other things over them is not, and no aggregate is no count."""
    def never(_p: str) -> str:
        raise AssertionError("the LLM planner was asked")

    whole = ph.Match("q", [("sql", 0.91), ("graph", 0.89)], "close", None, ["sql", "graph"])
    alone = ph.Route("close", [], ["sql", "graph"], [whole], "close", ["graph"], alone=["graph"])
    assert _plan("q", never, monkeypatch, alone, llm_when_close=False)["plan"]["backends"] == ["graph"]
    beside = ph.Route("close", [], ["sql", "graph"], [whole], "close", ["graph"])
    assert _plan("q", never, monkeypatch, beside, llm_when_close=False)["plan"]["backends"] == ["sql", "graph"]
    graph = BACKENDS["graph"]
    assert graph.answers_count(novaops_services, "Quantas pessoas estão abaixo da Beatriz Nunes, em qualquer nível?")
    for other in ("Quantos chamados abertos têm as pessoas abaixo da Beatriz Nunes, em qualquer nível?",
                  "Quem está abaixo da Beatriz Nunes, em qualquer nível?"):
        assert not graph.answers_count(novaops_services, other), other


def test_the_graph_says_when_it_answers_the_relation_but_not_the_aggregate(novaops_services: Any) -> None:
    """The real hook: the patterns file, the gazetteer and e5 over the ingested stores."""
    graph = BACKENDS["graph"]
    assert graph.leaves_aggregate(novaops_services, "Qual o total de despesas aprovadas do pessoal que responde ao "
                                                    "Gonçalo Pereira, em qualquer nível?")
    # a count of other things than the matched pattern answers: another pattern counts incidents,
    # but the relation matched here answers services, so the count is another source's job
    assert graph.leaves_aggregate(novaops_services, "Quantos incidentes cada um dos serviços afetados pelo "
                                                    "INC-2063 já registrou como serviço principal?")
    for question in ("Quem está abaixo do Gonçalo Pereira no organograma, em qualquer nível?",  # no aggregate
                     "Quantas pessoas estão abaixo do Gonçalo Pereira, em qualquer nível?",  # a count of its answers
                     "What's the average approval limit across the company?"):  # no relation it can fill
        assert not graph.leaves_aggregate(novaops_services, question), question
    assert ph.hands_on("q", SimpleNamespace()) == []  # no stores: no hint, no error


def test_a_backend_the_question_names_nothing_of_is_no_candidate(planner: BagOfWords,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The vocabularies say sql; the database's hook says the question names nothing it holds, so
    the plan is another backend. When every backend is silent, the ranking stays as it was (a plan
    is never empty)."""
    assert ph.silent("q", SimpleNamespace()) == set()  # no stores: hooks fail, nobody is silent
    question = "quantas despesas pendentes por categoria"
    before = ph.route(question, SimpleNamespace())
    assert before.matches[0].ranked[0][0] == "sql"
    monkeypatch.setattr(ph, "silent", lambda _t, _s: {"sql"})
    after = ph.route(question, SimpleNamespace())
    assert "sql" not in [n for n, _ in after.matches[0].ranked] and "sql" not in (after.chosen or after.candidates)
    monkeypatch.setattr(ph, "silent", lambda _t, _s: set(BACKENDS))
    assert ph.route(question, SimpleNamespace()).matches[0].ranked == before.matches[0].ranked


def test_a_relation_of_any_depth_requires_the_graph(novaops_services: Any, planner: BagOfWords,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Written for this test. The real hook reads the patterns' own depth words: a word that takes a
    depth to its whole range names a path of any length, which a database join does not follow;
    "directly" (one hop) and a question with no depth word do not. The route then plans the graph
    beside what the scores chose."""
    graph = BACKENDS["graph"]
    for closure in ("Quantos chamados abertos têm os serviços que dependem do etl-pipeline, direta ou indiretamente?",
                    "What is the total spend of everyone under Gonçalo Pereira, at any depth?",
                    "Quantas pessoas estão abaixo da Beatriz Nunes, em qualquer nível?"):
        assert graph.required_by(novaops_services, closure), closure
    for plain in ("Quem se reporta diretamente à Beatriz Nunes?", "Quantas despesas pendentes há por categoria?"):
        assert not graph.required_by(novaops_services, plain), plain
    question = "quantas despesas pendentes por categoria"
    assert "graph" not in ph.route(question, SimpleNamespace()).chosen
    monkeypatch.setattr(ph, "required", lambda _q, _s: ["graph"])
    routed = ph.route(question, SimpleNamespace())
    assert "graph" in routed.required and ("graph" in routed.chosen or routed.decision != "clear")


def test_a_deferring_backend_gives_its_place_and_score_to_the_other_record_store() -> None:
    """Pure logic: the graph defers, so the database (the best-ranked other backend that writes its
    own queries) takes the graph's higher score and the graph leaves the ranking; the documents,
    which write no query over records, never inherit. With no such heir the ranking is kept."""
    ranked = [("graph", 0.89), ("docs", 0.88), ("sql", 0.85), ("api", 0.80)]
    assert ph._handed_over(ranked, {"graph"}) == [("sql", 0.89), ("docs", 0.88), ("api", 0.80)]
    assert ph._handed_over(ranked, set()) == ranked
    lone = [("graph", 0.89), ("docs", 0.88)]
    assert ph._handed_over(lone, {"graph"}) == lone
    # a heir already above keeps its own score
    assert ph._handed_over([("sql", 0.9), ("graph", 0.8)], {"graph"}) == [("sql", 0.9)]


def test_a_field_phrase_is_a_backends_own_only_when_no_other_vocabulary_uses_its_words() -> None:
    """Pure logic: "comandante" is in no other backend's texts, so it is the database's own; "tier"
    is in the graph's too, a phrase of function words alone names nothing, and "cidade" names a
    field the graph holds as well (`office_city`), whatever its vocabulary says."""
    vocab = {"sql": ["incidents: severity, commander"], "graph": ["services by tier", "chain of command"],
             "docs": ["Política de viagens"]}
    fields = {"sql": {"commander_id": ["comandante"], "tier": ["tier"], "x": ["de"],
                      "minutes_to_resolve": ["tempo de resolução"], "office_city": ["cidade"]},
              "graph": {"office_city": ["office city"], "tier": ["tier"]}}
    own = ph._own_fields(vocab, fields, frozenset({"de"}))
    assert own == {"comandante": "sql", "tempo de resolucao": "sql"}
    index = ph.VocabularyIndex("r", None, {}, frozenset(), ph.Masker({}), frozenset(), own_fields=own)  # type: ignore[arg-type]
    assert index.claim("Quem foi o comandante do INC-1?") == ("sql", {"coman"})
    assert index.claim("Qual o tier do serviço?") is None


def test_a_field_only_the_database_holds_takes_the_graphs_place(novaops_services: Any) -> None:
    """Written for this test, real e5 and the ingested stores. An incident's commander is a column of
    the database and nothing the graph holds; the incident id alone drew "quem foi o comandante"
    to the graph, whose query then answered with the incident's services. A question that also
    says a word of the graph's own (on call) keeps the graph."""
    for question in ("Quem foi o comandante do INC-2012?", "Who was the commander of INC-2040?"):
        routed = ph.route(question, novaops_services)
        assert "graph" not in [n for n, _ in routed.matches[0].ranked], (question, routed.trace())
        assert (routed.chosen or routed.best or routed.candidates[:1]) == ["sql"], (question, routed.trace())
    kept = ph.route("Quem está de plantão no payments-api na semana 2026-W20 e qual o cargo dele?", novaops_services)
    assert "graph" in [n for n, _ in kept.matches[0].ranked], kept.trace()


def test_a_part_that_counts_records_is_the_record_stores_when_the_documents_are_nearer(novaops_services: Any) -> None:
    """Written for this test, real e5 and the ingested stores. "… e quantas despesas essa gestora
    aprovou?" is nearest the expense policy by its words, and the documents were planned for it;
    the expenses it counts are the database's. A part that asks a rule keeps the documents."""
    routed = ph.route("Quem é a gestora da Bianca Torres e quantas despesas essa gestora aprovou?", novaops_services)
    assert routed.decision == "close" and routed.best == ["sql", "graph"], routed.trace()
    rule = ph.route("Quem é a gestora da Bianca Torres e qual o limite de refeições da política de despesas?",
                    novaops_services)
    assert "docs" in (rule.chosen or rule.best), rule.trace()


def test_a_one_join_relation_is_planned_for_the_database_and_a_deeper_one_for_the_graph(
        novaops_services: Any) -> None:
    """Written for this test, real e5, patterns and stores. A person's manager or direct reports,
    a team's services and a project's members are columns and link tables of the database too
    (`mirrored` patterns): the graph defers and the database is planned. A chain of managers, the
    people under someone at any depth and the on-call roster are the graph's own."""
    graph = BACKENDS["graph"]
    one_join = ("Quem é a chefia imediata do Samuel Dias?", "Who reports directly to Gonçalo Pereira?",
                "Which services does the Security team own?", "Quem participa do projeto Lakehouse Migration?")
    deeper = ("Who is Samuel Dias's boss's boss?", "Quantas pessoas estão abaixo da Beatriz Nunes, em qualquer nível?",
              "Quem está de plantão para o auth-service na semana 2026-W21?",
              "Which services depend on redis-cache, directly or indirectly?")
    for question in one_join:
        assert graph.defers(novaops_services, question), question
        routed = ph.route(question, novaops_services)
        assert "graph" not in [n for n, _ in routed.matches[0].ranked], (question, routed.trace())
        assert (routed.chosen or routed.best or routed.candidates[:1]) == ["sql"], (question, routed.trace())
    for question in deeper:
        assert not graph.defers(novaops_services, question), question
        routed = ph.route(question, novaops_services)
        planned = [*(routed.chosen or routed.best or routed.candidates[:1]), *routed.required]
        assert "graph" in planned, (question, routed.trace())


def test_the_database_and_the_graph_say_when_a_question_names_nothing_they_hold(novaops_services: Any) -> None:
    """The real hooks: the semantic model's words and the value index (sql); the gazetteer, ids,
    weeks and the patterns' floor with e5 (graph). A question about a rule names neither."""
    sql, graph = BACKENDS["sql"], BACKENDS["graph"]
    for rule in ("How many vacation days carry over into the next year?",
                 "How long may a bike courier invoice stay unpaid?"):
        assert sql.names_nothing(novaops_services, rule) and graph.names_nothing(novaops_services, rule), rule
    assert not sql.names_nothing(novaops_services, "Who was hired during 2024?")  # a declared word of a column
    assert not sql.names_nothing(novaops_services, "Quantos incidentes o auth-service teve?")  # a stored value
    for about_the_graph in ("Who is on call in 2026-W30?", "A quem o Gonçalo Pereira responde?",
                            "What does reporting-portal call, and what calls it?",
                            "Quem está de plantão nesta semana?"):  # a pattern that needs no name
        assert not graph.names_nothing(novaops_services, about_the_graph), about_the_graph
    # near the incidents of a service, but naming none: no pattern can be filled, the graph is silent
    for ranking in ("Qual serviço acumulou mais incidentes desde o ano passado?",
                    "Which service has the longest list of incidents?"):
        assert graph.names_nothing(novaops_services, ranking), ranking


def test_a_described_item_with_synonyms_is_matched_by_its_description_alone_too(tmp_path: Any) -> None:
    """A synonym list dilutes the description's text for e5: "production incidents — primary
    affected service: serviço principal, …" scored below the bare description for an English
    question about it. Both texts are in the vocabulary; an item with only one of them gives one."""
    from tools.backends.vocabulary import semantic_model_vocabulary
    from tramita.base.paths import SAMPLE_DIR

    texts = semantic_model_vocabulary(SAMPLE_DIR / "semantic_model.yaml")
    described = [t for t in texts if t.startswith("production incidents — primary affected service")]
    assert "production incidents — primary affected service" in described
    assert any(t.endswith("primary service, main service") for t in described), described
    assert len([t for t in texts if t.startswith("production incidents — SEV1 = worst")]) == 2
    assert len([t for t in texts if t.startswith("production incidents — incident commander")]) <= 1


def test_the_primary_service_of_incidents_is_a_database_question(novaops_services: Any) -> None:
    """Written for this test, real e5 and the ingested stores: the incidents' primary service is a
    column (the schema says so), not a document heading; before the semantic model declared its
    words, "principal" and "registrados" were words only the documents used, and the documents won
    the close match."""
    for question in ("Quais os 5 serviços que mais foram serviço principal de incidentes?",
                     "Quantos incidentes registrados tiveram o search-api como serviço principal?",
                     "How many incidents had search-api as their main service?"):
        routed = ph.route(question, novaops_services)
        assert (routed.chosen or routed.best or routed.candidates[:1]) == ["sql"], (question, routed.trace())


# ------------------------------------------------------------------ rule questions

def test_a_rule_question_in_the_records_words_goes_to_the_documents_alone(novaops_services: Any) -> None:
    """Written for this test, real e5 and the ingested stores: each asks what a rule sets with the
    words of a table (severity, acknowledged, receipt, ticket); the database's vocabulary matched
    them better and its query answered another question (an average, a count)."""
    for question in ("Em quantos minutos um SEV2 precisa ser reconhecido pelo plantão?",
                     "How long must the audit log be retained?",
                     "Em quantos dias tenho que enviar a nota fiscal de um reembolso?",
                     # who signs above a threshold (the records' "who approved it" matched it
                     # better before a prototype of that shape); a rate paid per period
                     "Who must approve a purchase above 50k?",
                     "How much does a weekend of standby pay in Portugal?"):
        routed = ph.route(question, novaops_services)
        assert routed.chosen == ["docs"] and any(m.rule for m in routed.matches), (question, routed.trace())


def test_a_target_or_sla_question_reaches_the_documents(novaops_services: Any) -> None:
    """Written for this test (none is a probe the prototypes were chosen on): a service level
    asked by its name. Before the prototypes of that shape each led by less than the near band
    and went to the database alone, which answered how long such incidents took."""
    for question in ("What is the SLA for acknowledging a SEV3 page?",
                     "Qual o SLA de resolução de um incidente SEV4?"):
        routed = ph.route(question, novaops_services)
        assert "docs" in routed.chosen, (question, routed.trace())


def test_a_part_that_points_back_asks_another_source_than_the_part_it_points_at(novaops_services: Any) -> None:
    """Written for this test, real e5: the second part counts records over the first part's figure
    ("desse valor"); it is close between the documents, which the first part won, and the
    database. Planned without the LLM, each part has its source."""
    routed = ph.route("Pela política de despesas, qual o limite por refeição, e quantas despesas de refeição "
                      "passaram desse valor em 2026?", novaops_services)
    assert routed.decision == "close" and routed.best == ["docs", "sql"], routed.trace()


def test_a_part_keeps_a_candidate_the_whole_question_ranked_out(novaops_services: Any) -> None:
    """Written for this test, real e5: the graph is left out of the whole question's ranking (the
    project lead is the database's), and is the second part's best match (who is on call)."""
    routed = ph.route("Quem lidera o projeto Lakehouse Migration, e essa pessoa está de plantão em algum "
                      "momento em maio?", novaops_services)
    assert "graph" in routed.candidates and routed.best == ["sql", "graph"], routed.trace()


def test_the_records_shape_of_the_same_words_stays_with_the_database(novaops_services: Any) -> None:
    """The same nouns asked as records (how long it took, how many, who) are no rule question."""
    for question in ("Quanto tempo, em média, levou o reconhecimento dos incidentes SEV2?",
                     "How many expense claims were rejected in March 2026?",
                     "Quem aprovou mais despesas em 2026?"):
        routed = ph.route(question, novaops_services)
        assert not any(m.rule for m in routed.matches), (question, routed.trace())
        assert "sql" in (routed.chosen or routed.best or routed.candidates[:1]), (question, routed.trace())


def test_a_question_about_links_between_records_is_no_rule_question(novaops_services: Any) -> None:
    """Impact, dependencies and on-call are records too: with prototypes of those shapes, a graph
    question stays clear of the margin (it led by 0.002 before them, close to a rule question)."""
    routed = ph.route("Which services feel an outage of the auth service, counting indirect dependencies?",
                      novaops_services)
    assert [m.rule for m in routed.matches] == [False], routed.trace()
    assert routed.matches[0].rule_lead is not None and routed.matches[0].rule_lead < 0.0, routed.trace()


def test_a_rule_part_goes_to_the_documents_and_the_other_part_keeps_its_source(novaops_services: Any) -> None:
    routed = ph.route("Quantos incidentes SEV1 tivemos em 2026? E em quanto tempo um SEV1 tem que ser resolvido?",
                      novaops_services)
    assert set(routed.chosen) == {"sql", "docs"}, routed.trace()
    # the rule part is a rule question, or near one (the documents join its own source)
    assert [m.rule or m.near_rule for m in routed.matches[1:]] == [False, True], routed.trace()


def test_a_text_naming_a_person_or_a_record_is_never_a_rule_question() -> None:
    """`not_naming`: such a text asks about that one record, whatever its shape."""
    assert ph._may_be_rule("em quanto tempo um incidente sev1 tem que ser reconhecido")
    assert not ph._may_be_rule("quando o employee tem que estar de plantao")
    assert not ph._may_be_rule("quem tem que aprovar a despesa id")


def test_a_rule_lead_above_the_margin_decides_and_one_below_it_does_not() -> None:
    ranked = [("sql", 0.93), ("docs", 0.87), ("api", 0.83)]
    m = ph._file().matching
    margin = ph._file().rule_questions.margin  # type: ignore[union-attr]
    above = ph._rule_or_decide("t", ranked, m, margin + 0.001)
    assert (above.decision, above.best, above.rule) == ("clear", "docs", True)
    below = ph._rule_or_decide("t", ranked, m, margin - 0.001)
    assert (below.decision, below.best, below.rule) == ("clear", "sql", False)
    unranked = ph._rule_or_decide("t", [("sql", 0.93), ("api", 0.83)], m, 0.5)  # the documents silent
    assert unranked.best == "sql" and not unranked.rule


def test_a_lead_in_the_near_band_adds_the_documents_and_keeps_the_records_source() -> None:
    """Between `near` and `margin` the classes overlap (records and rule probes both land there):
    the text keeps its own winner and the documents join it; below `near`, nothing is added."""
    ranked = [("sql", 0.93), ("docs", 0.87), ("api", 0.83)]
    m = ph._file().matching
    rules = ph._file().rule_questions
    assert rules is not None and rules.near is not None
    band = ph._rule_or_decide("t", ranked, m, (rules.near + rules.margin) / 2)
    assert (band.decision, band.best, band.rule, band.near_rule) == ("clear", "sql", False, True)
    assert band.trace()["near_rule"] is True
    under = ph._rule_or_decide("t", ranked, m, rules.near - 0.001)
    assert not under.near_rule and "near_rule" not in under.trace()
    assert not ph._rule_or_decide("t", ranked, m, rules.margin + 0.001).near_rule  # decided as a rule


def test_a_rule_part_in_the_near_band_routes_to_both(novaops_services: Any) -> None:
    """Real e5, written for this test: a rule question the classifier is unsure of reaches the
    documents beside the database; a plain records question gets no documents."""
    rules = ph._file().rule_questions
    assert rules is not None and rules.near is not None
    routed = ph.route("Quanto tempo um SEV3 pode ficar sem resolução?", novaops_services)
    lead = routed.matches[0].rule_lead
    assert lead is not None and rules.near <= lead < rules.margin, routed.trace()
    assert "docs" in routed.required and "docs" in (routed.chosen or routed.best or routed.candidates), routed.trace()
    plain = ph.route("Quantos chamados cada time abriu em abril?", novaops_services)
    assert not any(x.near_rule for x in plain.matches) and "docs" not in plain.required, plain.trace()


def test_the_planner_file_rejects_a_prototype_in_both_classes_and_an_unknown_backend(tmp_path: Any) -> None:
    from tramita.base.policyfile import PolicyError, load_model

    bad = tmp_path / "planner.yaml"
    bad.write_text("matching: {}\nrule_questions: {backend: docs, margin: 0.02, rule: [Who must sign?], "
                   "records: ['who must sign?']}\n", encoding="utf-8")
    with pytest.raises(PolicyError, match=r"planner\.yaml: field rule_questions.*both rule and records"):
        load_model(bad, ph.PlannerFile)
    bad.write_text("matching: {}\nrule_questions: {backend: docs, margin: lots, rule: [a], records: [b]}\n",
                   encoding="utf-8")
    with pytest.raises(PolicyError, match=r"planner\.yaml: field rule_questions\.margin"):
        load_model(bad, ph.PlannerFile)
    bad.write_text("matching: {}\nrule_questions: {backend: docs, margin: 0.02, near: 0.03, rule: [a], records: [b]}\n",
                   encoding="utf-8")
    with pytest.raises(PolicyError, match=r"planner\.yaml: field rule_questions.*near \(0\.03\) must be below margin"):
        load_model(bad, ph.PlannerFile)


def test_a_question_that_ranks_records_reaches_the_database(novaops_services: Any) -> None:
    """Written for this test, real e5: the postmortems' words (commander, incident, how long)
    bring the documents level with the database; which incident was the longest is the rows'
    answer, so the database is in the plan whatever the scores say. A rule question with a
    superlative that names a limit stays without it."""
    from nodes.plan import decide

    routed = ph.route("Quem comandou o incidente mais longo de 2026?", novaops_services)
    assert "sql" in routed.required, routed.trace()
    assert "sql" in decide(routed, None)[0]
    bound = ph.route("Qual é o valor máximo por refeição numa viagem?", novaops_services)
    assert "sql" not in bound.required, bound.trace()


def test_a_part_that_counts_records_reaches_the_database(novaops_services: Any) -> None:
    """Written for this test, real e5: both parts are closer to the expense policy's words, and
    the second counts expenses; the database is in the plan. A count the graph answers itself
    (people under someone at any level) does not add it."""
    from nodes.plan import decide

    routed = ph.route("Qual o limite por pedido para hardware, e quantas despesas de hardware passaram dele "
                      "em 2026?", novaops_services)
    assert "sql" in routed.required and decide(routed, None)[0] == ["docs", "sql"], routed.trace()
    graph = ph.route("Quantas pessoas estão abaixo da CFO, em qualquer nível?", novaops_services)
    assert "sql" not in graph.required and decide(graph, None)[0] == ["graph"], graph.trace()


def test_a_part_that_points_back_takes_the_one_thing_named_before() -> None:
    """Written for this test: "it" in the second part stands for the incident the first part names;
    "ele" after a part that asks for a person may be that person, so it stays; a part that names its
    own thing, or follows a part naming two, is left as it is."""
    masker = ph.Masker({"service": [("svc-norte", "svc-norte"), ("svc-sul", "svc-sul")]})
    assert ph.resolved(["Who commanded INC-77 in 2026-W19", "which services did it hit"], masker) == \
        ["Who commanded INC-77 in 2026-W19", "which services did INC-77 hit"]
    assert ph.resolved(["Qual o tier do svc-norte", "quem é o dono dele"], masker)[1] == "quem é o dono svc-norte"
    kept = [["Quem comandou o INC-77", "de que time ele é"], ["What calls svc-norte", "does svc-sul use it"],
            ["Which services do svc-norte and svc-sul call", "how many tickets does it have"]]
    for pieces in kept:
        assert ph.resolved(pieces, masker) == pieces, pieces
