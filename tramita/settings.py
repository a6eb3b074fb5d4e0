"""Process-wide configuration read from the environment.

Only *where things are* lives here (URLs, directories); per-conversation knobs (user, language,
"today", profiles) live in `graph.context.Context` so that LangGraph Studio can show and edit them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from tramita.paths import data_dir


def _env(name: str, default: str) -> str:
    value = os.environ.get(name)
    return value if value else default


@dataclass(frozen=True)
class Settings:
    """Locations of every store. Embedded defaults sit in the data directory; URLs select servers."""

    data_dir: Path = field(default_factory=data_dir)
    sql_url: str = ""
    graph_url: str = ""
    chroma_dir: str = ""
    checkpoint_url: str = ""
    pg_readonly_url: str = ""

    @classmethod
    def from_env(cls) -> Settings:
        base = data_dir()
        return cls(
            data_dir=base,
            sql_url=_env("TRAMITA_SQL_URL", f"sqlite:///{base / 'novaops.db'}"),
            graph_url=_env("TRAMITA_GRAPH_URL", f"ladybug://{base / 'novaops.lbug'}"),
            chroma_dir=_env("TRAMITA_CHROMA_DIR", str(base / "chroma")),
            checkpoint_url=_env("TRAMITA_CHECKPOINT_URL", f"sqlite:///{base / 'checkpoints.db'}"),
            # PostgreSQL only: a SELECT-only role for SQLTool; defaults to sql_url (then the
            # READ ONLY transaction is the remaining guard, and `tramita doctor` warns).
            pg_readonly_url=_env("TRAMITA_SQL_READONLY_URL", ""),
        )
