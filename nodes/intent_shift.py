"""intent_shift: inside a transaction, the message filled nothing and confirmed nothing.

It is a cancellation, a request for another tool (the current transaction is abandoned cleanly and
the new one starts), a question (a digression: answered, then the transaction resumes), or nothing
usable (re-prompt, bounded; then an offer to cancel).
"""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from graph.context import Context
from graph.state import Intent, State, Step, Transaction
from nodes.common import ctx_of, svc, trace, user_text
from tools.llm import Usage
from tramita.core.intent import classify
from tramita.core.lexicon import classify as lexicon
from tramita.core.lexicon import mentions_cancel

Next = Literal["cancel", "collect_parameters", "plan", "refuse", "respond"]


def intent_shift(state: State, runtime: Runtime[Context]) -> Command[Next]:
    """Cancel, switch to another tool, answer a digression, refuse, or re-prompt (bounded)."""
    ctx = ctx_of(runtime)
    text = user_text(state)
    tx = Transaction(**(state.get("transaction") or {}))
    usage = Usage()
    if lexicon(text) in ("cancel", "reject") or mentions_cancel(text):
        return Command(goto="cancel", update={"turn": trace("intent_shift", route="shift:cancel")})
    try:
        intent = classify(text, ctx, svc(ctx), usage, exclude=tx.get("tool"))
    except Exception as exc:  # noqa: BLE001
        intent = Intent(kind="none", reason=f"matching unavailable: {exc}")
    kind = intent.get("kind")
    if kind == "tool":
        return Command(goto="collect_parameters", update={
            "intent": intent, "turn": trace("intent_shift", route=f"shift:tool:{intent.get('tool')}", **usage.trace())})
    if kind == "refuse":
        return Command(goto="refuse", update={"intent": intent, "turn": trace("intent_shift", route="shift:refuse",
                                                                                **usage.trace())})
    if kind == "question":
        return Command(goto="plan", update={"intent": intent, "resume": True,
                                            "turn": trace("intent_shift", route="shift:digression", **usage.trace())})
    tx["reprompts"] = int(tx.get("reprompts", 0)) + 1
    step: Step = "offer_cancel" if tx["reprompts"] > ctx.max_reprompts else "reprompt"
    return Command(goto="respond", update={"intent": Intent(kind="none", reason=intent.get("reason", "")),
                                           "transaction": tx, "step": step,
                                           "turn": trace("intent_shift", route=f"shift:{step}", **usage.trace())})
