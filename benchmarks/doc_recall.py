"""Document recall@k on the NovaOps dev questions: vector-only vs hybrid (vector + BM25).

Loads the sample documents with the real embeddings into a throwaway Chroma directory (or the
one given) and prints one figure per mode, plus the questions each mode missed:

    .venv/bin/python benchmarks/doc_recall.py [--k 5] [--chroma-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from ingest.doc_loader import load_docs
from tools.doc_store import DocStore, recall_at_k
from tools.embeddings import make_embeddings
from tramita.base.paths import SAMPLE_DIR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--chroma-dir", type=Path, default=None)
    parser.add_argument("--questions", type=Path, default=SAMPLE_DIR / "questions.dev.jsonl")
    args = parser.parse_args(argv)

    lines = args.questions.read_text(encoding="utf-8").splitlines()
    items = [json.loads(line) for line in lines if line.strip()]
    items = [item for item in items if item.get("gold_doc_ids")]
    embeddings = make_embeddings()
    with tempfile.TemporaryDirectory(prefix="doc_recall_") as tmp:
        chroma = args.chroma_dir or Path(tmp) / "chroma"
        chunks = load_docs(chroma, embeddings=embeddings, progress=False)
        print(f"{chunks} chunks, {len(items)} questions with gold documents, k={args.k}")
        for hybrid in (False, True):
            store = DocStore(chroma, embeddings=embeddings, hybrid=hybrid)
            figure = recall_at_k(store, items, k=args.k)
            print(f"{'hybrid' if hybrid else 'vector'}: recall@{args.k} = {figure:.3f}")
            for item in items:
                found = [d for d, _, _ in store.retrieve_docs(item["question"], args.k)]
                if not set(item["gold_doc_ids"]) <= set(found):
                    print(f"  miss {item['id']}: {item['question']!r} -> {found}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
