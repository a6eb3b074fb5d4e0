"""Run-time context (LangGraph `context_schema`).

Per-conversation knobs that are not conversation *state*: who is talking, which day it is, which
LLM profile to use, and the services (databases, registry, retrieval backends) the run uses. Every
plain field carries a description so that LangGraph Studio can render a form for it; an empty field
falls back to the deployment's configuration, read once at start-up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from datetime import date
from typing import Any

from tools.services import Services, default_services


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


@dataclass(kw_only=True)
class Context:
    """Who is talking to tramita and how tramita should answer."""

    user_id: str = field(
        default="",
        metadata={"description": "Employee id the conversation runs as (permissions and 'me/my' refer to this person). "
                                 "Env: TRAMITA_USER; empty = an anonymous user, who may use no tool."},
    )
    tenant: str = field(
        default="",
        metadata={"description": "Branch/tenant for the tool registry (HZV_FILIAL); '*' sees tools of all tenants. Env: TRAMITA_TENANT."},
    )
    language: str = field(
        default="",
        metadata={"description": "Answer language: 'pt', 'en' or 'auto' (detect from each message). Env: TRAMITA_LANGUAGE."},
    )
    today: str = field(
        default="",
        metadata={"description": "ISO date used as 'today' for validation and audit. Env: TRAMITA_TODAY; empty = the system date."},
    )
    llm_backend: str = field(
        default="",
        metadata={"description": "LLM profile: a backend name of policies/llm_profiles.yaml. Empty = the deployment's (env TRAMITA_LLM)."},
    )
    transaction_ttl_minutes: int = field(
        default=30,
        metadata={"description": "An idle transaction older than this expires at the next turn."},
    )
    max_reprompts: int = field(
        default=3,
        metadata={"description": "How many times a pending question is asked again before tramita offers to cancel."},
    )
    docs_top_k: int = field(
        default=5,
        metadata={"description": "How many distinct documents retrieval passes to synthesis (each with its best "
                                 "passage, plus the best passages overall)."},
    )
    backend_timeout_seconds: float = field(
        default=180.0,
        metadata={"description": "Per-backend time limit during parallel retrieval; a backend past it leaves a stated gap. "
                                 "SQL and Cypher generation share one local model, so the second waits for the first."},
    )

    services: Any = field(
        default=None, repr=False, compare=False,
        metadata={"description": "The Services object (Python callers only; empty = the deployment's default)."},
    )

    def __post_init__(self) -> None:
        """Fill empty fields from the environment (the templates' env-var fallback pattern)."""
        self.user_id = self.user_id or _env("TRAMITA_USER", "")
        self.tenant = self.tenant or _env("TRAMITA_TENANT", "*")
        self.language = self.language or _env("TRAMITA_LANGUAGE", "auto")
        self.today = self.today or _env("TRAMITA_TODAY", date.today().isoformat())
        if isinstance(self.services, Services):
            self.llm_backend = self.llm_backend or self.services.settings.llm_profile
        else:
            # no I/O here: the dev server builds the Context inside its event loop; the default
            # services are resolved on first use, in the node's worker thread
            self.services = None
            self.llm_backend = self.llm_backend or _env("TRAMITA_LLM", "local")

    @property
    def svc(self) -> Services:
        """The run's services (the deployment default when the caller passed none)."""
        if not isinstance(self.services, Services):
            self.services = default_services()
        return self.services

    @property
    def today_date(self) -> date:
        """`today` as a date; the field itself is ISO text so that Studio's form can show and edit it."""
        return date.fromisoformat(self.today)

    @classmethod
    def field_names(cls) -> list[str]:
        """The field names, to keep only known keys when a Context comes as a plain dict."""
        return [f.name for f in fields(cls)]
