"""`tramita demo`: a scripted conversation that shows every part working on the embedded defaults.

One answer from each backend (SQL, graph, documents), then a full transaction — tool chosen by
embedding similarity, the id collected in the next turn, a summary, an explicit "sim", and the
write. It runs on a fresh copy of the SQL database in the data directory's `demo/` folder, so it can
be re-run and it never touches the database the chat uses.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from rich.console import Console
from sqlalchemy import create_engine, text

from graph.context import Context
from tramita.base.settings import Settings

SCRIPT: list[tuple[str, str]] = [
    ("SQL", "Quantas despesas estão pendentes de aprovação neste momento?"),
    ("graph", "Quem está de plantão como primário no payments-api na semana 2026-W20?"),
    ("documents", "Qual o limite de reembolso por pedido para refeições?"),
    ("API", "Qual é o status atual do api-gateway?"),  # the sample API, started below (tools/sample_api.py)
    ("transaction", "quero aprovar uma despesa"),
    ("transaction", "EXP-0264"),
    ("transaction", "sim"),
]


def _rows(url: str) -> dict[str, Any]:
    eng = create_engine(url)
    with eng.connect() as conn:
        exp = conn.execute(text("SELECT expense_id, status, approver_id, decided_at FROM expenses WHERE expense_id = 'EXP-0264'")).first()
        audits = conn.execute(text("SELECT COUNT(*) FROM audit_log")).scalar_one()
        last = conn.execute(text("SELECT audit_id, actor_id, tool_name, target_id, arguments_json FROM audit_log ORDER BY audit_id DESC LIMIT 1")).first()
    eng.dispose()
    return {"expense": tuple(exp) if exp else None, "audit_rows": audits, "last_audit": tuple(last) if last else None}


def run_demo(console: Console, user: str = "E006") -> int:
    """Run SCRIPT as `user` on a fresh database copy; 0 only if the approval was written and audited once."""
    from graph.session import open_session
    from ingest.sql_loader import copy_sqlite
    from tools.database import sqlite_path
    from tramita.shell.render import print_turn

    base = Settings.from_env()
    src = sqlite_path(base.sql_url)
    if src is None or not src.exists():
        console.print("[red]The demo runs on the embedded SQLite database: run `tramita ingest` first.[/]")
        return 2
    demo_dir = base.data_dir / "demo"
    demo_dir.mkdir(exist_ok=True)
    demo_db = demo_dir / "novaops-demo.db"
    # a pristine copy: load the sample into a fresh file (the main DB may hold earlier writes)
    from ingest.sql_loader import load_sql

    tmp = demo_dir / "pristine.db"
    load_sql(f"sqlite:///{tmp}", progress=False)
    copy_sqlite(tmp, demo_db)
    settings = dataclasses.replace(base, sql_url=f"sqlite:///{demo_db}",
                                   checkpoint_url=f"sqlite:///{demo_dir / 'checkpoints.db'}")
    # the catalog lives in the SQL database too: sync it into the copy (vectors already in Chroma)
    from tools.database import writer_engine
    from tools.registry import Registry

    Registry(writer_engine(settings.sql_url), chroma_dir=settings.chroma_dir).sync()
    import os

    from tools.services import Services

    ctx = Context(user_id=user, today=os.environ.get("TRAMITA_TODAY") or "2026-05-15", services=Services(settings))
    console.rule(f"tramita demo — user {user}, today {ctx.today}, LLM backend {ctx.llm_backend}")
    before = _rows(settings.sql_url)
    thread = f"demo-{uuid.uuid4().hex[:8]}"
    from tools.sample_api import start_sample_api

    with start_sample_api(), open_session(ctx) as session:
        for label, message in SCRIPT:
            console.print(f"\n[bold]({label})[/]")
            print_turn(console, message, session.turn(thread, message))
    after = _rows(settings.sql_url)
    console.rule("database effect of the confirmed write")
    console.print(f"expenses EXP-0264: {before['expense']} → {after['expense']}")
    console.print(f"audit_log rows: {before['audit_rows']} → {after['audit_rows']}; newest: {after['last_audit']}")
    ok = after["audit_rows"] == before["audit_rows"] + 1 and after["expense"] and after["expense"][1] == "approved"
    console.print("[green]write confirmed and audited[/]" if ok else "[red]the write did not happen as expected[/]")
    return 0 if ok else 1
