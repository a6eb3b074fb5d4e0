"""A toy retrieval backend: the whole of what a new source needs (see docs/architecture.md)."""

from __future__ import annotations

from typing import Any

from tools.backends.base import BackendCall
from tools.services import Services


class ToyBackend:
    """Answers every question with one row about kites."""

    name = "toy"
    citation = "toy"
    planner_description = "the toy catalogue: which toys exist"

    def available(self, services: Services) -> bool:
        """Always there: it needs no store."""
        return True

    def run(self, call: BackendCall) -> dict[str, Any]:
        """One row, whatever the question."""
        return {"backend": self.name, "rows": [{"toy": "kite", "asked": call.question}]}

    def render(self, context: dict[str, Any]) -> str:
        """The row, tagged with the citation."""
        return f"[toy] {context['rows'][0]['toy']}"
