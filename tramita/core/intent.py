"""Deciding what a message is about, with as few LLM calls as possible.

The registry's margin rule decides clear tool matches with zero calls; the LLM router is asked only
when the top permitted candidates are close. A question-form message counts as a tool request only
when it also carries one of that tool's typed values ("qual o status do TCK-1140?"), otherwise it is
a question for plan → retrieve → synthesize ("quantas despesas estão pendentes?").
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from graph.context import Context
from graph.state import Intent
from tools.business.catalog import rules
from tools.llm import LLMError, Usage, structured_call
from tools.registry import MatchResult
from tools.registry_models import ToolSpec
from tools.services import Services
from tramita.base.text import is_question, words
from tramita.core.extraction import deterministic, kind_of
from tramita.core.lexicon import is_polite_request
from tramita.core.replies import say


class ToolChoice(BaseModel):
    tool: str = Field(description="name of the chosen tool, or 'none'")


def synonyms_for(spec: ToolSpec) -> dict[str, dict[str, str]]:
    """Enum synonyms (policies/business_rules.yaml) for non-strict tools, as word → option."""
    if spec.strict:
        return {}
    out: dict[str, dict[str, str]] = {}
    for param, table in rules().enum_synonyms.items():
        out[param] = {w: option for option, ws in table.items() for w in ws}
    return out


def carries_value(spec: ToolSpec, text: str, s: Services) -> bool:
    """Does the message carry one of the tool's *identifiers* (EXP-0150, TCK-1140)? Names and
    enum words ("payments-api", "P2") appear in ordinary questions too, so they do not count."""
    found = deterministic(spec, text, s.engine, synonyms_for(spec))
    return any(kind_of(spec.properties[k]) == "id" for k in found.values)


def classify(text: str, ctx: Context, s: Services, usage: Usage, *, exclude: str | None = None) -> Intent:
    """tool / question / none (or refuse for a denied tool) for one message."""
    if not text.strip():
        return Intent(kind="none", reason="empty message")
    reg = s.registry
    match: MatchResult = reg.match(text, ctx.user_id, ctx.tenant)
    if not match.candidates and reg.visible(ctx.tenant):  # enabled tools but no vectors: Chroma lost them
        raise RuntimeError(f"no tool vectors in {reg.chroma_dir}; run `tramita tools sync` (or `tramita ingest`)")
    question = is_question(text)
    if match.decision == "none" or match.best is None:
        return Intent(kind="question" if question or len(words(text)) >= 3 else "none", reason="below floor")
    spec = reg.get(match.best, ctx.tenant)
    if question and not carries_value(spec, text, s):
        return Intent(kind="question", reason=f"question form; best tool {match.best} carries no value")
    if question and reg.policy(spec.name).operation_type == "write" and not is_polite_request(text):
        # "can Luciana approve EXP-0259?" asks about an action; "pode aprovar a EXP-0290?" asks for one
        return Intent(kind="question", reason=f"question about {match.best}, not a request addressed to us")
    if match.decision == "denied":
        groups = ", ".join(reg.required_groups(spec)) or "—"
        return Intent(kind="refuse", tool=spec.name, score=match.candidates[0].score,
                      reason=say("permission_denied", ctx_lang(ctx, text), groups=groups))
    if match.decision == "close":
        close = [c for c in match.candidates if c.permitted and match.candidates[0].score - c.score < reg.margin * 3]
        if len(close) > 1:
            listing = "\n".join(f"- {c.name}: {reg.get(c.name, ctx.tenant).description} {reg.get(c.name, ctx.tenant).rules}"
                                for c in close)
            try:
                choice = structured_call("router", ToolChoice, "choose_tool", backend=ctx.llm_backend, usage=usage,
                                         tools=listing, message=text)
            except LLMError:
                choice = ToolChoice(tool=close[0].name)
            names = {c.name for c in close}
            if choice.tool not in names:
                return Intent(kind="question" if question else "none", reason=f"router chose {choice.tool!r}")
            spec = reg.get(choice.tool, ctx.tenant)
    if exclude and spec.name == exclude:
        return Intent(kind="none", reason="same tool")
    return Intent(kind="tool", tool=spec.name, score=match.candidates[0].score, reason=match.decision)


def ctx_lang(ctx: Context, text: str) -> str:
    from tramita.base.text import detect_language

    return ctx.language if ctx.language in ("pt", "en") else detect_language(text)


ANOTHER_TOOL_SCORE = 0.92


def another_tool(text: str, spec: ToolSpec, ctx: Context, s: Services) -> bool:
    """Whether the message is an unmistakable request for a tool other than `spec` (embedding margin)."""
    try:
        m = s.registry.match(text, ctx.user_id, ctx.tenant)
    except Exception:  # noqa: BLE001
        return False
    if m.best is None or m.best == spec.name or not m.candidates:
        return False
    # stricter than select_intent: only an unmistakable request for another tool may block a
    # free-text answer (a reason often shares words with other tools' examples)
    top = m.candidates[0].score
    runner = m.candidates[1].score if len(m.candidates) > 1 else 0.0
    return top >= ANOTHER_TOOL_SCORE and top - runner >= 2 * s.registry.margin
