"""Planner accuracy on the NovaOps dev questions: the LLM's plan, the lexical hints, and their union.

A missed backend loses the answer; an extra one costs a text-to-SQL/Cypher call (tens of seconds
on two cores) and puts unrelated rows in front of synthesis. Items with `needs: []` (must_refuse)
are left out: the graph refuses them before planning.

    .venv/bin/python benchmarks/planner_accuracy.py [--profile local]

Only the planner runs: no store is read. The model files are found as everywhere else
(TRAMITA_MODELS_DIR, else the configured data directory's models/).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.progress import track

from tramita.base.paths import SAMPLE_DIR

console = Console(highlight=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="local", help="LLM profile (policies/llm_profiles.yaml)")
    parser.add_argument("--questions", type=Path, default=SAMPLE_DIR / "questions.dev.jsonl")
    parser.add_argument("-v", "--verbose", action="store_true", help="every question's plans")
    args = parser.parse_args(argv)
    from nodes.plan import plan_model, sources_text
    from tools.backends import BACKENDS
    from tools.llm import Usage, check_profile, structured_call
    from tramita.core.planner_hints import hinted

    check_profile(args.profile)

    items = [json.loads(line) for line in args.questions.read_text(encoding="utf-8").splitlines() if line.strip()]
    items = [i for i in items if i.get("needs")]
    rows: dict[str, list[tuple[set[str], set[str]]]] = {"llm": [], "hints": [], "union": []}
    for item in track(items, description="plans", console=console):
        out = structured_call("planner", plan_model(), "plan", backend=args.profile, usage=Usage(), question=item["question"],
                              sources=sources_text(), keys=", ".join(f'"use_{n}": bool' for n in BACKENDS))
        llm = {b for b in BACKENDS if getattr(out, f"use_{b}")}
        hints = set(hinted(item["question"]))
        gold = set(item["needs"])
        for name, got in (("llm", llm), ("hints", hints), ("union", llm | hints)):
            rows[name].append((gold, got))
        if args.verbose:
            console.print(f"{item['id']} needs {sorted(gold)} llm {sorted(llm)} hints {sorted(hints)}")
    console.print(f"{len(items)} questions; exact = the plan equals `needs`")
    for name, pairs in rows.items():
        exact = sum(g == p for g, p in pairs)
        missed = sum(len(g - p) for g, p in pairs)
        extra = sum(len(p - g) for g, p in pairs)
        console.print(f"{name:>6}: exact {exact}/{len(pairs)}, backends missed {missed}, extra {extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
