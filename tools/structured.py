"""The JSON → schema parser that both in-house chat models put behind `with_structured_output`."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda
from pydantic import BaseModel


def json_parser(schema: type[BaseModel] | dict[str, Any], include_raw: bool) -> RunnableLambda[AIMessage, Any]:
    """Parse a reply's JSON into `schema`; with include_raw, return LangChain's
    {"raw", "parsed", "parsing_error"} dict so the caller can retry with the error.
    """

    def _parse(msg: AIMessage) -> Any:
        raw = msg.content if isinstance(msg.content, str) else json.dumps(msg.content)
        parsed: Any = None
        error: Exception | None = None
        try:
            data = json.loads(raw)
            parsed = schema.model_validate(data) if isinstance(schema, type) else data
        except Exception as exc:  # noqa: BLE001 - reported back to the caller for a retry
            error = exc
        if include_raw:
            return {"raw": msg, "parsed": parsed, "parsing_error": error}
        if error is not None:
            raise error
        return parsed

    return RunnableLambda(_parse)
