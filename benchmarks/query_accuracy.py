"""Execution accuracy of text-to-SQL and text-to-Cypher alone, on the NovaOps dev questions.

The full `tramita eval questions` also runs the planner and synthesis (≈ 45 s a question on two
cores); this runs only the query writer with its repair loop, so a prompt or schema change can be
measured in minutes. It scores exactly as the eval does (tramita.lab.evaluation.questions):

    .venv/bin/python benchmarks/query_accuracy.py [--backend sql|graph|both] [--ids q-dev-002,...]
        [--profile local] [--data DIR]

DIR is an ingested data directory whose embedded stores are used (default: the configured
deployment, `Settings.from_env()`; `tramita ingest` makes it). The model files are found as
everywhere else (TRAMITA_MODELS_DIR, else the configured data directory's models/).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import track

from tramita.base.paths import SAMPLE_DIR

console = Console(highlight=False)


def _items(path: Path, backend: str, ids: list[str] | None) -> list[tuple[str, dict[str, Any]]]:
    chosen = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        if ids and item["id"] not in ids:
            continue
        for name, key in (("sql", "gold_sql"), ("graph", "gold_cypher")):
            if backend in (name, "both") and name in item.get("needs", []) and item.get(key):
                chosen.append((name, item))
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sql", "graph", "both"), default="both")
    parser.add_argument("--ids", help="comma-separated question ids")
    parser.add_argument("--profile", default="local", help="LLM profile (policies/llm_profiles.yaml)")
    parser.add_argument("--data", type=Path, help="ingested data directory (its embedded stores)")
    parser.add_argument("--today", default="2026-05-15", help="the date questions are asked on (default 2026-05-15)")
    parser.add_argument("--questions", type=Path, default=SAMPLE_DIR / "questions.dev.jsonl")
    parser.add_argument("--json", type=Path, help="also write every item's result here")
    args = parser.parse_args(argv)

    from tools.graph_tool import GraphTool
    from tools.llm import Usage, check_profile
    from tools.services import Services
    from tools.text_to_cypher import answer_cypher
    from tools.text_to_sql import answer_sql
    from tramita.base.settings import Settings
    from tramita.lab.evaluation.questions import _score_execution, cypher_is_ordered, sql_is_ordered, sqlite_rows

    check_profile(args.profile)
    base = Settings.embedded(args.data.expanduser().resolve()) if args.data else Settings.from_env()
    settings = base.with_profile(args.profile)
    svc = Services(settings)
    today = args.today
    gold_graph = GraphTool(svc.graph_tool.url, row_cap=1000)  # as tramita.lab.evaluation.questions scores it
    db = Path(settings.sql_url.removeprefix("sqlite:///"))
    ids = [i.strip() for i in args.ids.split(",")] if args.ids else None
    results: list[dict[str, Any]] = []
    for name, item in track(_items(args.questions, args.backend, ids), description="queries", console=console):
        usage = Usage()
        started = time.perf_counter()
        if name == "sql":
            run = answer_sql(item["question"], svc.sql_tool, today=today, backend=args.profile, usage=usage)
            ctx = {"query": run.query, "error": run.error}
            score = _score_execution(item["gold_sql"], ctx, sql_is_ordered(item["gold_sql"]),
                                     gold_rows=lambda q: sqlite_rows(db, q),
                                     our_rows=lambda q: sqlite_rows(db, svc.sql_tool.validate(q)), missing="")
        else:
            crun = answer_cypher(item["question"], svc.graph_tool, today=today, backend=args.profile, usage=usage)
            ctx = {"query": crun.query, "error": crun.error}
            score = _score_execution(item["gold_cypher"], ctx, cypher_is_ordered(item["gold_cypher"]),
                                     gold_rows=lambda q: [tuple(r.values()) for r in gold_graph.query(q)],
                                     our_rows=lambda q: [tuple(r.values()) for r in svc.graph_tool.query(q)],
                                     missing="")
        score.update(id=item["id"], backend=name, seconds=round(time.perf_counter() - started, 1))
        results.append(score)
        mark = "[green]✓[/]" if score["correct"] else "[red]✗[/]"
        console.print(f"{mark} {item['id']} {name} {score['seconds']}s  {score['ours']}"
                      + (f"  [dim]{score.get('error')}[/]" if score.get("error") else ""))
    for name in ("sql", "graph"):
        mine = [r for r in results if r["backend"] == name]
        if mine:
            ok = sum(r["correct"] for r in mine)
            console.print(f"{name}: execution accuracy {ok}/{len(mine)} = {ok / len(mine):.3f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
