"""cancel: end the open transaction without executing anything.

Reached from await_confirmation (a "no") and intent_shift (a cancel phrase, or a cancel whose
follow-up is no tool request). A cancel followed by a new request is ended by intent_shift itself,
with the same outcome and message, because that turn goes on to the new transaction.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.state import State
from nodes.common import ctx_of, lang_of, now_for, trace
from tramita.core.replies import say
from tramita.core.transactions import ended


def cancel(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Record the transaction as cancelled (its arguments kept in `last_transaction` for audit)."""
    lang = lang_of(state)
    tx = state.get("transaction")
    if not tx:
        return {"notices": [say("nothing_pending", lang)], "turn": trace("cancel", route="cancel:none")}
    msg = say("cancelled", lang, tool=tx.get("tool"))
    return {"transaction": None, "step": None, "notices": [msg],
            "last_transaction": ended(tx, "cancelled", msg, now_for(ctx_of(runtime))),
            "turn": trace("cancel", route="cancel")}
