"""Ticket tools: create_ticket, get_ticket_status, reassign_ticket (tools.md 4).

Each tool `m` has `check_m` (errors per parameter, read-only, partial arguments allowed),
`summary_m` (pt, en) and `m` (execute; writes go through `audit.run_write`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from tools.business.audit import TIMESTAMP_FORMAT, next_id, run_write
from tools.business.base import ToolContext, ToolError, ToolResult
from tools.business.catalog import NO_PART, not_found, part, rules, tool_error
from tools.business.catalog import text as say
from tools.business.rows import employee, fetch_one, person
from tools.business.schema_check import check_args

_TICKET_SQL = ("SELECT ticket_id, service_id, requester_id, assignee_id, priority, status, title, description, "
               "created_at, updated_at FROM tickets WHERE ticket_id = :id")


def _ticket(conn: Connection, ticket_id: Any) -> dict[str, Any] | None:
    return fetch_one(conn, _TICKET_SQL, id=ticket_id) if ticket_id else None


def _service_label(conn: Connection, service_id: Any) -> str:
    row = fetch_one(conn, "SELECT service_id, name FROM services WHERE service_id = :id", id=service_id)
    return f"{row['name']} ({row['service_id']})" if row else str(service_id)


def _name(conn: Connection, employee_id: Any) -> str | None:
    row = employee(conn, employee_id)
    return str(row["full_name"]) if row else None


class TicketTools:
    """Handlers of the three ticket tools (stateless)."""

    # --------------------------------------------------------------------------------- create

    def check_create(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, ToolError]:
        """Errors per parameter from the schema and the referenced rows only; creating has no other precondition."""
        with ctx.engine.connect() as conn:
            return check_args("create_ticket", args, conn, complete=False)

    def summary_create(self, args: dict[str, Any], ctx: ToolContext) -> tuple[str, str]:
        """The confirmation summary (pt, en): priority, service, title and the description if any."""
        with ctx.engine.connect() as conn:
            service = _service_label(conn, args.get("service_id"))
        description = args.get("description")
        return say("create_ticket", "summary", priority=args.get("priority") or "?", service=service,
                   title=args.get("title") or "",
                   description_part=part("description", description=description) if description else NO_PART)

    def create(self, args: dict[str, Any], ctx: ToolContext, idempotency_key: str) -> ToolResult:
        """Insert the ticket as open and unassigned, requested by the user, in one audited transaction."""
        def write(conn: Connection) -> ToolResult:
            ticket_id = next_id(conn, "tickets", "ticket_id", "TCK", 4)
            now = ctx.now.strftime(TIMESTAMP_FORMAT)
            conn.execute(
                text("INSERT INTO tickets (ticket_id, service_id, requester_id, assignee_id, priority, status, title, "
                     "description, created_at, updated_at) VALUES (:id, :service, :user, NULL, :priority, 'open', "
                     ":title, :description, :now, :now)"),
                {"id": ticket_id, "service": args["service_id"], "user": ctx.user_id, "priority": args["priority"],
                 "title": args["title"], "description": args.get("description") or None, "now": now},
            )
            row = _ticket(conn, ticket_id)
            assert row is not None
            pt, en = say("create_ticket", "result", **row)
            return ToolResult(pt, en, row, "tickets", ticket_id)

        return run_write(ctx, "create_ticket", args, idempotency_key,
                         lambda conn: check_args("create_ticket", args, conn, complete=True), write)

    # --------------------------------------------------------------------------------- status

    def check_status(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, ToolError]:
        """Errors per parameter from the schema and the referenced rows; any user may look a ticket up."""
        with ctx.engine.connect() as conn:
            return check_args("get_ticket_status", args, conn, complete=False)

    def summary_status(self, args: dict[str, Any], ctx: ToolContext) -> tuple[str, str]:
        """What is about to be looked up (pt, en)."""
        return say("get_ticket_status", "summary", ticket_id=args.get("ticket_id") or "?")

    def status(self, args: dict[str, Any], ctx: ToolContext, idempotency_key: str = "") -> ToolResult:
        """Read-only: no transaction bookkeeping, no audit."""
        with ctx.engine.connect() as conn:
            errors = check_args("get_ticket_status", args, conn, complete=True)
            if errors:
                raise next(iter(errors.values()))
            row = _ticket(conn, args["ticket_id"])
            assert row is not None
            facts = {**row, "assignee": person(conn, row["assignee_id"]), "requester": person(conn, row["requester_id"])}
            data = {**row, "assignee_name": _name(conn, row["assignee_id"]) or "unassigned",
                    "requester_name": _name(conn, row["requester_id"])}
        pt, en = say("get_ticket_status", "result", **facts)
        return ToolResult(pt, en, data, "tickets", row["ticket_id"])

    # ------------------------------------------------------------------------------- reassign

    def _check_reassign(self, args: dict[str, Any], conn: Connection, complete: bool) -> dict[str, ToolError]:
        errors = check_args("reassign_ticket", args, conn, complete=complete)
        ticket_id = args.get("ticket_id")
        if not ticket_id or "ticket_id" in errors:
            return errors
        row = _ticket(conn, ticket_id)
        if row is None:  # vanished between checks
            errors["ticket_id"] = not_found("tickets", ticket_id, "ticket_id")
        elif row["status"] in rules().inactive_ticket_statuses:
            errors["ticket_id"] = tool_error("TICKET_NOT_ACTIVE", "ticket_id", ticket_id=ticket_id, status=row["status"])
        elif args.get("assignee_id") and "assignee_id" not in errors and args["assignee_id"] == row["assignee_id"]:
            errors["assignee_id"] = tool_error("SAME_ASSIGNEE", "assignee_id", ticket_id=ticket_id,
                                               assignee_id=row["assignee_id"],
                                               assignee_name=_name(conn, row["assignee_id"]) or row["assignee_id"])
        return errors

    def check_reassign(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, ToolError]:
        """Errors per parameter: the ticket must be active and the new assignee someone else."""
        with ctx.engine.connect() as conn:
            return self._check_reassign(args, conn, False)

    def summary_reassign(self, args: dict[str, Any], ctx: ToolContext) -> tuple[str, str]:
        """The confirmation summary (pt, en): the ticket and its current and new assignee."""
        with ctx.engine.connect() as conn:
            row = _ticket(conn, args.get("ticket_id")) or {}
            return say("reassign_ticket", "summary", ticket_id=args.get("ticket_id") or "?",
                       title=row.get("title", "?"), status=row.get("status", "?"),
                       current_assignee=person(conn, row.get("assignee_id")),
                       new_assignee=person(conn, args.get("assignee_id")))

    def reassign(self, args: dict[str, Any], ctx: ToolContext, idempotency_key: str) -> ToolResult:
        """Change the assignee in one audited transaction; the result keeps the previous one."""
        def write(conn: Connection) -> ToolResult:
            before = _ticket(conn, args["ticket_id"])
            assert before is not None
            conn.execute(
                text("UPDATE tickets SET assignee_id = :assignee, updated_at = :now WHERE ticket_id = :id"),
                {"assignee": args["assignee_id"], "now": ctx.now.strftime(TIMESTAMP_FORMAT), "id": args["ticket_id"]},
            )
            row = _ticket(conn, args["ticket_id"])
            assert row is not None
            pt, en = say("reassign_ticket", "result", ticket_id=row["ticket_id"],
                         new_assignee=person(conn, row["assignee_id"]))
            data = {**row, "previous_assignee_id": before["assignee_id"],
                    "assignee_name": _name(conn, row["assignee_id"])}
            return ToolResult(pt, en, data, "tickets", row["ticket_id"])

        return run_write(ctx, "reassign_ticket", args, idempotency_key,
                         lambda conn: self._check_reassign(args, conn, True), write)
