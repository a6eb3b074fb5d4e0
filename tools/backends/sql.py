"""SQL: text-to-SQL over the linked schema, through SQLTool's read-only guard, with repair."""

from __future__ import annotations

from typing import Any

from tools.backends.base import BackendCall, render_rows
from tools.services import Services


class SQLBackend:
    """The business database, read-only (SELECT only, on a read-only connection)."""

    name = "sql"
    citation = "SQL"
    planner_description = ("the database: counts, sums, averages, lists and statuses of business records "
                           "(amounts, dates, people, teams, owners)")

    def available(self, services: Services) -> bool:
        """Whether the read-only connection answers."""
        return services.sql_tool.available()

    def run(self, call: BackendCall) -> dict[str, Any]:
        """Generate, validate and repair a SELECT; the rows go to synthesis."""
        from tools.text_to_sql import answer_sql

        run = answer_sql(call.question, call.services.sql_tool, today=call.today, backend=call.profile, usage=call.usage)
        return {"backend": self.name, "query": run.query, "rows": run.rows[:50], "error": run.error,
                "attempts": run.attempts}

    def render(self, context: dict[str, Any]) -> str:
        """The query and its rows, tagged [SQL]."""
        return render_rows(self.citation, context)

    def vocabulary(self, services: Services) -> list[str]:
        """What the database holds, in the semantic model's words (the planner embeds these)."""
        from tools.backends.vocabulary import semantic_model_file, semantic_model_vocabulary

        return semantic_model_vocabulary(semantic_model_file(services.settings.dataset_dir))
