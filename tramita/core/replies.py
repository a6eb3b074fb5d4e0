"""User-facing sentences from `policies/replies.yaml`, per language."""

from __future__ import annotations

from functools import lru_cache
from string import Template

from tools.registry_models import RegistryError, read_yaml
from tramita.base.paths import POLICIES_DIR

REQUIRED = ("ask_param", "ask_confirm", "executed", "cancelled", "failed", "llm_failed", "backend_gap")


@lru_cache(maxsize=1)
def _replies() -> dict[str, dict[str, str]]:
    path = POLICIES_DIR / "replies.yaml"
    data = read_yaml(path)
    for lang in ("pt", "en"):
        table = data.get(lang) if isinstance(data, dict) else None
        if not isinstance(table, dict):
            raise RegistryError(f"{path}: field {lang}: missing language table")
        missing = [k for k in REQUIRED if k not in table]
        if missing:
            raise RegistryError(f"{path}: field {lang}: missing replies {missing}")
    return data  # type: ignore[no-any-return]


def say(key: str, lang: str, **values: object) -> str:
    """The reply `key` in `lang` (Portuguese unless English), with `$name` placeholders filled; unknown ones stay as written."""
    table = _replies()["en" if lang == "en" else "pt"]
    return Template(table[key]).safe_substitute({k: str(v) for k, v in values.items()})
