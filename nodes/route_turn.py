"""route_turn: the entry of every turn.

Resets the per-turn scratch state, detects the language, expires an idle transaction past its TTL,
cancels one whose tool was disabled meanwhile, and screens the message for policy refusals (bulk,
injection, raw writes). It also records the ids the thread now mentions (the previous answer's,
then this message's) in `entities`, which "ele" / "it" resolve against (tramita/core/thread_refs.py).
The router after it dispatches on the persisted transaction status.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.runtime import Runtime

from graph.context import Context
from graph.state import Intent, State
from nodes.common import ctx_of, now_for, svc, user_text
from tramita.base.text import MAX_MESSAGE_CHARS, detect_language
from tramita.core.replies import say
from tramita.core.safety import business_tool_matches, data_vocabulary, screen
from tramita.core.thread_refs import id_patterns, mentioned
from tramita.core.transactions import ended


def route_turn(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Reset the turn, expire or cancel a stale transaction, screen the message, note its ids."""
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
    flagged = _screen(text, ctx, pending=bool(tx)) if text else None
    if flagged:
        category, reason_pt, reason_en = flagged
        update["intent"] = Intent(kind="refuse", reason=reason_en if lang == "en" else reason_pt, tool=category)
    update["notices"] = ["__reset__", *notices]
    update["turn"] = {"route": "__reset__", "nodes": ["route_turn"], **_bound_message(state, update)}
    seen = _mentions(state, ctx, text)
    if seen:
        update["entities"] = seen
    return update


def _mentions(state: State, ctx: Context, text: str) -> dict[str, str]:
    """The ids the previous answer and this message write, per referenced table (this message's
    win), so a later "ele" / "it" points at the last one the thread named.
    """
    try:
        patterns = id_patterns(schema for spec in svc(ctx).registry.visible(ctx.tenant)
                               for schema in spec.properties.values())
    except Exception:  # noqa: BLE001 - registry unreadable: references resolve from values and results
        return {}
    previous = next((m for m in reversed(state.get("messages", [])[:-1]) if isinstance(m, AIMessage)), None)
    answer = previous.content if previous is not None and isinstance(previous.content, str) else ""
    return {**mentioned(answer, patterns), **mentioned(text, patterns)}


def _screen(text: str, ctx: Context, *, pending: bool) -> tuple[str, str, str] | None:
    """The policy screen with this deployment's data vocabulary and tool registry (see
    tramita.core.safety); the registry is asked only when a clause is a write aimed at data.
    """
    try:
        s = svc(ctx)
    except Exception:  # noqa: BLE001 - no services: the patterns and the store words still apply
        return screen(text, pending=pending)
    return screen(text, pending=pending, data=lambda: data_vocabulary(s),
                  tool_matches=lambda m: business_tool_matches(m, ctx, s))


def _bound_message(state: State, update: dict[str, Any]) -> dict[str, Any]:
    """An oversized message (say 1 MB) is replaced in the state by what the nodes read (the first
    MAX_MESSAGE_CHARS characters), so later checkpoints do not carry it; the trace says so.
    """
    msgs = state.get("messages", [])
    last = msgs[-1] if msgs else None
    if not isinstance(last, HumanMessage) or not isinstance(last.content, str) or len(last.content) <= 4 * MAX_MESSAGE_CHARS:
        return {}
    size = len(last.content)
    update["messages"] = [HumanMessage(content=user_text(state) + " […]", id=last.id)]
    return {"errors": [f"message truncated: {size} characters, the first {MAX_MESSAGE_CHARS} were read"]}
