"""MCP tools in the registry: import from a real stdio server, govern, confirm, execute once, audit.

The server is tests/mcp_server_fixture.py (FastMCP over stdio, started by langchain-mcp-adapters
exactly as `tramita tools import-mcp` starts one); its write tool appends to a SQLite notebook the
test reads directly, so "exactly once" is counted at the source.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers_graph import copy_settings, scalar

from tools.mcp_import import import_mcp, load_bindings, registry_name
from tools.services import Services

REPO = Path(__file__).resolve().parent.parent
WRITE = registry_name("notes", "add_note")
READ = registry_name("notes", "list_notes")
START = "quero adicionar uma nota no caderno de notas"


def _config(tmp_path: Path, notes: Path, variant: int = 1) -> Path:
    server: dict[str, Any] = {
        "command": sys.executable, "args": ["tests/mcp_server_fixture.py", "--db", str(notes), "--variant", str(variant)],
        "cwd": str(REPO), "timeout_seconds": 60, "group": "notebook",
        "tools": {"add_note": {"short_description": "Adicionar nota ao caderno",
                               "examples": [START, "anota no caderno de notas", "add a note to the notebook"]}},
    }
    path = tmp_path / f"mcp-{variant}.yaml"
    path.write_text(yaml.safe_dump({"servers": {"notes": server}}), encoding="utf-8")
    return path


@pytest.fixture
def services(novaops: Path, pristine: Path, tmp_path: Path) -> Services:
    """Services on the test's database copy with a private copy of the Chroma store (the import
    writes tool vectors, and the pristine store is shared by the whole session)."""
    chroma = tmp_path / "chroma-own"
    shutil.copytree(pristine / "chroma", chroma)
    return Services(replace(copy_settings(pristine, tmp_path, novaops), chroma_dir=str(chroma)))


def _notes(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT id, text, tag FROM notes ORDER BY id").fetchall()


def test_import_govern_confirm_execute_once_and_reimport(services: Services, novaops: Path, tmp_path: Path) -> None:
    from graph.context import Context
    from graph.session import open_session

    reg = services.registry
    notes = tmp_path / "notes.db"
    report = import_mcp(_config(tmp_path, notes), reg)
    assert sorted(report.added) == sorted([READ, WRITE]) and report.embedded == 2
    assert report.writes == [WRITE] and report.reads == [READ]

    # deny by default: disabled, no grant, a write under the default policy (confirmation required)
    for name in (READ, WRITE):
        spec = reg.get(name)
        assert not spec.enabled and not spec.standard and spec.permissions.users == spec.permissions.groups == []
        assert spec.handler == f"tools.business.mcp_handler:McpTools.{name}" and spec.version == 1
    assert reg.policy(WRITE).operation_type == "write" and reg.policy(WRITE).require_confirmation
    assert load_bindings(services.engine)[WRITE].operation_type == "write"

    ctx = Context(user_id="E006", today="2026-05-15", llm_backend="scripted", services=services)
    with open_session(ctx) as session:
        r = session.turn("mcp-disabled", START)
        assert r.transaction is None or r.transaction.get("tool") != WRITE  # disabled: never matched
        reg.set_enabled(WRITE, True)
        r = session.turn("mcp-ungranted", START)
        assert r.transaction is None and r.trace.get("executed_tool") is None  # enabled but not granted

        reg.grant(WRITE, user="E006")
        r = session.turn("mcp-1", START)
        assert r.status == "collecting" and r.transaction and r.transaction["tool"] == WRITE, r.answer
        assert r.transaction["pending"] == ["text"]
        r = session.turn("mcp-1", "comprar café para a copa")
        assert r.status == "awaiting_confirmation", r.answer
        assert "add_note" in r.answer and "comprar café para a copa" in r.answer  # the summary shows the call
        assert _notes(notes) == []  # nothing written before the yes
        r = session.turn("mcp-1", "sim")
        assert r.trace.get("executed_tool") == WRITE, r.answer
        r = session.turn("mcp-1", "sim")  # a second yes confirms nothing
        assert r.trace.get("executed_tool") is None

    assert _notes(notes) == [(1, "comprar café para a copa", "geral")]
    audit = scalar(novaops, "SELECT COUNT(*) FROM audit_log WHERE tool_name = :t AND actor_id = 'E006' "
                            "AND target_table = 'mcp:notes' AND target_id = '1'", t=WRITE)
    assert audit == 1
    assert scalar(novaops, "SELECT COUNT(*) FROM tool_executions WHERE tool_name = :t", t=WRITE) == 1

    # re-import: only the changed tool gets a new version and new vectors; admin choices survive
    embedded_before = reg.embed_calls
    again = import_mcp(_config(tmp_path, notes), reg)
    assert again.added == again.updated == [] and sorted(again.unchanged) == sorted([READ, WRITE])
    assert reg.embed_calls == embedded_before
    changed = import_mcp(_config(tmp_path, notes, variant=2), reg)
    assert changed.updated == [WRITE] and changed.unchanged == [READ] and changed.embedded == 1
    spec = reg.get(WRITE)
    assert spec.version == 2 and spec.enabled and spec.permissions.users == ["E006"] and "tagged note" in spec.description
    assert reg.get(READ).version == 1

    from tramita.shell.doctor import source_checks

    rows = {n: (ok, detail) for n, ok, detail, _ in source_checks(services.settings, services)}
    ok, detail = rows["MCP server notes"]
    assert ok and "answers, 2 tools; 2 imported (1 enabled, 1 writes)" in detail, detail


def test_bad_config_names_the_file_and_the_field(services: Services, tmp_path: Path) -> None:
    from tramita.base.policyfile import PolicyError

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"servers": {"notes": {"command": sys.executable, "env_passthrough": ["lower"],
                                                          "shell": True}}}), encoding="utf-8")
    with pytest.raises(PolicyError) as err:
        import_mcp(path, services.registry)
    assert str(path) in str(err.value) and "env_passthrough" in str(err.value) and "shell" in str(err.value)
