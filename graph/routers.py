"""Routers: small pure functions over the state that return typed Literals.

They read only the classification the node before them stored, so the builder reads as the
diagram in docs/architecture.md and every branch can be unit-tested without a model. The nodes
inside a transaction (collect_parameters, await_confirmation, intent_shift) route themselves with
`Command[Literal[...]]`, whose targets LangGraph reads from their return annotations.
"""

from __future__ import annotations

from typing import Literal

from graph.state import State


def after_route_turn(state: State) -> Literal["refuse", "collect_parameters", "await_confirmation", "select_intent"]:
    """A screened message is refused; otherwise dispatch on the persisted transaction's status."""
    intent = state.get("intent") or {}
    if intent.get("kind") == "refuse":
        return "refuse"
    tx = state.get("transaction")
    if tx and tx.get("status") == "collecting":
        return "collect_parameters"
    if tx and tx.get("status") == "awaiting_confirmation":
        return "await_confirmation"
    return "select_intent"


def after_select_intent(state: State) -> Literal["collect_parameters", "plan", "refuse", "respond"]:
    """A tool request starts a transaction, a question is planned, the rest is answered."""
    kind = (state.get("intent") or {}).get("kind")
    if kind == "tool":
        return "collect_parameters"
    if kind == "question":
        return "plan"
    if kind == "refuse":
        return "refuse"
    return "respond"
