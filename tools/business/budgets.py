"""Budget tool: request_budget_change (tools.md 4). Files a pending request; budgets is not changed.

`check_request_change` (errors per parameter, read-only, partial arguments allowed),
`summary_request_change` (pt, en) and `request_change` (execute through `audit.run_write`).
"""

from __future__ import annotations

import calendar
from datetime import date
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, text

from tools.business.audit import next_id, run_write
from tools.business.base import ToolContext, ToolError, ToolResult
from tools.business.catalog import fmt_number, not_found, tool_error, validation_error
from tools.business.catalog import text as say
from tools.business.rows import employee, fetch_one, money
from tools.business.schema_check import check_args


def quarter_end(quarter: str) -> date:
    """Last day of '2026-Qn'."""
    year, q = int(quarter[:4]), int(quarter[-1])
    month = 3 * q
    return date(year, month, calendar.monthrange(year, month)[1])


def _budget(conn: Connection, team_id: Any, quarter: Any) -> dict[str, Any] | None:
    return fetch_one(conn, "SELECT budget_id, team_id, quarter, amount_usd FROM budgets "
                           "WHERE team_id = :team AND quarter = :quarter", team=team_id, quarter=quarter)


def _team_label(conn: Connection, team_id: Any) -> tuple[str, str]:
    row = fetch_one(conn, "SELECT team_id, name, name_en FROM teams WHERE team_id = :id", id=team_id)
    if row is None:
        return str(team_id), str(team_id)
    return f"{row['name']} ({row['team_id']})", f"{row['name_en']} ({row['team_id']})"


def _signed(value: Decimal) -> str:
    return ("+" if value > 0 else "") + fmt_number(value)


class BudgetTools:
    """Handler of request_budget_change (stateless)."""

    def _check(self, args: dict[str, Any], ctx: ToolContext, conn: Connection, complete: bool) -> dict[str, ToolError]:
        errors = check_args("request_budget_change", args, conn, complete=complete)
        team_id, quarter, delta = args.get("team_id"), args.get("quarter"), args.get("delta_usd")
        if team_id and "team_id" not in errors:
            user = employee(conn, ctx.user_id)
            if (user is None or user["team_id"] != team_id) and "finance_approvers" not in ctx.groups:
                errors["team_id"] = tool_error("TEAM_NOT_ALLOWED", "team_id", team_id=team_id,
                                               own_team=user["team_id"] if user else None)
        if quarter and "quarter" not in errors and quarter_end(str(quarter)) < ctx.today:
            errors["quarter"] = tool_error("QUARTER_CLOSED", "quarter", quarter=quarter)
        budget = None
        if team_id and quarter and not {"team_id", "quarter"} & errors.keys():
            budget = _budget(conn, team_id, quarter)
            pending = fetch_one(conn, "SELECT request_id FROM budget_requests WHERE team_id = :team AND "
                                      "quarter = :quarter AND status = 'pending' ORDER BY request_id",
                                team=team_id, quarter=quarter)
            if budget is None:
                errors["quarter"] = not_found("budgets", f"{team_id} {quarter}", "quarter")
            elif pending is not None:
                errors["quarter"] = tool_error("DUPLICATE_PENDING_REQUEST", "quarter", request_id=pending["request_id"],
                                               team_id=team_id, quarter=quarter)
        if delta is not None and "delta_usd" not in errors:
            change = money(delta)
            if change == 0:
                errors["delta_usd"] = validation_error("delta_usd", "delta_zero")
            elif budget is not None and money(budget["amount_usd"]) + change <= 0:
                errors["delta_usd"] = validation_error("delta_usd", "budget_not_positive",
                                                       current=money(budget["amount_usd"]), delta=change)
        return errors

    def check_request_change(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, ToolError]:
        """Errors per parameter: own team (or finance approver), open quarter, no pending request, budget stays positive."""
        with ctx.engine.connect() as conn:
            return self._check(args, ctx, conn, False)

    def summary_request_change(self, args: dict[str, Any], ctx: ToolContext) -> tuple[str, str]:
        """The confirmation summary (pt, en): current and requested amount; missing values show as '?'."""
        with ctx.engine.connect() as conn:
            team = _team_label(conn, args.get("team_id"))
            budget = _budget(conn, args.get("team_id"), args.get("quarter"))
        delta = money(args.get("delta_usd") or 0)
        current = money(budget["amount_usd"]) if budget else None
        return say("request_budget_change", "summary", team=team, quarter=args.get("quarter") or "?",
                   current=current if current is not None else "?",
                   requested=current + delta if current is not None else "?",
                   delta=_signed(delta), justification=args.get("justification") or "")

    def request_change(self, args: dict[str, Any], ctx: ToolContext, idempotency_key: str) -> ToolResult:
        """File the pending request, with its audit row, in one transaction; the budget itself is not changed."""
        def write(conn: Connection) -> ToolResult:
            budget = _budget(conn, args["team_id"], args["quarter"])
            assert budget is not None
            current = money(budget["amount_usd"])
            requested = current + money(args["delta_usd"])
            request_id = next_id(conn, "budget_requests", "request_id", "BR", 4)
            conn.execute(
                text("INSERT INTO budget_requests (request_id, team_id, quarter, current_amount_usd, "
                     "requested_amount_usd, justification, requested_by, status, reviewed_by, created_at) VALUES "
                     "(:id, :team, :quarter, :current, :requested, :justification, :user, 'pending', NULL, :today)"),
                {"id": request_id, "team": args["team_id"], "quarter": args["quarter"], "current": float(current),
                 "requested": float(requested), "justification": args["justification"], "user": ctx.user_id,
                 "today": ctx.today.isoformat()},
            )
            row = fetch_one(conn, "SELECT * FROM budget_requests WHERE request_id = :id", id=request_id)
            assert row is not None
            pt, en = say("request_budget_change", "result", request_id=request_id, team=_team_label(conn, args["team_id"]),
                         quarter=args["quarter"], current=current, requested=requested)
            return ToolResult(pt, en, row, "budget_requests", request_id)

        return run_write(ctx, "request_budget_change", args, idempotency_key,
                         lambda conn: self._check(args, ctx, conn, True), write)
