"""Confirmation-reply classifier on the held-out benchmark (local e5, no LLM).

Runs `tramita.core.confirmation.ConfirmationClassifier` (lexicon -> prototypes with a margin ->
"unsure", under the never-confirm guards) on `benchmarks/data/confirmation.jsonl` and prints, per
language and overall: the confusion matrix (rows: gold label, columns: prediction, "unsure"
included), the accuracy with "unsure" counted as wrong, the accuracy on decided items, the unsure
rate (those go to the LLM in production), and the count of false confirms ("confirm" predicted for
a reject, a correction or anything else), which must be 0.

Each benchmark line: {"text", "lang": "pt"|"en", "label", "kind", "split", optional "pending": the
values shown in the summary the user is answering}. "split" is "tune" for the lines the margins,
guards and prototypes were adjusted against, "holdout" for lines written afterwards and never tuned
on; both are reported. The enum values of every tool in policies/tools.yaml are passed as
`choices`, as the await_confirmation node would pass its tool's.

    .venv/bin/python benchmarks/confirmation_bench.py [--split holdout] [--margin 0.006] [--errors] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tramita.core.confirmation import (
    LABELS,
    ConfirmationClassifier,
    ConfirmationResult,
    e5_query_embedder,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "confirmation.jsonl"
TOOLS = ROOT / "policies" / "tools.yaml"
COLUMNS = (*LABELS, "unsure")


@dataclass
class Tally:
    """Counts for one slice (a language, or all)."""

    confusion: Counter[tuple[str, str]] = field(default_factory=Counter)
    stages: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        """Items counted."""
        return sum(self.confusion.values())

    @property
    def correct(self) -> int:
        """Items whose prediction is the gold label."""
        return sum(n for (gold, pred), n in self.confusion.items() if gold == pred)

    @property
    def unsure(self) -> int:
        """Items left to the LLM."""
        return sum(n for (_, pred), n in self.confusion.items() if pred == "unsure")

    @property
    def false_confirms(self) -> int:
        """"confirm" predicted for a reply that is not one: must stay 0."""
        return sum(n for (gold, pred), n in self.confusion.items() if pred == "confirm" and gold != "confirm")

    def summary(self) -> dict[str, Any]:
        """The figures print_report and --json show."""
        decided = self.total - self.unsure
        return {
            "items": self.total,
            "accuracy": round(self.correct / self.total, 4) if self.total else 0.0,
            "accuracy_decided": round(self.correct / decided, 4) if decided else 0.0,
            "unsure_rate": round(self.unsure / self.total, 4) if self.total else 0.0,
            "false_confirms": self.false_confirms,
            "stages": dict(self.stages),
            "confusion": {g: {p: self.confusion[(g, p)] for p in COLUMNS} for g in LABELS},
        }


def load_items(path: Path = DATA) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def enum_choices(path: Path = TOOLS) -> list[str]:
    """Every enum value of every tool parameter: what a node passes for its tool, here for all."""
    tools = yaml.safe_load(path.read_text(encoding="utf-8")).get("tools", [])
    values = {str(v) for t in tools for p in (t.get("params", {}).get("properties", {}) or {}).values()
              if isinstance(p, dict) for v in p.get("enum", [])}
    return sorted(values)


def run(classifier: ConfirmationClassifier, items: list[dict[str, Any]],
        choices: list[str]) -> tuple[dict[str, Tally], list[tuple[dict[str, Any], ConfirmationResult]]]:
    results = classifier.classify_batch([it["text"] for it in items], [it.get("pending", []) for it in items], choices)
    tallies: dict[str, Tally] = {"pt": Tally(), "en": Tally(), "all": Tally()}
    errors = []
    for it, res in zip(items, results, strict=True):
        split = it.get("split", "tune")
        tallies.setdefault(f"split {split}", Tally())
        for key in (it["lang"], "all", f"split {split}"):
            tallies[key].confusion[(it["label"], res.label)] += 1
            tallies[key].stages[res.stage] += 1
        if res.label != it["label"]:
            errors.append((it, res))
    return tallies, errors


def print_report(tallies: dict[str, Tally], errors: list[tuple[dict[str, Any], ConfirmationResult]],
                 classifier: ConfirmationClassifier, show_errors: bool) -> None:
    print(f"margin {classifier.margin}, confirm_margin {classifier.confirm_margin}, top_k {classifier.top_k}")
    for key in ("pt", "en", "all", *sorted(k for k in tallies if k.startswith("split "))):
        s = tallies[key].summary()
        print(f"\n== {key}: {s['items']} items  accuracy {s['accuracy']:.3f} (unsure = wrong)  "
              f"decided {s['accuracy_decided']:.3f}  unsure {s['unsure_rate']:.3f}  false confirms {s['false_confirms']}")
        print(f"   stages {s['stages']}")
        print("   gold\\pred " + " ".join(f"{c:>8}" for c in COLUMNS))
        for gold in LABELS:
            print(f"   {gold:<9} " + " ".join(f"{s['confusion'][gold][c]:>8}" for c in COLUMNS))
    if show_errors and errors:
        print("\nerrors (gold -> predicted, stage, margin, reason):")
        for it, res in errors:
            print(f"  [{it['lang']}/{it['kind']}] {it['text']!r}: {it['label']} -> {res.label} "
                  f"({res.stage}, {res.margin:.4f}, {res.reason})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--split", choices=("tune", "holdout"), default=None, help="only this split (default: all)")
    ap.add_argument("--margin", type=float, default=None, help="override the YAML margin")
    ap.add_argument("--confirm-margin", type=float, default=None, help="override the YAML confirm_margin")
    ap.add_argument("--top-k", type=int, default=None, help="override the YAML top_k")
    ap.add_argument("--errors", action="store_true", help="list the misclassified items")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = ap.parse_args(argv)

    from tools.embeddings import make_embeddings

    started = time.perf_counter()
    classifier = ConfirmationClassifier.from_file(e5_query_embedder(make_embeddings()), margin=args.margin,
                                                  confirm_margin=args.confirm_margin, top_k=args.top_k)
    items = [it for it in load_items(args.data) if args.split in (None, it.get("split", "tune"))]
    tallies, errors = run(classifier, items, enum_choices())
    elapsed = time.perf_counter() - started
    if args.json:
        print(json.dumps({"margin": classifier.margin, "confirm_margin": classifier.confirm_margin,
                          "top_k": classifier.top_k, "seconds": round(elapsed, 1),
                          **{k: t.summary() for k, t in tallies.items()}}, indent=2))
    else:
        print_report(tallies, errors, classifier, args.errors)
        print(f"\n{len(items)} items in {elapsed:.1f} s (model load included)")
    return 1 if tallies["all"].false_confirms else 0


if __name__ == "__main__":
    raise SystemExit(main())
