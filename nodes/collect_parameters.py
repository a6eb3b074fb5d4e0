"""collect_parameters: start a transaction or fill its pending parameters.

Precedence (docs/architecture.md): typed values are found deterministically in the message; only parameters
still pending go to the LLM extractor, which sees the pending ones alone. A turn that fills at least
one valid value (or whose value was refused with a reason) stays in the transaction and skips the
intent-shift check; a turn that fills nothing goes to intent_shift. Free-text values are accepted
only when the message is neither a question nor a clear request for another tool, and never from
the message that starts the transaction (that message names the action, not a reason).
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from graph.context import Context
from graph.state import State, Transaction
from nodes.common import ctx_of, lang_of, now_for, svc, tool_context, trace, user_text
from tools.business.base import ToolError
from tools.llm import LLMError, Usage, structured_call
from tools.registry_models import ToolSpec
from tramita.base.faults import crash_point
from tramita.base.text import is_question
from tramita.core.extraction import (
    correction_allowed,
    describe_pending,
    deterministic,
    extraction_schema,
    grounded,
    kind_of,
)
from tramita.core.intent import another_tool, synonyms_for
from tramita.core.lexicon import classify as lexicon
from tramita.core.lexicon import has_correction_cue, mentions_cancel
from tramita.core.precedence import ask_extractor, askable_kinds, filled_anything, keep_changes, keep_free_text, next_step
from tramita.core.replies import say
from tramita.core.transactions import advance, apply_values, ended, new_transaction


def _llm_values(spec: ToolSpec, tx: Transaction, text: str, names: list[str], ctx: Context,
                usage: Usage) -> dict[str, Any]:
    schema = extraction_schema(names)
    known = {k: v for k, v in tx.get("args", {}).items()}
    out = structured_call("transaction_parameter_extraction", schema, "extract_parameters", backend=ctx.llm_backend,
                          usage=usage, tool=spec.name, description=spec.description, rules=spec.rules or "-",
                          known=known or "-", pending=describe_pending(spec, names), today=ctx.today, message=text)
    values = {k: v for k, v in out.model_dump().items() if v not in (None, "", "null")}
    return {k: v for k, v in values.items() if grounded(v, spec.properties[k], text)}


Next = Literal["execute_tool", "intent_shift", "respond"]


def collect_parameters(state: State, runtime: Runtime[Context]) -> Command[Next]:
    """Fill what the message carries; stay, execute, or hand over to intent_shift (precedence rules)."""
    ctx = ctx_of(runtime)
    s = svc(ctx)
    text = user_text(state)
    lang = lang_of(state)
    now = now_for(ctx)
    usage = Usage()
    intent = state.get("intent") or {}
    tx: Transaction | None = state.get("transaction")
    update: dict[str, Any] = {}
    notices: list[str] = []
    start = False
    if intent.get("kind") == "tool" and (tx is None or tx.get("tool") != intent.get("tool")):
        spec = s.registry.get(str(intent["tool"]), ctx.tenant)
        if tx is not None:  # intent shift: the old transaction ends cleanly, nothing leaks
            msg = say("abandoned", lang, tool=tx.get("tool"))
            update["last_transaction"] = ended(tx, "abandoned", msg, now)
            notices.append(msg)  # say so: the user must know the earlier action will not happen
        tx = new_transaction(spec, now)
        start = True
    else:
        assert tx is not None, "collect_parameters needs a transaction or a tool intent"
        spec = s.registry.get(tx["tool"], ctx.tenant)
        tx = Transaction(**tx)
    tx["args"] = dict(tx.get("args", {}))
    crash_point("before_extraction")
    tctx = tool_context(ctx, lang, s)
    found = deterministic(spec, text, s.engine, synonyms_for(spec))
    raw: dict[str, Any] = dict(found.values)
    cue = has_correction_cue(text)
    for name in [k for k in raw if k in tx["args"]]:
        if not correction_allowed(spec.properties[name], text, cue):
            raw.pop(name)
    # values that would rewrite already-filled ones: with a correction cue the message is about
    # them ("na verdade é a EXP-0266"), so it is not also a free-text answer
    changes = [k for k in raw if k in tx["args"]]
    pending = [p for p in tx.get("pending", spec.required) if p not in raw]
    llm_failed: str | None = None
    plain_reply = lexicon(text) is not None  # "sim" / "não" / "cancela" is never a parameter value
    question, cancel = is_question(text), mentions_cancel(text)
    if ask_extractor(starting=start, pending=bool(pending), empty=not text.strip(), cancel=cancel,
                     plain_reply=plain_reply, correcting=bool(cue and changes)):
        skip = askable_kinds(question)
        askable = [p for p in pending if kind_of(spec.properties[p]) not in skip]
        if askable:
            try:
                raw.update({k: v for k, v in _llm_values(spec, tx, text, askable, ctx, usage).items() if k not in raw})
            except LLMError as exc:
                llm_failed = str(exc)
    free = [k for k in raw if kind_of(spec.properties[k]) == "text"]
    another = bool(free or changes) and not start and another_tool(text, spec, ctx, s)
    if free and not keep_free_text(starting=start, question=question, cancel=cancel, another_tool=another):
        for k in free:
            raw.pop(k)
    if not keep_changes(another_tool=another):
        for k in changes:
            raw.pop(k, None)
    try:
        applied = apply_values(spec, tx, raw, tctx)
        errors: list[ToolError] = list(applied.errors)
        filled = applied.filled + applied.corrected
        stage, more = advance(spec, tx, tctx, s.registry) if (filled or start) else (tx["status"], [])
        errors += more
    except Exception as exc:  # noqa: BLE001 - database down during validation: nothing changes
        notices.append(say("failed", lang, tool=spec.name, error=str(exc)[:200]))
        return Command(goto="respond", update={
            "notices": notices, "turn": trace("collect_parameters", route="collect:error", errors=[str(exc)[:200]],
                                              **usage.trace())})
    for err in errors:
        notices.append(say("refused_value", lang, error=err.message(lang)))
    if llm_failed and not filled:
        notices.append(say("llm_failed", lang, error=llm_failed[:160]))
    if not filled_anything(filled, starting=start, errors=bool(errors), llm_failed=bool(llm_failed)):
        return Command(goto="intent_shift", update={"turn": trace("collect_parameters", route="collect:none",
                                                                  **usage.trace())})
    tx["updated_at"] = now.isoformat()
    if filled:
        tx["reprompts"] = 0
    step = next_step(stage)
    if stage == "awaiting_confirmation":
        crash_point("after_summary")
    update.update(transaction=tx, step=step, notices=notices,
                  turn=trace("collect_parameters", route=f"collect:{stage}", refused=bool(errors),
                             refusal=errors[0].code if errors else None, **usage.trace()))
    return Command(goto="execute_tool" if step == "ready" else "respond", update=update)
