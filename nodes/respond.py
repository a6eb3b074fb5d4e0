"""respond: the single place that writes the assistant's message for the turn.

It says what earlier nodes reported (refusals, results, gaps), the answer to a question, and then
the transaction's next step: the next parameter to give, the summary to confirm, or — after a
digression — a reminder of where the transaction stands ("Voltando: confirma …?").
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from graph.context import Context
from graph.state import State
from nodes.common import ctx_of, lang_of, svc, trace, user_text
from tramita.base.logmask import get_logger
from tramita.core.replies import say

log = get_logger()


def _next_step(state: State, ctx: Context, lang: str) -> str:
    tx = state.get("transaction")
    if not tx:
        return ""
    step = state.get("step")
    resume = state.get("resume")
    tool = tx.get("tool", "")
    if tx.get("status") == "awaiting_confirmation":
        summary = tx.get("summary", "")
        if resume:
            return say("resume_confirm", lang, tool=tool, summary=summary)
        if step == "offer_cancel":  # the re-prompt limit: ask once more AND offer to cancel
            return "\n\n".join([say("reprompt_confirm", lang, summary=summary),
                                  say("offer_cancel", lang, tool=tool, param="sim/não" if lang == "pt" else "yes/no")])
        if step == "reprompt":
            return say("reprompt_confirm", lang, summary=summary)
        return say("ask_confirm", lang, summary=summary)
    pending = tx.get("pending") or []
    if not pending:
        return ""
    name = pending[0]
    try:
        desc = svc(ctx).registry.get(tool, ctx.tenant).properties.get(name, {}).get("description", "")
    except Exception:  # noqa: BLE001
        desc = ""
    if resume:
        return say("resume_collecting", lang, tool=tool, param=name)
    if step == "offer_cancel":
        return say("offer_cancel", lang, tool=tool, param=name)
    if step == "reprompt":
        return say("reprompt_collecting", lang, tool=tool, param=name, description=desc)
    return say("ask_param", lang, tool=tool, param=name, description=desc)


def _log_turn(state: State, ctx: Context) -> None:
    """Every refusal (and every turn with errors) leaves a log line; tramita.base.logmask masks it."""
    t = state.get("turn") or {}
    if not (t.get("refused") or t.get("errors")):
        return
    try:
        from langgraph.config import get_config

        thread = str(get_config().get("configurable", {}).get("thread_id", ""))
    except Exception:  # noqa: BLE001 - outside a run (unit tests call nodes directly)
        thread = ""
    if t.get("refused"):
        log.warning("refused: thread=%s user=%s route=%s refusal=%s message=%r", thread, ctx.user_id, t.get("route"),
                    str(t.get("refusal"))[:300], user_text(state)[:200])
    if t.get("errors"):
        log.info("turn errors: thread=%s user=%s errors=%s", thread, ctx.user_id, "; ".join(t.get("errors", []))[:600])


def respond(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Compose the turn's one message: answer and notices first, then the transaction's next step."""
    ctx = ctx_of(runtime)
    lang = lang_of(state)
    _log_turn(state, ctx)
    parts = [n for n in state.get("notices", []) if n]
    if state.get("answer"):
        parts.insert(0, state["answer"])
    intent = state.get("intent") or {}
    if not parts and intent.get("kind") == "none" and not state.get("transaction"):
        parts.append(say("not_understood", lang))
    step = _next_step(state, ctx, lang)
    if step:
        parts.append(step)
    text = "\n\n".join(parts) or say("not_understood", lang)
    tx = state.get("transaction")
    status = tx.get("status", "idle") if tx else "idle"
    return {"messages": [AIMessage(content=text)], "answer": text, "status": status,
            "turn": trace("respond")}
