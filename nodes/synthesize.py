"""synthesize: one answer, in the user's language, citing its sources. It never runs a tool."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.state import State
from nodes.common import ctx_of, lang_of, trace, user_text
from tools.backends import BACKENDS
from tools.llm import LLMError, Usage, text_call
from tramita.core.replies import say

LANGUAGE = {"pt": "Portuguese (Brazil)", "en": "English"}


def render_contexts(contexts: list[dict[str, Any]], max_chars: int = 4500) -> str:
    """Context block for synthesis: each backend renders its own facts with its citation tags."""
    parts = [BACKENDS[c["backend"]].render(c) for c in contexts if not c.get("error") and c.get("backend") in BACKENDS]
    return "\n\n".join(p for p in parts if p)[:max_chars]


def source_name(backend: str) -> str:
    """How a backend is named to the user: its citation tag, or its name for documents."""
    b = BACKENDS.get(backend)
    return b.citation if b is not None and not b.citation.endswith("-") else backend


def synthesize(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """One answer from the retrieved contexts, or a plain sentence when there is nothing to say."""
    ctx = ctx_of(runtime)
    lang = lang_of(state)
    usage = Usage()
    contexts = state.get("contexts", [])
    gaps = [say("backend_gap", lang, backend=c["backend"], error=str(c["error"])[:160]) for c in contexts if c.get("error")]
    block = render_contexts(contexts)
    if not block.strip():
        return {"answer": say("no_answer", lang), "notices": gaps, "turn": trace("synthesize", route="answer:empty")}
    answered = [c for c in contexts if not c.get("error")]
    if not any(c.get("rows") or c.get("items") for c in answered):
        # Only empty result sets: the 1.5B model, given nothing, writes a sentence around a blank
        # ("o orçamento é de [SQL]"). Saying plainly that nothing matched is the honest answer.
        sources = ", ".join(source_name(c["backend"]) for c in answered)
        return {"answer": say("no_rows", lang, sources=sources), "notices": gaps,
                "turn": trace("synthesize", route="answer:no-rows")}
    try:
        answer = text_call("synthesis", "synthesize", backend=ctx.llm_backend, usage=usage,
                           language=LANGUAGE.get(lang, "Portuguese (Brazil)"), context=block, question=user_text(state))
    except LLMError as exc:
        return {"answer": say("llm_failed", lang, error=str(exc)[:160]), "notices": gaps,
                "turn": trace("synthesize", route="answer:llm-failed", errors=[str(exc)[:200]], **usage.trace())}
    return {"answer": answer, "notices": gaps, "turn": trace("synthesize", route="answer", **usage.trace())}
