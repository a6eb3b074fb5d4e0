"""Which business tools write and which only read, read from the registry (never kept by hand).

A tool's operation type is its policy in `policies/tool_policies.yaml`; the tools are those of a
`Registry` (its catalog rows) or, where no database is at hand (a summary over finished records),
those of `policies/tools.yaml`, both read through the registry's own loaders.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from tools.registry import Registry
from tools.registry_models import PolicyFile, load_model, load_tool_file
from tramita.base.paths import POLICIES_DIR


def write_tools(registry: Registry | None = None) -> frozenset[str]:
    """Names of the tools whose policy says `operation_type: write`."""
    if registry is not None:
        return frozenset(s.name for s in registry.specs().values() if registry.policy(s.name).operation_type == "write")
    return _from_files(POLICIES_DIR)[0]


def read_tools(registry: Registry | None = None) -> frozenset[str]:
    """Names of the tools whose policy says `operation_type: read`."""
    if registry is not None:
        return frozenset(s.name for s in registry.specs().values() if registry.policy(s.name).operation_type == "read")
    return _from_files(POLICIES_DIR)[1]


@lru_cache(maxsize=4)
def _from_files(policies_dir: Path) -> tuple[frozenset[str], frozenset[str]]:
    names = {t.name for t in load_tool_file(policies_dir / "tools.yaml").tools}
    policies: PolicyFile = load_model(policies_dir / "tool_policies.yaml", PolicyFile)
    writes = frozenset(n for n in names if policies.for_tool(n).operation_type == "write")
    return writes, frozenset(names - writes)
