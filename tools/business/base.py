"""Contract shared by every business-tool handler.

For a registry handler ``tools.business.X:Cls.m`` the graph builds ``Cls()`` (stateless) and calls:

- ``check_m(args, ctx) -> dict[str, ToolError]``: validates the arguments filled so far against the
  schema, the referenced rows and the tool's preconditions; errors keyed by parameter ("" for the
  whole tool), empty when everything holds. Read-only; runs as each value arrives and again inside
  the execution transaction.
- ``summary_m(args, ctx) -> (pt, en)``: exactly what will be written, with looked-up context.
- ``m(args, ctx, idempotency_key) -> ToolResult``: executes. Writes run in ONE transaction (the
  business write, one audit_log row, the idempotency key: `tools.business.audit.run_write`), so a
  retried turn never writes twice.

Human references and raw values ("Lucas Oliveira" -> E047, "Dados" -> T04, "32,50" -> 32.5,
"13/05" -> 2026-05-13) are made canonical before that by `tools.business.resolvers` and
`tools.business.schema_check.prepare_value`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from sqlalchemy import Engine


@dataclass
class ToolError(Exception):
    """A refusal with a stable code and user-facing messages in Portuguese and English."""

    code: str
    message_pt: str
    message_en: str
    param: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)

    def message(self, lang: str) -> str:
        """The message in `lang`; anything but English gets Portuguese, the default language."""
        return self.message_en if lang == "en" else self.message_pt

    def __str__(self) -> str:  # pragma: no cover - for logs
        """Code and English message, for logs."""
        return f"{self.code}: {self.message_en}"


@dataclass
class ToolContext:
    """Who acts, when, and on which database."""

    engine: Engine
    user_id: str
    today: date
    now: datetime
    lang: str = "pt"
    groups: frozenset[str] = frozenset()


@dataclass
class ToolResult:
    """What a handler returns: a message for the user and the written/read data."""

    message_pt: str
    message_en: str
    data: dict[str, Any] = field(default_factory=dict)
    target_table: str | None = None
    target_id: str | None = None
    replayed: bool = False  # True when the idempotency key had already been used

    def message(self, lang: str) -> str:
        """The message in `lang`; anything but English gets Portuguese, the default language."""
        return self.message_en if lang == "en" else self.message_pt
