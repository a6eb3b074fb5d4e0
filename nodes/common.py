"""Small helpers every node uses: the current message, the language, contexts for handlers."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from langchain_core.messages import AnyMessage, HumanMessage
from langgraph.runtime import Runtime

from graph.context import Context
from graph.state import State, TurnTrace
from tools.business.base import ToolContext
from tools.registry_models import ToolSpec
from tools.services import Services
from tramita.base.text import MAX_MESSAGE_CHARS, clean


def user_text(state: State) -> str:
    """The latest human message, cleaned (NFKC, controls removed, length capped)."""
    msgs: list[AnyMessage] = state.get("messages", [])
    for m in reversed(msgs):
        if isinstance(m, HumanMessage):
            content = m.content
            if isinstance(content, list):
                content = " ".join(str(c.get("text", "")) if isinstance(c, dict) else str(c) for c in content)
            return clean(str(content)[: 4 * MAX_MESSAGE_CHARS])  # a 1 MB message costs no more than a long one
    return ""


def ctx_of(runtime: Runtime[Context]) -> Context:
    """The run's Context; `langgraph dev` may pass none, then env defaults apply."""
    ctx = getattr(runtime, "context", None)
    if isinstance(ctx, Context):
        return ctx
    if isinstance(ctx, dict):
        return Context(**{k: v for k, v in ctx.items() if k in Context.field_names() and k != "services"})
    return Context()


def svc(ctx: Context) -> Services:
    """The services of this run (databases, registry, retrieval backends), from its Context."""
    return ctx.svc


def lang_of(state: State) -> str:
    """The turn's language; Portuguese until route_turn has detected one."""
    return state.get("lang") or "pt"


def now_for(ctx: Context) -> datetime:
    """'Now' on the configured day: the real time of day, the Context's date."""
    real = datetime.now()
    return datetime.combine(ctx.today_date, real.time()).replace(microsecond=0)


def tool_context(ctx: Context, lang: str, s: Services | None = None) -> ToolContext:
    """What a business handler needs: database, user and groups, date and time, language."""
    s = s or svc(ctx)
    return ToolContext(engine=s.engine, user_id=ctx.user_id, today=ctx.today_date, now=now_for(ctx), lang=lang,
                       groups=s.registry.user_groups(ctx.user_id))


def trace(node: str, **extra: Any) -> TurnTrace:
    """A one-node turn trace; the state's reducer appends the node and adds up the counters."""
    t = TurnTrace(nodes=[node])
    t.update(extra)  # type: ignore[typeddict-item]
    return t


def tool_label(spec: ToolSpec, lang: str) -> str:
    """How a tool is named to the user: its Portuguese short description in pt, its name in en."""
    return spec.short_description or spec.name if lang == "pt" else spec.name.replace("_", " ")
