"""Running turns: a compiled graph with its checkpointer, one `invoke` per user message.

The CLI, the demo, the evals and the benchmarks all go through `Session.turn`, which is exactly the
Python usage the README shows: `graph.invoke({"messages": [...]}, config={"configurable":
{"thread_id": ...}}, context=Context(...))`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from graph.builder import compile_graph
from graph.checkpointer import open_checkpointer
from graph.context import Context
from tools.llm import check_profile
from tools.services import Services

# the node whose LLM tokens are the answer being written (the server streams the same node)
STREAM_NODE = "synthesize"
ENV_DURABILITY = "TRAMITA_CHECKPOINT_DURABILITY"
# One checkpoint per turn, written when the turn ends: a chat turn is the unit a user retries, so the
# per-step checkpoints of "async" buy nothing here and cost a third of a routing turn (threads,
# serialisation, SQLite). A turn killed midway leaves the thread as the previous turn left it; the
# user's resent message replays it, and a write replays under the same idempotency key (the
# transaction id and the arguments), so it is never applied twice.
DEFAULT_DURABILITY = "exit"


@dataclass
class TurnResult:
    """What one turn produced, as the CLI, the evals and the benches read it."""

    answer: str
    status: str
    trace: dict[str, Any]
    transaction: dict[str, Any] | None
    last_transaction: dict[str, Any] | None
    seconds: float
    plan: dict[str, Any] | None = None
    contexts: list[dict[str, Any]] | None = None
    # from the start of the turn to the first streamed answer token (`stream_turn` only; None when
    # the turn wrote no answer with the LLM)
    first_token_seconds: float | None = None


@dataclass
class AnswerToken:
    """A piece of the answer as the model writes it, `seconds` after the turn started."""

    text: str
    seconds: float


def _content_text(content: Any) -> str:
    """The text of a message chunk's content (a string, or a list of text blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content
                       if isinstance(b, str) or (isinstance(b, dict) and b.get("type") in (None, "text")))
    return ""


class Session:
    """A compiled graph and the Context its turns run with."""

    def __init__(self, graph: Any, context: Context, durability: str | None = DEFAULT_DURABILITY) -> None:
        """`graph`: compiled with a checkpointer (`open_session` does both).

        `durability`: LangGraph's checkpoint durability for every turn (default "exit", see
        `DEFAULT_DURABILITY`); "async" writes a checkpoint per step from background threads, "sync"
        per step before the next. `tramita bench` (overhead, routing_by_durability) measures each.
        """
        self.graph = graph
        self.context = context
        self.durability = durability
        self._run: dict[str, Any] = {"durability": durability} if durability else {}

    def turn(self, thread_id: str, text: str) -> TurnResult:
        """Run one user message to the end of its turn (`graph.invoke`)."""
        started = time.perf_counter()
        out = self.graph.invoke({"messages": [HumanMessage(content=text)]},
                                config={"configurable": {"thread_id": thread_id}}, context=self.context, **self._run)
        return TurnResult(answer=str(out.get("answer", "")), status=str(out.get("status", "idle")),
                          trace=dict(out.get("turn") or {}), transaction=out.get("transaction"),
                          last_transaction=out.get("last_transaction"), seconds=time.perf_counter() - started,
                          plan=out.get("plan"), contexts=out.get("contexts"))

    def stream_turn(self, thread_id: str, text: str, *, node: str = STREAM_NODE) -> Iterator[AnswerToken | TurnResult]:
        """Run one user message, yielding the answer's tokens as the model writes them, then the
        TurnResult (with `first_token_seconds`).

        It reads `graph.stream(..., stream_mode=["messages", "values"])`: "messages" carries the chat
        model's chunks (only `node`'s are the answer: structured calls are tagged nostream, and
        respond's final message is not a token), "values" the state after each step, whose last one
        is the turn's outcome. A model that does not stream gives the whole answer as one token.
        """
        started = time.perf_counter()
        first: float | None = None
        last: dict[str, Any] = {}
        for mode, payload in self.graph.stream({"messages": [HumanMessage(content=text)]},
                                               config={"configurable": {"thread_id": thread_id}},
                                               context=self.context, stream_mode=["messages", "values"], **self._run):
            if mode == "messages":
                chunk, meta = payload
                if isinstance(chunk, AIMessage) and meta.get("langgraph_node") == node:
                    piece = _content_text(chunk.content)
                    if piece:
                        now = time.perf_counter() - started
                        first = now if first is None else first
                        yield AnswerToken(piece, now)
            elif mode == "values" and isinstance(payload, dict):
                last = payload
        yield TurnResult(answer=str(last.get("answer", "")), status=str(last.get("status", "idle")),
                         trace=dict(last.get("turn") or {}), transaction=last.get("transaction"),
                         last_transaction=last.get("last_transaction"), seconds=time.perf_counter() - started,
                         plan=last.get("plan"), contexts=last.get("contexts"), first_token_seconds=first)

    def state(self, thread_id: str) -> dict[str, Any]:
        """The thread's persisted state values."""
        snap = self.graph.get_state({"configurable": {"thread_id": thread_id}})
        return dict(snap.values)


@contextmanager
def open_session(context: Context | None = None, services: Services | None = None,
                 durability: str | None = None) -> Iterator[Session]:
    """A Session over `services` (default: the context's), with their checkpointer open.

    The profile is checked first, so a wrong `--profile` fails here with the valid names rather than
    in the middle of a conversation. `durability` (default: env TRAMITA_CHECKPOINT_DURABILITY, else
    DEFAULT_DURABILITY) is LangGraph's checkpoint durability for the session's turns.
    """
    durability = durability or os.environ.get(ENV_DURABILITY) or DEFAULT_DURABILITY
    if durability not in (None, "async", "sync", "exit"):
        raise ValueError(f"{ENV_DURABILITY}={durability!r}: choose async, sync or exit")
    ctx = context or Context(services=services)
    if services is not None and ctx.services is not services:
        ctx = replace(ctx, services=services, llm_backend=ctx.llm_backend)
    check_profile(ctx.llm_backend)
    with open_checkpointer(ctx.svc.settings.checkpoint_url) as saver:
        yield Session(compile_graph(checkpointer=saver), ctx, durability)
