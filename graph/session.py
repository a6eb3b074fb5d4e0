"""Running turns: a compiled graph with its checkpointer, one `invoke` per user message.

The CLI, the demo, the evals and the benchmarks all go through `Session.turn`, which is exactly the
Python usage the README shows: `graph.invoke({"messages": [...]}, config={"configurable":
{"thread_id": ...}}, context=Context(...))`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from langchain_core.messages import HumanMessage

from graph.builder import compile_graph
from graph.checkpointer import open_checkpointer
from graph.context import Context
from tools.llm import check_profile
from tools.services import Services


@dataclass
class TurnResult:
    answer: str
    status: str
    trace: dict[str, Any]
    transaction: dict[str, Any] | None
    last_transaction: dict[str, Any] | None
    seconds: float
    plan: dict[str, Any] | None = None
    contexts: list[dict[str, Any]] | None = None


class Session:
    def __init__(self, graph: Any, context: Context) -> None:
        self.graph = graph
        self.context = context

    def turn(self, thread_id: str, text: str) -> TurnResult:
        started = time.perf_counter()
        out = self.graph.invoke({"messages": [HumanMessage(content=text)]},
                                config={"configurable": {"thread_id": thread_id}}, context=self.context)
        return TurnResult(answer=str(out.get("answer", "")), status=str(out.get("status", "idle")),
                          trace=dict(out.get("turn") or {}), transaction=out.get("transaction"),
                          last_transaction=out.get("last_transaction"), seconds=time.perf_counter() - started,
                          plan=out.get("plan"), contexts=out.get("contexts"))

    def state(self, thread_id: str) -> dict[str, Any]:
        snap = self.graph.get_state({"configurable": {"thread_id": thread_id}})
        return dict(snap.values)


@contextmanager
def open_session(context: Context | None = None, services: Services | None = None) -> Iterator[Session]:
    """A Session over `services` (default: the context's), with their checkpointer open.

    The profile is checked first, so a wrong `--profile` fails here with the valid names rather than
    in the middle of a conversation.
    """
    ctx = context or Context(services=services)
    if services is not None and ctx.services is not services:
        ctx = replace(ctx, services=services, llm_backend=ctx.llm_backend)
    check_profile(ctx.llm_backend)
    with open_checkpointer(ctx.svc.settings.checkpoint_url) as saver:
        yield Session(compile_graph(checkpointer=saver), ctx)
