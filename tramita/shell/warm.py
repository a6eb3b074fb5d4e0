"""`tramita warm`: evaluate every static prompt prefix once, before anyone asks a question.

Why: the local model keeps each prompt's evaluated static prefix (instructions, semantic model,
schema, examples) in RAM and on disk, but the first call of each component on a new deployment
reads it in full: about a minute for the semantic query prompt on two cores, which is what the
first question after `make run` would cost. Warming pays it during set-up instead. A prefix already
kept is only restored, so running it again is cheap; a changed prompt, schema or model is a new
prefix and is evaluated again. A server model (an OpenAI-compatible endpoint) has no local cache:
nothing is warmed for it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tools.backends import BACKENDS
from tools.graph_patterns import CHOOSE_COMPONENT, FILL_COMPONENT
from tools.llm import warm
from tools.services import Services

# (component, prompt) of the conversation's calls, whose static prefixes take no values
CONVERSATION_PROMPTS = (("router", "choose_tool"), ("transaction_parameter_extraction", "extract_parameters"),
                        ("confirmation", "confirmation"), (CHOOSE_COMPONENT, "choose_pattern"),
                        (FILL_COMPONENT, "fill_pattern"))


@dataclass
class Warmed:
    """One prefix: what it is for, its size, and whether it was evaluated now or already kept."""

    name: str
    tokens: int
    status: str  # "evaluated", "kept" (restored from RAM or disk), "no local cache", or the error
    seconds: float


def _row(name: str, calls: Any, seconds: float) -> Warmed:
    """One prefix's row from its token accounting (None: the model keeps no local cache)."""
    if calls is None:
        return Warmed(name, 0, "no local cache", seconds)
    return Warmed(name, int(calls.prompt), "evaluated" if calls.saved else "kept", seconds)


def _failed(name: str, exc: Exception, started: float) -> Warmed:
    return Warmed(name, 0, f"failed: {type(exc).__name__}: {exc}"[:200], time.perf_counter() - started)


def _one(name: str, fn: Any) -> Warmed:
    started = time.perf_counter()
    try:
        calls = fn()
    except Exception as exc:  # noqa: BLE001 - one prefix that cannot be warmed leaves the others warmed
        return _failed(name, exc, started)
    return _row(name, calls, time.perf_counter() - started)


def warm_all(services: Services, *, today: str, profile: str | None) -> list[Warmed]:
    """Warm the backends' prefixes (their `warm` hook), the synthesis prompt in each answer language,
    and the conversation components' prompts.
    """
    from nodes.synthesize import LANGUAGE

    out: list[Warmed] = []
    for name, backend in BACKENDS.items():
        hook = getattr(backend, "warm", None)
        if hook is None or not backend.available(services):
            continue
        started = time.perf_counter()
        try:
            prefixes = hook(services, today, profile)
        except Exception as exc:  # noqa: BLE001
            out.append(_failed(name, exc, started))
            continue
        share = (time.perf_counter() - started) / max(1, len(prefixes))
        out += [_row(f"{name}: {prompt}", calls, share) for prompt, calls in prefixes.items()]
    for lang, language in LANGUAGE.items():
        out.append(_one(f"synthesis ({lang})", lambda lg=language: warm("synthesis", "synthesize", backend=profile,
                                                                         language=lg)))
    for component, prompt in CONVERSATION_PROMPTS:
        out.append(_one(f"{component}: {prompt}", lambda c=component, p=prompt: warm(c, p, backend=profile)))
    return out
