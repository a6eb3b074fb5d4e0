"""Pydantic models for the registry YAML (`policies/tools.yaml`, custom tool files).

Loading goes through `load_tool_file`, whose errors name the file, the tool and the field, because
registry files are edited by hand and a vague "validation error" costs an administrator time.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tramita.base.policyfile import PolicyError, describe_validation_error, load_model, read_yaml

__all__ = ["PolicyError", "RegistryError", "describe_validation_error", "load_model", "read_yaml"]

HANDLER_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*\.[A-Za-z_]\w*$")
NAME_RE = re.compile(r"^[a-z][a-z0-9_]{2,63}$")
# A registry file or command is invalid; the message names file, tool and field. One error type
# serves every hand-edited file, so callers catch one thing.
RegistryError = PolicyError


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
