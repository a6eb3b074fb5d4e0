"""Import an MCP server's tools into the tool registry as custom tools (`tramita tools import-mcp`).

Why import instead of calling MCP tools live: a registry tool is governed (enabled flag, grants,
policy, embedding match, confirmation, audit, idempotency). An MCP server is a second party, so
each of its tools enters that machinery the same way a hand-written one does, and starts closed:

- DISABLED, with no grant (deny by default); an administrator enables and grants it.
- A tool is a WRITE unless the server says `readOnlyHint: true` and not `destructiveHint: true`
  (a missing hint is a write). Writes run like every business write: summary, explicit yes, one
  audit_log row and an idempotency key (`tools.business.mcp_handler`, `tools.business.audit.run_write`).
  The registry's policy for an imported tool is `policies/tool_policies.yaml`'s defaults (write, with
  confirmation) until the administrator gives it an entry; the import report says which tools are
  read-only candidates for `{require_confirmation: false, operation_type: read}`.
- Re-importing compares a digest of (description, input schema, annotations): an unchanged tool is
  left alone, a changed one gets version + 1 and is the only one re-embedded (`Registry.add` embeds
  versions that have no vectors yet). Admin choices (enabled, grants) survive a version bump, except
  that a tool that became a write is disabled again. A tool gone from the server is disabled.

The server's tools are read through `langchain-mcp-adapters` (stdio transport only: an HTTP MCP
server would need the SSRF guard, which is not wired here). What the handler needs to call a tool
later (server command, remote name, input schema, operation type) is stored in the `mcp_tools`
table of the business database, next to the registry's own tables, so every process sees it. The
config stores the NAMES of environment variables passed to the server, never their values.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import Engine, text

from tools.http_guard import run_sync
from tramita.base.policyfile import PolicyError, load_model

if TYPE_CHECKING:
    from tools.registry import Registry

__all__ = [
    "HANDLER_PREFIX",
    "MCP_DDL",
    "Binding",
    "ImportReport",
    "McpConfig",
    "RemoteTool",
    "call_tool",
    "import_mcp",
    "list_remote_tools",
    "load_binding",
    "load_bindings",
    "probe_server",
    "registry_name",
]

HANDLER_PREFIX = "tools.business.mcp_handler:McpTools."
MCP_DDL = """CREATE TABLE IF NOT EXISTS mcp_tools (
    tenant TEXT NOT NULL, name TEXT NOT NULL, server TEXT NOT NULL, remote_name TEXT NOT NULL,
    operation_type TEXT NOT NULL, annotations_json TEXT NOT NULL, input_schema_json TEXT NOT NULL,
    connection_json TEXT NOT NULL, timeout_seconds REAL NOT NULL, digest TEXT NOT NULL,
    remote_digest TEXT NOT NULL, version INTEGER NOT NULL, imported_at TEXT NOT NULL,
    PRIMARY KEY (tenant, name))"""
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")


# ------------------------------------------------------------------------------ configuration

class ToolOverride(BaseModel):
    """What an administrator adds to one imported tool (MCP has no examples or short labels)."""

    model_config = ConfigDict(extra="forbid")
    examples: list[str] = Field(default_factory=list)
    short_description: str = Field(default="", max_length=80)


class ServerConfig(BaseModel):
    """One MCP server started over stdio."""

    model_config = ConfigDict(extra="forbid")
    transport: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    cwd: str | None = None
    env_passthrough: list[str] = Field(default_factory=list, description="names of variables passed to the server")
    timeout_seconds: float = Field(default=30.0, gt=0, le=300)
    group: str = "mcp"
    tools: dict[str, ToolOverride] = Field(default_factory=dict)

    @field_validator("env_passthrough")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        bad = [v for v in value if not _ENV_NAME.match(v)]
        if bad:
            raise ValueError(f"not environment variable names: {bad}")
        return value


class McpConfig(BaseModel):
    """The file `tramita tools import-mcp` reads: servers by name."""

    model_config = ConfigDict(extra="forbid")
    servers: dict[str, ServerConfig] = Field(min_length=1)

    @field_validator("servers")
    @classmethod
    def _server_names(cls, value: dict[str, ServerConfig]) -> dict[str, ServerConfig]:
        bad = [k for k in value if not re.match(r"^[a-z][a-z0-9_]{0,23}$", k)]
        if bad:
            raise ValueError(f"server names must be snake_case, at most 24 characters: {bad}")
        return value


def connection(server: ServerConfig, base: Path | None = None) -> dict[str, Any]:
    """The langchain-mcp-adapters stdio connection; env values are read from the environment now."""
    import os

    cwd = server.cwd
    if cwd is not None and base is not None and not Path(cwd).is_absolute():
        cwd = str((base / cwd).resolve())
    env = {n: os.environ[n] for n in server.env_passthrough if n in os.environ}
    conn: dict[str, Any] = {"transport": "stdio", "command": server.command, "args": list(server.args)}
    if cwd:
        conn["cwd"] = cwd
    if env:
        conn["env"] = env
    return conn


# ------------------------------------------------------------------------------ remote tools

@dataclass
class RemoteTool:
    """One tool as the server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any]

    @property
    def operation_type(self) -> str:
        """Read only when the server says read-only and not destructive; anything else is a write."""
        ann = self.annotations
        return "read" if ann.get("readOnlyHint") is True and ann.get("destructiveHint") is not True else "write"

    def digest(self) -> str:
        """What a re-import compares: description, input schema and annotations."""
        blob = json.dumps({"d": self.description, "s": self.input_schema, "a": self.annotations}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:24]


async def _alist(name: str, conn: dict[str, Any], timeout: float) -> list[RemoteTool]:
    from langchain_mcp_adapters.client import MultiServerMCPClient

    client = MultiServerMCPClient({name: conn})  # type: ignore[dict-item]
    with anyio.fail_after(timeout):
        tools = await client.get_tools(server_name=name)
    out = []
    for t in tools:
        schema = t.args_schema if isinstance(t.args_schema, dict) else {}
        ann = {k: v for k, v in (t.metadata or {}).items() if not k.startswith("_") and v is not None}
        out.append(RemoteTool(t.name, t.description or "", dict(schema), ann))
    return out


def list_remote_tools(name: str, server: ServerConfig, base: Path | None = None) -> list[RemoteTool]:
    """The server's tools (starts it over stdio, lists, stops it)."""
    conn = connection(server, base)
    return list(run_sync(lambda: _alist(name, conn, server.timeout_seconds)))


async def _acall(binding: Binding, args: dict[str, Any]) -> Any:
    from langchain_mcp_adapters.client import MultiServerMCPClient

    conn = dict(binding.connection)
    import os

    names = conn.pop("env_passthrough", [])
    env = {n: os.environ[n] for n in names if n in os.environ}
    if env:
        conn["env"] = env
    client = MultiServerMCPClient({binding.server: conn})  # type: ignore[dict-item]
    with anyio.fail_after(binding.timeout_seconds):
        async with client.session(binding.server) as session:
            return await session.call_tool(binding.remote_name, args)


def call_tool(binding: Binding, args: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """Call the bound tool once; (text of its content, structured content). Raises on a tool error."""
    result = run_sync(lambda: _acall(binding, args))
    texts = [str(getattr(c, "text", "")) for c in (result.content or []) if getattr(c, "type", "") == "text"]
    body = " ".join(t for t in texts if t).strip()
    if result.isError:
        raise RuntimeError(f"the MCP tool reported an error: {body[:300] or '(no message)'}")
    structured = result.structuredContent if isinstance(result.structuredContent, dict) else None
    return body, structured


# ------------------------------------------------------------------------------ bindings

@dataclass
class Binding:
    """What the handler needs to call an imported tool."""

    tenant: str
    name: str
    server: str
    remote_name: str
    operation_type: str
    annotations: dict[str, Any]
    input_schema: dict[str, Any]
    connection: dict[str, Any]
    timeout_seconds: float
    digest: str
    remote_digest: str
    version: int


def _ensure(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text(MCP_DDL))


def load_bindings(engine: Engine) -> dict[str, Binding]:
    """Every binding by registry name (none when the table does not exist yet)."""
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT * FROM mcp_tools")).mappings().all()
    except Exception:  # noqa: BLE001 - no table: nothing imported yet
        return {}
    return {r["name"]: Binding(r["tenant"], r["name"], r["server"], r["remote_name"], r["operation_type"],
                               json.loads(r["annotations_json"]), json.loads(r["input_schema_json"]),
                               json.loads(r["connection_json"]), float(r["timeout_seconds"]), r["digest"],
                               r["remote_digest"], int(r["version"])) for r in rows}


def load_binding(engine: Engine, name: str) -> Binding | None:
    """The binding of registry tool `name`, or None."""
    return load_bindings(engine).get(name)


def _save_binding(engine: Engine, b: Binding) -> None:
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM mcp_tools WHERE tenant = :t AND name = :n"), {"t": b.tenant, "n": b.name})
        conn.execute(text(
            "INSERT INTO mcp_tools (tenant, name, server, remote_name, operation_type, annotations_json, "
            "input_schema_json, connection_json, timeout_seconds, digest, remote_digest, version, imported_at) VALUES "
            "(:t, :n, :s, :r, :o, :a, :i, :c, :to, :d, :rd, :v, :at)"),
            {"t": b.tenant, "n": b.name, "s": b.server, "r": b.remote_name, "o": b.operation_type,
             "a": json.dumps(b.annotations, sort_keys=True), "i": json.dumps(b.input_schema, sort_keys=True),
             "c": json.dumps(b.connection, sort_keys=True), "to": b.timeout_seconds, "d": b.digest, "rd": b.remote_digest, "v": b.version,
             "at": datetime.now().isoformat(timespec="seconds")})


# ------------------------------------------------------------------------------ import

def registry_name(server: str, tool: str) -> str:
    """`mcp_<server>_<tool>` in the registry's snake_case, at most 64 characters."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", tool)
    snake = re.sub(r"[^a-z0-9]+", "_", snake.lower()).strip("_") or "tool"
    return f"mcp_{server}_{snake}"[:64].rstrip("_")


def _param_schema(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """A property schema the registry accepts (it needs a `type`): Optional[X] unwrapped."""
    out = {k: v for k, v in schema.items() if k not in ("title",)}
    if "type" not in out and isinstance(out.get("anyOf"), list):
        typed = [s for s in out["anyOf"] if isinstance(s, dict) and s.get("type") not in (None, "null")]
        if len(typed) != 1:
            raise ValueError(f"parameter {name!r}: a union of several types is not supported")
        rest = {k: v for k, v in out.items() if k != "anyOf"}
        out = {**typed[0], **rest}
        out.pop("default", None)
    if "type" not in out or isinstance(out["type"], list):
        raise ValueError(f"parameter {name!r} needs one JSON type")
    return out


def _params(tool: RemoteTool) -> dict[str, Any]:
    schema = tool.input_schema or {"type": "object", "properties": {}}
    if schema.get("type", "object") != "object":
        raise ValueError("the input schema is not an object")
    props = {n: _param_schema(n, s) for n, s in (schema.get("properties") or {}).items()}
    return {"type": "object", "required": [r for r in schema.get("required", []) if r in props], "properties": props}


@dataclass
class ImportReport:
    """What an import did, by registry name."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)  # became a write, or gone from the server
    skipped: dict[str, str] = field(default_factory=dict)  # remote tool -> why
    writes: list[str] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    embedded: int = 0


def _description(tool: RemoteTool, server: str) -> str:
    desc = " ".join((tool.description or "").split())
    if len(desc) < 10:
        desc = f"{desc} (MCP tool {tool.name} of server {server})".strip()
    return desc


def import_mcp(config_path: Path, registry: Registry, *, tenant: str = "*") -> ImportReport:
    """Read every configured server's tools and write the new or changed ones into `registry`."""
    cfg: McpConfig = load_model(config_path, McpConfig)
    engine = registry.engine
    _ensure(engine)
    bindings = load_bindings(engine)
    report = ImportReport()
    specs: list[dict[str, Any]] = []
    new_bindings: list[Binding] = []
    seen: set[str] = set()
    for server_name, server in cfg.servers.items():
        if shutil.which(server.command) is None and not Path(server.command).exists():
            raise PolicyError(f"{config_path}: field servers.{server_name}.command: {server.command!r} is not on PATH")
        try:
            remote = list_remote_tools(server_name, server, config_path.parent)
        except Exception as exc:
            raise PolicyError(f"{config_path}: server {server_name!r}: cannot list its tools: "
                              f"{type(exc).__name__}: {str(exc)[:200]}") from exc
        unknown = sorted(set(server.tools) - {t.name for t in remote})
        if unknown:
            raise PolicyError(f"{config_path}: field servers.{server_name}.tools: {unknown} are not tools of the server")
        for tool in remote:
            name = registry_name(server_name, tool.name)
            seen.add(name)
            try:
                params = _params(tool)
            except ValueError as exc:
                report.skipped[f"{server_name}:{tool.name}"] = str(exc)
                continue
            remote_digest = tool.digest()
            override = server.tools.get(tool.name, ToolOverride())
            digest = hashlib.sha256(f"{remote_digest}|{json.dumps(override.model_dump(), sort_keys=True)}".encode()).hexdigest()[:24]
            old_binding = bindings.get(name)
            old_spec = _existing(registry, name, tenant)
            (report.writes if tool.operation_type == "write" else report.reads).append(name)
            stored_conn = {k: v for k, v in connection(server, config_path.parent).items() if k != "env"}
            stored_conn["env_passthrough"] = list(server.env_passthrough)
            if old_spec is not None and old_binding is not None and old_binding.digest == digest:
                report.unchanged.append(name)  # the registry row stays; the server's command may have moved
                _save_binding(engine, replace(old_binding, connection=stored_conn, timeout_seconds=server.timeout_seconds))
                continue
            if old_spec is not None and old_spec.standard:
                report.skipped[f"{server_name}:{tool.name}"] = f"{name!r} is a standard tool's name"
                continue
            version = (old_spec.version + 1) if old_spec is not None else 1
            enabled = False
            permissions: dict[str, Any] = {"users": [], "groups": []}
            if old_spec is not None:
                became_write = old_binding is not None and old_binding.operation_type == "read" and tool.operation_type == "write"
                enabled = old_spec.enabled and not became_write
                permissions = old_spec.permissions.model_dump()
                if became_write and old_spec.enabled:
                    report.disabled.append(name)
            kind = "escrita/write" if tool.operation_type == "write" else "leitura/read"
            specs.append({
                "name": name, "tenant": tenant, "handler": HANDLER_PREFIX + name, "version": version,
                "description": _description(tool, server_name), "params": params, "enabled": enabled,
                "standard": False, "strict": True, "group": server.group,
                "short_description": override.short_description or f"MCP {server_name}: {tool.name}"[:80],
                "rules": f"Importada do servidor MCP {server_name!r} (ferramenta {tool.name!r}, {kind}). "
                         f"Imported from MCP server {server_name!r} (tool {tool.name!r}, {kind}).",
                "permissions": permissions, "examples": list(override.examples),
            })
            new_bindings.append(Binding(tenant, name, server_name, tool.name, tool.operation_type, tool.annotations,
                                        tool.input_schema, stored_conn, server.timeout_seconds, digest, remote_digest,
                                        version))
            (report.updated if old_spec is not None else report.added).append(name)
    if specs:
        before = registry.embed_calls
        with tempfile.TemporaryDirectory(prefix="tramita-mcp-") as tmp:
            path = Path(tmp) / "mcp_tools.yaml"
            path.write_text(yaml.safe_dump({"tools": specs}, allow_unicode=True, sort_keys=False), encoding="utf-8")
            registry.add(path)
        report.embedded = registry.embed_calls - before
        for b in new_bindings:
            _save_binding(engine, b)
    servers = set(cfg.servers)
    for name, b in bindings.items():
        if b.server in servers and name not in seen:
            spec = _existing(registry, name, tenant)
            if spec is not None and spec.enabled:
                registry.set_enabled(name, False, tenant)
                report.disabled.append(name)
    return report


def probe_server(bindings: list[Binding], registry: Registry) -> str:
    """Doctor's line for one imported server: it answers, and what changed since the import."""
    first = bindings[0]
    conn = dict(first.connection)
    server = ServerConfig(command=conn["command"], args=conn.get("args", []), cwd=conn.get("cwd"),
                          env_passthrough=conn.get("env_passthrough", []), timeout_seconds=first.timeout_seconds)
    remote = {t.name: t for t in list_remote_tools(first.server, server)}
    bound = {b.remote_name: b for b in bindings}
    changed = sorted(n for n, b in bound.items() if n in remote and remote[n].digest() != b.remote_digest)
    gone = sorted(set(bound) - set(remote))
    new = sorted(set(remote) - set(bound))
    enabled = sum(1 for b in bindings if _existing(registry, b.name, b.tenant) is not None
                  and _existing(registry, b.name, b.tenant).enabled)
    detail = (f"{server.command}: answers, {len(remote)} tools; {len(bindings)} imported ({enabled} enabled, "
              f"{sum(b.operation_type == 'write' for b in bindings)} writes)")
    if changed or gone or new:
        raise RuntimeError(f"{detail}; changed since import {changed}, gone {gone}, not imported {new}")
    return detail


def _existing(registry: Registry, name: str, tenant: str) -> Any:
    from tools.registry_models import RegistryError

    try:
        return registry.get(name, tenant)
    except RegistryError:
        return None
