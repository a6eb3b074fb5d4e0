"""Retrieval backends: the one place a source plugs in.

Each entry is a `RetrievalBackend` (see `tools.backends.base`). The planner's choices, retrieval's
parallel jobs, the citation tags and synthesis's context block all come from this table.
"""

from __future__ import annotations

from tools.backends.api import ApiBackend
from tools.backends.base import BackendCall, QueryRun, RetrievalBackend, generate_validate_repair
from tools.backends.docs import DocsBackend
from tools.backends.graph import GraphBackend
from tools.backends.sql import SQLBackend

BACKENDS: dict[str, RetrievalBackend] = {b.name: b for b in (
    DocsBackend(),
    SQLBackend(),
    GraphBackend(),
    ApiBackend(),
)}

__all__ = ["BACKENDS", "BackendCall", "QueryRun", "RetrievalBackend", "generate_validate_repair"]
