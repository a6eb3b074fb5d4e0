"""Load the NovaOps property graph into LadybugDB (embedded, default) or a Bolt server.

Sources: `graph/schema.md` (labels, keys, *int* properties, relationship directions) and one CSV
per label/type under `graph/nodes/` and `graph/relationships/` (first column the key, or the start
and end keys). The load is idempotent: a store that already holds the expected counts is left
alone unless `reset=True`; a store holding something else is refused with a clear message rather
than overwritten, so nothing is lost by running the loader twice.

LadybugDB is built in a side file and renamed over the target only once every count checks, so
a crash never leaves a half-loaded graph. Bolt servers get UNWIND batches with inline, escaped
literals instead of parameters: FalkorDB pastes parameter text into the query unescaped and
crashes on parameters over ~4 KB, and literals work unchanged on Neo4j.
"""

from __future__ import annotations

import argparse
import csv
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tqdm import tqdm

from tools.cypher_guard import cypher_literal
from tools.graph_tool import (
    LADYBUG_BUFFER_POOL,
    LADYBUG_MAX_DB_SIZE,
    GraphSchema,
    bolt_driver,
    close_ladybug,
    parse_graph_url,
    read_graph_schema,
)
from tramita.base.paths import SAMPLE_DIR

__all__ = ["GraphLoadError", "load_graph", "main"]

MAX_STATEMENT_CHARS = 3500  # stays under FalkorDB's ~4 KB limit even if it re-pastes the text


class GraphLoadError(RuntimeError):
    """The graph files or the target store are not what the loader expects."""


@dataclass(frozen=True)
class _Item:
    """One CSV file: a node label or a relationship type, with its typed rows."""

    kind: Literal["node", "rel"]
    name: str
    path: Path
    columns: tuple[str, ...]
    types: dict[str, str]
    rows: tuple[dict[str, Any], ...]
    src: str = ""  # relationships: start label and key, end label and key
    src_key: str = ""
    dst: str = ""
    dst_key: str = ""


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _read_csv(path: Path, types: dict[str, str]) -> tuple[tuple[str, ...], tuple[dict, ...]]:
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            columns = tuple(reader.fieldnames or ())
            rows = []
            for line, raw in enumerate(reader, 2):
                row: dict[str, Any] = {}
                for col in columns:
                    value = raw.get(col)
                    if value is None or value == "":
                        row[col] = None
                    elif types.get(col) == "INT64":
                        try:
                            row[col] = int(value)
                        except ValueError:
                            raise GraphLoadError(
                                f"{path}, line {line}: column {col!r} must be an integer, "
                                f"got {value!r}") from None
                    else:
                        row[col] = value
                rows.append(row)
    except OSError as exc:
        raise GraphLoadError(f"cannot read {path}: {exc}") from exc
    if not columns:
        raise GraphLoadError(f"{path} has no header row")
    return columns, tuple(rows)


def _plan(sample_dir: Path) -> tuple[GraphSchema, list[_Item]]:
    try:
        schema = read_graph_schema(sample_dir / "graph" / "schema.md")
    except ValueError as exc:
        raise GraphLoadError(str(exc)) from exc
    keys = {n.label: n.key for n in schema.nodes}
    items: list[_Item] = []
    for node in schema.nodes:
        path = sample_dir / "graph" / "nodes" / f"{node.label}.csv"
        types = {p.name: p.type for p in node.props}
        columns, rows = _read_csv(path, types)
        if columns[0] != node.key:
            raise GraphLoadError(f"{path}: first column must be the key {node.key!r}, "
                                 f"not {columns[0]!r}")
        items.append(_Item("node", node.label, path, columns, types, rows))
    for rel in schema.rels:
        path = sample_dir / "graph" / "relationships" / f"{rel.type}.csv"
        types = {p.name: p.type for p in rel.props}
        columns, rows = _read_csv(path, types)
        if len(columns) < 2:
            raise GraphLoadError(f"{path}: needs start and end key columns")
        for label in (rel.src, rel.dst):
            if label not in keys:
                raise GraphLoadError(f"{rel.type} links the undeclared label {label}")
        items.append(_Item("rel", rel.type, path, columns, types, rows,
                           rel.src, keys[rel.src], rel.dst, keys[rel.dst]))
    return schema, items


def _bar(item: _Item, progress: bool) -> tqdm:
    return tqdm(total=len(item.rows), desc=f"graph {item.name}", unit="row",
                disable=not progress)


# --------------------------------------------------------------------------- LadybugDB


def _ladybug_ddl(item: _Item) -> str:
    if item.kind == "node":
        cols = ", ".join(f"{_ident(c)} {item.types.get(c, 'STRING')}" for c in item.columns)
        return f"CREATE NODE TABLE {_ident(item.name)}({cols}, PRIMARY KEY({_ident(item.columns[0])}))"
    props = "".join(f", {_ident(c)} {item.types.get(c, 'STRING')}" for c in item.columns[2:])
    return f"CREATE REL TABLE {_ident(item.name)}(FROM {_ident(item.src)} TO {_ident(item.dst)}{props})"


def _count_query(item: _Item) -> str:
    if item.kind == "node":
        return f"MATCH (n:{_ident(item.name)}) RETURN count(n)"
    return f"MATCH ()-[r:{_ident(item.name)}]->() RETURN count(r)"


def _ladybug_counts(conn: Any, items: list[_Item]) -> dict[str, int]:
    counts = {}
    for item in items:
        try:
            counts[item.name] = int(conn.execute(_count_query(item)).get_next()[0])
        except RuntimeError:
            counts[item.name] = -1  # the table does not exist
    return counts


def _remove_db_files(path: Path) -> None:
    for candidate in (path, path.with_name(path.name + ".wal")):
        if candidate.is_dir():
            raise GraphLoadError(f"{candidate} is a directory, not a LadybugDB file")
        candidate.unlink(missing_ok=True)


def _load_ladybug(path: Path, items: list[_Item], reset: bool, progress: bool) -> dict[str, int]:
    import ladybug

    expected = {item.name: len(item.rows) for item in items}
    if path.exists() and not reset:
        try:
            db = ladybug.Database(str(path), read_only=True, buffer_pool_size=LADYBUG_BUFFER_POOL,
                                  max_db_size=LADYBUG_MAX_DB_SIZE)
            conn = ladybug.Connection(db)
            current = _ladybug_counts(conn, items)
            conn.close()
            db.close()
        except RuntimeError as exc:
            raise GraphLoadError(f"cannot open {path} as a LadybugDB graph ({exc}); move it "
                                 "away or pass reset=True to replace it") from exc
        if current == expected:
            return current
        diff = {k: (current[k], v) for k, v in expected.items() if current[k] != v}
        raise GraphLoadError(f"{path} holds a different graph ((found, expected): {diff}); "
                             "pass reset=True to rebuild it")
    path.parent.mkdir(parents=True, exist_ok=True)
    side = path.with_name(f"{path.name}.loading-{os.getpid()}")
    _remove_db_files(side)
    built = False
    try:
        with ladybug.Database(str(side), buffer_pool_size=LADYBUG_BUFFER_POOL,
                              max_db_size=LADYBUG_MAX_DB_SIZE) as db, \
                ladybug.Connection(db) as conn:
            for item in items:
                conn.execute(_ladybug_ddl(item))
            for item in items:
                with _bar(item, progress) as bar:
                    conn.execute(f"COPY {_ident(item.name)} FROM "
                                 f"{cypher_literal(str(item.path.resolve()))} (header=true)")
                    bar.update(len(item.rows))
            counts = _ladybug_counts(conn, items)
        if counts != expected:
            raise GraphLoadError(f"loaded counts {counts} differ from the CSV rows {expected}")
        built = True
    except GraphLoadError:
        raise
    except RuntimeError as exc:
        raise GraphLoadError(f"loading {path} failed: {exc}") from exc
    finally:
        if not built:
            _remove_db_files(side)
    close_ladybug(path)
    path.with_name(path.name + ".wal").unlink(missing_ok=True)  # a stale log must not replay
    os.replace(side, path)
    return counts


# --------------------------------------------------------------------------- Bolt


def _bolt_int(session: Any, query: str) -> int:
    record = session.run(query).single()
    return int(record[0]) if record is not None else 0


def _bolt_counts(session: Any, items: list[_Item]) -> dict[str, int]:
    return {item.name: _bolt_int(session, _count_query(item)) for item in items}


def _statements(item: _Item) -> list[tuple[str, int]]:
    """UNWIND batches of inline literals, each under MAX_STATEMENT_CHARS: (text, rows)."""
    if item.kind == "node":
        sets = ", ".join(f"{_ident(c)}: r.{_ident(c)}" for c in item.columns)
        tail = f" AS r CREATE (:{_ident(item.name)} {{{sets}}})"
    else:
        sets = ", ".join(f"{_ident(c)}: r.{_ident(c)}" for c in item.columns[2:])
        tail = (f" AS r MATCH (a:{_ident(item.src)} {{{_ident(item.src_key)}: r.`_s`}}) "
                f"MATCH (b:{_ident(item.dst)} {{{_ident(item.dst_key)}: r.`_d`}}) "
                f"CREATE (a)-[:{_ident(item.name)}{f' {{{sets}}}' if sets else ''}]->(b)")
    batches: list[tuple[str, int]] = []
    current: list[str] = []
    size = len("UNWIND []") + len(tail)
    for row in item.rows:
        if item.kind == "rel":
            start, end, *_ = item.columns
            row = {"_s": row[start], "_d": row[end],
                   **{c: row[c] for c in item.columns[2:]}}
        literal = cypher_literal({k: v for k, v in row.items() if v is not None})
        if current and size + len(literal) + 2 > MAX_STATEMENT_CHARS:
            batches.append((f"UNWIND [{', '.join(current)}]{tail}", len(current)))
            current, size = [], len("UNWIND []") + len(tail)
        if size + len(literal) > MAX_STATEMENT_CHARS:
            raise GraphLoadError(f"{item.path}: a row is too long for one statement: {literal[:80]}")
        current.append(literal)
        size += len(literal) + 2
    if current:
        batches.append((f"UNWIND [{', '.join(current)}]{tail}", len(current)))
    return batches


def _bolt_index(session: Any, label: str, key: str) -> None:
    """A uniqueness constraint (Neo4j), else a plain index (FalkorDB), else nothing."""
    from neo4j.exceptions import Neo4jError

    for statement in (
        f"CREATE CONSTRAINT IF NOT EXISTS FOR (n:{_ident(label)}) REQUIRE n.{_ident(key)} IS UNIQUE",
        f"CREATE INDEX FOR (n:{_ident(label)}) ON (n.{_ident(key)})",
    ):
        try:
            session.run(statement).consume()
            return
        except Neo4jError:
            continue


def _load_bolt(url: str, items: list[_Item], reset: bool, progress: bool) -> dict[str, int]:
    from neo4j.exceptions import DriverError, Neo4jError

    expected = {item.name: len(item.rows) for item in items}
    try:
        with bolt_driver(url).session() as session:
            current = _bolt_counts(session, items)
            if current == expected and not reset:
                return current
            if any(current.values()) and not reset:
                diff = {k: (current[k], v) for k, v in expected.items() if current[k] != v}
                raise GraphLoadError(f"{url} already holds a different NovaOps graph "
                                     f"((found, expected): {diff}); pass reset=True to reload it")
            for item in items:
                if item.kind == "node":  # only our labels: other data on the server stays
                    while _bolt_int(session, f"MATCH (n:{_ident(item.name)}) WITH n LIMIT 500 "
                                             "DETACH DELETE n RETURN count(*)"):
                        pass
            for item in items:
                if item.kind == "node":
                    _bolt_index(session, item.name, item.columns[0])
            for item in items:
                with _bar(item, progress) as bar:
                    for statement, rows in _statements(item):
                        session.run(statement).consume()
                        bar.update(rows)
            counts = _bolt_counts(session, items)
    except Neo4jError as exc:
        raise GraphLoadError(f"loading {url} failed: {exc.message or exc.code}") from exc
    except DriverError as exc:
        raise GraphLoadError(f"graph server {url} unavailable: {exc}") from exc
    if counts != expected:
        raise GraphLoadError(f"loaded counts {counts} differ from the CSV rows {expected}")
    return counts


# --------------------------------------------------------------------------- entry points


def load_graph(url: str, sample_dir: Path = SAMPLE_DIR, *, reset: bool = False,
               progress: bool = True) -> dict[str, int]:
    """Load (or verify) the graph at `url`; returns the count per label and relationship type."""
    target = parse_graph_url(url)
    _, items = _plan(sample_dir)
    if target.backend == "ladybug":
        assert target.path is not None
        return _load_ladybug(target.path, items, reset, progress)
    return _load_bolt(url, items, reset, progress)


def main(argv: list[str] | None = None) -> int:
    """Command line: load the graph (default: TRAMITA_GRAPH_URL) and print the count per label and type."""
    from tramita.base.settings import Settings

    parser = argparse.ArgumentParser(description="Load the NovaOps graph.")
    parser.add_argument("url", nargs="?", help="graph URL (default: TRAMITA_GRAPH_URL)")
    parser.add_argument("--sample-dir", type=Path, default=SAMPLE_DIR)
    parser.add_argument("--reset", action="store_true", help="rebuild even if already loaded")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    url = args.url or Settings.from_env().graph_url
    try:
        counts = load_graph(url, args.sample_dir, reset=args.reset, progress=not args.quiet)
    except (GraphLoadError, ValueError) as exc:
        parser.exit(1, f"error: {exc}\n")
    for name, count in counts.items():
        print(f"{name}\t{count}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
