"""Parameter extraction: deterministic first, one LLM call for what remains.

Typed parameters are found without a model: a JSON-schema `pattern` becomes a search pattern
(EXP-0264, INC-2078, 2026-Q4), an `enum` value or a synonym is spotted as a word (SEV2, P3,
transport), and `x-resolve` references are looked up in a gazetteer built from the database
(employee names, team names, service ids). Only what is still pending after that — typically free
text such as a reason or a title — is handed to the LLM, which sees the pending parameters alone.
A value the LLM returns for a typed parameter must be grounded in the message (the text appears
in it), so the model cannot invent an id.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model, model_validator
from sqlalchemy import Engine

from tools.references import load_references, reference_candidates
from tools.registry_models import ToolSpec
from tramita.base.text import fold

_gazetteers: dict[int, dict[str, list[tuple[str, str]]]] = {}
_glock = threading.Lock()


def kind_of(schema: dict[str, Any]) -> str:
    """id | enum | ref | number | date | quarter | text: how a parameter can be found."""
    if schema.get("x-resolve"):
        return "ref"
    if schema.get("enum"):
        return "enum"
    if schema.get("type") in ("number", "integer"):
        return "number"
    if schema.get("format") == "date":
        return "date"
    pattern = str(schema.get("pattern", ""))
    if "Q[" in pattern:
        return "quarter"
    if pattern:
        return "id"
    return "text"


def gazetteer(engine: Engine) -> dict[str, list[tuple[str, str]]]:
    """(folded surface form, canonical id) per reference kind, longest forms first.

    The kinds, and the table and columns each is read from, are those of policies/references.yaml,
    looked up through `tools.references` (the one place that queries reference rows); the surface
    forms are each row's id and labels.
    """
    key = id(engine)
    with _glock:
        if key in _gazetteers:
            return _gazetteers[key]
    out: dict[str, list[tuple[str, str]]] = {kind: [] for kind in load_references().kinds}
    try:
        for kind in out:
            for cand in reference_candidates(kind, engine):
                out[kind] += [(fold(name), cand.id) for name in cand.names]
    except Exception:  # noqa: BLE001 - no dataset tables: nothing to resolve deterministically
        return {kind: [] for kind in out}
    for k in out:
        out[k] = sorted(dict.fromkeys(out[k]), key=lambda p: len(p[0]), reverse=True)
    with _glock:
        _gazetteers[key] = out
    return out


def _search_pattern(pattern: str) -> re.Pattern[str] | None:
    core = pattern.strip("^$")
    try:
        return re.compile(rf"(?<![\w-]){core}(?![\w-])", re.IGNORECASE)
    except re.error:
        return None


_NUMBER = re.compile(r"(?<![\w/.,-])(?:us\$|r\$|\$)?\s*(-?\d{1,3}(?:[.,\s]\d{3})+(?:[.,]\d{1,2})?|-?\d+(?:[.,]\d{1,2})?)"
                     r"(\s*(?:mil|k)\b)?", re.IGNORECASE)
_DATE = re.compile(r"\b(\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}(?:/\d{2,4})?)\b|\b(ontem|anteontem|hoje|yesterday|today)\b",
                   re.IGNORECASE)
_QUARTER = re.compile(r"\b(20\d{2}-?Q[1-4]|Q[1-4](?:[ /-]?20\d{2})?|[1-4][ºo°]?\s*trimestre|"
                      r"(?:primeiro|segundo|terceiro|quarto)\s+trimestre|(?:first|second|third|fourth)\s+quarter)\b",
                      re.IGNORECASE)
_NEGATIVE = re.compile(r"\b(reduz\w*|diminu\w*|cort\w*|reduce\w*|decrease\w*|cut|lower|menos)\b", re.IGNORECASE)


@dataclass
class Found:
    values: dict[str, Any] = field(default_factory=dict)
    ambiguous: list[str] = field(default_factory=list)


def deterministic(spec: ToolSpec, message: str, engine: Engine, synonyms: dict[str, dict[str, str]] | None = None) -> Found:
    """Typed values present in the message, for ALL of the tool's parameters (so corrections of
    already-filled values are seen too). A parameter with two different candidates is ambiguous
    and left out."""
    found = Found()
    consumed = message
    gaz = gazetteer(engine)
    folded = f" {fold(message)} "
    synonyms = synonyms or {}
    for name, schema in spec.properties.items():
        kind = kind_of(schema)
        hits: list[Any] = []
        if kind in ("id", "ref") and schema.get("pattern"):
            pat = _search_pattern(str(schema["pattern"]))
            if pat:
                hits += [m.group(0).upper() for m in pat.finditer(message)]
        if kind == "ref":
            for surface, canonical in gaz.get(str(schema["x-resolve"]), []):
                if len(surface) >= 2 and f" {surface} " in folded:
                    hits.append(canonical)
                    folded = folded.replace(f" {surface} ", " ")
        elif kind == "enum":
            for option in schema["enum"]:
                if re.search(rf"(?<![\w-]){re.escape(str(option))}(?![\w-])", message, re.IGNORECASE):
                    hits.append(option)
            for word, option in synonyms.get(name, {}).items():
                if f" {fold(word)} " in folded and option in schema["enum"]:
                    hits.append(option)
        elif kind == "quarter":
            hits += [m.group(0) for m in _QUARTER.finditer(message)]
        elif kind == "date":
            hits += [m.group(0) for m in _DATE.finditer(message)]
        distinct = list(dict.fromkeys(hits))
        if len(distinct) == 1:
            found.values[name] = distinct[0]
            consumed = re.sub(re.escape(str(distinct[0])), " ", consumed, flags=re.IGNORECASE)
        elif len(distinct) > 1:
            found.ambiguous.append(name)
    # numbers last, on what ids, dates and quarters did not consume
    numeric = [n for n, s in spec.properties.items() if kind_of(s) == "number"]
    if len(numeric) == 1:
        cleaned = _DATE.sub(" ", _QUARTER.sub(" ", consumed))
        for pat in (_search_pattern(str(s.get("pattern"))) for s in spec.properties.values() if s.get("pattern")):
            if pat:
                cleaned = pat.sub(" ", cleaned)
        nums = [m.group(0).strip() for m in _NUMBER.finditer(cleaned)]
        if len(nums) == 1:
            value = nums[0]
            minimum = spec.properties[numeric[0]].get("minimum")
            if minimum is not None and float(minimum) < 0 and _NEGATIVE.search(message) and not value.startswith("-"):
                value = "-" + value
            found.values[numeric[0]] = value
        elif len(nums) > 1:
            found.ambiguous.append(numeric[0])
    return found


def describe_pending(spec: ToolSpec, names: list[str]) -> str:
    """One line per pending parameter: `- name [kind]: description (rules)`."""
    lines = []
    for n in names:
        s = spec.properties[n]
        bits = [str(s.get("description", ""))]
        if s.get("enum"):
            bits.append("one of " + ", ".join(map(str, s["enum"])))
        if s.get("pattern"):
            bits.append(f"format {s['pattern']}")
        lines.append(f"- {n} [{kind_of(s)}]: " + "; ".join(b for b in bits if b))
    return "\n".join(lines)


class _PendingBase(BaseModel):
    model_config = ConfigDict(extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _some_expected_key(cls, data: Any) -> Any:
        """Extra keys are tolerated (small models add some), but a reply with none of the expected
        keys answered another schema: invalid, so structured_call retries with the error."""
        if isinstance(data, dict) and data and not set(data) & set(cls.model_fields):
            raise ValueError(f"expected keys {sorted(cls.model_fields)}, got {sorted(data)}")
        return data


def extraction_schema(names: list[str]) -> type[BaseModel]:
    """A pydantic model with one optional string field per pending parameter."""
    fields: dict[str, Any] = {n: (str | float | None, None) for n in names}
    model: type[BaseModel] = create_model("PendingValues", __base__=_PendingBase, **fields)
    return model


def grounded(value: Any, schema: dict[str, Any], message: str) -> bool:
    """A typed value from the LLM must appear in the message (ids, names, numbers)."""
    if value is None:
        return False
    kind = kind_of(schema)
    if kind in ("text", "date", "quarter"):
        return True
    if kind == "enum":
        # synonyms ("Uber" → transport) are found deterministically; from the LLM only an enum value
        # the user actually wrote counts, so a priority is never assumed ("P3" from "erro 500")
        return re.search(rf"(?<![\w-]){re.escape(str(value))}(?![\w-])", message, re.IGNORECASE) is not None
    if kind == "number":
        digits = re.sub(r"\D", "", str(value).split(".")[0])
        return bool(digits) and digits in re.sub(r"\D", "", message)
    return fold(str(value)) in fold(message)


def correction_allowed(schema: dict[str, Any], message: str, has_cue: bool) -> bool:
    """May a value found in the message replace one already filled?

    Ids and enum values are strong signals (a different EXP-… is a different expense). A number,
    date or name inside a longer sentence is often part of free text ("Antifraude 3.0"), so it
    replaces a filled value only with a correction cue or when it is nearly the whole message.
    """
    if kind_of(schema) in ("id", "enum", "quarter"):
        return True
    return has_cue or len(message.split()) <= 4
