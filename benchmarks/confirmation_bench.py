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

`--llm PROFILE` measures the whole decision as the await_confirmation node makes it: every item the
classifier leaves "unsure" goes to `tramita.core.confirmation.llm_decision` (prompts/confirmation.txt,
constrained to the labels the guards allowed) on that LLM profile, an unsure reply longer than
`LLM_REPLY_WORDS` or a failed call counts as "other" (the node sends both to intent_shift), and the
end-to-end accuracy and false confirms are reported next to the classifier's. Benchmark lines carry
no summary, so the model is shown a neutral one naming the pending values.

    .venv/bin/python benchmarks/confirmation_bench.py [--split holdout] [--margin 0.006] [--errors] [--json]
    .venv/bin/python benchmarks/confirmation_bench.py --llm local [--errors]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tools.llm import LLMError, Usage
from tramita.base.text import words
from tramita.core.confirmation import (
    LABELS,
    LLM_REPLY_WORDS,
    ConfirmationClassifier,
    ConfirmationResult,
    e5_query_embedder,
    llm_decision,
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


def classify_items(classifier: ConfirmationClassifier, items: list[dict[str, Any]],
                   choices: list[str]) -> list[ConfirmationResult]:
    """The classifier's verdict per item, in one embedding batch."""
    return classifier.classify_batch([it["text"] for it in items], [it.get("pending", []) for it in items], choices)


def run(classifier: ConfirmationClassifier, items: list[dict[str, Any]],
        choices: list[str]) -> tuple[dict[str, Tally], list[tuple[dict[str, Any], ConfirmationResult]]]:
    """Classify every item; tallies per language, split and overall, and the misclassified items."""
    results = classify_items(classifier, items, choices)
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


def neutral_summary(item: dict[str, Any]) -> str:
    """What the LLM is shown as the pending summary for a benchmark line (which has none)."""
    values = ", ".join(str(v) for v in item.get("pending", []))
    if item["lang"] == "pt":
        return f"Executar a ação pendente ({values})." if values else "Executar a ação pendente."
    return f"Run the pending action ({values})." if values else "Run the pending action."


@dataclass
class LLMRun:
    """The end-to-end figures of `--llm`: classifier verdicts, the LLM's for the unsure ones."""

    tallies: dict[str, Tally]
    errors: list[tuple[dict[str, Any], str, str]]  # (item, final label, how it was reached)
    calls: int = 0
    seconds: float = 0.0
    failures: int = 0


def run_llm(items: list[dict[str, Any]], results: list[ConfirmationResult], profile: str) -> LLMRun:
    """Send each unsure item to the LLM fallback exactly as the await_confirmation node does."""
    out = LLMRun(tallies={"pt": Tally(), "en": Tally(), "all": Tally()}, errors=[])
    usage = Usage()
    for it, res in zip(items, results, strict=True):
        label, how = str(res.label), str(res.stage)
        if res.label == "unsure":
            how = "llm"
            if 0 < len(words(it["text"])) <= LLM_REPLY_WORDS:
                try:
                    label = llm_decision(it["text"], neutral_summary(it), res.allowed, backend=profile, usage=usage)
                except LLMError:
                    label, how = "other", "llm-failed"
                    out.failures += 1
                print(f"  llm {usage.calls:>3}: {it['text']!r} -> {label} (gold {it['label']})", file=sys.stderr, flush=True)
            else:
                label, how = "other", "too-long"
        split = it.get("split", "tune")
        for key in (it["lang"], "all", f"split {split}"):
            out.tallies.setdefault(key, Tally()).confusion[(it["label"], label)] += 1
            out.tallies[key].stages[how] += 1
        if label != it["label"]:
            out.errors.append((it, label, how))
    out.calls, out.seconds = usage.calls, round(usage.seconds, 1)
    return out


def print_llm_report(run: LLMRun, profile: str, show_errors: bool) -> None:
    """End-to-end accuracy (target >= 0.97) and false confirms (must be 0), per slice."""
    print(f"\n#### end to end with the LLM fallback (profile {profile}): {run.calls} calls, {run.seconds} s, "
          f"{run.failures} failed")
    for key in ("pt", "en", "all", *sorted(k for k in run.tallies if k.startswith("split "))):
        s = run.tallies[key].summary()
        print(f"== {key}: {s['items']} items  accuracy {s['accuracy']:.3f}  false confirms {s['false_confirms']}  "
              f"via {s['stages']}")
    s = run.tallies["all"].summary()
    print("   gold\\final " + " ".join(f"{c:>8}" for c in LABELS))
    for gold in LABELS:
        print(f"   {gold:<10} " + " ".join(f"{s['confusion'][gold][c]:>8}" for c in LABELS))
    if show_errors and run.errors:
        print("\nend-to-end errors (gold -> final, via):")
        for it, label, how in run.errors:
            print(f"  [{it['lang']}/{it['kind']}/{it.get('split', 'tune')}] {it['text']!r}: {it['label']} -> {label} ({how})")


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
    ap.add_argument("--llm", metavar="PROFILE", default=None,
                    help="send the unsure items to the LLM fallback on this profile (e.g. local) and report end to end")
    args = ap.parse_args(argv)

    from tools.embeddings import make_embeddings

    started = time.perf_counter()
    classifier = ConfirmationClassifier.from_file(e5_query_embedder(make_embeddings()), margin=args.margin,
                                                  confirm_margin=args.confirm_margin, top_k=args.top_k)
    items = [it for it in load_items(args.data) if args.split in (None, it.get("split", "tune"))]
    choices = enum_choices()
    tallies, errors = run(classifier, items, choices)
    llm = run_llm(items, classify_items(classifier, items, choices), args.llm) if args.llm else None
    elapsed = time.perf_counter() - started
    if args.json:
        report: dict[str, Any] = {"margin": classifier.margin, "confirm_margin": classifier.confirm_margin,
                                  "top_k": classifier.top_k, "seconds": round(elapsed, 1),
                                  **{k: t.summary() for k, t in tallies.items()}}
        if llm:
            report["end_to_end"] = {"profile": args.llm, "llm_calls": llm.calls, "llm_seconds": llm.seconds,
                                    "llm_failures": llm.failures, **{k: t.summary() for k, t in llm.tallies.items()}}
        print(json.dumps(report, indent=2))
    else:
        print_report(tallies, errors, classifier, args.errors)
        if llm:
            print_llm_report(llm, args.llm, args.errors)
        print(f"\n{len(items)} items in {elapsed:.1f} s (model load included)")
    false_confirms = tallies["all"].false_confirms + (llm.tallies["all"].false_confirms if llm else 0)
    return 1 if false_confirms else 0


if __name__ == "__main__":
    raise SystemExit(main())
