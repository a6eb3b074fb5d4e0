"""Incident tool: escalate_incident (tools.md 4).

`check_escalate` (errors per parameter, read-only, partial arguments allowed), `summary_escalate`
(pt, en) and `escalate` (execute through `audit.run_write`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from tools.business.audit import run_write
from tools.business.base import ToolContext, ToolError, ToolResult
from tools.business.catalog import not_found, rules, tool_error
from tools.business.catalog import text as say
from tools.business.rows import fetch_one
from tools.business.schema_check import check_args

_INCIDENT_SQL = "SELECT incident_id, service_id, severity, status, title FROM incidents WHERE incident_id = :id"


def _incident(conn: Connection, incident_id: Any) -> dict[str, Any] | None:
    return fetch_one(conn, _INCIDENT_SQL, id=incident_id) if incident_id else None


def more_severe(new: str, current: str) -> bool:
    """SEV1 is the most severe: a lower position in `severity_order` is more severe."""
    order = rules().severity_order
    return order.index(new) < order.index(current)


class IncidentTools:
    """Handler of escalate_incident (stateless)."""

    def _check(self, args: dict[str, Any], conn: Connection, complete: bool) -> dict[str, ToolError]:
        errors = check_args("escalate_incident", args, conn, complete=complete)
        incident_id = args.get("incident_id")
        if not incident_id or "incident_id" in errors:
            return errors
        row = _incident(conn, incident_id)
        if row is None:  # vanished between checks
            errors["incident_id"] = not_found("incidents", incident_id, "incident_id")
        elif row["status"] == "resolved":
            errors["incident_id"] = tool_error("INCIDENT_RESOLVED", "incident_id", incident_id=incident_id)
        else:
            new = args.get("new_severity")
            if new and "new_severity" not in errors and not more_severe(str(new), str(row["severity"])):
                errors["new_severity"] = tool_error("SEVERITY_NOT_HIGHER", "new_severity", incident_id=incident_id,
                                                    current=row["severity"], requested=new)
        return errors

    def check_escalate(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, ToolError]:
        """Errors per parameter: the incident must not be resolved and the new severity must be more severe."""
        with ctx.engine.connect() as conn:
            return self._check(args, conn, False)

    def summary_escalate(self, args: dict[str, Any], ctx: ToolContext) -> tuple[str, str]:
        """The confirmation summary (pt, en): the incident's title, status and severity change."""
        with ctx.engine.connect() as conn:
            row = _incident(conn, args.get("incident_id")) or {}
        return say("escalate_incident", "summary", incident_id=args.get("incident_id") or "?",
                   title=row.get("title", "?"), status=row.get("status", "?"),
                   current_severity=row.get("severity", "?"), new_severity=args.get("new_severity") or "?",
                   reason=args.get("reason") or "")

    def escalate(self, args: dict[str, Any], ctx: ToolContext, idempotency_key: str) -> ToolResult:
        """Raise the severity in one audited transaction; the result keeps the previous severity."""
        def write(conn: Connection) -> ToolResult:
            before = _incident(conn, args["incident_id"])
            assert before is not None
            conn.execute(text("UPDATE incidents SET severity = :severity WHERE incident_id = :id"),
                         {"severity": args["new_severity"], "id": args["incident_id"]})
            row = _incident(conn, args["incident_id"])
            assert row is not None
            pt, en = say("escalate_incident", "result", incident_id=row["incident_id"],
                         current_severity=before["severity"], new_severity=row["severity"])
            return ToolResult(pt, en, {**row, "previous_severity": before["severity"]}, "incidents", row["incident_id"])

        return run_write(ctx, "escalate_incident", args, idempotency_key,
                         lambda conn: self._check(args, conn, True), write)
