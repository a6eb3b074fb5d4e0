"""retrieve: run the planned backends concurrently, each under its own time limit.

A backend that fails, times out or is unavailable leaves a stated gap (a context entry with its
error) instead of failing the turn; synthesis decides whether the user needs to hear about it.
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
from tools.llm import Usage

_POOL = ThreadPoolExecutor(max_workers=6, thread_name_prefix="retrieve")
UNSAFE = ("UnsafeSQLError", "UnsafeCypherError", "SSRF_REFUSED")


def retrieve(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """One context per planned backend, run in parallel; errors become gaps, never a crashed turn."""
    ctx = ctx_of(runtime)
    question = user_text(state)
    planned = [b for b in (state.get("plan") or {}).get("backends", ["docs"]) if b in BACKENDS]
    usages: dict[str, Usage] = {}
    futures = {}
    for name in planned:
        usages[name] = Usage()
        call = BackendCall(question=question, today=ctx.today, profile=ctx.llm_backend, services=svc(ctx),
                           usage=usages[name], top_k=ctx.docs_top_k)
        futures[name] = _POOL.submit(BACKENDS[name].run, call)
    contexts: list[dict[str, Any]] = []
    errors: list[str] = []
    refusals: list[str] = []
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
    total = Usage()
    for u in usages.values():
        total.merge(u)
    extra: dict[str, Any] = {"refused": True, "refusal": "; ".join(refusals)} if refusals else {}
    return {"contexts": contexts, "turn": trace("retrieve", errors=errors, **extra, **total.trace())}
