"""Transaction operations shared by the collect / confirm / shift / execute nodes.

A transaction's arguments only ever hold values that passed `prepare_value` (coercion, reference
resolution, JSON-schema validation) and the handler's own checks; a value that fails is refused and
discarded, so "filled" always means "filled with a valid value" (docs/architecture.md, precedence rules).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from graph.state import LastTransaction, Transaction
from tools.business.base import ToolContext, ToolError
from tools.business.schema_check import prepare_value
from tools.registry import Registry, resolve_handler
from tools.registry_models import ToolSpec
from tramita.core.thread_refs import note


def args_hash(tool: str, args: dict[str, Any]) -> str:
    """Binds a confirmation to the exact arguments shown in the summary."""
    blob = json.dumps({"tool": tool, "args": args}, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def new_transaction(spec: ToolSpec, now: datetime) -> Transaction:
    """A fresh transaction for `spec`: collecting, every required parameter pending."""
    return Transaction(id=uuid.uuid4().hex, tool=spec.name, version=spec.version, status="collecting", args={},
                       pending=list(spec.required), summary="", confirmation_hash="", reprompts=0,
                       started_at=now.isoformat(), updated_at=now.isoformat())


def ended(tx: Transaction, outcome: str, message: str, at: datetime, target_id: str | None = None) -> LastTransaction:
    """The outcome record of a transaction that ended (kept as `last_transaction`)."""
    return LastTransaction(id=tx.get("id", ""), tool=tx.get("tool", ""), args=dict(tx.get("args", {})),
                           outcome=outcome, message=message, target_id=target_id,  # type: ignore[typeddict-item]
                           at=at.isoformat())


def method_of(spec: ToolSpec) -> tuple[Any, str]:
    """The handler object and method name of `spec` (`handler: module:Class.method`)."""
    return resolve_handler(spec.handler)


def run_checks(spec: ToolSpec, args: dict[str, Any], tctx: ToolContext) -> dict[str, ToolError]:
    """The handler's own pre-checks (`check_<method>`), per parameter; none when it has no checker."""
    obj, method = method_of(spec)
    checker = getattr(obj, f"check_{method}", None)
    if checker is None:
        return {}
    result: dict[str, ToolError] = checker(args, tctx)
    return result


def summary_text(spec: ToolSpec, args: dict[str, Any], tctx: ToolContext) -> str:
    """What will be written, in the user's language (the handler's `summary_<method>`, else the JSON)."""
    obj, method = method_of(spec)
    summarize = getattr(obj, f"summary_{method}", None)
    if summarize is None:
        return json.dumps(args, ensure_ascii=False, sort_keys=True)
    pt, en = summarize(args, tctx)
    return str(en if tctx.lang == "en" else pt)


@dataclass
class Applied:
    """What `apply_values` did: parameters newly filled, corrected, and the values refused."""

    filled: list[str] = field(default_factory=list)
    corrected: list[str] = field(default_factory=list)
    errors: list[ToolError] = field(default_factory=list)


def apply_values(spec: ToolSpec, tx: Transaction, raw: dict[str, Any], tctx: ToolContext) -> Applied:
    """Validate raw values and merge the good ones into `tx['args']` (in place).

    Each value is prepared alone, then the handler's checks run on the merged arguments; any
    parameter with an error is dropped again, so `args` never holds a refused value. A name that
    matches no row (an unknown service, a person not in the directory, an id that does not exist)
    is refused with the contract's NOT_FOUND naming what was looked for, never dropped silently.
    """
    result = Applied()
    args = dict(tx.get("args", {}))
    candidate: dict[str, Any] = {}
    for name, value in raw.items():
        if name not in spec.properties or value is None or (isinstance(value, str) and not value.strip()):
            continue
        canonical, error = prepare_value(name, spec.properties[name], value, tctx, strict=spec.strict)
        if error is not None:
            result.errors.append(error)
            continue
        if args.get(name) == canonical:
            continue  # repeated, not new
        candidate[name] = canonical
    if candidate:
        merged = {**args, **candidate}
        errors = run_checks(spec, merged, tctx)
        for pname, err in errors.items():
            if pname in candidate:
                candidate.pop(pname)
                result.errors.append(err)
            elif pname == "" and candidate:
                result.errors.append(err)
                candidate.clear()
        for name, value in candidate.items():
            (result.corrected if name in args else result.filled).append(name)
            args[name] = value
    tx["args"] = args
    tx["pending"] = [r for r in spec.required if r not in args]
    return result


def advance(spec: ToolSpec, tx: Transaction, tctx: ToolContext, registry: Registry) -> tuple[str, list[ToolError]]:
    """After values changed: 'collecting' while something is missing; when complete, run the
    pre-validation (fail-closed) and move to 'awaiting_confirmation' with a fresh summary and hash,
    or to 'ready' for a tool that needs no confirmation (unless a value came from a reference).
    """
    tx["confirmation_hash"] = ""
    tx["summary"] = ""
    if tx["pending"]:
        tx["status"] = "collecting"
        return "collecting", []
    policy = registry.policy(spec.name)
    errors: list[ToolError] = []
    if policy.prevalidation != "off":
        try:
            found = run_checks(spec, dict(tx["args"]), tctx)
        except Exception as exc:
            if policy.prevalidation == "fail_closed":
                raise
            found = {}
            errors.append(ToolError("PREVALIDATION_SKIPPED", str(exc), str(exc)))
        for pname, err in found.items():
            errors.append(err)
            tx["args"].pop(pname, None)
        if found:
            tx["pending"] = [r for r in spec.required if r not in tx["args"]]
            tx["status"] = "collecting"
            return "collecting", errors
    resolved = tx.get("resolved") or {}
    if not policy.require_confirmation and policy.operation_type == "read" and not resolved:
        return "ready", errors
    # a value read from a reference ("ele", "pra mim") is named in the summary and always confirmed,
    # even for a lookup: the user sees what "ele" was taken to mean before anything runs
    summary = summary_text(spec, dict(tx["args"]), tctx)
    line = note(resolved, tx["args"], tctx.lang)
    tx["summary"] = f"{summary}\n{line}" if line else summary
    tx["confirmation_hash"] = args_hash(spec.name, dict(tx["args"]))
    tx["status"] = "awaiting_confirmation"
    return "awaiting_confirmation", errors
