"""Validate tool arguments against the registry's JSON Schema and the rows they reference.

The schemas come from policies/tools.yaml (`params`). One parameter is checked at a time because
values arrive one turn at a time; a failure becomes a VALIDATION_ERROR that names the parameter and
the rule, or NOT_FOUND when an `x-references` row is missing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from sqlalchemy import Connection, Engine, Select, column, literal_column, select, table

from tools.business.base import ToolContext, ToolError
from tools.business.catalog import not_found, validation_error
from tools.business.resolvers import coerce_value, resolve_reference
from tramita.base.paths import POLICIES_DIR


def _decimal_multiple_of(validator: Any, step: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    """JSON Schema's multipleOf in decimal arithmetic: 476.07 is a multiple of 0.01 (in binary floats it is not)."""
    if not validator.is_type(instance, "number"):
        return
    quotient = Decimal(str(instance)) / Decimal(str(step))
    if quotient != quotient.to_integral_value():
        yield ValidationError(f"{instance!r} is not a multiple of {step}")


ParamValidator = jsonschema.validators.extend(Draft202012Validator, {"multipleOf": _decimal_multiple_of})


@lru_cache(maxsize=4)
def _registry(path: Path = POLICIES_DIR / "tools.yaml") -> dict[str, dict[str, Any]]:
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return {tool["name"]: tool for tool in raw.get("tools", [])}


def tool_params(tool_name: str) -> dict[str, Any]:
    """The `params` JSON Schema of a standard tool in policies/tools.yaml."""
    try:
        return dict(_registry()[tool_name]["params"])
    except KeyError as exc:
        raise KeyError(f"policies/tools.yaml has no tool {tool_name!r} with params") from exc


def _human_pattern(pattern: str) -> str:
    r"""^TCK-\d{4}$ -> TCK-nnnn, ^2026-Q[1-4]$ -> 2026-Qn: what a person can read."""
    shown = pattern.strip("^$")
    shown = re.sub(r"\\d\{(\d+)\}", lambda m: "n" * int(m[1]), shown)
    shown = re.sub(r"\[[^\]]*\]", "n", shown)
    return shown.replace("\\d", "n").replace("\\", "")


def _schema_error(name: str, schema: Mapping[str, Any], value: Any, error: ValidationError) -> ToolError:
    rule = str(error.validator)
    shown = str(value)[:60]
    if rule == "type":
        kind = schema.get("type")
        return validation_error(name, f"type_{kind}" if kind in ("string", "number", "integer") else "other", detail=error.message)
    if rule == "pattern":
        return validation_error(name, "pattern", format=_human_pattern(str(schema["pattern"])), value=shown)
    if rule == "enum":
        return validation_error(name, "enum", options=", ".join(str(o) for o in schema["enum"]), value=shown)
    if rule in ("minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return validation_error(name, rule, limit=error.validator_value)
    if rule == "multipleOf":
        return validation_error(name, "multipleOf")
    if rule == "format" and schema.get("format") == "date":
        return validation_error(name, "format_date", value=shown)
    return validation_error(name, "other", detail=error.message)


_REFERENCE = re.compile(r"^([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)$")


def reference_exists(conn: Connection, reference: str, value: Any) -> bool:
    """Whether `table.column` (an `x-references` value) has a row equal to `value`."""
    match = _REFERENCE.match(reference)
    if not match:
        raise ValueError(f"x-references must be table.column, got {reference!r}")
    target = table(match[1], column(match[2]))
    query: Select[Any] = select(literal_column("1")).select_from(target).where(target.c[match[2]] == value).limit(1)
    return conn.execute(query).first() is not None


def validate_param(name: str, schema: Mapping[str, Any], value: Any, *, engine: Engine | None = None,
                   conn: Connection | None = None) -> ToolError | None:
    """Check ONE parameter against its JSON Schema, then (given a database) its `x-references` row."""
    plain = {k: v for k, v in schema.items() if not k.startswith("x-")}
    errors = list(ParamValidator(plain, format_checker=Draft202012Validator.FORMAT_CHECKER).iter_errors(value))
    if errors:
        chosen = best_match(errors)
        assert chosen is not None
        return _schema_error(name, schema, value, chosen)
    reference = schema.get("x-references")
    if reference and (conn is not None or engine is not None):
        if conn is not None:
            found = reference_exists(conn, str(reference), value)
        else:
            assert engine is not None
            with engine.connect() as own:
                found = reference_exists(own, str(reference), value)
        if not found:
            return not_found(str(reference).split(".")[0], value, name)
    return None


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def check_args(tool_name: str, args: Mapping[str, Any], conn: Connection, *, complete: bool) -> dict[str, ToolError]:
    """Schema + reference errors of the filled `args`, keyed by parameter, in the schema's order.
    With `complete`, a missing required parameter is an error too (right before execution).
    """
    schema = tool_params(tool_name)
    required = set(schema.get("required", []))
    errors: dict[str, ToolError] = {}
    for name, sub in schema.get("properties", {}).items():
        value = args.get(name)
        if _missing(value):
            if complete and name in required:
                errors[name] = validation_error(name, "required")
            continue
        error = validate_param(name, sub, value, conn=conn)
        if error is not None:
            errors[name] = error
    return errors


def prepare_value(name: str, schema: Mapping[str, Any], value: Any, ctx: ToolContext, *,
                  strict: bool) -> tuple[Any, ToolError | None]:
    """Coerce -> resolve (`x-resolve`) -> validate: the canonical value and its error, if any.
    The one call a collector needs per extracted value.
    """
    canonical = coerce_value(name, dict(schema), value, ctx, strict=strict)
    kind = schema.get("x-resolve")
    pattern = schema.get("pattern")
    if kind and isinstance(canonical, str) and not (pattern and re.search(str(pattern), canonical)):
        resolved = resolve_reference(str(kind), canonical, ctx.engine, param=name)
        if isinstance(resolved, ToolError):
            return canonical, resolved
        canonical = resolved
    return canonical, validate_param(name, schema, canonical, engine=ctx.engine)
