"""Deciding what a message is about, with as few LLM calls as possible.

The clause that names the action is read first: a long one-sentence request ("abre um ticket P2 no
payments-api: desde o deploy de ontem …") is matched on its head clause (`spans.head_clause`, the
text before ":", " - ", "porque", "motivo:"), so the details after it do not drown the action.

Then the request form (`request_forms.read_form`, data in policies/request_forms.yaml):

- a request whose opening verb names tools ("passa ele pra mim", "could you approve … for me?",
  "pode pedir … pra mim?") selects among those tools, those compatible with the ids the message
  carries, by the registry's scores: zero LLM calls unless the verb's tools score close. A lookup
  verb ("check") selects a lookup only when the message carries its id. A tool the user may not run
  is refused with the permission message, whatever the question mark says;
- a modal about someone else ("a Luciana pode aprovar a EXP-…?") is a question, and so is an
  opening verb that, with the word after it, names rows by their state ("Open tickets per
  priority": a backend's `names_by_state` hook, read from the semantic model's values);
- otherwise the registry's margin rule decides clear matches with zero calls and the LLM router is
  asked only when the top permitted candidates are close. When no tool is clear (close, or the best
  one denied) and none near finds a value of its own in a message that is neither a request form
  nor a question, the message is a question (a report title), not a router's guess or a refusal.
  A question-form message that is not a request is a tool request only for a lookup that carries
  its id ("qual o status do TCK-1140?", "who has TCK-1144?"), otherwise a question for plan →
  retrieve → synthesize.
"""

from __future__ import annotations

import builtins

from pydantic import BaseModel, Field

from graph.context import Context
from graph.state import Intent
from tools.business.catalog import rules
from tools.llm import LLMError, Usage, structured_call
from tools.registry import MatchResult
from tools.registry_index import Candidate
from tools.registry_models import ToolSpec
from tools.services import Services
from tramita.base.text import is_question, words
from tramita.core.extraction import deterministic, kind_of
from tramita.core.planner_hints import names_by_state
from tramita.core.replies import say
from tramita.core.request_forms import Form, read_form
from tramita.core.spans import head_clause
from tramita.core.thread_refs import id_patterns, mentioned, ref_table


class ToolChoice(BaseModel):
    """The LLM router's answer: one of the close candidates, or 'none'."""

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
    enum words ("payments-api", "P2") appear in ordinary questions too, so they do not count.
    """
    return any(kind_of(spec.properties[k]) == "id" for k in _values_in(spec, text, s))


def carries_any(spec: ToolSpec, text: str, s: Services) -> bool:
    """Does the message carry any value of the tool's (an id, a name, an enum word, an amount)?"""
    return bool(_values_in(spec, text, s))


def _values_in(spec: ToolSpec, text: str, s: Services) -> dict[str, object]:
    """The tool's parameters the message gives a value, read without an LLM."""
    return dict(deterministic(spec, text, s.engine, synonyms_for(spec)).values)


def tables_mentioned(text: str, specs: builtins.list[ToolSpec]) -> set[str]:
    """The referenced tables whose ids `text` writes (TCK-… → tickets), over the visible tools."""
    patterns = id_patterns(schema for spec in specs for schema in spec.properties.values())
    return set(mentioned(text, patterns))


def compatible(spec: ToolSpec, tables: set[str]) -> bool:
    """A tool can be what a message asks for only if it takes every kind of id the message writes
    ("libera a EXP-…" is not escalate_incident's, whatever the scores say).
    """
    own = {ref_table(schema) for schema in spec.properties.values()}
    return tables <= own


def _router(close: builtins.list[Candidate], text: str, ctx: Context, s: Services, usage: Usage) -> str | None:
    """The LLM router's choice among close candidates (the first one if the call fails), or None."""
    reg = s.registry
    listing = "\n".join(f"- {c.name}: {reg.get(c.name, ctx.tenant).description} {reg.get(c.name, ctx.tenant).rules}"
                        for c in close)
    try:
        choice = structured_call("router", ToolChoice, "choose_tool", backend=ctx.llm_backend, usage=usage,
                                 tools=listing, message=text)
    except LLMError:
        choice = ToolChoice(tool=close[0].name)
    return choice.tool if choice.tool in {c.name for c in close} else None


def _decided(spec: ToolSpec, score: float, reason: str, ctx: Context, s: Services, text: str,
             exclude: str | None) -> Intent:
    """A tool intent, or the permission refusal when the user may not run it."""
    if exclude and spec.name == exclude:
        return Intent(kind="none", reason="same tool")
    if not s.registry.is_permitted(spec, ctx.user_id):
        groups = ", ".join(s.registry.required_groups(spec)) or "—"
        return Intent(kind="refuse", tool=spec.name, score=score,
                      reason=say("permission_denied", ctx_lang(ctx, text), groups=groups))
    return Intent(kind="tool", tool=spec.name, score=score, reason=reason)


def _by_verb(form: Form, head: str, text: str, ctx: Context, s: Services, usage: Usage,
             exclude: str | None) -> Intent | None:
    """The tool the opening verb names, among those compatible with the message's ids (a lookup
    only when the message carries its id); None when the verb names no usable tool.
    """
    reg = s.registry
    visible = {spec.name: spec for spec in reg.visible(ctx.tenant)}
    tables = tables_mentioned(head, list(visible.values()))
    names = []
    for name in form.tools:
        spec = visible.get(name)
        if spec is None or not compatible(spec, tables):
            continue
        if reg.policy(name).operation_type == "read" and not carries_value(spec, text, s):
            continue
        names.append(name)
    if not names:
        return None
    if len(names) == 1:
        return _decided(visible[names[0]], 1.0, f"verb {form.verb!r}", ctx, s, text, exclude)
    match = reg.match(head, ctx.user_id, ctx.tenant, k=max(3, len(visible)))
    ranked = [c for c in match.candidates if c.name in names] or [Candidate(n, 0.0, True) for n in names]
    top = ranked[0]
    close = [c for c in ranked if top.score - c.score < reg.margin]
    chosen = top.name
    if len(close) > 1:
        chosen = _router(close, head, ctx, s, usage) or top.name
    return _decided(visible[chosen], top.score, f"verb {form.verb!r} among {names}", ctx, s, text, exclude)


def classify(text: str, ctx: Context, s: Services, usage: Usage, *, exclude: str | None = None) -> Intent:
    """Tool / question / none (or refuse for a denied tool) for one message (see the module doc)."""
    if not text.strip():
        return Intent(kind="none", reason="empty message")
    reg = s.registry
    head = head_clause(text)
    form = read_form(head)
    question = is_question(text)
    if form.about_others:
        return Intent(kind="question", reason="asks about someone else's ability")
    if form.tools and form.bare and form.after and head == text and names_by_state(f"{form.verb} {form.after}", s):
        # "Open tickets per priority": the verb is the state of the rows the next word names; the
        # registry's scores read it as the create tool, whose description shares every word
        return Intent(kind="question", reason=f"{form.verb!r} {form.after!r} names rows by their state")
    if form.tools:
        by_verb = _by_verb(form, head, text, ctx, s, usage, exclude)
        if by_verb is not None:
            return by_verb
        if all(reg.policy(n).operation_type == "read" for n in form.tools):
            # "mostra os últimos deploys do X": a verb that only ever reads, and no lookup finds its
            # id in the message, asks for data; the registry's scores read it as the nearest write
            return Intent(kind="question", reason=f"verb {form.verb!r} only reads; no lookup carries a value")
    match: MatchResult = reg.match(head, ctx.user_id, ctx.tenant)
    if head != text and (match.decision == "none" or match.best is None):
        match = reg.match(text, ctx.user_id, ctx.tenant)
    if not match.candidates and reg.visible(ctx.tenant):  # enabled tools but no vectors: Chroma lost them
        raise RuntimeError(f"no tool vectors in {reg.chroma_dir}; run `tramita tools sync` (or `tramita ingest`)")
    if match.decision == "none" or match.best is None:
        return Intent(kind="question" if question or len(words(text)) >= 3 else "none", reason="below floor")
    spec = reg.get(match.best, ctx.tenant)
    if question and not form.request:
        # a question names a tool only as a lookup that carries its id; about a write it is a question
        lookups = [c for c in match.candidates if reg.policy(c.name).operation_type == "read"
                   and carries_value(reg.get(c.name, ctx.tenant), text, s)]
        if not lookups:
            return Intent(kind="question", reason=f"question form; no lookup of {match.best} carries a value")
        return _decided(reg.get(lookups[0].name, ctx.tenant), lookups[0].score, "lookup question", ctx, s, text,
                        exclude)
    if not question and not form.request and match.decision in ("close", "denied"):
        near = [c for c in match.candidates if match.candidates[0].score - c.score < reg.margin * 3]
        if not any(carries_any(reg.get(c.name, ctx.tenant), text, s) for c in near):
            # neither a request form nor a question mark, no clear tool, and none of the near ones
            # finds one of its values in the message: a report title (a measure "per" a grouping),
            # not an action; the 1.5B router picks a tool for it anyway, and a permission refusal
            # would answer a request nobody made
            return Intent(kind="question" if len(words(text)) >= 3 else "none",
                          reason="no clear tool, none near carries a value of its own: read as a question")
    if match.decision == "denied":
        groups = ", ".join(reg.required_groups(spec)) or "—"
        return Intent(kind="refuse", tool=spec.name, score=match.candidates[0].score,
                      reason=say("permission_denied", ctx_lang(ctx, text), groups=groups))
    if match.decision == "close":
        close = [c for c in match.candidates if c.permitted and match.candidates[0].score - c.score < reg.margin * 3]
        if form.request:  # a request is for the write tool, not a status lookup
            writes = [c for c in close if reg.policy(c.name).operation_type == "write"]
            close = writes or close
        if len(close) > 1:
            chosen = _router(close, text, ctx, s, usage)
            if chosen is None:
                return Intent(kind="question" if question else "none", reason="router chose none")
            spec = reg.get(chosen, ctx.tenant)
        elif close:
            spec = reg.get(close[0].name, ctx.tenant)
    if exclude and spec.name == exclude:
        return Intent(kind="none", reason="same tool")
    return Intent(kind="tool", tool=spec.name, score=match.candidates[0].score, reason=match.decision)


def ctx_lang(ctx: Context, text: str) -> str:
    """The session's language when it is fixed, else the message's."""
    from tramita.base.text import detect_language

    return ctx.language if ctx.language in ("pt", "en") else detect_language(text)


ANOTHER_TOOL_SCORE = 0.92


def another_tool(text: str, spec: ToolSpec, ctx: Context, s: Services, *, over_current: bool = False) -> bool:
    """Whether the message is an unmistakable request for a tool other than `spec` (embedding margin).

    By default the best tool must beat the runner-up by twice the registry's margin: only an
    unmistakable request may block a free-text answer (a reason often shares words with other
    tools' examples). With `over_current`, for a message that changes a typed value ("rejeita a
    EXP-…" while approving another), it must beat `spec` itself by the margin: a correction names
    no action and scores `spec` at or near the top, a new request scores its own tool clearly above.
    """
    try:
        m = s.registry.match(text, ctx.user_id, ctx.tenant)
    except Exception:  # noqa: BLE001
        return False
    if m.best is None or m.best == spec.name or not m.candidates:
        return False
    top = m.candidates[0].score
    if top < ANOTHER_TOOL_SCORE:
        return False
    if over_current:
        current = next((c.score for c in m.candidates if c.name == spec.name), 0.0)
        return top - current >= s.registry.margin
    runner = m.candidates[1].score if len(m.candidates) > 1 else 0.0
    return top - runner >= 2 * s.registry.margin
