"""Document ingest and retrieval on a real Chroma directory.

Most tests use `HashingEmbeddings`, a deterministic bag-of-words embedder defined here: it stands
in for the *model* only (so these tests stay fast), never for Chroma. The e5 tests at the end use
the project's real embeddings.
"""

from __future__ import annotations

import hashlib
import math
import re
import shutil
from pathlib import Path

import pytest
from langchain_core.embeddings import Embeddings

from ingest.doc_loader import DocFormatError, chunk_doc, chunk_docs, load_docs
from tools.doc_store import (
    DocStore,
    DocStoreUnavailable,
    recall_at_k,
    reciprocal_rank_fusion,
)
from tramita.base.paths import SAMPLE_DIR

DOCS = SAMPLE_DIR / "docs"
N_DOCS = 21


class HashingEmbeddings(Embeddings):
    """Hashed bag of words, L2-normalised; counts how many texts it embedded."""

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim
        self.embedded = 0

    def _vector(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        for word in re.findall(r"\w+", text.lower()):
            vec[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        norm = math.sqrt(sum(x * x for x in vec)) or 1.0
        return [x / norm for x in vec]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.embedded += len(texts)
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


def _ids(store: DocStore) -> set[str]:
    return set(store.collection().get(include=[])["ids"])


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, HashingEmbeddings]:
    """All sample documents loaded once into a real Chroma directory."""
    chroma = tmp_path_factory.mktemp("chroma")
    emb = HashingEmbeddings()
    load_docs(chroma, DOCS, embeddings=emb, progress=False)
    return chroma, emb


# -- chunking ---------------------------------------------------------------------------------


def test_every_chunk_keeps_front_matter_and_is_self_describing() -> None:
    chunks = chunk_docs(DOCS)
    assert {c.metadata["doc_id"] for c in chunks} == {p.stem for p in DOCS.glob("*.md")}
    for chunk in chunks:
        meta = chunk.metadata
        for key in ("doc_id", "title", "lang", "type", "owner_team", "related_ids", "section"):
            assert meta.get(key), (chunk.id, key)
        assert all(isinstance(v, (str, int, float, bool)) for v in meta.values()), meta
        assert chunk.page_content.startswith(f"{meta['title']} — {meta['section']}\n\n")
        body = chunk.page_content.split("\n\n", 1)[1]
        if body.startswith("|") and "\n|---" in body[:400]:  # a table's header carried into a cut piece
            body = body.split("\n", 2)[2]
        assert len(body) <= 800
    expense = [c for c in chunks if c.metadata["doc_id"] == "doc-pol-expense"]
    assert expense[0].metadata["policy_id"] == "POL-001"
    assert expense[0].metadata["version"] == "3.2"
    assert expense[0].metadata["effective_date"] == "2026-01-01"
    assert "POL-001" in expense[0].metadata["related_ids"].split(",")
    assert any(c.metadata["section"] == "2. Limites por categoria" for c in expense)
    # Stable ids: chunking twice gives the same ids.
    assert [c.id for c in chunk_docs(DOCS)] == [c.id for c in chunks]


def test_a_table_cut_across_chunks_keeps_its_header_in_each(tmp_path: Path) -> None:
    """Written for this test: a 40-row table is cut into several chunks; every chunk that holds
    its rows names the columns, and a chunk of prose after it gets no header."""
    rows = "\n".join(f"| item-{i:02d} | {i * 10} | nota {i} |" for i in range(40))
    doc = tmp_path / "doc-test-table.md"
    doc.write_text("---\ndoc_id: doc-test-table\ntitle: Tabela de teste\nlang: pt\ntype: policy\n"
                   "owner_team: T01\nrelated_ids: [T01]\n---\n\n# Tabela de teste\n\n## 1. Valores\n\n"
                   "Os valores abaixo valem por pedido.\n\n| Item | Valor (USD) | Nota |\n|---|---|---|\n"
                   f"{rows}\n\n" + "Depois da tabela vem um texto comum, sem colunas, que fala de outra coisa. " * 15 + "\n",
                   encoding="utf-8")
    chunks = chunk_doc(doc)
    with_rows = [c.page_content for c in chunks if "| item-" in c.page_content]
    assert len(with_rows) >= 2
    assert all("| Item | Valor (USD) | Nota |\n|---|---|---|" in text for text in with_rows)
    assert "item-39" in with_rows[-1]
    prose = [c.page_content for c in chunks if "| item-" not in c.page_content]
    assert prose and all("| Item |" not in text for text in prose)


def test_bad_front_matter_names_file_and_field(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    bad = docs / "doc-pol-travel.md"
    bad.write_text(bad.read_text(encoding="utf-8").replace("lang: pt\n", ""), encoding="utf-8")
    chroma = tmp_path / "chroma"
    with pytest.raises(DocFormatError, match=r"doc-pol-travel\.md: field 'lang'"):
        load_docs(chroma, docs, embeddings=HashingEmbeddings(), progress=False)
    assert not chroma.exists()  # every file is parsed before anything is written


# -- loading ----------------------------------------------------------------------------------


def test_all_docs_loaded_and_second_load_adds_nothing(
    loaded: tuple[Path, HashingEmbeddings],
) -> None:
    chroma, emb = loaded
    store = DocStore(chroma, embeddings=emb)
    assert store.available()
    assert len(store.doc_ids()) == N_DOCS
    before = _ids(store)
    assert store.count() == len(before) == len(chunk_docs(DOCS))
    embedded = emb.embedded
    stored = load_docs(chroma, DOCS, embeddings=emb, progress=False)
    assert stored == len(before)
    assert emb.embedded == embedded  # nothing re-embedded
    assert _ids(store) == before


def test_changed_doc_replaces_its_chunks_and_removed_doc_disappears(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    chroma = tmp_path / "chroma"
    emb = HashingEmbeddings()
    load_docs(chroma, docs, embeddings=emb, progress=False)
    store = DocStore(chroma, embeddings=emb)
    first = _ids(store)

    travel = docs / "doc-pol-travel.md"
    travel.write_text(
        travel.read_text(encoding="utf-8")
        + "\n## 9. Zeppelin\n\nViagens de zeppelin exigem aprovação do conselho.\n",
        encoding="utf-8",
    )
    (docs / "doc-pol-budget.md").unlink()
    load_docs(chroma, docs, embeddings=emb, progress=False)

    second = _ids(store)
    assert store.doc_ids() == {p.stem for p in docs.glob("*.md")}
    assert "doc-pol-budget" not in store.doc_ids()
    untouched = {i for i in first if not i.startswith(("doc-pol-travel:", "doc-pol-budget:"))}
    assert untouched <= second
    assert second == {c.id for c in chunk_docs(docs)}
    old_travel = {i for i in first if i.startswith("doc-pol-travel:")}
    new_travel = {i for i in second if i.startswith("doc-pol-travel:")}
    assert len(new_travel) == len(old_travel) + 1
    top = store.retrieve("zeppelin conselho", top_k=1)
    assert top[0][0] == "doc-pol-travel" and "zeppelin" in top[0][1]


def test_reset_reloads_from_scratch(tmp_path: Path) -> None:
    chroma = tmp_path / "chroma"
    emb = HashingEmbeddings()
    n = load_docs(chroma, DOCS, embeddings=emb, progress=False)
    load_docs(chroma, DOCS, embeddings=emb, reset=True, progress=False)
    assert emb.embedded == 2 * n
    assert DocStore(chroma, embeddings=emb).count() == n


def test_load_never_uses_chromas_default_embedding_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chromadb.utils import embedding_functions as ef

    # Chroma checks an embedding function's __call__ signature, so the guards keep it.
    def refuse_call(self: object, input: object) -> object:
        raise AssertionError("Chroma's default embedding function was called (it downloads)")

    def refuse_init(self: object, *_args: object, **_kwargs: object) -> None:
        raise AssertionError("Chroma's default embedding function was constructed")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(ef.DefaultEmbeddingFunction, "__call__", refuse_call)
    monkeypatch.setattr(ef.DefaultEmbeddingFunction, "__init__", refuse_init)
    monkeypatch.setattr(ef.ONNXMiniLM_L6_V2, "__call__", refuse_call)
    chroma = tmp_path / "chroma"
    emb = HashingEmbeddings()
    load_docs(chroma, DOCS, embeddings=emb, progress=False)
    for hybrid in (False, True):
        store = DocStore(chroma, embeddings=emb, hybrid=hybrid)
        assert store.retrieve_docs("limite de reembolso para refeições", top_k=3)


# -- retrieval --------------------------------------------------------------------------------


def test_scores_are_cosine_similarities(loaded: tuple[Path, HashingEmbeddings]) -> None:
    chroma, emb = loaded
    store = DocStore(chroma, embeddings=emb, hybrid=False)
    hits = store.retrieve("Redis eviction storm maxmemory-policy", top_k=5)
    assert len(hits) == 5
    qv = emb.embed_query("Redis eviction storm maxmemory-policy")
    for _doc_id, passage, score in hits:
        dv = emb.embed_query(passage)  # same vectors as stored: the embedder is deterministic
        assert score == pytest.approx(sum(a * b for a, b in zip(qv, dv, strict=True)), abs=1e-4)
    assert [s for _, _, s in hits] == sorted((s for _, _, s in hits), reverse=True)


def test_retrieve_docs_gives_distinct_documents(loaded: tuple[Path, HashingEmbeddings]) -> None:
    chroma, emb = loaded
    for hybrid in (False, True):
        store = DocStore(chroma, embeddings=emb, hybrid=hybrid)
        docs = store.retrieve_docs("Postmortem incidente causa raiz", top_k=8)
        ids = [d for d, _, _ in docs]
        assert len(ids) == 8 == len(set(ids))


def test_hybrid_finds_exact_identifiers(loaded: tuple[Path, HashingEmbeddings]) -> None:
    chroma, emb = loaded
    store = DocStore(chroma, embeddings=emb, hybrid=True)
    top = store.retrieve_docs("allkeys-random", top_k=1)
    assert top[0][0] == "doc-pm-inc-2047"


def test_bad_queries_are_refused(loaded: tuple[Path, HashingEmbeddings]) -> None:
    chroma, emb = loaded
    store = DocStore(chroma, embeddings=emb)
    with pytest.raises(ValueError, match="empty"):
        store.retrieve("   ")
    with pytest.raises(ValueError, match="top_k"):
        store.retrieve("reembolso", top_k=0)


def test_reciprocal_rank_fusion_rewards_agreement() -> None:
    assert reciprocal_rank_fusion([["a", "b", "c"], ["b", "d"]]) == ["b", "a", "d", "c"]
    assert reciprocal_rank_fusion([["a"], ["z"]]) == ["a", "z"]  # ties keep the vector order


def test_recall_at_k_counts_per_document(loaded: tuple[Path, HashingEmbeddings]) -> None:
    chroma, emb = loaded
    store = DocStore(chroma, embeddings=emb, hybrid=True)
    items = [
        {"question": "allkeys-random", "gold_doc_ids": ["doc-pm-inc-2047"]},
        {"question": "allkeys-random", "gold_doc_ids": ["doc-pm-inc-2047", "doc-nonexistent"]},
        {"question": "quantas linhas tem a tabela?", "gold_doc_ids": []},  # skipped
    ]
    assert recall_at_k(store, items, k=5) == pytest.approx(0.75)


# -- unavailable stores -----------------------------------------------------------------------


def test_missing_directory_is_unavailable_and_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    store = DocStore(missing, embeddings=HashingEmbeddings())
    assert store.available() is False
    with pytest.raises(DocStoreUnavailable, match=r"no document store at .*nowhere.*load_docs"):
        store.retrieve("reembolso")
    assert not missing.exists()


def test_corrupt_directory_is_unavailable(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "chroma.sqlite3").write_bytes(b"this is not a sqlite database" * 100)
    store = DocStore(corrupt, embeddings=HashingEmbeddings())
    assert store.available() is False
    with pytest.raises(DocStoreUnavailable, match="cannot be opened"):
        store.retrieve("reembolso")


def test_empty_collection_is_unavailable(tmp_path: Path) -> None:
    chroma = tmp_path / "chroma"
    store = DocStore(chroma, embeddings=HashingEmbeddings())
    store.collection(create=True)
    assert store.available() is False
    with pytest.raises(DocStoreUnavailable, match="empty"):
        store.retrieve("reembolso")
    other = DocStore(chroma, embeddings=HashingEmbeddings(), collection="other_docs")
    with pytest.raises(DocStoreUnavailable, match="no collection 'other_docs'"):
        other.count()


def test_store_built_with_another_model_says_so(loaded: tuple[Path, HashingEmbeddings]) -> None:
    chroma, _ = loaded
    store = DocStore(chroma, embeddings=HashingEmbeddings(dim=64))
    with pytest.raises(DocStoreUnavailable, match="reset=True"):
        store.retrieve("reembolso")


# -- real e5 embeddings -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def e5_loaded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Embeddings]:
    """The sample documents embedded with the project's real e5 model (about 170 chunks)."""
    from tools.embeddings import make_embeddings

    emb = make_embeddings()
    chroma = tmp_path_factory.mktemp("chroma_e5")
    load_docs(chroma, DOCS, embeddings=emb, progress=False)
    return chroma, emb


@pytest.mark.parametrize("hybrid", [False, True])
@pytest.mark.parametrize(
    ("question", "doc_id"),
    [
        ("Qual o limite de reembolso por pedido para refeições?", "doc-pol-expense"),
        ("What is the resolution target for a SEV2 incident?", "doc-pol-incident-sla"),
    ],
)
def test_e5_finds_the_policy(
    e5_loaded: tuple[Path, Embeddings], question: str, doc_id: str, hybrid: bool
) -> None:
    chroma, emb = e5_loaded
    store = DocStore(chroma, embeddings=emb, hybrid=hybrid)
    found = store.retrieve_docs(question, top_k=5)
    assert doc_id in [d for d, _, _ in found], found
    assert all(0.0 < score <= 1.0 for _, _, score in found)
