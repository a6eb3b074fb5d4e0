"""Expense tools: approve_expense, reject_expense, submit_expense, get_expense_status (tools.md 4).

Each tool `m` has `check_m` (errors per parameter, read-only, partial arguments allowed),
`summary_m` (pt, en) and `m` (execute; writes go through `audit.run_write`).
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any, Literal

from sqlalchemy import Connection, text

from tools.business.audit import next_id, run_write
from tools.business.base import ToolContext, ToolError, ToolResult
from tools.business.catalog import (
    NO_PART,
    not_found,
    part,
    rules,
    tool_error,
    validation_error,
)
from tools.business.catalog import text as say
from tools.business.rows import employee, fetch_one, money, person
from tools.business.schema_check import check_args

Decision = Literal["approved", "rejected"]
_DECISION_TOOL: dict[Decision, str] = {"approved": "approve_expense", "rejected": "reject_expense"}
_EXPENSE_SQL = ("SELECT expense_id, employee_id, category, amount_usd, expense_date, description, submitted_at, "
                "status, approver_id, decided_at, comment FROM expenses WHERE expense_id = :id")


def _expense(conn: Connection, expense_id: Any) -> dict[str, Any] | None:
    return fetch_one(conn, _EXPENSE_SQL, id=expense_id) if expense_id else None


def _expense_facts(conn: Connection, row: dict[str, Any]) -> dict[str, Any]:
    return {"expense_id": row["expense_id"], "owner": person(conn, row["employee_id"]), "category": row["category"],
            "amount": money(row["amount_usd"]), "expense_date": row["expense_date"], "description": row["description"],
            "status": row["status"]}


class ExpenseTools:
    """Handlers of the four expense tools (stateless)."""

    # ------------------------------------------------------------------ approve / reject (shared)

    def _check_decision(self, tool: str, args: dict[str, Any], ctx: ToolContext, conn: Connection,
                        complete: bool) -> dict[str, ToolError]:
        errors = check_args(tool, args, conn, complete=complete)
        expense_id = args.get("expense_id")
        if not expense_id or "expense_id" in errors:
            return errors
        row = _expense(conn, expense_id)
        if row is None:  # vanished between checks
            errors["expense_id"] = not_found("expenses", expense_id, "expense_id")
        elif row["status"] != "pending":
            errors["expense_id"] = tool_error("EXPENSE_NOT_PENDING", "expense_id", expense_id=expense_id,
                                              status=row["status"])
        elif row["employee_id"] == ctx.user_id:
            errors["expense_id"] = tool_error("SELF_APPROVAL", "expense_id", expense_id=expense_id)
        else:
            approver = employee(conn, ctx.user_id)
            limit = money(approver["approval_limit_usd"]) if approver else Decimal(0)
            amount = money(row["amount_usd"])
            if amount > limit:
                errors["expense_id"] = tool_error("APPROVAL_LIMIT_EXCEEDED", "expense_id", expense_id=expense_id,
                                                  amount=amount, limit=limit)
        return errors

    def _summary_decision(self, decision: Decision, args: dict[str, Any], ctx: ToolContext) -> tuple[str, str]:
        tool = _DECISION_TOOL[decision]
        with ctx.engine.connect() as conn:
            row = _expense(conn, args.get("expense_id"))
            facts: dict[str, Any] = (_expense_facts(conn, row) if row else
                                     {"expense_id": args.get("expense_id"), "owner": part("unknown"),
                                      "category": "?", "amount": "?", "expense_date": "?", "description": "?"})
        comment = args.get("comment")
        facts["comment_part"] = part("comment", comment=comment) if comment else NO_PART
        facts["reason"] = args.get("reason") or ""
        return say(tool, "summary", **facts)

    def _decide(self, decision: Decision, args: dict[str, Any], ctx: ToolContext, key: str) -> ToolResult:
        tool = _DECISION_TOOL[decision]
        comment = args.get("comment") if decision == "approved" else args.get("reason")

        def write(conn: Connection) -> ToolResult:
            conn.execute(
                text("UPDATE expenses SET status = :status, approver_id = :user, decided_at = :today, "
                     "comment = :comment WHERE expense_id = :id AND status = 'pending'"),
                {"status": decision, "user": ctx.user_id, "today": ctx.today.isoformat(), "comment": comment or None,
                 "id": args["expense_id"]},
            )
            row = _expense(conn, args["expense_id"])
            assert row is not None
            pt, en = say(tool, "result", **_expense_facts(conn, row))
            return ToolResult(pt, en, row, "expenses", row["expense_id"])

        return run_write(ctx, tool, args, key,
                         lambda conn: self._check_decision(tool, args, ctx, conn, True), write)

    # -------------------------------------------------------------------------------- approve

    def check_approve(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, ToolError]:
        """Errors per parameter: the expense must be pending, someone else's and within the approver's limit."""
        with ctx.engine.connect() as conn:
            return self._check_decision("approve_expense", args, ctx, conn, False)

    def summary_approve(self, args: dict[str, Any], ctx: ToolContext) -> tuple[str, str]:
        """The confirmation summary (pt, en): the expense as stored, plus the comment if any."""
        return self._summary_decision("approved", args, ctx)

    def approve(self, args: dict[str, Any], ctx: ToolContext, idempotency_key: str) -> ToolResult:
        """Approve the pending expense in one audited transaction; the checks run again inside it."""
        return self._decide("approved", args, ctx, idempotency_key)

    # --------------------------------------------------------------------------------- reject

    def check_reject(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, ToolError]:
        """Errors per parameter: the same preconditions as approving (pending, not one's own, within the limit)."""
        with ctx.engine.connect() as conn:
            return self._check_decision("reject_expense", args, ctx, conn, False)

    def summary_reject(self, args: dict[str, Any], ctx: ToolContext) -> tuple[str, str]:
        """The confirmation summary (pt, en): the expense as stored, plus the reason."""
        return self._summary_decision("rejected", args, ctx)

    def reject(self, args: dict[str, Any], ctx: ToolContext, idempotency_key: str) -> ToolResult:
        """Reject the pending expense in one audited transaction; the reason is stored as its comment."""
        return self._decide("rejected", args, ctx, idempotency_key)

    # --------------------------------------------------------------------------------- submit

    def _check_submit(self, args: dict[str, Any], ctx: ToolContext, conn: Connection,
                      complete: bool) -> dict[str, ToolError]:
        errors = check_args("submit_expense", args, conn, complete=complete)
        policy = rules()
        category, amount = args.get("category"), args.get("amount_usd")
        if category and amount is not None and not {"category", "amount_usd"} & errors.keys():
            limit = policy.category_limits_usd.get(str(category))
            if limit is not None and money(amount) > limit:
                errors["amount_usd"] = tool_error("CATEGORY_LIMIT_EXCEEDED", "amount_usd", category=category,
                                                  limit=limit, amount=money(amount))
        when = args.get("expense_date")
        if when and "expense_date" not in errors:
            spent = date.fromisoformat(str(when))
            if spent > ctx.today:
                errors["expense_date"] = validation_error("expense_date", "future_date", value=when,
                                                          today=ctx.today.isoformat())
            elif (ctx.today - spent).days > policy.receipt_deadline_days:
                errors["expense_date"] = tool_error("RECEIPT_DEADLINE_PASSED", "expense_date",
                                                    days=policy.receipt_deadline_days, expense_date=when)
        return errors

    def check_submit(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, ToolError]:
        """Errors per parameter: the category's limit, no future date, the receipt deadline."""
        with ctx.engine.connect() as conn:
            return self._check_submit(args, ctx, conn, False)

    def summary_submit(self, args: dict[str, Any], ctx: ToolContext) -> tuple[str, str]:
        """The confirmation summary (pt, en); missing values show as '?'."""
        amount = args.get("amount_usd")
        return say("submit_expense", "summary", category=args.get("category") or "?",
                   amount=money(amount) if amount is not None else "?",
                   expense_date=args.get("expense_date") or "?", description=args.get("description") or "")

    def submit(self, args: dict[str, Any], ctx: ToolContext, idempotency_key: str) -> ToolResult:
        """Insert the expense as pending in the user's name, with its audit row, in one transaction."""
        def write(conn: Connection) -> ToolResult:
            expense_id = next_id(conn, "expenses", "expense_id", "EXP", 4)
            conn.execute(
                text("INSERT INTO expenses (expense_id, employee_id, category, amount_usd, expense_date, description, "
                     "submitted_at, status, approver_id, decided_at, comment) VALUES (:id, :user, :category, :amount, "
                     ":spent, :description, :today, 'pending', NULL, NULL, NULL)"),
                {"id": expense_id, "user": ctx.user_id, "category": args["category"],
                 "amount": float(money(args["amount_usd"])), "spent": str(args["expense_date"]),
                 "description": args["description"], "today": ctx.today.isoformat()},
            )
            row = _expense(conn, expense_id)
            assert row is not None
            pt, en = say("submit_expense", "result", **_expense_facts(conn, row))
            return ToolResult(pt, en, row, "expenses", expense_id)

        return run_write(ctx, "submit_expense", args, idempotency_key,
                         lambda conn: self._check_submit(args, ctx, conn, True), write)

    # --------------------------------------------------------------------------------- status

    def _check_status(self, args: dict[str, Any], ctx: ToolContext, conn: Connection,
                      complete: bool) -> dict[str, ToolError]:
        errors = check_args("get_expense_status", args, conn, complete=complete)
        expense_id = args.get("expense_id")
        if expense_id and "expense_id" not in errors:
            row = _expense(conn, expense_id)
            if row and row["employee_id"] != ctx.user_id and "finance_approvers" not in ctx.groups:
                errors["expense_id"] = tool_error("NOT_ALLOWED_TO_VIEW", "expense_id", expense_id=expense_id)
        return errors

    def check_status(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, ToolError]:
        """Errors per parameter; only the owner and finance approvers may see an expense."""
        with ctx.engine.connect() as conn:
            return self._check_status(args, ctx, conn, False)

    def summary_status(self, args: dict[str, Any], ctx: ToolContext) -> tuple[str, str]:
        """What is about to be looked up (pt, en)."""
        return say("get_expense_status", "summary", expense_id=args.get("expense_id") or "?")

    def status(self, args: dict[str, Any], ctx: ToolContext, idempotency_key: str = "") -> ToolResult:
        """Read-only: no transaction bookkeeping, no audit."""
        with ctx.engine.connect() as conn:
            errors = self._check_status(args, ctx, conn, True)
            if errors:
                raise next(iter(errors.values()))
            row = _expense(conn, args["expense_id"])
            assert row is not None
            facts = _expense_facts(conn, row)
            decided = bool(row["approver_id"])
            facts["decision_part"] = (part("decided", approver=person(conn, row["approver_id"]),
                                           decided_at=row["decided_at"]) if decided else NO_PART)
            facts["comment_part"] = part("comment", comment=row["comment"]) if row["comment"] else NO_PART
            owner, approver = employee(conn, row["employee_id"]), employee(conn, row["approver_id"])
            data = {**row, "owner_name": owner["full_name"] if owner else None,
                    "approver_name": approver["full_name"] if approver else None}
        pt, en = say("get_expense_status", "result", **facts)
        return ToolResult(pt, en, data, "expenses", row["expense_id"])
