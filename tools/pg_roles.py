"""PostgreSQL connections and the SELECT-only role that question answering runs as.

The role is created lazily by the services object when no read-only URL is configured, so it lives
with the tools rather than with ingest (ingest re-uses it).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from sqlalchemy import make_url

from tools.database import DatabaseUnavailable
from tools.sql_schema import dataset_tables


def check_identifier(name: str) -> str:
    """`name` unchanged if it is a plain ASCII identifier; it is pasted into SQL text, so anything else is refused."""
    if not name.isidentifier() or not name.isascii():
        raise ValueError(f"unexpected identifier in the dataset: {name!r}")
    return name


def _libpq(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return "postgresql" + sep + rest if scheme.startswith("postgres") else url


def pg_connect(url: str) -> Any:
    """A psycopg connection from a SQLAlchemy-style URL; an unreachable server is DatabaseUnavailable."""
    import psycopg

    try:
        return psycopg.connect(_libpq(url), connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {str(exc).strip().splitlines()[0]}") from exc


def ensure_readonly_role(admin_url: str, role: str = "tramita_ro", password: str | None = None, *,
                         statement_timeout_ms: int = 5000, sample_dir: Path) -> str:
    """Create (or update) a login role that can only SELECT the NovaOps dataset tables of this
    database, and return its URL. Layers: SELECT grants on the dataset tables only (tramita's own
    tables stay invisible), `default_transaction_read_only = on` and a `statement_timeout` on the
    role. Idempotent; a given password is (re)applied, a missing one is generated.
    """
    from psycopg import errors, sql

    check_identifier(role)
    password = password or secrets.token_urlsafe(24)
    tables = dataset_tables(sample_dir / "schema.sql")
    rid = sql.Identifier(role)
    with pg_connect(admin_url) as conn:
        cur = conn.cursor()
        cur.execute("SELECT pg_advisory_xact_lock(hashtext('tramita.readonly_role'))")
        cur.execute("SELECT current_database(), current_schema()")
        database, schema = cur.fetchone()
        cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,))
        verb = "ALTER" if cur.fetchone() else "CREATE"
        try:
            cur.execute(sql.SQL(verb + " ROLE {} WITH LOGIN PASSWORD {}").format(rid, sql.Literal(password)))
        except errors.DuplicateObject:  # created concurrently by another process
            conn.rollback()
            return ensure_readonly_role(admin_url, role, password,
                                        statement_timeout_ms=statement_timeout_ms, sample_dir=sample_dir)
        cur.execute("SELECT r.rolsuper OR r.rolbypassrls OR r.rolcreaterole OR r.rolcreatedb "
                    "OR r.rolreplication, EXISTS (SELECT 1 FROM pg_auth_members m WHERE m.member = r.oid) "
                    "FROM pg_roles r WHERE r.rolname = %s", (role,))
        elevated, member = cur.fetchone()
        if elevated or member:
            raise ValueError(f"role {role!r} already exists with extra privileges or role memberships; "
                             "it cannot serve as the SELECT-only role (drop it or choose another name)")
        cur.execute(sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on").format(rid))
        cur.execute(sql.SQL("ALTER ROLE {} SET statement_timeout = {}").format(
            rid, sql.Literal(int(statement_timeout_ms))))
        cur.execute(sql.SQL("REVOKE ALL ON ALL TABLES IN SCHEMA {} FROM {}").format(sql.Identifier(schema), rid))
        cur.execute(sql.SQL("REVOKE ALL ON ALL SEQUENCES IN SCHEMA {} FROM {}").format(sql.Identifier(schema), rid))
        cur.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(database), rid))
        cur.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), rid))
        cur.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(
            sql.SQL(", ").join(sql.Identifier(schema, t) for t in tables), rid))
    url = make_url(admin_url).set(username=role, password=password)
    return url.render_as_string(hide_password=False)
