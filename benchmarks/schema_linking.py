"""Schema linking on the NovaOps dev questions: gold tables missed and extra tables linked.

The gold tables are the ones `gold_sql` reads (parsed with sqlglot). A missed table makes the
question unanswerable; an extra one is room for a wrong join. No model is needed:

    .venv/bin/python benchmarks/schema_linking.py [--relative 0 0.25 0.35 0.5]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import sqlglot
from sqlglot import exp

from tools.sql_schema import LINK_RELATIVE, link_schema
from tramita.base.paths import SAMPLE_DIR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--relative", type=float, nargs="+", default=[0.0, 0.25, LINK_RELATIVE, 0.5])
    parser.add_argument("--questions", type=Path, default=SAMPLE_DIR / "questions.dev.jsonl")
    parser.add_argument("-v", "--verbose", action="store_true", help="per-question misses and extras")
    args = parser.parse_args(argv)
    items = [json.loads(line) for line in args.questions.read_text(encoding="utf-8").splitlines() if line.strip()]
    items = [i for i in items if i.get("gold_sql") and "sql" in i.get("needs", [])]
    print(f"{len(items)} questions with SQL; default relative floor {LINK_RELATIVE}")
    for relative in args.relative:
        missed = extra = 0
        for item in items:
            gold = {t.name for t in sqlglot.parse_one(item["gold_sql"], read="sqlite").find_all(exp.Table)}
            linked = set(link_schema(item["question"], relative=relative))
            missed += len(gold - linked)
            extra += len(linked - gold)
            if args.verbose and (gold - linked or linked - gold):
                print(f"  {item['id']}: missed {sorted(gold - linked)} extra {sorted(linked - gold)}")
        print(f"relative {relative:.2f}: gold tables missed {missed}, extra tables linked {extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
