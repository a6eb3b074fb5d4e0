"""SQLAlchemy engines for the business database (SQLite by default, PostgreSQL by URL).

Business writes go only through the tool handlers, on the writer engine made here. Read-only
question answering uses `tools.sql_tool.SQLTool`, which opens its own read-only connection.
"""

from __future__ import annotations

import sqlite3
from functools import lru_cache
from pathlib import Path

from sqlalchemy import Engine, create_engine, event


class DatabaseUnavailable(RuntimeError):
    """The SQL database cannot be reached; callers turn this into a clear message for the user."""


def normalize_url(url: str) -> str:
    """Accept plain `postgresql://` URLs (psycopg 3 is the driver we ship)."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    return url


def sqlite_path(url: str) -> Path | None:
    """The file path of a `sqlite:///` URL, or None for other databases."""
    if url.startswith("sqlite:///"):
        return Path(url[len("sqlite:///") :])
    return None


@lru_cache(maxsize=16)
def writer_engine(url: str) -> Engine:
    """One pooled engine per URL and process. SQLite gets foreign keys and a busy timeout so
    that two processes sharing the file (CLI + `langgraph dev`) wait instead of failing.
    """
    url = normalize_url(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 15, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: sqlite3.Connection, _record: object) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys = ON")
            cur.execute("PRAGMA busy_timeout = 15000")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5,
                         connect_args={"connect_timeout": 5})
