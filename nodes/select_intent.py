"""select_intent: idle turn — is this a tool request, a question, or neither?"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.state import Intent, State
from nodes.common import ctx_of, lang_of, svc, trace, user_text
from tools.llm import Usage
from tramita.core.intent import classify
from tramita.core.lexicon import classify as lexicon
from tramita.core.replies import say


def select_intent(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Classify an idle-turn message (tramita.core.intent.classify); a bare yes/no executes nothing."""
    ctx = ctx_of(runtime)
    text = user_text(state)
    lang = lang_of(state)
    usage = Usage()
    if lexicon(text) is not None:
        # "sim" / "cancela" with nothing pending executes nothing
        intent = Intent(kind="none", reason="reply with nothing pending")
        return {"intent": intent, "notices": [say("nothing_pending", lang)], "turn": trace("select_intent", route="idle-reply")}
    try:
        intent = classify(text, ctx, svc(ctx), usage)
    except Exception as exc:  # noqa: BLE001 - registry/embeddings down: answer as a question, and say so
        intent = Intent(kind="question", reason=f"matching unavailable: {exc}")
        gap = f"{type(exc).__name__}: {str(exc)[:160]}"
        return {"intent": intent, "notices": [say("backend_gap", lang, backend="tool registry", error=gap)],
                "turn": trace("select_intent", route="select:question", errors=[f"tool registry: {gap}"], **usage.trace())}
    return {"intent": intent, "turn": trace("select_intent", route=f"select:{intent.get('kind')}", **usage.trace())}
