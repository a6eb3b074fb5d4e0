"""Who may use a tool: permission groups, the user directory and the DTA grant rule.

`policies/groups.yaml` defines the groups and names the user directory (`directory: {table, id}`):
the table where a user id must exist for the `all: true` groups. The lookup query is built from
those validated identifiers, so no table of the dataset is named in code. The grants themselves
(user and group grants per tool) are rows of the SQL catalog in `tools.registry`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from sqlalchemy import Engine

from tools.references import check_identifier, row_exists
from tools.registry_models import GroupFile, ToolSpec
from tramita.base.policyfile import load_model

__all__ = ["DirectorySpec", "GroupPolicy", "RegistryPermissions"]


class DirectorySpec(BaseModel):
    """The user directory: the table of users and the column holding the user id."""

    model_config = ConfigDict(extra="forbid")

    table: str = Field(description="table with one row per user")
    id: str = Field(description="column holding the user id (what `--user` and the session's user carry)")

    @field_validator("table", "id")
    @classmethod
    def _identifier(cls, value: str) -> str:
        return check_identifier(value)


class GroupPolicy(GroupFile):
    """`policies/groups.yaml`: the permission groups plus the user directory they rely on."""

    directory: DirectorySpec | None = Field(default=None, description="where users live; needed by `all: true` groups")

    @model_validator(mode="after")
    def _directory_for_all(self) -> GroupPolicy:
        everyone = sorted(name for name, spec in self.groups.items() if spec.all)
        if everyone and self.directory is None:
            raise ValueError(f"directory (table, id) is required: groups {everyone} have all: true")
        return self


class RegistryPermissions:
    """The permission side of the registry: group membership and the grant rule."""

    def __init__(self, engine: Engine, policy: GroupPolicy) -> None:
        """Check users of `engine`'s directory against the groups of `policy`."""
        self.engine = engine
        self.policy = policy

    @classmethod
    def load(cls, engine: Engine, path: Path) -> RegistryPermissions:
        """Read `groups.yaml` at `path`; errors name the file and the field."""
        policy: GroupPolicy = load_model(path, GroupPolicy)
        return cls(engine, policy)

    @property
    def groups(self) -> list[str]:
        """The names of the defined groups, sorted."""
        return sorted(self.policy.groups)

    def user_exists(self, user_id: str) -> bool:
        """Whether the user directory has `user_id`; False when there is no directory or no such table."""
        directory = self.policy.directory
        if directory is None:
            return False
        try:
            with self.engine.connect() as conn:
                return row_exists(conn, directory.table, directory.id, user_id)
        except Exception:  # noqa: BLE001 - no directory table: a registry-only database
            return False

    def user_groups(self, user_id: str) -> frozenset[str]:
        """Groups the user belongs to; `all: true` groups need the user to exist in the directory."""
        exists: bool | None = None
        groups: set[str] = set()
        for name, spec in self.policy.groups.items():
            if user_id in spec.members:
                groups.add(name)
            elif spec.all:
                if exists is None:
                    exists = self.user_exists(user_id)
                if exists:
                    groups.add(name)
        return frozenset(groups)

    @staticmethod
    def required_groups(spec: ToolSpec) -> list[str]:
        """The groups granted `spec` (any one of them is enough)."""
        return list(spec.permissions.groups)

    def is_permitted(self, spec: ToolSpec, user_id: str | None) -> bool:
        """DTA rule: a user grant or a group grant; a tool with no grant is usable by nobody."""
        if not user_id:
            return False
        if user_id in spec.permissions.users:
            return True
        return bool(self.user_groups(user_id) & set(spec.permissions.groups))

    def checker(self, specs: Mapping[tuple[str, str], ToolSpec], tenant: str, user_id: str) -> Callable[[str], bool]:
        """`name -> permitted` over `specs` for one user, looking the user's groups up at most once."""
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

        return permitted
