"""Process-wide resources: database engines, the registry, retrieval backends.

These are connections and caches, not conversation state (that lives in the checkpointed graph
state). They are built lazily on first use, so importing the graph costs nothing and a backend that
is down only fails the turns that need it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from tramita.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from tools.doc_store import DocStore
    from tools.graph_tool import GraphTool
    from tools.registry import Registry
    from tools.sql_tool import SQLTool


@dataclass
class Services:
    settings: Settings
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @cached_property
    def engine(self) -> Engine:
        from tools.database import writer_engine

        return writer_engine(self.settings.sql_url)

    @cached_property
    def registry(self) -> Registry:
        from tools.registry import Registry

        return Registry(self.engine, chroma_dir=self.settings.chroma_dir)

    @cached_property
    def sql_tool(self) -> SQLTool:
        from tools.sql_tool import SQLTool

        url = self.settings.pg_readonly_url or self.settings.sql_url
        if url.startswith("postgres") and not self.settings.pg_readonly_url:
            url = readonly_url(self.settings.sql_url)
        return SQLTool(url)

    @cached_property
    def graph_tool(self) -> GraphTool:
        from tools.graph_tool import GraphTool

        return GraphTool(self.settings.graph_url)

    @cached_property
    def doc_store(self) -> DocStore:
        from tools.doc_store import DocStore

        return DocStore(self.settings.chroma_dir)

    def embed_query(self, text: str) -> list[float]:
        from tools.embeddings import make_embeddings

        return list(make_embeddings().embed_query(text))


def readonly_url(admin_url: str) -> str:
    """The SELECT-only role's URL for a PostgreSQL database, created on first use. Its password is
    derived from the admin URL so every process of one deployment agrees on it (a random one
    per process would lock the others out)."""
    import hashlib
    import os

    from ingest.sql_loader import ensure_readonly_role

    password = os.environ.get("TRAMITA_SQL_READONLY_PASSWORD") or hashlib.sha256(
        ("tramita-ro:" + admin_url).encode()).hexdigest()[:32]
    return ensure_readonly_role(admin_url, password=password)


_services: dict[tuple[Any, ...], Services] = {}
_lock = threading.Lock()


def services(settings: Settings | None = None) -> Services:
    """The Services for these settings (from the environment by default), one per process."""
    settings = settings or Settings.from_env()
    key = (settings.sql_url, settings.graph_url, settings.chroma_dir, settings.pg_readonly_url)
    with _lock:
        svc = _services.get(key)
        if svc is None:
            svc = _services[key] = Services(settings)
        return svc


def reset_services() -> None:
    """Forget cached resources (tests that switch data directories)."""
    with _lock:
        _services.clear()


def _set_environment(values: Mapping[str, str | None]) -> None:
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@contextmanager
def restored_environment(names: Iterable[str]) -> Iterator[None]:
    """Put these environment variables back after a block that may change them (an eval item
    sets TRAMITA_SQL_URL for its copy), then reset the process-wide services so no engine built
    for the block's setting survives it."""
    saved = {n: os.environ.get(n) for n in names}
    try:
        yield
    finally:
        _set_environment(saved)
        reset_services()


@contextmanager
def scoped_environment(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, with None, remove) environment variables for a block and restore them, resetting the
    process-wide services on both sides so no engine of the previous setting survives."""
    with restored_environment(values):
        _set_environment(values)
        reset_services()
        yield
