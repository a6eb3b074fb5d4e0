"""Cypher execution accuracy of the graph backend (named patterns first, text-to-Cypher fallback).

`benchmarks/query_accuracy.py` measures text-to-Cypher alone; this runs the whole graph backend
(`tools.backends.graph.GraphBackend.run`) on the graph-only questions of a question file and
scores its context exactly as the eval does (tramita.lab.evaluation.questions: the context's
`query` re-run against the gold query's rows), and reports which path answered each item:

    .venv/bin/python benchmarks/graph_patterns.py [--questions sample/novaops/questions.own.jsonl]
        [--ids q-own-035,...] [--any-graph] [--profile local] [--data DIR] [--json out.json]

DIR is an ingested data directory (default: the configured deployment, `Settings.from_env()`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from tramita.base.paths import SAMPLE_DIR

console = Console(highlight=False)


def graph_items(path: Path, ids: list[str] | None, *, graph_only: bool = True) -> list[dict[str, Any]]:
    """Items with a gold Cypher query that need the graph alone (or, not `graph_only`, among others)."""
    items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [i for i in items if i.get("gold_cypher") and (not ids or i["id"] in ids)
            and (i.get("needs") == ["graph"] if graph_only else "graph" in i.get("needs", []))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--questions", type=Path, default=SAMPLE_DIR / "questions.own.jsonl")
    parser.add_argument("--ids", help="comma-separated question ids")
    parser.add_argument("--profile", default="local", help="LLM profile (policies/llm_profiles.yaml)")
    parser.add_argument("--data", type=Path, help="ingested data directory (its embedded stores)")
    parser.add_argument("--today", default="2026-05-15", help="the date questions are asked on")
    parser.add_argument("--json", type=Path, help="also write every item's result here")
    parser.add_argument("--any-graph", action="store_true",
                        help="also items that need other backends besides the graph (scored on the graph's query)")
    args = parser.parse_args(argv)

    from tools.backends import BACKENDS, BackendCall
    from tools.graph_tool import GraphTool
    from tools.llm import Usage, check_profile
    from tools.services import Services
    from tramita.base.settings import Settings
    from tramita.lab.evaluation.questions import _score_execution, cypher_is_ordered

    check_profile(args.profile)
    base = Settings.embedded(args.data.expanduser().resolve()) if args.data else Settings.from_env()
    svc = Services(base.with_profile(args.profile))
    gold_graph = GraphTool(svc.graph_tool.url, row_cap=1000)  # as the eval scores it
    ids = [i.strip() for i in args.ids.split(",")] if args.ids else None
    results: list[dict[str, Any]] = []
    for item in graph_items(args.questions, ids, graph_only=not args.any_graph):
        usage = Usage()
        started = time.perf_counter()
        call = BackendCall(question=item["question"], today=args.today, profile=args.profile, services=svc, usage=usage)
        try:
            ctx = BACKENDS["graph"].run(call)
        except Exception as exc:  # noqa: BLE001 - a crashed item is a wrong one
            ctx = {"path": "crash", "error": f"{type(exc).__name__}: {exc}"}
        score = _score_execution(item["gold_cypher"], ctx, cypher_is_ordered(item["gold_cypher"]),
                                 gold_rows=lambda q: [tuple(r.values()) for r in gold_graph.query(q)],
                                 our_rows=lambda q: [tuple(r.values()) for r in svc.graph_tool.query(q)],
                                 missing="")
        score.update(id=item["id"], path=ctx.get("path"), llm_calls=usage.calls, reason=ctx.get("pattern_reason"),
                     choice=ctx.get("pattern_choice"), params=ctx.get("params"),
                     seconds=round(time.perf_counter() - started, 1))
        results.append(score)
        mark = "[green]✓[/]" if score["correct"] else "[red]✗[/]"
        console.print(f"{mark} {item['id']} {score['path']} calls={usage.calls} {score['seconds']}s"
                      + (f"  [dim]{score.get('reason') or ''} {score.get('error') or ''}[/]"))
    if results:
        ok = sum(r["correct"] for r in results)
        console.print(f"Cypher execution accuracy {ok}/{len(results)} = {ok / len(results):.3f}")
        for path in ("pattern", "fallback"):
            mine = [r for r in results if str(r["path"]).startswith(path)]
            right = sum(r["correct"] for r in mine)
            console.print(f"  {path}: {len(mine)}/{len(results)} answered ({len(mine) / len(results):.0%}), "
                          f"{right} correct" + (f" ({right / len(mine):.0%})" if mine else ""))
        calls = sorted(r["llm_calls"] for r in results)
        console.print(f"  LLM calls in the backend: median {calls[len(calls) // 2]}, total {sum(calls)}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
