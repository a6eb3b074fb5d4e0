"""refuse: a policy or permission refusal. Changes no transaction state."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.state import State
from nodes.common import trace


def refuse(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Report the refusal reason as a notice and mark the turn refused; respond says it."""
    intent = state.get("intent") or {}
    reason = intent.get("reason") or "refused"
    return {"notices": [reason], "turn": trace("refuse", refused=True, refusal=f"{intent.get('tool', 'policy')}: {reason}")}
