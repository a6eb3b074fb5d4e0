"""`tramita tools list|show|enable|disable|grant|revoke|add|sync` through `tramita.shell.cli.main`, on a
temporary data directory (SQLite copy of the dataset, its own Chroma directory, real e5 vectors).

The registry embeds with the real e5 model; `MemoE5` only remembers each text's vector for the
module so that every test can start from its own freshly synced catalog without paying the model
again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from langchain_core.embeddings import Embeddings
from sqlalchemy import text

from ingest.sql_loader import copy_sqlite, load_sql
from tools.database import writer_engine
from tools.registry import Registry
from tools.registry_models import load_tool_file
from tramita.base.paths import POLICIES_DIR
from tramita.shell.cli import main

TOOLS_YAML = POLICIES_DIR / "tools.yaml"
SPECS = {t.name: t for t in load_tool_file(TOOLS_YAML).tools}


class MemoE5(Embeddings):
    """The real e5 model, each (kind, text) embedded once per test module."""

    def __init__(self) -> None:
        from tools.embeddings import make_embeddings

        self.model = make_embeddings()
        self.memo: dict[tuple[str, str], list[float]] = {}
        self.model_texts = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        todo = list(dict.fromkeys(t for t in texts if ("doc", t) not in self.memo))
        self.model_texts += len(todo)
        for t, v in zip(todo, self.model.embed_documents(todo) if todo else [], strict=True):
            self.memo[("doc", t)] = list(v)
        return [self.memo[("doc", t)] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        if ("query", text) not in self.memo:
            self.memo[("query", text)] = list(self.model.embed_query(text))
        return self.memo[("query", text)]


@pytest.fixture(scope="module")
def e5() -> MemoE5:
    return MemoE5()


@pytest.fixture(scope="module")
def template_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("cli-template") / "novaops.db"
    load_sql(f"sqlite:///{db}", progress=False)
    return db


class Cli:
    def __init__(self, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.root = root
        self.db = root / "novaops.db"
        self.chroma = root / "chroma"
        self.capsys = capsys

    def __call__(self, *argv: str) -> tuple[int, str]:
        self.capsys.readouterr()
        rc = main(["tools", *argv])
        captured = self.capsys.readouterr()
        return rc, captured.out + captured.err

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with writer_engine(f"sqlite:///{self.db}").connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql)).all()]

    def registry(self) -> Registry:
        """Another process's view of the same catalog."""
        return Registry(writer_engine(f"sqlite:///{self.db}"), chroma_dir=self.chroma, embeddings=_NO_EMBED)

    def listing(self, *extra: str) -> dict[str, str]:
        rc, out = self(*extra, "list") if extra else self("list")
        assert rc == 0, out
        return {line.split()[1]: line for line in tool_lines(out)}


def tool_lines(out: str) -> list[str]:
    """`tools list` rows (the legend line "● enabled ○ disabled…" is not a row)."""
    return [line for line in out.splitlines() if line[:1] in "●○" and not line.startswith("● enabled")]


class _NoEmbeddings(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise AssertionError("this registry view must not embed")

    def embed_query(self, text: str) -> list[float]:
        raise AssertionError("this registry view must not embed")


_NO_EMBED = _NoEmbeddings()


@pytest.fixture
def fresh(tmp_path: Path, template_db: Path, e5: MemoE5, monkeypatch: pytest.MonkeyPatch,
          capsys: pytest.CaptureFixture[str]) -> Iterator[Cli]:
    """A data directory with the dataset and no registry yet; the CLI's services point at it."""
    import tools.embeddings
    from tools.services import reset_services

    cli = Cli(tmp_path, capsys)
    copy_sqlite(template_db, cli.db)
    monkeypatch.setenv("TRAMITA_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TRAMITA_SQL_URL", f"sqlite:///{cli.db}")
    monkeypatch.setenv("TRAMITA_CHROMA_DIR", str(cli.chroma))
    monkeypatch.delenv("TRAMITA_USER", raising=False)
    monkeypatch.setattr(tools.embeddings, "make_embeddings", lambda model=None: e5)
    reset_services()
    yield cli
    reset_services()


@pytest.fixture
def cli(fresh: Cli) -> Cli:
    rc, out = fresh("sync")
    assert rc == 0, out
    return fresh


def write_yaml(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def standard_tools() -> list[dict[str, Any]]:
    return list(yaml.safe_load(TOOLS_YAML.read_text(encoding="utf-8"))["tools"])


def custom_tool(**changes: Any) -> dict[str, Any]:
    tool: dict[str, Any] = {
        "name": "ticket_owner_lookup", "handler": "tools.business.tickets:TicketTools.status", "version": 1,
        "group": "custom", "short_description": "Quem cuida de um ticket",
        "description": "Diz quem é o responsável por um ticket. Tells who owns a ticket.",
        "params": {"type": "object", "required": ["ticket_id"], "properties": {"ticket_id": {"type": "string"}}},
        "permissions": {"groups": ["service_desk"], "users": []},
        "examples": ["quem é o dono do TCK-1042?", "who owns TCK-1083?"],
    }
    tool.update(changes)
    return tool


def test_sync_then_resync(fresh: Cli) -> None:
    rc, out = fresh("sync")
    assert rc == 0, out
    for name in SPECS:
        assert f"'{name}'" in out.split("updated")[0]  # listed as added
    assert "re-embedded ['" in out and "unchanged 0" in out
    assert fresh.rows("SELECT COUNT(*) FROM tool_registry") == [(9,)]
    assert fresh.registry()._collection().count() == 2 * 9 + sum(len(s.examples) for s in SPECS.values())
    rc, out = fresh("sync")
    assert rc == 0 and "added [] updated [] unchanged 9" in out and "re-embedded []" in out


def test_sync_version_bump_then_stale_file(cli: Cli, tmp_path: Path) -> None:
    tools = standard_tools()
    next(t for t in tools if t["name"] == "escalate_incident")["version"] = 2
    rc, out = cli("sync", str(write_yaml(tmp_path / "v2.yaml", {"tools": tools})))
    assert rc == 0, out
    assert "updated ['escalate_incident']" in out and "re-embedded ['escalate_incident']" in out
    assert "unchanged 8" in out
    rc, out = cli("sync")  # the shipped file is now older for that tool
    assert rc == 0 and "stale" in out and "['escalate_incident']" in out.split("stale")[1]
    assert "re-embedded []" in out
    assert cli.rows("SELECT version FROM tool_registry WHERE name = 'escalate_incident'") == [(2,)]
    ids = cli.registry()._collection().get(include=[])["ids"]
    assert "*:escalate_incident:v2" in ids and "*:escalate_incident:v1" not in ids


def test_list_marks_state_permission_group_and_filters(cli: Cli) -> None:
    anonymous = cli.listing()  # no --user and no TRAMITA_USER: an anonymous user, who may use no tool
    assert set(anonymous) == set(SPECS) and all(" ✗ " in row for row in anonymous.values())
    rows = cli.listing("--user", "E006")
    approve = rows["approve_expense"]
    assert approve.startswith("● approve_expense") and " ✓ " in approve  # E006 is a finance approver
    assert "[finance]" in approve and approve.endswith("v1") and "Aprovar despesa pendente" in approve
    as_e028 = cli.listing("--user", "E028")
    assert " ✗ " in as_e028["approve_expense"] and " ✓ " in as_e028["get_ticket_status"]
    rc, out = cli("list", "despesa")
    assert rc == 0
    listed = {line.split()[1] for line in tool_lines(out)}
    expected = {n for n, s in SPECS.items() if "despesa" in " ".join([n, s.short_description, s.description, s.group]).lower()}
    assert listed == expected and "approve_expense" in listed and "create_ticket" not in listed


def test_show_prints_the_stored_spec_as_yaml(cli: Cli) -> None:
    rc, out = cli("show", "reject_expense")
    assert rc == 0, out
    shown = yaml.safe_load(out)
    stored = SPECS["reject_expense"]
    assert shown["name"] == "reject_expense" and shown["handler"] == stored.handler and shown["version"] == 1
    assert shown["examples"] == stored.examples and shown["params"] == stored.params
    assert shown["permissions"] == {"users": [], "groups": ["finance_approvers"]}
    rc, out = cli("show", "reject_expenses")
    assert rc == 2 and "unknown tool 'reject_expenses'" in out and "reject_expense" in out


def test_disable_and_enable(cli: Cli) -> None:
    rc, out = cli("disable", "approve_expense")
    assert (rc, out.strip()) == (0, "approve_expense: disabled")
    assert cli.listing()["approve_expense"].startswith("○ approve_expense")
    other = cli.registry()
    assert "approve_expense" not in {s.name for s in other.visible()}
    assert cli.rows("SELECT enabled FROM tool_registry WHERE name = 'approve_expense'") == [(0,)]
    rc, out = cli("enable", "approve_expense")
    assert (rc, out.strip()) == (0, "approve_expense: enabled")
    assert cli.listing()["approve_expense"].startswith("● approve_expense")
    assert "approve_expense" in {s.name for s in other.visible()}
    rc, out = cli("disable", "no_such_tool")
    assert rc == 2 and "unknown tool 'no_such_tool'" in out


def test_grant_and_revoke(cli: Cli) -> None:
    grants: Callable[[], list[tuple[Any, ...]]] = lambda: cli.rows(  # noqa: E731
        "SELECT grantee_type, grantee FROM tool_permissions WHERE name = 'approve_expense' ORDER BY 1, 2")
    rc, out = cli("grant", "approve_expense", "--user", "E028")
    assert (rc, out.strip()) == (0, "approve_expense: grant E028")
    assert " ✓ " in cli.listing("--user", "E028")["approve_expense"]
    rc, out = cli("grant", "approve_expense", "--group", "incident_commanders")
    assert rc == 0 and " ✓ " in cli.listing("--user", "E045")["approve_expense"]
    assert grants() == [("group", "finance_approvers"), ("group", "incident_commanders"), ("user", "E028")]
    assert cli("revoke", "approve_expense", "--user", "E028")[0] == 0
    assert cli("revoke", "approve_expense", "--group", "incident_commanders")[0] == 0
    assert " ✗ " in cli.listing("--user", "E028")["approve_expense"]
    assert " ✗ " in cli.listing("--user", "E045")["approve_expense"]
    assert grants() == [("group", "finance_approvers")]

    rc, out = cli("grant", "approve_expense", "--group", "finance")
    assert rc == 2 and "unknown group 'finance'" in out and "finance_approvers" in out
    for argv in (["grant", "approve_expense", "--user", "E028", "--group", "employees"], ["revoke", "approve_expense"]):
        with pytest.raises(SystemExit) as exc:  # argparse: exactly one of --user / --group
            cli(*argv)
        assert exc.value.code == 2
    assert grants() == [("group", "finance_approvers")]


def test_add_custom_tool(cli: Cli, tmp_path: Path, e5: MemoE5) -> None:
    path = write_yaml(tmp_path / "owner.yaml", custom_tool())
    rc, out = cli("add", str(path))
    assert (rc, out.strip()) == (0, "added: ticket_owner_lookup")
    line = cli.listing("--user", "E051")["ticket_owner_lookup"]
    assert line.endswith("v1 (custom)") and " ✓ " in line and "[custom]" in line
    assert "*:ticket_owner_lookup:v1" in cli.registry()._collection().get(include=[])["ids"]
    rc, out = cli("sync")
    assert rc == 0 and "re-embedded []" in out
    assert "ticket_owner_lookup" in cli.listing()

    steal = write_yaml(tmp_path / "steal.yaml", custom_tool(name="approve_expense"))
    rc, out = cli("add", str(steal))
    assert rc == 2 and str(steal) in out and "tool 'approve_expense'" in out and "field name" in out
    assert cli.rows("SELECT standard, handler FROM tool_registry WHERE name = 'approve_expense'") == [
        (1, "tools.business.expenses:ExpenseTools.approve")]


BAD = [
    ("malformed", "tools:\n  - name: broken_tool\n    examples: [unclosed\n", ["malformed YAML", "line "]),
    ("no-handler", {k: v for k, v in custom_tool().items() if k != "handler"},
     ["tool 'ticket_owner_lookup'", "field handler", "Field required"]),
    ("bad-handler", custom_tool(handler="tickets.status"), ["tool 'ticket_owner_lookup'", "field handler"]),
    ("unknown-required", custom_tool(params={"type": "object", "required": ["owner"], "properties": {}}),
     ["tool 'ticket_owner_lookup'", "field params", "owner"]),
    ("unresolvable-handler", custom_tool(handler="tools.business.tickets:TicketTools.nope"),
     ["tool 'ticket_owner_lookup'", "field handler", "tools.business.tickets:TicketTools.nope"]),
]


@pytest.mark.parametrize(("case", "content", "expected"), BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("command", ["add", "sync"])
def test_bad_yaml_exits_2_naming_file_tool_and_field(cli: Cli, tmp_path: Path, case: str, content: Any,
                                                      expected: list[str], command: str) -> None:
    path = tmp_path / f"{case}.yaml"
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        write_yaml(path, content)
    before = cli.rows("SELECT name, version, enabled FROM tool_registry ORDER BY name")
    rc, out = cli(command, str(path))
    assert rc == 2, out
    assert out.startswith("error: ") and str(path) in out
    for part in expected:
        assert part in out, out
    assert cli.rows("SELECT name, version, enabled FROM tool_registry ORDER BY name") == before
