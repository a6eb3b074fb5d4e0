"""route_turn: the entry of every turn.

Resets the per-turn scratch state, detects the language, expires an idle transaction past its TTL,
cancels one whose tool was disabled meanwhile, and screens the message for policy refusals (bulk,
injection, raw writes). The router after it dispatches on the persisted transaction status.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.runtime import Runtime

from graph.context import Context
from graph.state import Intent, State
from nodes.common import ctx_of, now_for, svc, user_text
from tramita.base.text import MAX_MESSAGE_CHARS, detect_language
from tramita.core.replies import say
from tramita.core.safety import screen
from tramita.core.transactions import ended


def route_turn(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    ctx = ctx_of(runtime)
    text = user_text(state)
    lang = ctx.language if ctx.language in ("pt", "en") else detect_language(text, state.get("lang") or "pt")
    update: dict[str, Any] = {
        "lang": lang, "intent": None, "plan": None, "contexts": None, "notices": None, "answer": "",
        "resume": False, "step": None,
    }
    tx = state.get("transaction")
    now = now_for(ctx)
    notices: list[str] = []
    if tx:
        last = datetime.fromisoformat(tx.get("updated_at", now.isoformat()))
        tool = tx.get("tool", "")
        if now - last > timedelta(minutes=ctx.transaction_ttl_minutes) or last.date() != now.date() and now < last:
            msg = say("expired", lang, tool=tool)
            update.update(transaction=None, last_transaction=ended(tx, "expired", msg, now))
            notices.append(msg)
            tx = None
        else:
            try:
                enabled = any(s.name == tool for s in svc(ctx).registry.visible(ctx.tenant))
            except Exception:  # noqa: BLE001 - registry unreadable: keep the transaction, execute re-checks
                enabled = True
            if not enabled:
                msg = say("disabled", lang, tool=tool)
                update.update(transaction=None, last_transaction=ended(tx, "disabled", msg, now))
                notices.append(msg)
                tx = None
    flagged = screen(text) if text else None
    if flagged:
        category, reason_pt, reason_en = flagged
        update["intent"] = Intent(kind="refuse", reason=reason_en if lang == "en" else reason_pt, tool=category)
    update["notices"] = ["__reset__", *notices]
    update["turn"] = {"route": "__reset__", "nodes": ["route_turn"], **_bound_message(state, update)}
    return update


def _bound_message(state: State, update: dict[str, Any]) -> dict[str, Any]:
    """An oversized message (say 1 MB) is replaced in the state by what the nodes read (the first
    MAX_MESSAGE_CHARS characters), so later checkpoints do not carry it; the trace says so."""
    msgs = state.get("messages", [])
    last = msgs[-1] if msgs else None
    if not isinstance(last, HumanMessage) or not isinstance(last.content, str) or len(last.content) <= 4 * MAX_MESSAGE_CHARS:
        return {}
    size = len(last.content)
    update["messages"] = [HumanMessage(content=user_text(state) + " […]", id=last.id)]
    return {"errors": [f"message truncated: {size} characters, the first {MAX_MESSAGE_CHARS} were read"]}
