"""await_confirmation: an explicit yes or no wins over everything.

The lexicon (policies/lexicons.yaml) decides plain replies with zero LLM calls. A reply that
changes a value ("na verdade é a EXP-0266", "sim, mas com prioridade P2") is a correction: it is
re-validated and a NEW summary is shown, so the earlier confirmation can never apply to other
arguments. Short unclear replies go to the LLM fallback; anything else goes to intent_shift.
"""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import BaseModel

from graph.context import Context
from graph.state import State, Transaction
from nodes.common import ctx_of, lang_of, now_for, svc, tool_context, trace, user_text
from tools.llm import LLMError, Usage, structured_call
from tramita.base.text import is_question, words
from tramita.core.extraction import correction_allowed, deterministic
from tramita.core.intent import another_tool, synonyms_for
from tramita.core.lexicon import classify as lexicon
from tramita.core.lexicon import has_correction_cue
from tramita.core.replies import say
from tramita.core.transactions import advance, apply_values


class Decision(BaseModel):
    """The LLM fallback's constrained answer."""

    decision: Literal["confirm", "reject", "other"]


Next = Literal["execute_tool", "cancel", "intent_shift", "respond"]


def await_confirmation(state: State, runtime: Runtime[Context]) -> Command[Next]:
    """Confirm -> execute_tool; reject -> cancel; a changed value -> a new summary; else intent_shift."""
    ctx = ctx_of(runtime)
    s = svc(ctx)
    text = user_text(state)
    lang = lang_of(state)
    tx = Transaction(**(state.get("transaction") or {}))
    spec = s.registry.get(tx["tool"], ctx.tenant)
    usage = Usage()
    reply = lexicon(text)
    if reply == "confirm":
        return Command(goto="execute_tool", update={"turn": trace("await_confirmation", route="confirm:lexicon")})
    if reply in ("reject", "cancel"):
        return Command(goto="cancel", update={"turn": trace("await_confirmation", route=f"{reply}:lexicon")})
    # a correction: a typed value that differs from the one in the summary
    found = deterministic(spec, text, s.engine, synonyms_for(spec))
    cue = has_correction_cue(text)
    changed = {k: v for k, v in found.values.items() if str(tx["args"].get(k, "")).upper() != str(v).upper()
               and correction_allowed(spec.properties[k], text, cue)}
    if changed and another_tool(text, spec, ctx, s):
        # "rejeita a EXP-0297" while approving EXP-0264 is a new request, never "approve EXP-0297"
        return Command(goto="intent_shift", update={"turn": trace("await_confirmation", route="other:tool")})
    if changed:
        tctx = tool_context(ctx, lang, s)
        tx["args"] = dict(tx["args"])
        applied = apply_values(spec, tx, changed, tctx)
        notices = [say("refused_value", lang, error=e.message(lang)) for e in applied.errors]
        stage, more = advance(spec, tx, tctx, s.registry)
        notices += [say("refused_value", lang, error=e.message(lang)) for e in more]
        tx["updated_at"] = now_for(ctx).isoformat()
        return Command(goto="respond", update={
            "transaction": tx, "step": "confirm" if stage == "awaiting_confirmation" else "ask", "notices": notices,
            "turn": trace("await_confirmation", route="correction", refused=bool(applied.errors or more))})
    if 0 < len(words(text)) <= 6 and not is_question(text):  # an empty message costs no LLM call
        try:
            d = structured_call("confirmation", Decision, "confirmation", backend=ctx.llm_backend, usage=usage,
                                summary=tx.get("summary", ""), message=text)
            if d.decision == "confirm":
                return Command(goto="execute_tool",
                               update={"turn": trace("await_confirmation", route="confirm:llm", **usage.trace())})
            if d.decision == "reject":
                return Command(goto="cancel", update={"turn": trace("await_confirmation", route="reject:llm", **usage.trace())})
        except LLMError:
            pass
    return Command(goto="intent_shift", update={"turn": trace("await_confirmation", route="other", **usage.trace())})
