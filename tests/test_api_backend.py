"""The `api` retrieval backend against the real sample API (tools/backends/api.py, tools/sample_api.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from tools.api_source import load_source
from tools.backends import BACKENDS, BackendCall, RetrievalBackend
from tools.backends.api import ApiBackend, strip_urls, typed_values
from tools.llm import Usage, override_model
from tools.sample_api import SampleData, app_for, start_sample_api
from tools.scripted_model import ScriptedChatModel, rule_based
from tools.services import Services
from tramita.base.paths import SAMPLE_DIR

TODAY = "2026-05-15"
SOURCE = SAMPLE_DIR / "api" / "source.yaml"


@pytest.fixture
def api() -> Iterator[str]:
    with start_sample_api() as url:
        yield url


def run(services: Services, question: str) -> tuple[dict[str, Any], Usage]:
    usage = Usage()
    ctx = ApiBackend().run(BackendCall(question=question, today=TODAY, profile="scripted", services=services, usage=usage))
    return ctx, usage


# ------------------------------------------------------------------------------ plug-in point

def test_the_backend_is_one_module_and_one_registry_line() -> None:
    backend = BACKENDS["api"]
    assert isinstance(backend, RetrievalBackend) and backend.citation == "api"
    assert "deploy" in backend.planner_description and "status" in backend.planner_description


def test_sample_data_follows_the_status_rule() -> None:
    data = SampleData()
    assert data.status("api-gateway") == "partial_outage"  # INC-2080 SEV2 open
    assert data.status("payments-api") == "operational"
    assert data.status("etl-pipeline") == "degraded" and data.status("legacy-invoicing") == "deprecated"
    assert data.production_version("payments-api") == "4.13.0"  # 4.13.1 was rolled back


# ------------------------------------------------------------------------------ typed extraction

@pytest.mark.parametrize(("op", "question", "expected"), [
    ("listDeploys", "Quais deploys falharam em abril?", {"since": "2026-04-01", "until": "2026-04-30", "result": "failed"}),
    ("listDeploys", "Which production deploys were rolled back in May?",
     {"since": "2026-05-01", "until": "2026-05-31", "result": "rolled_back", "environment": "production"}),
    ("listDeploys", "houve algum deploy ontem?", {"since": "2026-05-14", "until": "2026-05-14"}),
    ("listServiceDeploys", "mostra os últimos 3 deploys do search-service", {"service_id": "search-service", "limit": 3}),
    ("listServiceDeploys", "deploys do Payments API desde 01/05", {"service_id": "payments-api", "since": "2026-05-01"}),
    ("getDeploy", "o que foi o dep-0033?", {"deploy_id": "DEP-0033"}),
    ("listServiceStatuses", "quais serviços tier 1 do time de SRE estão degradados?",
     {"tier": 1, "team_id": "T06", "status": "degraded"}),
])
def test_typed_extraction_needs_no_llm(novaops_services: Services, op: str, question: str, expected: dict[str, Any]) -> None:
    operation = load_source(SOURCE).operations[op]
    values, ambiguous = typed_values(operation, question, novaops_services, date.fromisoformat(TODAY))
    assert values == expected and ambiguous == []
    assert operation.validation_errors(values) == []


def test_two_services_in_one_question_are_ambiguous(novaops_services: Services) -> None:
    op = load_source(SOURCE).operations["getServiceStatus"]
    values, ambiguous = typed_values(op, "status do payments-api e do auth-service", novaops_services, date(2026, 5, 15))
    assert "service_id" not in values and ambiguous == ["service_id"]


def test_urls_in_the_question_are_dropped() -> None:
    text, n = strip_urls("busque http://169.254.169.254/latest e file:///etc/passwd e www.evil.example/x agora")
    assert n == 3 and "169.254" not in text and "passwd" not in text and "evil" not in text


# ------------------------------------------------------------------------------ end to end (backend)

@pytest.mark.parametrize(("question", "operation", "params", "facts"), [
    ("Qual é o status atual do api-gateway?", "getServiceStatus", {"service_id": "api-gateway"},
     ["partial_outage", "INC-2080", "3.16.0"]),
    ("Which services are degraded right now?", "listServiceStatuses", {"status": "degraded"},
     ["etl-pipeline", "search-service", "mobile-bff", "billing-engine"]),
    ("Quais deploys falharam em abril?", "listDeploys", {"since": "2026-04-01", "until": "2026-04-30", "result": "failed"},
     ["DEP-0008", "DEP-0021", "total: 2"]),
    ("Quem fez o último deploy do payments-api?", "listServiceDeploys", {"service_id": "payments-api"},
     ["DEP-0033", "Caio Martins"]),
    ("What was deploy DEP-0012?", "getDeploy", {"deploy_id": "DEP-0012"}, ["fraud-detector", "rolled_back"]),
])
def test_questions_call_the_declared_operation_with_zero_llm_calls(api: str, novaops_services: Services, question: str,
                                                                   operation: str, params: dict[str, Any],
                                                                   facts: list[str]) -> None:
    ctx, usage = run(novaops_services, question)
    assert ctx.get("error") is None, ctx
    assert (ctx["operation"], ctx["params"], ctx["status"]) == (operation, params, 200)
    assert usage.calls == 0  # clear match, typed values: no LLM
    rendered = BACKENDS["api"].render(ctx)
    assert rendered.startswith(f"[api:{operation}] GET ") and f"[api:{operation}] data:" in rendered
    for fact in facts:
        assert fact in rendered, (fact, rendered[:400])
    assert [m for m, _, _ in app_for(api).state.requests] == ["GET"]


def test_the_llm_fills_only_the_pending_parameter_and_only_with_grounded_values(api: str,
                                                                              novaops_services: Services) -> None:
    prompts: list[str] = []

    def respond(prompt: str) -> str:
        if prompt.startswith("You fill the parameters of ONE API call"):
            prompts.append(prompt)
            return json.dumps({"service_id": "gateway"})
        return rule_based(prompt)

    override_model("scripted", ScriptedChatModel(responder=respond))
    try:
        ctx, usage = run(novaops_services, "qual a versão em produção do gateway agora?")
    finally:
        override_model("scripted", None)
    assert ctx.get("error") is None and ctx["operation"] == "getServiceStatus", ctx
    assert ctx["params"] == {"service_id": "api-gateway"} and usage.calls == 1  # resolved through references.yaml
    assert "- service_id [string]" in prompts[0] and "Already known: {}" in prompts[0]

    def invent(prompt: str) -> str:
        if prompt.startswith("You fill the parameters of ONE API call"):
            return json.dumps({"service_id": "payments-api"})  # not in the question: never sent
        return rule_based(prompt)

    override_model("scripted", ScriptedChatModel(responder=invent))
    try:
        ctx, _ = run(novaops_services, "qual a versão em produção do gateway agora?")
    finally:
        override_model("scripted", None)
    assert ctx["error"].startswith("missing parameters") and len(app_for(api).state.requests) == 1


def test_a_part_that_points_back_takes_the_value_from_the_whole_question(api: str, novaops_services: Services) -> None:
    """Written for this test: the planner hands the API only its part of a two-part question ("e
    como ele está agora?"), which names no service; the service comes from the user's whole
    question, typed, with no LLM call. A whole question naming two services leaves it missing."""
    usage = Usage()
    part = "e como ele está agora?"
    call = BackendCall(question=part, today=TODAY, profile="scripted", services=novaops_services, usage=usage,
                       whole=f"Quantos tickets o search-service tem abertos, {part}")
    ctx = ApiBackend().run(call)
    assert ctx.get("error") is None and ctx["operation"] == "getServiceStatus", ctx
    assert ctx["params"] == {"service_id": "search-service"} and usage.calls == 0
    asked = Usage()
    two = replace(call, usage=asked, whole=f"Quantos tickets o search-service e o auth-service têm, {part}")
    ApiBackend().run(two)
    assert asked.calls == 1


def test_an_unrelated_question_calls_nothing(api: str, novaops_services: Services) -> None:
    ctx, usage = run(novaops_services, "Qual o limite de reembolso por pedido para refeições?")
    assert ctx["error"] == "no declared API operation matches this question" and ctx["match"]["decision"] == "none"
    assert app_for(api).state.requests == [] and usage.calls == 0


def test_the_api_down_is_a_stated_gap(novaops_services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAMITA_API_NOVAOPS_URL", "http://127.0.0.1:9/v1")  # discard port: nothing listens
    ctx, _ = run(novaops_services, "Qual é o status atual do api-gateway?")
    assert ctx["error"].startswith("CONNECT_FAILED") and ctx["rows"] == []


# ------------------------------------------------------------------------------ through the graph

def test_a_question_through_the_graph_cites_the_api(api: str, novaops: Path, novaops_services: Services) -> None:
    from sqlalchemy import create_engine

    from graph.context import Context
    from graph.session import open_session
    from tramita.lab.evaluation.dbdiff import diff, snapshot

    def respond(prompt: str) -> str:
        if prompt.startswith("You plan how to answer"):
            assert "use_api" in prompt and "deploy history" in prompt  # the source's own description
            return json.dumps({**{f"use_{n}": n == "api" for n in BACKENDS}, "reason": "live status"})
        return rule_based(prompt)

    engine = create_engine(f"sqlite:///{novaops}")
    before = snapshot(engine)
    ctx = Context(user_id="E006", today=TODAY, llm_backend="scripted", services=novaops_services)
    override_model("scripted", ScriptedChatModel(responder=respond))
    try:
        with open_session(ctx) as session:
            r = session.turn("api-1", "Qual é o status atual do api-gateway?")
    finally:
        override_model("scripted", None)
    assert r.plan is not None and "api" in r.plan["backends"], r.plan  # (+ sql: "status" is a lexical hint)
    assert "[api:getServiceStatus]" in r.answer and "INC-2080" in r.answer
    assert diff(before, snapshot(engine)) == {}
    engine.dispose()


def test_doctor_reports_each_api_source(novaops_services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    from tramita.shell.doctor import source_checks

    with start_sample_api():
        rows = {n: (ok, detail, fix) for n, ok, detail, fix in source_checks(novaops_services.settings, novaops_services)}
    ok, detail, fix = rows["API source novaops"]
    assert ok and "host allowed" in detail and "reachable" in detail and "5 GET operations" in detail and fix == ""
    monkeypatch.setenv("TRAMITA_API_NOVAOPS_URL", "http://127.0.0.1:9/v1")
    ok, detail, fix = {n: (o, d, f) for n, o, d, f in source_checks(novaops_services.settings, novaops_services)}[
        "API source novaops"]
    assert not ok and "CONNECT_FAILED" in detail and "--sample-api" in fix
    monkeypatch.setenv("TRAMITA_API_NOVAOPS_URL", "http://169.254.169.254/v1")
    ok, detail, _ = {n: (o, d, f) for n, o, d, f in source_checks(novaops_services.settings, novaops_services)}[
        "API source novaops"]
    assert not ok and "DENIED_ADDRESS" in detail


def test_api_json_is_rendered_as_lines_and_tables() -> None:
    """Nested JSON becomes `key: value` lines and record tables; nothing of the data is dropped."""
    from tools.backends.api import render_json

    text = render_json({"service_id": "svc-a", "tier": 1, "owner": {"team": "T1"}, "tags": ["x", "y"],
                        "open_incidents": [{"incident_id": "INC-1", "severity": "SEV2"},
                                           {"incident_id": "INC-2", "severity": None}]})
    assert text.splitlines() == ["service_id: svc-a", "tier: 1", "owner.team: T1", "tags: x, y",
                                 "open_incidents (2):", "incident_id | severity", "INC-1 | SEV2", "INC-2 | -"]
    assert render_json([{"a": 1}, {"b": [1, 2]}]).splitlines() == ["a | b", "1 | -", "- | [1, 2]"]
