"""API sources declared as data: `<dataset>/api/source.yaml` (+ `*.source.yaml`) over an OpenAPI 3 file.

Why data and not code: which operations tramita may call is a security decision that an
administrator reviews, so it lives in one small file next to the API's own OpenAPI description.
A source file names the OpenAPI file, the base URL and its host allow-list, the credential's
environment variable, the caps of `tools.http_guard`, and the GET operations tramita may call, each
with a description and example questions (pt and en) that the backend embeds to choose one.

Loading checks everything before any request (errors name the file and the field): the OpenAPI
file is OpenAPI 3, each declared operation exists and is a GET, its parameters are in the path or
the query (header and cookie parameters are refused: values never reach a header), every hint names
a real parameter, and the base URL passes the guard's host rules. Arguments are validated against
the operation's parameter schemas (types, enums, patterns, ranges, formats) by `jsonschema` before
the guard sends anything.
"""

from __future__ import annotations

import copy
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from jsonschema import Draft202012Validator, FormatChecker
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tools.http_guard import GuardedResponse, GuardLimits, HttpGuard, RequestRefused, Resolver
from tramita.base.policyfile import PolicyError, load_model, read_yaml

__all__ = [
    "ApiOperation",
    "ApiParam",
    "ApiSource",
    "SourceFile",
    "load_source",
    "load_sources",
    "source_files",
]

_OPERATION_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")


class ParamHint(BaseModel):
    """How the backend may find one parameter in a question (typed extraction, before any LLM)."""

    model_config = ConfigDict(extra="forbid")
    resolve: str | None = Field(default=None, description="reference kind of policies/references.yaml (names -> ids)")
    synonyms: dict[str, list[str]] = Field(default_factory=dict, description="enum value -> words that name it")
    extract: str | None = Field(default=None, description="regex with ONE group that captures the value")
    role: Literal["range_start", "range_end"] | None = Field(default=None, description="date range end this date is")

    @field_validator("extract")
    @classmethod
    def _one_group(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            compiled = re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from exc
        if compiled.groups != 1:
            raise ValueError("needs exactly one capturing group")
        return value


class Examples(BaseModel):
    """Example questions in both languages: the backend embeds them to choose the operation."""

    model_config = ConfigDict(extra="forbid")
    pt: list[str] = Field(min_length=1)
    en: list[str] = Field(min_length=1)


class OperationDecl(BaseModel):
    """One GET operation tramita may call."""

    model_config = ConfigDict(extra="forbid")
    operation_id: str
    description: str = Field(min_length=10)
    examples: Examples
    params: dict[str, ParamHint] = Field(default_factory=dict)

    @field_validator("operation_id")
    @classmethod
    def _op_id(cls, value: str) -> str:
        if not _OPERATION_ID.match(value):
            raise ValueError("must be an OpenAPI operationId (letters, digits, _)")
        return value


class Credential(BaseModel):
    """The per-source credential: an environment variable's name, never its value."""

    model_config = ConfigDict(extra="forbid")
    env: str
    header: str = "Authorization"
    scheme: str = "Bearer"

    @field_validator("env")
    @classmethod
    def _env(cls, value: str) -> str:
        if not _ENV_NAME.match(value):
            raise ValueError("must be an environment variable name (A-Z, 0-9, _)")
        return value


class Limits(BaseModel):
    """Caps of every exchange with this source (see `tools.http_guard.GuardLimits`)."""

    model_config = ConfigDict(extra="forbid")
    timeout_seconds: float = Field(default=5.0, gt=0, le=60)
    connect_timeout_seconds: float = Field(default=2.0, gt=0, le=30)
    max_response_bytes: int = Field(default=256 * 1024, ge=1024, le=16 * 1024 * 1024)
    content_types: list[str] = Field(default_factory=lambda: ["application/json"], min_length=1)
    max_redirects: int = Field(default=2, ge=0, le=5)


class SourceFile(BaseModel):
    """`source.yaml`: one API source."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{1,31}$")
    description: str = Field(min_length=10)
    openapi: str = Field(description="OpenAPI 3 file, relative to this file")
    base_url: str
    base_url_env: str | None = None
    allowed_hosts: list[str] = Field(min_length=1)
    credential: Credential | None = None
    limits: Limits = Field(default_factory=Limits)
    operations: list[OperationDecl] = Field(min_length=1)

    @field_validator("base_url_env")
    @classmethod
    def _env(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError("must be an environment variable name (A-Z, 0-9, _)")
        return value


@dataclass
class ApiParam:
    """One parameter of an operation: where it goes, its JSON schema and the backend's hint."""

    name: str
    location: Literal["path", "query"]
    required: bool
    schema: dict[str, Any]
    description: str = ""
    hint: ParamHint = field(default_factory=ParamHint)


@dataclass
class ApiOperation:
    """A declared GET operation, resolved against the OpenAPI file."""

    source: str
    operation_id: str
    path: str
    description: str
    examples: list[str]
    params: dict[str, ApiParam]

    @property
    def key(self) -> str:
        """`source:operation`: unique across sources."""
        return f"{self.source}:{self.operation_id}"

    @property
    def required(self) -> list[str]:
        """The parameters that must have a value (path parameters always do)."""
        return [p.name for p in self.params.values() if p.required]

    def json_schema(self) -> dict[str, Any]:
        """The arguments as one JSON Schema object (no other property allowed)."""
        return {"type": "object", "additionalProperties": False, "required": self.required,
                "properties": {n: p.schema for n, p in self.params.items()}}

    def validation_errors(self, args: dict[str, Any]) -> list[str]:
        """Every schema violation of `args` ("param: message"), empty when valid."""
        validator = Draft202012Validator(self.json_schema(), format_checker=FormatChecker())
        out = []
        for err in sorted(validator.iter_errors(args), key=lambda e: list(e.path)):
            where = ".".join(str(p) for p in err.path) or "(arguments)"
            out.append(f"{where}: {err.message[:160]}")
        return out


@dataclass
class ApiSource:
    """A loaded source: its file, operations and a guard per call."""

    path: Path
    spec: SourceFile
    operations: dict[str, ApiOperation]
    resolver: Resolver | None = None  # tests inject a stand-in for getaddrinfo

    @property
    def name(self) -> str:
        """The source's name (unique across the dataset's source files)."""
        return self.spec.name

    def base_url(self) -> str:
        """The configured base URL, or the one `base_url_env` names when it is set."""
        env = self.spec.base_url_env
        return (os.environ.get(env) or self.spec.base_url) if env else self.spec.base_url

    def guard(self) -> HttpGuard:
        """A guard on the current base URL (the allow-list is checked again, every call)."""
        lim = self.spec.limits
        cred = self.spec.credential
        return HttpGuard(self.base_url(), self.spec.allowed_hosts,
                         GuardLimits(lim.timeout_seconds, lim.connect_timeout_seconds, lim.max_response_bytes,
                                     tuple(c.lower() for c in lim.content_types), lim.max_redirects),
                         credential_env=cred.env if cred else None, credential_header=cred.header if cred else "Authorization",
                         credential_scheme=cred.scheme if cred else "Bearer", resolver=self.resolver)

    def probe(self) -> str:
        """Doctor's line: the host is allowed and, through a parameterless operation, reachable."""
        self.guard()  # RequestRefused when the current base URL is not allowed
        count = f"{len(self.operations)} GET operations"
        op = next((o for o in self.operations.values() if not o.required), None)
        if op is None:
            return f"{self.base_url()}: host allowed, {count} (not probed: every operation needs parameters)"
        resp = self.call(op.operation_id, {})
        if resp.status >= 500:
            raise RuntimeError(f"{self.base_url()}: {op.operation_id} answered HTTP {resp.status}")
        return f"{self.base_url()}: host allowed, reachable ({op.operation_id}: HTTP {resp.status}), {count}"

    def call(self, operation_id: str, args: dict[str, Any]) -> GuardedResponse:
        """Validate `args` against the operation's schema, then send the GET through the guard.

        Raises RequestRefused (INVALID_ARGUMENTS before anything is sent).
        """
        op = self.operations.get(operation_id)
        if op is None:
            raise RequestRefused("UNKNOWN_OPERATION", f"{operation_id!r} is not declared in {self.path.name}")
        errors = op.validation_errors(args)
        if errors:
            raise RequestRefused("INVALID_ARGUMENTS", "; ".join(errors))
        path_params = {n: v for n, v in args.items() if op.params[n].location == "path"}
        query = {n: v for n, v in args.items() if op.params[n].location == "query"}
        return self.guard().get(op.path, path_params, query)


# ------------------------------------------------------------------------------------ loading

def _deref(doc: dict[str, Any], node: Any, where: str, depth: int = 0) -> Any:
    """Resolve local `$ref`s (`#/components/...`) recursively; remote refs are refused."""
    if depth > 20:
        raise ValueError(f"{where}: $ref nesting is too deep")
    if isinstance(node, dict):
        if "$ref" in node:
            ref = node["$ref"]
            if not isinstance(ref, str) or not ref.startswith("#/"):
                raise ValueError(f"{where}: only local $ref (#/...) are supported, got {ref!r}")
            target: Any = doc
            for part in ref[2:].split("/"):
                if not isinstance(target, dict) or part not in target:
                    raise ValueError(f"{where}: $ref {ref!r} does not resolve")
                target = target[part]
            return _deref(doc, copy.deepcopy(target), where, depth + 1)
        return {k: _deref(doc, v, where, depth + 1) for k, v in node.items()}
    if isinstance(node, list):
        return [_deref(doc, v, where, depth + 1) for v in node]
    return node


def _json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI 3.0 parameter schema as JSON Schema (drops the OpenAPI-only keywords)."""
    out = {k: v for k, v in schema.items() if k not in ("nullable", "example", "deprecated", "xml", "externalDocs")}
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def load_source(path: Path) -> ApiSource:
    """Load and check one source file; PolicyError naming the file and the field on any problem."""
    spec: SourceFile = load_model(path, SourceFile)
    api_path = (path.parent / spec.openapi).resolve()
    doc = read_yaml(api_path)
    if not isinstance(doc, dict) or not str(doc.get("openapi", "")).startswith("3."):
        raise PolicyError(f"{api_path}: field openapi: not an OpenAPI 3 document")
    by_id: dict[str, tuple[str, str, dict[str, Any], list[Any]]] = {}
    for route, item in (doc.get("paths") or {}).items():
        if not isinstance(item, dict):
            continue
        shared = item.get("parameters", [])
        for method, op in item.items():
            if isinstance(op, dict) and op.get("operationId"):
                by_id[str(op["operationId"])] = (method.lower(), str(route), op, shared)
    try:
        HttpGuard(spec.base_url, spec.allowed_hosts)
    except RequestRefused as exc:
        raise PolicyError(f"{path}: field base_url: {exc.message}") from exc
    operations: dict[str, ApiOperation] = {}
    for i, decl in enumerate(spec.operations):
        where = f"{path}: field operations.{i}"
        if decl.operation_id in operations:
            raise PolicyError(f"{where}.operation_id: {decl.operation_id!r} is declared twice")
        found = by_id.get(decl.operation_id)
        if found is None:
            raise PolicyError(f"{where}.operation_id: {decl.operation_id!r} is not an operationId of {api_path.name}; "
                              f"it has: {', '.join(sorted(by_id))}")
        method, route, op, shared = found
        if method != "get":
            raise PolicyError(f"{where}.operation_id: {decl.operation_id!r} is a {method.upper()} operation; "
                              "only GET operations may be declared")
        try:
            raw_params = _deref(doc, [*shared, *op.get("parameters", [])], f"{api_path}: {decl.operation_id}")
        except ValueError as exc:
            raise PolicyError(str(exc)) from exc
        params: dict[str, ApiParam] = {}
        for p in raw_params:
            loc = p.get("in")
            if loc not in ("path", "query"):
                raise PolicyError(f"{where}.operation_id: parameter {p.get('name')!r} is in {loc!r}; "
                                  "only path and query parameters are supported (values never go into headers)")
            schema = p.get("schema")
            if not isinstance(schema, dict) or "type" not in schema:
                raise PolicyError(f"{api_path}: {decl.operation_id}: parameter {p.get('name')!r} needs a schema with a type")
            name = str(p["name"])
            params[name] = ApiParam(name, loc, bool(p.get("required")) or loc == "path", _json_schema(schema),
                                    str(p.get("description", "")), decl.params.get(name, ParamHint()))
        in_template = set(re.findall(r"\{([^}]+)\}", route))
        path_params = {n for n, p in params.items() if p.location == "path"}
        if in_template != path_params:
            raise PolicyError(f"{api_path}: {decl.operation_id}: path {route!r} and its path parameters "
                              f"{sorted(path_params)} disagree")
        unknown = sorted(set(decl.params) - set(params))
        if unknown:
            raise PolicyError(f"{where}.params: {unknown} are not parameters of {decl.operation_id}; "
                              f"it has: {', '.join(params) or 'none'}")
        for pname, hint in decl.params.items():
            enum = params[pname].schema.get("enum")
            bad = sorted(set(hint.synonyms) - set(enum or []))
            if bad:
                raise PolicyError(f"{where}.params.{pname}.synonyms: {bad} are not values of the enum {enum}")
            if hint.resolve is not None:
                from tools.references import reference_kind

                try:
                    reference_kind(hint.resolve)
                except ValueError as exc:
                    raise PolicyError(f"{where}.params.{pname}.resolve: {exc}") from exc
        operations[decl.operation_id] = ApiOperation(spec.name, decl.operation_id, route, decl.description.strip(),
                                                     [*decl.examples.pt, *decl.examples.en], params)
    return ApiSource(path, spec, operations)


def source_files(dataset_dir: Path) -> list[Path]:
    """`<dataset>/api/source.yaml` and `<dataset>/api/*.source.yaml`, sorted."""
    folder = dataset_dir / "api"
    if not folder.is_dir():
        return []
    return sorted({*folder.glob("source.yaml"), *folder.glob("*.source.yaml")})


_CACHE: dict[tuple[tuple[str, float], ...], list[ApiSource]] = {}
_LOCK = threading.Lock()


def load_sources(dataset_dir: Path) -> list[ApiSource]:
    """Every source of the dataset, cached until one of the files changes; names must be unique."""
    files = source_files(dataset_dir)
    key = tuple((str(f), f.stat().st_mtime) for f in files)
    with _LOCK:
        cached = _CACHE.get(key)
        if cached is not None:
            return cached
    sources = [load_source(f) for f in files]
    seen: dict[str, Path] = {}
    for s in sources:
        if s.name in seen:
            raise PolicyError(f"{s.path}: field name: source {s.name!r} is also declared in {seen[s.name]}")
        seen[s.name] = s.path
    with _LOCK:
        _CACHE.clear()
        _CACHE[key] = sources
    return sources
