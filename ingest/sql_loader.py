"""Load the NovaOps sample (schema.sql + data/*.csv) into SQLite or PostgreSQL.

Idempotent: a hash of schema and data is kept in `tramita_meta`; when it matches, loading does
nothing, so business writes made since (approved expenses, new tickets) survive a restart. A changed
dataset, missing tables or `reset=True` reload from scratch, in ONE transaction (DDL is
transactional in both engines), so a failed load leaves the previous data in place.

PostgreSQL also gets a SELECT-only role for question answering (`ensure_readonly_role`): the
engine, not our SQL validation, is what stops writes.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Engine, MetaData, Table, Text
from sqlalchemy import exc as sa_exc
from tqdm import tqdm

from tools.database import DatabaseUnavailable, sqlite_path, writer_engine
from tools.pg_roles import check_identifier as _check_identifier
from tools.pg_roles import ensure_readonly_role as _ensure_readonly_role
from tools.pg_roles import pg_connect as _pg_connect
from tools.sql_schema import dataset_tables
from tramita.base.paths import SAMPLE_DIR

__all__ = [
    "META_KEY",
    "TRAMITA_METADATA",
    "copy_sqlite",
    "dataset_hash",
    "ensure_readonly_role",
    "ensure_tramita_tables",
    "load_sql",
    "table_counts",
]

META_KEY = "novaops_dataset_sha256"
_CHUNK = 500

# Tables tramita itself keeps in the business database (never granted to the read-only role).
TRAMITA_METADATA = MetaData()
Table("tramita_meta", TRAMITA_METADATA,
      Column("key", Text, primary_key=True),
      Column("value", Text))
Table("tool_executions", TRAMITA_METADATA,
      Column("idempotency_key", Text, primary_key=True),
      Column("tool_name", Text, nullable=False),
      Column("target_table", Text),
      Column("target_id", Text),
      Column("result_json", Text, nullable=False),
      Column("executed_at", Text, nullable=False))


def ensure_tramita_tables(engine: Engine) -> None:
    """Create `tramita_meta` and `tool_executions` if absent (they are never dropped)."""
    TRAMITA_METADATA.create_all(engine, checkfirst=True)


def dataset_hash(sample_dir: Path = SAMPLE_DIR) -> str:
    """SHA-256 over schema.sql and every table's CSV, in load order."""
    digest = hashlib.sha256()
    schema = sample_dir / "schema.sql"
    digest.update(schema.read_bytes())
    for table in dataset_tables(schema):
        digest.update(f"\0{table}\0".encode())
        digest.update((sample_dir / "data" / f"{table}.csv").read_bytes())
    return digest.hexdigest()


def _read_csv(path: Path) -> tuple[list[str], list[list[str | None]]]:
    """Header and rows; an empty field is NULL (the dataset's convention)."""
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        rows = [[v if v != "" else None for v in row] for row in reader]
    for n, row in enumerate(rows, start=2):
        if len(row) != len(header):
            raise ValueError(f"{path}: line {n} has {len(row)} fields, the header has {len(header)}")
    return header, rows


def _chunks(rows: list[list[str | None]], size: int = _CHUNK) -> Iterator[list[list[str | None]]]:
    for start in range(0, len(rows), size):
        yield rows[start:start + size]


# -------------------------------------------------------------------------------------- SQLite

def _sqlite_meta(conn: sqlite3.Connection) -> str | None:
    row = conn.execute("SELECT value FROM tramita_meta WHERE key = ?", (META_KEY,)).fetchone()
    return row[0] if row else None


def _sqlite_tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _sqlite_statements(script: str) -> Iterator[str]:
    """Split a script into statements with SQLite's own completeness test (comments and strings
    that contain ';' stay whole). executescript() cannot be used: it commits first.
    """
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            yield buffer
            buffer = ""


def _load_sqlite(path: Path, sample_dir: Path, reset: bool, progress: bool) -> dict[str, int]:
    tables = dataset_tables(sample_dir / "schema.sql")
    wanted = dataset_hash(sample_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(path, isolation_level=None, timeout=30)) as conn:
        # Checked once at the end (foreign_key_check) instead of row by row.
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("BEGIN IMMEDIATE")  # one writer; the check below sees the latest state
        try:
            if not reset and _sqlite_meta(conn) == wanted and set(tables) <= _sqlite_tables(conn):
                conn.execute("ROLLBACK")
                return _counts_sqlite(conn, tables)
            for statement in _sqlite_statements((sample_dir / "schema.sql").read_text(encoding="utf-8")):
                conn.execute(statement)
            for table in tables:
                header, rows = _read_csv(sample_dir / "data" / f"{table}.csv")
                cols = ", ".join(_check_identifier(c) for c in header)
                sql = f"INSERT INTO {_check_identifier(table)} ({cols}) VALUES ({', '.join('?' * len(header))})"
                with tqdm(total=len(rows), desc=f"sql {table}", unit="row", disable=not progress,
                          leave=False) as bar:
                    for chunk in _chunks(rows):
                        conn.executemany(sql, chunk)
                        bar.update(len(chunk))
            problems = conn.execute("PRAGMA foreign_key_check").fetchall()
            if problems:
                raise ValueError(f"foreign key violations in the dataset (table, rowid, parent): {problems[:5]}")
            conn.execute("DELETE FROM tool_executions")  # their results refer to the old rows
            conn.execute("INSERT INTO tramita_meta (key, value) VALUES (?, ?) "
                         "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (META_KEY, wanted))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return _counts_sqlite(conn, tables)


def _counts_sqlite(conn: sqlite3.Connection, tables: list[str]) -> dict[str, int]:
    return {t: int(conn.execute(f"SELECT COUNT(*) FROM {_check_identifier(t)}").fetchone()[0]) for t in tables}


# ---------------------------------------------------------------------------------- PostgreSQL

def _load_postgres(url: str, sample_dir: Path, reset: bool, progress: bool) -> dict[str, int]:
    from psycopg import sql

    tables = dataset_tables(sample_dir / "schema.sql")
    wanted = dataset_hash(sample_dir)
    with _pg_connect(url) as conn:  # commits on success, rolls back on error
        cur = conn.cursor()
        cur.execute("SELECT pg_advisory_xact_lock(hashtext('tramita.sql_loader'))")
        cur.execute("SELECT value FROM tramita_meta WHERE key = %s", (META_KEY,))
        row = cur.fetchone()
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")
        present = {r[0] for r in cur.fetchall()}
        if not reset and row and row[0] == wanted and set(tables) <= present:
            return _counts_postgres(cur, tables)
        grants = _table_grants(cur, tables)  # DROP TABLE loses them; the read-only role needs them
        # Portable DDL runs unchanged; no parameters → simple protocol, several statements allowed.
        cur.execute((sample_dir / "schema.sql").read_text(encoding="utf-8").encode())
        for table in tables:
            header, rows = _read_csv(sample_dir / "data" / f"{table}.csv")
            copy_sql = sql.SQL("COPY {} ({}) FROM STDIN").format(
                sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, header)))
            with tqdm(total=len(rows), desc=f"sql {table}", unit="row", disable=not progress,
                      leave=False) as bar, cur.copy(copy_sql) as copy:
                for chunk in _chunks(rows):
                    for values in chunk:
                        copy.write_row(values)
                    bar.update(len(chunk))
        for table, grantee, privilege in grants:
            cur.execute(sql.SQL("GRANT {} ON {} TO {}").format(
                sql.SQL(privilege), sql.Identifier(table),
                sql.SQL("PUBLIC") if grantee is None else sql.Identifier(grantee)))
        cur.execute("DELETE FROM tool_executions")  # their results refer to the old rows
        cur.execute("INSERT INTO tramita_meta (key, value) VALUES (%s, %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (META_KEY, wanted))
        return _counts_postgres(cur, tables)


def _table_grants(cur: Any, tables: list[str]) -> list[tuple[str, str | None, str]]:
    """(table, grantee or None for PUBLIC, privilege) granted on the dataset tables to others
    than the owner, so that a reload can restore them.
    """
    cur.execute(
        "SELECT c.relname, r.rolname, a.privilege_type "
        "FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee "
        "WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY(%s) "
        "AND a.grantee <> c.relowner", (tables,))
    allowed = {"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"}
    return [(t, g, p) for t, g, p in cur.fetchall() if p in allowed]


def _counts_postgres(cur: Any, tables: list[str]) -> dict[str, int]:
    from psycopg import sql

    counts: dict[str, int] = {}
    for table in tables:
        cur.execute(sql.SQL("SELECT COUNT(*) FROM {}").format(sql.Identifier(table)))
        counts[table] = int(cur.fetchone()[0])
    return counts


def ensure_readonly_role(admin_url: str, role: str = "tramita_ro", password: str | None = None, *,
                         statement_timeout_ms: int = 5000, sample_dir: Path = SAMPLE_DIR) -> str:
    """The SELECT-only role over this dataset's tables (see `tools.pg_roles`)."""
    return _ensure_readonly_role(admin_url, role, password, statement_timeout_ms=statement_timeout_ms,
                                 sample_dir=sample_dir)


# ------------------------------------------------------------------------------------- public

def load_sql(url: str, sample_dir: Path = SAMPLE_DIR, *, reset: bool = False,
             progress: bool = True) -> dict[str, int]:
    """Load the dataset into the database at `url` (sqlite:///PATH or postgresql://...) and return
    the row count per dataset table. Does nothing when the same dataset is already loaded, unless
    `reset` is True. Also creates tramita's own tables (`ensure_tramita_tables`).
    """
    for required in [sample_dir / "schema.sql", *(sample_dir / "data" / f"{t}.csv"
                                                  for t in dataset_tables(sample_dir / "schema.sql"))]:
        if not required.is_file():
            raise FileNotFoundError(f"dataset file missing: {required}")
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        ensure_tramita_tables(writer_engine(url))
    except sa_exc.OperationalError as exc:
        raise DatabaseUnavailable(f"cannot reach the SQL database: {str(exc.orig).strip().splitlines()[0]}") from exc
    if path is not None:
        return _load_sqlite(path, sample_dir, reset, progress)
    if url.startswith(("postgresql", "postgres")):
        return _load_postgres(url, sample_dir, reset, progress)
    raise ValueError(f"unsupported SQL URL {url.split(':', 1)[0]}:// (sqlite:///PATH or postgresql://...)")


def table_counts(url: str, sample_dir: Path = SAMPLE_DIR) -> dict[str, int]:
    """Current row count per dataset table (for checks that nothing changed)."""
    tables = dataset_tables(sample_dir / "schema.sql")
    path = sqlite_path(url)
    if path is not None:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            return _counts_sqlite(conn, tables)
    with _pg_connect(url) as conn:
        return _counts_postgres(conn.cursor(), tables)


def copy_sqlite(src: Path, dst: Path) -> None:
    """A consistent copy of a SQLite database (sqlite3 backup API; safe while others read or
    write the source). Used for a fresh dataset per evaluation item.
    """
    if not Path(src).is_file():
        raise FileNotFoundError(f"SQLite database not found: {src}")
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(f"{Path(src).resolve().as_uri()}?mode=ro", uri=True)) as source, \
            closing(sqlite3.connect(dst)) as target:
        source.backup(target)


def main(argv: list[str] | None = None) -> None:
    """`python -m ingest.sql_loader [URL] [--reset]`: load and print the row counts."""
    from tramita.base.settings import Settings

    parser = argparse.ArgumentParser(description="Load the NovaOps sample into the SQL database.")
    parser.add_argument("url", nargs="?", default=None, help="sqlite:///PATH or postgresql://... "
                        "(default: TRAMITA_SQL_URL or the data directory's novaops.db)")
    parser.add_argument("--reset", action="store_true", help="reload from scratch")
    args = parser.parse_args(argv)
    counts = load_sql(args.url or Settings.from_env().sql_url, reset=args.reset)
    for table, n in counts.items():
        print(f"{table:22} {n}")


if __name__ == "__main__":
    main()
