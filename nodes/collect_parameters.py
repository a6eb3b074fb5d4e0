"""collect_parameters: start a transaction or fill its pending parameters.

Precedence (docs/architecture.md): typed values are found deterministically in the message (its head
clause first); references to the thread and to the user ("ele", "pra mim", "meu time") are resolved
deterministically before any extraction (tramita/core/thread_refs.py); free text comes from a clear
marker without a model, or from the LLM extractor (which sees the pending parameters alone) only as
a span of the message (tramita/core/spans.py). A turn that fills at least one valid value (or whose
value was refused with a reason) stays in the transaction and skips the intent-shift check; a turn
that fills nothing goes to intent_shift. The message that starts the transaction fills every
parameter it carries, free text included when it has a clear span for it, so a one-sentence request
goes straight to the summary. A question that is not a request fills nothing mid-transaction (it
is a digression), and free text is never taken from a question, a cancel or a clear request for
another tool.
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from graph.context import Context
from graph.state import State, Transaction
from nodes.common import ctx_of, lang_of, now_for, svc, tool_context, trace, user_text
from tools.business.base import ToolError
from tools.llm import LLMError, Usage
from tools.registry_models import ToolSpec
from tramita.base.faults import crash_point
from tramita.base.logmask import get_logger
from tramita.base.text import is_question
from tramita.core.confirmation import is_assent, mentions_cancel
from tramita.core.extraction import (
    correction_allowed,
    deterministic,
    free_text,
    kind_of,
    llm_values,
    marked_values,
    unknown_references,
)
from tramita.core.intent import another_tool, synonyms_for
from tramita.core.lexicon import classify as lexicon
from tramita.core.lexicon import has_correction_cue
from tramita.core.precedence import (
    ask_extractor,
    askable_kinds,
    ends_on_refusal,
    filled_anything,
    keep_changes,
    keep_free_text,
    keep_values,
    next_step,
)
from tramita.core.replies import say
from tramita.core.request_forms import read_form
from tramita.core.spans import has_content
from tramita.core.thread_refs import Resolution, from_args, own_rows, ref_table, resolve, thread_ref_rules
from tramita.core.transactions import advance, apply_values, ended, new_transaction

log = get_logger("tramita.collect")


def _references(spec: ToolSpec, text: str, pending: list[str], state: State, ctx: Context) -> Resolution:
    """Missing parameters named by a reference to the thread or to the user (thread_refs.resolve)."""
    s = svc(ctx)
    directory = s.registry.permissions.policy.directory
    own: dict[str, str] = {}
    wanted = {ref_table(spec.properties[p]) for p in pending if p in spec.properties}
    if directory is not None and wanted & set(thread_ref_rules().own_row):
        try:
            own = own_rows(s.engine, directory.table, directory.id, ctx.user_id)
        except Exception:  # noqa: BLE001 - no directory table: "my team" stays unresolved
            own = {}
    return resolve(spec.properties, pending, text, state.get("entities") or {}, user_id=ctx.user_id,
                   directory_table=directory.table if directory else None, own=own)


def _track_resolved(tx: Transaction, resolution: Resolution, filled: list[str]) -> None:
    """Remember which filled values came from a reference (the summary names them and a
    confirmation is always asked); a value the user then gives explicitly is no longer one.
    """
    resolved = dict(tx.get("resolved") or {})
    for name in filled:
        if name in resolution.words:
            resolved[name] = resolution.words[name]
        else:
            resolved.pop(name, None)
    if resolved:
        tx["resolved"] = resolved
    else:
        tx.pop("resolved", None)


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
        if not correction_allowed(spec.properties[name], text, cue, found.surfaces.get(name)):
            raw.pop(name)
    # "sim" / "não" / "cancela" is never a parameter value, nor a bare assent ("sim, pode continuar")
    plain_reply = lexicon(text) is not None or (not start and is_assent(text))
    question, cancel = is_question(text), mentions_cancel(text)
    form = read_form(text)
    # the values other parameters use: a free-text span made only of them restates them
    others: list[Any] = [*found.surfaces.values(), *found.values.values(), *tx["args"].values()]
    keep = keep_values(starting=start, question=question, request=form.request,
                       values_only=not has_content(text, others))
    if not keep:  # a digression ("quem é o gestor do Lucas Oliveira?"): what it names is asked about
        raw.clear()
    resolution = Resolution()
    marks: dict[str, str] = {}
    if keep and not (cancel or plain_reply):
        missing = [p for p in tx.get("pending", spec.required) if p not in raw]
        resolution = _references(spec, text, missing, state, ctx)
        raw.update(resolution.values)
        missing = [p for p in missing if p not in raw]
        raw.update(unknown_references(spec, text, missing, s.engine, found))
        missing_text = [n for n in free_text(spec) if n not in tx["args"] and n not in raw]
        marks = marked_values(spec, text, missing_text, others)
        raw.update(marks)
    # values that would rewrite already-filled ones: with a correction cue the message is about
    # them ("na verdade é a EXP-0266"), so it is not also a free-text answer
    changes = [k for k in raw if k in tx["args"]]
    pending = [p for p in tx.get("pending", spec.required) if p not in raw]
    llm_failed: str | None = None
    if keep and ask_extractor(starting=start, pending=bool(pending), empty=not text.strip(), cancel=cancel,
                              plain_reply=plain_reply, correcting=bool(cue and changes)):
        skip = askable_kinds(question)
        askable = [p for p in pending if kind_of(spec.properties[p]) not in skip]
        if askable:
            try:
                llm = llm_values(spec, tx["args"], text, askable, backend=ctx.llm_backend, today=ctx.today,
                                 usage=usage, others=others)
                raw.update({k: v for k, v in llm.items() if k not in raw})
            except LLMError as exc:
                llm_failed = str(exc)
    log.debug("collect: tool=%s keep=%s start=%s pending=%s raw=%s marks=%s llm_failed=%s", spec.name, keep, start,
              pending, raw, marks, llm_failed)
    free = [k for k in raw if kind_of(spec.properties[k]) == "text"]
    # a changed typed value is a correction unless the message outranks this tool; free text alone
    # only yields to an unmistakable request (which also outranks this tool, so one match decides both)
    another = not start and bool(changes or free) and another_tool(text, spec, ctx, s, over_current=bool(changes))
    if free and not keep_free_text(starting=start, marked=bool(marks), question=question, cancel=cancel,
                                   another_tool=another):
        for k in free:
            raw.pop(k)
    if not keep_changes(another_tool=another):
        for k in changes:
            raw.pop(k, None)
    try:
        applied = apply_values(spec, tx, raw, tctx)
        errors: list[ToolError] = list(applied.errors)
        filled = applied.filled + applied.corrected
        _track_resolved(tx, resolution, filled)
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
    entities = from_args(spec.properties, {k: tx["args"][k] for k in filled if k in tx["args"]})
    if entities:
        update["entities"] = entities
    if ends_on_refusal(starting=start, read_only=s.registry.policy(spec.name).operation_type == "read",
                       refused=bool(errors), complete=not tx.get("pending")):
        # a lookup of something that does not exist: the refusal is the answer, nothing stays open
        msg = errors[0].message(lang)
        update.update(transaction=None, step=None, notices=notices,
                      last_transaction=ended(tx, "failed", msg, now),
                      turn=trace("collect_parameters", route="collect:lookup-refused", refused=True,
                                 refusal=errors[0].code, **usage.trace()))
        return Command(goto="respond", update=update)
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
