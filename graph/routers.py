"""Routers: small pure functions over the state that return typed Literals.

They read only what the node before them decided, so the builder reads as the diagram in
DESIGN.md and every branch can be unit-tested without a model.
"""

from __future__ import annotations

from typing import Literal

from graph.state import State


def after_route_turn(state: State) -> Literal["refuse", "collect_parameters", "await_confirmation", "select_intent"]:
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
    kind = (state.get("intent") or {}).get("kind")
    if kind == "tool":
        return "collect_parameters"
    if kind == "question":
        return "plan"
    if kind == "refuse":
        return "refuse"
    return "respond"


def after_collect(state: State) -> Literal["execute_tool", "intent_shift", "respond"]:
    if (state.get("intent") or {}).get("kind") == "shift":
        return "intent_shift"
    if state.get("step") == "ready":
        return "execute_tool"
    return "respond"


def after_confirmation(state: State) -> Literal["execute_tool", "cancel", "intent_shift", "respond"]:
    kind = (state.get("intent") or {}).get("kind")
    if kind == "confirm":
        return "execute_tool"
    if kind == "cancel":
        return "cancel"
    if kind == "shift":
        return "intent_shift"
    return "respond"


def after_intent_shift(state: State) -> Literal["cancel", "collect_parameters", "plan", "refuse", "respond"]:
    kind = (state.get("intent") or {}).get("kind")
    if kind == "cancel":
        return "cancel"
    if kind == "tool":
        return "collect_parameters"
    if kind == "question":
        return "plan"
    if kind == "refuse":
        return "refuse"
    return "respond"
