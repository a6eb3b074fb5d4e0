"""plan: decide which retrieval backends answer this question (structured output, one LLM call).

The choice is a set of backend names from `tools.backends.BACKENDS`; the model fills one boolean per
backend (`use_<name>`), described by the backend's planner line, so a new backend is planned for
without touching this node.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field, create_model

from graph.context import Context
from graph.state import Plan, State
from nodes.common import ctx_of, trace, user_text
from tools.backends import BACKENDS
from tools.llm import LLMError, Usage, structured_call
from tramita.core.planner_hints import descriptions, hinted


@lru_cache(maxsize=4)
def _plan_model(names: tuple[str, ...]) -> type[BaseModel]:
    desc = descriptions()
    fields: dict[str, Any] = {f"use_{n}": (bool, Field(description=desc.get(n, BACKENDS[n].planner_description)))
                              for n in names}
    fields["reason"] = (str, Field(default="", description="one short sentence"))
    model: type[BaseModel] = create_model("PlanOut", **fields)
    return model


def plan_model() -> type[BaseModel]:
    """The planner's output schema for the registered backends."""
    return _plan_model(tuple(BACKENDS))


def sources_text() -> str:
    """The planner prompt's list of sources, one line per backend."""
    desc = descriptions()
    return "\n".join(f"- use_{n} — {desc.get(n, b.planner_description)}" for n, b in BACKENDS.items())


def plan(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """The LLM's plan united with the lexical hints; every backend when the planner fails."""
    ctx = ctx_of(runtime)
    usage = Usage()
    question = user_text(state)
    names = list(BACKENDS)
    try:
        out = structured_call("planner", plan_model(), "plan", backend=ctx.llm_backend, usage=usage, question=question,
                              sources=sources_text(), keys=", ".join(f'"use_{n}": bool' for n in names))
        chosen = [n for n in names if getattr(out, f"use_{n}", False)]
        reason = str(getattr(out, "reason", ""))
        errors: list[str] = []
    except LLMError as exc:
        # degrade, do not fail: ask every backend and let synthesis use what answers
        chosen, reason = list(names), f"planner failed: {exc}"
        errors = [str(exc)[:200]]
    added = [b for b in sorted(hinted(question)) if b in BACKENDS and b not in chosen]
    chosen += added
    if added:
        reason = f"{reason} (+{', '.join(added)} from lexical hints)".strip()
    if not chosen:
        chosen = ["docs"] if "docs" in BACKENDS else names[:1]
    chosen = [n for n in names if n in chosen]  # registry order: stable routes and traces
    p = Plan(backends=chosen, reason=reason)
    return {"plan": p, "turn": trace("plan", route=f"plan:{'+'.join(chosen)}", errors=errors, **usage.trace())}
