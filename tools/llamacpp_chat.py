"""A LangChain chat model over ONE shared in-process llama.cpp model.

langchain-community's ChatLlamaCpp loads its own copy of the weights per instance (and the package
is being sunset), but tramita's seven components each want their own temperature and token limit on
the same 1.9 GB model. So this adapter shares one `llama_cpp.Llama` per GGUF file and process,
serialises calls on it (llama.cpp contexts are not thread-safe), reports token usage, and implements
`with_structured_output` with llama.cpp's JSON-schema-constrained sampling.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from pydantic import BaseModel, ConfigDict, PrivateAttr

from tools.structured import json_parser

_LOCKS: dict[str, threading.Lock] = {}
log = logging.getLogger("tramita.llm")


class LLMTimeout(TimeoutError):
    """Generation ran past the component's timeout."""


@lru_cache(maxsize=2)
def shared_llama(model_path: str, n_ctx: int = 4096, n_threads: int = 2) -> Any:
    """Load a GGUF once per process."""
    from llama_cpp import Llama

    _LOCKS.setdefault(model_path, threading.Lock())
    return Llama(model_path=model_path, n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads,
                 n_batch=512, verbose=False, seed=0)


def _role(m: BaseMessage) -> str:
    return {"human": "user", "ai": "assistant", "system": "system"}.get(m.type, "user")


class ChatLlamaCppShared(BaseChatModel):
    """Chat model on a shared llama.cpp instance. `response_format` may carry a JSON schema."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model_path: str
    n_ctx: int = 4096
    n_threads: int = 2
    temperature: float = 0.0
    max_tokens: int = 256
    timeout_seconds: float = 60.0
    _schema: dict[str, Any] | None = PrivateAttr(default=None)

    @property
    def _llm_type(self) -> str:
        return "llamacpp-shared"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        llama = shared_llama(self.model_path, self.n_ctx, self.n_threads)
        params: dict[str, Any] = {
            "messages": [{"role": _role(m), "content": str(m.content)} for m in messages],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "stop": stop,
            "seed": 0,
        }
        schema = kwargs.get("json_schema")
        if schema is not None:
            params["response_format"] = {"type": "json_object", "schema": schema}
        with _LOCKS[self.model_path]:
            started = time.monotonic()
            out = llama.create_chat_completion(**params)
            elapsed = time.monotonic() - started
        if elapsed > self.timeout_seconds:
            # llama.cpp cannot be interrupted safely mid-generation (a logits processor that forces
            # end-of-sequence breaks the JSON grammar and aborts the process), so `max_tokens` is the
            # hard bound and an overrun is reported after the fact.
            log.warning("llama.cpp call took %.1f s (> %.0f s timeout)", elapsed, self.timeout_seconds)
        text = out["choices"][0]["message"].get("content") or ""
        usage = out.get("usage", {})
        meta = UsageMetadata(input_tokens=int(usage.get("prompt_tokens", 0)),
                             output_tokens=int(usage.get("completion_tokens", 0)),
                             total_tokens=int(usage.get("total_tokens", 0)))
        msg = AIMessage(content=text, usage_metadata=meta, response_metadata={"seconds": elapsed})
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def with_structured_output(  # type: ignore[override]
        self, schema: type[BaseModel] | dict[str, Any], *, include_raw: bool = False, **kwargs: Any
    ) -> Runnable[LanguageModelInput, Any]:
        """Constrain sampling to the schema and parse the JSON into it."""
        json_schema = schema.model_json_schema() if isinstance(schema, type) else schema
        bound = self.bind(json_schema=json_schema)

        return bound | json_parser(schema, include_raw)

    def bind_tools(  # type: ignore[override]
        self, tools: Sequence[Any], **kwargs: Any
    ) -> Runnable[LanguageModelInput, BaseMessage]:
        raise NotImplementedError("tramita's local model is used through structured output, not tool calling")
