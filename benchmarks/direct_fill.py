"""Direct fill: how many SQL questions `tools.semantic_direct` reads without the LLM, and how many of
those are right (strict: the gold query's rows and columns).

A question the direct fill takes costs no query-filling LLM call; one it takes wrongly is a wrong
answer the LLM might have got right, so precision is the figure to watch. No LLM runs here.

    .venv/bin/python benchmarks/direct_fill.py [--data DIR] [-v] [FILE ...]

FILE: question files with `gold_sql` (default: `questions.own.jsonl` and the check set
`benchmarks/data/direct_fill.jsonl`, whose items also say whether the fill must take them). Run
`questions.dev.jsonl` only as a check.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from rich.console import Console

from tramita.base.paths import SAMPLE_DIR

console = Console(highlight=False)
CHECKS = Path(__file__).resolve().parent / "data" / "direct_fill.jsonl"
TODAY = "2026-05-15"  # the sample data's "today"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, default=[SAMPLE_DIR / "questions.own.jsonl", CHECKS])
    parser.add_argument("--data", type=Path, default=None, help="ingested data directory (else TRAMITA_DATA_DIR)")
    parser.add_argument("-v", "--verbose", action="store_true", help="every question the fill takes")
    args = parser.parse_args(argv)
    from tools.semantic_direct import direct_query
    from tools.semantic_layer import layer_for, stored_values
    from tools.sql_schema import load_schema
    from tools.sql_tool import SQLTool
    from tools.sql_values import value_index
    from tramita.lab.evaluation.questions import results_match, sql_is_ordered, sqlite_rows

    data = args.data or Path(os.environ.get("TRAMITA_DATA_DIR", "data"))
    db = data / "novaops.db"
    tool = SQLTool(f"sqlite:///{db}")
    layer = layer_for(SAMPLE_DIR / "semantic_model.yaml", tool)
    index = value_index(tool.url, tool.query, load_schema(tool.schema_path))
    report: dict[str, dict[str, int]] = {}
    for path in args.files:
        counts = {"questions": 0, "taken": 0, "right": 0, "must_take_missed": 0, "must_decline_taken": 0}
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            question = item["question"]
            hits = index.triples(question)
            fill = direct_query(layer, question, hits, TODAY)
            if item.get("direct") is False:
                counts["must_decline_taken"] += fill is not None
            if not item.get("gold_sql"):
                continue
            counts["questions"] += 1
            if fill is None:
                counts["must_take_missed"] += bool(item.get("direct"))
                continue
            counts["taken"] += 1
            ours = [tuple(r.values()) for r in tool.query(layer.compile(fill.query, stored_values(tool)).sql)]
            right = results_match(sqlite_rows(db, item["gold_sql"]), ours, ordered=sql_is_ordered(item["gold_sql"]),
                                  strict=True)
            counts["right"] += right
            if args.verbose or not right:
                mark = "[green]right[/]" if right else "[red]WRONG[/]"
                console.print(f"{mark} {item['id']}: {question}\n   {json.dumps(fill.query.as_json(), ensure_ascii=False)}")
        report[path.name] = counts
        console.print(f"{path.name}: {counts['taken']}/{counts['questions']} questions with a gold query taken, "
                      f"{counts['right']} of them right (strict); must-take missed {counts['must_take_missed']}, "
                      f"must-decline taken {counts['must_decline_taken']}")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
