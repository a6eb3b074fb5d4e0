"""Checkpointer factory: SqliteSaver by default (a file in the data directory), PostgresSaver when
the URL is a PostgreSQL one. The same graph runs on either; only configuration changes."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver


@contextmanager
def open_checkpointer(url: str) -> Iterator[BaseCheckpointSaver[Any]]:
    """Yield a ready checkpointer for `url` and close its connection afterwards."""
    if url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg import Connection
        from psycopg.rows import dict_row

        conninfo = url.replace("postgresql+psycopg://", "postgresql://")
        with Connection.connect(conninfo, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
            saver = PostgresSaver(conn)  # type: ignore[arg-type]
            _setup_with_retry(saver)
            yield saver
        return
    with _sqlite_saver(url) as lite:
        yield lite


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


def _setup_with_retry(saver: Any, attempts: int = 5) -> None:
    """PostgresSaver.setup() from two processes at once can collide on CREATE TABLE/INDEX; the
    loser simply retries once the winner has committed its migrations."""
    import time

    from psycopg import errors

    for i in range(attempts):
        try:
            saver.setup()
            return
        except (errors.DuplicateTable, errors.UniqueViolation, errors.DuplicateObject):
            if i == attempts - 1:
                raise
            time.sleep(0.2 * (i + 1))
