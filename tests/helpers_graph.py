"""Helpers for the graph test suites: sessions on the scripted backend, database probes, and a
turn runner that executes `Session.turn` in a separate process.

The subprocess runner exists for the restart tests: a transaction must survive a process that is
killed (by the test, or by itself at a `tramita.base.faults` crash point) and be finished by a fresh
process on the same thread. Run as a script it prints one JSON line per turn and, with `--hold`,
a final `HOLDING` line after which it waits to be killed.

    python tests/helpers_graph.py --thread T [--user E006] [--hold] "aprova a EXP-0264" "sim"
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tramita.base.settings import Settings

REPO = Path(__file__).resolve().parent.parent
TODAY = "2026-05-15"
HOLDING = "HOLDING"

if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))


# ----------------------------------------------------------------------------- data directories
def prepare_data_dir(pristine: Path, workdir: Path) -> Path:
    """A fresh SQLite copy of the dataset in `workdir` (graph and documents stay shared, read-only)."""
    from ingest.sql_loader import copy_sqlite

    workdir.mkdir(parents=True, exist_ok=True)
    db = workdir / "novaops.db"
    copy_sqlite(pristine / "novaops.db", db)
    return db


def copy_settings(pristine: Path, workdir: Path, db: Path, *, llm_profile: str = "scripted") -> Settings:
    """Explicit `Settings` on the SQLite copy `db`, graph and documents from `pristine` (read-only),
    checkpoints and everything else written under `workdir`."""
    from tramita.base.settings import Settings

    return Settings(data_dir=workdir, sql_url=f"sqlite:///{db}", graph_url=f"ladybug://{pristine / 'novaops.lbug'}",
                    chroma_dir=str(pristine / "chroma"), checkpoint_url=f"sqlite:///{workdir / 'checkpoints.db'}",
                    llm_profile=llm_profile)


def data_env(pristine: Path, workdir: Path, *, checkpoint_url: str | None = None,
             backend: str = "scripted", user: str = "E006") -> dict[str, str]:
    """TRAMITA_* variables that point every component at `workdir`'s SQLite copy."""
    return {
        "TRAMITA_DATA_DIR": str(workdir),
        "TRAMITA_SQL_URL": f"sqlite:///{workdir / 'novaops.db'}",
        "TRAMITA_GRAPH_URL": f"ladybug://{pristine / 'novaops.lbug'}",
        "TRAMITA_CHROMA_DIR": str(pristine / "chroma"),
        "TRAMITA_CHECKPOINT_URL": checkpoint_url or f"sqlite:///{workdir / 'checkpoints.db'}",
        "TRAMITA_TODAY": TODAY,
        "TRAMITA_LLM": backend,
        "TRAMITA_USER": user,
    }


# ----------------------------------------------------------------------------- in-process sessions
@contextmanager
def scripted_session(user: str = "E006", today: str = TODAY, **context: Any) -> Iterator[Any]:
    """A Session on the scripted backend, on the given `services=` (e.g. the `novaops_services`
    fixture), else on the deployment's default ones (the `novaops` fixture points those at a fresh
    copy)."""
    from graph.context import Context
    from graph.session import open_session

    ctx = Context(user_id=user, today=today, llm_backend=context.pop("llm_backend", "scripted"), **context)
    with open_session(ctx) as session:
        yield session


def drive(session: Any, thread: str, texts: list[str]) -> list[Any]:
    """Run each text as one turn on `thread`; returns the TurnResults."""
    return [session.turn(thread, t) for t in texts]


# ----------------------------------------------------------------------------- database probes
def engine_for(db: Path) -> Any:
    from sqlalchemy import create_engine

    return create_engine(f"sqlite:///{db}")


def scalar(db: Path, sql: str, **params: Any) -> Any:
    from sqlalchemy import text

    engine = engine_for(db)
    try:
        with engine.connect() as conn:
            return conn.execute(text(sql), params).scalar()
    finally:
        engine.dispose()


def expense_status(db: Path, expense_id: str) -> str:
    return str(scalar(db, "SELECT status FROM expenses WHERE expense_id = :e", e=expense_id))


def audit_rows(db: Path, target_id: str | None = None) -> int:
    if target_id is None:
        return int(scalar(db, "SELECT COUNT(*) FROM audit_log"))
    return int(scalar(db, "SELECT COUNT(*) FROM audit_log WHERE target_id = :t", t=target_id))


def db_snapshot(db: Path) -> dict[str, dict[str, tuple[Any, ...]]]:
    from tramita.lab.evaluation.dbdiff import snapshot

    engine = engine_for(db)
    try:
        return snapshot(engine)
    finally:
        engine.dispose()


def db_changes(db: Path, before: dict[str, dict[str, tuple[Any, ...]]]) -> dict[str, set[str]]:
    """{table: changed keys} since `before` (dataset tables only)."""
    from tramita.lab.evaluation.dbdiff import diff

    return diff(before, db_snapshot(db))


# ----------------------------------------------------------------------------- subprocess turns
@dataclass
class ProcessRun:
    returncode: int
    turns: list[dict[str, Any]] = field(default_factory=list)
    stderr: str = ""

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL


def _command(thread: str, texts: list[str], user: str, hold: bool) -> list[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--thread", thread, "--user", user]
    return [*cmd, "--hold", *texts] if hold else [*cmd, *texts]


def _parse(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def run_turns(env: Mapping[str, str], thread: str, texts: list[str], *, user: str = "E006",
              crash_at: str | None = None, timeout: float = 300) -> ProcessRun:
    """Run the turns in a fresh Python process; `crash_at` arms a tramita.base.faults crash point."""
    full = {**os.environ, **env}
    full.pop("TRAMITA_CRASH_AT", None)
    if crash_at:
        full["TRAMITA_CRASH_AT"] = crash_at
    proc = subprocess.run(_command(thread, texts, user, hold=False), env=full, cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, check=False)
    return ProcessRun(proc.returncode, _parse(proc.stdout), proc.stderr[-4000:])


def run_turns_then_kill(env: Mapping[str, str], thread: str, texts: list[str], *, user: str = "E006",
                        timeout: float = 300) -> ProcessRun:
    """Run the turns in a fresh process, wait until it reports them done, then SIGKILL it."""
    full = {**os.environ, **env}
    full.pop("TRAMITA_CRASH_AT", None)
    proc = subprocess.Popen(_command(thread, texts, user, hold=True), env=full, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        for line in proc.stdout:  # blocks per line; the child flushes each one
            lines.append(line)
            if line.strip() == HOLDING or time.monotonic() > deadline:
                break
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return ProcessRun(proc.returncode, _parse("".join(lines)), (err or "")[-4000:])


def main(argv: list[str] | None = None) -> int:
    """Script entry point (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--thread", required=True)
    parser.add_argument("--user", default="E006")
    parser.add_argument("--hold", action="store_true", help="after the turns, wait to be killed")
    parser.add_argument("texts", nargs="*")
    args = parser.parse_args(argv)
    from graph.context import Context
    from graph.session import open_session

    ctx = Context(user_id=args.user, today=os.environ.get("TRAMITA_TODAY", TODAY))
    with open_session(ctx) as session:
        for text in args.texts:
            r = session.turn(args.thread, text)
            print(json.dumps({"user": text, "answer": r.answer, "status": r.status, "trace": r.trace,
                              "transaction": r.transaction, "last_transaction": r.last_transaction},
                             ensure_ascii=False, default=str), flush=True)
        if args.hold:
            print(HOLDING, flush=True)
            while True:  # the test kills us here, mid-conversation
                time.sleep(3600)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
