"""Parameter extraction: deterministic first, one LLM call for what remains.

Typed parameters are found without a model: a JSON-schema `pattern` becomes a search pattern
(EXP-0264, INC-2078, 2026-Q4), an `enum` value or a synonym is spotted as a word (SEV2, P3,
transport), and `x-resolve` references are looked up in a gazetteer built from the database
(employee names, team names, service ids). The clause that names the action is read first
(`spans.head_clause`): values in a long description after ":" or "porque" ("… o lojista abriu
reclamação, o app trava") neither make a parameter ambiguous nor replace the head's values.

Free text follows the span rule (`tramita.core.spans`): where a clear marker exists (":" after the
action, " - ", "porque"/"because", "motivo:"/"title:") the span after it is taken without a model
(`marked_values`); otherwise the LLM may only point at a span, and `grounded` keeps its copy only when
it is one (storing the message's own words). A value the LLM returns for a typed parameter must be
grounded in the message too (the text appears in it), so the model cannot invent an id.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model, model_validator
from sqlalchemy import Engine

from tools.llm import Usage, structured_call
from tools.references import load_references, reference_candidates
from tools.registry_models import ToolSpec
from tramita.base.logmask import get_logger
from tramita.base.text import fold
from tramita.core import spans

log = get_logger("tramita.extraction")

_gazetteers: dict[int, dict[str, list[tuple[str, str]]]] = {}
_glock = threading.Lock()


def kind_of(schema: dict[str, Any]) -> str:
    """Id | enum | ref | number | date | quarter | text: how a parameter can be found."""
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
_NEGATIVE = re.compile(r"\b(reduz\w*|redu[cç][aã]o|redu[cç][oõ]es|diminu\w*|cort\w*|reduce\w*|reduction|decrease\w*|"
                       r"cut|lower|menos|minus|negativ\w*)\b", re.IGNORECASE)


@dataclass
class Found:
    """Typed values found in a message, the text each was read from, and ambiguous parameters."""

    values: dict[str, Any] = field(default_factory=dict)
    ambiguous: list[str] = field(default_factory=list)
    surfaces: dict[str, str] = field(default_factory=dict)  # parameter -> the words of the message it came from


def deterministic(spec: ToolSpec, message: str, engine: Engine, synonyms: dict[str, dict[str, str]] | None = None) -> Found:
    """Typed values present in the message, for ALL of the tool's parameters (so corrections of
    already-filled values are seen too). A parameter with two different candidates is ambiguous
    and left out.

    The head clause (before ":", " - ", "porque", "motivo:") is read first; the rest of the message
    only supplies parameters the head does not carry, so a long description neither makes a value
    ambiguous ("… jantar … no app" next to "refeição") nor replaces one: first from its clauses
    that are only values ("…: transport, 23.40 USD, 2026-05-12, taxi … hotel"), then, for a name or
    id still missing, from the whole rest when it is unambiguous there (never a number).
    """
    head = spans.head_clause(message)
    if head == message:
        return _scan(spec, message, engine, synonyms)
    found = _scan(spec, head, engine, synonyms)
    tail = message[message.find(head) + len(head):]

    def take(name: str, value: Any, surface: str) -> None:
        if name in found.ambiguous:
            return
        if name in found.values and found.values[name] != value:
            if name not in taken_from_head:
                found.values.pop(name)
                found.surfaces.pop(name, None)
                found.ambiguous.append(name)
            return
        found.values[name] = value
        found.surfaces[name] = surface

    taken_from_head = set(found.values) | set(found.ambiguous)
    # the clauses of the rest that are only values ("…: transport, 23.40 USD, 2026-05-12, taxi …")
    for a, b in spans.clauses(tail):
        piece = tail[a:b]
        part = _scan(spec, piece, engine, synonyms)
        if part.values and not spans.has_content(piece, [*part.surfaces.values(), *part.values.values()]):
            for name, value in part.values.items():
                if name not in taken_from_head:
                    take(name, value, part.surfaces.get(name, str(value)))
    # a name or id still missing may sit inside the free text ("…: o payments-api caiu"); a number
    # there is part of it ("erro 422", "3 clientes") and never an answer
    rest = _scan(spec, tail, engine, synonyms)
    for name, value in rest.values.items():
        if name not in found.values and name not in found.ambiguous and kind_of(spec.properties[name]) != "number":
            take(name, value, rest.surfaces.get(name, str(value)))
    return found


def _scan(spec: ToolSpec, message: str, engine: Engine, synonyms: dict[str, dict[str, str]] | None = None) -> Found:
    """`deterministic` on one piece of text."""
    found = Found()
    consumed = message
    gaz = gazetteer(engine)
    folded = f" {fold(message)} "
    synonyms = synonyms or {}
    for name, schema in spec.properties.items():
        kind = kind_of(schema)
        hits: list[Any] = []
        seen: dict[Any, str] = {}  # hit -> the words it was read from
        if kind in ("id", "ref") and schema.get("pattern"):
            pat = _search_pattern(str(schema["pattern"]))
            if pat:
                for m in pat.finditer(message):
                    hits.append(m.group(0).upper())
                    seen.setdefault(m.group(0).upper(), m.group(0))
        if kind == "ref":
            for surface, canonical in gaz.get(str(schema["x-resolve"]), []):
                if len(surface) >= 2 and f" {surface} " in folded:
                    hits.append(canonical)
                    seen.setdefault(canonical, surface)
                    folded = folded.replace(f" {surface} ", " ")
        elif kind == "enum":
            for option in schema["enum"]:
                if re.search(rf"(?<![\w-]){re.escape(str(option))}(?![\w-])", message, re.IGNORECASE):
                    hits.append(option)
                    seen.setdefault(option, str(option))
            for word, option in synonyms.get(name, {}).items():
                if f" {fold(word)} " in folded and option in schema["enum"]:
                    hits.append(option)
                    seen.setdefault(option, word)
        elif kind == "quarter":
            hits += [m.group(0) for m in _QUARTER.finditer(message)]
        elif kind == "date":
            hits += [m.group(0) for m in _DATE.finditer(message)]
        distinct = list(dict.fromkeys(hits))
        if len(distinct) == 1:
            found.values[name] = distinct[0]
            found.surfaces[name] = seen.get(distinct[0], str(distinct[0]))
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
            found.surfaces[numeric[0]] = nums[0]
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
        keys answered another schema: invalid, so structured_call retries with the error.
        """
        if isinstance(data, dict) and data and not set(data) & set(cls.model_fields):
            raise ValueError(f"expected keys {sorted(cls.model_fields)}, got {sorted(data)}")
        return data


def extraction_schema(names: list[str]) -> type[BaseModel]:
    """A pydantic model with one optional string field per pending parameter."""
    fields: dict[str, Any] = {n: (str | float | None, None) for n in names}
    model: type[BaseModel] = create_model("PendingValues", __base__=_PendingBase, **fields)
    return model


def grounded(value: Any, schema: dict[str, Any], message: str) -> bool:
    """A value from the LLM must come from the message: typed values appear in it (ids, names,
    numbers, enum values the user wrote), free text passes the span rule (`spans.verify`).
    """
    if value is None:
        return False
    kind = kind_of(schema)
    if kind == "text":
        return spans.verify(value, message).ok
    if kind in ("date", "quarter"):
        return True
    if kind == "enum":
        # synonyms ("Uber" → transport) are found deterministically; from the LLM only an enum value
        # the user actually wrote counts, so a priority is never assumed ("P3" from "erro 500")
        return re.search(rf"(?<![\w-]){re.escape(str(value))}(?![\w-])", message, re.IGNORECASE) is not None
    if kind == "number":
        digits = re.sub(r"\D", "", str(value).split(".")[0])
        return bool(digits) and digits in re.sub(r"\D", "", message)
    return fold(str(value)) in fold(message)


def llm_values(spec: ToolSpec, known: dict[str, Any], text: str, names: list[str], *, backend: str | None,
               today: str, usage: Usage, others: list[Any]) -> dict[str, Any]:
    """One extraction call (prompts/extract_parameters.txt) for the pending `names`.

    Typed values must be grounded in the message; free text must be a span of it (the model only
    points at one): the value kept is the message's own words, trimmed (`spans.verify`), and a
    paraphrase, an invention or an apology-only span is dropped, so the parameter stays pending.
    Raises `tools.llm.LLMError` when the model fails twice.
    """
    schema = extraction_schema(names)
    out = structured_call("transaction_parameter_extraction", schema, "extract_parameters", backend=backend,
                          usage=usage, tool=spec.name, description=spec.description, rules=spec.rules or "-",
                          known=dict(known) or "-", pending=describe_pending(spec, names), today=today, message=text)
    values = {k: v for k, v in out.model_dump().items() if v not in (None, "", "null")}
    kept: dict[str, Any] = {}
    for k, v in values.items():
        if kind_of(spec.properties[k]) == "text":
            verdict = spans.verify(v, text, others)
            if verdict.value is not None:
                kept[k] = verdict.value
            else:
                log.info("span rule: %s=%r dropped (%s)", k, v, verdict.reason)
        elif grounded(v, spec.properties[k], text):
            kept[k] = v
    return kept


def free_text(spec: ToolSpec) -> list[str]:
    """The tool's free-text parameters (a reason, a title, a description), in schema order."""
    return [n for n, s in spec.properties.items() if kind_of(s) == "text"]


def marked_values(spec: ToolSpec, message: str, missing: list[str], others: list[Any]) -> dict[str, str]:
    """Free text taken without a model from a clear marker (`spans.marked`): the span after ":",
    " - ", "porque"/"because" or a label ("motivo:", "title:"), trimmed and checked by the span rule.

    It fills the parameter a label names when the tool has it, else the first missing required
    free-text parameter (else the first missing optional one: an approval's comment). A span longer
    than the parameter allows is cut at a clause boundary, and the whole span also goes to a missing
    optional free-text parameter that holds it (a ticket's description). `others` are the values
    of the other parameters (a span made of them fills nothing).
    """
    m = spans.marked(message)
    texts = [n for n in free_text(spec) if n in missing]
    if m is None or not texts:
        return {}
    named = [p for p in m.params if p in spec.properties and kind_of(spec.properties[p]) == "text"]
    if named and not any(p in texts for p in named):
        return {}  # "motivo: …" for a reason already given is a correction, not another field
    target = next((p for p in named if p in texts), None)
    if target is None:
        required = [n for n in texts if n in spec.required]
        target = (required or texts)[0]
    value = spans.trim(m.tail, others)
    if not value or not spans.has_content(value, others):
        return {}
    limit = spec.properties[target].get("maxLength")
    fitted = spans.fit(value, int(limit), others) if limit else value
    if not fitted:
        return {}
    out = {target: fitted}
    if fitted != value:
        for other in texts:
            if other != target and other not in spec.required:
                other_limit = spec.properties[other].get("maxLength")
                whole = spans.fit(value, int(other_limit), others) if other_limit else value
                if whole:
                    out[other] = whole
                    break
    return out


_KEBAB = re.compile(r"(?<![\w-])[a-z][a-z0-9]*(?:-[a-z0-9]{2,})+(?![\w-])")
_PERSON = re.compile(r"(?<![\w-])[A-ZÀ-Ý][a-zà-ÿ]+(?:\s+(?:d[aeo]s?\s+)?[A-ZÀ-Ý][a-zà-ÿ]+)+(?![\w-])")
# Words right before an id-like name of a catalog row ("no sistema-de-ponto", "for the design-system")
_CATALOG_CUES = {"no", "na", "do", "da", "pro", "pra", "para", "em", "ao", "for", "on", "in", "about", "the", "of"}
_shapes: dict[tuple[int, str], tuple[bool, bool]] = {}


def _kind_shape(kind: str, engine: Engine) -> tuple[bool, bool]:
    """(ids look like kebab-case names, labels look like people's full names) for a reference kind."""
    key = (id(engine), kind)
    with _glock:
        if key in _shapes:
            return _shapes[key]
    try:
        cands = reference_candidates(kind, engine)
    except Exception:  # noqa: BLE001 - no dataset tables: no shape, nothing reported
        cands = []
    kebab = bool(cands) and sum(bool(_KEBAB.fullmatch(c.id)) for c in cands) >= 0.8 * len(cands)
    person = bool(cands) and sum(len(c.label.split()) >= 2 and c.label[:1].isupper() for c in cands) >= 0.8 * len(cands)
    with _glock:
        _shapes[key] = (kebab, person)
    return kebab, person


def unknown_references(spec: ToolSpec, message: str, missing: list[str], engine: Engine,
                       found: Found | None = None) -> dict[str, str]:
    """Names in the head clause that look like a missing reference but match no row: a kebab-case
    name after a cue ("no sistema-de-ponto") for a kind whose ids are kebab-case (services), two or
    more capitalised words ("pro Carlos Eduardo") for a kind of people's names (employees).

    They are returned as raw values so that validation answers NOT_FOUND naming them, instead of a
    silent re-ask for a value the user believes they gave.
    """
    head = spans.head_clause(message)
    gaz = gazetteer(engine)
    taken = {fold(v) for v in (found.surfaces.values() if found else [])}
    out: dict[str, str] = {}
    for name in missing:
        schema = spec.properties.get(name, {})
        kind = schema.get("x-resolve")
        if not kind:
            continue
        known = {surface for surface, _ in gaz.get(str(kind), [])}
        kebab, person = _kind_shape(str(kind), engine)
        if kebab:
            for m in _KEBAB.finditer(head):
                before = head[:m.start()].split()
                if before and fold(before[-1]) in _CATALOG_CUES and fold(m.group(0)) not in known | taken:
                    out[name] = m.group(0)
                    break
        if person and name not in out:
            for m in _PERSON.finditer(head):
                if m.start() > 0 and fold(m.group(0)) not in known | taken:
                    out[name] = m.group(0)
                    break
    return out


def correction_allowed(schema: dict[str, Any], message: str, has_cue: bool, surface: str | None = None) -> bool:
    """May a value found in the message replace one already filled?

    Ids and enum values the user wrote are strong signals (a different EXP-… is a different
    expense). A number, date or name inside a longer sentence is often part of free text
    ("Antifraude 3.0"), and so is an enum value read from a synonym ("suporte de notebook" is not a
    new category), so those replace a filled value only with a correction cue or when they are
    nearly the whole message. `surface` is the text the value was read from, when known.
    """
    kind = kind_of(schema)
    synonym = kind == "enum" and surface is not None and fold(surface) not in {fold(str(o)) for o in schema["enum"]}
    if kind in ("id", "enum", "quarter") and not synonym:
        return True
    return has_cue or len(message.split()) <= 4
