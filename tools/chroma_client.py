"""One Chroma PersistentClient per directory and process, offline.

Chroma refuses two clients on one path with different Settings in one process, and its default
embedding function downloads an ONNX model; so every caller goes through here, telemetry is off and
collections are always created with `embedding_function=None` (we pass our own vectors).
"""

from __future__ import annotations

import os
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
_lock = threading.Lock()


class ChromaUnavailable(RuntimeError):
    """The Chroma directory is missing or unreadable."""


@lru_cache(maxsize=8)
def _client(path: str) -> Any:
    import chromadb
    from chromadb.config import Settings

    return chromadb.PersistentClient(path=path, settings=Settings(anonymized_telemetry=False, allow_reset=False))


def chroma_client(path: str | Path, *, create: bool = True) -> Any:
    """The process-wide client for `path`; with create=False a missing directory is an error."""
    p = Path(path)
    if not create and not p.is_dir():
        raise ChromaUnavailable(f"Chroma directory {p} does not exist (run `tramita ingest`)")
    p.mkdir(parents=True, exist_ok=True)
    with _lock:
        try:
            return _client(str(p.resolve()))
        except Exception as exc:
            raise ChromaUnavailable(f"Chroma directory {p} cannot be opened: {exc}") from exc
