"""Check the gold answers of a questions file against the stores they claim to come from.

For every item of a questions JSONL file (sample/novaops/README.md, "Question items"):
- `gold_sql` runs on a SQLite copy of the dataset (read-only) and must return rows;
- `gold_cypher` runs on a LadybugDB graph (read-only; through tramita's Cypher guard when it can be
  imported, as the scorer does) and must return rows;
- every id of `gold_doc_ids` must be a document of the docs folder;
- every answer fact must occur in what the item's gold sources give: the rows of its queries or
  the text of its gold documents, matched as the scorer matches facts against answers
  (numbers as numbers, names case- and accent-insensitively). Yes/no verdict facts ("yes", "não")
  cannot occur in a source and are listed as derived, not failed;
- the shape: `needs` names exactly the backends that have a gold (sql/gold_sql, graph/gold_cypher,
  docs/gold_doc_ids), and a `must_refuse` item has no needs, gold or facts.

    python3 benchmarks/check_gold.py sample/novaops/questions.own.jsonl --sqlite /tmp/novaops.db \
        --graph /tmp/novaops.lbug [--docs sample/novaops/docs] [--ids q-own-001,...] [-v]

Build the stores with `python3 sample/novaops/load_sqlite.py /tmp/novaops.db` and
`ingest.graph_loader.load_graph("ladybug:///tmp/novaops.lbug")`. Without --graph the Cypher golds
are skipped (and reported). Needs only the standard library, plus `ladybug` for --graph. Exit
status 0 when every checked item passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sqlite3
import sys
from contextlib import closing
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "sample" / "novaops" / "docs"
VERDICTS = {"yes", "no", "sim", "nao", "não", "true", "false"}
BACKENDS = (("sql", "gold_sql"), ("graph", "gold_cypher"), ("docs", "gold_doc_ids"))


def _module(names: tuple[str, ...], pattern: str) -> ModuleType:
    """The first importable of `names`, else the first file under tramita/ matching `pattern`
    (the package layout moves; the fact matcher and the guard only need the standard library).
    """
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    for path in sorted(ROOT.glob(pattern)):
        spec = importlib.util.spec_from_file_location(f"_check_gold_{path.stem}", path)
        if spec and spec.loader:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    raise ImportError(f"none of {names} importable and no file matches {pattern}")


_facts = _module(("tramita.lab.evaluation.facts", "tramita.evaluation.facts"), "tramita/**/evaluation/facts.py")


def _guard() -> Any:
    """Tramita's Cypher guard (validate_cypher), or None where it cannot be imported."""
    try:
        return _module(("tools.cypher_guard",), "tools/cypher_guard.py").validate_cypher
    except Exception:  # noqa: BLE001 - the check still runs the raw query
        return None


def sql_rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


class Graph:
    """A read-only LadybugDB connection that runs gold Cypher through the same guard as tramita."""
    def __init__(self, path: Path) -> None:
        """Open `path` read-only; the guard is used when tramita's is importable."""
        import ladybug

        self._db = ladybug.Database(str(path), read_only=True)
        self._conn = ladybug.Connection(self._db)
        self._guard = _guard()

    def rows(self, cypher: str) -> list[tuple[Any, ...]]:
        """The rows of `cypher` as tuples (guarded and row-capped)."""
        query = self._guard(cypher, row_cap=1000) if self._guard else cypher
        result = self._conn.execute(query)
        out = []
        while result.has_next():
            out.append(tuple(result.get_next()))
        return out


def _cell(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return " | ".join(_cell(v) for v in value)
    if isinstance(value, dict):
        return " | ".join(f"{k}: {_cell(v)}" for k, v in value.items())
    return "" if value is None else str(value)


def rows_text(rows: list[tuple[Any, ...]]) -> str:
    """Rows as text the fact matcher can read: cells and rows well apart, so numbers never merge."""
    return "\n".join(" | ".join(_cell(c) for c in row) for row in rows)


def doc_text(docs: Path, doc_id: str) -> str | None:
    path = docs / f"{doc_id}.md"
    return path.read_text(encoding="utf-8") if path.is_file() else None


def check_item(item: dict[str, Any], db: Path, graph: Graph | None, docs: Path) -> dict[str, Any]:
    problems: list[str] = []
    notes: list[str] = []
    sources: dict[str, str] = {}
    needs = set(item.get("needs") or [])
    if item.get("must_refuse"):
        if needs or item.get("gold_sql") or item.get("gold_cypher") or item.get("gold_doc_ids") or item.get("answer_facts"):
            problems.append("must_refuse item with needs, gold or facts")
        return {"id": item["id"], "ok": not problems, "problems": problems, "notes": notes, "facts": {}}
    for backend, key in BACKENDS:
        if (backend in needs) != bool(item.get(key)):
            problems.append(f"needs {sorted(needs)} does not match {key} ({'set' if item.get(key) else 'empty'})")
    if item.get("gold_sql"):
        try:
            rows = sql_rows(db, item["gold_sql"])
            sources["sql"] = rows_text(rows)
            if not rows:
                problems.append("gold_sql returns no rows")
        except sqlite3.Error as exc:
            problems.append(f"gold_sql fails: {exc}")
    if item.get("gold_cypher"):
        if graph is None:
            notes.append("gold_cypher not run (no --graph)")
        else:
            try:
                rows = graph.rows(item["gold_cypher"])
                sources["graph"] = rows_text(rows)
                if not rows:
                    problems.append("gold_cypher returns no rows")
            except Exception as exc:  # noqa: BLE001 - ladybug and the guard raise their own types
                problems.append(f"gold_cypher fails: {type(exc).__name__}: {exc}")
    for doc_id in item.get("gold_doc_ids") or []:
        text = doc_text(docs, doc_id)
        if text is None:
            problems.append(f"unknown document {doc_id}")
        else:
            sources[f"doc:{doc_id}"] = text
    found: dict[str, list[str]] = {}
    unchecked = bool(item.get("gold_cypher")) and graph is None
    for fact in item.get("answer_facts") or []:
        where = [name for name, text in sources.items() if _facts.fact_in(fact, text)]
        found[fact] = where
        if where:
            continue
        if _facts.fold(fact) in VERDICTS:
            notes.append(f"fact {fact!r} is a derived verdict (not in any source)")
        elif unchecked:
            notes.append(f"fact {fact!r} not in the SQL/doc sources (graph not run)")
        else:
            problems.append(f"fact {fact!r} not in any gold source ({', '.join(sources) or 'none'})")
    return {"id": item["id"], "ok": not problems, "problems": problems, "notes": notes, "facts": found}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("questions", type=Path)
    parser.add_argument("--sqlite", type=Path, required=True, help="SQLite database built by load_sqlite.py")
    parser.add_argument("--graph", type=Path, help="LadybugDB file of the NovaOps graph")
    parser.add_argument("--docs", type=Path, default=DOCS)
    parser.add_argument("--ids", help="comma-separated ids to check")
    parser.add_argument("-v", "--verbose", action="store_true", help="show where each fact was found")
    args = parser.parse_args(argv)
    if not args.sqlite.is_file():
        parser.error(f"{args.sqlite}: no such SQLite file")
    if args.graph is not None and not args.graph.exists():
        parser.error(f"{args.graph}: no such LadybugDB file")
    graph = Graph(args.graph) if args.graph else None
    wanted = {i.strip() for i in args.ids.split(",")} if args.ids else None
    failed = checked = bad_lines = 0
    seen: set[str] = set()
    for n, line in enumerate(args.questions.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            print(f"line {n}: not valid JSON: {exc}")
            bad_lines += 1
            continue
        if item.get("id") in seen:
            print(f"line {n}: duplicate id {item.get('id')}")
            bad_lines += 1
        seen.add(item.get("id"))
        if wanted and item.get("id") not in wanted:
            continue
        checked += 1
        res = check_item(item, args.sqlite, graph, args.docs)
        if not res["ok"]:
            failed += 1
        if not res["ok"] or res["notes"] or args.verbose:
            print(f"{'ok  ' if res['ok'] else 'FAIL'} {res['id']}")
            for p in res["problems"]:
                print(f"     problem: {p}")
            for note in res["notes"]:
                print(f"     note: {note}")
            if args.verbose:
                for fact, where in res["facts"].items():
                    print(f"     {fact!r}: {', '.join(where) or '-'}")
    print(f"{checked} items checked, {checked - failed} passed, {failed} failed"
          + (f", {bad_lines} bad lines" if bad_lines else ""))
    return 1 if failed or bad_lines else 0


if __name__ == "__main__":
    raise SystemExit(main())
