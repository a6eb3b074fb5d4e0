"""Execution accuracy of the SQL backend (semantic layer first, text-to-SQL fallback), per path.

`benchmarks/query_accuracy.py` measures raw text-to-SQL alone; this runs the SQL backend as
retrieval does (`tools.backends.sql.SQLBackend.run`), so it measures the semantic layer, its value
linking and the fallback together, and reports which path answered. It scores exactly as the eval
does (tramita.lab.evaluation.questions):

    .venv/bin/python benchmarks/semantic_accuracy.py --questions sample/novaops/questions.own.jsonl
        [--only-sql] [--ids q-own-001,...] [--profile local] [--data DIR] [--json OUT] [--threads N]

DIR is an ingested data directory (default: the configured deployment). `--only-sql` keeps the items
whose `needs` is exactly ["sql"]; without it every item that needs SQL and has a gold query runs.
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


def _items(path: Path, only_sql: bool, ids: list[str] | None) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        needs = item.get("needs", [])
        if ids and item["id"] not in ids:
            continue
        if item.get("gold_sql") and (needs == ["sql"] if only_sql else "sql" in needs):
            out.append(item)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the items, print one line each and the summary; 0 unless the arguments are wrong."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=Path, default=SAMPLE_DIR / "questions.own.jsonl")
    parser.add_argument("--only-sql", action="store_true", help="only items whose needs are exactly ['sql']")
    parser.add_argument("--ids", help="comma-separated question ids")
    parser.add_argument("--profile", default="local", help="LLM profile (policies/llm_profiles.yaml)")
    parser.add_argument("--data", type=Path, help="ingested data directory (its embedded stores)")
    parser.add_argument("--today", default="2026-05-15", help="the date questions are asked on")
    parser.add_argument("--json", type=Path, help="also write every item's result here")
    parser.add_argument("--threads", type=int, help="override the profile's llama.cpp threads (on a machine "
                        "shared by many processes 1 thread is far faster: 2 spin on each other)")
    args = parser.parse_args(argv)

    from tools.backends.base import BackendCall
    from tools.backends.sql import SQLBackend
    from tools.llm import Usage, check_profile
    from tools.services import Services
    from tramita.base.settings import Settings
    from tramita.lab.evaluation.questions import _score_execution, sql_is_ordered, sqlite_rows

    check_profile(args.profile)
    if args.threads:
        from tools.llm import profiles

        spec = profiles().backends[args.profile]
        spec.n_threads, spec.n_threads_batch = args.threads, args.threads
    base = Settings.embedded(args.data.expanduser().resolve()) if args.data else Settings.from_env()
    svc = Services(base.with_profile(args.profile))
    db = Path(base.sql_url.removeprefix("sqlite:///"))
    ids = [i.strip() for i in args.ids.split(",")] if args.ids else None
    backend = SQLBackend()
    results: list[dict[str, Any]] = []
    for item in _items(args.questions, args.only_sql, ids):
        usage = Usage()
        started = time.perf_counter()
        ctx = backend.run(BackendCall(question=item["question"], today=args.today, profile=args.profile,
                                      services=svc, usage=usage))
        score = _score_execution(item["gold_sql"], ctx, sql_is_ordered(item["gold_sql"]),
                                 gold_rows=lambda q: sqlite_rows(db, q),
                                 our_rows=lambda q: sqlite_rows(db, svc.sql_tool.validate(q)), missing="")
        score.update(id=item["id"], path=ctx.get("path"), semantic_query=ctx.get("semantic_query"),
                     semantic_error=ctx.get("semantic_error"), llm_calls=usage.calls,
                     seconds=round(time.perf_counter() - started, 1))
        results.append(score)
        mark = "[green]✓[/]" if score["correct"] else "[red]✗[/]"
        what = json.dumps(ctx.get("semantic_query"), ensure_ascii=False) if ctx.get("path") == "semantic" \
            else f"{score['ours']}  [dim]({ctx.get('semantic_error')})[/]"
        console.print(f"{mark} {item['id']} {ctx.get('path')} {usage.calls} calls {score['seconds']}s  {what}"
                      + (f"  [dim]{score.get('error')}[/]" if score.get("error") else ""), soft_wrap=True)
    if results:
        ok = sum(r["correct"] for r in results)
        console.print(f"sql: execution accuracy {ok}/{len(results)} = {ok / len(results):.3f}")
        for path in ("semantic", "fallback"):
            mine = [r for r in results if r["path"] == path]
            if mine:
                good = sum(r["correct"] for r in mine)
                console.print(f"  {path}: {len(mine)}/{len(results)} items ({len(mine) / len(results):.0%}), "
                              f"correct {good}/{len(mine)}")
        calls = sorted(r["llm_calls"] for r in results)
        secs = sorted(r["seconds"] for r in results)
        console.print(f"  LLM calls p50 {calls[len(calls) // 2]}, seconds p50 {secs[len(secs) // 2]}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
