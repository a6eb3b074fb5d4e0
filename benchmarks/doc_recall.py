"""Document recall@k on the NovaOps dev questions: vector-only vs hybrid (vector + BM25).

Loads the sample documents with the real embeddings into a throwaway Chroma directory (or the
one given) and prints one figure per mode, plus the questions each mode missed:

    .venv/bin/python benchmarks/doc_recall.py [--k 5] [--chroma-dir DIR] [--questions FILE]
    .venv/bin/python benchmarks/doc_recall.py --store DATA_DIR/chroma   # an ingested store, read only

Tune on `questions.own.jsonl`; run the dev file only as a check.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from ingest.doc_loader import load_docs
from tools.doc_store import DocStore, recall_at_k
from tools.embeddings import make_embeddings
from tramita.base.paths import SAMPLE_DIR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--chroma-dir", type=Path, default=None)
    parser.add_argument("--questions", type=Path, default=SAMPLE_DIR / "questions.own.jsonl")
    parser.add_argument("--store", type=Path, default=None,
                        help="an already ingested Chroma directory, searched as is (nothing is loaded)")
    args = parser.parse_args(argv)

    lines = args.questions.read_text(encoding="utf-8").splitlines()
    items = [json.loads(line) for line in lines if line.strip()]
    items = [item for item in items if item.get("gold_doc_ids")]
    embeddings = make_embeddings()
    if args.store:
        _report(DocStore(args.store, embeddings=embeddings, hybrid=False), items, args.k, "store (as configured: vector)")
        return 0
    with tempfile.TemporaryDirectory(prefix="doc_recall_") as tmp:
        chroma = args.chroma_dir or Path(tmp) / "chroma"
        chunks = load_docs(chroma, embeddings=embeddings, progress=False)
        print(f"{chunks} chunks, {len(items)} questions with gold documents, k={args.k}")
        for hybrid in (False, True):
            _report(DocStore(chroma, embeddings=embeddings, hybrid=hybrid), items, args.k,
                    "hybrid" if hybrid else "vector")
    return 0


class _AsTheBackendSearches:
    """The store searched as the docs backend searches it (`tools.backends.docs.search`: a
    question that asks two things is also searched part by part).
    """

    def __init__(self, store: DocStore) -> None:
        self.store = store

    def retrieve_docs(self, query: str, top_k: int = 5) -> list[tuple[str, str, float]]:
        from tools.backends.docs import search

        hits = search(self.store, query, top_k)
        return [h for i, h in enumerate(hits) if h[0] not in {d for d, _, _ in hits[:i]}][:top_k]


def _report(plain: DocStore, items: list[dict[str, Any]], k: int, label: str) -> None:
    """Recall@k of one store setting and the questions it missed."""
    store = _AsTheBackendSearches(plain)
    figure = recall_at_k(store, items, k=k)
    print(f"{label}: recall@{k} = {figure:.3f} over {len(items)} questions")
    for item in items:
        found = [d for d, _, _ in store.retrieve_docs(item["question"], k)]
        if not set(item["gold_doc_ids"]) <= set(found):
            print(f"  miss {item['id']}: {item['question']!r} -> {found}")


if __name__ == "__main__":
    raise SystemExit(main())
