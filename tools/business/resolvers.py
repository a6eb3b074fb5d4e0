"""Turn what people type into the canonical values the tools store.

Two jobs, both before JSON-Schema validation:

- `coerce_value` fixes the *form* of a value: "32,50" -> 32.5, "20 mil" -> 20000, "13/05" ->
  "2026-05-13", "exp-0264" -> "EXP-0264", "Q4" -> "2026-Q4"; for non-strict tools it also maps
  enum synonyms ("almoço" -> meals) from policies/business_rules.yaml. A value it cannot read is
  returned unchanged, so that validation reports it instead of a guess being stored.
- `resolve_reference` turns a human reference into an id by looking at the database: "Lucas
  Oliveira" -> E047, "Dados" -> T04, "Expense Portal" -> expense-portal. Which table and columns
  a kind is looked up in comes from policies/references.yaml (`tools.references`). Ambiguity is
  an error listing the candidates, never a silent pick.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlalchemy import Engine

from tools.business.base import ToolContext, ToolError
from tools.business.catalog import BusinessRules, not_found, rules, validation_error
from tools.references import reference_candidates, reference_kind

# ----------------------------------------------------------------------------------------- text


def normalize_text(value: str) -> str:
    """Lower case, no accents, single spaces: the form in which names and synonyms are compared."""
    decomposed = unicodedata.normalize("NFKD", value)
    stripped = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return " ".join(stripped.casefold().split())


def _tokens(value: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", normalize_text(value))


def _compact(value: str) -> str:
    return "".join(_tokens(value))


# -------------------------------------------------------------------------------------- numbers


def _plain_number(raw: str) -> Decimal | None:
    """Read "32,50", "1.234,56", "1,234.56", "15.000" or "2.5" (pt and en separators)."""
    raw = raw.replace(" ", "")
    if "," in raw and "." in raw:
        decimal_sep = "," if raw.rfind(",") > raw.rfind(".") else "."
        thousands = "." if decimal_sep == "," else ","
        raw = raw.replace(thousands, "").replace(decimal_sep, ".")
    elif "," in raw:
        parts = raw.split(",")
        if len(parts) == 2 and 1 <= len(parts[1]) <= 2:
            raw = parts[0] + "." + parts[1]
        elif all(len(p) == 3 for p in parts[1:]):
            raw = "".join(parts)
        else:
            return None
    elif raw.count(".") > 1:
        parts = raw.split(".")
        if not all(len(p) == 3 for p in parts[1:]):
            return None
        raw = "".join(parts)
    elif "." in raw:
        whole, frac = raw.split(".")
        if len(frac) == 3 and whole.lstrip("-+") not in ("", "0"):
            raw = whole + frac  # "15.000": Portuguese thousands separator
    try:
        return Decimal(raw)
    except InvalidOperation:
        return None


def parse_number(value: Any, *, signed: bool = False, policy: BusinessRules | None = None) -> Decimal | None:
    """A number from text, or None when no single number is there.

    Currency marks are stripped, "mil"/"k" multipliers applied, and (for signed parameters) words
    like "reduzir" make it negative.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, Decimal)):
        return Decimal(str(value))
    if not isinstance(value, str):
        return None
    policy = policy or rules()
    norm = normalize_text(value)
    for mark in sorted((normalize_text(m) for m in policy.currency_marks), key=len, reverse=True):
        norm = norm.replace(mark, " ")
    multipliers = {normalize_text(k): v for k, v in policy.number_multipliers.items()}
    words = "|".join(re.escape(k) for k in sorted(multipliers, key=len, reverse=True))
    found = re.findall(rf"([-+]?\s*\d[\d.,]*)\s*({words})?(?![a-z])", norm)
    if len(found) != 1:
        return None
    digits, word = found[0]
    number = _plain_number(digits.strip().rstrip(".,"))
    if number is None:
        return None
    if word:
        number *= multipliers[word]
    if signed and number > 0:
        negatives = {normalize_text(w) for w in policy.negative_words}
        if negatives & set(_tokens(norm)):
            number = -number
    return number


def _number_out(number: Decimal) -> int | float:
    """Integral numbers become int so that JSON shows 20000, not 20000.0."""
    return int(number) if number == number.to_integral_value() else float(number)


# ---------------------------------------------------------------------------------------- dates


def _safe_date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def parse_date(value: Any, today: date, policy: BusinessRules | None = None) -> str | None:
    """An ISO date from "2026-05-13", "13/05", "13/05/2026", "13 de maio", "May 13", "ontem"...

    Day-first unless that is impossible. The year defaults to today's.
    """
    if isinstance(value, datetime):
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if not isinstance(value, str):
        return None
    policy = policy or rules()
    norm = normalize_text(value)
    relative = {normalize_text(k): v for k, v in policy.relative_days.items()}
    for word in sorted(relative, key=len, reverse=True):
        if re.search(rf"(?<![a-z]){re.escape(word)}(?![a-z])", norm):
            return (today - timedelta(days=relative[word])).isoformat()
    iso = re.search(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b", norm)
    if iso:
        found = _safe_date(int(iso[1]), int(iso[2]), int(iso[3]))
        return found.isoformat() if found else None
    numeric = re.search(r"\b(\d{1,2})[/.-](\d{1,2})(?:[/.-](\d{2}|\d{4}))?\b", norm)
    if numeric:
        first, second = int(numeric[1]), int(numeric[2])
        year = int(numeric[3]) if numeric[3] else today.year
        year = year + 2000 if year < 100 else year
        day, month = (second, first) if second > 12 >= first else (first, second)
        found = _safe_date(year, month, day)
        return found.isoformat() if found else None
    months = {normalize_text(w): n for n, words in policy.months.items() for w in words}
    names = "|".join(re.escape(w) for w in sorted(months, key=len, reverse=True))
    day_first = re.search(rf"\b(\d{{1,2}})\s*(?:de\s+)?({names})\b(?:\s*(?:de\s+)?(\d{{4}}))?", norm)
    month_first = re.search(rf"\b({names})\s+(\d{{1,2}})\b(?:,?\s*(\d{{4}}))?", norm)
    if day_first:
        found = _safe_date(int(day_first[3] or today.year), months[day_first[2]], int(day_first[1]))
        return found.isoformat() if found else None
    if month_first:
        found = _safe_date(int(month_first[3] or today.year), months[month_first[1]], int(month_first[2]))
        return found.isoformat() if found else None
    return None


def parse_quarter(value: Any, today: date, policy: BusinessRules | None = None) -> str | None:
    """"2026-Q4" from "Q4", "q4 2026", "4º trimestre", "terceiro trimestre", "third quarter"."""
    if not isinstance(value, str):
        return None
    policy = policy or rules()
    norm = normalize_text(value)
    year_match = re.search(r"\b(20\d{2})\b", norm)
    year = int(year_match[1]) if year_match else today.year
    rest = norm.replace(year_match[1], " ") if year_match else norm
    number = None
    direct = re.search(r"(?<![a-z0-9])(?:q|t)\s*-?\s*([1-4])(?![0-9])", rest)
    if direct:
        number = int(direct[1])
    else:
        ordinal = re.search(r"(?<![0-9])([1-4])\s*(?:o|a)?\s*(?:trimestre|quarter|tri)\b", rest)
        if ordinal:
            number = int(ordinal[1])
        else:
            words = {normalize_text(w): n for n, ws in policy.quarter_words.items() for w in ws}
            for word in sorted(words, key=len, reverse=True):
                if re.search(rf"(?<![a-z0-9]){re.escape(word)}\s+(?:trimestre|quarter)", rest):
                    number = words[word]
                    break
    return f"{year}-Q{number}" if number else None


# ------------------------------------------------------------------------------------ ids/enums

_ID_PATTERN = re.compile(r"^\^([A-Z]+)(-?)\\d\{(\d+)\}\$$")


def _coerce_id(pattern: str, value: str) -> str | None:
    r"""The id in `value` in the canonical shape of an id `pattern` such as ^TCK-\d{4}$.

    "tck-1092", "TCK 1092", "tck1092" -> "TCK-1092"; "exp-264" -> "EXP-0264". Only when exactly one
    id of that shape is in the text.
    """
    shape = _ID_PATTERN.match(pattern)
    if not shape:
        return None
    prefix, sep, width = shape[1], shape[2], int(shape[3])
    found = set(re.findall(rf"(?<![A-Z0-9]){prefix}\s*-?\s*(\d{{1,{width}}})(?![0-9])", value.upper()))
    if len(found) != 1:
        return None
    return f"{prefix}{sep}{found.pop().zfill(width)}"


def _coerce_enum(name: str, options: list[Any], value: str, *, strict: bool, policy: BusinessRules) -> str | None:
    """The enum option `value` names, or None.

    Exact, case-insensitive or spacing-insensitive ("sev 2", "office supplies") match in every
    mode; synonyms (longest one found in the text wins) only for non-strict tools.
    """
    strings = [o for o in options if isinstance(o, str)]
    norm = normalize_text(value)
    for option in strings:
        if normalize_text(option) == norm or _compact(option) == _compact(value):
            return option
    if strict:
        return None
    synonyms: dict[str, str] = {normalize_text(o): o for o in strings}
    synonyms.update({normalize_text(o.replace("_", " ")): o for o in strings})
    for option, words in policy.enum_synonyms.get(name, {}).items():
        if option in strings:
            synonyms.update({normalize_text(w): option for w in words})
    if norm in synonyms:
        return synonyms[norm]
    hits = [(len(w), o) for w, o in synonyms.items() if re.search(rf"(?<![a-z0-9]){re.escape(w)}(?![a-z0-9])", norm)]
    if not hits:
        return None
    longest = max(length for length, _ in hits)
    winners = {option for length, option in hits if length == longest}
    return winners.pop() if len(winners) == 1 else None


def _is_quarter(name: str, schema: dict[str, Any]) -> bool:
    return name == "quarter" or "Q[1-4]" in str(schema.get("pattern", ""))


def coerce_value(name: str, schema: dict[str, Any], value: Any, ctx: ToolContext, *, strict: bool) -> Any:
    """The canonical form of `value` for parameter `name` (see module doc); unchanged when unsure.

    References by name (`x-resolve`) are left to `resolve_reference`.
    """
    if value is None:
        return None
    policy = rules()
    kind = schema.get("type")
    if kind in ("number", "integer"):
        minimum = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        number = parse_number(value, signed=minimum is not None and minimum < 0, policy=policy)
        return value if number is None else _number_out(number)
    if not isinstance(value, str):
        if schema.get("format") == "date" and isinstance(value, date):
            return parse_date(value, ctx.today, policy)
        return value
    value = value.strip()
    if schema.get("format") == "date":
        return parse_date(value, ctx.today, policy) or value
    if _is_quarter(name, schema):
        return parse_quarter(value, ctx.today, policy) or value
    if "enum" in schema:
        return _coerce_enum(name, list(schema["enum"]), value, strict=strict, policy=policy) or value
    pattern = schema.get("pattern")
    if pattern and not re.search(pattern, value):
        return _coerce_id(pattern, value) or value
    return value


# ----------------------------------------------------------------------------------- references

def resolve_reference(kind: str, value: str, engine: Engine, *, param: str | None = None) -> str | ToolError:
    """The id of the row of reference kind `kind` that `value` names.

    Kinds and their tables come from policies/references.yaml (`tools.references`); `value` may be
    the id, a label (a full name, a team's name in either language) or a unique part of one; case
    and accents are ignored. NOT_FOUND when nothing matches, VALIDATION_ERROR listing the candidates
    when several do. An unknown kind raises PolicyError (a ValueError) naming the file.
    """
    table = reference_kind(kind).table
    raw = str(value).strip()
    candidates = [(c.id, c.label, list(c.names)) for c in reference_candidates(kind, engine)]
    norm = normalize_text(raw)
    exact = {cid for cid, _, names in candidates if any(normalize_text(n) == norm for n in names)}
    if len(exact) == 1:
        return exact.pop()
    stop = {normalize_text(w) for w in rules().reference_stopwords}
    wanted = [t for t in _tokens(raw) if t not in stop] or _tokens(raw)
    matches: list[tuple[str, str]] = []
    if wanted:
        for cid, label, names in candidates:
            for name in names:
                have = _tokens(name)
                significant = [t for t in have if t not in stop and len(t) > 1]
                if all(t in have for t in wanted) or (significant and all(t in wanted for t in significant)):
                    matches.append((cid, label))
                    break
    if len(matches) == 1:
        return matches[0][0]
    if not matches:
        return not_found(table, raw, param)
    listed = ", ".join(f"{label} ({cid})" for cid, label in sorted(matches))
    return validation_error(param or kind, "ambiguous", value=raw, candidates=listed)
