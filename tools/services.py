"""The services object: database engines, the registry and the retrieval backends of one deployment.

These are connections and caches, not conversation state (that lives in the checkpointed graph
state). A `Services` is built from `Settings` and handed to the graph in its `Context`; its members
are built lazily on first use, so importing the graph costs nothing and a backend that is down only
fails the turns that need it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from tramita.base.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from tools.doc_store import DocStore
    from tools.graph_tool import GraphTool
    from tools.registry import Registry
    from tools.sql_tool import SQLTool


@dataclass
class Services:
    """One deployment's engines, registry and retrieval backends; each member is built on first use."""

    settings: Settings
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @cached_property
    def engine(self) -> Engine:
        """The writer engine on the business database: handlers write through it, the registry lives in it."""
        from tools.database import writer_engine

        return writer_engine(self.settings.sql_url)

    @cached_property
    def registry(self) -> Registry:
        """The tool registry, in the business database, with its vectors under the Chroma directory."""
        from tools.registry import Registry

        return Registry(self.engine, chroma_dir=self.settings.chroma_dir)

    @cached_property
    def sql_tool(self) -> SQLTool:
        """Read-only SQL for questions; on PostgreSQL with no read-only URL configured, as the SELECT-only role."""
        from tools.sql_tool import SQLTool

        url = self.settings.pg_readonly_url or self.settings.sql_url
        if url.startswith("postgres") and not self.settings.pg_readonly_url:
            url = readonly_url(self.settings.sql_url, self.settings.dataset_dir)
        return SQLTool(url, sample_dir=self.settings.dataset_dir)

    @cached_property
    def graph_tool(self) -> GraphTool:
        """The property graph, for questions answered with Cypher."""
        from tools.graph_tool import GraphTool

        return GraphTool(self.settings.graph_url, sample_dir=self.settings.dataset_dir)

    @cached_property
    def doc_store(self) -> DocStore:
        """The company documents' chunks in Chroma, for questions answered from documents."""
        from tools.doc_store import DocStore

        return DocStore(self.settings.chroma_dir)

    def embed_query(self, text: str) -> list[float]:
        """`text` embedded with the default embedding model (the API backend ranks its operations by it)."""
        from tools.embeddings import make_embeddings

        return list(make_embeddings().embed_query(text))


def readonly_url(admin_url: str, dataset_dir: Path) -> str:
    """The SELECT-only role's URL for a PostgreSQL database, created on first use. Its password is
    derived from the admin URL so every process of one deployment agrees on it (a random one
    per process would lock the others out).
    """
    import hashlib
    import os

    from tools.pg_roles import ensure_readonly_role

    password = os.environ.get("TRAMITA_SQL_READONLY_PASSWORD") or hashlib.sha256(
        ("tramita-ro:" + admin_url).encode()).hexdigest()[:32]
    return ensure_readonly_role(admin_url, password=password, sample_dir=dataset_dir)


def default_services() -> Services:
    """The services of the deployment's configuration (`Settings.from_env`), one per distinct setting.

    Only callers that pass no services get these: `langgraph dev` and Studio, whose runs carry a
    JSON context, and tests that point the environment at a fresh copy. The CLI, the server, the
    evals, the bench and the reliability run build their own `Services` and pass them in the
    `Context`, so none of them switches backends by rewriting the environment.
    """
    return _for_settings(Settings.from_env())


@lru_cache(maxsize=8)
def _for_settings(settings: Settings) -> Services:
    return Services(settings)


def reset_services() -> None:
    """Forget the default services (tests that replace a store's files under the same path)."""
    _for_settings.cache_clear()
