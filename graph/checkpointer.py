"""The one checkpointer factory: SqliteSaver by default (a file in the data directory), PostgresSaver
when the URL is a PostgreSQL one. The same graph runs on either; only configuration changes.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver


@contextmanager
def open_checkpointer(url: str, pool_size: int = 4) -> Iterator[BaseCheckpointSaver[Any]]:
    """Yield a ready checkpointer for `url` and close its connections afterwards.

    PostgreSQL runs on a connection pool that checks each connection before use, so a server
    survives a database restart: the turn in flight fails with a clear message and the next one
    reconnects. Processes starting together take an advisory lock around `setup()`.
    """
    if url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        with _postgres_saver(url, pool_size) as saver:
            yield saver
        return
    with _sqlite_saver(url) as lite:
        yield lite


@contextmanager
def _postgres_saver(url: str, pool_size: int) -> Iterator[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    conninfo = url.replace("postgresql+psycopg://", "postgresql://").replace("postgres://", "postgresql://", 1)
    pool: ConnectionPool[Any] = ConnectionPool(
        conninfo, min_size=1, max_size=pool_size, open=False, timeout=10, check=ConnectionPool.check_connection,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row, "connect_timeout": 5})
    pool.open(wait=True, timeout=30)
    try:
        saver = PostgresSaver(pool)  # the pool is accepted at run time
        with pool.connection() as lock:
            # poll, never block: a waiting statement would stall the other process's
            # CREATE INDEX CONCURRENTLY (it waits for every open transaction): a deadlock
            while not lock.execute("SELECT pg_try_advisory_lock(hashtext('tramita.checkpointer.setup')) AS ok"
                                   ).fetchone()["ok"]:  # dict_row rows
                time.sleep(0.2)
            try:
                saver.setup()
            finally:
                lock.execute("SELECT pg_advisory_unlock(hashtext('tramita.checkpointer.setup'))")
        yield saver
    finally:
        pool.close()


@contextmanager
def _sqlite_saver(url: str) -> Iterator[BaseCheckpointSaver[Any]]:
    path = url.removeprefix("sqlite:///")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    from langgraph.checkpoint.sqlite import SqliteSaver

    lite = sqlite3.connect(path, check_same_thread=False, timeout=30)
    lite.execute("PRAGMA journal_mode=WAL")
    try:
        saver = SqliteSaver(lite)
        saver.setup()
        yield saver
    finally:
        lite.close()
