"""Graph state.

Everything that must survive between turns lives here and is persisted by the checkpointer: the
open transaction, the last finished one (for audit), and the messages. Per-turn scratch values
(`intent`, `plan`, `contexts`, `turn`) are reset by `route_turn` at the start of every run, so a
turn never reads a previous turn's routing decision.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict  # not typing's: pydantic needs it on 3.11 for Studio's schemas

Status = Literal["idle", "collecting", "awaiting_confirmation"]


class ReplacedValue(TypedDict):
    """A value a correction replaced, kept so "no, the first one after all" can restore it."""

    param: str
    value: Any


class Transaction(TypedDict, total=False):
    """A business tool in progress across turns."""

    id: str  # uuid4; with the argument hash it forms the idempotency key
    tool: str
    version: int
    status: Status
    args: dict[str, Any]  # validated, canonical values only
    pending: list[str]  # required parameters still missing
    summary: str  # the exact summary shown to the user
    confirmation_hash: str  # hash of (tool, args) that the summary showed
    reprompts: int
    started_at: str
    updated_at: str
    history: list[ReplacedValue]  # values replaced by corrections, oldest first (absent: none yet)
    # parameter -> the words that named it ("ele", "pra mim"): the value came from a thread or user
    # reference (tramita/core/thread_refs.py); the summary names it and a confirmation is always asked
    resolved: dict[str, str]


class LastTransaction(TypedDict, total=False):
    """Outcome of the most recent transaction that ended (kept for audit and the evals)."""

    id: str
    tool: str
    args: dict[str, Any]
    outcome: Literal["executed", "cancelled", "abandoned", "expired", "failed", "disabled"]
    message: str
    target_id: str | None
    at: str


IntentKind = Literal["tool", "question", "none", "refuse"]
# What respond asks next: a parameter, the confirmation, the same again, or an offer to cancel.
# "ready" only ever routes collect_parameters to execute_tool.
Step = Literal["ask", "confirm", "ready", "reprompt", "offer_cancel"]


class Intent(TypedDict, total=False):
    """What a message is, as select_intent / intent_shift / the safety screen classify it.

    A classification only: where the turn goes next is decided by the routers and by the nodes'
    `Command[Literal[...]]` returns, never signalled through this field.
    """

    kind: IntentKind
    tool: str
    score: float
    reason: str


class Plan(TypedDict, total=False):
    """Which retrieval backends answer this question (names of `tools.backends.BACKENDS`)."""

    backends: list[str]
    reason: str
    parts: dict[str, str]  # backend -> the part of the question it answers (absent: the whole question)
    standby: str  # answers a planned backend's part when its query fails (`Route.standby`); absent: none


class TurnTrace(TypedDict, total=False):
    """Per-turn trace: how the turn was routed and what it cost. Evals and benches read it."""

    route: str
    nodes: list[str]
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    llm_seconds: float
    executed_tool: str | None
    refused: bool
    refusal: str | None
    errors: list[str]
    # present only when an LLM call reports them (older traces lack them):
    cached_tokens: int  # prompt tokens whose KV state was reused, not evaluated (tools.prefix_cache)
    first_token_s: float  # from the start of the answer's LLM call to its first token
    # present only on a turn whose reply confirmed a pending write: which stage of
    # tramita.core.confirmation decided it ("lexicon", "prototype", "llm"); execute_tool overwrites
    # `route`, so this is what tells an eval the write followed an explicit confirmation
    confirmed_by: str
    # the planner's vocabulary match (tramita.core.planner_hints.Route.trace): scores, decision
    plan_match: dict[str, Any]
    # synthesis removed something from the model's answer (a label, exception text, a citation)
    sanitised: bool
    # the backend that answered after a planned backend's query failed (`Plan.standby`)
    standby: str


def merge_trace(old: TurnTrace | None, new: TurnTrace | None) -> TurnTrace:
    """Reducer: counters add up, node lists append, scalars take the latest value.

    An update carrying `route == "__reset__"` starts a fresh trace (done once per turn by
    route_turn), which keeps the trace per turn while nodes return partial updates only.
    """
    if new is None:
        return old or TurnTrace()
    if old is None or new.get("route") == "__reset__":
        old = TurnTrace(route="", nodes=[], llm_calls=0, prompt_tokens=0, completion_tokens=0,
                        llm_seconds=0.0, executed_tool=None, refused=False, refusal=None, errors=[])
        if new.get("route") == "__reset__":
            new = TurnTrace(**{k: v for k, v in new.items() if k != "route"})  # type: ignore[typeddict-item]
    merged: TurnTrace = TurnTrace(**old)
    counters: tuple[Literal["llm_calls", "prompt_tokens", "completion_tokens", "cached_tokens"], ...] = (
        "llm_calls", "prompt_tokens", "completion_tokens", "cached_tokens")
    for key in counters:
        if key in new:
            merged[key] = int(old.get(key, 0) or 0) + int(new.get(key, 0) or 0)
    if "llm_seconds" in new:
        merged["llm_seconds"] = float(old.get("llm_seconds", 0.0)) + float(new["llm_seconds"])
    if "nodes" in new:
        merged["nodes"] = [*old.get("nodes", []), *new["nodes"]]
    if "errors" in new:
        merged["errors"] = [*old.get("errors", []), *new["errors"]]
    latest = {k: v for k, v in new.items() if k in ("route", "executed_tool", "refused", "refusal", "first_token_s",
                                                    "confirmed_by", "plan_match", "sanitised", "standby")}
    merged.update(latest)  # type: ignore[typeddict-item]  # the keys are TurnTrace's own, filtered above
    return merged


def add_contexts(old: list[dict[str, Any]] | None, new: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Reducer for retrieval contexts; `None` clears them (start of a turn)."""
    if new is None:
        return []
    return [*(old or []), *new]


def merge_entities(old: dict[str, str] | None, new: dict[str, str] | None) -> dict[str, str]:
    """Reducer of `entities`: per referenced table, a later mention replaces an earlier one."""
    return {**(old or {}), **(new or {})}


def add_notices(old: list[str] | None, new: list[str] | None) -> list[str]:
    """Reducer for notices; a list starting with "__reset__" replaces them (start of a turn)."""
    if new is None:
        return []
    if new and new[0] == "__reset__":
        return list(new[1:])
    return [*(old or []), *new]


class InputState(TypedDict):
    """What a caller sends: the new user message(s)."""

    messages: Annotated[list[AnyMessage], add_messages]


class OutputState(TypedDict, total=False):
    """What a caller gets back."""

    messages: Annotated[list[AnyMessage], add_messages]
    answer: str
    status: Status
    transaction: Transaction | None
    last_transaction: LastTransaction | None
    turn: Annotated[TurnTrace, merge_trace]
    plan: Plan | None
    contexts: Annotated[list[dict[str, Any]], add_contexts]


class State(InputState, total=False):
    """The whole persisted state of a thread.

    `status` is written by respond alone, derived from `transaction` (its one source of truth), so
    callers can read it without looking inside the transaction.
    """

    answer: str
    status: Status
    lang: str
    transaction: Transaction | None
    last_transaction: LastTransaction | None
    turn: Annotated[TurnTrace, merge_trace]
    intent: Intent | None
    plan: Plan | None
    contexts: Annotated[list[dict[str, Any]], add_contexts]
    resume: bool  # a digression answered mid-transaction: respond re-asks the pending step
    notices: Annotated[list[str], add_notices]  # sentences earlier nodes of this turn want said
    step: Step | None  # what respond should ask next
    # referenced table -> the last id of it the thread mentioned (values filled, results, ids written);
    # resolves "ele" / "it" (tramita/core/thread_refs.py)
    entities: Annotated[dict[str, str], merge_entities]
