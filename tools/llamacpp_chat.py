"""A LangChain chat model over ONE shared in-process llama.cpp model.

langchain-community's ChatLlamaCpp loads its own copy of the weights per instance (and the package
is being sunset), but tramita's components each want their own temperature and token limit on the
same 1.9 GB model. So this adapter shares one `llama_cpp.Llama` per GGUF file, context options and
process, serialises calls on it (llama.cpp contexts are not thread-safe), reports token usage, and
implements `with_structured_output` with llama.cpp's JSON-schema-constrained sampling.

Three things make it fast on 2 cores:
- the prompt is rendered and tokenized here (with the GGUF's own chat template, exactly as
  llama-cpp-python's chat handler would), so the static system prefix is known in tokens and its
  evaluated KV state is kept per prefix (`tools.prefix_cache`): a call evaluates only its new tokens;
- `_stream` yields the text as llama.cpp samples it, so LangGraph's `stream_mode="messages"` (and
  the CLI) show the answer while it is written;
- the context options (`n_batch`, `n_ubatch`, `flash_attn`, `use_mmap`, `use_mlock`, threads) come
  from the backend spec in `policies/llm_profiles.yaml`; `tramita bench --sections llama` measures them.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.ai import InputTokenDetails, UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from pydantic import BaseModel, ConfigDict, PrivateAttr

from tools.llama_build import checked
from tools.prefix_cache import CallTokens, PrefixCache, common_prefix, model_identity
from tools.structured import json_parser

# One lock per GGUF file: every context on the same weights competes for the same cores anyway.
_LOCKS: dict[str, threading.Lock] = {}
log = logging.getLogger("tramita.llm")

# llama-cpp-python's chat handler defaults (create_chat_completion), kept so that outputs do not
# change with this adapter.
_SAMPLING: dict[str, Any] = {"top_p": 0.95, "top_k": 40, "min_p": 0.05, "typical_p": 1.0, "repeat_penalty": 1.0,
             "presence_penalty": 0.0, "frequency_penalty": 0.0, "tfs_z": 1.0, "mirostat_mode": 0}


class LLMTimeout(TimeoutError):
    """Generation ran past the component's timeout."""


@dataclass(frozen=True)
class LlamaOptions:
    """Context options of a loaded model; a different value loads a different context."""

    n_ctx: int = 4096
    n_threads: int = 2
    n_threads_batch: int | None = None  # None: n_threads
    n_batch: int = 512
    n_ubatch: int = 512
    flash_attn: bool = False
    use_mmap: bool = True
    use_mlock: bool = False


class LoadedLlama:
    """One `llama_cpp.Llama` with what every call on it needs: its lock, the GGUF's chat template,
    compiled JSON grammars and the static-prefix KV cache.
    """

    def __init__(self, model_path: str, opts: LlamaOptions) -> None:
        """Load the weights (mmap by default) and create the context."""
        checked()  # a build for another CPU would die in the library, not raise
        from llama_cpp import Llama
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.model_path = model_path
        self.opts = opts
        self.lock = _LOCKS.setdefault(model_path, threading.Lock())
        started = time.perf_counter()
        self.llama: Any = Llama(model_path=model_path, n_ctx=opts.n_ctx, n_threads=opts.n_threads,
                           n_threads_batch=opts.n_threads_batch or opts.n_threads, n_batch=opts.n_batch,
                           n_ubatch=opts.n_ubatch, flash_attn=opts.flash_attn, use_mmap=opts.use_mmap,
                           use_mlock=opts.use_mlock, verbose=False, seed=0)
        self.load_s = time.perf_counter() - started
        model = self.llama._model
        eos_id = self.llama.token_eos()
        bos_id = self.llama.token_bos()
        self.eos_id = eos_id
        template = self.llama.metadata.get("tokenizer.chat_template")
        # the same formatter llama-cpp-python builds for "chat_template.default"
        self.formatter: Any = Jinja2ChatFormatter(template=template, eos_token=model.token_get_text(eos_id) if eos_id != -1 else "",
                                             bos_token=model.token_get_text(bos_id) if bos_id != -1 else "",
                                             stop_token_ids=[eos_id]) if template else None
        self.cache = PrefixCache(model_identity(model_path, flash_attn=opts.flash_attn, n_ubatch=opts.n_ubatch), max_mib=0)
        self._grammars: dict[str, Any] = {}

    def configure_cache(self, max_mib: float, disk_dir: str | None, disk_mib: float = 1024) -> None:
        """Set the prefix cache's budget (the latest caller wins; shrinking evicts on the next save)."""
        self.cache.max_bytes = int(max_mib * 1024 * 1024)
        self.cache.disk_dir = Path(disk_dir).expanduser() if disk_dir else None
        self.cache.disk_bytes = int(disk_mib * 1024 * 1024)
        if self.cache.max_bytes <= 0:
            self.cache.clear()

    def grammar(self, schema: dict[str, Any] | None) -> Any:
        """The GBNF grammar of a JSON schema, compiled once per schema."""
        if schema is None:
            return None
        from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar

        key = json.dumps(schema, sort_keys=True)
        g = self._grammars.get(key)
        if g is None:
            try:
                g = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
            except Exception:  # noqa: BLE001 - llama-cpp-python falls back to plain JSON the same way
                g = LlamaGrammar.from_string(JSON_GBNF, verbose=False)
            if len(self._grammars) > 128:
                self._grammars.clear()
            self._grammars[key] = g
        return g

    def render(self, messages: list[dict[str, str]]) -> tuple[list[int], int, list[str], Any]:
        """(prompt tokens, static-prefix length in tokens, stop strings, stopping criteria).

        The static prefix is what the prompt shares with the same system message followed by an
        empty user turn: the system text and the chat template's markup up to the user's content.
        """
        if self.formatter is None:  # no template in the GGUF: llama-cpp-python's llama-2 fallback
            text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
            return self.llama.tokenize(text.encode("utf-8"), add_bos=True, special=True), 0, [], None
        res = self.formatter(messages=messages)
        tokens = self.llama.tokenize(res.prompt.encode("utf-8"), add_bos=not res.added_special, special=True)
        boundary = 0
        if messages and messages[0]["role"] == "system":
            head = self.formatter(messages=[messages[0], {"role": "user", "content": ""}])
            head_tokens = self.llama.tokenize(head.prompt.encode("utf-8"), add_bos=not head.added_special, special=True)
            import numpy as np

            boundary = common_prefix(np.asarray(tokens, dtype=np.int32), np.asarray(head_tokens, dtype=np.int32))
        stop = res.stop if isinstance(res.stop, list) else ([res.stop] if res.stop else [])
        return tokens, boundary, stop, res.stopping_criteria


_LOAD_LOCK = threading.Lock()


@lru_cache(maxsize=2)
def _load(model_path: str, opts: LlamaOptions) -> LoadedLlama:
    return LoadedLlama(model_path, opts)


def loaded_llama(model_path: str, opts: LlamaOptions = LlamaOptions()) -> LoadedLlama:
    """Load a GGUF once per process and context options (retrieval backends run in parallel
    threads: without the lock two of them could each load a copy at first use).
    """
    with _LOAD_LOCK:
        return _load(model_path, opts)


def shared_llama(model_path: str, n_ctx: int = 4096, n_threads: int = 2, **options: Any) -> Any:
    """The shared `llama_cpp.Llama` for a GGUF (callers serialise on `_LOCKS[model_path]`)."""
    return loaded_llama(model_path, LlamaOptions(n_ctx=n_ctx, n_threads=n_threads, **options)).llama


def _role(m: BaseMessage) -> str:
    return {"human": "user", "ai": "assistant", "system": "system"}.get(m.type, "user")


class _TokenClock:
    """A stopping criterion that never stops: it notes when the first token was sampled and counts
    sampled tokens (the streamed chunks carry no usage).
    """

    def __init__(self, started: float) -> None:
        self.started = started
        self.first: float | None = None
        self.sampled = 0

    def __call__(self, input_ids: Any, logits: Any) -> bool:
        self.sampled += 1
        if self.first is None:
            self.first = time.monotonic() - self.started
        return False


LOOP_CHARS = 80  # a cycle is cut once it has run this long, and two full turns at least
LOOP_PERIOD = 200  # the longest cycle looked for (a column list written over and over)


def repeats_itself(text: str, span: int = LOOP_CHARS, longest: int = LOOP_PERIOD) -> bool:
    """Whether `text` ends in a cycle: the same block of characters written twice or more in a row,
    over `span` characters at least.

    Why: at temperature 0 the 1.5B model sometimes falls into a cycle ("e.team_id, e.manager_id,
    e.office_city, …" over and over) and writes until `max_tokens`, 20 s of decoding on 2 cores for
    an output that cannot parse. A legitimate reply may repeat a long run far apart (a measure listed,
    then ordered by), but never the same block twice back to back: that is the loop.
    """
    n = len(text)
    for period in range(1, min(longest, n // 2) + 1):
        size = max(span, 2 * period)
        if size <= n and text[n - size + period:] == text[n - size:n - period]:
            return True
    return False


class GreedyGrammarDecoder:
    """Greedy decoding under a GBNF grammar that checks the best token first.

    llama-cpp-python's sampler chain runs the grammar over all ~152k candidate tokens before greedy
    picks one, which costs more than the model's forward pass on 2 cores. At temperature 0 the best
    token the grammar allows is the model's best token whenever the grammar allows that one (the
    allowed set is a subset), so checking that single token first and constraining the whole
    vocabulary only when it is refused picks exactly the same tokens (llama.cpp's common sampler
    does the same: grammar_first=false). Ties resolve to the lowest token id, as llama.cpp's greedy.
    """

    def __init__(self, loaded: LoadedLlama, grammar: str, clock: _TokenClock) -> None:
        """`grammar`: GBNF text with a `root` rule; `clock` notes the first token and counts tokens."""
        self.loaded = loaded
        self.grammar = grammar
        self.clock = clock
        self.finish: str | None = None
        self.generated = 0
        self.rejections = 0

    def run(self, tokens: list[int], max_tokens: int, stops: list[str]) -> Iterator[str]:
        """Evaluate what the context lacks of `tokens`, then decode, yielding text as it grows.

        `finish` ("stop", "length", or "loop" when the text starts repeating itself: `repeats_itself`)
        and `generated` (tokens, end-of-generation excluded) are set when the iterator is exhausted.
        """
        import ctypes

        import llama_cpp
        import numpy as np

        llama: Any = self.loaded.llama
        ctx = llama._ctx.ctx
        vocab = llama._model.vocab
        n_vocab = llama.n_vocab()
        n_ctx = llama.n_ctx()
        keep = common_prefix(np.asarray(llama.input_ids[: llama.n_tokens], dtype=np.int32),
                             np.asarray(tokens, dtype=np.int32))
        keep = min(keep, len(tokens) - 1)  # the last prompt token is evaluated for its logits
        llama.n_tokens = keep
        llama.eval(tokens[keep:])  # removes cells from `keep` on, then decodes
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, self.grammar.encode("utf-8"), b"root")
        if not sampler:
            raise ValueError("llama.cpp refused the JSON grammar")
        one = (llama_cpp.llama_token_data * 1)()
        one_arr = llama_cpp.llama_token_data_array(data=one, size=1, selected=-1, sorted=False)
        full = (llama_cpp.llama_token_data * n_vocab)()
        view = np.frombuffer(full, dtype=np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)]))
        ids = np.arange(n_vocab, dtype=np.int32)
        out: list[int] = []
        shown = ""
        limit = max(0, min(max_tokens, n_ctx - len(tokens)))
        self.finish = "length"
        try:
            for _ in range(limit):
                if out:
                    llama.eval([out[-1]])  # the previous token, now that it is kept
                logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
                tok = int(np.argmax(logits))
                one[0] = llama_cpp.llama_token_data(tok, float(logits[tok]), 0.0)
                one_arr.data = ctypes.cast(one, llama_cpp.llama_token_data_p)  # type: ignore[assignment]
                one_arr.size, one_arr.selected, one_arr.sorted = 1, -1, False
                llama_cpp.llama_sampler_apply(sampler, ctypes.byref(one_arr))
                if one[0].logit == float("-inf"):  # refused: constrain the whole vocabulary
                    self.rejections += 1
                    view["id"], view["logit"], view["p"] = ids, logits, 0.0
                    arr = llama_cpp.llama_token_data_array(data=full, size=n_vocab, selected=-1, sorted=False)
                    llama_cpp.llama_sampler_apply(sampler, ctypes.byref(arr))
                    tok = int(view["id"][int(np.argmax(view["logit"]))])
                llama_cpp.llama_sampler_accept(sampler, tok)
                self.clock(None, None)
                if llama_cpp.llama_vocab_is_eog(vocab, tok):
                    self.finish = "stop"
                    break
                out.append(tok)
                text = llama.detokenize(out, prev_tokens=tokens).decode("utf-8", errors="ignore")
                cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
                if cut >= 0:
                    text, self.finish = text[:cut], "stop"
                elif repeats_itself(text):
                    self.finish = "loop"  # the JSON is left unfinished: the caller's validation retries or gives up
                if len(text) > len(shown) and text.startswith(shown):
                    piece, shown = text[len(shown):], text
                    self.generated = len(out)
                    yield piece
                if self.finish in ("stop", "loop"):
                    break
        finally:
            llama_cpp.llama_sampler_free(sampler)
        self.generated = len(out)


class ChatLlamaCppShared(BaseChatModel):
    """Chat model on a shared llama.cpp instance; `json_schema` (bound by `with_structured_output`)
    constrains sampling to a schema.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model_path: str
    n_ctx: int = 4096
    n_threads: int = 2
    n_threads_batch: int | None = None
    n_batch: int = 512
    n_ubatch: int = 512
    flash_attn: bool = False
    use_mmap: bool = True
    use_mlock: bool = False
    prefix_cache_mib: float = 256.0  # 0 turns the static-prefix KV cache off
    prefix_cache_dir: str | None = None  # a folder keeps prefixes across processes
    prefix_cache_disk_mib: float = 1024.0
    # JSON-constrained greedy calls check the model's own best token against the grammar and only
    # constrain the whole 152k vocabulary when it is refused (llama.cpp's own sampler order);
    # False: llama-cpp-python's sampler chain, which applies the grammar to every token first
    fast_grammar: bool = True
    temperature: float = 0.0
    max_tokens: int = 256
    timeout_seconds: float = 60.0
    _schema: dict[str, Any] | None = PrivateAttr(default=None)

    @property
    def _llm_type(self) -> str:
        return "llamacpp-shared"

    def options(self) -> LlamaOptions:
        """The context options this model's calls run on."""
        return LlamaOptions(n_ctx=self.n_ctx, n_threads=self.n_threads, n_threads_batch=self.n_threads_batch,
                            n_batch=self.n_batch, n_ubatch=self.n_ubatch, flash_attn=self.flash_attn,
                            use_mmap=self.use_mmap, use_mlock=self.use_mlock)

    def loaded(self) -> LoadedLlama:
        """The shared model, with this model's prefix-cache budget applied."""
        loaded = loaded_llama(self.model_path, self.options())
        loaded.configure_cache(self.prefix_cache_mib, self.prefix_cache_dir, self.prefix_cache_disk_mib)
        return loaded

    def warm(self, system: str) -> CallTokens:
        """Evaluate and keep the static prefix that calls with this system message share, generating
        nothing: a first question then pays only for its own tokens (a kept prefix is only restored).
        """
        import numpy as np

        loaded = self.loaded()
        with loaded.lock:
            # the prefix a real call keeps ends where two different questions start to differ
            one, boundary, _, _ = loaded.render([{"role": "system", "content": system}, {"role": "user", "content": "A"}])
            other = loaded.render([{"role": "system", "content": system}, {"role": "user", "content": "Z"}])[0]
            boundary = min(boundary, common_prefix(np.asarray(one, dtype=np.int32), np.asarray(other, dtype=np.int32)))
            return loaded.cache.prepare(loaded.llama, one, boundary)

    # ------------------------------------------------------------------ calls
    def _completion(self, messages: list[BaseMessage], stop: list[str] | None, schema: dict[str, Any] | None,
                    stream: bool) -> Iterator[str | AIMessageChunk]:
        """Run one completion under the model's lock: text pieces as they are sampled (one piece
        when not streaming), then a final empty chunk carrying usage and timings.
        """
        loaded = loaded_llama(self.model_path, self.options())
        llama: Any = loaded.llama
        chat = [{"role": _role(m), "content": str(m.content)} for m in messages]
        with loaded.lock:
            loaded.configure_cache(self.prefix_cache_mib, self.prefix_cache_dir, self.prefix_cache_disk_mib)
            started = time.monotonic()
            tokens, boundary, stops, criteria = loaded.render(chat)
            acct: CallTokens = loaded.cache.prepare(llama, tokens, boundary)
            clock = _TokenClock(started)
            grammar = loaded.grammar(schema)
            finish = None
            completion_tokens = None
            if grammar is not None and self.temperature == 0.0 and self.fast_grammar:
                decoder = GreedyGrammarDecoder(loaded, grammar._grammar, clock)
                pieces = decoder.run(tokens, self.max_tokens, [*stops, *(stop or [])])
                if stream:
                    yield from pieces
                else:
                    yield "".join(list(pieces))
                finish, completion_tokens = decoder.finish, decoder.generated
                out = None
            else:
                from llama_cpp import StoppingCriteriaList

                crit = StoppingCriteriaList([*(criteria or []), clock])
                out = llama.create_completion(prompt=tokens, temperature=self.temperature, max_tokens=self.max_tokens,
                                              stop=[*stops, *(stop or [])], seed=0, stream=stream, stopping_criteria=crit,
                                              grammar=grammar, **_SAMPLING)
            if out is None:
                pass
            elif stream:
                for part in out:
                    choice = part["choices"][0]
                    finish = choice.get("finish_reason") or finish
                    if choice.get("text"):
                        yield choice["text"]
            else:
                choice = out["choices"][0]
                finish = choice.get("finish_reason")
                completion_tokens = int(out.get("usage", {}).get("completion_tokens", 0))
                yield choice.get("text") or ""
            elapsed = time.monotonic() - started
        if completion_tokens is None:  # streamed: every sampled token but a final end-of-generation one
            completion_tokens = max(0, clock.sampled - (1 if finish == "stop" else 0))
        if elapsed > self.timeout_seconds:
            # llama.cpp cannot be interrupted safely mid-generation (a logits processor that forces
            # end-of-sequence breaks the JSON grammar and aborts the process), so `max_tokens` is the
            # hard bound and an overrun is reported after the fact.
            log.warning("llama.cpp call took %.1f s (> %.0f s timeout)", elapsed, self.timeout_seconds)
        meta = UsageMetadata(input_tokens=acct.prompt, output_tokens=completion_tokens,
                             total_tokens=acct.prompt + completion_tokens,
                             input_token_details=InputTokenDetails(cache_read=acct.reused))
        yield AIMessageChunk(content="", usage_metadata=meta, chunk_position="last", response_metadata={
            "seconds": elapsed, "first_token_s": clock.first, "finish_reason": finish,
            "prompt_eval_tokens": acct.evaluated, "prefix_tokens": boundary, "prefix_cache": acct.source,
            "prefix_restored": acct.restored,
            "prefix_saved": acct.saved, "prefix_cache_s": round(acct.restore_s, 4), "model_name": self.model_path})

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        text = ""
        final = AIMessageChunk(content="")
        for piece in self._completion(messages, stop, kwargs.get("json_schema"), stream=False):
            if isinstance(piece, str):
                text += piece
            else:
                final = piece
        msg = AIMessage(content=text, usage_metadata=final.usage_metadata, response_metadata=final.response_metadata)
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        """Yield the answer as llama.cpp writes it (LangChain calls this from `invoke` when a
        streaming callback handler is attached, e.g. LangGraph's `stream_mode="messages"`).
        """
        if type(self)._generate is not ChatLlamaCppShared._generate:
            # a subclass with its own generation (tool calling in the peers): one chunk, its way
            result = self._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
            msg = result.generations[0].message
            yield ChatGenerationChunk(message=AIMessageChunk(content=msg.content,
                                                             usage_metadata=getattr(msg, "usage_metadata", None),
                                                             response_metadata=msg.response_metadata))
            return
        for piece in self._completion(messages, stop, kwargs.get("json_schema"), stream=True):
            if isinstance(piece, str):
                yield ChatGenerationChunk(message=AIMessageChunk(content=piece))
            else:
                yield ChatGenerationChunk(message=piece)

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
        """Not supported: tramita's components use structured output instead."""
        raise NotImplementedError("tramita's local model is used through structured output, not tool calling")
