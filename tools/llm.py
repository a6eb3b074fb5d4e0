"""Chat models by component profile, and the one way nodes call them.

`policies/llm_profiles.yaml` gives each component (extraction, confirmation, router, planner,
text_to_sql, text_to_cypher, synthesis) its backend, temperature, token limit and timeout.
`structured_call` is the budgeted entry point: schema-constrained output, validation, ONE retry that
shows the model its error, then a clear `LLMError`; it returns token usage so every turn's trace can
count LLM calls and tokens.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from pydantic import BaseModel, ConfigDict, Field

from tools.registry_models import load_model
from tramita.base.logmask import get_logger
from tramita.base.paths import POLICIES_DIR
from tramita.base.prompts import head as prompt_head
from tramita.base.prompts import split

log = get_logger("tramita")

T = TypeVar("T", bound=BaseModel)
COMPONENTS = ("transaction_parameter_extraction", "confirmation", "router", "planner", "text_to_sql",
              "text_to_cypher", "synthesis", "query_translation")


class LLMError(RuntimeError):
    """The model failed twice (timeout, invalid JSON, wrong schema, empty reply)."""


class BackendSpec(BaseModel):
    """One entry of `backends:` in llm_profiles.yaml: a provider, its model and (local) context options."""

    model_config = ConfigDict(extra="forbid")
    provider: str  # a key of PROVIDERS; checked when the file is loaded
    model: str
    model_env: str | None = None
    base_url_env: str | None = None
    api_key_env: str | None = None
    n_ctx: int = 4096
    n_threads: int = 2
    # llama.cpp context options (`tramita bench --sections llama` measures them on the machine)
    n_threads_batch: int | None = None  # prompt evaluation threads; None: n_threads
    n_batch: int = Field(512, ge=1)  # prompt tokens per llama_decode call
    n_ubatch: int = Field(512, ge=1)  # physical micro-batch
    flash_attn: bool = False
    use_mmap: bool = True
    use_mlock: bool = False
    # evaluated KV state of each component's static prompt prefix, kept in RAM (0: off);
    # env TRAMITA_PREFIX_CACHE_MIB overrides
    prefix_cache_mib: float = Field(256, ge=0)
    # and on disk under <models>/cache/prefix (0: off; env TRAMITA_PREFIX_CACHE_DIR moves it), so a
    # new process (a restarted server, `tramita ask`) loads a prefix in milliseconds instead of
    # evaluating ~2,000 tokens at ~40 tok/s
    prefix_cache_disk_mib: float = Field(1024, ge=0)


class ComponentProfile(BaseModel):
    """One entry of `components:`: the backend a component calls and its sampling limits."""

    model_config = ConfigDict(extra="forbid")
    backend: str
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(256, ge=1, le=8192)
    timeout_seconds: float = Field(60.0, gt=0)


class ProfilesFile(BaseModel):
    """The whole llm_profiles.yaml."""

    model_config = ConfigDict(extra="forbid")
    backends: dict[str, BackendSpec]
    components: dict[str, ComponentProfile]


@lru_cache(maxsize=1)
def profiles() -> ProfilesFile:
    """The validated profiles file (unknown providers and backends fail here, naming the field)."""
    path = POLICIES_DIR / "llm_profiles.yaml"
    pf: ProfilesFile = load_model(path, ProfilesFile)
    missing = [c for c in COMPONENTS if c not in pf.components]
    unknown = [f"{c}.backend={p.backend}" for c, p in pf.components.items() if p.backend not in pf.backends]
    if missing or unknown:
        raise ValueError(f"{path}: field components: missing {missing}, unknown backends {unknown}")
    bad = [f"backends.{n}.provider={b.provider!r}" for n, b in pf.backends.items() if b.provider not in PROVIDERS]
    if bad:
        raise ValueError(f"{path}: field {', '.join(bad)}: unknown provider; choose one of {', '.join(sorted(PROVIDERS))}")
    return pf


def backend_names() -> list[str]:
    """The LLM profiles a deployment may choose (`--profile`, `TRAMITA_LLM`, `Context.llm_backend`)."""
    return sorted(profiles().backends)


class UnknownProfile(ValueError):
    """A profile name that `policies/llm_profiles.yaml` does not define."""


def check_profile(name: str) -> str:
    """`name` if it is a defined profile (or a model installed with `override_model`); otherwise fail
    at once, naming the valid ones.
    """
    if name not in profiles().backends and name not in _overrides:
        raise UnknownProfile(f"unknown LLM profile {name!r}; valid profiles: {', '.join(backend_names())}")
    return name


@dataclass
class Usage:
    """LLM calls, tokens and seconds of one node's work, for the turn trace.

    `cached_tokens` are prompt tokens whose KV state was reused (llama.cpp's live context or a saved
    static prefix, `tools.prefix_cache`; OpenAI-compatible servers report theirs the same way through
    LangChain's `input_token_details.cache_read`), so `prompt_tokens - cached_tokens` were evaluated.
    `first_token_s` is the time to the first token of the last free-text (answer) call.
    """

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cached_tokens: int = 0
    first_token_s: float | None = None
    last_call: dict[str, Any] = field(default_factory=dict)  # the last reply's response_metadata (the bench reads it)

    def add(self, msg: AIMessage | None, seconds: float) -> None:
        """Count one call (failed calls count too, with the time they took)."""
        self.calls += 1
        self.seconds += seconds
        self.last_call = dict(getattr(msg, "response_metadata", None) or {})
        meta = getattr(msg, "usage_metadata", None) or {}
        self.prompt_tokens += int(meta.get("input_tokens", 0))
        self.completion_tokens += int(meta.get("output_tokens", 0))
        details = meta.get("input_token_details") or {}
        self.cached_tokens += int(details.get("cache_read", 0) or 0)

    def merge(self, other: Usage) -> None:
        """Add another node's or backend's counters (every counter: a field left out under-reports)."""
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.seconds += other.seconds
        self.cached_tokens += other.cached_tokens
        if other.first_token_s is not None:
            self.first_token_s = other.first_token_s

    def trace(self) -> dict[str, Any]:
        """The counters as `TurnTrace` fields."""
        out: dict[str, Any] = {"llm_calls": self.calls, "prompt_tokens": self.prompt_tokens,
                               "completion_tokens": self.completion_tokens, "llm_seconds": self.seconds}
        if self.cached_tokens:
            out["cached_tokens"] = self.cached_tokens
        if self.first_token_s is not None:
            out["first_token_s"] = self.first_token_s
        return out


_overrides: dict[str, BaseChatModel] = {}
# LangGraph's tag for model calls that stream_mode="messages" must not show (langgraph.constants.TAG_NOSTREAM)
_NOSTREAM_TAG = "nostream"


def override_model(backend: str, model: BaseChatModel | None) -> None:
    """Install a model object for a backend name (tests, benchmarks, fault injection)."""
    if model is None:
        _overrides.pop(backend, None)
    else:
        _overrides[backend] = model


def prefix_cache_settings(spec: BackendSpec) -> tuple[float, str | None]:
    """(RAM MiB, disk folder or None) of the static-prefix KV cache: the spec, then the environment."""
    mib = os.environ.get("TRAMITA_PREFIX_CACHE_MIB", "").strip()
    folder = os.environ.get("TRAMITA_PREFIX_CACHE_DIR") or None
    if folder is None and spec.prefix_cache_disk_mib > 0:
        from tools.model_files import models_dir

        folder = str(models_dir() / "cache" / "prefix")
    return (float(mib) if mib else spec.prefix_cache_mib), folder


def _llamacpp(spec: BackendSpec, prof: ComponentProfile) -> BaseChatModel:
    from tools.llamacpp_chat import ChatLlamaCppShared
    from tools.model_assets import gguf_path

    cache_mib, cache_dir = prefix_cache_settings(spec)
    return ChatLlamaCppShared(model_path=str(gguf_path(spec.model)), n_ctx=spec.n_ctx, n_threads=spec.n_threads,
                              n_threads_batch=spec.n_threads_batch, n_batch=spec.n_batch, n_ubatch=spec.n_ubatch,
                              flash_attn=spec.flash_attn, use_mmap=spec.use_mmap, use_mlock=spec.use_mlock,
                              prefix_cache_mib=cache_mib, prefix_cache_dir=cache_dir,
                              # a folder named by the environment with the disk tier off gets the default budget
                              prefix_cache_disk_mib=spec.prefix_cache_disk_mib
                              or BackendSpec.model_fields["prefix_cache_disk_mib"].default,
                              temperature=prof.temperature, max_tokens=prof.max_tokens,
                              timeout_seconds=prof.timeout_seconds)


def _openai(spec: BackendSpec, prof: ComponentProfile) -> BaseChatModel:
    from langchain.chat_models import init_chat_model

    model = os.environ.get(spec.model_env or "", "") or spec.model
    base_url = os.environ.get(spec.base_url_env or "", "") or None
    api_key = os.environ.get(spec.api_key_env or "", "") or "not-needed"
    chat: BaseChatModel = init_chat_model(model, model_provider="openai", base_url=base_url, api_key=api_key,
                                          temperature=prof.temperature, max_tokens=prof.max_tokens,
                                          timeout=prof.timeout_seconds, max_retries=0)
    return chat


def _scripted(spec: BackendSpec, prof: ComponentProfile) -> BaseChatModel:
    from tools.scripted_model import ScriptedChatModel

    return ScriptedChatModel()


# The one place an LLM provider plugs in: a name in llm_profiles.yaml's `provider` -> a factory.
PROVIDERS: dict[str, Callable[[BackendSpec, ComponentProfile], BaseChatModel]] = {
    "llamacpp": _llamacpp,
    "openai": _openai,
    "scripted": _scripted,  # reachable only through a profile that names it
}


@lru_cache(maxsize=32)
def _build(component: str, backend_name: str) -> BaseChatModel:
    pf = profiles()
    if backend_name not in pf.backends:
        raise LLMError(f"unknown LLM profile {backend_name!r}; valid profiles: {', '.join(backend_names())}")
    spec = pf.backends[backend_name]
    return PROVIDERS[spec.provider](spec, pf.components[component])


def chat_model(component: str, backend: str | None = None) -> BaseChatModel:
    """The chat model for a component; `backend` (the Context's llm_backend) overrides the profile."""
    name = backend or profiles().components[component].backend
    if name in _overrides:
        return _overrides[name]
    return _build(component, name)


def warm(component: str, prompt: str, *, backend: str | None = None, **values: Any) -> Any:
    """Evaluate the static prefix of `prompts/<prompt>.txt` (filled with `values`) on `component`'s
    model ahead of any question, so its first call pays only for its own tokens. Returns the token
    accounting (`saved`: evaluated and kept now; else it was already kept), or None for a model
    without a local prefix cache (a server keeps its own) or a prompt without a static prefix.
    """
    model = chat_model(component, backend)
    hook = getattr(model, "warm", None)
    system = prompt_head(prompt, **values)
    return hook(system) if hook is not None and system else None


def structured_call(component: str, schema: type[T], prompt: str, *, backend: str | None = None,
                    usage: Usage | None = None, **values: Any) -> T:
    """Render `prompts/<prompt>.txt`, call the component's model under `schema`, validate, retry once.

    Raises LLMError with the reason after the second failure; `usage` accumulates calls and tokens
    of every attempt.
    """
    usage = usage if usage is not None else Usage()
    system, user = split(prompt, **values)
    messages: list[BaseMessage] = [SystemMessage(system), HumanMessage(user)] if system else [HumanMessage(user)]
    model = chat_model(component, backend).with_structured_output(schema, include_raw=True)
    last_error = ""
    for attempt in range(2):
        started = time.monotonic()
        try:
            # JSON for the graph's own use is not the answer: keep it out of stream_mode="messages"
            out = model.invoke(messages, config=RunnableConfig(tags=[_NOSTREAM_TAG]))
        except Exception as exc:  # noqa: BLE001 - timeouts, connection errors, runtime errors
            usage.add(None, time.monotonic() - started)
            last_error = f"{type(exc).__name__}: {exc}"[:300]
            continue
        raw = out.get("raw") if isinstance(out, dict) else None
        usage.add(raw, time.monotonic() - started)
        parsed = out.get("parsed") if isinstance(out, dict) else out
        if parsed is not None and isinstance(parsed, schema):
            return parsed
        err = out.get("parsing_error") if isinstance(out, dict) else None
        content = str(getattr(raw, "content", ""))[:200]
        last_error = f"invalid output {content!r}: {err}"[:300] if content.strip() else "empty reply"
        if (getattr(raw, "response_metadata", None) or {}).get("finish_reason") == "loop":
            last_error = f"the reply kept repeating itself and was cut: {content[:120]!r}"
        if attempt == 0:
            log.info("LLM %s: attempt 1 invalid (%s); retrying once with the error", component, last_error[:200])
            messages = [*messages, AIMessage(content or "(empty)"),
                        HumanMessage(f"That reply was invalid ({last_error}). Reply again with JSON that matches the schema.")]
    log.warning("LLM %s failed twice: %s", component, last_error[:300])
    raise LLMError(f"{component}: {last_error}")


def text_call(component: str, prompt: str, *, backend: str | None = None, usage: Usage | None = None,
              **values: Any) -> str:
    """Free-text generation (synthesis). Empty output or an exception is retried once."""
    usage = usage if usage is not None else Usage()
    system, user = split(prompt, **values)
    messages: list[BaseMessage] = [SystemMessage(system), HumanMessage(user)] if system else [HumanMessage(user)]
    model = chat_model(component, backend)
    last_error = ""
    for _ in range(2):
        started = time.monotonic()
        try:
            msg = model.invoke(messages)
        except Exception as exc:  # noqa: BLE001
            usage.add(None, time.monotonic() - started)
            last_error = f"{type(exc).__name__}: {exc}"[:300]
            continue
        usage.add(msg if isinstance(msg, AIMessage) else None, time.monotonic() - started)
        first = (getattr(msg, "response_metadata", None) or {}).get("first_token_s")
        if isinstance(first, int | float):
            usage.first_token_s = float(first)
        text = str(msg.content).strip()
        if text:
            return text
        last_error = "empty reply"
    log.warning("LLM %s failed twice: %s", component, last_error[:300])
    raise LLMError(f"{component}: {last_error}")
