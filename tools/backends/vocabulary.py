"""Backend vocabularies read from the data files that declare them (the planner embeds these).

Why here: the planner matches a question against what each backend says it holds, in that
backend's own declared words — the semantic model's entities, measures, dimensions, segments and
worked questions for SQL; the named graph patterns' descriptions and examples for the graph — so no
hand-kept word list decides a route. Each backend's `vocabulary(services)` calls one of these; each
result is cached per file version (path, modification time, size).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from tramita.base.logmask import get_logger

log = get_logger("tramita.planner")

_LOCK = threading.Lock()
_CACHE: dict[tuple[str, str, int, int], list[str]] = {}


def _cached(kind: str, path: Path, build: Callable[[Path], list[str]]) -> list[str]:
    """`build(path)` once per file version; [] for a missing or unreadable file (logged)."""
    try:
        stat = path.stat()
    except OSError:
        return []
    key = (kind, str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    with _LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return list(hit)
    try:
        texts = build(path)
    except Exception as exc:  # noqa: BLE001 - a broken file leaves the backend with its description only
        log.warning("planner vocabulary: %s unusable: %s", path, exc)
        texts = []
    with _LOCK:
        _CACHE[key] = texts
    return list(texts)


def _phrase(description: str, synonyms: list[str]) -> str:
    """"description: synonym, synonym" — one text per declared thing."""
    words = ", ".join(s for s in synonyms if s)
    return f"{description}: {words}" if description and words else description or words


def semantic_model_vocabulary(path: Path) -> list[str]:
    """The semantic model's declared words: each entity, dimension, measure and segment as
    "description: synonyms", and each worked example question.
    """
    return _cached("semantic", path, _semantic_texts)


def _semantic_texts(path: Path) -> list[str]:
    from tools.semantic_layer import grain_words
    from tools.semantic_model import load_semantic_model

    spec = load_semantic_model(path)
    grains = grain_words()
    texts: list[str] = []
    for ent in spec.entities.values():
        texts.append(_phrase(ent.description, ent.synonyms))
        for group in (ent.dimensions, ent.measures, ent.segments):
            for item in group.values():
                head = f"{ent.description} — {item.description}".strip(" —")
                if item.description or item.synonyms:
                    texts.append(_phrase(head, item.synonyms))
                if item.description and item.synonyms:  # synonyms dilute the description for e5
                    texts.append(head)
        for name, dim in ent.dimensions.items():  # a dated column is counted per day, week, month ...
            words = [w for g in dim.time_grains for w in grains.get(g, [])]
            if words:
                texts.append(_phrase(f"{ent.description} by {dim.description or name.replace('_', ' ')}", words))
    texts.extend(ex.question for ex in spec.examples)
    return list(dict.fromkeys(t for t in texts if t))


def graph_patterns_vocabulary(path: Path) -> list[str]:
    """Every named graph pattern's description and example questions."""
    return _cached("patterns", path, _pattern_texts)


def _pattern_texts(path: Path) -> list[str]:
    from tools.graph_patterns import load_patterns

    return list(dict.fromkeys(t for p in load_patterns(path).patterns for t in p.embedding_texts()))


def semantic_model_fields(path: Path) -> dict[str, list[str]]:
    """Column → the words the semantic model names it by ("commander_id": "comandante", …; a join
    role's words under its key column): what a question asks to see of a record, as against the
    records it names.
    """
    lines = _cached("fields", path, _field_texts)
    out: dict[str, list[str]] = {}
    for line in lines:
        column, _, word = line.partition("\t")
        out.setdefault(column, []).append(word)
    return out


def _field_texts(path: Path) -> list[str]:
    from tools.semantic_model import load_semantic_model

    out: list[str] = []
    for ent in load_semantic_model(path).entities.values():
        out += [f"{d.column or m}\t{w}" for m, d in ent.dimensions.items() for w in d.synonyms if w.strip()]
        out += [f"{j.column}\t{w}" for j in ent.joins.values() for w in j.synonyms if w.strip()]
    return list(dict.fromkeys(out))


def semantic_units(path: Path) -> dict[str, str]:
    """Column and measure name → unit ("amount_usd" → "USD", "avg_minutes_to_ack" → "minutes"),
    as the semantic model declares them; answers take their units from here, never from a guess.
    """
    lines = _cached("units", path, lambda p: [f"{k}\t{v}" for k, v in _units(p).items()])
    return dict(line.split("\t", 1) for line in lines)  # type: ignore[misc]


def _units(path: Path) -> dict[str, str]:
    from tools.semantic_model import load_semantic_model

    out: dict[str, str] = {}
    for ent in load_semantic_model(path).entities.values():
        for name, dim in ent.dimensions.items():
            if dim.unit:
                out[dim.column or name] = dim.unit
                out[name] = dim.unit
        for name, meas in ent.measures.items():
            if meas.unit:
                out[name] = meas.unit
    return out
