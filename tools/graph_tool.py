"""Read-only Cypher over the NovaOps graph: embedded LadybugDB by default, or a Bolt server.

Read-only by construction: every query passes `validate_cypher` first, then runs where the engine
itself refuses writes when it can (LadybugDB `Database(read_only=True)`; Bolt read transactions
plus Neo4j's EXPLAIN query type). FalkorDB's Bolt listener honours neither, so against it the guard
is the only barrier; the tests prove both facts.

Store handles are expensive and some servers misbehave when they are reopened (FalkorDB stalls on
the first connection after a `driver.close()`), so there is ONE LadybugDB `Database` per path and
ONE neo4j driver per URL in a process, shared with `ingest.graph_loader`.

This module also reads `graph/schema.md` (labels, keys, property types, relationship directions),
because both the loader (table DDL) and the text-to-Cypher prompt need the same parsed schema.
"""

from __future__ import annotations

import atexit
import contextlib
import re
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote, urlsplit

from tools.cypher_guard import UnsafeCypherError, inline_parameters, validate_cypher
from tramita.base.paths import PROMPTS_DIR, SAMPLE_DIR

if TYPE_CHECKING:
    import ladybug
    from neo4j import Driver, ManagedTransaction

__all__ = [
    "CypherExecutionError", "GraphSchema", "GraphTarget", "GraphTool", "GraphUnavailable",
    "UnsafeCypherError", "bolt_driver", "close_ladybug", "parse_graph_url", "read_graph_schema",
]

Backend = Literal["ladybug", "bolt"]
BOLT_SCHEMES = ("bolt", "bolt+s", "bolt+ssc", "neo4j", "neo4j+s", "neo4j+ssc")
CONNECTION_ACQUISITION_TIMEOUT_S = 3.0
LADYBUG_BUFFER_POOL = 256 * 1024 * 1024  # the default takes ~80% of RAM; the graph is tiny
# Each Database reserves max_db_size of *virtual* address space up front; the default (8 TB) lets
# only ~15 databases exist in one process before mmap fails and the process segfaults (seen in the
# test suite). 16 GB is far above any graph tramita serves.
LADYBUG_MAX_DB_SIZE = 1 << 34


class GraphUnavailable(RuntimeError):
    """The graph store is missing, locked by a writer, or its server is down."""


class CypherExecutionError(RuntimeError):
    """The engine rejected a validated query; `engine_message` is its text, for a repair prompt."""

    def __init__(self, engine_message: str, query: str) -> None:
        """Keep the engine's own message: the repair prompt shows it to the model."""
        super().__init__(f"Cypher failed: {engine_message}")
        self.engine_message = engine_message
        self.query = query


# --------------------------------------------------------------------------- URLs and handles


@dataclass(frozen=True)
class GraphTarget:
    """A parsed graph URL: a LadybugDB file path, or a Bolt URI with optional credentials."""

    backend: Backend
    path: Path | None = None
    uri: str = ""
    auth: tuple[str, str] | None = None


def parse_graph_url(url: str) -> GraphTarget:
    """`ladybug:///abs/file.lbug` (or `ladybug://` + any path) or `bolt://[user:pass@]host:port`."""
    if url.startswith("ladybug://"):
        raw = url[len("ladybug://") :]
        if not raw:
            raise ValueError(f"graph URL {url!r} has no file path")
        return GraphTarget("ladybug", path=Path(unquote(raw)).expanduser())
    parts = urlsplit(url)
    if parts.scheme in BOLT_SCHEMES:
        if not parts.hostname:
            raise ValueError(f"graph URL {url!r} has no host")
        auth = (unquote(parts.username), unquote(parts.password or "")) if parts.username else None
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        port = f":{parts.port}" if parts.port else ""
        return GraphTarget("bolt", uri=f"{parts.scheme}://{host}{port}", auth=auth)
    raise ValueError(
        f"unsupported graph URL {url!r}: use ladybug:///path/to/novaops.lbug or bolt://host:port")


_lock = threading.Lock()
_ladybug_dbs: dict[Path, tuple[ladybug.Database, int]] = {}
_drivers: dict[tuple[str, tuple[str, str] | None], Driver] = {}
_explain_support: dict[str, bool] = {}


def _ladybug_database(path: Path) -> ladybug.Database:
    """The process-wide read-only Database for `path`, opened on first use and reopened when the
    loader has swapped a new file in (`reset=True` renames a fresh build over the old one).
    """
    import ladybug

    key = path.resolve()
    try:
        inode = key.stat().st_ino
    except FileNotFoundError:
        raise GraphUnavailable(
            f"LadybugDB graph not found at {key}; load it first (ingest.graph_loader)") from None
    with _lock:
        cached = _ladybug_dbs.get(key)
        if cached is not None and cached[1] == inode:
            return cached[0]
        try:
            db = ladybug.Database(str(key), read_only=True, buffer_pool_size=LADYBUG_BUFFER_POOL,
                                  max_db_size=LADYBUG_MAX_DB_SIZE)
        except RuntimeError as exc:
            raise GraphUnavailable(f"cannot open LadybugDB graph at {key}: {exc}") from exc
        # the previous handle is only dropped: connections still running on it keep it alive,
        # and LadybugDB closes a Database when the last reference goes
        _ladybug_dbs[key] = (db, inode)
        return db


def close_ladybug(path: Path) -> None:
    """Drop the cached read-only Database, e.g. before the loader replaces the file."""
    with _lock:
        _ladybug_dbs.pop(path.resolve(), None)


def bolt_driver(url: str) -> Driver:
    """The process-wide neo4j driver for a Bolt URL. Never closed before exit: FalkorDB can stall
    for `connection_acquisition_timeout` on the first connection after any `driver.close()`.
    """
    from neo4j import GraphDatabase

    target = parse_graph_url(url)
    if target.backend != "bolt":
        raise ValueError(f"{url!r} is not a Bolt URL")
    key = (target.uri, target.auth)
    with _lock:
        driver = _drivers.get(key)
        if driver is None:
            driver = GraphDatabase.driver(
                target.uri, auth=target.auth,
                connection_acquisition_timeout=CONNECTION_ACQUISITION_TIMEOUT_S,
                connection_timeout=CONNECTION_ACQUISITION_TIMEOUT_S,
                max_transaction_retry_time=0.0)
            _drivers[key] = driver
        return driver


@atexit.register
def _close_drivers() -> None:
    with _lock:
        drivers = list(_drivers.values())
        _drivers.clear()
    for driver in drivers:
        with contextlib.suppress(Exception):  # exiting anyway
            driver.close()


# --------------------------------------------------------------------------- schema.md


@dataclass(frozen=True)
class Prop:
    name: str
    type: str  # LadybugDB column type: "STRING" or "INT64"
    note: str


@dataclass(frozen=True)
class NodeSpec:
    label: str
    key: str
    props: tuple[Prop, ...]
    count: int


@dataclass(frozen=True)
class RelSpec:
    type: str
    src: str
    dst: str
    props: tuple[Prop, ...]
    meaning: str
    count: int


@dataclass(frozen=True)
class GraphSchema:
    """What `graph/schema.md` declares; properties are strings unless the file marks them *int*."""

    nodes: tuple[NodeSpec, ...]
    rels: tuple[RelSpec, ...]
    notes: str
    examples: str

    def prompt_text(self) -> str:
        """The condensed schema for a text-to-Cypher prompt (stable text, so the KV cache holds)."""
        def props(items: tuple[Prop, ...]) -> str:
            return ", ".join(f"{p.name}{' int' if p.type == 'INT64' else ''}"
                             f"{f' {p.note}' if p.note else ''}" for p in items)

        lines = ["Node labels (key first; properties are strings unless marked int):"]
        lines += [f"(:{n.label}) {props(n.props)}" for n in self.nodes]
        lines.append("Relationships (the arrow gives the only stored direction):")
        for r in self.rels:
            rel_props = f" {{{props(r.props)}}}" if r.props else ""
            lines.append(f"(:{r.src})-[:{r.type}{rel_props}]->(:{r.dst}) : {r.meaning}")
        if self.notes:
            lines += ["Notes:", self.notes]
        if self.examples:
            lines += ["Examples:", self.examples]
        return "\n".join(lines)


_PROP_RE = re.compile(r"`(\w+)`(?:\s*\(([^()]*)\))?")
_REL_RE = re.compile(r"\(:(\w+)\)-\[:(\w+)\]->\(:(\w+)\)")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _props(cell: str) -> tuple[Prop, ...]:
    found = []
    for name, note in _PROP_RE.findall(cell):
        is_int = note.startswith("*int*")
        note = note.replace("*int*", "").strip()
        found.append(Prop(name, "INT64" if is_int else "STRING", f"({note})" if note else ""))
    return tuple(found)


def read_graph_schema(schema_md: Path = SAMPLE_DIR / "graph" / "schema.md") -> GraphSchema:
    """Parse the node and relationship tables of schema.md; a malformed row names file and line."""
    try:
        text = schema_md.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read graph schema {schema_md}: {exc}") from exc
    section = ""
    nodes: list[NodeSpec] = []
    rels: list[RelSpec] = []
    notes: list[str] = []
    examples: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            section = line[3:].strip().lower()
            continue
        is_row = line.startswith("|") and not re.match(r"^\|[\s|:-]+\|$", line)
        try:
            if section.startswith("node") and is_row and "`" in line:
                label, key, props, count = _cells(line)[:4]
                nodes.append(NodeSpec(label.strip("`"), key.strip("`"), _props(props), int(count)))
            elif section.startswith("relationship") and is_row and "`" in line:
                _, direction, props, meaning, count = _cells(line)[:5]
                match = _REL_RE.search(direction)
                if match is None:
                    raise ValueError(f"no (:A)-[:TYPE]->(:B) pattern in {direction!r}")
                src, rtype, dst = match.groups()
                rels.append(RelSpec(rtype, src, dst, _props(props), meaning.replace("**", ""),
                                    int(count)))
            elif section.startswith("relationship") and not line.startswith("|"):
                notes.append(line.replace("**", "").replace("`", ""))
            elif section.startswith("example") and not line.startswith("```"):
                examples.append(line)
        except (ValueError, IndexError) as exc:
            raise ValueError(f"{schema_md}, line {number}: malformed schema row: {exc}") from exc
    if not nodes or not rels:
        raise ValueError(f"{schema_md}: no node or relationship table found")
    return GraphSchema(tuple(nodes), tuple(rels), "\n".join(notes).strip(),
                       "\n".join(examples).strip())


@lru_cache(maxsize=8)
def _schema_version(path: Path, mtime_ns: int, size: int) -> GraphSchema:
    """`read_graph_schema` of one version of the file (its modification time and size)."""
    return read_graph_schema(path)


# --------------------------------------------------------------------------- results


def _plain(value: Any) -> Any:
    """Engine values as plain Python: nodes and relationships become dicts of their properties,
    paths become {'nodes': [...], 'rels': [...]}.
    """
    from neo4j.graph import Node, Relationship
    from neo4j.graph import Path as NeoPath

    if isinstance(value, (Node, Relationship)):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, NeoPath):
        return {"nodes": [_plain(n) for n in value.nodes],
                "rels": [_plain(r) for r in value.relationships]}
    if isinstance(value, dict):
        if "_NODES" in value and "_RELS" in value:  # LadybugDB recursive relationship / path
            return {"nodes": [_plain(n) for n in value["_NODES"]],
                    "rels": [_plain(r) for r in value["_RELS"]]}
        if "_LABEL" in value and "_ID" in value:  # LadybugDB node or relationship; an untyped
            # relationship carries every type's columns, so unset (None) ones are dropped
            return {k: _plain(v) for k, v in value.items()
                    if not k.startswith("_") and v is not None}
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# --------------------------------------------------------------------------- the tool


class GraphTool:
    """Answer questions from the graph with validated, row-capped, read-only Cypher."""

    def __init__(self, url: str, *, row_cap: int = 200, timeout_s: float = 10.0,
                 sample_dir: Path = SAMPLE_DIR,
                 allowed_procedures: frozenset[str] = frozenset()) -> None:
        """Bind the target graph (embedded or Bolt) with its row cap, timeout and allowed procedures."""
        self.url = url
        self.target = parse_graph_url(url)
        self.row_cap = row_cap
        self.timeout_s = timeout_s
        self.sample_dir = sample_dir
        self.allowed_procedures = allowed_procedures

    @property
    def backend(self) -> Backend:
        """The dialect in use: `ladybug` (embedded) or `neo4j` (Bolt)."""
        return self.target.backend

    # -- availability

    def available(self) -> bool:
        """True when a trivial read query runs; never raises."""
        try:
            self._run("RETURN 1 AS ok", None)
        except Exception:  # noqa: BLE001 - availability is a yes/no question
            return False
        return True

    # -- prompts

    def schema(self) -> GraphSchema:
        """The graph schema the dataset declares (labels, relationship types and their ends), parsed
        once per version of the file: every prompt and every answer's label check reads it.
        """
        path = self.sample_dir / "graph" / "schema.md"
        try:
            stat = path.stat()
        except OSError:
            return read_graph_schema(path)  # raises with the file named
        return _schema_version(path, stat.st_mtime_ns, stat.st_size)

    def schema_text(self) -> str:
        """The graph schema as the prompts show it."""
        return self.schema().prompt_text()

    def dialect_notes(self) -> str:
        """The Cypher dialect notes for this backend's prompt."""
        name = "ladybug" if self.backend == "ladybug" else "neo4j"
        return (PROMPTS_DIR / f"cypher_dialect_{name}.txt").read_text(encoding="utf-8").strip()

    def schema_prompt(self) -> str:
        """Schema plus the backend's DIALECT NOTES, ready for a text-to-Cypher prompt."""
        return f"{self.schema_text()}\nDIALECT NOTES\n{self.dialect_notes()}"

    # -- queries

    def query(self, cypher: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Validate, then run read-only; at most `row_cap` rows of plain values.

        Over Bolt the parameters are first inlined as escaped literals (FalkorDB pastes raw
        parameter text into the query, which would let a value smuggle a clause past the guard),
        and the combined text is what gets validated. Raises UnsafeCypherError (refused before
        execution), CypherExecutionError (the engine's message, for a repair loop) or
        GraphUnavailable (store missing, locked or down).
        """
        if self.backend == "bolt":
            cypher, params = inline_parameters(cypher, params), None
        checked = validate_cypher(cypher, row_cap=self.row_cap,
                                  allowed_procedures=self.allowed_procedures)
        return self._run(checked, params)

    def _run(self, cypher: str, params: dict[str, Any] | None) -> list[dict[str, Any]]:
        """Execute WITHOUT the guard (the tests use it to prove the engine's own refusal)."""
        if self.backend == "ladybug":
            return self._run_ladybug(cypher, params or {})
        return self._run_bolt(cypher, params or {})

    def _run_ladybug(self, cypher: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        import ladybug

        assert self.target.path is not None
        conn = ladybug.Connection(_ladybug_database(self.target.path))
        try:
            conn.set_query_timeout(int(self.timeout_s * 1000))
            try:
                result = conn.execute(cypher, parameters=params)
            except RuntimeError as exc:
                message = str(exc)
                if "interrupted" in message.lower():
                    message = f"query timed out after {self.timeout_s:g} s ({message})"
                raise CypherExecutionError(message, cypher) from exc
            if isinstance(result, list):  # several statements: the guard never lets this through
                for item in result:
                    item.close()
                raise CypherExecutionError("multiple statements are not supported", cypher)
            try:
                columns = result.get_column_names()
                rows: list[dict[str, Any]] = []
                while len(rows) < self.row_cap and result.has_next():
                    rows.append({c: _plain(v) for c, v in zip(columns, result.get_next(), strict=True)})
                return rows
            finally:
                result.close()
        finally:
            conn.close()

    def _explain_reports_type(self) -> bool:
        """Whether the server classifies queries with EXPLAIN (Neo4j does; FalkorDB returns no
        query type and, measured, EXECUTES the query under EXPLAIN), probed once per URL with a
        harmless `EXPLAIN RETURN 1`.
        """
        from neo4j import READ_ACCESS

        with _lock:
            known = _explain_support.get(self.target.uri)
        if known is None:
            with bolt_driver(self.url).session(default_access_mode=READ_ACCESS) as session:
                kind = session.run("EXPLAIN RETURN 1").consume().query_type
            known = kind is not None
            with _lock:
                _explain_support[self.target.uri] = known
        return known

    def _run_bolt(self, cypher: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        from neo4j import READ_ACCESS, unit_of_work
        from neo4j.exceptions import DriverError, Neo4jError

        cap = self.row_cap

        @unit_of_work(timeout=self.timeout_s)
        def work(tx: ManagedTransaction, explain: bool) -> list[dict[str, Any]]:
            if explain:
                kind = tx.run("EXPLAIN " + cypher, params).consume().query_type
                if str(kind) not in ("r", "READ_ONLY"):
                    raise UnsafeCypherError(
                        f"the server classifies this query as {kind!s}, not read-only (r)",
                        clause="EXPLAIN")
            result = tx.run(cypher, params)
            rows = []
            for record in result:
                rows.append({k: _plain(v) for k, v in record.items()})
                if len(rows) >= cap:
                    break
            return rows

        try:
            explain = self._explain_reports_type()
            with bolt_driver(self.url).session(default_access_mode=READ_ACCESS) as session:
                return session.execute_read(work, explain)
        except Neo4jError as exc:
            code = exc.code or ""
            if ".Security." in code:
                raise GraphUnavailable(f"graph server {self.target.uri} refused us: {exc}") from exc
            message = exc.message or code or type(exc).__name__
            if code.endswith("UnknownError"):
                message += (" (the server gave no details; FalkorDB reports every error this "
                            "way: check labels, properties and syntax against the schema)")
            raise CypherExecutionError(message, cypher) from exc
        except DriverError as exc:  # ServiceUnavailable, SessionExpired, pool acquisition timeout
            raise GraphUnavailable(f"graph server {self.target.uri} unavailable: {exc}") from exc
