"""The whole graph at a glance (docs/architecture.md's diagram, node for node).

START → route_turn ─┬─ refuse ───────────────────────────────────────────→ respond → END
                    ├─ collect_parameters ─┬─ execute_tool ───────────────→ respond
                    │                      ├─ intent_shift (filled nothing)
                    │                      └─ respond (ask next / ask to confirm)
                    ├─ await_confirmation ─┬─ execute_tool (explicit yes, hash matches)
                    │                      ├─ cancel (no)
                    │                      ├─ respond (correction → new summary)
                    │                      └─ intent_shift (anything else)
                    └─ select_intent ──────┬─ collect_parameters (tool)
                                           ├─ plan → retrieve → synthesize → respond (question)
                                           └─ refuse / respond
intent_shift ─┬─ cancel │ collect_parameters (another tool) │ plan (digression, tx kept)
              └─ refuse │ respond (re-prompt, bounded)
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from graph.context import Context
from graph.routers import after_route_turn, after_select_intent
from graph.state import InputState, OutputState, State
from nodes.await_confirmation import await_confirmation
from nodes.cancel import cancel
from nodes.collect_parameters import collect_parameters
from nodes.execute_tool import execute_tool
from nodes.intent_shift import intent_shift
from nodes.plan import plan
from nodes.refuse import refuse
from nodes.respond import respond
from nodes.retrieve import retrieve
from nodes.route_turn import route_turn
from nodes.select_intent import select_intent
from nodes.synthesize import synthesize


def build_graph() -> StateGraph[Any, Any, Any, Any]:
    """The state graph, uncompiled: nodes, then edges in the order of the diagram above."""
    g: StateGraph[Any, Any, Any, Any] = StateGraph(State, context_schema=Context, input_schema=InputState,
                                                   output_schema=OutputState)
    for name, fn in [("route_turn", route_turn), ("select_intent", select_intent),
                     ("collect_parameters", collect_parameters), ("await_confirmation", await_confirmation),
                     ("intent_shift", intent_shift), ("execute_tool", execute_tool), ("cancel", cancel),
                     ("refuse", refuse), ("plan", plan), ("retrieve", retrieve), ("synthesize", synthesize),
                     ("respond", respond)]:
        g.add_node(name, fn)
    g.add_edge(START, "route_turn")
    g.add_conditional_edges("route_turn", after_route_turn)
    g.add_conditional_edges("select_intent", after_select_intent)
    # collect_parameters, await_confirmation and intent_shift return Command[Literal[...]]:
    # their edges come from their return annotations
    g.add_edge("plan", "retrieve")
    g.add_edge("retrieve", "synthesize")
    g.add_edge("synthesize", "respond")
    for name in ("execute_tool", "cancel", "refuse"):
        g.add_edge(name, "respond")
    g.add_edge("respond", END)
    return g


def compile_graph(checkpointer: Any = None) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compiled graph; `langgraph dev` passes no checkpointer and supplies its own persistence."""
    return build_graph().compile(checkpointer=checkpointer, name="tramita")
