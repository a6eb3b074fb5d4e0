"""The tool registry (HZV/HZZ) on real components: a SQLite copy of the NovaOps dataset, a Chroma
directory in tmp_path and the real e5 embeddings.

`CountingEmbeddings` wraps the real model to count what the registry asks to embed; vectors are
memoised per (kind, text) for the module, so re-syncing in another test costs no model time while
every vector still comes from e5.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from langchain_core.embeddings import Embeddings
from sqlalchemy import Engine, text

from ingest.sql_loader import copy_sqlite, load_sql
from tools.database import writer_engine
from tools.registry import Registry, resolve_handler
from tools.registry_models import RegistryError, ToolPolicy, load_tool_file
from tools.services import Services
from tramita.base.paths import POLICIES_DIR, ROOT

TOOLS_YAML = POLICIES_DIR / "tools.yaml"
STANDARD = [t.name for t in load_tool_file(TOOLS_YAML).tools]
N_EXAMPLES = sum(len(t.examples) for t in load_tool_file(TOOLS_YAML).tools)


class MemoE5(Embeddings):
    """The real e5 model, each (kind, text) embedded once per test module."""

    def __init__(self) -> None:
        from tools.embeddings import make_embeddings

        self.model = make_embeddings()
        self.memo: dict[tuple[str, str], list[float]] = {}

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        todo = list(dict.fromkeys(t for t in texts if ("doc", t) not in self.memo))
        for t, v in zip(todo, self.model.embed_documents(todo) if todo else [], strict=True):
            self.memo[("doc", t)] = list(v)
        return [self.memo[("doc", t)] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        if ("query", text) not in self.memo:
            self.memo[("query", text)] = list(self.model.embed_query(text))
        return self.memo[("query", text)]


class CountingEmbeddings(Embeddings):
    """Records every text the registry sends to `embed_documents`."""

    def __init__(self, inner: Embeddings) -> None:
        self.inner = inner
        self.documents: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents.extend(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


@pytest.fixture(scope="module")
def e5() -> MemoE5:
    return MemoE5()


@pytest.fixture(scope="module")
def template_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The NovaOps dataset loaded once, with no registry tables yet."""
    db = tmp_path_factory.mktemp("registry-template") / "novaops.db"
    load_sql(f"sqlite:///{db}", progress=False)
    return db


class Env:
    def __init__(self, root: Path, template: Path, e5: MemoE5) -> None:
        self.root = root
        self.db = root / "novaops.db"
        copy_sqlite(template, self.db)
        self.url = f"sqlite:///{self.db}"
        self.engine: Engine = writer_engine(self.url)
        self.chroma = root / "chroma"
        self.e5 = e5
        self.counter = CountingEmbeddings(e5)

    def registry(self) -> Registry:
        return Registry(self.engine, chroma_dir=self.chroma, embeddings=self.counter)

    def rows(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql), params).all()]

    def vector_ids(self, reg: Registry) -> set[str]:
        return set(reg._collection().get(include=[])["ids"])


@pytest.fixture
def env(tmp_path: Path, template_db: Path, e5: MemoE5) -> Env:
    return Env(tmp_path, template_db, e5)


@pytest.fixture
def synced(env: Env) -> tuple[Env, Registry]:
    reg = env.registry()
    reg.sync()
    env.counter.documents.clear()
    return env, reg


def write_yaml(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def standard_tools() -> list[dict[str, Any]]:
    return list(yaml.safe_load(TOOLS_YAML.read_text(encoding="utf-8"))["tools"])


def custom_tool(name: str = "ticket_owner_lookup", **changes: Any) -> dict[str, Any]:
    tool: dict[str, Any] = {
        "name": name,
        "handler": "tools.business.tickets:TicketTools.status",
        "version": 1,
        "group": "custom",
        "short_description": "Quem cuida de um ticket",
        "description": "Diz quem é o responsável por um ticket. Tells who owns a ticket.",
        "params": {"type": "object", "required": ["ticket_id"],
                   "properties": {"ticket_id": {"type": "string", "pattern": "^TCK-\\d{4}$"}}},
        "permissions": {"groups": ["service_desk"], "users": []},
        "examples": ["quem é o dono do TCK-1042?", "who owns TCK-1083?", "responsável pelo chamado TCK-1100"],
    }
    tool.update(changes)
    return tool


# ---------------------------------------------------------------------------------------- sync


def test_sync_creates_rows_examples_grants_and_vectors(env: Env) -> None:
    reg = env.registry()
    report = reg.sync()
    assert sorted(report.added) == sorted(STANDARD) and len(STANDARD) == 9
    assert sorted(report.embedded) == sorted(STANDARD)
    assert env.rows("SELECT COUNT(*) FROM tool_registry WHERE standard = 1 AND enabled = 1") == [(9,)]
    assert env.rows("SELECT COUNT(*) FROM tool_examples") == [(N_EXAMPLES,)]
    assert env.rows("SELECT grantee_type, grantee FROM tool_permissions WHERE name = 'approve_expense'") == [
        ("group", "finance_approvers")]
    shipped = next(t for t in standard_tools() if t["name"] == "approve_expense")["examples"]
    assert env.rows("SELECT example FROM tool_examples WHERE name = 'approve_expense' AND seq = 1") == [
        (shipped[1],)]
    # HZV vector + description vector + one per example, for every tool
    assert len(env.counter.documents) == 2 * 9 + N_EXAMPLES
    ids = env.vector_ids(reg)
    assert len(ids) == 2 * 9 + N_EXAMPLES
    assert "*:approve_expense:v1" in ids and "*:approve_expense:v1:d" in ids and "*:approve_expense:v1:e0" in ids
    hzv = reg._collection().get(ids=["*:approve_expense:v1"], include=["documents"])["documents"][0]
    assert hzv.startswith("Aprova um pedido de reembolso") and "please approve EXP-0290" in hzv

    env.counter.documents.clear()
    again = reg.sync()
    assert env.counter.documents == [] and again.embedded == []
    assert sorted(again.unchanged) == sorted(STANDARD) and not again.added and not again.updated
    # a new process (another Registry) embeds nothing either
    fresh = env.registry()
    assert fresh.sync().embedded == [] and env.counter.documents == []


def test_version_bump_reembeds_exactly_that_tool(synced: tuple[Env, Registry], tmp_path: Path) -> None:
    env, reg = synced
    reg.set_enabled("approve_expense", False)  # admin changes survive the bump
    reg.grant("approve_expense", user="E028")
    tools = standard_tools()
    approve = next(t for t in tools if t["name"] == "approve_expense")
    approve["version"] = 2
    approve["examples"] = [*approve["examples"][:3], "autoriza o reembolso EXP-0281"]
    # same version with an edited text: must NOT be re-embedded nor rewritten
    status = next(t for t in tools if t["name"] == "get_expense_status")
    status["description"] = "Texto alterado sem subir a versão, que deve ser ignorado pelo sync."
    before = env.vector_ids(reg)

    report = reg.sync(write_yaml(tmp_path / "tools-v2.yaml", {"tools": tools}))

    assert report.updated == ["approve_expense"] and report.embedded == ["approve_expense"]
    assert "get_expense_status" in report.unchanged
    assert len(env.counter.documents) == 2 + 4
    assert "autoriza o reembolso EXP-0281" in env.counter.documents
    texts = {*approve["examples"], approve["description"].strip()}
    # only the bumped tool's texts were embedded: its examples, its description, its HZV document
    assert all(t in texts or t.startswith("Aprova um") for t in env.counter.documents), env.counter.documents
    after = env.vector_ids(reg)
    assert not any(i.startswith("*:approve_expense:v1") for i in after)  # old vectors are gone
    assert {i for i in after if i.startswith("*:approve_expense:")} == {
        "*:approve_expense:v2", "*:approve_expense:v2:d", *(f"*:approve_expense:v2:e{k}" for k in range(4))}
    assert {i for i in before if "approve_expense" not in i} == {i for i in after if "approve_expense" not in i}
    spec = reg.get("approve_expense")
    assert spec.version == 2 and not spec.enabled and "E028" in spec.permissions.users
    assert env.rows("SELECT COUNT(*) FROM tool_examples WHERE name = 'approve_expense'") == [(4,)]
    assert reg.get("get_expense_status").description.startswith("Consulta o status")

    # the YAML still at v1 is now older than the stored v2: reported stale and ignored
    env.counter.documents.clear()
    stale = reg.sync()
    assert stale.stale_yaml == ["approve_expense"] and stale.embedded == []
    assert env.counter.documents == []
    assert reg.get("approve_expense").version == 2
    assert env.rows("SELECT COUNT(*) FROM tool_examples WHERE name = 'approve_expense'") == [(4,)]


# ---------------------------------------------------------------------------------------- enable / disable


def test_disable_hides_at_once_from_every_instance(synced: tuple[Env, Registry]) -> None:
    env, reg = synced
    other = env.registry()  # another process's registry on the same database and Chroma
    message = "aprova a EXP-0264"
    for r in (reg, other):  # warm both caches
        m = r.match(message, "E006")
        assert (m.decision, m.best) == ("clear", "approve_expense")
        assert "approve_expense" in {s.name for s in r.visible()}

    reg.set_enabled("approve_expense", False)

    for r in (reg, other):
        assert "approve_expense" not in {s.name for s in r.visible()}
        m = r.match(message, "E006")
        assert "approve_expense" not in [c.name for c in m.candidates]
        assert m.best != "approve_expense"
        assert "approve_expense" not in [n for n, _ in r.score(env.e5.embed_query(message))]
    assert not other.get("approve_expense").enabled  # still listed for administrators

    other.set_enabled("approve_expense", True)
    for r in (reg, other):
        m = r.match(message, "E006")
        assert (m.decision, m.best) == ("clear", "approve_expense")


def test_the_revision_is_read_again_only_when_the_database_file_changed(synced: tuple[Env, Registry]) -> None:
    """On SQLite the revision is a stat while nothing was written; any process's write is seen."""
    import sqlite3

    from sqlalchemy import event

    _, reg = synced
    queries: list[str] = []
    event.listen(reg.engine, "before_cursor_execute", lambda *a: queries.append(a[2]))
    first = reg.revision()
    queries.clear()
    assert reg.revision() == first and reg.revision() == first and not queries
    raw = sqlite3.connect(str(reg.engine.url.database))  # another process's write, outside SQLAlchemy
    with raw:
        raw.execute("UPDATE tramita_meta SET value = 'elsewhere' WHERE key = 'registry_revision'")
    raw.close()
    assert reg.revision() == "elsewhere" and queries


def test_mid_conversation_disable_cancels_the_pending_write(novaops: Path, novaops_services: Services) -> None:
    from graph.context import Context
    from graph.session import open_session
    from tramita.core.replies import say

    ctx = Context(llm_backend="scripted", user_id="E006", today="2026-05-15", services=novaops_services)
    engine = writer_engine(f"sqlite:///{novaops}")
    with engine.connect() as conn:
        audit_before = conn.execute(text("SELECT COUNT(*) FROM audit_log")).scalar()
    with open_session(ctx) as session:
        first = session.turn("disable-1", "aprova a EXP-0264")
        assert first.status == "awaiting_confirmation"
        assert first.transaction and first.transaction["tool"] == "approve_expense"
        # the administrator disables the tool from another process (another Registry instance)
        Registry(engine, chroma_dir=novaops_services.settings.chroma_dir).set_enabled("approve_expense", False)
        second = session.turn("disable-1", "sim")
    assert second.status == "idle" and second.transaction is None
    assert not second.trace.get("executed_tool")
    assert second.last_transaction and second.last_transaction["outcome"] == "disabled"
    assert say("disabled", "pt", tool="approve_expense") in second.answer
    with engine.connect() as conn:
        assert conn.execute(text("SELECT status, approver_id FROM expenses WHERE expense_id = 'EXP-0264'")).one() == (
            "pending", None)
        assert conn.execute(text("SELECT COUNT(*) FROM audit_log")).scalar() == audit_before


# ---------------------------------------------------------------------------------------- custom tools


def test_custom_tool_is_added_embedded_and_survives_sync(synced: tuple[Env, Registry], tmp_path: Path) -> None:
    env, reg = synced
    path = write_yaml(tmp_path / "custom.yaml", custom_tool())  # a single tool mapping is accepted
    assert reg.add(path) == ["ticket_owner_lookup"]
    spec = reg.get("ticket_owner_lookup")
    assert not spec.standard and spec.permissions.groups == ["service_desk"]
    assert len(env.counter.documents) == 2 + 3
    assert reg.match("quem é o dono do TCK-1042?", "E051").candidates[0].name == "ticket_owner_lookup"

    # a standard YAML that (re)defines the same name never touches the custom row
    tools = [*standard_tools(), custom_tool(version=5, description="Uma versão padrão que não pode vencer a customizada.")]
    env.counter.documents.clear()
    report = reg.sync(write_yaml(tmp_path / "tools.yaml", {"tools": tools}))
    assert report.kept_custom == ["ticket_owner_lookup"] and report.embedded == []
    assert env.counter.documents == []
    kept = reg.get("ticket_owner_lookup")
    assert (kept.version, kept.standard, kept.description) == (1, False, spec.description)
    assert reg.sync().embedded == []  # the shipped file neither
    assert "ticket_owner_lookup" in {s.name for s in reg.visible()}
    assert "*:ticket_owner_lookup:v1" in env.vector_ids(reg)


def test_add_refuses_a_standard_name(synced: tuple[Env, Registry], tmp_path: Path) -> None:
    env, reg = synced
    path = write_yaml(tmp_path / "steal.yaml", custom_tool(name="approve_expense"))
    with pytest.raises(RegistryError) as err:
        reg.add(path)
    assert str(path) in str(err.value) and "'approve_expense'" in str(err.value) and "field name" in str(err.value)
    spec = reg.get("approve_expense")
    assert spec.standard and spec.handler == "tools.business.expenses:ExpenseTools.approve"
    assert env.counter.documents == []


BAD_FILES: list[tuple[str, Any, list[str]]] = [
    ("malformed", "tools:\n  - name: broken_tool\n    examples: [unclosed\n", ["malformed YAML", "line "]),
    ("missing-field", custom_tool(handler=None), ["'ticket_owner_lookup'", "field handler"]),
    ("bad-handler", custom_tool(handler="tickets.status"), ["'ticket_owner_lookup'", "field handler", "package.module:Class.method"]),
    ("unknown-required", custom_tool(params={"type": "object", "required": ["ticket_id", "owner"],
                                             "properties": {"ticket_id": {"type": "string"}}}),
     ["'ticket_owner_lookup'", "field params", "owner"]),
    ("duplicate", {"tools": [custom_tool(), custom_tool(description="outra descrição da mesma ferramenta")]},
     ["duplicate tool 'ticket_owner_lookup'"]),
    ("bad-name", custom_tool(name="Ticket Owner"), ["'Ticket Owner'", "field name"]),
]


@pytest.mark.parametrize(("case", "content", "expected"), BAD_FILES, ids=[c[0] for c in BAD_FILES])
@pytest.mark.parametrize("command", ["add", "sync"])
def test_bad_yaml_names_file_tool_and_field(synced: tuple[Env, Registry], tmp_path: Path, case: str, content: Any,
                                             expected: list[str], command: str) -> None:
    env, reg = synced
    path = tmp_path / f"{case}.yaml"
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        if isinstance(content, dict) and "tools" not in content:
            content = {k: v for k, v in content.items() if v is not None}
        write_yaml(path, content)
    before = env.rows("SELECT name, version FROM tool_registry ORDER BY name")
    with pytest.raises(RegistryError) as err:
        reg.add(path) if command == "add" else reg.sync(path)
    message = str(err.value)
    assert str(path) in message
    for part in expected:
        assert part in message, message
    assert env.rows("SELECT name, version FROM tool_registry ORDER BY name") == before
    assert env.counter.documents == []


def _policies_copy(tmp_path: Path, **files: str) -> Path:
    """A copy of policies/ with some files replaced (name without .yaml -> content)."""
    folder = tmp_path / "policies"
    shutil.copytree(POLICIES_DIR, folder)
    for name, content in files.items():
        (folder / f"{name}.yaml").write_text(content, encoding="utf-8")
    return folder


def test_unknown_x_resolve_kind_fails_naming_file_tool_and_field(synced: tuple[Env, Registry], tmp_path: Path) -> None:
    env, reg = synced
    tools = standard_tools()
    reassign = next(t for t in tools if t["name"] == "reassign_ticket")
    reassign["version"] = 3
    reassign["params"]["properties"]["assignee_id"]["x-resolve"] = "person"
    path = write_yaml(tmp_path / "tools.yaml", {"tools": tools})
    with pytest.raises(RegistryError) as err:
        reg.sync(path)
    assert (f"{path}: tool 'reassign_ticket': field params.properties.assignee_id.x-resolve: unknown reference kind "
            f"'person'; {POLICIES_DIR / 'references.yaml'} defines: employee, service, team") in str(err.value)
    assert reg.get("reassign_ticket").version == 1
    custom = custom_tool(params={"type": "object", "properties": {"owner": {"type": "string", "x-resolve": "owner"}}})
    path = write_yaml(tmp_path / "custom.yaml", custom)
    with pytest.raises(RegistryError, match=r"tool 'ticket_owner_lookup': field params\.properties\.owner\.x-resolve: "
                                             r"unknown reference kind 'owner'"):
        reg.add(path)
    assert env.rows("SELECT COUNT(*) FROM tool_registry WHERE name = 'ticket_owner_lookup'") == [(0,)]


def test_x_resolve_kind_must_look_up_the_x_references_column(synced: tuple[Env, Registry], tmp_path: Path) -> None:
    _, reg = synced
    tools = standard_tools()
    budget = next(t for t in tools if t["name"] == "request_budget_change")
    budget["version"] = 2
    budget["params"]["properties"]["team_id"]["x-resolve"] = "employee"  # x-references: teams.team_id
    path = write_yaml(tmp_path / "tools.yaml", {"tools": tools})
    with pytest.raises(RegistryError, match=r"tool 'request_budget_change': field params\.properties\.team_id\.x-resolve: "
                                             r"kind 'employee' looks up employees\.employee_id .*x-references is 'teams\.team_id'"):
        reg.sync(path)
    assert reg.get("request_budget_change").version == 1


def test_malformed_references_file_fails_at_start_naming_file_and_field(env: Env, tmp_path: Path) -> None:
    policies = _policies_copy(tmp_path, references="kinds:\n  employee: {table: employees, id: employee_id, labels: [full_name]}\n"
                                                   "  team: {table: teams, id: team_id, labels: [name], where: active}\n")
    with pytest.raises(RegistryError, match=rf"{policies / 'references.yaml'}: field kinds\.team\.where: Extra inputs"):
        Registry(env.engine, chroma_dir=env.chroma, embeddings=env.counter, policies_dir=policies)


def test_requires_is_no_longer_a_tool_policy(env: Env, tmp_path: Path) -> None:
    """`requires` was never enforced (the JSON schema's `required` is); a leftover entry fails loudly."""
    assert "requires" not in ToolPolicy.model_fields
    assert "requires" not in (POLICIES_DIR / "tool_policies.yaml").read_text(encoding="utf-8").replace(
        "require_confirmation", "")
    policies = _policies_copy(tmp_path, tool_policies="policies:\n  approve_expense: {requires: [expense_id]}\n")
    with pytest.raises(RegistryError, match=rf"{policies / 'tool_policies.yaml'}: tool 'approve_expense': "
                                             r"field policies\.approve_expense\.requires: Extra inputs"):
        Registry(env.engine, chroma_dir=env.chroma, embeddings=env.counter, policies_dir=policies)


GROUPS_BODY = "groups:\n  everyone: {all: true}\n  few: {members: [E006]}\n"


def test_user_directory_comes_from_groups_yaml(env: Env, tmp_path: Path) -> None:
    def registry(groups: str) -> Registry:
        folder = _policies_copy(tmp_path / str(len(list(tmp_path.iterdir()))), groups=groups)
        return Registry(env.engine, chroma_dir=env.chroma, embeddings=env.counter, policies_dir=folder)

    shipped = env.registry()
    assert shipped.user_groups("E028") == {"employees"} and shipped.user_groups("E999") == frozenset()
    teams = registry("directory: {table: teams, id: team_id}\n" + GROUPS_BODY)  # another table is the directory
    assert teams.user_groups("T04") == {"everyone"} and teams.user_groups("E028") == frozenset()
    assert teams.user_groups("E006") == {"few"}
    missing = registry("directory: {table: people, id: person_id}\n" + GROUPS_BODY)  # no such table: nobody
    assert missing.user_groups("E028") == frozenset() and missing.user_groups("E006") == {"few"}
    with pytest.raises(RegistryError, match=r"groups\.yaml: field \(root\): Value error, directory \(table, id\) is "
                                             r"required: groups \['everyone'\] have all: true"):
        registry(GROUPS_BODY)
    with pytest.raises(RegistryError, match=r"groups\.yaml: field directory\.table: Value error, 'employees e' is not"):
        registry("directory: {table: employees e, id: employee_id}\n" + GROUPS_BODY)


def test_handler_resolution_errors_name_the_handler(synced: tuple[Env, Registry], tmp_path: Path) -> None:
    env, reg = synced
    for handler in ["tools.business.nowhere:TicketTools.status", "tools.business.tickets:NoSuchTools.status",
                    "tools.business.tickets:TicketTools.no_such_method"]:
        with pytest.raises(RegistryError, match=f"handler '{handler}' cannot be resolved"):
            resolve_handler(handler)
        path = write_yaml(tmp_path / "custom.yaml", custom_tool(handler=handler))
        with pytest.raises(RegistryError) as err:
            reg.add(path)
        assert str(path) in str(err.value) and "field handler" in str(err.value) and handler in str(err.value)
    tools = standard_tools()
    tools[0]["handler"] = "tools.business.tickets:TicketTools.open_sesame"
    tools[0]["version"] = 2
    path = write_yaml(tmp_path / "tools.yaml", {"tools": tools})
    with pytest.raises(RegistryError) as err:
        reg.sync(path)  # a standard tool's handler is checked at sync, not at its first confirmed write
    assert f"{path}: tool '{tools[0]['name']}': field handler" in str(err.value) and "open_sesame" in str(err.value)
    assert reg.get(tools[0]["name"]).version == 1
    obj, method = resolve_handler("tools.business.tickets:TicketTools.status")
    assert method == "status" and callable(getattr(obj, method))
    assert env.rows("SELECT COUNT(*) FROM tool_registry WHERE name = 'ticket_owner_lookup'") == [(0,)]


# ---------------------------------------------------------------------------------------- permissions


def test_permissions_follow_dta_rules(synced: tuple[Env, Registry], tmp_path: Path) -> None:
    _, reg = synced

    def ok(tool: str, user: str) -> bool:
        return reg.is_permitted(reg.get(tool), user)

    assert ok("approve_expense", "E006") and not ok("approve_expense", "E028")  # group finance_approvers
    assert ok("get_ticket_status", "E028") and not ok("get_ticket_status", "E999")  # employees = existing employees
    reg.grant("approve_expense", user="E028")  # user grant
    assert ok("approve_expense", "E028")
    reg.revoke("approve_expense", user="E028")
    assert not ok("approve_expense", "E028")
    assert not ok("reassign_ticket", "E006")
    reg.grant("reassign_ticket", group="finance_approvers")  # group grant
    assert ok("reassign_ticket", "E006") and ok("reassign_ticket", "E051")
    reg.revoke("reassign_ticket", group="finance_approvers")
    assert not ok("reassign_ticket", "E006") and ok("reassign_ticket", "E051")
    reg.revoke("get_ticket_status", group="employees")  # no grant left: usable by nobody
    assert reg.get("get_ticket_status").permissions.users == [] == reg.get("get_ticket_status").permissions.groups
    assert not any(ok("get_ticket_status", u) for u in ["E001", "E006", "E028", "E051"])
    reg.add(write_yaml(tmp_path / "custom.yaml", custom_tool(permissions={"groups": [], "users": []})))
    assert not any(ok("ticket_owner_lookup", u) for u in ["E001", "E006", "E051"])
    assert reg.list("ticket_owner", user_id="E051")[0][1] is False


def test_match_denies_a_clear_match_on_a_tool_the_user_may_not_use(synced: tuple[Env, Registry]) -> None:
    _, reg = synced
    m = reg.match("aprova a EXP-0268", "E028")
    assert (m.decision, m.best) == ("denied", "approve_expense")
    assert m.candidates[0].name == "approve_expense" and not m.candidates[0].permitted
    reg.grant("approve_expense", user="E028")
    m = reg.match("aprova a EXP-0268", "E028")
    assert (m.decision, m.best) == ("clear", "approve_expense")


def test_grant_and_revoke_errors(synced: tuple[Env, Registry]) -> None:
    _, reg = synced
    with pytest.raises(RegistryError, match="unknown group 'finance'.*finance_approvers"):
        reg.grant("approve_expense", group="finance")
    with pytest.raises(RegistryError, match="exactly one of --user ID or --group G"):
        reg.grant("approve_expense", user="E028", group="employees")
    with pytest.raises(RegistryError, match="exactly one"):
        reg.revoke("approve_expense")
    with pytest.raises(RegistryError, match="unknown tool 'approve_expenses'.*approve_expense"):
        reg.grant("approve_expenses", user="E028")
    assert reg.get("approve_expense").permissions.groups == ["finance_approvers"]
    assert reg.get("approve_expense").permissions.users == []


# ---------------------------------------------------------------------------------------- routing


def _routing_module() -> Any:
    path = ROOT / "benchmarks" / "routing_accuracy.py"
    spec = importlib.util.spec_from_file_location("routing_accuracy", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# Measured with benchmarks/routing_accuracy.py (e5-small, floor 0.86, margin 0.015): leave-one-out
# top-1 47/65 = 0.723, top-3 64/65 = 0.985. The floors leave room for one or two near-ties to flip
# on another CPU; the misses are mostly submit/approve/reject/status of an expense, which the LLM
# router and the question-form rule separate.
LOO_TOP1_FLOOR = 0.70
LOO_TOP3_FLOOR = 0.95


def test_leave_one_out_routing_accuracy(e5: MemoE5) -> None:
    routing = _routing_module()
    specs = list(load_tool_file(TOOLS_YAML).tools)
    result = routing.leave_one_out(specs, e5)
    assert result.total == N_EXAMPLES
    summary = result.summary()
    assert summary["top1_accuracy"] >= LOO_TOP1_FLOOR, result.misses
    assert summary["top3_accuracy"] >= LOO_TOP3_FLOOR, result.misses
    assert sum(result.decisions.values()) == N_EXAMPLES and set(result.decisions) <= {"clear", "close", "none"}


def test_leave_one_out_really_holds_the_example_out(e5: MemoE5) -> None:
    """Scored with its own example still in the index, routing is far better than held out: the
    held-out figure is not an in-sample one."""
    from tools.registry import ToolIndex

    specs = list(load_tool_file(TOOLS_YAML).tools)
    held_out = _routing_module().leave_one_out(specs, e5)
    index = ToolIndex.build("in-sample", {s.name: e5.embed_documents([s.embedding_text(), s.description, *s.examples])
                                          for s in specs})
    in_sample = sum(index.rank(e5.embed_query(ex), k=1)[0][0] == s.name for s in specs for ex in s.examples)
    assert in_sample > held_out.top1 + 5
