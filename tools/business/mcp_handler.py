"""The handler of every tool imported from an MCP server (`tools.mcp_import`).

An imported tool's registry entry says `handler: tools.business.mcp_handler:McpTools.<registry name>`,
so the method name IS the tool. `McpTools` answers `<name>`, `check_<name>` and `summary_<name>`
for any name (the registry resolves handlers by attribute) and looks the tool's binding up in the
`mcp_tools` table at call time: server command, remote tool name, input schema, operation type.

Why it goes through the same contract as a hand-written handler (`tools.business.base`): the graph
then applies the same rules to a second party's tool as to ours: enabled, granted, arguments
validated against the tool's own JSON schema as they arrive and again inside the execution, a
summary shown, an explicit yes, and for a write ONE `run_write` transaction with an audit_log row
and an idempotency key, so a retried turn replays the stored result instead of calling the tool
twice. The MCP call runs inside that transaction: if it fails nothing is audited; if it succeeds
and the commit then fails, the external effect happened without its audit row (the MCP protocol
has no two-phase commit; a server that accepts an idempotency key can close that gap).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from sqlalchemy import Connection

from tools.business.audit import run_write
from tools.business.base import ToolContext, ToolError, ToolResult
from tools.mcp_import import Binding, call_tool, load_binding
from tools.registry_models import NAME_RE

_PREFIXES = ("check_", "summary_")


def _unbound(name: str) -> ToolError:
    return ToolError("MCP_UNBOUND", f"A ferramenta {name} não está vinculada a um servidor MCP (reimporte-a).",
                     f"The tool {name} is not bound to an MCP server (import it again).")


def _errors(binding: Binding, args: dict[str, Any], *, complete: bool) -> dict[str, ToolError]:
    """Schema errors keyed by parameter; `complete` also checks required ones and unknown keys."""
    schema = binding.input_schema or {"type": "object", "properties": {}}
    props: dict[str, Any] = schema.get("properties") or {}
    out: dict[str, ToolError] = {}
    for pname, value in args.items():
        if pname not in props:
            out[pname] = ToolError("VALIDATION_ERROR", f"{pname}: parâmetro desconhecido.", f"{pname}: unknown parameter.",
                                   param=pname)
            continue
        validator = Draft202012Validator(props[pname], format_checker=FormatChecker())
        err = next(iter(validator.iter_errors(value)), None)
        if err is not None:
            out[pname] = ToolError("VALIDATION_ERROR", f"{pname}: {err.message[:160]}", f"{pname}: {err.message[:160]}",
                                   param=pname)
    if complete:
        missing = [r for r in schema.get("required", []) if r not in args]
        if missing:
            out[""] = ToolError("VALIDATION_ERROR", f"faltam parâmetros: {', '.join(missing)}",
                                f"missing parameters: {', '.join(missing)}")
    return out


def _args_text(args: dict[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in sorted(args.items())) or "(sem argumentos)"


class McpTools:
    """Stateless: every method is made on demand for the registry name it is asked for."""

    def __getattr__(self, attr: str) -> Callable[..., Any]:
        """`<name>`, `check_<name>` or `summary_<name>` for a registry name; AttributeError otherwise."""
        if attr.startswith("_"):
            raise AttributeError(attr)
        for prefix in _PREFIXES:
            if attr.startswith(prefix) and NAME_RE.match(attr[len(prefix):]):
                name = attr[len(prefix):]
                return partial(self._check if prefix == "check_" else self._summary, name)
        if NAME_RE.match(attr):
            return partial(self._execute, attr)
        raise AttributeError(attr)

    def _check(self, name: str, args: dict[str, Any], ctx: ToolContext) -> dict[str, ToolError]:
        binding = load_binding(ctx.engine, name)
        if binding is None:
            return {"": _unbound(name)}
        return _errors(binding, args, complete=False)

    def _summary(self, name: str, args: dict[str, Any], ctx: ToolContext) -> tuple[str, str]:
        binding = load_binding(ctx.engine, name)
        if binding is None:
            return f"{name}: {_args_text(args)}", f"{name}: {_args_text(args)}"
        kind_pt = "ESCRITA (altera dados)" if binding.operation_type == "write" else "leitura"
        kind_en = "WRITE (changes data)" if binding.operation_type == "write" else "read"
        shown = _args_text(args)
        return (f"Executar a ferramenta MCP '{binding.remote_name}' do servidor '{binding.server}' ({kind_pt}) com "
                f"{shown}. Confirma?",
                f"Run MCP tool '{binding.remote_name}' of server '{binding.server}' ({kind_en}) with {shown}. Confirm?")

    def _execute(self, name: str, args: dict[str, Any], ctx: ToolContext, idempotency_key: str) -> ToolResult:
        binding = load_binding(ctx.engine, name)
        if binding is None:
            raise _unbound(name)
        errors = _errors(binding, args, complete=True)
        if errors:
            raise next(iter(errors.values()))

        def invoke() -> ToolResult:
            try:
                body, structured = call_tool(binding, dict(args))
            except Exception as exc:  # any failure of the second party is a refusal here (re-raised)
                raise ToolError("MCP_CALL_FAILED", f"A ferramenta MCP falhou: {str(exc)[:200]}",
                                f"The MCP tool failed: {str(exc)[:200]}") from exc
            target = str((structured or {}).get("id", binding.remote_name))
            shown = body[:300] or "ok"
            return ToolResult(f"{binding.remote_name} ({binding.server}): {shown}", f"{binding.remote_name} ({binding.server}): {shown}",
                              {"result": (structured or {"text": body[:2000]})}, f"mcp:{binding.server}", target)

        if binding.operation_type != "write":
            return invoke()

        def check(conn: Connection) -> dict[str, ToolError]:
            return _errors(binding, args, complete=True)

        return run_write(ctx, name, args, idempotency_key, check, lambda conn: invoke())
