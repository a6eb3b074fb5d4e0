"""The nine business tools on real databases (a fresh NovaOps copy per test; SQLite and PostgreSQL).

Each write must change exactly the expected row plus one audit_log row and one tool_executions
row, replay on a reused idempotency key, and refuse with the contract's codes (tools.md 2 and 4).
The dev conversations' final_db checks are run against the written rows.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import Engine, text

from tools.business.audit import ensure_execution_table
from tools.business.base import ToolContext, ToolError, ToolResult
from tools.business.budgets import BudgetTools
from tools.business.catalog import BusinessRules, PolicyFileError, load_policy
from tools.business.expenses import ExpenseTools
from tools.business.incidents import IncidentTools
from tools.business.resolvers import coerce_value, resolve_reference
from tools.business.schema_check import prepare_value, tool_params, validate_param
from tools.business.tickets import TicketTools
from tools.database import writer_engine
from tools.references import ReferenceKind, load_references, reference_candidates
from tramita.base.paths import POLICIES_DIR, ROOT, SAMPLE_DIR
from tramita.base.policyfile import PolicyError
from tramita.core.extraction import gazetteer

TODAY = date(2026, 5, 15)
NOW = datetime(2026, 5, 15, 10, 30, 0)
TABLES = ["teams", "employees", "services", "service_dependencies", "projects", "project_members", "budgets",
          "budget_requests", "expenses", "incidents", "tickets", "policies", "document_references", "audit_log"]


# ------------------------------------------------------------------------------------ databases


def _load_sqlite(path: Path) -> None:
    """The sample's own loader (sample/novaops/load_sqlite.py), imported from the repo copy."""
    spec = importlib.util.spec_from_file_location("novaops_load_sqlite", SAMPLE_DIR / "load_sqlite.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.load(str(path)).close()


def _load_postgres(url: str) -> None:
    """schema.sql + every CSV through COPY (empty field = NULL, as load_postgres.sql does)."""
    import psycopg

    with psycopg.connect(url) as conn, conn.cursor() as cur:
        cur.execute((SAMPLE_DIR / "schema.sql").read_text(encoding="utf-8").encode())
        for table in TABLES:
            data = (SAMPLE_DIR / "data" / f"{table}.csv").read_text(encoding="utf-8")
            header = next(csv.reader([data.splitlines()[0]]))
            with cur.copy(f"COPY {table} ({', '.join(header)}) FROM STDIN WITH (FORMAT csv, HEADER true)") as copy:
                copy.write(data.encode("utf-8"))


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    path = tmp_path / "novaops.db"
    _load_sqlite(path)
    engine = writer_engine(f"sqlite:///{path}")
    yield engine
    engine.dispose()


@pytest.fixture
def pg_engine(pg_database: str) -> Iterator[Engine]:
    _load_postgres(pg_database)
    engine = writer_engine(pg_database)
    yield engine
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest) -> Engine:
    return request.getfixturevalue("sqlite_engine" if request.param == "sqlite" else "pg_engine")


def _groups_of(user_id: str) -> frozenset[str]:
    raw = yaml.safe_load((POLICIES_DIR / "groups.yaml").read_text(encoding="utf-8"))["groups"]
    return frozenset(name for name, spec in raw.items() if spec.get("all") or user_id in spec.get("members", []))


def ctx(engine: Engine, user_id: str, *, today: date = TODAY) -> ToolContext:
    return ToolContext(engine=engine, user_id=user_id, today=today, now=NOW, lang="pt", groups=_groups_of(user_id))


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def snapshot(engine: Engine) -> dict[str, set[tuple[Any, ...]]]:
    """Every row of every dataset table, as comparable tuples (same on SQLite and PostgreSQL)."""
    with engine.connect() as conn:
        return {t: {tuple(_plain(v) for v in row) for row in conn.execute(text(f"SELECT * FROM {t}"))} for t in TABLES}


def diff(before: dict[str, set[tuple[Any, ...]]], after: dict[str, set[tuple[Any, ...]]]) -> dict[str, tuple[set[Any], set[Any]]]:
    """Per changed table: (rows removed, rows added)."""
    return {t: (before[t] - after[t], after[t] - before[t]) for t in TABLES if before[t] != after[t]}


def rows(engine: Engine, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(_plain(v) for v in row) for row in conn.execute(text(sql), params)]


def executions(engine: Engine) -> list[tuple[Any, ...]]:
    ensure_execution_table(engine)
    return rows(engine, "SELECT idempotency_key, tool_name, target_table, target_id FROM tool_executions")


# --------------------------------------------------------------------------------- write cases

CONVERSATIONS = {json.loads(line)["id"]: json.loads(line)
                 for line in (SAMPLE_DIR / "conversations.dev.jsonl").read_text(encoding="utf-8").splitlines() if line}


@dataclass
class WriteCase:
    tool: str
    handler: Any
    method: str
    user: str
    args: dict[str, Any]
    table: str
    target_id: str
    changed: dict[str, Any]  # UPDATE: the columns that change; INSERT: the whole new row
    conversation: str
    insert: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


WRITE_CASES = [
    WriteCase("approve_expense", ExpenseTools, "approve", "E006", {"expense_id": "EXP-0264"}, "expenses", "EXP-0264",
              {"status": "approved", "approver_id": "E006", "decided_at": "2026-05-15", "comment": None}, "c-dev-001"),
    WriteCase("reject_expense", ExpenseTools, "reject", "E006",
              {"expense_id": "EXP-0297", "reason": "passou do limite de refeições da política, que é 80 dólares por pedido"},
              "expenses", "EXP-0297",
              {"status": "rejected", "approver_id": "E006", "decided_at": "2026-05-15",
               "comment": "passou do limite de refeições da política, que é 80 dólares por pedido"}, "c-dev-002"),
    WriteCase("create_ticket", TicketTools, "create", "E051",
              {"service_id": "expense-portal", "title": "Upload de recibo em PDF está falhando", "priority": "P3"},
              "tickets", "TCK-1151",
              {"ticket_id": "TCK-1151", "service_id": "expense-portal", "requester_id": "E051", "assignee_id": None,
               "priority": "P3", "status": "open", "title": "Upload de recibo em PDF está falhando", "description": None,
               "created_at": "2026-05-15 10:30:00", "updated_at": "2026-05-15 10:30:00"}, "c-dev-005", insert=True),
    WriteCase("escalate_incident", IncidentTools, "escalate", "E045",
              {"incident_id": "INC-2078", "new_severity": "SEV2",
               "reason": "a carga atrasou de novo e o fechamento do Financeiro depende desses relatórios"},
              "incidents", "INC-2078", {"severity": "SEV2"}, "c-dev-006"),
    WriteCase("reassign_ticket", TicketTools, "reassign", "E051", {"ticket_id": "TCK-1092", "assignee_id": "E047"},
              "tickets", "TCK-1092", {"assignee_id": "E047", "updated_at": "2026-05-15 10:30:00"}, "c-dev-008"),
    WriteCase("submit_expense", ExpenseTools, "submit", "E028",
              {"category": "transport", "amount_usd": 32.5, "expense_date": "2026-05-13",
               "description": "Uber do aeroporto para o escritório"}, "expenses", "EXP-0301",
              {"expense_id": "EXP-0301", "employee_id": "E028", "category": "transport", "amount_usd": 32.5,
               "expense_date": "2026-05-13", "description": "Uber do aeroporto para o escritório",
               "submitted_at": "2026-05-15", "status": "pending", "approver_id": None, "decided_at": None,
               "comment": None}, "c-dev-009", insert=True),
    WriteCase("request_budget_change", BudgetTools, "request_change", "E003",
              {"team_id": "T04", "quarter": "2026-Q4", "delta_usd": 20000,
               "justification": "licenças e infraestrutura para o Modelo Antifraude 3.0 (PRJ-106)"},
              "budget_requests", "BR-0005",
              {"request_id": "BR-0005", "team_id": "T04", "quarter": "2026-Q4", "current_amount_usd": 330000,
               "requested_amount_usd": 350000,
               "justification": "licenças e infraestrutura para o Modelo Antifraude 3.0 (PRJ-106)",
               "requested_by": "E003", "status": "pending", "reviewed_by": None, "created_at": "2026-05-15"},
              "c-dev-010", insert=True),
]


def _columns(engine: Engine, table: str) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(text(f"SELECT * FROM {table} WHERE 1 = 0")).keys())


@pytest.mark.parametrize("case", WRITE_CASES, ids=[c.tool for c in WRITE_CASES])
def test_write_changes_exactly_one_row_and_audits(engine: Engine, case: WriteCase) -> None:
    handler = case.handler()
    context = ctx(engine, case.user)
    assert getattr(handler, f"check_{case.method}")(case.args, context) == {}
    pristine = snapshot(engine)

    result: ToolResult = getattr(handler, case.method)(case.args, context, "key-1")
    assert (result.target_table, result.target_id, result.replayed) == (case.table, case.target_id, False)
    after = snapshot(engine)
    changes = diff(pristine, after)
    assert set(changes) == {case.table, "audit_log"}

    removed, added = changes[case.table]
    columns = _columns(engine, case.table)
    expected = {k: _plain(v) for k, v in case.changed.items()}
    if case.insert:
        assert removed == set()
        assert added == {tuple(expected[c] for c in columns)}
    else:
        (old,), (new,) = removed, added
        assert new == tuple(expected.get(c, v) for c, v in zip(columns, old, strict=True))

    audit_removed, audit_added = changes["audit_log"]
    assert audit_removed == set()
    assert audit_added == {(12.0, "2026-05-15 10:30:00", case.user, case.tool, case.table, case.target_id,
                            json.dumps(case.args, sort_keys=True, ensure_ascii=False), "success")}
    assert executions(engine) == [("key-1", case.tool, case.table, case.target_id)]

    for check in CONVERSATIONS[case.conversation]["final_db"]:
        assert rows(engine, check["sql"]) == [tuple(_plain(v) for v in r) for r in check["rows"]], check["sql"]

    replay: ToolResult = getattr(handler, case.method)(case.args, context, "key-1")
    assert replay.replayed and (replay.target_table, replay.target_id) == (case.table, case.target_id)
    assert replay.message_pt == result.message_pt
    assert snapshot(engine) == after
    assert len(executions(engine)) == 1


def test_audit_arguments_are_sorted_json(sqlite_engine: Engine) -> None:
    args = {"team_id": "T04", "quarter": "2026-Q4", "delta_usd": 20000.0,
            "justification": "licenças e infraestrutura para o Modelo Antifraude 3.0 (PRJ-106)"}
    BudgetTools().request_change(args, ctx(sqlite_engine, "E003"), "k")
    (stored,) = rows(sqlite_engine, "SELECT arguments_json FROM audit_log WHERE audit_id = 12")
    assert stored[0] == ('{"delta_usd": 20000, "justification": "licenças e infraestrutura para o Modelo Antifraude '
                         '3.0 (PRJ-106)", "quarter": "2026-Q4", "team_id": "T04"}')


def test_approve_with_comment_stores_it(sqlite_engine: Engine) -> None:
    args = {"expense_id": "EXP-0272", "comment": "ok conforme POL-001"}
    ExpenseTools().approve(args, ctx(sqlite_engine, "E006"), "k")
    assert rows(sqlite_engine, "SELECT status, approver_id, comment FROM expenses WHERE expense_id = 'EXP-0272'") == [
        ("approved", "E006", "ok conforme POL-001")]


# ----------------------------------------------------------------------------- preconditions


def _only(errors: dict[str, ToolError], param: str, code: str) -> ToolError:
    assert list(errors) == [param], errors
    error = errors[param]
    assert (error.code, error.param) == (code, param), error
    assert error.message_pt and error.message_en and error.message_pt != error.message_en
    return error


def test_approval_limit_names_amount_and_limit(sqlite_engine: Engine) -> None:
    error = _only(ExpenseTools().check_approve({"expense_id": "EXP-0260"}, ctx(sqlite_engine, "E006")),
                  "expense_id", "APPROVAL_LIMIT_EXCEEDED")
    assert error.message_pt == "O valor (5480 USD) excede o seu limite de aprovação (5000 USD)."
    assert "5480" in error.message_en and "5000" in error.message_en
    assert (error.facts["amount"], error.facts["limit"]) == (5480, 5000)
    # the CFO's limit (50000) covers it (c-dev-015)
    assert ExpenseTools().check_approve({"expense_id": "EXP-0260"}, ctx(sqlite_engine, "E003")) == {}
    # deciding includes rejecting: Sofia Marques (limit 1000) cannot reject it either
    _only(ExpenseTools().check_reject({"expense_id": "EXP-0260"}, ctx(sqlite_engine, "E009")),
          "expense_id", "APPROVAL_LIMIT_EXCEEDED")


@pytest.mark.parametrize("method", ["approve", "reject"])
def test_expense_decision_refusals(sqlite_engine: Engine, method: str) -> None:
    check = getattr(ExpenseTools(), f"check_{method}")
    e006 = ctx(sqlite_engine, "E006")
    error = _only(check({"expense_id": "EXP-0265"}, e006), "expense_id", "SELF_APPROVAL")
    assert error.message_pt == "Você não pode aprovar ou rejeitar a sua própria despesa."
    error = _only(check({"expense_id": "EXP-0001"}, e006), "expense_id", "EXPENSE_NOT_PENDING")
    assert error.message_pt == "A despesa EXP-0001 já está com status rejected e não pode ser decidida novamente."
    error = _only(check({"expense_id": "EXP-9999"}, e006), "expense_id", "NOT_FOUND")
    assert error.message_pt == "Não encontrei despesa com o id EXP-9999."
    error = _only(check({"expense_id": "EXP-12"}, e006), "expense_id", "VALIDATION_ERROR")
    assert "expense_id" in error.message_pt and "EXP-nnnn" in error.message_pt


def test_reject_needs_a_real_reason(sqlite_engine: Engine) -> None:
    tools, e006 = ExpenseTools(), ctx(sqlite_engine, "E006")
    error = _only(tools.check_reject({"expense_id": "EXP-0297", "reason": "caro"}, e006), "reason", "VALIDATION_ERROR")
    assert error.message_pt == "O valor informado para reason é inválido: deve ter pelo menos 10 caracteres."
    with pytest.raises(ToolError) as raised:
        tools.reject({"expense_id": "EXP-0297"}, e006, "k")
    assert (raised.value.code, raised.value.param, raised.value.facts["rule"]) == ("VALIDATION_ERROR", "reason", "required")


def test_ticket_refusals(sqlite_engine: Engine) -> None:
    tools, e051 = TicketTools(), ctx(sqlite_engine, "E051")
    _only(tools.check_create({"service_id": "nope-service"}, e051), "service_id", "NOT_FOUND")
    _only(tools.check_create({"service_id": "expense-portal", "title": "abc"}, e051), "title", "VALIDATION_ERROR")
    error = _only(tools.check_create({"priority": "P5"}, e051), "priority", "VALIDATION_ERROR")
    assert "P1, P2, P3, P4" in error.message_pt
    _only(tools.check_status({"ticket_id": "TCK-1"}, e051), "ticket_id", "VALIDATION_ERROR")
    _only(tools.check_status({"ticket_id": "TCK-9999"}, e051), "ticket_id", "NOT_FOUND")
    closed = rows(sqlite_engine, "SELECT ticket_id FROM tickets WHERE status = 'closed' ORDER BY ticket_id LIMIT 1")[0][0]
    error = _only(tools.check_reassign({"ticket_id": closed, "assignee_id": "E047"}, e051), "ticket_id", "TICKET_NOT_ACTIVE")
    assert error.message_pt == f"O ticket {closed} está closed e não pode ser reatribuído."
    error = _only(tools.check_reassign({"ticket_id": "TCK-1140", "assignee_id": "E020"}, e051), "assignee_id", "SAME_ASSIGNEE")
    assert error.message_pt == "Igor Batista (E020) já é o responsável pelo ticket TCK-1140."
    _only(tools.check_reassign({"ticket_id": "TCK-1140", "assignee_id": "E999"}, e051), "assignee_id", "NOT_FOUND")
    _only(tools.check_reassign({"ticket_id": "TCK-9999"}, e051), "ticket_id", "NOT_FOUND")


def test_incident_refusals(sqlite_engine: Engine) -> None:
    tools, e045 = IncidentTools(), ctx(sqlite_engine, "E045")
    error = _only(tools.check_escalate({"incident_id": "INC-2080", "new_severity": "SEV2"}, e045),
                  "new_severity", "SEVERITY_NOT_HIGHER")
    assert error.message_pt == "A nova severidade precisa ser maior que a atual (SEV2)."
    _only(tools.check_escalate({"incident_id": "INC-2078", "new_severity": "SEV3"}, e045), "new_severity", "SEVERITY_NOT_HIGHER")
    assert tools.check_escalate({"incident_id": "INC-2077", "new_severity": "SEV3"}, e045) == {}  # SEV4 -> SEV3
    error = _only(tools.check_escalate({"incident_id": "INC-2001", "new_severity": "SEV1"}, e045),
                  "incident_id", "INCIDENT_RESOLVED")
    assert error.message_pt.startswith("O incidente INC-2001 já foi resolvido")
    _only(tools.check_escalate({"incident_id": "INC-9999"}, e045), "incident_id", "NOT_FOUND")
    _only(tools.check_escalate({"new_severity": "SEV4"}, e045), "new_severity", "VALIDATION_ERROR")
    _only(tools.check_escalate({"reason": "urgente"}, e045), "reason", "VALIDATION_ERROR")


def test_budget_refusals(sqlite_engine: Engine) -> None:
    tools = BudgetTools()
    e003, e044 = ctx(sqlite_engine, "E003"), ctx(sqlite_engine, "E044")
    error = _only(tools.check_request_change({"team_id": "T04"}, e044), "team_id", "TEAM_NOT_ALLOWED")
    assert error.message_pt == "Você só pode pedir mudanças de orçamento para o seu time."
    assert tools.check_request_change({"team_id": "T06", "quarter": "2026-Q4"}, e044) == {}
    error = _only(tools.check_request_change({"team_id": "T04", "quarter": "2026-Q1"}, e003), "quarter", "QUARTER_CLOSED")
    assert error.message_pt == "O trimestre 2026-Q1 já foi encerrado e não pode ser alterado."
    assert tools.check_request_change({"quarter": "2026-Q2"}, e003) == {}  # ends 2026-06-30
    error = _only(tools.check_request_change({"team_id": "T03", "quarter": "2026-Q3"}, e003),
                  "quarter", "DUPLICATE_PENDING_REQUEST")
    assert error.message_pt == "Já existe um pedido pendente (BR-0003) para esse time e trimestre."
    _only(tools.check_request_change({"delta_usd": 0}, e003), "delta_usd", "VALIDATION_ERROR")
    error = _only(tools.check_request_change({"team_id": "T04", "quarter": "2026-Q4", "delta_usd": -330000}, e003),
                  "delta_usd", "VALIDATION_ERROR")
    assert "330000" in error.message_pt
    assert tools.check_request_change({"team_id": "T04", "quarter": "2026-Q4", "delta_usd": -329999}, e003) == {}
    _only(tools.check_request_change({"delta_usd": 2_000_000}, e003), "delta_usd", "VALIDATION_ERROR")
    _only(tools.check_request_change({"justification": "mais verba"}, e003), "justification", "VALIDATION_ERROR")
    _only(tools.check_request_change({"team_id": "T99"}, e003), "team_id", "NOT_FOUND")


def test_submit_expense_refusals(sqlite_engine: Engine) -> None:
    tools, e028 = ExpenseTools(), ctx(sqlite_engine, "E028")
    error = _only(tools.check_submit({"category": "meals", "amount_usd": 96.4}, e028), "amount_usd", "CATEGORY_LIMIT_EXCEEDED")
    assert error.message_pt == "O valor excede o limite da categoria meals (80 USD) da POL-001."
    assert tools.check_submit({"category": "meals", "amount_usd": 80}, e028) == {}
    error = _only(tools.check_submit({"expense_date": "2026-04-14"}, e028), "expense_date", "RECEIPT_DEADLINE_PASSED")
    assert error.message_pt == "O prazo de 30 dias para enviar o recibo já passou (POL-001)."
    assert tools.check_submit({"expense_date": "2026-04-15"}, e028) == {}  # exactly 30 days
    _only(tools.check_submit({"expense_date": "2026-05-16"}, e028), "expense_date", "VALIDATION_ERROR")
    _only(tools.check_submit({"expense_date": "2026-02-30"}, e028), "expense_date", "VALIDATION_ERROR")
    _only(tools.check_submit({"amount_usd": 10.123}, e028), "amount_usd", "VALIDATION_ERROR")
    _only(tools.check_submit({"amount_usd": 0}, e028), "amount_usd", "VALIDATION_ERROR")
    _only(tools.check_submit({"category": "food"}, e028), "category", "VALIDATION_ERROR")
    _only(tools.check_submit({"description": "Uber"}, e028), "description", "VALIDATION_ERROR")
    assert tools.check_submit({"amount_usd": 476.07}, e028) == {}  # 2 decimals, exact in decimal arithmetic


def test_read_only_tools(engine: Engine) -> None:
    before = snapshot(engine)
    ticket = TicketTools().status({"ticket_id": "TCK-1140"}, ctx(engine, "E028"), "")
    assert "open" in ticket.message_pt and "Igor Batista" in ticket.message_pt and "Igor Batista" in ticket.message_en
    assert (ticket.data["status"], ticket.data["assignee_id"], ticket.data["assignee_name"]) == ("open", "E020", "Igor Batista")
    unassigned = TicketTools().status({"ticket_id": "TCK-1092"}, ctx(engine, "E028"), "")
    assert unassigned.data["assignee_name"] == "unassigned" and "unassigned" in unassigned.message_en

    expenses = ExpenseTools()
    _only(expenses.check_status({"expense_id": "EXP-0264"}, ctx(engine, "E028")), "expense_id", "NOT_ALLOWED_TO_VIEW")
    with pytest.raises(ToolError) as raised:
        expenses.status({"expense_id": "EXP-0264"}, ctx(engine, "E028"), "")
    assert raised.value.message_pt == "Você só pode consultar as suas próprias despesas."
    own = expenses.status({"expense_id": "EXP-0082"}, ctx(engine, "E028"), "")
    assert own.data["status"] == "rejected" and "Patrícia Gomes" in own.message_pt and "300 USD" in own.message_pt
    assert expenses.status({"expense_id": "EXP-0264"}, ctx(engine, "E006"), "").data["owner_name"] == "Ana Paula Ferreira"
    assert snapshot(engine) == before


def test_summaries_show_what_will_be_written(sqlite_engine: Engine) -> None:
    pt, en = ExpenseTools().summary_approve({"expense_id": "EXP-0264"}, ctx(sqlite_engine, "E006"))
    assert all(s in pt for s in ("EXP-0264", "Ana Paula Ferreira", "software", "476.07"))
    assert en.startswith("Approve expense EXP-0264")
    pt, _ = ExpenseTools().summary_reject({"expense_id": "EXP-0297", "reason": "acima do limite de meals"},
                                          ctx(sqlite_engine, "E006"))
    assert "Bianca Torres" in pt and "96.40" in pt and "acima do limite de meals" in pt
    pt, _ = TicketTools().summary_reassign({"ticket_id": "TCK-1150", "assignee_id": "E047"}, ctx(sqlite_engine, "E051"))
    assert "Yasmin Correia (E037)" in pt and "Lucas Oliveira (E047)" in pt
    pt, _ = TicketTools().summary_create({"service_id": "expense-portal", "title": "Upload falhando", "priority": "P3"},
                                         ctx(sqlite_engine, "E051"))
    assert "Expense Portal" in pt and "P3" in pt and "Upload falhando" in pt
    pt, _ = IncidentTools().summary_escalate({"incident_id": "INC-2078", "new_severity": "SEV2", "reason": "x" * 12},
                                             ctx(sqlite_engine, "E045"))
    assert "de SEV3 para SEV2" in pt
    pt, en = BudgetTools().summary_request_change(
        {"team_id": "T04", "quarter": "2026-Q4", "delta_usd": 20000, "justification": "y" * 20}, ctx(sqlite_engine, "E003"))
    assert "Dados (T04)" in pt and "330000" in pt and "350000" in pt and "+20000" in pt and "Data & Analytics" in en
    pt, _ = ExpenseTools().summary_submit({"category": "transport", "amount_usd": 32.5, "expense_date": "2026-05-13",
                                           "description": "Uber do aeroporto"}, ctx(sqlite_engine, "E028"))
    assert "transport" in pt and "32.50 USD" in pt and "2026-05-13" in pt


# ------------------------------------------------------------------------ transactions/failures


def test_refused_execution_writes_nothing(engine: Engine) -> None:
    before = snapshot(engine)
    with pytest.raises(ToolError) as raised:
        ExpenseTools().approve({"expense_id": "EXP-0260"}, ctx(engine, "E006"), "k")
    assert raised.value.code == "APPROVAL_LIMIT_EXCEEDED"
    assert snapshot(engine) == before and executions(engine) == []


def test_precondition_broken_between_check_and_execute(engine: Engine) -> None:
    """The checks run again inside the transaction: a concurrent decision wins, nothing is written."""
    tools, e006 = ExpenseTools(), ctx(engine, "E006")
    assert tools.check_approve({"expense_id": "EXP-0264"}, e006) == {}
    with engine.begin() as conn:
        conn.execute(text("UPDATE expenses SET status = 'rejected', approver_id = 'E003', decided_at = '2026-05-15' "
                          "WHERE expense_id = 'EXP-0264'"))
    before = snapshot(engine)
    with pytest.raises(ToolError) as raised:
        tools.approve({"expense_id": "EXP-0264"}, e006, "k")
    assert raised.value.code == "EXPENSE_NOT_PENDING"
    assert snapshot(engine) == before and executions(engine) == []


_FAIL_AUDIT = {
    "sqlite": ["CREATE TRIGGER fail_audit BEFORE INSERT ON audit_log BEGIN SELECT RAISE(ABORT, 'audit refused'); END"],
    "postgresql": [
        "CREATE FUNCTION fail_audit() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'audit refused'; END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER fail_audit BEFORE INSERT ON audit_log FOR EACH ROW EXECUTE FUNCTION fail_audit()",
    ],
}


def test_failure_after_business_write_rolls_back(engine: Engine) -> None:
    """A database error on the audit insert (forced by a trigger) undoes the business write too."""
    with engine.begin() as conn:
        for ddl in _FAIL_AUDIT[engine.dialect.name]:
            conn.execute(text(ddl))
    before = snapshot(engine)
    with pytest.raises(Exception, match="audit refused"):
        ExpenseTools().submit({"category": "meals", "amount_usd": 20, "expense_date": "2026-05-14",
                               "description": "Almoço com o time"}, ctx(engine, "E028"), "k")
    assert snapshot(engine) == before and executions(engine) == []


def test_concurrent_writers_get_distinct_ids(engine: Engine) -> None:
    """Two confirmed submissions at once: serialised, EXP-0301/EXP-0302 and audit 12/13, no collision;
    a third thread replaying one key writes nothing more."""
    args = {"category": "transport", "amount_usd": 12, "expense_date": "2026-05-14", "description": "Táxi ao cliente"}
    results: list[ToolResult] = []
    failures: list[BaseException] = []

    def submit(user: str, key: str) -> None:
        try:
            results.append(ExpenseTools().submit(args, ctx(engine, user), key))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=submit, args=(user, key))
               for user, key in (("E028", "a"), ("E047", "b"), ("E028", "a"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert sorted(str(r.target_id) for r in results if not r.replayed) == ["EXP-0301", "EXP-0302"]
    assert [r.replayed for r in results].count(True) == 1
    assert rows(engine, "SELECT audit_id FROM audit_log WHERE audit_id > 11 ORDER BY audit_id") == [(12.0,), (13.0,)]
    assert rows(engine, "SELECT COUNT(*) FROM expenses") == [(302.0,)]


def test_crash_inside_transaction_leaves_nothing(tmp_path: Path) -> None:
    """SIGKILL at `after_business_write` (TRAMITA_CRASH_AT): the uncommitted write is gone on reopen."""
    path = tmp_path / "novaops.db"
    _load_sqlite(path)
    script = (
        "import datetime as d\n"
        "from tools.database import writer_engine\n"
        "from tools.business.base import ToolContext\n"
        "from tools.business.expenses import ExpenseTools\n"
        f"e = writer_engine('sqlite:///{path}')\n"
        "c = ToolContext(e, 'E006', d.date(2026, 5, 15), d.datetime(2026, 5, 15, 10, 30), 'pt', frozenset())\n"
        "ExpenseTools().approve({'expense_id': 'EXP-0264'}, c, 'k')\n"
        "print('not killed')\n"
    )
    env = {**os.environ, "TRAMITA_CRASH_AT": "after_business_write"}
    done = subprocess.run([sys.executable, "-c", script], check=False, cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    engine = writer_engine(f"sqlite:///{path}")
    try:
        assert rows(engine, "SELECT status FROM expenses WHERE expense_id = 'EXP-0264'") == [("pending",)]
        assert rows(engine, "SELECT COUNT(*) FROM audit_log") == [(11.0,)]
    finally:
        engine.dispose()


# ------------------------------------------------------------------------------ value handling


def _schema(tool: str, param: str) -> dict[str, Any]:
    return dict(tool_params(tool)["properties"][param])


@pytest.mark.parametrize(("tool", "param", "raw", "strict", "expected"), [
    ("submit_expense", "amount_usd", "32,50", False, 32.5),
    ("submit_expense", "amount_usd", "US$ 1.234,56", False, 1234.56),
    ("submit_expense", "amount_usd", "45 dólares", False, 45),
    ("request_budget_change", "delta_usd", "20 mil", False, 20000),
    ("request_budget_change", "delta_usd", "20k", False, 20000),
    ("request_budget_change", "delta_usd", "reduzir em 15.000", False, -15000),
    ("submit_expense", "expense_date", "13/05", False, "2026-05-13"),
    ("submit_expense", "expense_date", "12/05/2026", False, "2026-05-12"),
    ("submit_expense", "expense_date", "ontem", False, "2026-05-14"),
    ("submit_expense", "expense_date", "today", False, "2026-05-15"),
    ("submit_expense", "expense_date", "10 de maio", False, "2026-05-10"),
    ("approve_expense", "expense_id", "exp-0264", True, "EXP-0264"),
    ("reassign_ticket", "ticket_id", "tck 1092", True, "TCK-1092"),
    ("escalate_incident", "new_severity", "sev2", True, "SEV2"),
    ("create_ticket", "priority", "p3", False, "P3"),
    ("request_budget_change", "quarter", "Q4", False, "2026-Q4"),
    ("request_budget_change", "quarter", "4º trimestre", False, "2026-Q4"),
    ("request_budget_change", "quarter", "terceiro trimestre", False, "2026-Q3"),
    ("submit_expense", "category", "almoço", False, "meals"),
    ("submit_expense", "category", "Uber", False, "transport"),
    ("submit_expense", "category", "jantar com cliente", False, "client_entertainment"),
    ("submit_expense", "category", "Office Supplies", False, "office_supplies"),
    ("submit_expense", "category", "curso", True, "curso"),  # strict: synonyms are not applied
    ("submit_expense", "amount_usd", "32 ou 40", False, "32 ou 40"),  # unsure: left for validation
])
def test_coerce_value(sqlite_engine: Engine, tool: str, param: str, raw: str, strict: bool, expected: Any) -> None:
    value = coerce_value(param, _schema(tool, param), raw, ctx(sqlite_engine, "E028"), strict=strict)
    assert value == expected and type(value) is type(expected)


def test_resolve_reference(sqlite_engine: Engine) -> None:
    assert resolve_reference("employee", "Lucas Oliveira", sqlite_engine) == "E047"
    assert resolve_reference("employee", "thiago nascimento", sqlite_engine) == "E042"
    assert resolve_reference("employee", "Patricia Gomes", sqlite_engine) == "E008"  # accents ignored
    assert resolve_reference("employee", "E040", sqlite_engine) == "E040"
    assert resolve_reference("team", "Dados", sqlite_engine) == "T04"
    assert resolve_reference("team", "Data", sqlite_engine) == "T04"
    assert resolve_reference("team", "SRE", sqlite_engine) == "T06"
    assert resolve_reference("team", "Plataforma", sqlite_engine) == "T02"
    assert resolve_reference("team", "time de Segurança", sqlite_engine) == "T05"
    assert resolve_reference("service", "Expense Portal", sqlite_engine) == "expense-portal"
    assert resolve_reference("service", "redis-cache", sqlite_engine) == "redis-cache"
    ambiguous = resolve_reference("employee", "Sousa", sqlite_engine, param="assignee_id")
    assert isinstance(ambiguous, ToolError) and ambiguous.code == "VALIDATION_ERROR"
    assert "Marta Sousa (E043)" in ambiguous.message_pt and "João Pedro Sousa (E048)" in ambiguous.message_pt
    missing = resolve_reference("employee", "Fulano de Tal", sqlite_engine)
    assert isinstance(missing, ToolError) and missing.code == "NOT_FOUND"
    assert missing.message_pt == "Não encontrei colaborador com o id Fulano de Tal."


def test_reference_resolver_reads_its_kinds_from_the_policy_file(sqlite_engine: Engine) -> None:
    """One resolver, kinds from policies/references.yaml: a person's name and a team's English name."""
    kinds = load_references().kinds
    assert kinds["employee"].reference == "employees.employee_id" and kinds["team"].labels == ["name", "name_en"]
    assert resolve_reference("employee", "lucas oliveira", sqlite_engine) == "E047"
    assert resolve_reference("team", "Site Reliability Engineering", sqlite_engine) == "T06"
    assert resolve_reference("team", "Payments", sqlite_engine) == "T03"
    teams = {c.id: c for c in reference_candidates("team", sqlite_engine)}
    assert teams["T04"].label == "Dados" and {"T04", "Dados", "Data & Analytics"} <= set(teams["T04"].names)
    services = {c.id: c for c in reference_candidates("service", sqlite_engine)}
    assert "expense portal" in services["expense-portal"].names  # the id with - read as a space
    # the extraction gazetteer is built from the same lookups, for the same kinds
    gaz = gazetteer(sqlite_engine)
    assert set(gaz) == set(kinds)
    assert ("lucas oliveira", "E047") in gaz["employee"] and ("payments", "T03") in gaz["team"]
    with pytest.raises(PolicyError, match=r"references\.yaml: no reference kind 'person'; kinds: employee, service, team"):
        resolve_reference("person", "Lucas Oliveira", sqlite_engine)


def test_reference_queries_quote_validated_identifiers() -> None:
    from sqlalchemy.dialects import postgresql, sqlite

    kind = ReferenceKind(table="order", id="select", labels=["Label", "plain"])
    for dialect in (sqlite.dialect(), postgresql.dialect()):
        sql = str(kind.query().compile(dialect=dialect))
        assert '"order"' in sql and '"select"' in sql and '"Label"' in sql and ".plain" in sql
    for bad in ["employees; DROP TABLE x", "1st", "a.b", "nome com espaço", ""]:
        with pytest.raises(ValueError, match="not a plain SQL identifier"):
            ReferenceKind(table=bad, id="id", labels=["name"])


@pytest.mark.parametrize(("content", "expected"), [
    ("kinds:\n  employee: {table: employees, id: \"employee_id; DROP TABLE employees\", labels: [full_name]}\n",
     "field kinds.employee.id: Value error, 'employee_id; DROP TABLE employees' is not a plain SQL identifier"),
    ("kinds:\n  team: {table: teams, id: team_id, label: [name]}\n", "field kinds.team.label: Extra inputs"),
    ("kinds:\n  team: {table: teams, id: team_id, labels: []}\n", "field kinds.team.labels:"),
    ("kinds:\n  team: {table: teams, id: team_id, labels: [name, \"name en\"]}\n", "field kinds.team.labels"),
    ("kinds:\n  Team: {table: teams, id: team_id, labels: [name]}\n", "field kinds: Value error, kind names must be snake_case"),
    ("kinds: {team: {table: teams, id: team_id, labels: [name]}\n", "malformed YAML (line "),
])
def test_malformed_references_file_names_file_and_field(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "references.yaml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(PolicyError) as err:
        load_references(path)
    assert str(err.value).startswith(f"{path}: ") and expected in str(err.value), str(err.value)


def test_prepare_and_validate_param(sqlite_engine: Engine) -> None:
    c = ctx(sqlite_engine, "E051")
    assert prepare_value("assignee_id", _schema("reassign_ticket", "assignee_id"), "Lucas Oliveira", c, strict=True) == ("E047", None)
    assert prepare_value("team_id", _schema("request_budget_change", "team_id"), "Dados", c, strict=False) == ("T04", None)
    value, error = prepare_value("assignee_id", _schema("reassign_ticket", "assignee_id"), "E999", c, strict=True)
    assert value == "E999" and error is not None and error.code == "NOT_FOUND" and error.param == "assignee_id"
    error = validate_param("ticket_id", _schema("get_ticket_status", "ticket_id"), "TCK-12")
    assert error is not None and error.code == "VALIDATION_ERROR"
    assert error.message_pt == "O valor informado para ticket_id é inválido: deve seguir o formato TCK-nnnn (recebi TCK-12)."
    assert error.message_en.startswith("The value given for ticket_id is invalid: must follow the format TCK-nnnn")
    error = validate_param("title", _schema("create_ticket", "title"), "x" * 121)
    assert error is not None and "no máximo 120 caracteres" in error.message_pt
    assert validate_param("ticket_id", _schema("get_ticket_status", "ticket_id"), "TCK-9999") is None  # no DB given
    error = validate_param("ticket_id", _schema("get_ticket_status", "ticket_id"), "TCK-9999", engine=sqlite_engine)
    assert error is not None and error.message_pt == "Não encontrei ticket com o id TCK-9999."


def test_broken_policy_file_names_file_and_field(tmp_path: Path) -> None:
    broken = yaml.safe_load((POLICIES_DIR / "business_rules.yaml").read_text(encoding="utf-8"))
    broken["receipt_deadline_days"] = "trinta"
    path = tmp_path / "business_rules.yaml"
    path.write_text(yaml.safe_dump(broken, allow_unicode=True), encoding="utf-8")
    with pytest.raises(PolicyFileError, match=r"business_rules\.yaml: receipt_deadline_days"):
        load_policy(path, BusinessRules)
