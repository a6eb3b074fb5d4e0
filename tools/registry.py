"""The tool registry (Protheus DTA's HZV/HZZ tables): storage, sync, embeddings, permissions, matching.

Rows live in the business SQL database (`tool_registry`, `tool_examples`, `tool_permissions`) so that
every process sharing that database (CLI, `langgraph dev`, several servers) sees the same catalog;
a `registry_revision` counter in `tramita_meta` tells each process when to reload its cache. The
vectors live in a Chroma collection keyed by `tenant:name:vVERSION`, so an unchanged version is never
re-embedded and a higher version gets a new vector.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from sqlalchemy import Connection, Engine, text

from tools.registry_models import (
    GroupFile,
    Permissions,
    PolicyFile,
    RegistryError,
    ToolPolicy,
    ToolSpec,
    load_model,
    load_tool_file,
)
from tramita.paths import POLICIES_DIR

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

log = logging.getLogger("tramita.registry")
COLLECTION = "tool_registry"
_VEC_SUFFIX = re.compile(r":(d|e\d+)$")  # description / example vectors beside the HZV vector


@dataclass
class SyncReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    kept_custom: list[str] = field(default_factory=list)
    stale_yaml: list[str] = field(default_factory=list)  # YAML version lower than the stored one
    embedded: list[str] = field(default_factory=list)


@dataclass
class Candidate:
    name: str
    score: float
    permitted: bool


@dataclass
class MatchResult:
    """Top candidates plus the margin rule's verdict.

    `decision` is "clear" (top permitted candidate wins by the margin), "close" (the LLM should
    choose among `candidates`), "denied" (the clear winner is a tool the user may not use) or
    "none" (below the floor: not a tool request).
    """

    candidates: list[Candidate]
    decision: str
    best: str | None = None


@dataclass
class ToolIndex:
    """The visible tools' unit vectors, grouped by tool and built once per registry revision.

    Scoring a query is one matrix-vector product plus one segmented max (`np.maximum.reduceat`);
    only the top `k` tools are sorted and turned into Python objects, so the per-call cost does not
    grow with Python work per tool (10,000 tools: see benchmarks/registry_bench.py).
    """

    revision: str
    names: list[str]  # one per tool that has vectors, in row-group order
    offsets: np.ndarray  # first row of each tool's group (for np.maximum.reduceat)
    matrix: np.ndarray  # unit vectors, grouped by tool

    @classmethod
    def build(cls, revision: str, groups: Mapping[str, Sequence[Sequence[float] | np.ndarray]]) -> ToolIndex:
        """`groups`: tool name → its vectors (any norm; they are normalised here)."""
        names = [n for n, vecs in groups.items() if len(vecs)]
        if not names:
            return cls(revision, [], np.zeros(0, dtype=np.int64), np.zeros((0, 1), dtype=np.float32))
        sizes = [len(groups[n]) for n in names]
        offsets = np.cumsum([0, *sizes[:-1]]).astype(np.int64)
        matrix = np.ascontiguousarray(np.vstack([np.asarray(v, dtype=np.float32) for n in names for v in groups[n]]))
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True) + 1e-12
        return cls(revision, names, offsets, matrix)

    def rank(self, query_vector: Iterable[float] | np.ndarray, k: int | None = None) -> builtins.list[tuple[str, float]]:
        """Per tool, the best cosine of the query against its vectors; best first (top `k` only)."""
        if not self.names:
            return []
        q = np.asarray(query_vector if isinstance(query_vector, np.ndarray) else list(query_vector), dtype=np.float32)
        q = q / (np.linalg.norm(q) + 1e-12)
        with _BLAS_LOCK, _one_blas_thread():
            cosines = self.matrix @ q
        best = np.maximum.reduceat(cosines, self.offsets)
        if k is not None and 0 < k < len(best):
            top = np.argpartition(-best, k - 1)[:k]
            order = top[np.argsort(-best[top], kind="stable")]
        else:
            order = np.argsort(-best, kind="stable")
        return [(self.names[i], float(best[i])) for i in order]


_BLAS_LOCK = threading.Lock()
_blas_controller: Any = None  # threadpoolctl's controller of numpy's BLAS; False when unavailable


def _one_blas_thread() -> contextlib.AbstractContextManager[Any]:
    """Run one matrix-vector product on a single BLAS thread. OpenBLAS splits even a 6,000 x 384
    product across both cores, and when the other core is busy (llama.cpp, e5, another process)
    the product waits for it: 12 ms instead of 0.2 ms measured on the 2-core box. The product is
    memory-bound, so one thread loses nothing when the machine is idle. threadpoolctl comes with
    scikit-learn (a sentence-transformers dependency); without it BLAS keeps its own setting."""
    global _blas_controller
    if _blas_controller is None:
        try:
            from threadpoolctl import ThreadpoolController

            _blas_controller = ThreadpoolController().select(user_api="blas")
        except Exception:  # noqa: BLE001 - optional speed-up only
            _blas_controller = False
    return _blas_controller.limit(limits=1) if _blas_controller else contextlib.nullcontext()


def decide(ranked: Sequence[tuple[str, float]], permitted: Callable[[str], bool], *, floor: float, margin: float,
           k: int = 3) -> MatchResult:
    """The margin rule over ranked (tool, score) pairs: e5 scores bunch together, so a fixed
    cut-off fails; the top tool is accepted when it clears `floor` and beats the runner-up by
    `margin`. Kept free of storage so benchmarks score held-out examples with the same rule."""
    cands = [Candidate(n, s, permitted(n)) for n, s in ranked[:k]]
    if not cands or cands[0].score < floor:
        return MatchResult(cands, "none")
    top = cands[0]
    runner = cands[1].score if len(cands) > 1 else 0.0
    if top.score - runner >= margin:
        return MatchResult(cands, "clear" if top.permitted else "denied", top.name)
    close = [c for c in cands if top.score - c.score < margin]
    permitted_close = [c for c in close if c.permitted]
    if not permitted_close:
        return MatchResult(cands, "denied", top.name)
    return MatchResult(cands, "close", permitted_close[0].name)


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
    """Catalog operations. Every public method is also a `tramita tools …` command."""

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
        self.engine = engine
        self.chroma_dir = str(chroma_dir) if chroma_dir else None
        self._embeddings = embeddings
        self.policies_dir = policies_dir
        self.floor = floor
        self.margin = margin
        self._policies: PolicyFile = load_model(policies_dir / "tool_policies.yaml", PolicyFile)
        self._groups: GroupFile = load_model(policies_dir / "groups.yaml", GroupFile)
        self._lock = threading.Lock()
        self._index: dict[str, ToolIndex] = {}
        self._specs: dict[str, dict[tuple[str, str], ToolSpec]] = {}
        self.embed_calls = 0  # tools (re)embedded; the version-bump test counts them
        self.embedded_texts = 0
        self.ensure_tables()

    # ------------------------------------------------------------------ storage
    def ensure_tables(self) -> None:
        """Create the catalog tables if needed. A read-only database that already has them is fine
        (a process may start while the business database is read-only or a standby)."""
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

    def revision(self) -> str:
        with self.engine.connect() as conn:
            row = conn.execute(text("SELECT value FROM tramita_meta WHERE key = 'registry_revision'")).first()
        return str(row[0]) if row else ""

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
             "short": spec.short_description, "emb": self._embedding_id(spec), "now": now},
        )
        for seq, example in enumerate(spec.examples):
            conn.execute(text("INSERT INTO tool_examples (tenant, name, seq, example) VALUES (:t, :n, :s, :e)"),
                         {**key, "s": seq, "e": example})
        grants = [("user", u) for u in spec.permissions.users] + [("group", g) for g in spec.permissions.groups]
        for gtype, grantee in grants:
            conn.execute(text("INSERT INTO tool_permissions (tenant, name, grantee_type, grantee) VALUES (:t, :n, :gt, :g)"),
                         {**key, "gt": gtype, "g": grantee})

    @staticmethod
    def _embedding_id(spec: ToolSpec) -> str:
        return f"{spec.tenant}:{spec.name}:v{spec.version}"

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

    # ------------------------------------------------------------------ embeddings
    def embeddings(self) -> Embeddings:
        if self._embeddings is None:
            from tools.embeddings import make_embeddings

            self._embeddings = make_embeddings()
        if not isinstance(self._embeddings, Embeddings):
            self._embeddings = self._embeddings()
        return self._embeddings

    def _collection(self, *, create: bool = True) -> Any:
        if self.chroma_dir is None:
            raise RegistryError("no Chroma directory configured for tool embeddings")
        from tools.chroma_client import chroma_client

        client = chroma_client(self.chroma_dir, create=create)
        if not create:
            return client.get_collection(COLLECTION, embedding_function=None)
        return client.get_or_create_collection(COLLECTION, metadata={"hnsw:space": "cosine"}, embedding_function=None)

    def _vectors_in_memory(self, specs: builtins.list[ToolSpec], cause: Exception) -> dict[str, builtins.list[Any]]:
        """Fallback when the Chroma store of tool vectors is missing or corrupt: embed the enabled
        tools' texts in this process (a few dozen texts for a normal catalog) so transactions keep
        working; `tramita doctor` still reports the broken store and `tramita tools sync` repairs it."""
        log.warning("tool vectors unavailable (%s); embedding %d tools in memory", cause, len(specs))
        texts: builtins.list[str] = []
        owners: builtins.list[str] = []
        for spec in specs:
            for t in [spec.embedding_text(), spec.description, *spec.examples]:
                texts.append(t)
                owners.append(spec.name)
        vectors = self.embeddings().embed_documents(texts) if texts else []
        groups: dict[str, builtins.list[Any]] = {}
        for name, vec in zip(owners, vectors, strict=True):
            groups.setdefault(name, []).append(vec)
        return groups

    def _embed_specs(self, specs: list[ToolSpec]) -> list[str]:
        """Embed the tools whose current version has no vectors yet; returns their names.

        Each tool gets its HZV_EMBEDD vector (description + all examples, as the catalog defines)
        plus one vector per example (HZZ) and one for the description alone. Matching takes the
        best of them: e5's scores bunch together, and nearest-example matching separates close
        tools (approve vs. reject vs. status of an expense) far better than one averaged vector.
        """
        if not specs:
            return []
        col = self._collection()
        ids = [self._embedding_id(s) for s in specs]
        # Chroma turns ids and `$in` lists into SQL variables: 10,000 names in one `$in` fail with
        # "too many SQL variables", so every lookup goes in batches
        have = {i for chunk in _batches(ids) for i in col.get(ids=chunk, include=[])["ids"]}
        todo = [s for s in specs if self._embedding_id(s) not in have]
        if not todo:
            return []
        texts: list[str] = []
        vec_ids: list[str] = []
        metas: list[dict[str, Any]] = []
        for s in todo:
            base = self._embedding_id(s)
            for suffix, text_ in [("", s.embedding_text()), (":d", s.description), *[(f":e{i}", e) for i, e in enumerate(s.examples)]]:
                texts.append(text_)
                vec_ids.append(base + suffix)
                metas.append({"tenant": s.tenant, "name": s.name, "version": s.version, "kind": suffix[1:2] or "hzv"})
        vectors = self.embeddings().embed_documents(texts)
        self.embed_calls += len(todo)
        self.embedded_texts += len(texts)
        keys = {(s.tenant, s.name) for s in todo}
        stale: list[str] = []
        for chunk in _batches(sorted({s.name for s in todo})):
            old = col.get(where={"name": {"$in": chunk}}, include=["metadatas"])
            stale += [i for i, m in zip(old["ids"], old["metadatas"] or [], strict=False)
                      if m and (m.get("tenant"), m.get("name")) in keys]
        for chunk in _batches(stale):
            col.delete(ids=chunk)
        for start in range(0, len(vec_ids), _BATCH):
            end = start + _BATCH
            col.upsert(ids=vec_ids[start:end], embeddings=[list(map(float, v)) for v in vectors[start:end]],
                       metadatas=metas[start:end], documents=texts[start:end])
        return [s.name for s in todo]

    # ------------------------------------------------------------------ sync and catalog commands
    def sync(self, path: Path | None = None, *, embed: bool = True) -> SyncReport:
        """Load the standard tools from YAML. Never overwrites or deletes a custom tool; a higher
        version replaces the row and re-embeds; an equal version changes nothing."""
        path = path or self.policies_dir / "tools.yaml"
        tool_file = load_tool_file(path)
        handlers: set[str] = set()
        for spec in tool_file.tools:  # every check before any write: a bad file changes nothing
            self._check_policy(spec)
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
            report.embedded = self._embed_specs([s for s in self._load_specs().values()])
        return report

    def _check_policy(self, spec: ToolSpec) -> None:
        policy = self.policy(spec.name)
        unknown = [p for p in policy.requires if p not in spec.properties]
        if unknown:
            raise RegistryError(f"{self.policies_dir / 'tool_policies.yaml'}: tool {spec.name!r}: field requires: "
                                f"unknown parameters {unknown}")

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
                spec = spec.model_copy(update={"standard": False})
                self._check_policy(spec)
                self._write_spec(conn, spec)
                added.append(spec.name)
            self._bump_revision(conn)
        self._embed_specs([s for s in self._load_specs().values() if s.name in added])
        return added

    def get(self, name: str, tenant: str = "*") -> ToolSpec:
        specs = self.specs()
        spec = specs.get((tenant, name)) or specs.get(("*", name))
        if spec is None:
            known = sorted({n for _, n in specs})
            raise RegistryError(f"unknown tool {name!r}; known tools: {', '.join(known) or 'none (run tramita ingest)'}")
        return spec

    def set_enabled(self, name: str, enabled: bool, tenant: str = "*") -> None:
        spec = self.get(name, tenant)
        with self.engine.begin() as conn:
            conn.execute(text("UPDATE tool_registry SET enabled = :e WHERE tenant = :t AND name = :n"),
                         {"e": int(enabled), "t": spec.tenant, "n": name})
            self._bump_revision(conn)

    def grant(self, name: str, *, user: str | None = None, group: str | None = None, tenant: str = "*") -> None:
        self._change_grant(name, user, group, tenant, add=True)

    def revoke(self, name: str, *, user: str | None = None, group: str | None = None, tenant: str = "*") -> None:
        self._change_grant(name, user, group, tenant, add=False)

    def _change_grant(self, name: str, user: str | None, group: str | None, tenant: str, *, add: bool) -> None:
        if (user is None) == (group is None):
            raise RegistryError("give exactly one of --user ID or --group G")
        if group is not None and group not in self._groups.groups:
            raise RegistryError(f"unknown group {group!r}; groups: {', '.join(sorted(self._groups.groups))}")
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

    # ------------------------------------------------------------------ permissions
    def policy(self, name: str) -> ToolPolicy:
        return self._policies.for_tool(name)

    def user_groups(self, user_id: str) -> frozenset[str]:
        """Groups the user belongs to; `all: true` groups need the user to exist as an employee."""
        exists = self._employee_exists(user_id)
        groups = {g for g, spec in self._groups.groups.items() if (spec.all and exists) or user_id in spec.members}
        return frozenset(groups)

    def _employee_exists(self, user_id: str) -> bool:
        try:
            with self.engine.connect() as conn:
                return conn.execute(text("SELECT 1 FROM employees WHERE employee_id = :u"), {"u": user_id}).first() is not None
        except Exception:  # noqa: BLE001 - no employees table: a registry-only database
            return False

    def required_groups(self, spec: ToolSpec) -> builtins.list[str]:
        return list(spec.permissions.groups)

    def is_permitted(self, spec: ToolSpec, user_id: str | None) -> bool:
        """DTA rule: a user grant or a group grant; a tool with no grant is usable by nobody."""
        if not user_id:
            return False
        if user_id in spec.permissions.users:
            return True
        return bool(self.user_groups(user_id) & set(spec.permissions.groups))

    # ------------------------------------------------------------------ matching
    def visible(self, tenant: str = "*") -> builtins.list[ToolSpec]:
        """Enabled tools of the tenant: the only ones ever shown to the LLM or matched."""
        return _visible(self.specs(), tenant)

    def _matrix(self, tenant: str, snapshot: tuple[str, dict[tuple[str, str], ToolSpec]] | None = None) -> ToolIndex:
        rev, specs = snapshot or self._snapshot()
        with self._lock:
            idx = self._index.get(tenant)
            if idx is not None and idx.revision == rev:
                return idx
        wanted = {self._embedding_id(s): s for s in _visible(specs, tenant)}
        groups: dict[str, list[np.ndarray]] = {}
        if wanted:
            # The collection holds tool vectors only, so read it all, page by page: a `$in` over
            # 10,000 names, or one unpaged read of 60,000 vectors, fails inside Chroma with
            # "too many SQL variables".
            try:
                col = self._collection(create=False)
                for offset in range(0, col.count(), _PAGE):
                    got = col.get(include=["embeddings"], limit=_PAGE, offset=offset)
                    vectors = got["embeddings"] if got["embeddings"] is not None else []
                    for vid, vec in zip(got["ids"], vectors, strict=True):
                        spec = wanted.get(_VEC_SUFFIX.sub("", vid))
                        if spec is not None:
                            groups.setdefault(spec.name, []).append(vec)
            except Exception as exc:  # noqa: BLE001 - Chroma missing/corrupt: degrade, do not stop transactions
                groups = self._vectors_in_memory(list(wanted.values()), exc)
        idx = ToolIndex.build(rev, groups)
        with self._lock:
            self._index[tenant] = idx
        return idx

    def score(self, query_vector: Iterable[float], tenant: str = "*", k: int | None = None) -> builtins.list[tuple[str, float]]:
        """Per tool, the best cosine of the query against its vectors; best tool first."""
        return self._matrix(tenant).rank(query_vector, k)

    def match(self, message: str, user_id: str, tenant: str = "*", k: int = 3,
              query_vector: builtins.list[float] | None = None) -> MatchResult:
        """The margin rule (`decide`) over the enabled tools of the tenant, as of the revision read
        after embedding the message. Permissions: one group lookup for the user, at most."""
        vec = query_vector if query_vector is not None else self.embeddings().embed_query(message)
        snapshot = self._snapshot()
        specs = snapshot[1]
        ranked = self._matrix(tenant, snapshot).rank(vec, k)
        groups: list[frozenset[str]] = []

        def permitted(name: str) -> bool:
            spec = specs.get((tenant, name)) or specs.get(("*", name))
            if spec is None or not user_id:
                return False
            if user_id in spec.permissions.users:
                return True
            if not groups:
                groups.append(self.user_groups(user_id))
            return bool(groups[0] & set(spec.permissions.groups))

        return decide(ranked, permitted, floor=self.floor, margin=self.margin, k=k)


_BATCH = 500
_PAGE = 5000


def _batches(items: Sequence[str], size: int = _BATCH) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start:start + size])


def _visible(specs: Mapping[tuple[str, str], ToolSpec], tenant: str) -> list[ToolSpec]:
    return [s for s in specs.values() if s.enabled and (s.tenant == "*" or tenant in ("*", s.tenant))]
