"""Where tramita's files live.

The repository ships code, prompts, policies and the NovaOps sample; everything the program *writes*
(databases, the vector store, checkpoints, assembled model files) goes to the data directory, which
defaults to a folder outside the source tree so that `langgraph dev`'s file watcher never reloads
on our own writes.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROMPTS_DIR = ROOT / "prompts"
POLICIES_DIR = ROOT / "policies"
SAMPLE_DIR = ROOT / "sample" / "novaops"


def data_dir() -> Path:
    """The writable data directory (`TRAMITA_DATA_DIR`, default `~/.local/share/tramita`)."""
    raw = os.environ.get("TRAMITA_DATA_DIR") or str(Path.home() / ".local" / "share" / "tramita")
    path = Path(raw).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path
