"""`tramita demo` end to end on the embedded stores (scripted model: the demo's job is to show the
three backends and a confirmed, audited write; the real model's answers are tested elsewhere)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tramita.shell.cli import main


def test_demo_shows_every_backend_and_one_audited_write(novaops: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--profile", "scripted", "demo"]) == 0
    out = capsys.readouterr().out
    for label in ("(SQL)", "(graph)", "(documents)", "(transaction)"):
        assert label in out
    assert "executed: approve_expense" in out
    assert "audit_log rows: 11 → 12" in out
    assert "write confirmed and audited" in out
    # the demo works on its own copy: the chat's database is untouched
    import sqlite3

    with sqlite3.connect(novaops) as conn:
        assert conn.execute("SELECT status FROM expenses WHERE expense_id = 'EXP-0264'").fetchone()[0] == "pending"
