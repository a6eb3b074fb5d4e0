"""The tool registry's vector side: the Chroma vectors, the in-memory index and the margin rule.

Each tool has several vectors in a Chroma collection keyed by `tenant:name:vVERSION` (plus `:d` for
the description and `:eN` per example), so an unchanged version is never re-embedded and a higher
version gets new vectors. `ToolVectors` writes them and builds, once per registry revision and
tenant, a `ToolIndex` (one matrix of unit vectors); `decide` turns ranked scores into a verdict.
The SQL catalog is `tools.registry`; who may use a tool is `tools.registry_permissions`.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from tools.registry_models import RegistryError, ToolSpec

__all__ = [
    "COLLECTION",
    "Candidate",
    "MatchResult",
    "ToolIndex",
    "ToolVectors",
    "decide",
    "embedding_id",
]

log = logging.getLogger("tramita.registry")
COLLECTION = "tool_registry"
_VEC_SUFFIX = re.compile(r":(d|e\d+)$")  # description / example vectors beside the HZV vector
_BATCH = 500
_PAGE = 5000


@dataclass
class Candidate:
    """One ranked tool: its name, its best cosine and whether the user may use it."""

    name: str
    score: float
    permitted: bool


@dataclass
class MatchResult:
    """Top candidates plus the margin rule's verdict.

    `decision` is "clear" (top permitted candidate wins by the margin), "close" (the LLM should
    choose among `candidates`), "denied" (the clear winner is a tool the user may not use) or
    "none" (below the floor: not a tool request).
    """

    candidates: list[Candidate]
    decision: str
    best: str | None = None


@dataclass
class ToolIndex:
    """The visible tools' unit vectors, grouped by tool and built once per registry revision.

    Scoring a query is one matrix-vector product plus one segmented max (`np.maximum.reduceat`);
    only the top `k` tools are sorted and turned into Python objects, so the per-call cost does not
    grow with Python work per tool (10,000 tools: see tramita/lab/registry_bench.py).
    """

    revision: str
    names: list[str]  # one per tool that has vectors, in row-group order
    offsets: np.ndarray  # first row of each tool's group (for np.maximum.reduceat)
    matrix: np.ndarray  # unit vectors, grouped by tool

    @classmethod
    def build(cls, revision: str, groups: Mapping[str, Sequence[Sequence[float] | np.ndarray]]) -> ToolIndex:
        """`groups`: tool name → its vectors (any norm; they are normalised here)."""
        names = [n for n, vecs in groups.items() if len(vecs)]
        if not names:
            return cls(revision, [], np.zeros(0, dtype=np.int64), np.zeros((0, 1), dtype=np.float32))
        sizes = [len(groups[n]) for n in names]
        offsets = np.cumsum([0, *sizes[:-1]]).astype(np.int64)
        matrix = np.ascontiguousarray(np.vstack([np.asarray(v, dtype=np.float32) for n in names for v in groups[n]]))
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True) + 1e-12
        return cls(revision, names, offsets, matrix)

    def rank(self, query_vector: Iterable[float] | np.ndarray, k: int | None = None) -> list[tuple[str, float]]:
        """Per tool, the best cosine of the query against its vectors; best first (top `k` only)."""
        if not self.names:
            return []
        q = np.asarray(query_vector if isinstance(query_vector, np.ndarray) else list(query_vector), dtype=np.float32)
        q = q / (np.linalg.norm(q) + 1e-12)
        with _BLAS_LOCK, _one_blas_thread():
            cosines = self.matrix @ q
        best = np.maximum.reduceat(cosines, self.offsets)
        if k is not None and 0 < k < len(best):
            top = np.argpartition(-best, k - 1)[:k]
            order = top[np.argsort(-best[top], kind="stable")]
        else:
            order = np.argsort(-best, kind="stable")
        return [(self.names[i], float(best[i])) for i in order]


_BLAS_LOCK = threading.Lock()
_blas_controller: Any = None  # threadpoolctl's controller of numpy's BLAS; False when unavailable


def _one_blas_thread() -> contextlib.AbstractContextManager[Any]:
    """Run one matrix-vector product on a single BLAS thread.

    OpenBLAS splits even a 6,000 x 384 product across both cores, and when the other core is busy
    (llama.cpp, e5, another process) the product waits for it: 12 ms instead of 0.2 ms measured on
    the 2-core box. The product is memory-bound, so one thread loses nothing when the machine is
    idle. threadpoolctl comes with scikit-learn (a sentence-transformers dependency); without it
    BLAS keeps its own setting.
    """
    global _blas_controller
    if _blas_controller is None:
        try:
            from threadpoolctl import ThreadpoolController

            _blas_controller = ThreadpoolController().select(user_api="blas")
        except Exception:  # noqa: BLE001 - optional speed-up only
            _blas_controller = False
    return _blas_controller.limit(limits=1) if _blas_controller else contextlib.nullcontext()


def decide(ranked: Sequence[tuple[str, float]], permitted: Callable[[str], bool], *, floor: float, margin: float,
           k: int = 3) -> MatchResult:
    """The margin rule over ranked (tool, score) pairs.

    e5 scores bunch together, so a fixed cut-off fails; the top tool is accepted when it clears
    `floor` and beats the runner-up by `margin`. Kept free of storage so benchmarks score held-out
    examples with the same rule.
    """
    cands = [Candidate(n, s, permitted(n)) for n, s in ranked[:k]]
    if not cands or cands[0].score < floor:
        return MatchResult(cands, "none")
    top = cands[0]
    runner = cands[1].score if len(cands) > 1 else 0.0
    if top.score - runner >= margin:
        return MatchResult(cands, "clear" if top.permitted else "denied", top.name)
    close = [c for c in cands if top.score - c.score < margin]
    permitted_close = [c for c in close if c.permitted]
    if not permitted_close:
        return MatchResult(cands, "denied", top.name)
    return MatchResult(cands, "close", permitted_close[0].name)


def embedding_id(spec: ToolSpec) -> str:
    """The id of a tool version's main vector (`tenant:name:vVERSION`); the SQL row stores it too."""
    return f"{spec.tenant}:{spec.name}:v{spec.version}"


def _batches(items: Sequence[str], size: int = _BATCH) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start:start + size])


EmbeddingsSource = Embeddings | Callable[[], Embeddings] | None


class ToolVectors:
    """The tools' vectors in Chroma and the per-tenant `ToolIndex` built from them.

    `source` is an `Embeddings`, a factory of one (called on first use) or None for the default
    e5 model. `embed_calls` counts tools (re)embedded and `embedded_texts` the texts sent to the
    model; the version-bump tests count them.
    """

    def __init__(self, chroma_dir: str | None, source: EmbeddingsSource = None) -> None:
        """Vectors in the Chroma directory `chroma_dir` (None: none configured), embedded by `source`."""
        self.chroma_dir = chroma_dir
        self.source: EmbeddingsSource = source
        self.embed_calls = 0
        self.embedded_texts = 0
        self._lock = threading.Lock()
        self._index: dict[str, ToolIndex] = {}

    def embeddings(self) -> Embeddings:
        """The embedding model, created on first use."""
        if self.source is None:
            from tools.embeddings import make_embeddings

            self.source = make_embeddings()
        if not isinstance(self.source, Embeddings):
            self.source = self.source()
        return self.source

    def collection(self, *, create: bool = True) -> Any:
        """The Chroma collection of tool vectors (created when `create`)."""
        if self.chroma_dir is None:
            raise RegistryError("no Chroma directory configured for tool embeddings")
        from tools.chroma_client import chroma_client

        client = chroma_client(self.chroma_dir, create=create)
        if not create:
            return client.get_collection(COLLECTION, embedding_function=None)
        return client.get_or_create_collection(COLLECTION, metadata={"hnsw:space": "cosine"}, embedding_function=None)

    def embed(self, specs: list[ToolSpec]) -> list[str]:
        """Embed the tools whose current version has no vectors yet; returns their names.

        Each tool gets its HZV_EMBEDD vector (description + all examples, as the catalog defines)
        plus one vector per example (HZZ) and one for the description alone. Matching takes the
        best of them: e5's scores bunch together, and nearest-example matching separates close
        tools (approve vs. reject vs. status of an expense) far better than one averaged vector.
        """
        if not specs:
            return []
        col = self.collection()
        ids = [embedding_id(s) for s in specs]
        # Chroma turns ids and `$in` lists into SQL variables: 10,000 names in one `$in` fail with
        # "too many SQL variables", so every lookup goes in batches
        have = {i for chunk in _batches(ids) for i in col.get(ids=chunk, include=[])["ids"]}
        todo = [s for s in specs if embedding_id(s) not in have]
        if not todo:
            return []
        texts: list[str] = []
        vec_ids: list[str] = []
        metas: list[dict[str, Any]] = []
        for s in todo:
            base = embedding_id(s)
            for suffix, text_ in [("", s.embedding_text()), (":d", s.description), *[(f":e{i}", e) for i, e in enumerate(s.examples)]]:
                texts.append(text_)
                vec_ids.append(base + suffix)
                metas.append({"tenant": s.tenant, "name": s.name, "version": s.version, "kind": suffix[1:2] or "hzv"})
        vectors = self.embeddings().embed_documents(texts)
        self.embed_calls += len(todo)
        self.embedded_texts += len(texts)
        keys = {(s.tenant, s.name) for s in todo}
        stale: list[str] = []
        for chunk in _batches(sorted({s.name for s in todo})):
            old = col.get(where={"name": {"$in": chunk}}, include=["metadatas"])
            stale += [i for i, m in zip(old["ids"], old["metadatas"] or [], strict=False)
                      if m and (m.get("tenant"), m.get("name")) in keys]
        for chunk in _batches(stale):
            col.delete(ids=chunk)
        for start in range(0, len(vec_ids), _BATCH):
            end = start + _BATCH
            col.upsert(ids=vec_ids[start:end], embeddings=[list(map(float, v)) for v in vectors[start:end]],
                       metadatas=metas[start:end], documents=texts[start:end])
        return [s.name for s in todo]

    def index(self, tenant: str, revision: str, visible: Sequence[ToolSpec]) -> ToolIndex:
        """The index of the `visible` tools of `tenant` at `revision`, built once per revision."""
        with self._lock:
            idx = self._index.get(tenant)
            if idx is not None and idx.revision == revision:
                return idx
        wanted = {embedding_id(s): s for s in visible}
        groups: dict[str, list[Any]] = {}
        if wanted:
            # The collection holds tool vectors only, so read it all, page by page: a `$in` over
            # 10,000 names, or one unpaged read of 60,000 vectors, fails inside Chroma with
            # "too many SQL variables".
            try:
                col = self.collection(create=False)
                for offset in range(0, col.count(), _PAGE):
                    got = col.get(include=["embeddings"], limit=_PAGE, offset=offset)
                    vectors = got["embeddings"] if got["embeddings"] is not None else []
                    for vid, vec in zip(got["ids"], vectors, strict=True):
                        spec = wanted.get(_VEC_SUFFIX.sub("", vid))
                        if spec is not None:
                            groups.setdefault(spec.name, []).append(vec)
            except Exception as exc:  # noqa: BLE001 - Chroma missing/corrupt: degrade, do not stop transactions
                groups = self._in_memory(list(wanted.values()), exc)
        idx = ToolIndex.build(revision, groups)
        with self._lock:
            self._index[tenant] = idx
        return idx

    def _in_memory(self, specs: list[ToolSpec], cause: Exception) -> dict[str, list[Any]]:
        """Fallback when the Chroma store of tool vectors is missing or corrupt.

        Embeds the enabled tools' texts in this process (a few dozen texts for a normal catalog) so
        transactions keep working; `tramita doctor` still reports the broken store and
        `tramita tools sync` repairs it.
        """
        log.warning("tool vectors unavailable (%s); embedding %d tools in memory", cause, len(specs))
        texts: list[str] = []
        owners: list[str] = []
        for spec in specs:
            for t in [spec.embedding_text(), spec.description, *spec.examples]:
                texts.append(t)
                owners.append(spec.name)
        vectors = self.embeddings().embed_documents(texts) if texts else []
        groups: dict[str, list[Any]] = {}
        for name, vec in zip(owners, vectors, strict=True):
            groups.setdefault(name, []).append(vec)
        return groups
