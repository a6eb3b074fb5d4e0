"""Tool routing accuracy of the registry's embedding match (local e5, no LLM).

(a) Leave-one-out over every example of policies/tools.yaml: the example is removed from its tool
    (its own vector AND its text inside the tool's HZV vector), then embedded as a query and ranked
    against the remaining vectors with the registry's own scoring (`ToolIndex.rank`) and margin
    rule (`decide`, every tool permitted).
(b) The first turn of each dev conversation, through a real `Registry` (temporary SQLite copy of the
    dataset + temporary Chroma, synced from policies/tools.yaml) as the conversation's user. The
    expected tool is the turn's `expect.tool`, else its `expect.executed`; a first turn with
    neither (the injection in c-dev-015) is skipped and listed.

Both print top-1 / top-3 accuracy and how many matches the margin rule decided "clear", "close"
(the LLM would choose), "denied" or "none":

    .venv/bin/python benchmarks/routing_accuracy.py [--json]
"""

from __future__ import annotations

import argparse
import inspect
import json
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from tools.registry import Registry, ToolIndex, decide
from tools.registry_models import ToolSpec, load_tool_file
from tramita.base.paths import POLICIES_DIR, SAMPLE_DIR

_DEFAULTS = inspect.signature(Registry).parameters
FLOOR: float = _DEFAULTS["floor"].default  # the registry's own margin-rule settings
MARGIN: float = _DEFAULTS["margin"].default


@dataclass
class Routing:
    """Accuracy of one query set; `misses` lists (query, expected, top-3)."""

    total: int = 0
    top1: int = 0
    top3: int = 0
    decisions: Counter[str] = field(default_factory=Counter)
    clear_wrong: int = 0  # decided "clear" (zero LLM calls) on the wrong tool: the costly error
    misses: list[tuple[str, str, list[str]]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def add(self, query: str, expected: str, ranked: list[str], decision: str, best: str | None) -> None:
        """Count one routed query: top-1 hit, decision kind, and the miss when wrong."""
        self.total += 1
        self.top1 += int(ranked[:1] == [expected])
        self.top3 += int(expected in ranked[:3])
        self.decisions[decision] += 1
        self.clear_wrong += int(decision == "clear" and best != expected)
        if ranked[:1] != [expected]:
            self.misses.append((query, expected, ranked[:3]))

    def summary(self) -> dict[str, Any]:
        """The tallies as a JSON-ready dict."""
        out = asdict(self)
        out["decisions"] = dict(self.decisions)
        out["top1_accuracy"] = round(self.top1 / self.total, 4) if self.total else None
        out["top3_accuracy"] = round(self.top3 / self.total, 4) if self.total else None
        return out


def leave_one_out(specs: list[ToolSpec], embeddings: Embeddings, *, floor: float = FLOOR,
                  margin: float = MARGIN) -> Routing:
    """Each example held out in turn; every text is embedded once (documents and queries alike)."""
    full: dict[str, list[np.ndarray]] = {}
    doc_texts: list[str] = []
    for s in specs:  # the registry's vectors per tool: HZV, description, each example
        doc_texts += [s.embedding_text(), s.description, *s.examples]
    held: list[tuple[ToolSpec, int]] = [(s, i) for s in specs for i in range(len(s.examples))]
    reduced_hzv = [s.model_copy(update={"examples": s.examples[:i] + s.examples[i + 1:]}).embedding_text() for s, i in held]
    vectors = embeddings.embed_documents(doc_texts + reduced_hzv)
    queries = [np.asarray(embeddings.embed_query(s.examples[i]), dtype=np.float32) for s, i in held]
    pos = 0
    for s in specs:
        n = 2 + len(s.examples)
        full[s.name] = [np.asarray(v, dtype=np.float32) for v in vectors[pos:pos + n]]
        pos += n
    reduced = [np.asarray(v, dtype=np.float32) for v in vectors[pos:]]
    result = Routing()
    for (spec, i), q, hzv in zip(held, queries, reduced, strict=True):
        groups = dict(full)
        own = full[spec.name]
        groups[spec.name] = [hzv, own[1], *[v for j, v in enumerate(own[2:]) if j != i]]
        ranked = ToolIndex.build("loo", groups).rank(q)
        verdict = decide(ranked, lambda _name: True, floor=floor, margin=margin)
        result.add(spec.examples[i], spec.name, [n for n, _ in ranked], verdict.decision, verdict.best)
    return result


def dev_first_turns(registry: Registry, conversations: Path = SAMPLE_DIR / "conversations.dev.jsonl") -> Routing:
    """First turn of each dev conversation, matched as its user through the registry."""
    result = Routing()
    for line in conversations.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        turn = item["turns"][0]
        expected = turn["expect"].get("tool") or turn["expect"].get("executed")
        m = registry.match(turn["user"], item["user_id"])
        if not expected:
            result.skipped.append(f"{item['id']} {turn['user']!r}: no expected tool (matched {m.best} as "
                                  f"{m.decision!r}; in the graph, route_turn's safety screen refuses it first)")
            continue
        result.add(f"{item['id']} {turn['user']}", expected, [c.name for c in m.candidates], m.decision, m.best)
    return result


def temp_registry(workdir: Path, embeddings: Embeddings) -> Registry:
    """A registry synced from policies/tools.yaml on a temporary copy of the dataset."""
    from ingest.sql_loader import load_sql
    from tools.database import writer_engine

    url = f"sqlite:///{workdir / 'novaops.db'}"
    load_sql(url, progress=False)
    registry = Registry(writer_engine(url), chroma_dir=workdir / "chroma", embeddings=embeddings)
    registry.sync()
    return registry


def _print(title: str, r: Routing) -> None:
    s = r.summary()
    print(f"{title}: top-1 {r.top1}/{r.total} = {s['top1_accuracy']}, top-3 {r.top3}/{r.total} = {s['top3_accuracy']}; "
          f"decisions {dict(r.decisions)}; clear-but-wrong {r.clear_wrong}")
    for query, expected, top in r.misses:
        print(f"  miss: {query!r} expected {expected}, got {top}")
    for note in r.skipped:
        print(f"  skipped: {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=Path, default=POLICIES_DIR / "tools.yaml")
    parser.add_argument("--json", action="store_true", help="also print a JSON summary")
    args = parser.parse_args(argv)
    from tools.embeddings import make_embeddings

    embeddings = make_embeddings()
    specs = list(load_tool_file(args.tools).tools)
    loo = leave_one_out(specs, embeddings)
    _print(f"(a) leave-one-out over {loo.total} examples of {len(specs)} tools", loo)
    with tempfile.TemporaryDirectory(prefix="routing_") as tmp:
        dev = dev_first_turns(temp_registry(Path(tmp), embeddings))
    _print("(b) dev conversations, first turns", dev)
    if args.json:
        print(json.dumps({"floor": FLOOR, "margin": MARGIN, "leave_one_out": loo.summary(),
                          "dev_first_turns": dev.summary()}, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
