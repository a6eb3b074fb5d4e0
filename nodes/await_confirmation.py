"""await_confirmation: an explicit yes or no wins over everything.

The reply is classified by `tramita.core.confirmation` (docs/architecture.md, precedence rules):
its first stage is the lexicon (policies/lexicons.yaml), so a plain "sim"/"não" costs zero LLM calls
and loads no model; then e5 prototypes with a margin, under guards that can only move a reply away
from "confirm". confirm → execute_tool; reject → cancel; correct → the correction path (re-validated,
a NEW summary, so an earlier confirmation never applies to other arguments); other → intent_shift;
unsure → one constrained LLM call that shows the pending summary and may only answer a label the
guards allowed.

Two shapes are decided before the classifier, because the classifier would call them a correction:
a cancel clause followed by a new request ("cancel that, I want to reassign TCK-… to …") goes to
intent_shift, which cancels and starts the new request; and a pointer back at a replaced value ("no,
the first one after all") restores it from the transaction's `history`.
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from graph.context import Context
from graph.state import ReplacedValue, State, Transaction
from nodes.common import ctx_of, lang_of, now_for, svc, tool_context, trace, user_text
from tools.llm import LLMError, Usage
from tools.registry_models import ToolSpec
from tools.services import Services
from tramita.base.text import fold, words
from tramita.core.confirmation import LLM_REPLY_WORDS, ConfirmationResult, llm_decision, shared_classifier
from tramita.core.extraction import correction_allowed, deterministic, gazetteer
from tramita.core.intent import another_tool, synonyms_for
from tramita.core.lexicon import cancel_clause, has_correction_cue, revert_cue
from tramita.core.replies import say
from tramita.core.transactions import advance, apply_values

Next = Literal["execute_tool", "cancel", "intent_shift", "respond"]


def enum_choices(spec: ToolSpec) -> list[str]:
    """The enum values of the tool's parameters: a bare "P2" in a reply is then a new value."""
    return [str(v) for schema in spec.properties.values() for v in schema.get("enum", []) or []]


def classify_reply(text: str, tx: Transaction, spec: ToolSpec) -> ConfirmationResult:
    """The confirmation classifier on this reply, against the values the summary showed."""
    return shared_classifier().classify(text, list(tx.get("args", {}).values()), enum_choices(spec))


def names_another_action(text: str, tool: str, ctx: Context, s: Services) -> bool:
    """The reply is a clear request for a different tool ("approve it" while a rejection awaits).

    The prototypes read an action verb as assent ("approve it" is close to "pode aprovar"), so a
    confirmation the lexicon did not decide is vetoed when the registry clearly matches the reply
    to another tool; it then goes to intent_shift like any other request. Plain assent ("manda
    ver", "go for it") matches no tool clearly, so it is unaffected.
    """
    try:
        m = s.registry.match(text, ctx.user_id, ctx.tenant)
    except Exception:  # noqa: BLE001 - registry unavailable: no veto, the guards still hold
        return False
    return m.decision in ("clear", "denied") and m.best is not None and m.best != tool


def _named_earlier(tx: Transaction, spec: ToolSpec, text: str, s: Services) -> dict[str, Any]:
    """{param: earlier value} when the reply names a replaced value by part of its label ("hmm no,
    Catarina after all" after Catarina Lobo was replaced): among the few values this transaction
    held, a first name is unambiguous even where the whole directory would not be.
    """
    words_in = set(fold(text).split())
    current = tx.get("args", {})
    for h in reversed(tx.get("history") or []):
        param, value = h["param"], h["value"]
        kind = spec.properties.get(param, {}).get("x-resolve")
        if not kind or current.get(param) == value:
            continue
        names = {name for name, ident in gazetteer(s.engine).get(str(kind), []) if ident == value}
        now = {name for name, ident in gazetteer(s.engine).get(str(kind), []) if ident == current.get(param)}
        taken = {w for name in now for w in name.split()}
        if any(len(w) >= 4 and w in words_in and w not in taken for name in names for w in name.split()):
            return {param: value}
    return {}


def _revert(tx: Transaction, kind: str) -> dict[str, Any]:
    """{param: earlier value} for a pointer back ("first": the oldest replaced value of the most
    recently corrected parameter; "previous": the most recently replaced one).
    """
    history: list[ReplacedValue] = list(tx.get("history") or [])
    if not history:
        return {}
    param = history[-1]["param"]
    values = [h["value"] for h in history if h["param"] == param]
    value = values[0] if kind == "first" else values[-1]
    return {param: value} if tx.get("args", {}).get(param) != value else {}


def _apply_correction(tx: Transaction, spec: ToolSpec, values: dict[str, Any], ctx: Context, lang: str,
                      s: Services, route: str) -> Command[Next]:
    """Re-validate the changed values, remember the replaced ones, and show a new summary (or ask)."""
    tctx = tool_context(ctx, lang, s)
    before = dict(tx["args"])
    tx["args"] = dict(tx["args"])
    applied = apply_values(spec, tx, values, tctx)
    tx["history"] = [*(tx.get("history") or []),
                     *(ReplacedValue(param=k, value=before[k]) for k in applied.corrected if k in before)]
    notices = [say("refused_value", lang, error=e.message(lang)) for e in applied.errors]
    stage, more = advance(spec, tx, tctx, s.registry)
    notices += [say("refused_value", lang, error=e.message(lang)) for e in more]
    tx["updated_at"] = now_for(ctx).isoformat()
    return Command(goto="respond", update={
        "transaction": tx, "step": "confirm" if stage == "awaiting_confirmation" else "ask", "notices": notices,
        "turn": trace("await_confirmation", route=route, refused=bool(applied.errors or more))})


def await_confirmation(state: State, runtime: Runtime[Context]) -> Command[Next]:
    """Confirm -> execute_tool; reject -> cancel; a changed value -> a new summary; else intent_shift."""
    ctx = ctx_of(runtime)
    s = svc(ctx)
    text = user_text(state)
    lang = lang_of(state)
    tx = Transaction(**(state.get("transaction") or {}))
    spec = s.registry.get(tx["tool"], ctx.tenant)
    usage = Usage()

    def go(target: Next, route: str) -> Command[Next]:
        extra = {"confirmed_by": route.split(":", 1)[1]} if target == "execute_tool" else {}
        return Command(goto=target, update={"turn": trace("await_confirmation", route=route, **extra, **usage.trace())})

    split = cancel_clause(text)
    if split.cancel and split.rest:  # "cancela isso, quero reatribuir o TCK-… pro …"
        return go("intent_shift", "cancel+request")
    res = classify_reply(text, tx, spec)
    if res.label == "confirm" and (res.stage == "lexicon" or not names_another_action(text, spec.name, ctx, s)):
        return go("execute_tool", f"confirm:{res.stage}")
    if res.label == "confirm":
        return go("intent_shift", "other:another-action")
    if res.label == "reject":
        kind = revert_cue(text) if tx.get("history") and res.stage != "lexicon" else None
        if not (kind and _revert(tx, kind)):
            return go("cancel", f"reject:{res.stage}")
    # a correction: a typed value that differs from the one in the summary
    found = deterministic(spec, text, s.engine, synonyms_for(spec))
    cue = has_correction_cue(text)
    changed = {k: v for k, v in found.values.items() if str(tx["args"].get(k, "")).upper() != str(v).upper()
               and correction_allowed(spec.properties[k], text, cue, found.surfaces.get(k))}
    if changed and (res.label == "other" and res.stage == "guard" or another_tool(text, spec, ctx, s, over_current=True)):
        # "rejeita a EXP-0297" / "aprova também a EXP-0297" while approving EXP-0264 is a new request,
        # and a conditional one ("se for a EXP-0297, pode") is no clean correction either
        return go("intent_shift", "other:tool")
    if changed:
        return _apply_correction(tx, spec, changed, ctx, lang, s, "correction")
    kind = revert_cue(text) if tx.get("history") else None
    earlier = _revert(tx, kind) if kind else {}
    if earlier:  # "não, a primeira mesmo": back to a value a correction replaced
        return _apply_correction(tx, spec, earlier, ctx, lang, s, f"correction:revert-{kind}")
    earlier = _named_earlier(tx, spec, text, s) if tx.get("history") and res.label != "reject" else {}
    if earlier:  # "hmm no, Catarina after all"
        return _apply_correction(tx, spec, earlier, ctx, lang, s, "correction:revert-named")
    def ask_again(route: str) -> Command[Next]:
        tx["reprompts"] = int(tx.get("reprompts", 0)) + 1
        step = "offer_cancel" if tx["reprompts"] > ctx.max_reprompts else "reprompt"
        return Command(goto="respond", update={"transaction": tx, "step": step,
                                               "turn": trace("await_confirmation", route=route, **usage.trace())})

    if res.label == "correct":  # "sim, mas muda a prioridade": which value is not said; ask again
        return ask_again("correct:no-value")
    if res.label == "unsure" and 0 < len(words(text)) <= LLM_REPLY_WORDS:
        try:
            decision = llm_decision(text, tx.get("summary", ""), res.allowed, backend=ctx.llm_backend, usage=usage)
        except LLMError:
            # a short reply nobody could read: ask for the yes or no again (routing it as a new
            # request would only ask a failing model once more)
            return ask_again("unsure:llm-failed")
        if decision == "confirm" and not names_another_action(text, spec.name, ctx, s):
            return go("execute_tool", "confirm:llm")
        if decision == "reject":
            return go("cancel", "reject:llm")
        return go("intent_shift", "other:llm")
    return go("intent_shift", f"other:{res.stage}")
