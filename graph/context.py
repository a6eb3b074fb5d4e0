"""Run-time context (LangGraph `context_schema`).

Per-conversation knobs that are not conversation *state*: who is talking, which day it is, which
LLM profile set to use. Every field falls back to an environment variable so the CLI, the Python
API and `langgraph dev` share one configuration, and every field carries a description so that
LangGraph Studio can render a form for it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from datetime import date


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


@dataclass(kw_only=True)
class Context:
    """Who is talking to tramita and how tramita should answer."""

    user_id: str = field(
        default="",
        metadata={"description": "Employee id the conversation runs as (permissions and 'me/my' refer to this person). Env: TRAMITA_USER."},
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
        metadata={"description": "ISO date used as 'today' for validation and audit (the NovaOps sample is as of 2026-05-15). Env: TRAMITA_TODAY; empty = the system date."},
    )
    llm_backend: str = field(
        default="",
        metadata={"description": "LLM backend from policies/llm_profiles.yaml: 'local' (Qwen2.5-Coder-1.5B via llama.cpp), 'local-small', 'openai' or 'scripted'. Env: TRAMITA_LLM."},
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

    def __post_init__(self) -> None:
        """Fill empty fields from the environment (the templates' env-var fallback pattern)."""
        self.user_id = self.user_id or _env("TRAMITA_USER", "E006")
        self.tenant = self.tenant or _env("TRAMITA_TENANT", "*")
        self.language = self.language or _env("TRAMITA_LANGUAGE", "auto")
        self.today = self.today or _env("TRAMITA_TODAY", date.today().isoformat())
        self.llm_backend = self.llm_backend or _env("TRAMITA_LLM", "local")

    @property
    def today_date(self) -> date:
        return date.fromisoformat(self.today)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]
