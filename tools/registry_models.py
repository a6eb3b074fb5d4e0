"""Pydantic models for the registry YAML (`policies/tools.yaml`, custom tool files).

Loading goes through `load_tool_file`, whose errors name the file, the tool and the field, because
registry files are edited by hand and a vague "validation error" costs an administrator time.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

HANDLER_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*\.[A-Za-z_]\w*$")
NAME_RE = re.compile(r"^[a-z][a-z0-9_]{2,63}$")
# libyaml's safe loader when available: ~10x faster on a 10,000-tool file, same safety and errors
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class RegistryError(ValueError):
    """A registry file or command is invalid; the message names file, tool and field."""


class Permissions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    users: list[str] = Field(default_factory=list, description="employee ids granted directly")
    groups: list[str] = Field(default_factory=list, description="permission groups granted")


class ToolSpec(BaseModel):
    """One HZV row plus its HZZ examples and grants."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="unique id the LLM uses (HZV_FUNCAO)")
    tenant: str = Field(default="*", description="branch/tenant (HZV_FILIAL); '*' for all")
    handler: str = Field(description="module:Class.method (HZV_CLASSE + HZV_MDADOS)")
    version: int = Field(ge=1, description="sequential version (HZV_VERSAO)")
    description: str = Field(min_length=10, description="HZV_DESCRI")
    params: dict[str, Any] = Field(description="JSON schema of the arguments (HZV_PARAM)")
    enabled: bool = True
    standard: bool = True
    strict: bool = True
    rules: str = ""
    group: str = ""
    short_description: str = Field(default="", max_length=80)
    permissions: Permissions = Field(default_factory=Permissions)
    examples: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError("must be snake_case, 3-64 characters, starting with a letter")
        return v

    @field_validator("handler")
    @classmethod
    def _handler(cls, v: str) -> str:
        if not HANDLER_RE.match(v):
            raise ValueError("must look like 'package.module:Class.method'")
        return v

    @field_validator("params")
    @classmethod
    def _params(cls, v: dict[str, Any]) -> dict[str, Any]:
        if v.get("type") != "object" or not isinstance(v.get("properties"), dict):
            raise ValueError("must be a JSON schema with type: object and properties")
        missing = [r for r in v.get("required", []) if r not in v["properties"]]
        if missing:
            raise ValueError(f"required names unknown properties: {missing}")
        for pname, pschema in v["properties"].items():
            if not isinstance(pschema, dict) or "type" not in pschema:
                raise ValueError(f"property {pname!r} needs a 'type'")
        return v

    @property
    def required(self) -> list[str]:
        return list(self.params.get("required", []))

    @property
    def properties(self) -> dict[str, dict[str, Any]]:
        return dict(self.params["properties"])

    def embedding_text(self) -> str:
        """HZV_EMBEDD source: the description plus ALL examples (HZZ) concatenated."""
        return " ".join([self.description.strip(), *[e.strip() for e in self.examples]])


class ToolPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    requires: list[str] = Field(default_factory=list)
    require_confirmation: bool = True
    operation_type: Literal["read", "write"] = "write"
    prevalidation: Literal["fail_closed", "fail_open", "off"] = "fail_closed"


class ToolFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tools: list[ToolSpec]

    @model_validator(mode="after")
    def _unique(self) -> ToolFile:
        seen: set[tuple[str, str]] = set()
        for t in self.tools:
            key = (t.tenant, t.name)
            if key in seen:
                raise ValueError(f"duplicate tool {t.name!r} for tenant {t.tenant!r}")
            seen.add(key)
        return self


class PolicyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    defaults: ToolPolicy = Field(default_factory=ToolPolicy)
    policies: dict[str, dict[str, Any]] = Field(default_factory=dict)

    def for_tool(self, name: str) -> ToolPolicy:
        merged = {**self.defaults.model_dump(), **self.policies.get(name, {})}
        return ToolPolicy.model_validate(merged)


class GroupSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    all: bool = False
    members: list[str] = Field(default_factory=list)


class GroupFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    groups: dict[str, GroupSpec]


def read_yaml(path: Path) -> Any:
    """Parse YAML with an error that names the file and the line."""
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)
    except FileNotFoundError as exc:
        raise RegistryError(f"{path}: file not found") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise RegistryError(f"{path}: malformed YAML{where}: {getattr(exc, 'problem', exc)}") from exc


def describe_validation_error(path: Path, exc: ValidationError, data: Any) -> str:
    """'file: tool NAME: field params.properties: message' for every error."""
    lines = []
    for err in exc.errors():
        loc = list(err["loc"])
        tool = ""
        if len(loc) >= 2 and loc[0] == "tools" and isinstance(loc[1], int):
            try:
                tool = f"tool {data['tools'][loc[1]].get('name', '#' + str(loc[1]))!r}: "
            except (KeyError, IndexError, TypeError, AttributeError):
                tool = f"tool #{loc[1]}: "
            loc = loc[2:]
        field = ".".join(str(p) for p in loc) or "(root)"
        lines.append(f"{path}: {tool}field {field}: {err['msg']}")
    return "\n".join(lines)


def load_model(path: Path, model: type[BaseModel]) -> Any:
    data = read_yaml(path)
    if isinstance(data, dict) is False:
        raise RegistryError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RegistryError(describe_validation_error(path, exc, data)) from exc


def load_tool_file(path: Path) -> ToolFile:
    """Load `tools.yaml` or a custom tool file (a single tool mapping is accepted too)."""
    data = read_yaml(path)
    if isinstance(data, dict) and "tools" not in data and "name" in data:
        data = {"tools": [data]}
    if not isinstance(data, dict):
        raise RegistryError(f"{path}: expected a mapping with a 'tools' list")
    try:
        return ToolFile.model_validate(data)
    except ValidationError as exc:
        raise RegistryError(describe_validation_error(path, exc, data)) from exc
