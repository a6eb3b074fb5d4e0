"""Deployment configuration: where every store is, which dataset, which LLM profile.

Read once from the environment at start-up (`Settings.from_env`) or built in code (`Settings.embedded`)
and handed to a `Services`; nothing rewrites it at run time. Per-conversation knobs (user, language,
"today") live in `graph.context.Context` so that LangGraph Studio can show and edit them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from tramita.base.paths import SAMPLE_DIR, data_dir


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
    dataset_dir: Path = SAMPLE_DIR
    graph_patterns: Path | None = None  # named graph patterns; None: <dataset_dir>/graph_patterns.yaml
    semantic_model: Path | None = None  # the SQL semantic layer's model; None: <dataset_dir>/semantic_model.yaml
    llm_profile: str = "local"

    @classmethod
    def embedded(cls, base: Path, *, dataset_dir: Path = SAMPLE_DIR, llm_profile: str = "local") -> Settings:
        """The embedded defaults (SQLite, LadybugDB, Chroma, SqliteSaver) under one directory."""
        return cls(data_dir=base, sql_url=f"sqlite:///{base / 'novaops.db'}", graph_url=f"ladybug://{base / 'novaops.lbug'}",
                   chroma_dir=str(base / "chroma"), checkpoint_url=f"sqlite:///{base / 'checkpoints.db'}",
                   dataset_dir=dataset_dir, llm_profile=llm_profile)

    @classmethod
    def from_env(cls) -> Settings:
        """The embedded defaults in `TRAMITA_DATA_DIR`, each replaced by its URL variable when set."""
        base = data_dir()
        emb = cls.embedded(base, dataset_dir=Path(_env("TRAMITA_DATASET_DIR", str(SAMPLE_DIR))),
                           llm_profile=_env("TRAMITA_LLM", "local"))
        return replace(
            emb,
            sql_url=_env("TRAMITA_SQL_URL", emb.sql_url),
            graph_url=_env("TRAMITA_GRAPH_URL", emb.graph_url),
            chroma_dir=_env("TRAMITA_CHROMA_DIR", emb.chroma_dir),
            checkpoint_url=_env("TRAMITA_CHECKPOINT_URL", emb.checkpoint_url),
            # PostgreSQL only: a SELECT-only role for SQLTool; defaults to sql_url (then the
            # READ ONLY transaction is the remaining guard, and `tramita doctor` warns).
            pg_readonly_url=_env("TRAMITA_SQL_READONLY_URL", ""),
            graph_patterns=Path(patterns) if (patterns := os.environ.get("TRAMITA_GRAPH_PATTERNS")) else None,
            semantic_model=Path(model) if (model := os.environ.get("TRAMITA_SEMANTIC_MODEL")) else None,
        )

    def graph_patterns_file(self) -> Path:
        """The named graph patterns (tools.graph_patterns): `graph_patterns`, else the dataset's own
        `graph_patterns.yaml`, because the traversals a company asks about belong with its data.
        """
        return self.graph_patterns or self.dataset_dir / "graph_patterns.yaml"

    def semantic_model_file(self) -> Path:
        """The semantic model of SQL questions (tools.semantic_model): `semantic_model`, else the
        dataset's own `semantic_model.yaml`, because what its tables mean belongs with its data.
        """
        return self.semantic_model or self.dataset_dir / "semantic_model.yaml"

    def with_profile(self, profile: str | None) -> Settings:
        """These settings with another LLM profile (the CLI's --profile)."""
        return replace(self, llm_profile=profile) if profile else self
