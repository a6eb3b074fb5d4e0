"""intent_shift: inside a transaction, the message filled nothing and confirmed nothing.

It is a cancellation, a cancellation followed by a new request ("cancela isso, quero reatribuir o
TCK-… pro …": the current transaction is cancelled and the new one starts with the values the
message carries), a bare assent ("sim, pode continuar": the pending question is asked again, never
matched to another tool), a request for another tool (the current transaction is abandoned cleanly
and the new one starts), a question (a digression: answered, then the transaction resumes), or
nothing usable (re-prompt, bounded; then an offer to cancel).

Cancels and assents are recognised by `tramita.core.confirmation` (lexicon clauses first, then the
prototypes), so "pensando bem, deixa quieto" cancels without a longer word list.
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from graph.context import Context
from graph.state import Intent, State, Step, Transaction
from nodes.await_confirmation import names_another_action
from nodes.common import ctx_of, lang_of, now_for, svc, trace, user_text
from tools.llm import Usage
from tramita.base.text import words
from tramita.core.confirmation import cancel_split, is_assent, shared_classifier
from tramita.core.intent import classify
from tramita.core.lexicon import classify as lexicon
from tramita.core.replies import say
from tramita.core.transactions import ended

Next = Literal["cancel", "collect_parameters", "plan", "refuse", "respond"]


def _is_request(rest: str) -> bool:
    """Text after a cancel that may be a new request: a value, or at least three words
    ("quero abrir um chamado"), and not itself a refusal: "por favor", "drop it" and "não precisa
    mais" only repeat the cancel.
    """
    if not (any(c.isdigit() for c in rest) or len(words(rest)) >= 3) or lexicon(rest) is not None:
        return False
    try:
        return shared_classifier().classify(rest).label != "reject"
    except Exception:  # noqa: BLE001 - no classifier: the intent match alone decides
        return True


def _cancelled(state: State, runtime: Runtime[Context], tx: Transaction) -> dict[str, Any]:
    """The update that ends `tx` as cancelled (what the cancel node writes), for a turn that goes on
    to a new request instead of to the cancel node.
    """
    msg = say("cancelled", lang_of(state), tool=tx.get("tool"))
    return {"transaction": None, "step": None, "notices": [msg],
            "last_transaction": ended(tx, "cancelled", msg, now_for(ctx_of(runtime)))}


def intent_shift(state: State, runtime: Runtime[Context]) -> Command[Next]:
    """Cancel (and maybe switch), re-ask after an assent, switch tool, digress, refuse, or re-prompt."""
    ctx = ctx_of(runtime)
    text = user_text(state)
    tx = Transaction(**(state.get("transaction") or {}))
    usage = Usage()
    reply = lexicon(text)
    split = cancel_split(text) if reply is None else None
    if reply in ("cancel", "reject") or (split and split.cancel and not _is_request(split.rest)):
        return Command(goto="cancel", update={"turn": trace("intent_shift", route="shift:cancel")})
    if split and split.cancel:
        return _cancel_and_switch(state, runtime, tx, split.rest)
    if reply == "confirm" or is_assent(text) and not names_another_action(text, str(tx.get("tool")), ctx, svc(ctx)):
        # "sim, pode continuar": an assent answers nothing and is no request, unless it clearly names
        # another action ("approve it" while a rejection awaits)
        return _reask(tx, usage)
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


def _reask(tx: Transaction, usage: Usage) -> Command[Next]:
    """Ask the pending step again after a bare assent: not a failed re-prompt (the count stays), never
    a match to another tool, never a permission refusal.
    """
    return Command(goto="respond", update={"transaction": tx, "step": "reprompt",
                                           "turn": trace("intent_shift", route="shift:assent", **usage.trace())})


def _cancel_and_switch(state: State, runtime: Runtime[Context], tx: Transaction, rest: str) -> Command[Next]:
    """The current transaction is cancelled either way; the text after the cancel, when it is a
    request for a tool (the same tool included: "cancela, aprova a EXP-0300 então"), starts a new
    transaction, which collect_parameters fills from the message's values.
    """
    ctx = ctx_of(runtime)
    usage = Usage()
    try:
        intent = classify(rest, ctx, svc(ctx), usage)
    except Exception as exc:  # noqa: BLE001
        intent = Intent(kind="none", reason=f"matching unavailable: {exc}")
    kind = intent.get("kind")
    if kind == "tool":
        return Command(goto="collect_parameters", update={
            **_cancelled(state, runtime, tx), "intent": intent,
            "turn": trace("intent_shift", route=f"shift:cancel+tool:{intent.get('tool')}", **usage.trace())})
    if kind == "refuse":  # the new request is not permitted: the old one is still cancelled, as asked
        return Command(goto="refuse", update={
            **_cancelled(state, runtime, tx), "intent": intent,
            "turn": trace("intent_shift", route="shift:cancel+refuse", **usage.trace())})
    return Command(goto="cancel", update={"turn": trace("intent_shift", route="shift:cancel", **usage.trace())})
