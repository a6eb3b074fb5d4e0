"""plan: decide which retrieval backends answer this question, with an LLM call only when needed.

The question is first matched against each backend's own vocabulary (`tramita.core.planner_hints`:
the semantic model, the graph patterns, the document titles and headings, the API operations, with
e5 and the registry's margin rule). Backends clearly above the rest are the plan, with no LLM call;
a backend is never added "just in case". A close match (or none) takes the best candidate; with
`matching.llm_when_close` on, it goes to the LLM planner instead, which chooses among the close
candidates (or all backends) under a schema of one boolean per candidate (`use_<name>`), described
by the backend's planner line, so a new backend is planned for without touching this node. It is
off by default: on both question sets the 1.5B planner's choice matched the needed sources less
often than the best match did, and it cost a call.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field, create_model

from graph.context import Context
from graph.state import Plan, State
from nodes.common import ctx_of, svc, trace, user_text
from tools.backends import BACKENDS
from tools.llm import LLMError, Usage, structured_call
from tramita.base.logmask import get_logger
from tramita.core.planner_hints import Route, description, llm_when_close, route

log = get_logger("tramita.planner")


@lru_cache(maxsize=16)
def _plan_model(names: tuple[str, ...]) -> type[BaseModel]:
    # a key the model leaves out is "not needed" (a small model often omits the false ones); no
    # free-text "reason": at 10 tokens/s it cost seconds, and a long one was cut at max_tokens
    fields: dict[str, Any] = {f"use_{n}": (bool, Field(default=False, description=description(n))) for n in names}
    model: type[BaseModel] = create_model("PlanOut", **fields)
    return model


def plan_model(names: tuple[str, ...] | None = None) -> type[BaseModel]:
    """The LLM planner's output schema for `names` (default: every registered backend)."""
    return _plan_model(tuple(names) if names is not None else tuple(BACKENDS))


def sources_text(names: tuple[str, ...] | None = None) -> str:
    """The planner prompt's list of sources, one line per backend."""
    return "\n".join(f"- use_{n} — {description(n)}" for n in (names if names is not None else tuple(BACKENDS)))


def llm_plan(question: str, candidates: list[str], *, backend: str | None, usage: Usage) -> tuple[list[str], str]:
    """The LLM's choice among `candidates` (in registry order), with a fixed reason; raises LLMError."""
    names = tuple(n for n in BACKENDS if n in candidates)
    out = structured_call("planner", plan_model(names), "plan", backend=backend, usage=usage, question=question,
                          sources=sources_text(names), keys=", ".join(f'"use_{n}": bool' for n in names))
    return [n for n in names if getattr(out, f"use_{n}", False)], "the LLM planner chose among the close backends"


def decide(matched: Route | None, ask: Callable[[list[str]], tuple[list[str], str]] | None,
           ) -> tuple[list[str], str, list[str]]:
    """(backends in registry order, reason, errors) from the vocabulary match; `ask(candidates)` is
    the LLM planner for the close cases (None: the best candidate, as when the LLM fails).
    """
    names = list(BACKENDS)
    errors: list[str] = []
    if matched is not None and matched.decision == "clear":
        chosen, reason = matched.chosen, matched.reason
    else:
        candidates = matched.candidates if matched is not None and matched.candidates else names
        required = matched.required if matched is not None else []
        # without the LLM (or when it fails): each part's top source, else the best match; never
        # every backend: a wrong extra source costs a query-writing call and puts unrelated rows
        # in front of synthesis
        best = [n for n in (matched.best if matched is not None else []) if n in candidates] or candidates[:1]
        if len(candidates) == 1:
            chosen, reason = candidates, "the only candidate"
        elif matched is not None and matched.alone:
            chosen, reason = list(matched.alone), "close: the backend its words require counts the answer itself"
        elif ask is None:
            chosen = best
            reason = "close: each part's best match (no LLM planner)" if len(chosen) > 1 else \
                "close: the best match (no LLM planner)"
        else:
            try:
                chosen, reason = ask(candidates)
                chosen = [n for n in chosen if n in candidates]
            except LLMError as exc:
                chosen, reason = best, f"planner failed: {exc}"
                errors.append(str(exc)[:200])
            if candidates[0] not in chosen:
                # the 1.5B planner often names one source only, and not always the best match: the
                # best match stays in a close plan (the synthesis ignores a source that has nothing)
                chosen, reason = [candidates[0], *chosen], f"{reason} (+ the best match)".strip()
        # a question that names a policy, a rule, a deadline or a process reaches the documents
        chosen = [*chosen, *(n for n in required if n not in chosen)]
    follow = matched.aggregator(chosen) if matched is not None else None
    if follow is not None:  # a source that answers only the relation: one that aggregates follows it
        chosen, reason = [*chosen, follow], f"{reason}; + {follow}, to aggregate over the relation's rows"
    lead = matched.relation(chosen) if matched is not None else None
    if lead is not None:  # an aggregate over a relation only another source holds: that source first
        chosen, reason = [lead, *chosen], f"{reason}; + {lead}, for the relation the aggregate is over"
    return [n for n in names if n in chosen], reason, errors  # registry order: stable routes and traces


def plan(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """The vocabulary match when it is clear; else the best-matching candidate, or (policy on) the
    LLM among the close backends, falling back to the best candidate (never every backend).
    """
    ctx = ctx_of(runtime)
    usage = Usage()
    question = user_text(state)
    errors: list[str] = []
    matched: Route | None = None
    try:
        matched = route(question, svc(ctx))
    except Exception as exc:  # noqa: BLE001 - embeddings or stores down: the LLM plans over every backend
        log.warning("planner: vocabulary match unavailable: %s", exc)
        errors.append(f"vocabulary match: {type(exc).__name__}: {str(exc)[:160]}")
    extra: dict[str, Any] = {"plan_match": matched.trace()} if matched is not None else {}

    def ask(candidates: list[str]) -> tuple[list[str], str]:
        return llm_plan(question, candidates, backend=ctx.llm_backend, usage=usage)

    chosen, reason, failed = decide(matched, ask if llm_when_close() else None)
    p = Plan(backends=chosen, reason=reason, parts=matched.parts(chosen) if matched is not None else {})
    standby = matched.standby(chosen) if matched is not None else None
    if standby is not None:
        p["standby"] = standby
    return {"plan": p, "turn": trace("plan", route=f"plan:{'+'.join(chosen)}", errors=[*errors, *failed], **extra,
                                     **usage.trace())}
