"""execute_tool: run a business tool — only when every condition of docs/architecture.md holds.

Enabled, permitted, preconditions re-checked by the handler inside its own database transaction,
and, for writes, an explicit confirmation whose hash matches the arguments that were shown. The
idempotency key (transaction id + argument hash) makes a retried turn replay instead of writing
twice, which is what lets a turn killed after commit resume truthfully from the checkpoint.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.state import State, Transaction
from nodes.common import ctx_of, lang_of, now_for, svc, tool_context, trace
from tools.business.base import ToolError
from tools.database import DatabaseUnavailable
from tramita.base.faults import crash_point
from tramita.core.replies import say
from tramita.core.thread_refs import from_args
from tramita.core.transactions import advance, args_hash, ended, method_of


def execute_tool(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Run the confirmed (or read-only) tool and report; record the rows it named for "ele" / "it"."""
    ctx = ctx_of(runtime)
    s = svc(ctx)
    lang = lang_of(state)
    now = now_for(ctx)
    tx = Transaction(**(state.get("transaction") or {}))
    spec = s.registry.get(tx["tool"], ctx.tenant)
    policy = s.registry.policy(spec.name)
    digest = args_hash(spec.name, dict(tx["args"]))
    refusal = None
    if not spec.enabled:
        refusal = say("disabled", lang, tool=spec.name)
    elif not s.registry.is_permitted(spec, ctx.user_id):
        refusal = say("permission_denied", lang, groups=", ".join(spec.permissions.groups) or "—")
    elif policy.require_confirmation and (tx.get("status") != "awaiting_confirmation" or tx.get("confirmation_hash") != digest):
        # the arguments are not the ones the user confirmed: show a fresh summary of what WOULD be
        # written and ask again; the old "yes" never carries over
        tctx = tool_context(ctx, lang, s)
        tx["args"] = dict(tx.get("args", {}))
        tx["pending"] = [r for r in spec.required if r not in tx["args"]]
        stage, errors = advance(spec, tx, tctx, s.registry)
        notices = [say("refused_value", lang, error=e.message(lang)) for e in errors]
        return {"transaction": tx, "step": "confirm" if stage == "awaiting_confirmation" else "ask", "notices": notices,
                "turn": trace("execute_tool", route="execute:hash-mismatch", refused=True,
                              refusal="confirmation does not match the arguments shown")}
    if refusal:
        return {"notices": [refusal], "turn": trace("execute_tool", route="execute:refused", refused=True, refusal=refusal)}
    obj, method = method_of(spec)
    tctx = tool_context(ctx, lang, s)
    try:
        result = getattr(obj, method)(dict(tx["args"]), tctx, f"{tx['id']}:{digest}")
    except ToolError as err:
        msg = say("failed", lang, tool=spec.name, error=err.message(lang))
        return {"transaction": None, "step": None, "notices": [msg],
                "last_transaction": ended(tx, "failed", msg, now),
                "turn": trace("execute_tool", route="execute:failed", refused=True, refusal=err.code)}
    except (DatabaseUnavailable, OSError) as exc:
        msg = say("failed", lang, tool=spec.name, error=f"database unavailable ({str(exc)[:120]})")
        return {"notices": [msg], "turn": trace("execute_tool", route="execute:db-down", errors=[str(exc)[:200]])}
    except Exception as exc:  # noqa: BLE001 - e.g. SQLAlchemy OperationalError: keep the transaction for a retry
        msg = say("failed", lang, tool=spec.name, error=f"{type(exc).__name__}: {str(exc)[:160]}")
        return {"notices": [msg], "turn": trace("execute_tool", route="execute:error", errors=[str(exc)[:200]])}
    crash_point("after_commit")
    text = result.message(lang)
    key = "executed" if policy.operation_type == "write" else "read_result"
    msg = say(key, lang, result=text)
    # the thread now names these rows: "passa ele pro …" after a lookup means this ticket
    entities = from_args(spec.properties, dict(tx["args"]))
    if result.target_table and result.target_id:
        entities[result.target_table] = str(result.target_id)
    return {"transaction": None, "step": None, "notices": [msg], "entities": entities,
            "last_transaction": ended(tx, "executed", text, now, result.target_id),
            "turn": trace("execute_tool", route="execute:ok", executed_tool=spec.name)}
