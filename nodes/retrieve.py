"""retrieve: run the planned backends concurrently, each under its own time limit.

A backend that fails, times out or is unavailable leaves a stated gap (a context entry with its
error) instead of failing the turn; synthesis tells the user what could not be consulted.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.state import State
from nodes.common import ctx_of, svc, trace, user_text
from tools.llm import Usage

_POOL = ThreadPoolExecutor(max_workers=6, thread_name_prefix="retrieve")


TOP_PASSAGES = 3


def _docs(question: str, ctx: Context, usage: Usage) -> dict[str, Any]:
    """The top `docs_top_k` distinct documents (each by its best passage) plus the best
    TOP_PASSAGES passages overall, by score. Five passages alone are often two documents
    (a long postmortem fills the list), which hides the right document from synthesis and makes
    document recall@5 lower than what the store can find."""
    hits = svc().doc_store.retrieve_docs(question, ctx.docs_top_k, passages=TOP_PASSAGES)
    return {"backend": "docs", "items": [{"source": d, "text": p, "score": round(float(s), 4)} for d, p, s in hits]}


def _sql(question: str, ctx: Context, usage: Usage) -> dict[str, Any]:
    from tools.text_to_sql import answer_sql

    run = answer_sql(question, svc().sql_tool, today=ctx.today, backend=ctx.llm_backend, usage=usage)
    return {"backend": "sql", "query": run.sql, "rows": run.rows[:50], "error": run.error, "attempts": run.attempts}


def _graph(question: str, ctx: Context, usage: Usage) -> dict[str, Any]:
    from tools.text_to_cypher import answer_cypher

    run = answer_cypher(question, svc().graph_tool, today=ctx.today, backend=ctx.llm_backend, usage=usage)
    return {"backend": "graph", "query": run.cypher, "rows": run.rows[:50], "error": run.error, "attempts": run.attempts}


JOBS = {"use_docs": _docs, "use_sql": _sql, "use_graph": _graph}
UNSAFE = ("UnsafeSQLError", "UnsafeCypherError")


def retrieve(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    ctx = ctx_of(runtime)
    question = user_text(state)
    p = state.get("plan") or {"use_docs": True}
    usages: dict[str, Usage] = {}
    futures = {}
    for key, job in JOBS.items():
        if p.get(key):
            usages[key] = Usage()
            futures[key] = _POOL.submit(job, question, ctx, usages[key])
    contexts: list[dict[str, Any]] = []
    errors: list[str] = []
    refusals: list[str] = []
    for key, fut in futures.items():
        name = key[4:]
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
        total.calls += u.calls
        total.prompt_tokens += u.prompt_tokens
        total.completion_tokens += u.completion_tokens
        total.seconds += u.seconds
    extra: dict[str, Any] = {"refused": True, "refusal": "; ".join(refusals)} if refusals else {}
    return {"contexts": contexts, "turn": trace("retrieve", errors=errors, **extra, **total.trace())}


def render_contexts(contexts: list[dict[str, Any]], max_chars: int = 4500) -> str:
    """Context block for synthesis: each fact labelled with its citation tag."""
    parts: list[str] = []
    for c in contexts:
        if c.get("error"):
            continue
        if c["backend"] == "docs":
            for it in c.get("items", []):
                parts.append(f"[{it['source']}] {it['text']}")
        else:
            tag = "SQL" if c["backend"] == "sql" else "graph"
            rows = c.get("rows", [])
            body = json.dumps(rows[:25], ensure_ascii=False, default=str) if rows else "(no rows)"
            parts.append(f"[{tag}] query: {c.get('query', '')}\n[{tag}] rows: {body}")
    text = "\n\n".join(parts)
    return text[:max_chars]
