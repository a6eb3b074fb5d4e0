"""Documents: the top distinct documents from the vector store, each by its best passage."""

from __future__ import annotations

from typing import Any

from tools.backends.base import BackendCall
from tools.services import Services

TOP_PASSAGES = 3


class DocsBackend:
    """Chroma + e5. Documents cite their own ids, so `citation` names the id prefix."""

    name = "docs"
    citation = "doc-"
    planner_description = "documents: policy rules and limits, SLA targets, deadlines, procedures, runbooks, postmortems, handbooks"

    def available(self, services: Services) -> bool:
        """Whether the store holds any passage."""
        return services.doc_store.count() > 0

    def run(self, call: BackendCall) -> dict[str, Any]:
        """The top `top_k` distinct documents plus the best TOP_PASSAGES passages overall: five
        passages alone are often two documents (a long postmortem fills the list), which hides the
        right document from synthesis and lowers document recall@5."""
        hits = call.services.doc_store.retrieve_docs(call.question, call.top_k, passages=TOP_PASSAGES)
        return {"backend": self.name,
                "items": [{"source": d, "text": p, "score": round(float(s), 4)} for d, p, s in hits]}

    def render(self, context: dict[str, Any]) -> str:
        """Each passage after its document id, which is the citation."""
        return "\n\n".join(f"[{it['source']}] {it['text']}" for it in context.get("items", []))
