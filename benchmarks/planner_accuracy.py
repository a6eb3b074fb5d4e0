"""Planner accuracy: the vocabulary match (no LLM) and, optionally, the LLM on the close cases.

A missed backend loses the answer; an extra one costs a text-to-SQL/Cypher call (tens of seconds
on two cores) and puts unrelated rows in front of synthesis. Items with `needs: []` (must_refuse)
are left out: the graph refuses them before planning.

    .venv/bin/python benchmarks/planner_accuracy.py [--questions FILE] [--data DIR] [--llm PROFILE] [-v]

Tune on `questions.own.jsonl` (the default); run `questions.dev.jsonl` only as a check. Without
`--llm`, a close case counts as its best-matching candidate (what the planner does when the LLM
fails), so the figure is the no-LLM floor; `--llm local` asks the model exactly as `nodes.plan`
does. The stores are those of the data directory (`--data`, else TRAMITA_DATA_DIR).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from tramita.base.paths import SAMPLE_DIR

console = Console(highlight=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=Path, default=SAMPLE_DIR / "questions.own.jsonl")
    parser.add_argument("--data", type=Path, default=None, help="ingested data directory")
    parser.add_argument("--llm", default=None, help="LLM profile for the close cases (default: none)")
    parser.add_argument("--ids", default="", help="comma-separated item ids")
    parser.add_argument("--json", type=Path, default=None, help="write every item's plan here")
    parser.add_argument("-v", "--verbose", action="store_true", help="every question's plan")
    args = parser.parse_args(argv)
    from nodes.plan import decide, llm_plan
    from tools.llm import Usage, check_profile
    from tools.services import Services
    from tramita.base.settings import Settings
    from tramita.core.planner_hints import route

    if args.llm:
        check_profile(args.llm)
    settings = Settings.embedded(args.data) if args.data else Settings.from_env()
    services = Services(settings)
    items = [json.loads(line) for line in args.questions.read_text(encoding="utf-8").splitlines() if line.strip()]
    items = [i for i in items if i.get("needs") and (not args.ids or i["id"] in args.ids.split(","))]
    rows = []
    for item in items:
        r = route(item["question"], services)
        calls = [0]

        def ask(candidates: list[str], question: str = item["question"], calls: list[int] = calls
                ) -> tuple[list[str], str]:
            calls[0] += 1
            return llm_plan(question, candidates, backend=args.llm, usage=Usage())

        plan, _, _ = decide(r, ask if args.llm else None)
        gold = set(item["needs"])
        rows.append({"id": item["id"], "needs": sorted(gold), "plan": sorted(plan), "decision": r.decision,
                     "candidates": r.candidates, "llm_calls": calls[0], "ok": set(plan) == gold,
                     "match": r.trace()})
        if args.verbose:
            mark = "ok " if set(plan) == gold else "BAD"
            console.print(f"{mark} {item['id']} needs {sorted(gold)} plan {sorted(plan)} ({r.decision}; "
                          f"candidates {r.candidates}) {item['question'][:70]}")
    n = len(rows)
    exact = sum(r["ok"] for r in rows)
    clear = [r for r in rows if r["decision"] == "clear"]
    closed = [r for r in rows if r["decision"] != "clear"]
    recall = sum(set(r["needs"]) <= set(r["candidates"]) for r in closed)
    console.print(f"{args.questions.name}: {n} questions; plan accuracy (exact) {exact}/{n} = {exact / max(n, 1):.3f}"
                  f"{'' if args.llm else ' (close cases: best candidate, no LLM)'}")
    console.print(f"  clear without LLM: {len(clear)}/{n}, of which right {sum(r['ok'] for r in clear)}")
    console.print(f"  close/none (LLM decides): {len(closed)}, needed backends among the candidates in {recall}")
    console.print(f"  backends missed {sum(len(set(r['needs']) - set(r['plan'])) for r in rows)}, "
                  f"extra {sum(len(set(r['plan']) - set(r['needs'])) for r in rows)}, "
                  f"LLM calls {sum(r['llm_calls'] for r in rows)}")
    if args.json:
        args.json.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
