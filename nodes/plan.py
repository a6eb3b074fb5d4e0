"""plan: decide which backends answer this question (structured output, one LLM call)."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from graph.context import Context
from graph.state import Plan, State
from nodes.common import ctx_of, trace, user_text
from tools.llm import LLMError, Usage, structured_call
from tramita.planner_hints import hinted


class PlanOut(BaseModel):
    use_sql: bool = Field(description="amounts, dates, counts, statuses of expenses, budgets, incidents, tickets, people")
    use_graph: bool = Field(description="on-call, dependency chains, downstream impact, reporting lines")
    use_docs: bool = Field(description="policy rules, limits, SLAs, runbooks, postmortems, handbooks")
    reason: str = Field(default="", description="one short sentence")


def plan(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    ctx = ctx_of(runtime)
    usage = Usage()
    question = user_text(state)
    try:
        out = structured_call("planner", PlanOut, "plan", backend=ctx.llm_backend, usage=usage, question=question)
        p = Plan(use_docs=out.use_docs, use_sql=out.use_sql, use_graph=out.use_graph, reason=out.reason)
        errors: list[str] = []
    except LLMError as exc:
        # degrade, do not fail: ask every backend and let synthesis use what answers
        p = Plan(use_docs=True, use_sql=True, use_graph=True, reason=f"planner failed: {exc}")
        errors = [str(exc)[:200]]
    hints = hinted(question)
    added = [b for b in sorted(hints) if not p.get(f"use_{b}")]  # type: ignore[misc]
    for b in added:
        p[f"use_{b}"] = True  # type: ignore[literal-required]
    if added:
        p["reason"] = f"{p.get('reason', '')} (+{', '.join(added)} from lexical hints)".strip()
    if not (p["use_docs"] or p["use_sql"] or p["use_graph"]):
        p["use_docs"] = True
    route = "+".join(k[4:] for k in ("use_docs", "use_sql", "use_graph") if p[k])  # type: ignore[literal-required]
    return {"plan": p, "turn": trace("plan", route=f"plan:{route}", errors=errors, **usage.trace())}
