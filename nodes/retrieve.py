"""retrieve: run the planned backends in stages, each stage's backends concurrently, each under its own time limit.

The stages follow the planner policy's `chain` (documents, then the graph, then the API and the
database), or the question's order when a later part points back at an earlier one: a later
backend gets what the earlier ones found (`Finding`), so a question whose second part is about
the first part's answer is answered in that order. A backend answers its own part of
the question when the planner split it (`Plan.parts`). A backend that fails, times out or is
unavailable leaves a stated gap (a context entry with its error) instead of failing the turn;
synthesis decides whether the user needs to hear about it. When a planned backend fails to query,
the plan's standby (the best-matched unplanned backend that writes its own query) answers its part
instead: the database and the graph hold many of the same records.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.state import State
from nodes.common import ctx_of, svc, trace, user_text
from tools.backends import BACKENDS, BackendCall
from tools.backends.base import (
    PART_JOINER,
    Finding,
    asks_each_row,
    demonstrative_nouns,
    part_position,
    pointing_split,
)
from tools.llm import Usage
from tools.services import Services
from tramita.base.text import fold, tokens
from tramita.core.planner_hints import stages

_POOL = ThreadPoolExecutor(max_workers=6, thread_name_prefix="retrieve")
UNSAFE = ("UnsafeSQLError", "UnsafeCypherError", "SSRF_REFUSED")
# a query the store ran and rejected (a wrong table, property or syntax), or one that reads none of
# the records the question asks for: another store's query may answer; a store that is down or a
# model that fails is a gap to tell, not a reason to ask elsewhere
QUERY_FAILED = ("CypherExecutionError", "SQLExecutionError", "MissedLabelError")


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


def _result(name: str, fut: Any, timeout: float) -> dict[str, Any]:
    """A backend's context, or a stated gap when it timed out or raised."""
    try:
        return dict(fut.result(timeout=timeout))
    except FutureTimeout:
        return {"backend": name, "error": f"timed out after {timeout:.0f} s"}
    except Exception as exc:  # noqa: BLE001 - stated gap, never a crashed turn
        return {"backend": name, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def _failed_query(contexts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first context of a backend that writes its own query and whose store rejected it
    (`QUERY_FAILED`); None when every such backend answered. Not a query refused as unsafe (it
    stays refused), a timeout (it would be waited on twice), a store that is down or a model that
    fails: the other store would answer a question about data it does not hold.
    """
    for c in contexts:
        error = str(c.get("error") or "")
        if error.startswith(QUERY_FAILED) and getattr(BACKENDS.get(str(c.get("backend"))), "stands_in", False):
            return c
    return None


def reads(question: str, parts: Mapping[str, str], reader: str, source: str) -> bool:
    """Whether backend `reader` builds on what `source` found: yes, unless both answer parts of the
    question (`Plan.parts`) and the source's part comes after the reader's.

    Why: a later part points back at an earlier one ("…, and how many tickets does that person
    have?"), never forward. "Quem comandou o INC-…? E algum serviço … foi atingido nele?" runs the
    graph's part first (the chain's order); read by the database's part, its services replaced
    the incident the first part names.
    """
    if reader not in parts or source not in parts:
        return True
    at = {n: part_position(question, parts[n]) for n in (reader, source)}
    return at[reader] < 0 or at[source] < 0 or at[source] < at[reader]


def own_chain(name: str, text: str, services: Services | None = None) -> tuple[str, str] | None:
    """(the pieces before, the pieces from the first that points back) of the text a backend that
    aggregates over what it is given answers, when a later piece of it points back at an earlier
    one of it ("Who is X's manager, and how many expenses did that manager approve?", both the
    database's); None otherwise.

    Why: one query cannot find the manager and count her approvals; asked as one question, the
    fill named a manager of its own making. A piece that asks a column of each row ("e de que time
    é cada um?") is the same query's. Asked in turn, the second reads the first's rows, as it
    reads another backend's.
    """
    if not getattr(BACKENDS.get(name), "aggregates", False) or PART_JOINER in text:
        return None
    pieces, first = pointing_split(text)
    rest = pieces[first:] if first else []
    if not rest or asks_each_row(rest[0]):  # "… e de que time é cada um?": a column of the same rows, one query
        return None
    at = text.find(rest[0])
    head = re.sub(r"(?:[\s,;?]|\b(?:e|and|mas|but)\b)+$", "", text[:at]) if at > 0 else ""
    # "that manager", "essa pessoa": a noun after a demonstrative, one the piece before does not
    # put before a name ("e qual o orçamento desse projeto?" after "quem lidera o projeto X" is
    # about X); and the piece asks something of its own ("how many did that person approve?" after
    # "who approved the most" is the same query's count)
    nouns = demonstrative_nouns(rest[0])
    if not head or not nouns or set(nouns) & _before_names(head) or not _names_own(name, rest[0], nouns, services):
        return None
    return head, text[at:]


def _before_names(text: str) -> set[str]:
    """The folded words of `text` right before a capitalised word or a code ("projeto Atlas",
    "incident INC-7"): the kind of a thing it names.
    """
    words = re.findall(r"[\w-]+", text)
    return {fold(w) for w, after in zip(words, words[1:], strict=False)
            if after[:1].isupper() or any(ch.isdigit() for ch in after)}


def _names_own(name: str, piece: str, nouns: list[str], services: Services | None) -> bool:
    """Whether `piece`, without its demonstratives and their nouns, names something backend `name`
    holds (its `names_nothing` hook says no); True for a backend without the hook, or no services.
    """
    hook = getattr(BACKENDS.get(name), "names_nothing", None)
    if hook is None or services is None:
        return True
    rest = " ".join(w for w in tokens(piece) if w not in nouns)
    try:
        return not hook(services, rest)
    except Exception:  # noqa: BLE001 - a hook that fails keeps the question whole
        return False


def retrieve(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """One context per planned backend, stage by stage (each stage in parallel); errors become
    gaps, never a crashed turn. When a planned backend that writes its own query fails to query,
    the plan's standby (the best-matched unplanned one that does too) answers that backend's part
    with what the stages found; the failed context stays for the trace, marked `replaced_by` when
    the standby answered.
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
    ordered = stages(planned, parts, question)

    def call_for(name: str, text: str, feeds: bool, own: tuple[Finding, ...] = ()) -> BackendCall:
        usage = usages.setdefault(name, Usage())
        read = tuple(f for f in given if reads(question, parts, name, f.backend) and f not in own)
        return BackendCall(question=text, today=ctx.today, profile=ctx.llm_backend, services=svc(ctx),
                           usage=usage, top_k=ctx.docs_top_k, whole=question, given=(*read, *own), feeds=feeds)

    def collect(name: str, fut: Any) -> list[Finding]:
        contexts.append(_result(name, fut, ctx.backend_timeout_seconds))
        if contexts[-1].get("error"):
            errors.append(f"{name}: {contexts[-1]['error']}")
            if str(contexts[-1]["error"]).startswith(UNSAFE):  # the read-only guard refused a query
                refusals.append(f"{name}: {str(contexts[-1]['error'])[:200]}")
        found = findings(contexts[-1])
        given.extend(found)
        return found

    for i, stage in enumerate(ordered):
        later = i < len(ordered) - 1
        chained = {name: pair for name in stage
                   if (pair := own_chain(name, parts.get(name, question), svc(ctx))) is not None}
        futures = {name: _POOL.submit(BACKENDS[name].run, call_for(name, chained[name][0] if name in chained
                                                                   else parts.get(name, question),
                                                                   later or name in chained))
                   for name in stage}
        heads = {name: collect(name, fut) for name, fut in futures.items()}
        for name, (_, tail) in chained.items():  # its own piece that points back, over what it found
            collect(name, _POOL.submit(BACKENDS[name].run, call_for(name, tail, later, tuple(heads[name]))))
    standby = plan.get("standby")
    extra: dict[str, Any] = {}
    failed = _failed_query(contexts) if standby in BACKENDS and standby not in planned else None
    if failed is not None and standby is not None:
        text = parts.get(str(failed["backend"]), question)  # the failed backend's part, with what was found
        collect(standby, _POOL.submit(BACKENDS[standby].run, call_for(standby, text, False)))
        extra["standby"] = standby
        if not contexts[-1].get("error"):  # else the planned backend's gap is still the one to tell
            failed["replaced_by"] = standby
    total = Usage()
    for u in usages.values():
        total.merge(u)
    if refusals:
        extra |= {"refused": True, "refusal": "; ".join(refusals)}
    return {"contexts": contexts, "turn": trace("retrieve", errors=errors, **extra, **total.trace())}
