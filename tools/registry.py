"""The tool registry (Protheus DTA's HZV/HZZ tables): the SQL catalog, sync and administration.

Rows live in the business SQL database (`tool_registry`, `tool_examples`, `tool_permissions`) so that
every process sharing that database (CLI, `langgraph dev`, several servers) sees the same catalog;
a `registry_revision` counter in `tramita_meta` tells each process when to reload its cache.

`Registry` composes the three jobs and keeps one public surface:
- this module: the catalog store (tables, sync, add, enable/disable, grants);
- `tools.registry_index`: the tool vectors in Chroma, the in-memory `ToolIndex` and the margin rule
  (`decide`, `Candidate`, `MatchResult`), re-exported here for importers;
- `tools.registry_permissions`: groups, the user directory and the grant rule.
"""

from __future__ import annotations

import builtins
import importlib
import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from pydantic import ValidationError
from sqlalchemy import Connection, Engine, text

from tools.references import ReferenceFile
from tools.registry_index import (
    COLLECTION,
    Candidate,
    MatchResult,
    ToolIndex,
    ToolVectors,
    decide,
    embedding_id,
)
from tools.registry_models import (
    Permissions,
    PolicyFile,
    RegistryError,
    ToolPolicy,
    ToolSpec,
    load_tool_file,
)
from tools.registry_permissions import RegistryPermissions
from tramita.base.paths import POLICIES_DIR
from tramita.base.policyfile import load_model

__all__ = [
    "COLLECTION",
    "DDL",
    "Candidate",
    "MatchResult",
    "Registry",
    "RegistryError",
    "SyncReport",
    "ToolIndex",
    "decide",
    "resolve_handler",
]

DDL = [
    "CREATE TABLE IF NOT EXISTS tramita_meta (key TEXT PRIMARY KEY, value TEXT)",
    """CREATE TABLE IF NOT EXISTS tool_registry (
        tenant TEXT NOT NULL, name TEXT NOT NULL, handler TEXT NOT NULL, version INTEGER NOT NULL,
        description TEXT NOT NULL, params_json TEXT NOT NULL, enabled INTEGER NOT NULL,
        standard INTEGER NOT NULL, strict INTEGER NOT NULL, rules TEXT NOT NULL, grp TEXT NOT NULL,
        short_description TEXT NOT NULL, embedding_id TEXT, updated_at TEXT NOT NULL,
        PRIMARY KEY (tenant, name))""",
    """CREATE TABLE IF NOT EXISTS tool_examples (
        tenant TEXT NOT NULL, name TEXT NOT NULL, seq INTEGER NOT NULL, example TEXT NOT NULL,
        PRIMARY KEY (tenant, name, seq))""",
    """CREATE TABLE IF NOT EXISTS tool_permissions (
        tenant TEXT NOT NULL, name TEXT NOT NULL, grantee_type TEXT NOT NULL, grantee TEXT NOT NULL,
        PRIMARY KEY (tenant, name, grantee_type, grantee))""",
]


@dataclass
class SyncReport:
    """What `Registry.sync` did, by tool name."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    kept_custom: list[str] = field(default_factory=list)
    stale_yaml: list[str] = field(default_factory=list)  # YAML version lower than the stored one
    embedded: list[str] = field(default_factory=list)


def resolve_handler(handler: str) -> tuple[Any, str]:
    """`module:Class.method` → (instance, method name). Import errors name the handler."""
    module_name, _, qual = handler.partition(":")
    cls_name, _, method = qual.partition(".")
    try:
        module = importlib.import_module(module_name)
        cls = getattr(module, cls_name)
        obj = cls()
        if not callable(getattr(obj, method)):
            raise AttributeError(f"{cls_name}.{method} is not callable")
    except (ImportError, AttributeError, TypeError) as exc:  # TypeError: a class that needs arguments
        raise RegistryError(f"handler {handler!r} cannot be resolved: {exc}") from exc
    return obj, method


class Registry:
    """Catalog operations. Every public method is also a `tramita tools …` command.

    The store is this class; the vectors (`ToolVectors`) and the permissions
    (`RegistryPermissions`) are composed in and reached through the same methods as before.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        chroma_dir: str | Path | None = None,
        embeddings: Embeddings | Callable[[], Embeddings] | None = None,
        policies_dir: Path = POLICIES_DIR,
        floor: float = 0.86,
        margin: float = 0.015,
    ) -> None:
        """A registry on `engine`, its vectors in `chroma_dir`, its policy files in `policies_dir`.

        `floor` and `margin` are the margin rule's parameters (see `decide`). Every policy file is
        read and checked here, so a bad file fails at start-up naming the file and the field.
        """
        self.engine = engine
        self.chroma_dir = str(chroma_dir) if chroma_dir else None
        self.policies_dir = policies_dir
        self.floor = floor
        self.margin = margin
        self._policies: PolicyFile = _load_policies(policies_dir / "tool_policies.yaml")
        self._references: ReferenceFile = load_model(policies_dir / "references.yaml", ReferenceFile)
        self.permissions = RegistryPermissions.load(engine, policies_dir / "groups.yaml")
        self.vectors = ToolVectors(self.chroma_dir, embeddings)
        self._lock = threading.Lock()
        self._specs: dict[str, dict[tuple[str, str], ToolSpec]] = {}
        self._revision_memo: tuple[tuple[int, ...], str] | None = None
        self.ensure_tables()

    # ------------------------------------------------------------------ storage
    def ensure_tables(self) -> None:
        """Create the catalog tables if needed.

        A read-only database that already has them is fine (a process may start while the business
        database is read-only or a standby).
        """
        try:
            with self.engine.begin() as conn:
                for ddl in DDL:
                    conn.execute(text(ddl))
        except Exception:  # noqa: BLE001 - read-only: tolerate when the tables are already there
            with self.engine.connect() as conn:
                conn.execute(text("SELECT 1 FROM tool_registry WHERE 1 = 0"))

    def _bump_revision(self, conn: Connection) -> None:
        rev = datetime.now().isoformat(timespec="microseconds")
        updated = conn.execute(text("UPDATE tramita_meta SET value = :v WHERE key = 'registry_revision'"), {"v": rev})
        if updated.rowcount == 0:
            conn.execute(text("INSERT INTO tramita_meta (key, value) VALUES ('registry_revision', :v)"), {"v": rev})

    def _file_stamp(self) -> tuple[int, ...] | None:
        """(mtime, size) of an SQLite database file and of its WAL: a commit by any process changes
        one of them. None for a server database, which is asked every time.
        """
        database = self.engine.url.database if self.engine.dialect.name == "sqlite" else None
        if not database or database == ":memory:" or database.startswith("file:"):
            return None
        stamp: list[int] = []
        for path in (database, f"{database}-wal"):
            try:
                st = os.stat(path)
                stamp += [st.st_mtime_ns, st.st_size]
            except OSError:
                stamp += [0, 0]
        return tuple(stamp)

    def revision(self) -> str:
        """The catalog's revision stamp; it changes on every write to the catalog.

        Read on every turn (two or three times), so on an SQLite file it is re-read only when the
        file changed since the last read (a stat instead of a query: a third of a routing turn's
        SQL time). The stamp is taken before the query, so a write racing the read shows next time.
        """
        stamp = self._file_stamp()
        memo = self._revision_memo
        if stamp is not None and memo is not None and memo[0] == stamp:
            return memo[1]
        with self.engine.connect() as conn:
            row = conn.execute(text("SELECT value FROM tramita_meta WHERE key = 'registry_revision'")).first()
        rev = str(row[0]) if row else ""
        if stamp is not None:
            self._revision_memo = (stamp, rev)
        return rev

    def _write_spec(self, conn: Connection, spec: ToolSpec) -> None:
        now = datetime.now().isoformat(timespec="seconds")
        key = {"t": spec.tenant, "n": spec.name}
        for table in ("tool_registry", "tool_examples", "tool_permissions"):
            conn.execute(text(f"DELETE FROM {table} WHERE tenant = :t AND name = :n"), key)
        conn.execute(
            text(
                "INSERT INTO tool_registry (tenant, name, handler, version, description, params_json, enabled,"
                " standard, strict, rules, grp, short_description, embedding_id, updated_at) VALUES"
                " (:t, :n, :handler, :version, :description, :params, :enabled, :standard, :strict, :rules,"
                " :grp, :short, :emb, :now)"
            ),
            {**key, "handler": spec.handler, "version": spec.version, "description": spec.description,
             "params": json.dumps(spec.params, ensure_ascii=False, sort_keys=True), "enabled": int(spec.enabled),
             "standard": int(spec.standard), "strict": int(spec.strict), "rules": spec.rules, "grp": spec.group,
             "short": spec.short_description, "emb": embedding_id(spec), "now": now},
        )
        for seq, example in enumerate(spec.examples):
            conn.execute(text("INSERT INTO tool_examples (tenant, name, seq, example) VALUES (:t, :n, :s, :e)"),
                         {**key, "s": seq, "e": example})
        grants = [("user", u) for u in spec.permissions.users] + [("group", g) for g in spec.permissions.groups]
        for gtype, grantee in grants:
            conn.execute(text("INSERT INTO tool_permissions (tenant, name, grantee_type, grantee) VALUES (:t, :n, :gt, :g)"),
                         {**key, "gt": gtype, "g": grantee})

    def _load_specs(self) -> dict[tuple[str, str], ToolSpec]:
        with self.engine.connect() as conn:
            rows = conn.execute(text("SELECT * FROM tool_registry ORDER BY grp, name")).mappings().all()
            examples = conn.execute(text("SELECT tenant, name, example FROM tool_examples ORDER BY tenant, name, seq")).all()
            grants = conn.execute(text("SELECT tenant, name, grantee_type, grantee FROM tool_permissions")).all()
        ex: dict[tuple[str, str], list[str]] = {}
        for t, n, e in examples:
            ex.setdefault((t, n), []).append(e)
        gr: dict[tuple[str, str], dict[str, list[str]]] = {}
        for t, n, gt, g in grants:
            gr.setdefault((t, n), {"users": [], "groups": []})["users" if gt == "user" else "groups"].append(g)
        specs: dict[tuple[str, str], ToolSpec] = {}
        for r in rows:
            key = (r["tenant"], r["name"])
            specs[key] = ToolSpec(
                name=r["name"], tenant=r["tenant"], handler=r["handler"], version=int(r["version"]),
                description=r["description"], params=json.loads(r["params_json"]), enabled=bool(r["enabled"]),
                standard=bool(r["standard"]), strict=bool(r["strict"]), rules=r["rules"], group=r["grp"],
                short_description=r["short_description"], permissions=Permissions(**gr.get(key, {"users": [], "groups": []})),
                examples=ex.get(key, []),
            )
        return specs

    def specs(self) -> dict[tuple[str, str], ToolSpec]:
        """All stored tools, cached per registry revision (cheap to call every turn)."""
        return self._snapshot()[1]

    def _snapshot(self) -> tuple[str, dict[tuple[str, str], ToolSpec]]:
        """(revision, specs) read with ONE revision query, so a caller that needs both sees one state."""
        rev = self.revision()
        with self._lock:
            cached = self._specs.get(rev)
            if cached is None:
                cached = self._load_specs()
                self._specs = {rev: cached}
            return rev, cached

    # ------------------------------------------------------------------ vectors (tools.registry_index)
    def embeddings(self) -> Embeddings:
        """The embedding model of the tool vectors, created on first use."""
        return self.vectors.embeddings()

    @property
    def _embeddings(self) -> Embeddings | Callable[[], Embeddings] | None:
        """The embedding source; assignable (the registry bench swaps models between runs)."""
        return self.vectors.source

    @_embeddings.setter
    def _embeddings(self, value: Embeddings | Callable[[], Embeddings] | None) -> None:
        self.vectors.source = value

    @property
    def embed_calls(self) -> int:
        """Tools (re)embedded by this registry; the version-bump tests count them."""
        return self.vectors.embed_calls

    @property
    def embedded_texts(self) -> int:
        """Texts sent to the embedding model by this registry."""
        return self.vectors.embedded_texts

    def _collection(self, *, create: bool = True) -> Any:
        return self.vectors.collection(create=create)

    @staticmethod
    def _embedding_id(spec: ToolSpec) -> str:
        return embedding_id(spec)

    # ------------------------------------------------------------------ sync and catalog commands
    def sync(self, path: Path | None = None, *, embed: bool = True) -> SyncReport:
        """Load the standard tools from YAML.

        Never overwrites or deletes a custom tool; a higher version replaces the row and re-embeds;
        an equal version changes nothing. Every check runs before any write.
        """
        path = path or self.policies_dir / "tools.yaml"
        tool_file = load_tool_file(path)
        handlers: set[str] = set()
        for spec in tool_file.tools:  # every check before any write: a bad file changes nothing
            self._check_references(path, spec)
            if spec.handler not in handlers:
                self._check_handler(path, spec)
                handlers.add(spec.handler)
        stored = self._load_specs()
        report = SyncReport()
        changed: list[ToolSpec] = []
        with self.engine.begin() as conn:
            for spec in tool_file.tools:
                spec = spec.model_copy(update={"standard": True})
                key = (spec.tenant, spec.name)
                old = stored.get(key)
                if old is not None and not old.standard:
                    report.kept_custom.append(spec.name)
                    continue
                if old is None:
                    report.added.append(spec.name)
                elif spec.version > old.version:
                    # keep run-time admin changes (enabled flag, grants) across version bumps
                    spec = spec.model_copy(update={"enabled": old.enabled, "permissions": old.permissions})
                    report.updated.append(spec.name)
                elif spec.version < old.version:
                    report.stale_yaml.append(spec.name)
                    continue
                else:
                    report.unchanged.append(spec.name)
                    continue
                self._write_spec(conn, spec)
                changed.append(spec)
            if changed:
                self._bump_revision(conn)
        if embed:
            report.embedded = self.vectors.embed(list(self._load_specs().values()))
        return report

    def _check_references(self, path: Path, spec: ToolSpec) -> None:
        """Every `x-resolve` kind must be in references.yaml, with the table.column of `x-references`."""
        refs_path = self.policies_dir / "references.yaml"
        kinds = self._references.kinds
        for pname, schema in spec.properties.items():
            kind = schema.get("x-resolve")
            if kind is None:
                continue
            where = f"{path}: tool {spec.name!r}: field params.properties.{pname}.x-resolve"
            if not isinstance(kind, str) or kind not in kinds:
                raise RegistryError(f"{where}: unknown reference kind {kind!r}; {refs_path} defines: "
                                    f"{', '.join(sorted(kinds)) or 'none'}")
            reference = schema.get("x-references")
            if reference is not None and reference != kinds[kind].reference:
                raise RegistryError(f"{where}: kind {kind!r} looks up {kinds[kind].reference} ({refs_path}), "
                                    f"but x-references is {reference!r}")

    @staticmethod
    def _check_handler(path: Path, spec: ToolSpec) -> None:
        """A handler that does not import fails the file now, not the first confirmed write."""
        try:
            resolve_handler(spec.handler)
        except RegistryError as exc:
            raise RegistryError(f"{path}: tool {spec.name!r}: field handler: {exc}") from exc

    def add(self, path: Path) -> list[str]:
        """Add (or update) custom tools from a YAML file; a standard tool's name is refused."""
        tool_file = load_tool_file(path)
        stored = self._load_specs()
        added = []
        with self.engine.begin() as conn:
            for spec in tool_file.tools:
                old = stored.get((spec.tenant, spec.name))
                if old is not None and old.standard:
                    raise RegistryError(f"{path}: tool {spec.name!r}: field name: a standard tool has this name")
                self._check_handler(path, spec)
                self._check_references(path, spec)
                spec = spec.model_copy(update={"standard": False})
                self._write_spec(conn, spec)
                added.append(spec.name)
            self._bump_revision(conn)
        self.vectors.embed([s for s in self._load_specs().values() if s.name in added])
        return added

    def get(self, name: str, tenant: str = "*") -> ToolSpec:
        """The tool `name` of `tenant` (or of every tenant); RegistryError listing the known tools."""
        specs = self.specs()
        spec = specs.get((tenant, name)) or specs.get(("*", name))
        if spec is None:
            known = sorted({n for _, n in specs})
            raise RegistryError(f"unknown tool {name!r}; known tools: {', '.join(known) or 'none (run tramita ingest)'}")
        return spec

    def set_enabled(self, name: str, enabled: bool, tenant: str = "*") -> None:
        """Enable or disable a tool; a disabled tool is never shown, matched or run."""
        spec = self.get(name, tenant)
        with self.engine.begin() as conn:
            conn.execute(text("UPDATE tool_registry SET enabled = :e WHERE tenant = :t AND name = :n"),
                         {"e": int(enabled), "t": spec.tenant, "n": name})
            self._bump_revision(conn)

    def grant(self, name: str, *, user: str | None = None, group: str | None = None, tenant: str = "*") -> None:
        """Grant the tool to one user or one group."""
        self._change_grant(name, user, group, tenant, add=True)

    def revoke(self, name: str, *, user: str | None = None, group: str | None = None, tenant: str = "*") -> None:
        """Revoke a user grant or a group grant of the tool."""
        self._change_grant(name, user, group, tenant, add=False)

    def _change_grant(self, name: str, user: str | None, group: str | None, tenant: str, *, add: bool) -> None:
        if (user is None) == (group is None):
            raise RegistryError("give exactly one of --user ID or --group G")
        if group is not None and group not in self.permissions.groups:
            raise RegistryError(f"unknown group {group!r}; groups: {', '.join(self.permissions.groups)}")
        spec = self.get(name, tenant)
        gtype, grantee = ("user", user) if user is not None else ("group", group)
        params = {"t": spec.tenant, "n": name, "gt": gtype, "g": grantee}
        with self.engine.begin() as conn:
            conn.execute(text("DELETE FROM tool_permissions WHERE tenant = :t AND name = :n AND grantee_type = :gt"
                              " AND grantee = :g"), params)
            if add:
                conn.execute(text("INSERT INTO tool_permissions (tenant, name, grantee_type, grantee)"
                                  " VALUES (:t, :n, :gt, :g)"), params)
            self._bump_revision(conn)

    def list(self, filter_text: str = "", *, user_id: str | None = None, tenant: str = "*") -> list[tuple[ToolSpec, bool]]:
        """(spec, permitted-for-user) pairs whose name/descriptions/group contain `filter_text`."""
        needle = filter_text.lower()
        out = []
        for spec in self.specs().values():
            if tenant != "*" and spec.tenant not in (tenant, "*"):
                continue
            hay = " ".join([spec.name, spec.short_description, spec.description, spec.group]).lower()
            if needle and needle not in hay:
                continue
            out.append((spec, self.is_permitted(spec, user_id) if user_id else False))
        return sorted(out, key=lambda p: (p[0].group, p[0].name))

    # ------------------------------------------------------------------ policy and permissions
    def policy(self, name: str) -> ToolPolicy:
        """The execution policy of `name` (tool_policies.yaml defaults merged with its entry)."""
        return self._policies.for_tool(name)

    def user_groups(self, user_id: str) -> frozenset[str]:
        """Groups the user belongs to; `all: true` groups need the user in the directory of groups.yaml."""
        return self.permissions.user_groups(user_id)

    def required_groups(self, spec: ToolSpec) -> builtins.list[str]:
        """The groups granted `spec`."""
        return self.permissions.required_groups(spec)

    def is_permitted(self, spec: ToolSpec, user_id: str | None) -> bool:
        """DTA rule: a user grant or a group grant; a tool with no grant is usable by nobody."""
        return self.permissions.is_permitted(spec, user_id)

    # ------------------------------------------------------------------ matching
    def visible(self, tenant: str = "*") -> builtins.list[ToolSpec]:
        """Enabled tools of the tenant: the only ones ever shown to the LLM or matched."""
        return _visible(self.specs(), tenant)

    def _matrix(self, tenant: str, snapshot: tuple[str, dict[tuple[str, str], ToolSpec]] | None = None) -> ToolIndex:
        rev, specs = snapshot or self._snapshot()
        return self.vectors.index(tenant, rev, _visible(specs, tenant))

    def score(self, query_vector: Iterable[float], tenant: str = "*", k: int | None = None) -> builtins.list[tuple[str, float]]:
        """Per tool, the best cosine of the query against its vectors; best tool first."""
        return self._matrix(tenant).rank(query_vector, k)

    def match(self, message: str, user_id: str, tenant: str = "*", k: int = 3,
              query_vector: builtins.list[float] | None = None) -> MatchResult:
        """The margin rule (`decide`) over the enabled tools of the tenant.

        As of the revision read after embedding the message. Permissions: one group lookup for the
        user, at most.
        """
        vec = query_vector if query_vector is not None else self.embeddings().embed_query(message)
        snapshot = self._snapshot()
        ranked = self._matrix(tenant, snapshot).rank(vec, k)
        permitted = self.permissions.checker(snapshot[1], tenant, user_id)
        return decide(ranked, permitted, floor=self.floor, margin=self.margin, k=k)


def _load_policies(path: Path) -> PolicyFile:
    """tool_policies.yaml with every tool's entry validated now (errors name file, tool and field)."""
    policies: PolicyFile = load_model(path, PolicyFile)
    for name in policies.policies:
        try:
            policies.for_tool(name)
        except ValidationError as exc:
            lines = [f"{path}: tool {name!r}: field policies.{name}.{'.'.join(map(str, e['loc']))}: {e['msg']}"
                     for e in exc.errors()]
            raise RegistryError("\n".join(lines)) from exc
    return policies


def _visible(specs: Mapping[tuple[str, str], ToolSpec], tenant: str) -> list[ToolSpec]:
    return [s for s in specs.values() if s.enabled and (s.tenant == "*" or tenant in ("*", s.tenant))]
