"""Documents: the top distinct documents from the vector store, each by its best passage."""

from __future__ import annotations

import threading
from typing import Any

from tools.backends.base import BackendCall
from tools.services import Services

TOP_PASSAGES = 3
_VOCAB_LOCK = threading.Lock()
_VOCAB: dict[tuple[str, int], list[str]] = {}


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
        right document from synthesis and lowers document recall@5.
        """
        hits = call.services.doc_store.retrieve_docs(call.question, call.top_k, passages=TOP_PASSAGES)
        return {"backend": self.name,
                "items": [{"source": d, "text": p, "score": round(float(s), 4)} for d, p, s in hits]}

    def render(self, context: dict[str, Any]) -> str:
        """Each passage after its document id, which is the citation."""
        return "\n\n".join(f"[{it['source']}] {it['text']}" for it in context.get("items", []))

    def vocabulary(self, services: Services) -> list[str]:
        """What the stored documents are about, in their own words: each title, and each
        "title — section" heading, read from the chunks' metadata (the loader writes both).

        The planner embeds these, so a question about a policy, a rule, a deadline or a procedure
        reaches the documents because a document is titled or sectioned that way, not because a
        word list says so. Read once per store file version (its modification time).
        """
        store = services.doc_store
        marker = store.path / "chroma.sqlite3"
        try:
            key = (str(marker.resolve()), marker.stat().st_mtime_ns)
        except OSError:
            return []
        with _VOCAB_LOCK:
            cached = _VOCAB.get(key)
        if cached is not None:
            return list(cached)
        try:
            metas = store.collection().get(include=["metadatas"])["metadatas"] or []
        except Exception:  # noqa: BLE001 - no store: the backend has no vocabulary (and is unavailable)
            return []
        texts: list[str] = []
        for meta in metas:
            title = str((meta or {}).get("title") or "").strip()
            section = str((meta or {}).get("section") or "").strip()
            for text in (title, f"{title} — {section}" if section and section != title else ""):
                if text and text not in texts:
                    texts.append(text)
        with _VOCAB_LOCK:
            _VOCAB[key] = texts
        return list(texts)
