"""What the offline model files (`tools.model_gguf`, `tools.model_e5`) share.

The models folder, the error type, hashing and atomic writes. Every write goes to a temporary
name first and is renamed into place only after verification, so an interrupted or refused run
never leaves a file that looks valid.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from tqdm import tqdm

from tramita.base.paths import data_dir

__all__ = ["CHUNK", "FILE_MODE", "ModelAssetError", "models_dir", "read_chunks", "sha256_file", "write_atomic"]

CHUNK = 8 * 1024 * 1024
FILE_MODE = 0o644


class ModelAssetError(RuntimeError):
    """A model file is missing, damaged or cannot be produced; the message says how to fix it."""


def models_dir() -> Path:
    """`<data_dir>/models`, or `TRAMITA_MODELS_DIR`, created on demand.

    The override lets test runs with throwaway data directories share one assembled copy of the
    1.1 GB model.
    """
    override = os.environ.get("TRAMITA_MODELS_DIR")
    path = Path(override).expanduser() if override else data_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def read_chunks(handle: BinaryIO) -> Iterator[bytes]:
    """The file's bytes in 8 MiB chunks."""
    while chunk := handle.read(CHUNK):
        yield chunk


def sha256_file(path: Path, progress: bool, desc: str = "") -> str:
    """The hex sha256 of a file, with a progress bar when `progress`."""
    digest = hashlib.sha256()
    with (
        path.open("rb") as handle,
        tqdm(
            total=path.stat().st_size, unit="B", unit_scale=True, desc=desc or f"sha256 {path.name}", disable=not progress
        ) as bar,
    ):
        for chunk in read_chunks(handle):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it into place (mode 0644)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
