"""intent_shift: inside a transaction, the message filled nothing and confirmed nothing.

It is a cancellation, a request for another tool (the current transaction is abandoned cleanly and
the new one starts), a question (a digression: answered, then the transaction resumes), or nothing
usable (re-prompt, bounded; then an offer to cancel).
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.state import Intent, State, Transaction
from nodes.common import ctx_of, svc, trace, user_text
from tools.llm import Usage
from tramita.intent import classify
from tramita.lexicon import classify as lexicon
from tramita.lexicon import mentions_cancel


def intent_shift(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    ctx = ctx_of(runtime)
    text = user_text(state)
    tx = Transaction(**(state.get("transaction") or {}))
    usage = Usage()
    if lexicon(text) in ("cancel", "reject") or mentions_cancel(text):
        return {"intent": Intent(kind="cancel"), "turn": trace("intent_shift", route="shift:cancel")}
    try:
        intent = classify(text, ctx, svc(), usage, exclude=tx.get("tool"))
    except Exception as exc:  # noqa: BLE001
        intent = Intent(kind="none", reason=f"matching unavailable: {exc}")
    kind = intent.get("kind")
    if kind == "tool":
        return {"intent": intent, "turn": trace("intent_shift", route=f"shift:tool:{intent.get('tool')}", **usage.trace())}
    if kind == "refuse":
        return {"intent": intent, "turn": trace("intent_shift", route="shift:refuse", **usage.trace())}
    if kind == "question":
        return {"intent": intent, "resume": True, "turn": trace("intent_shift", route="shift:digression", **usage.trace())}
    tx["reprompts"] = int(tx.get("reprompts", 0)) + 1
    step = "offer_cancel" if tx["reprompts"] > ctx.max_reprompts else "reprompt"
    return {"intent": Intent(kind="none", reason=intent.get("reason", "")), "transaction": tx, "step": step,
            "turn": trace("intent_shift", route=f"shift:{step}", **usage.trace())}
