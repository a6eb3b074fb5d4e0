"""Document retrieval over the Chroma collection that `ingest.doc_loader` fills.

Chroma never embeds anything itself here: its default embedding function downloads an ONNX
model, and nothing may reach the network at run time. Every vector, stored or queried, comes
from our own `Embeddings` object (multilingual e5 by default, built lazily on first use).

`hybrid=True` fuses the vector ranking with a BM25 ranking over the stored chunks by reciprocal
rank fusion, for exact identifiers ("allkeys-random") that dense vectors of a small model can
miss. It is off by default because it measured worse (see DEFAULT_HYBRID): many questions mix
document words with entities that belong to other backends, and BM25 cannot match a Portuguese
question to an English document, while e5 can.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

os.environ["ANONYMIZED_TELEMETRY"] = "False"

from chromadb.errors import NotFoundError
from langchain_core.embeddings import Embeddings

from tools.chroma_client import chroma_client

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

DEFAULT_COLLECTION = "novaops_docs"
# benchmarks/doc_recall.py, real e5, 14 dev questions with gold documents: recall@5 is 0.929 for
# vector-only and 0.857 for hybrid (BM25 ranked the gold document lower than e5 on 6 of 14).
DEFAULT_HYBRID = False
RRF_K = 60
_CANDIDATES = 50
_SQLITE_FILE = "chroma.sqlite3"
_HINT = "load the documents first (`tramita ingest`, i.e. ingest.doc_loader.load_docs)"


class DocStoreUnavailable(RuntimeError):
    """The document store cannot answer; the message says why and what to run."""


def _tokens(text: str) -> list[str]:
    """Lower-case words without accents, so "refeições" matches "refeicoes"."""
    folded = unicodedata.normalize("NFKD", text.casefold())
    folded = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return re.findall(r"[a-z0-9]+", folded)


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk; `score` is the cosine similarity between query and chunk."""

    chunk_id: str
    doc_id: str
    text: str
    score: float
    metadata: Mapping[str, Any]


class _Lexical:
    """BM25 over every stored chunk, rebuilt when the set of stored chunk ids changes."""

    def __init__(self, fingerprint: str, ids: list[str], texts: list[str]) -> None:
        from rank_bm25 import BM25Okapi

        self.fingerprint = fingerprint
        self.ids = ids
        self.bm25 = BM25Okapi([_tokens(t) or [""] for t in texts])

    def rank(self, query: str, n: int) -> list[str]:
        words = _tokens(query)
        if not words:
            return []
        scores = self.bm25.get_scores(words)
        order = sorted(range(len(self.ids)), key=lambda i: -scores[i])
        return [self.ids[i] for i in order[:n] if scores[i] > 0]


class DocStore:
    """Chunks of the company documents in Chroma, searched with our own embeddings."""

    def __init__(
        self,
        chroma_dir: Path | str,
        *,
        embeddings: Embeddings | None = None,
        collection: str = DEFAULT_COLLECTION,
        hybrid: bool = DEFAULT_HYBRID,
    ) -> None:
        """Check the collection name and record the settings; Chroma, the embeddings and BM25 load on first use."""
        if len(collection) < 3:
            raise ValueError(f"collection name {collection!r}: Chroma needs at least 3 characters")
        self.path = Path(chroma_dir).expanduser()
        self.name = collection
        self.hybrid = hybrid
        self._embeddings = embeddings
        self._lexical: _Lexical | None = None
        self._headings: dict[str, list[float]] = {}  # heading → passage vector, for this store's embeddings

    @property
    def embeddings(self) -> Embeddings:
        """The injected embeddings, else the project default (loaded on first use: it is slow)."""
        if self._embeddings is None:
            from tools.embeddings import make_embeddings

            self._embeddings = make_embeddings()
        return self._embeddings

    # -- the collection -------------------------------------------------------------------

    def collection(self, *, create: bool = False) -> Collection:
        """The Chroma collection; `create` makes the directory and collection when missing.

        `embedding_function=None` keeps Chroma from ever building its downloading default.
        """
        if create:
            self.path.mkdir(parents=True, exist_ok=True)
            return chroma_client(self.path).get_or_create_collection(
                self.name, metadata={"hnsw:space": "cosine"}, embedding_function=None
            )
        if not (self.path / _SQLITE_FILE).is_file():
            raise DocStoreUnavailable(f"no document store at {self.path}: {_HINT}")
        try:
            return chroma_client(self.path, create=False).get_collection(
                self.name, embedding_function=None
            )
        except NotFoundError as exc:
            raise DocStoreUnavailable(
                f"the document store at {self.path} has no collection '{self.name}': {_HINT}"
            ) from exc
        except Exception as exc:
            raise DocStoreUnavailable(
                f"the document store at {self.path} cannot be opened "
                f"({type(exc).__name__}: {exc}); delete the directory and {_HINT}"
            ) from exc

    def drop(self) -> None:
        """Delete the collection (used by `load_docs(reset=True)`); a missing one is fine."""
        self._lexical = None
        if not (self.path / _SQLITE_FILE).is_file():
            return
        try:
            chroma_client(self.path).delete_collection(self.name)
        except NotFoundError:
            pass

    def count(self) -> int:
        """Number of stored chunks; raises DocStoreUnavailable when there is no store."""
        return self.collection().count()

    def doc_ids(self) -> set[str]:
        """The distinct documents stored."""
        metadatas = self.collection().get(include=["metadatas"])["metadatas"] or []
        return {str(m["doc_id"]) for m in metadatas if m and "doc_id" in m}

    def languages(self) -> set[str]:
        """The languages the stored documents are written in (each chunk's `lang`)."""
        metadatas = self.collection().get(include=["metadatas"])["metadatas"] or []
        return {str(m["lang"]) for m in metadatas if m and m.get("lang")}

    def available(self) -> bool:
        """True when the store opens and holds at least one chunk. Never raises."""
        try:
            return self.count() > 0
        except Exception:  # noqa: BLE001 - a health check must answer, not fail
            return False

    # -- retrieval --------------------------------------------------------------------------

    def retrieve(self, query: str, top_k: int = 5) -> list[tuple[str, str, float]]:
        """The `top_k` best chunks as (doc_id, passage, cosine similarity)."""
        return [(h.doc_id, h.text, h.score) for h in self.search(query, top_k)]

    def retrieve_docs(self, query: str, top_k: int = 5, *, passages: int = 0) -> list[tuple[str, str, float]]:
        """The `top_k` best documents, each represented by its best chunk (in search order); with
        `passages`, also the best `passages` chunks overall even where they repeat a document, all
        then in score order. One search serves both, so the query is embedded once.
        """
        self._check(query, top_k)
        total = self.count()
        want = min(total, max(top_k * 8, passages))
        while True:
            hits = self.search(query, want)
            best: dict[str, Hit] = {}
            for hit in hits:
                best.setdefault(hit.doc_id, hit)
            if len(best) >= top_k or want >= total:
                break
            want = min(total, want * 2)
        chosen = list(best.values())[:top_k]
        if passages:
            ids = {h.chunk_id for h in chosen}
            chosen = sorted(chosen + [h for h in hits[:passages] if h.chunk_id not in ids], key=lambda h: -h.score)
        return [(h.doc_id, h.text, h.score) for h in chosen]

    def search(self, query: str, n: int) -> list[Hit]:
        """The `n` best chunks, vector-only or fused with BM25 according to `hybrid`."""
        self._check(query, n)
        collection = self.collection()
        total = collection.count()
        if total == 0:
            raise DocStoreUnavailable(
                f"the document store at {self.path} is empty: {_HINT}"
            )
        vector = self._embed_query(query)
        depth = min(total, max(n, _CANDIDATES) if self.hybrid else n)
        try:
            found = collection.query(
                query_embeddings=[vector],  # type: ignore[arg-type]
                n_results=depth,
                include=["documents", "metadatas", "distances"],
            )
        except Exception as exc:
            raise DocStoreUnavailable(
                f"the document store at {self.path} cannot be searched ({type(exc).__name__}: "
                f"{exc}); if the embedding model changed, reload with load_docs(reset=True)"
            ) from exc
        hits = {
            cid: Hit(cid, str((meta or {}).get("doc_id", "")), doc or "", 1.0 - float(dist), meta or {})
            for cid, doc, meta, dist in zip(
                found["ids"][0],
                (found["documents"] or [[]])[0],
                (found["metadatas"] or [[]])[0],
                (found["distances"] or [[]])[0],
                strict=True,
            )
        }
        vector_order = list(hits)
        if not self.hybrid:
            return [hits[cid] for cid in vector_order[:n]]
        lexical_order = self._lexical_index(collection).rank(query, depth)
        fused = reciprocal_rank_fusion([vector_order, lexical_order])
        missing = [cid for cid in fused[:n] if cid not in hits]
        if missing:
            hits.update(self._hits_for(collection, missing, vector))
        return [hits[cid] for cid in fused if cid in hits][:n]

    def titles(self) -> dict[str, str]:
        """doc_id → title of every stored document (the loader writes both on each chunk)."""
        metas = self.collection().get(include=["metadatas"])["metadatas"] or []
        return {str(m["doc_id"]): str(m.get("title") or "") for m in metas if m and "doc_id" in m}

    def document_text(self, doc_id: str) -> str:
        """Every chunk of one document, in document order, joined: the whole document as stored
        (empty for an unknown id), for reading what a found document states beyond its best passages.
        """
        got = self.collection().get(where={"doc_id": doc_id}, include=["documents", "metadatas"])
        pairs = zip(got.get("documents") or [], got.get("metadatas") or [], strict=False)
        ordered = sorted(pairs, key=lambda p: int(str((p[1] or {}).get("chunk_index", 0))))
        return "\n".join(str(text) for text, _ in ordered)

    def chunks_of(self, vector: Sequence[float], doc_id: str) -> list[Hit]:
        """Every chunk of one document with its cosine similarity to the query `vector`, in
        document order: what a reader of that document sees, for picking the section asked about.
        """
        collection = self.collection()
        ids = collection.get(where={"doc_id": doc_id}, include=[])["ids"]
        if not ids:
            return []
        hits = self._hits_for(collection, list(ids), vector)
        return sorted(hits.values(), key=lambda h: int(h.metadata.get("chunk_index", 0)))

    def closest_heading(self, vector: Sequence[float], headings: Sequence[str]) -> str:
        """The heading whose e5 passage vector is closest to the query `vector`; each heading is
        embedded once per store (its embeddings), not once per question.
        """
        missing = [h for h in dict.fromkeys(headings) if h not in self._headings]
        if missing:
            for heading, found in zip(missing, self.embeddings.embed_documents(missing), strict=True):
                self._headings[heading] = [float(x) for x in found]
        return max(headings, key=lambda h: sum(a * b for a, b in zip(vector, self._headings[h], strict=True)))

    def embed_query(self, query: str) -> list[float]:
        """The query vector of `query`, for the calls above that score against one question."""
        self._check(query, 1)
        return self._embed_query(query)

    # -- helpers ----------------------------------------------------------------------------

    @staticmethod
    def _check(query: str, top_k: int) -> None:
        if not isinstance(query, str) or not query.strip():
            raise ValueError("the query is empty: ask a question to search the documents")
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")

    def _embed_query(self, query: str) -> list[float]:
        return [float(x) for x in self.embeddings.embed_query(query)]

    def _lexical_index(self, collection: Collection) -> _Lexical:
        ids = collection.get(include=[])["ids"]
        fingerprint = hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()
        if self._lexical is None or self._lexical.fingerprint != fingerprint:
            got = collection.get(include=["documents"])
            self._lexical = _Lexical(fingerprint, list(got["ids"]), list(got["documents"] or []))
        return self._lexical

    @staticmethod
    def _hits_for(collection: Collection, ids: list[str], vector: Sequence[float]) -> dict[str, Hit]:
        """Chunks found only by BM25 still get their true cosine similarity."""
        got = collection.get(ids=ids, include=["documents", "metadatas", "embeddings"])
        qnorm = math.sqrt(sum(x * x for x in vector)) or 1.0
        out: dict[str, Hit] = {}
        embeds = got["embeddings"] if got["embeddings"] is not None else []
        for cid, doc, meta, emb in zip(
            got["ids"], got["documents"] or [], got["metadatas"] or [], embeds, strict=True
        ):
            values = [float(x) for x in emb]
            norm = math.sqrt(sum(x * x for x in values)) or 1.0
            score = sum(a * b for a, b in zip(vector, values, strict=True)) / (qnorm * norm)
            out[cid] = Hit(cid, str((meta or {}).get("doc_id", "")), doc or "", score, meta or {})
        return out


def reciprocal_rank_fusion(rankings: Iterable[Sequence[str]], k: int = RRF_K) -> list[str]:
    """Merge rankings by summing 1/(k + rank); ties keep the first ranking's order."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda item: -scores[item])


class _DocRetriever(Protocol):
    def retrieve_docs(self, query: str, top_k: int = 5) -> list[tuple[str, str, float]]: ...


def recall_at_k(store: _DocRetriever, items: Iterable[Mapping[str, Any]], k: int = 5) -> float:
    """Mean share of each item's gold documents found among the top `k` documents.

    Items without `gold_doc_ids` are skipped (they test other backends); no such item is 0.0.
    """
    recalls: list[float] = []
    for item in items:
        gold = set(item.get("gold_doc_ids") or [])
        if not gold:
            continue
        found = {doc_id for doc_id, _, _ in store.retrieve_docs(str(item["question"]), k)}
        recalls.append(len(gold & found) / len(gold))
    return sum(recalls) / len(recalls) if recalls else 0.0
