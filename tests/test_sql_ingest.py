"""ingest.sql_loader on real SQLite files and a real PostgreSQL server."""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, inspect

from ingest.sql_loader import (
    META_KEY,
    copy_sqlite,
    dataset_hash,
    ensure_readonly_role,
    ensure_tramita_tables,
    load_sql,
    table_counts,
)
from tools.database import DatabaseUnavailable, normalize_url
from tramita.base.paths import SAMPLE_DIR


def readme_counts() -> dict[str, int]:
    """The row counts documented in sample/novaops/README.md (`| `table` | `data/table.csv` | n |`)."""
    text = (SAMPLE_DIR / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| `data/\w+\.csv` \| (\d+) \|$", text, flags=re.MULTILINE)
    return {table: int(n) for table, n in rows}


EXPECTED = readme_counts()


def test_readme_table_is_complete() -> None:
    assert len(EXPECTED) == 14
    assert EXPECTED["teams"] == 8 and EXPECTED["employees"] == 60 and EXPECTED["audit_log"] == 11


# ------------------------------------------------------------------------------------ SQLite

@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'novaops.db'}"


def test_sqlite_load_counts_and_nulls(sqlite_url: str) -> None:
    assert load_sql(sqlite_url, progress=False) == EXPECTED
    path = sqlite_url[len("sqlite:///"):]
    with sqlite3.connect(path) as conn:
        pending, null_approver = conn.execute(
            "SELECT SUM(status = 'pending'), SUM(status = 'pending' AND approver_id IS NULL) FROM expenses").fetchone()
        empty_strings = conn.execute("SELECT COUNT(*) FROM expenses WHERE approver_id = ''").fetchone()[0]
        meta = conn.execute("SELECT value FROM tramita_meta WHERE key = ?", (META_KEY,)).fetchone()[0]
    assert pending > 0 and pending == null_approver  # empty CSV field → NULL
    assert empty_strings == 0
    assert meta == dataset_hash()


def test_sqlite_second_load_is_a_noop_and_reset_reloads(sqlite_url: str) -> None:
    path = sqlite_url[len("sqlite:///"):]
    load_sql(sqlite_url, progress=False)
    with sqlite3.connect(path) as conn:  # a business write made after the first load
        conn.execute("UPDATE expenses SET status = 'approved', approver_id = 'E006' WHERE expense_id = 'EXP-0264'")
        conn.execute("INSERT INTO tool_executions VALUES ('k1', 'approve_expense', 'expenses', 'EXP-0264', '{}', 'now')")
    assert load_sql(sqlite_url, progress=False) == EXPECTED
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT status FROM expenses WHERE expense_id = 'EXP-0264'").fetchone()[0] == "approved"
        assert conn.execute("SELECT COUNT(*) FROM tool_executions").fetchone()[0] == 1
    assert load_sql(sqlite_url, progress=False, reset=True) == EXPECTED
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT status FROM expenses WHERE expense_id = 'EXP-0264'").fetchone()[0] == "pending"
        assert conn.execute("SELECT COUNT(*) FROM tool_executions").fetchone()[0] == 0


def _sample_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "sample"
    shutil.copytree(SAMPLE_DIR / "data", dst / "data")
    shutil.copy(SAMPLE_DIR / "schema.sql", dst / "schema.sql")
    return dst


def test_changed_dataset_reloads(tmp_path: Path, sqlite_url: str) -> None:
    sample = _sample_copy(tmp_path)
    load_sql(sqlite_url, sample, progress=False)
    csv_path = sample / "data" / "audit_log.csv"
    lines = csv_path.read_text(encoding="utf-8").splitlines(keepends=True)
    csv_path.write_text("".join(lines[:-1]), encoding="utf-8")
    assert load_sql(sqlite_url, sample, progress=False)["audit_log"] == EXPECTED["audit_log"] - 1


def test_failed_load_keeps_previous_data(tmp_path: Path, sqlite_url: str) -> None:
    sample = _sample_copy(tmp_path)
    load_sql(sqlite_url, sample, progress=False)
    csv_path = sample / "data" / "expenses.csv"
    text = csv_path.read_text(encoding="utf-8")
    csv_path.write_text(text.replace(",E0", ",X9", 1), encoding="utf-8")  # a dangling foreign key
    with pytest.raises(ValueError, match="foreign key"):
        load_sql(sqlite_url, sample, progress=False)
    assert table_counts(sqlite_url) == EXPECTED


def test_missing_dataset_file_is_named(tmp_path: Path, sqlite_url: str) -> None:
    sample = _sample_copy(tmp_path)
    (sample / "data" / "tickets.csv").unlink()
    with pytest.raises(FileNotFoundError, match="tickets.csv"):
        load_sql(sqlite_url, sample, progress=False)


def test_tramita_tables(sqlite_url: str) -> None:
    load_sql(sqlite_url, progress=False)
    engine = create_engine(normalize_url(sqlite_url))
    ensure_tramita_tables(engine)  # idempotent
    cols = {c["name"]: c for c in inspect(engine).get_columns("tool_executions")}
    assert list(cols) == ["idempotency_key", "tool_name", "target_table", "target_id", "result_json", "executed_at"]
    assert not cols["tool_name"]["nullable"] and cols["target_id"]["nullable"]
    assert inspect(engine).get_pk_constraint("tool_executions")["constrained_columns"] == ["idempotency_key"]
    assert [c["name"] for c in inspect(engine).get_columns("tramita_meta")] == ["key", "value"]
    engine.dispose()


def test_copy_sqlite_is_independent(tmp_path: Path, sqlite_url: str) -> None:
    load_sql(sqlite_url, progress=False)
    src = Path(sqlite_url[len("sqlite:///"):])
    dst = tmp_path / "evals" / "item-1.db"
    copy_sqlite(src, dst)
    assert table_counts(f"sqlite:///{dst}") == EXPECTED
    with sqlite3.connect(dst) as conn:
        conn.execute("DELETE FROM audit_log")
    assert table_counts(sqlite_url)["audit_log"] == EXPECTED["audit_log"]
    with pytest.raises(FileNotFoundError):
        copy_sqlite(tmp_path / "nope.db", tmp_path / "x.db")


def test_unreachable_postgres_is_reported() -> None:
    from tramita.lab.pgcluster import free_port

    with pytest.raises(DatabaseUnavailable):
        load_sql(f"postgresql://postgres@127.0.0.1:{free_port()}/novaops", progress=False)


# -------------------------------------------------------------------------------- PostgreSQL

def _pg(url: str, query: str, *params: object) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, params or None)
        return cur.fetchall() if cur.description else []


@pytest.mark.postgres
def test_postgres_load_noop_and_reset(pg_database: str) -> None:
    assert load_sql(pg_database, progress=False) == EXPECTED
    assert _pg(pg_database, "SELECT COUNT(*) FROM expenses WHERE approver_id = ''")[0][0] == 0
    assert _pg(pg_database, "SELECT COUNT(*) FROM expenses WHERE status = 'pending' AND approver_id IS NOT NULL")[0][0] == 0
    _pg(pg_database, "UPDATE expenses SET status = 'rejected' WHERE expense_id = 'EXP-0264'")
    assert load_sql(pg_database, progress=False) == EXPECTED
    assert _pg(pg_database, "SELECT status FROM expenses WHERE expense_id = 'EXP-0264'")[0][0] == "rejected"
    assert load_sql(pg_database, progress=False, reset=True) == EXPECTED
    assert _pg(pg_database, "SELECT status FROM expenses WHERE expense_id = 'EXP-0264'")[0][0] == "pending"
    assert _pg(pg_database, "SELECT value FROM tramita_meta WHERE key = %s", META_KEY)[0][0] == dataset_hash()


@pytest.mark.postgres
def test_postgres_failed_load_rolls_back(tmp_path: Path, pg_database: str) -> None:
    sample = _sample_copy(tmp_path)
    load_sql(pg_database, sample, progress=False)
    csv_path = sample / "data" / "tickets.csv"
    text = csv_path.read_text(encoding="utf-8")
    csv_path.write_text(text.replace(",P2,", ",P9,", 1), encoding="utf-8")  # violates the CHECK
    with pytest.raises(psycopg.errors.CheckViolation):
        load_sql(pg_database, sample, progress=False)
    assert table_counts(pg_database) == EXPECTED


@pytest.mark.postgres
def test_readonly_role_grants(pg_database: str) -> None:
    load_sql(pg_database, progress=False)
    url = ensure_readonly_role(pg_database, role="tramita_ro", password="s3cret/pw")
    assert ensure_readonly_role(pg_database, role="tramita_ro", password="s3cret/pw") == url  # idempotent
    assert "tramita_ro" in url
    granted = _pg(pg_database, "SELECT table_name, privilege_type FROM information_schema.role_table_grants "
                               "WHERE grantee = 'tramita_ro' ORDER BY table_name")
    assert {t for t, _ in granted} == set(EXPECTED)  # dataset tables only, audit_log included
    assert {p for _, p in granted} == {"SELECT"}
    config = [row[0] for row in _pg(pg_database, "SELECT unnest(rolconfig) FROM pg_roles "
                                                 "WHERE rolname = 'tramita_ro'") if isinstance(row[0], str)]
    assert "default_transaction_read_only=on" in config
    assert any(c.startswith("statement_timeout=") for c in config)
    with psycopg.connect(url) as conn:  # the password round-trips through the URL
        assert conn.execute("SELECT COUNT(*) FROM teams").fetchone() == (EXPECTED["teams"],)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM tramita_meta")


@pytest.mark.postgres
def test_reload_keeps_readonly_grants(pg_database: str) -> None:
    load_sql(pg_database, progress=False)
    url = ensure_readonly_role(pg_database, role="tramita_ro_reload", password="pw")
    load_sql(pg_database, progress=False, reset=True)  # DROP + CREATE TABLE would lose the grants
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT COUNT(*) FROM audit_log").fetchone() == (EXPECTED["audit_log"],)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM tool_executions")
