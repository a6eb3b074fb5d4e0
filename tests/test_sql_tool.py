"""SQLTool: validation corpus, read-only execution, gold queries on SQLite and PostgreSQL, schema text.

Everything runs against real databases built by ingest.sql_loader: a SQLite file and a database on
the test PostgreSQL server, queried as the SELECT-only role.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ingest.sql_loader import ensure_readonly_role, load_sql
from tools.database import DatabaseUnavailable
from tools.sql_schema import dataset_tables, link_schema, load_synonyms
from tools.sql_tool import SQLExecutionError, SQLTool, UnsafeSQLError
from tools.sql_values import ValueIndex
from tramita.base.paths import SAMPLE_DIR
from tramita.lab.pgcluster import PgCluster, free_port

TABLES = dataset_tables()


# ------------------------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def sqlite_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('sqltool') / 'novaops.db'}"
    load_sql(url, progress=False)
    return url


@pytest.fixture(scope="module")
def pg_admin(pg_server: PgCluster | str) -> str:
    """One loaded database for the whole module (the conftest fixture is per test)."""
    admin = pg_server if isinstance(pg_server, str) else pg_server.url
    name = "t_sqltool_" + uuid.uuid4().hex[:8]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = admin.rsplit("/", 1)[0] + "/" + name
    load_sql(url, progress=False)
    return url


@pytest.fixture(scope="module")
def pg_readonly(pg_admin: str) -> str:
    return ensure_readonly_role(pg_admin, role="tramita_ro_test", password="ro-pass")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest) -> tuple[SQLTool, str]:
    """(tool as used for question answering, admin URL for before/after checks)."""
    if request.param == "sqlite":
        url = request.getfixturevalue("sqlite_db")
        return SQLTool(url), url
    admin = request.getfixturevalue("pg_admin")
    return SQLTool(request.getfixturevalue("pg_readonly")), admin


def fingerprint(admin_url: str) -> dict[str, tuple[int, str]]:
    """Row count and a content hash per dataset table (and tramita's own tables)."""
    out: dict[str, tuple[int, str]] = {}
    tables = [*TABLES, "tramita_meta", "tool_executions"]
    if admin_url.startswith("sqlite:///"):
        with sqlite3.connect(admin_url[len("sqlite:///"):]) as conn:
            for t in tables:
                rows = sorted(map(repr, conn.execute(f"SELECT * FROM {t}").fetchall()))
                out[t] = (len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest())
    else:
        with psycopg.connect(admin_url) as conn:
            for t in tables:
                rows = sorted(map(repr, conn.execute(f"SELECT * FROM {t}").fetchall()))
                out[t] = (len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest())
    return out


# ------------------------------------------------------------------------- unsafe query corpus

UNSAFE: list[str] = [
    # several statements, including ones hidden behind comments or string tricks
    "SELECT 1; DELETE FROM expenses",
    "SELECT * FROM teams; DROP TABLE teams",
    "SELECT 1;DELETE FROM expenses;",
    "SELECT 1 -- harmless\n; DELETE FROM expenses",
    "SELECT 1 /* a comment */; UPDATE expenses SET status = 'approved'",
    "SELECT 1 /* /* nested */ ; DELETE FROM expenses; /* */",
    "/* */ DELETE FROM expenses -- ; SELECT 1",
    "SELECT 'a\\'; DELETE FROM expenses; --'",
    "SELECT 1;\nATTACH DATABASE '/tmp/evil.db' AS evil",
    # writes and schema changes
    "INSERT INTO teams VALUES ('T99', 'x', 'x', 'x', 'x', 'x')",
    "INSERT INTO audit_log SELECT * FROM audit_log",
    "UPDATE expenses SET status = 'approved' WHERE expense_id = 'EXP-0264'",
    "update expenses set amount_usd = 0",
    "DELETE FROM expenses",
    "delete from audit_log where 1 = 1",
    "REPLACE INTO teams VALUES ('T01', 'x', 'x', 'x', 'x', 'x')",
    "MERGE INTO teams t USING teams s ON t.team_id = s.team_id WHEN MATCHED THEN DELETE",
    "DROP TABLE expenses",
    "DROP VIEW IF EXISTS v",
    "ALTER TABLE expenses ADD COLUMN pwned TEXT",
    "ALTER TABLE teams RENAME TO teams_old",
    "CREATE TABLE pwned (a TEXT)",
    "CREATE TEMP TABLE t AS SELECT * FROM expenses",
    "CREATE VIEW v AS SELECT * FROM expenses",
    "CREATE INDEX ix ON expenses (status)",
    "TRUNCATE expenses",
    "GRANT ALL ON expenses TO PUBLIC",
    "REVOKE SELECT ON expenses FROM PUBLIC",
    "COMMENT ON TABLE teams IS 'x'",
    # engine administration
    "ATTACH DATABASE '/tmp/evil.db' AS evil",
    "DETACH DATABASE main",
    "PRAGMA query_only = OFF",
    "PRAGMA writable_schema = ON",
    "pragma table_info(expenses)",
    "VACUUM",
    "VACUUM INTO '/tmp/copy.db'",
    "BEGIN",
    "COMMIT",
    "SET default_transaction_read_only = off",
    "SET ROLE postgres",
    "RESET ALL",
    "SHOW ALL",
    "EXPLAIN ANALYZE DELETE FROM expenses",
    "COPY expenses TO '/tmp/x.csv'",
    "COPY expenses FROM PROGRAM 'id'",
    "COPY (SELECT 1) TO PROGRAM 'touch /tmp/pwned'",
    "DO $$ BEGIN DELETE FROM expenses; END $$",
    "CALL some_procedure()",
    "LISTEN ch",
    "NOTIFY ch, 'x'",
    "LOCK TABLE expenses",
    "REINDEX TABLE expenses",
    "ANALYZE expenses",
    "PREPARE p AS DELETE FROM expenses",
    "EXECUTE p",
    "DEALLOCATE ALL",
    "DISCARD ALL",
    "CHECKPOINT",
    "LOAD 'plpgsql'",
    # writes hidden inside a SELECT
    "SELECT * INTO stolen FROM employees",
    "SELECT * INTO TEMP stolen FROM employees",
    "WITH d AS (DELETE FROM expenses RETURNING *) SELECT * FROM d",
    "WITH u AS (UPDATE expenses SET status = 'approved' RETURNING *) SELECT COUNT(*) FROM u",
    "WITH i AS (INSERT INTO teams VALUES ('T99','a','b','c','d','e') RETURNING *) SELECT * FROM i",
    "SELECT * FROM expenses FOR UPDATE",
    "SELECT * FROM expenses FOR SHARE",
    # dangerous functions
    "SELECT pg_read_file('/etc/passwd')",
    "SELECT pg_read_binary_file('/etc/passwd')",
    "SELECT pg_ls_dir('.')",
    "SELECT pg_stat_file('postgresql.conf')",
    "SELECT pg_sleep(30)",
    "SELECT * FROM expenses WHERE pg_sleep(1) IS NULL",
    "SELECT pg_catalog.pg_sleep(1)",
    "SELECT \"pg_sleep\"(1)",
    "SELECT PG_SLEEP (1)",
    "SELECT pg_terminate_backend(1)",
    "SELECT pg_cancel_backend(1)",
    "SELECT pg_reload_conf()",
    "SELECT pg_advisory_lock(1)",
    "SELECT pg_notify('ch', 'x')",
    "SELECT set_config('default_transaction_read_only', 'off', false)",
    "SELECT nextval('some_seq')",
    "SELECT setval('some_seq', 1)",
    "SELECT dblink('host=evil', 'SELECT 1')",
    "SELECT dblink_exec('dbname=novaops', 'DELETE FROM expenses')",
    "SELECT * FROM dblink('dbname=novaops', 'SELECT 1') AS t(a int)",
    "SELECT lo_import('/etc/passwd')",
    "SELECT lo_export(1, '/tmp/x')",
    "SELECT query_to_xml('DELETE FROM expenses RETURNING *', true, true, '')",
    "SELECT table_to_xml('pg_authid', true, true, '')",
    "SELECT ts_stat('SELECT 1')",
    "SELECT load_extension('/tmp/evil.so')",
    "SELECT readfile('/etc/passwd')",
    "SELECT writefile('/tmp/x', 'data')",
    "SELECT fts3_tokenizer('simple')",
    "SELECT randomblob(2000000000)",
    "SELECT zeroblob(2000000000)",
    "SELECT sqlite_version()",
    "SELECT * FROM pragma_table_info('expenses')",
    "SELECT * FROM fsdir('/')",
    # catalogs, tramita's own tables, unknown tables
    "SELECT * FROM sqlite_master",
    "SELECT sql FROM sqlite_schema",
    "SELECT * FROM main.sqlite_master",
    "SELECT * FROM sqlite_temp_master",
    "SELECT * FROM pg_catalog.pg_tables",
    "SELECT * FROM pg_user",
    "SELECT * FROM pg_shadow",
    "SELECT rolpassword FROM pg_authid",
    "SELECT * FROM information_schema.tables",
    "SELECT * FROM information_schema.columns WHERE table_name = 'expenses'",
    "SELECT * FROM expenses UNION ALL SELECT * FROM sqlite_master",
    "SELECT (SELECT COUNT(*) FROM pg_roles)",
    "SELECT * FROM tramita_meta",
    "SELECT * FROM tool_executions",
    "SELECT * FROM salaries",
    "SELECT * FROM temp.expenses",
    "SELECT * FROM other_db.public.expenses",
    "WITH a AS (SELECT * FROM pg_user), pg_user AS (SELECT 1) SELECT * FROM a",
    "SELECT * FROM (WITH x AS (SELECT 1) SELECT * FROM x) q, x",
    # look-alike characters
    "ＤＥＬＥＴＥ FROM expenses",
    "ＳＥＬＥＣＴ * FROM expenses",
    "SЕLECT * FROM expenses",
    "SELECT * FROM ехpenses",
    "SELECT 1; DЕLETE FROM expenses",
    "SELECT * FROM expenses\u200b",
    # not SQL at all
    "",
    "   ",
    "TABLE expenses; DELETE FROM expenses",
    "VALUES (1)",
]


def test_corpus_is_large_enough() -> None:
    assert len(UNSAFE) >= 60
    assert len(set(UNSAFE)) == len(UNSAFE)


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
@pytest.mark.parametrize("sql", UNSAFE)
def test_unsafe_query_refused(dialect: str, sql: str) -> None:
    tool = SQLTool("sqlite:///unused.db" if dialect == "sqlite" else "postgresql://u@localhost/unused",
                   dialect=dialect)
    with pytest.raises(UnsafeSQLError) as info:
        tool.validate(sql)
    assert info.value.reason  # a clear message


def test_unsafe_queries_change_nothing(engine: tuple[SQLTool, str]) -> None:
    tool, admin = engine
    before = fingerprint(admin)
    for sql in UNSAFE:
        with pytest.raises(UnsafeSQLError):
            tool.query(sql)
    assert fingerprint(admin) == before


def test_refusal_messages() -> None:
    tool = SQLTool("sqlite:///unused.db")
    cases = {
        "SELECT 1; DELETE FROM expenses": "exactly one statement",
        "DELETE FROM expenses": "DELETE",
        "WITH d AS (DELETE FROM expenses RETURNING *) SELECT * FROM d": "DELETE",
        "SELECT * INTO x FROM teams": "SELECT INTO",
        "SELECT pg_sleep(1)": "pg_sleep",
        "SELECT * FROM sqlite_master": "sqlite_master",
        "SELECT * FROM salaries": "known tables",
        "SЕLECT 1": "CYRILLIC",
    }
    for sql, fragment in cases.items():
        with pytest.raises(UnsafeSQLError, match=fragment):
            tool.validate(sql)
    with pytest.raises(UnsafeSQLError) as unknown:
        tool.validate("SELECT * FROM salaries")
    assert unknown.value.repairable  # a repair loop may retry with a real table
    with pytest.raises(UnsafeSQLError) as write:
        tool.validate("DROP TABLE teams")
    assert not write.value.repairable


SAFE = [
    "SELECT COUNT(*) FROM expenses WHERE status = 'pending'",
    "select * from teams",
    "SELECT * FROM teams;",
    "(SELECT team_id FROM teams)",
    "SELECT name FROM teams UNION SELECT name FROM services",
    "SELECT team_id FROM teams INTERSECT SELECT team_id FROM budgets",
    "SELECT team_id FROM teams EXCEPT SELECT owner_team_id FROM services",
    "WITH t AS (SELECT * FROM teams), b AS (SELECT * FROM budgets JOIN t USING (team_id)) SELECT * FROM b",
    ("WITH RECURSIVE chain(id, mgr) AS (SELECT employee_id, manager_id FROM employees WHERE employee_id = 'E047' "
     "UNION ALL SELECT e.employee_id, e.manager_id FROM employees e JOIN chain c ON e.employee_id = c.mgr) "
     "SELECT id FROM chain"),
    "SELECT e.full_name FROM employees e WHERE e.full_name LIKE 'Lar%' -- trailing comment",
    "SELECT title FROM tickets WHERE title = 'DROP TABLE expenses; --'",
    "SELECT * FROM expenses WHERE description LIKE '%São Paulo%'",
    "SELECT COUNT(*) AS n FROM incidents WHERE opened_at >= '2026-01-01'",
    "SELECT e.full_name, (SELECT COUNT(*) FROM tickets t WHERE t.assignee_id = e.employee_id) AS n FROM employees e",
]


@pytest.mark.parametrize("sql", SAFE)
def test_safe_queries_run_on_both_engines(engine: tuple[SQLTool, str], sql: str) -> None:
    tool, _ = engine
    rows = tool.query(sql)
    assert isinstance(rows, list) and len(rows) <= tool.row_cap


# ----------------------------------------------------------------------- the engine is the barrier

def test_sqlite_connection_refuses_writes(sqlite_db: str) -> None:
    tool = SQLTool(sqlite_db)
    before = fingerprint(sqlite_db)
    for sql in ["UPDATE expenses SET status = 'approved'", "DELETE FROM audit_log",
                "PRAGMA query_only = OFF", "ATTACH DATABASE ':memory:' AS m",
                "SELECT * FROM tramita_meta", "SELECT load_extension('x')"]:
        with pytest.raises(SQLExecutionError):
            tool._execute(sql)  # validation bypassed on purpose
    # Even with the authorizer removed and query_only switched off, the file is open read-only.
    conn = tool._open_sqlite()
    try:
        conn.set_authorizer(None)
        conn.execute("PRAGMA query_only = OFF")
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.execute("UPDATE expenses SET status = 'approved'")
    finally:
        conn.close()
    assert fingerprint(sqlite_db) == before


@pytest.mark.postgres
def test_postgres_role_refuses_writes(pg_admin: str, pg_readonly: str) -> None:
    tool = SQLTool(pg_readonly)
    before = fingerprint(pg_admin)
    for sql in ["UPDATE expenses SET status = 'approved'", "DELETE FROM audit_log",
                "CREATE TABLE pwned (a int)", "SELECT * FROM tramita_meta",
                "SELECT 1; DELETE FROM expenses"]:
        with pytest.raises(SQLExecutionError):
            tool._execute(sql)  # validation bypassed on purpose
    with psycopg.connect(pg_readonly, autocommit=True) as conn:
        conn.execute("SET default_transaction_read_only = off")
        for sql in ["UPDATE expenses SET status = 'approved'", "DELETE FROM audit_log",
                    "INSERT INTO tool_executions VALUES ('k', 't', NULL, NULL, '{}', 'now')",
                    "CREATE TABLE pwned (a int)", "DROP TABLE teams"]:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql)
    assert fingerprint(pg_admin) == before


def test_timeout_cancels_the_query(engine: tuple[SQLTool, str]) -> None:
    tool, _ = engine
    slow = SQLTool(tool.url, timeout_s=0.3)
    with pytest.raises(SQLExecutionError, match="cancelled"):
        slow.query("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r")


def test_execution_error_carries_database_text(engine: tuple[SQLTool, str]) -> None:
    tool, _ = engine
    with pytest.raises(SQLExecutionError, match="nope"):
        tool.query("SELECT nope FROM teams")


# ------------------------------------------------------------------------------ gold queries

def gold_items() -> list[dict[str, Any]]:
    items = [json.loads(line) for line in (SAMPLE_DIR / "questions.dev.jsonl").read_text(encoding="utf-8").splitlines()
             if line.strip()]
    return [i for i in items if i.get("gold_sql")]


GOLD = gold_items()


def _norm(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return round(float(value), 6)
    return value


def _rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((tuple(_norm(v) for v in r.values()) for r in rows), key=repr)


def _fact_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def test_gold_corpus_present() -> None:
    assert len([i for i in GOLD if i["needs"] == ["sql"]]) == 13


@pytest.mark.postgres
@pytest.mark.parametrize("item", GOLD, ids=[i["id"] for i in GOLD])
def test_gold_sql_same_results_on_both_engines(item: dict[str, Any], sqlite_db: str, pg_readonly: str) -> None:
    lite, pg = SQLTool(sqlite_db), SQLTool(pg_readonly)
    lite.validate(item["gold_sql"])
    pg.validate(item["gold_sql"])
    lite_rows, pg_rows = lite.query(item["gold_sql"]), pg.query(item["gold_sql"])
    assert lite_rows, "a gold query returns rows"
    assert _rows(lite_rows) == _rows(pg_rows)
    if item["needs"] == ["sql"]:
        values = {_fact_text(v) for r in pg_rows for v in r.values()}
        assert set(item["answer_facts"]) <= values


def test_gold_sql_on_sqlite(sqlite_db: str) -> None:
    """Runs where no PostgreSQL server exists too."""
    tool = SQLTool(sqlite_db)
    for item in GOLD:
        rows = tool.query(item["gold_sql"])
        assert rows, item["id"]
        if item["needs"] == ["sql"]:
            assert set(item["answer_facts"]) <= {_fact_text(v) for r in rows for v in r.values()}, item["id"]


# ------------------------------------------------------------------------------------ LIMIT

def test_limit_added_and_capped() -> None:
    tool = SQLTool("sqlite:///unused.db", row_cap=50)
    assert tool.validate("SELECT * FROM expenses").endswith("LIMIT 50")
    assert tool.validate("SELECT * FROM expenses LIMIT 1000").endswith("LIMIT 50")
    assert tool.validate("SELECT * FROM expenses LIMIT 7").endswith("LIMIT 7")
    assert tool.validate("SELECT * FROM expenses LIMIT 7 OFFSET 3").endswith("LIMIT 7 OFFSET 3")
    assert tool.validate("SELECT * FROM expenses LIMIT (SELECT 100000)").endswith("LIMIT 50")
    assert tool.validate("SELECT team_id FROM teams UNION SELECT team_id FROM budgets LIMIT 999").endswith("LIMIT 50")
    pg = SQLTool("postgresql://u@localhost/x", row_cap=50)
    assert "FETCH FIRST 50 ROWS ONLY" in pg.validate("SELECT * FROM expenses FETCH FIRST 500 ROWS ONLY")
    assert pg.validate("SELECT * FROM expenses LIMIT ALL").endswith("LIMIT 50")


def test_row_cap_applies_on_execution(engine: tuple[SQLTool, str]) -> None:
    tool, _ = engine
    capped = SQLTool(tool.url, row_cap=5)
    assert len(capped.query("SELECT * FROM expenses")) == 5
    assert len(capped.query("SELECT * FROM expenses LIMIT 3")) == 3
    assert len(capped.query("SELECT expense_id FROM expenses UNION ALL SELECT ticket_id FROM tickets")) == 5


def test_repeated_column_names_are_kept(engine: tuple[SQLTool, str]) -> None:
    tool, _ = engine
    row = tool.query("SELECT t.name, s.name FROM services s JOIN teams t ON t.team_id = s.owner_team_id "
                     "WHERE s.service_id = 'payments-api'")[0]
    assert list(row) == ["name", "name_2"] and row["name"] != row["name_2"]


def test_values_are_plain(engine: tuple[SQLTool, str]) -> None:
    tool, _ = engine
    row = tool.query("SELECT amount_usd, expense_date, submitted_at FROM expenses WHERE expense_id = 'EXP-0150'")[0]
    assert isinstance(row["amount_usd"], (int, float))
    assert isinstance(row["expense_date"], str) and len(row["expense_date"]) == 10
    opened = tool.query("SELECT opened_at FROM incidents WHERE incident_id = 'INC-2001'")[0]["opened_at"]
    assert opened == "2025-06-06 23:05:00"


# ------------------------------------------------------------------------------ unavailability

def test_sqlite_missing_file_is_unavailable(tmp_path: Path) -> None:
    tool = SQLTool(f"sqlite:///{tmp_path / 'missing.db'}")
    assert tool.available() is False
    with pytest.raises(DatabaseUnavailable, match="not found"):
        tool.query("SELECT COUNT(*) FROM teams")
    assert not (tmp_path / "missing.db").exists()  # a read-only probe never creates the file


def test_sqlite_garbage_file_is_unavailable(tmp_path: Path) -> None:
    bad = tmp_path / "garbage.db"
    bad.write_bytes(b"this is not a database" * 100)
    tool = SQLTool(f"sqlite:///{bad}")
    assert tool.available() is False
    with pytest.raises(DatabaseUnavailable):
        tool.query("SELECT COUNT(*) FROM teams")


def test_postgres_closed_port_is_unavailable() -> None:
    tool = SQLTool(f"postgresql://tramita_ro@127.0.0.1:{free_port()}/novaops", timeout_s=2)
    assert tool.available() is False
    with pytest.raises(DatabaseUnavailable, match="PostgreSQL"):
        tool.query("SELECT COUNT(*) FROM teams")


def test_unsupported_url() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        SQLTool("mysql://x@localhost/db")


@pytest.mark.postgres
def test_available_on_both(engine: tuple[SQLTool, str]) -> None:
    tool, _ = engine
    assert tool.available() is True


# ----------------------------------------------------------------------------- schema helpers

def test_schema_summary_fits_and_names_every_table() -> None:
    tool = SQLTool("sqlite:///unused.db")
    text = tool.schema_summary()
    assert len(text) <= 3000
    for table in TABLES:
        assert f"\n{table}(" in text
    assert "category [meals|" in text and "employee_id→employees" in text
    small = tool.schema_summary(tables=["teams", "budgets"])
    assert "\nteams(" in small and "\nbudgets(" in small and "expenses(" not in small
    assert "'2026-Q1'..'2026-Q4'" in small  # room for the column comments
    assert len(tool.schema_summary(max_chars=1200)) <= 1200
    with pytest.raises(ValueError, match="salaries"):
        tool.schema_summary(tables=["salaries"])


@pytest.mark.parametrize(("question", "must", "must_not"), [
    ("despesas pendentes", {"expenses"}, {"budgets", "incidents"}),
    ("orçamento do time de Plataforma", {"teams", "budgets"}, {"expenses"}),
    ("quanto o time de Pagamentos gastou em despesas aprovadas?", {"expenses", "employees", "teams"}, {"budgets"}),
    ("How many SEV2 incidents were opened in Q1?", {"incidents"}, {"tickets"}),
    ("which services does the SRE team own?", {"services", "teams"}, {"expenses"}),
    ("tickets abertos sem responsável", {"tickets"}, {"incidents"}),
])
def test_link_schema(question: str, must: set[str], must_not: set[str]) -> None:
    tables = set(SQLTool("sqlite:///unused.db").link_schema(question))
    assert must <= tables
    assert not (must_not & tables)


def test_link_schema_leaves_out_weak_tables() -> None:
    """'approved' alone scores budgets a little; against a strong expenses match it is dropped."""
    tool = SQLTool("sqlite:///unused.db")
    q = "What is the total of approved expenses for people on the Payments team with expense dates in Q1 2026?"
    assert "budgets" in set(link_schema(q, relative=0.0))
    assert set(tool.link_schema(q)) == {"expenses", "employees", "teams"}


def test_join_hints_spell_out_foreign_keys() -> None:
    tool = SQLTool("sqlite:///unused.db")
    hints = tool.join_hints(["teams", "employees", "expenses"])
    assert "expenses.employee_id = employees.employee_id" in hints
    assert "employees.team_id = teams.team_id" in hints
    assert not any("budgets" in h for h in hints)
    assert tool.join_hints(["tickets"]) == []


def test_value_hints_name_the_column_that_stores_a_literal(sqlite_db: str) -> None:
    """Real database values: 'Plataforma' is teams.name (Portuguese), 'Payments' teams.name_en."""
    tool = SQLTool(sqlite_db)
    assert "teams.name = 'Plataforma'" in tool.value_hints("orçamento do time de plataforma", ["teams", "budgets"])
    assert tool.value_hints("expenses of the Payments team", ["teams"]) == ["teams.name_en = 'Payments'"]
    assert "employees.full_name = 'Larissa Teixeira'" in tool.value_hints("gestor da Larissa Teixeira?", ["employees"])
    assert tool.value_hints("gestor da Larissa Teixeira?", ["teams"]) == []  # only the linked tables
    assert tool.value_hints("quantas despesas pendentes?", ["expenses"]) == []  # enums are in the summary


def test_value_hints_name_a_project_by_its_name_but_not_a_ticket_by_its_title(sqlite_db: str) -> None:
    """Real database values: a project's name runs to three or four words and is linked; a
    ticket's or incident's title is a sentence and is not (its words would name everything)."""
    tool = SQLTool(sqlite_db)
    assert "projects.name = 'Ledger v2'" in tool.value_hints("Quem lidera o Ledger v2?", ["projects"])
    title = tool.query("SELECT title FROM tickets LIMIT 1")[0]["title"]
    assert not any(h.startswith("tickets.title") for h in tool.value_hints(f"o chamado {title}", ["tickets"]))


def test_value_index_prefers_the_longest_value() -> None:
    index = ValueIndex({("teams", "name"): ["Dados", "Plataforma de Dados"], ("t", "c"): ["ab"]})
    assert [h.value for h in index.match("o time Plataforma de Dados")] == ["Plataforma de Dados"]
    assert [h.value for h in index.match("o time de dados")] == ["Dados"]
    assert index.match("ab") == []  # shorter than MIN_VALUE_CHARS


def test_value_hints_survive_a_missing_database(tmp_path: Path) -> None:
    assert SQLTool(f"sqlite:///{tmp_path / 'absent.db'}").value_hints("time de Plataforma") == []


def test_link_schema_graph_only_word_adds_nothing() -> None:
    tool = SQLTool("sqlite:///unused.db")
    assert tool.link_schema("plantão") == TABLES  # no overlap → every table (caller's fallback)


def test_synonyms_file_errors_name_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "syn.yaml"
    bad.write_text("synonyms:\n  despesa: [expensez]\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"syn\.yaml: synonyms\.despesa: unknown table\(s\) expensez"):
        load_synonyms(bad)
    bad.write_text("synonyms: {}\nextra: 1\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"syn\.yaml: extra"):
        load_synonyms(bad)


@pytest.fixture(autouse=True)
def _no_leftover_files() -> Iterator[None]:
    """SQLTool must never create files (a read-only tool opening a missing path would)."""
    yield
    assert not Path("unused.db").exists()
