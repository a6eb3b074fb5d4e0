"""A transaction survives the death of the process that holds it.

Turns run in child processes (tests/helpers_graph.py as a script) on the scripted backend, with the
checkpointer in a file (SqliteSaver) or in PostgreSQL (PostgresSaver) and the business data in a
fresh SQLite copy. A process is killed with SIGKILL — by the test after turn 1, or by itself at a
`tramita.base.faults` crash point — and a fresh process finishes the conversation on the same thread.
The database must then show exactly what happened: one write and one audit row, never two.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_graph import (
    ProcessRun,
    audit_rows,
    data_env,
    expense_status,
    prepare_data_dir,
    run_turns,
    run_turns_then_kill,
    scalar,
)

from tramita.base.faults import POINTS

pytestmark = pytest.mark.slow

START_AUDIT_ROWS = 11  # audit_log rows in the pristine dataset


@pytest.fixture(autouse=True)
def _shared_models(pristine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Child processes inherit this: they load the embedding model from the shared place."""
    monkeypatch.setenv("TRAMITA_MODELS_DIR", os.environ.get("TRAMITA_MODELS_DIR") or str(pristine / "models"))


@pytest.fixture
def workdir(pristine: Path, tmp_path: Path) -> Path:
    prepare_data_dir(pristine, tmp_path / "data")
    return tmp_path / "data"


def sqlite_env(pristine: Path, workdir: Path) -> dict[str, str]:
    return data_env(pristine, workdir)


def ok(run: ProcessRun) -> ProcessRun:
    assert run.returncode == 0, run.stderr
    return run


def approved_once(db: Path, approver: str = "E006") -> None:
    """EXP-0264 approved by `approver`, with exactly one new audit row and one idempotency record."""
    assert expense_status(db, "EXP-0264") == "approved"
    assert scalar(db, "SELECT approver_id FROM expenses WHERE expense_id = 'EXP-0264'") == approver
    assert audit_rows(db) == START_AUDIT_ROWS + 1
    assert audit_rows(db, "EXP-0264") == 1
    row = scalar(db, "SELECT tool_name || '|' || actor_id || '|' || target_table FROM audit_log WHERE target_id = 'EXP-0264'")
    assert row == f"approve_expense|{approver}|expenses"
    assert scalar(db, "SELECT COUNT(*) FROM tool_executions WHERE target_id = 'EXP-0264'") == 1


def untouched(db: Path) -> None:
    assert expense_status(db, "EXP-0264") == "pending"
    assert audit_rows(db) == START_AUDIT_ROWS


def executed(turn: dict[str, Any]) -> str | None:
    return turn["trace"].get("executed_tool")


def test_fault_points_are_the_documented_ones() -> None:
    assert set(POINTS) == {"before_extraction", "after_summary", "after_business_write", "after_commit"}


def test_process_killed_after_turn_one_fresh_process_finishes(pristine: Path, workdir: Path) -> None:
    env = sqlite_env(pristine, workdir)
    db = workdir / "novaops.db"
    thread = f"restart-{uuid.uuid4().hex[:8]}"
    first = run_turns_then_kill(env, thread, ["quero aprovar uma despesa"])
    assert first.killed, (first.returncode, first.stderr)
    assert [t["status"] for t in first.turns] == ["collecting"]
    assert first.turns[0]["transaction"]["tool"] == "approve_expense"
    untouched(db)

    second = ok(run_turns(env, thread, ["EXP-0264", "sim"]))
    assert [t["status"] for t in second.turns] == ["awaiting_confirmation", "idle"]
    assert second.turns[0]["transaction"]["id"] == first.turns[0]["transaction"]["id"]  # same transaction
    assert [executed(t) for t in second.turns] == [None, "approve_expense"]
    assert second.turns[1]["last_transaction"]["outcome"] == "executed"
    approved_once(db)


def test_killed_inside_the_write_rolls_back_and_the_retry_executes_once(pristine: Path, workdir: Path) -> None:
    """after_business_write: the expense row was updated but the audit row not yet written."""
    env = sqlite_env(pristine, workdir)
    db = workdir / "novaops.db"
    thread = f"abw-{uuid.uuid4().hex[:8]}"
    crashed = run_turns(env, thread, ["aprova a EXP-0264", "sim"], crash_at="after_business_write")
    assert crashed.killed, (crashed.returncode, crashed.stderr)
    assert [t["status"] for t in crashed.turns] == ["awaiting_confirmation"]  # died during "sim"
    untouched(db)  # the whole database transaction was rolled back
    assert scalar(db, "SELECT COUNT(*) FROM tool_executions") == 0

    retry = ok(run_turns(env, thread, ["sim", "sim"]))
    assert [executed(t) for t in retry.turns] == ["approve_expense", None]  # once; the 2nd "sim" finds nothing
    assert retry.turns[0]["status"] == "idle" and "EXP-0264" in retry.turns[0]["answer"]
    approved_once(db)


def _killed_after_commit_then_retried(env: dict[str, str], db: Path) -> None:
    thread = f"ac-{uuid.uuid4().hex[:8]}"
    crashed = run_turns(env, thread, ["aprova a EXP-0264", "sim"], crash_at="after_commit")
    assert crashed.killed, (crashed.returncode, crashed.stderr)
    assert [t["status"] for t in crashed.turns] == ["awaiting_confirmation"]
    approved_once(db)  # durable before the kill; the reply was never sent

    retry = ok(run_turns(env, thread, ["sim", "sim"]))
    first = retry.turns[0]
    # the checkpoint still said "awaiting": the retried yes replays the stored result
    assert executed(first) == "approve_expense" and first["status"] == "idle"
    assert first["last_transaction"]["outcome"] == "executed"
    assert first["last_transaction"]["target_id"] == "EXP-0264"
    # ...and tells the truth: done, not "could not complete: expense is not pending"
    assert "EXP-0264" in first["answer"] and "aprovada" in first["answer"].lower(), first["answer"]
    assert "Não consegui" not in first["answer"], first["answer"]
    assert executed(retry.turns[1]) is None
    approved_once(db)  # still exactly one write and one audit row


def test_killed_after_commit_retry_replays_without_a_second_write(pristine: Path, workdir: Path) -> None:
    _killed_after_commit_then_retried(sqlite_env(pristine, workdir), workdir / "novaops.db")


@pytest.mark.postgres
def test_killed_after_commit_with_postgres_checkpoints(pristine: Path, workdir: Path, pg_database: str) -> None:
    """Same as above with PostgresSaver holding the thread (the business data stays in SQLite)."""
    env = data_env(pristine, workdir, checkpoint_url=pg_database)
    _killed_after_commit_then_retried(env, workdir / "novaops.db")
    import psycopg

    with psycopg.connect(pg_database) as conn:  # the thread really lives in PostgreSQL
        threads = conn.execute("SELECT COUNT(DISTINCT thread_id) FROM checkpoints").fetchone()
    assert threads is not None and threads[0] == 1
    assert not (workdir / "checkpoints.db").exists()


def test_killed_before_the_summary_was_shown_nothing_can_be_confirmed(pristine: Path, workdir: Path) -> None:
    """before_extraction / after_summary: the user never saw a summary, so a later 'sim' executes
    nothing; asking again gives the summary and its 'sim' executes exactly once."""
    env = sqlite_env(pristine, workdir)
    db = workdir / "novaops.db"
    thread = f"sum-{uuid.uuid4().hex[:8]}"
    for point in ("before_extraction", "after_summary"):
        crashed = run_turns(env, thread, ["aprova a EXP-0264"], crash_at=point)
        assert crashed.killed, (point, crashed.returncode, crashed.stderr)
        assert crashed.turns == []
        untouched(db)

    fresh = ok(run_turns(env, thread, ["sim", "aprova a EXP-0264", "sim"]))
    assert [executed(t) for t in fresh.turns] == [None, None, "approve_expense"]
    assert [t["status"] for t in fresh.turns] == ["idle", "awaiting_confirmation", "idle"]
    approved_once(db)
