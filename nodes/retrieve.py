"""retrieve: run the planned backends in stages, each stage's backends concurrently, each under its own time limit.

The stages follow the planner policy's `chain` (documents, then the graph, then the API and the
database): a later backend gets what the earlier ones found (`Finding`), so a question whose second
part is about the first part's answer is answered in that order. A backend answers its own part of
the question when the planner split it (`Plan.parts`). A backend that fails, times out or is
unavailable leaves a stated gap (a context entry with its error) instead of failing the turn;
synthesis decides whether the user needs to hear about it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.state import State
from nodes.common import ctx_of, svc, trace, user_text
from tools.backends import BACKENDS, BackendCall
from tools.backends.base import Finding
from tools.llm import Usage
from tramita.core.planner_hints import stages

_POOL = ThreadPoolExecutor(max_workers=6, thread_name_prefix="retrieve")
UNSAFE = ("UnsafeSQLError", "UnsafeCypherError", "SSRF_REFUSED")


def findings(context: dict[str, Any]) -> list[Finding]:
    """What a finished backend hands on to the later stages (its `findings` hook; none without one)."""
    backend = BACKENDS.get(str(context.get("backend")))
    hook = getattr(backend, "findings", None)
    if hook is None or context.get("error"):
        return []
    try:
        return list(hook(context))
    except Exception:  # noqa: BLE001 - nothing handed on: the later backend answers from the question alone
        return []


def retrieve(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """One context per planned backend, stage by stage (each stage in parallel); errors become
    gaps, never a crashed turn.
    """
    ctx = ctx_of(runtime)
    question = user_text(state)
    plan = state.get("plan") or {}
    planned = [b for b in plan.get("backends", ["docs"]) if b in BACKENDS]
    parts = plan.get("parts") or {}
    usages: dict[str, Usage] = {}
    contexts: list[dict[str, Any]] = []
    errors: list[str] = []
    refusals: list[str] = []
    given: list[Finding] = []
    ordered = stages(planned)
    for i, stage in enumerate(ordered):
        futures = {}
        for name in stage:
            usages[name] = Usage()
            call = BackendCall(question=parts.get(name, question), today=ctx.today, profile=ctx.llm_backend,
                               services=svc(ctx), usage=usages[name], top_k=ctx.docs_top_k, whole=question,
                               given=tuple(given), feeds=i < len(ordered) - 1)
            futures[name] = _POOL.submit(BACKENDS[name].run, call)
        for name, fut in futures.items():
            try:
                contexts.append(fut.result(timeout=ctx.backend_timeout_seconds))
            except FutureTimeout:
                contexts.append({"backend": name, "error": f"timed out after {ctx.backend_timeout_seconds:.0f} s"})
            except Exception as exc:  # noqa: BLE001 - stated gap, never a crashed turn
                contexts.append({"backend": name, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
            if contexts[-1].get("error"):
                errors.append(f"{name}: {contexts[-1]['error']}")
                if str(contexts[-1]["error"]).startswith(UNSAFE):  # the read-only guard refused a query
                    refusals.append(f"{name}: {str(contexts[-1]['error'])[:200]}")
            given += findings(contexts[-1])
    total = Usage()
    for u in usages.values():
        total.merge(u)
    extra: dict[str, Any] = {"refused": True, "refusal": "; ".join(refusals)} if refusals else {}
    return {"contexts": contexts, "turn": trace("retrieve", errors=errors, **extra, **total.trace())}
