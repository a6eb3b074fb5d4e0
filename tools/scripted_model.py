"""A zero-latency, deterministic chat model for tests and framework benchmarks only.

It answers tramita's own prompts with simple rules (or with a given script), so graph routing can be
unit-tested and the framework's overhead measured without a real model. It never ships as an answer
engine: `llm_backend: scripted` is refused outside tests/benchmarks by nothing but convention, and
every capability also has tests against the real local model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from pydantic import BaseModel, ConfigDict

from tools.structured import json_parser

Responder = Callable[[str], str]


def _section(prompt: str, label: str) -> str:
    m = re.search(rf"{label}:\s*\"\"\"(.*?)\"\"\"", prompt, re.DOTALL)
    return m.group(1).strip() if m else ""


def rule_based(prompt: str) -> str:
    """Answer a tramita prompt by its template, with transparent rules."""
    if prompt.startswith("You extract tool arguments"):
        message = _section(prompt, "User message")
        block = prompt.split("Pending parameters:", 1)[1].split("Today:", 1)[0]
        out: dict[str, Any] = {}
        for line in block.strip().splitlines():
            m = re.match(r"-\s*(\w+)\s*\[(\w+)", line.strip())
            if m:
                out[m.group(1)] = message if m.group(2) == "text" else None
        return json.dumps(out, ensure_ascii=False)
    if prompt.startswith("You route a user's message"):
        m = re.search(r"^- (\w+):", prompt.split("Tools:", 1)[1], re.MULTILINE)
        return json.dumps({"tool": m.group(1) if m else "none"})
    if prompt.startswith("The assistant showed a summary"):
        return json.dumps({"decision": "other"})
    if prompt.startswith("You plan how to answer"):
        q = _section(prompt, "Question").lower()
        graph = any(w in q for w in ("plantão", "plantao", "on call", "on-call", "depend", "cadeia", "chain", "hierarquia"))
        docs = any(w in q for w in ("política", "politica", "policy", "limite", "limit", "runbook", "postmortem", "sla", "causa"))
        api = any(w in q for w in ("deploy", "status atual", "current status", "fora do ar", "right now", "degradad",
                                   "degraded"))
        return json.dumps({"use_docs": docs or not (graph or api), "use_sql": not docs and not graph and not api,
                           "use_graph": graph, "use_api": api, "reason": "keyword rules (scripted model)"})
    if prompt.startswith("You write ONE read-only") and '"sql"' in prompt:
        return json.dumps({"sql": "SELECT COUNT(*) AS n FROM expenses WHERE status = 'pending'"})
    if prompt.startswith("You write ONE read-only"):
        return json.dumps({"cypher": "MATCH (t:Team) RETURN t.name AS name ORDER BY name LIMIT 3"})
    if prompt.startswith("The query failed"):
        return json.dumps({"sql": "SELECT 1 AS one"})
    if prompt.startswith("You translate a question"):  # no translation: the search runs on the question
        return json.dumps({"question": _section(prompt, "Question")}, ensure_ascii=False)
    if prompt.startswith("You answer questions"):
        ctx = prompt.split("Context:", 1)[1].split('Question: """', 1)[0].strip()
        # the context in prose: table rows become plain lines (a copied table is no answer)
        lines = [re.sub(r"\s*\|\s*", " ", ln).strip() for ln in ctx.splitlines() if not re.fullmatch(r"[|\s:-]+", ln)]
        prose_lines: list[str] = []
        tag = ""
        for ln in lines:  # an API's call and label lines are not prose: their tag goes on the data lines
            m = re.match(r"^(\[api:[^\]]+\])\s*(?:GET\b.*|data:)\s*$", ln)
            if m:
                tag = m.group(1)
            elif ln:
                prose_lines.append(f"{ln} {tag}" if tag and not ln.startswith("[") else ln)
        prose = "\n".join(prose_lines)
        return prose[:700] if prose else "Não encontrei essa informação."
    return "{}"


STREAM_CHUNKS = 4


def stream_pieces(text: str, n: int = STREAM_CHUNKS) -> list[str]:
    """`text` cut into at most `n` consecutive pieces at spaces (their concatenation is `text`)."""
    words = re.split(r"(?<= )", text)
    if len(words) < 2:
        return [text]
    size = -(-len(words) // n)
    return ["".join(words[i:i + size]) for i in range(0, len(words), size)]


class ScriptedChatModel(BaseChatModel):
    """Replies from `script` in order when given, else from `responder` (rule_based by default)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    script: list[str] | None = None
    responder: Responder = rule_based
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _reply(self, messages: list[BaseMessage]) -> tuple[str, UsageMetadata]:
        prompt = "\n---\n".join(str(m.content) for m in messages if m.type in ("system", "human"))
        if messages and messages[0].type == "system":
            prompt = str(messages[0].content) + "\n---\n" + "\n".join(str(m.content) for m in messages[1:])
        self.calls += 1
        text = self.script.pop(0) if self.script else self.responder(prompt)
        meta = UsageMetadata(input_tokens=len(prompt) // 4, output_tokens=len(text) // 4,
                             total_tokens=(len(prompt) + len(text)) // 4)
        return text, meta

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        text, meta = self._reply(messages)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text, usage_metadata=meta))])

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        """The same reply in several chunks (at most STREAM_CHUNKS, split at spaces), so tests of
        `stream_mode="messages"` see a reply arrive in pieces, as a real model writes it.
        """
        text, meta = self._reply(messages)
        pieces = stream_pieces(text)
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            yield ChatGenerationChunk(message=AIMessageChunk(content=piece, usage_metadata=meta if last else None,
                                                             chunk_position="last" if last else None))

    def with_structured_output(  # type: ignore[override]
        self, schema: type[BaseModel] | dict[str, Any], *, include_raw: bool = False, **kwargs: Any
    ) -> Runnable[LanguageModelInput, Any]:
        """Parse the reply's JSON into `schema` (the rules already answer in the schema's shape)."""
        return self | json_parser(schema, include_raw)

    def bind_tools(  # type: ignore[override]
        self, tools: Sequence[Any], **kwargs: Any
    ) -> Runnable[LanguageModelInput, BaseMessage]:
        """Not supported: tramita uses structured output."""
        raise NotImplementedError("the scripted model does not call tools")
