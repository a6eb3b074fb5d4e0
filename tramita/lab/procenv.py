"""The environment of a child process (`tramita serve`, the bench's local probe) that should run
with given `Settings`.

A child reads its configuration once, at start-up (`Settings.from_env`), so the parent hands the
settings over as the child's own environment (`Popen(env=...)`); the parent's environment is never
rewritten.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from tramita.base.settings import Settings


def settings_env(settings: Settings) -> dict[str, str]:
    """The TRAMITA_* variables that make `Settings.from_env()` return `settings`' stores and profile
    (an empty value means: unset, take the default).
    """
    return {"TRAMITA_DATA_DIR": str(settings.data_dir), "TRAMITA_SQL_URL": settings.sql_url,
            "TRAMITA_GRAPH_URL": settings.graph_url, "TRAMITA_CHROMA_DIR": str(settings.chroma_dir),
            "TRAMITA_CHECKPOINT_URL": settings.checkpoint_url, "TRAMITA_SQL_READONLY_URL": settings.pg_readonly_url,
            "TRAMITA_DATASET_DIR": str(settings.dataset_dir), "TRAMITA_LLM": settings.llm_profile,
            "TRAMITA_GRAPH_PATTERNS": str(settings.graph_patterns or ""),
            "TRAMITA_SEMANTIC_MODEL": str(settings.semantic_model or "")}


def child_env(settings: Settings, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with `settings` (and `extra`) laid over it, for a child process."""
    env = {**os.environ, **settings_env(settings), **(extra or {})}
    return {k: v for k, v in env.items() if v != ""}
