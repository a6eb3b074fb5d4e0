"""The semantic layer: SQL questions as slot filling, compiled by boring-semantic-layer (on Ibis).

Why: the 1.5B local model writes wrong joins and filters when it writes SQL from scratch, but fills a
small typed JSON object well. So the LLM fills ONE query object whose names are enums generated from
the semantic model (`tools.semantic_model`) and whose operators are a closed set; this module checks
it, links its filter values to stored values, resolves the join path, and lets the library compile
the SQL. The SQL still goes through `SQLTool.query` (sqlglot guard, read-only connection), so the
semantic path is exactly as read-only as raw text-to-SQL, which remains the fallback
(`tools.backends.sql`).

Pieces:
- `SemanticLayer`: names, the generated pydantic query model (`query_model`), `parse` (clear errors
  for hand-written or LLM objects), `plan` (base entity and join paths), `link_values`, `compile`
  (boring-semantic-layer over unbound Ibis tables, no connection), `describe` (the prompt's compact
  model text) and `hints` (what the question's words and stored values point at).
- `answer_semantic`: one LLM call (plus at most one repair) → rows, or the reason to fall back.

Nothing here knows a dataset: every name comes from the model file.
"""

from __future__ import annotations

import datetime as dt
import difflib
import enum
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from tools.semantic_model import (
    GRAINS,
    OPERATORS,
    Aggregation,
    Catalog,
    ColumnKind,
    Dimension,
    Entity,
    Join,
    Measure,
    Segment,
    SemanticModelSpec,
    catalog_from_schema,
    check_against_catalog,
    column_kind,
    expr_columns,
    load_semantic_model,
)
from tools.sql_mend import Scale, mend, scale_side, scales_of
from tramita.base.paths import POLICIES_DIR
from tramita.base.policyfile import PolicyError, load_model
from tramita.base.text import FIELD_STEM, MONTHS, STEM, asked_after_opener, fold, phrase_starts, stems

if TYPE_CHECKING:
    from tools.backends.base import Finding
    from tools.doc_figures import Figure

__all__ = [
    "MAX_REPAIRS",
    "CompiledQuery",
    "QueryObject",
    "SemanticLayer",
    "SemanticQueryError",
    "SemanticRun",
    "answer_semantic",
    "check_model",
    "layer_for",
    "period_bounds",
    "period_labels",
]

MAX_REPAIRS = 1  # one more LLM call with the refusal shown; then raw text-to-SQL takes over
MAX_ITEMS = 8  # measures, dimensions, filters ... per query: a question never needs more
MAX_HINTS = 10
MAX_FIGURES = 6  # document figures shown as hints: the rows of one table that name the question's values
_VALUE_HINT = re.compile(r"^\w+\.\w+ = ")  # a `hints` line that names a stored value
MAX_JOIN_DEPTH = 3
GRAIN_SEP = "__"
_BSL_GRAIN = {g: f"TIME_GRAIN_{g.upper()}" for g in GRAINS}
_SCALAR_OPS = ("=", "!=", ">", ">=", "<", "<=")
QUERY_CUES_FILE = POLICIES_DIR / "query_cues.yaml"


class Durations(BaseModel):
    """`durations:` of policies/query_cues.yaml: phrases of a span counted back from today."""

    model_config = ConfigDict(extra="forbid")
    since: list[str] = Field(default_factory=list, description="'{n} {unit}' phrases bounding rows from that day on")
    before: list[str] = Field(default_factory=list, description="'{n} {unit}' phrases asking for rows older than it")
    units: dict[Literal["day", "week", "month", "year"], list[str]] = Field(
        default_factory=dict, description="unit -> its words")

    @field_validator("since", "before")
    @classmethod
    def _slots(cls, phrases: list[str]) -> list[str]:
        bad = [p for p in phrases if "{n}" not in p or "{unit}" not in p]
        if bad:
            raise ValueError(f"each phrase needs {{n}} and {{unit}}: {bad}")
        return phrases


class QueryCues(BaseModel):
    """`policies/query_cues.yaml`: the words that ask for a breakdown, per language."""

    model_config = ConfigDict(extra="forbid")
    grouping_cues: dict[str, list[str]] = Field(description="a word right before an entity that asks to group by it")
    fillers: dict[str, list[str]] = Field(description="words allowed between a cue and the entity")
    grain_words: dict[str, list[str]] = Field(default_factory=dict, description="time grain -> the words for it")
    superlatives: dict[str, list[str]] = Field(default_factory=dict, description="most, largest, maior ...")
    least_words: dict[str, list[str]] = Field(
        default_factory=dict, description="the superlatives that rank smallest first (least, menor)")
    comparative_words: dict[str, list[str]] = Field(
        default_factory=dict, description="words after a superlative that make it a comparison (than)")
    number_prepositions: dict[str, list[str]] = Field(
        default_factory=dict, description="words after a superlative that make it a bound before a number (de)")
    singular_cues: dict[str, list[str]] = Field(default_factory=dict, description="question words before ONE thing")
    person_cues: dict[str, list[str]] = Field(default_factory=dict, description="who: one person")
    aggregation_cues: dict[Aggregation, list[str]] = Field(
        default_factory=dict, description="an aggregation (count, avg, sum, min, max) -> the words that ask for it")
    breakdown_cues: dict[str, list[str]] = Field(
        default_factory=dict, description="words that ask for an aggregate per group (per, each, por)")
    time_cues: dict[str, list[str]] = Field(
        default_factory=dict, description="words that bound or place a question in time (since, hoje, last)")
    list_cues: dict[str, list[str]] = Field(
        default_factory=dict, description="words that ask for the rows of an entity (which, quais, list)")
    relative_words: dict[str, list[str]] = Field(
        default_factory=dict, description="words that open a clause about the word before them (que, which)")
    carrier_words: dict[str, list[str]] = Field(
        default_factory=dict, description="words that carry no slot of a query (articles, auxiliaries, 'now')")
    reference_words: dict[str, list[str]] = Field(
        default_factory=dict, description="words that point at what an earlier source found (those, esses)")
    pronouns: dict[str, list[str]] = Field(
        default_factory=dict, description="personal pronouns that point at one thing named before (ela, her)")
    demonstratives: dict[str, list[str]] = Field(
        default_factory=dict, description="reference words that go before a noun (esse, that): 'that manager'")
    recency_cues: dict[Literal["latest", "earliest"], list[str]] = Field(
        default_factory=dict, description="words for the newest or the oldest row of an entity")
    row_references: dict[str, list[str]] = Field(
        default_factory=dict, description="phrases after a breakdown word that point at the listed rows (cada um)")
    day_cues: dict[str, list[str]] = Field(default_factory=dict, description="words that name a day (hoje, today)")
    whole_cues: dict[str, list[str]] = Field(
        default_factory=dict, description="phrases that ask for one figure over every row (in total, ao todo)")
    order_words: dict[str, list[str]] = Field(
        default_factory=dict, description="words that ask for an order by name (ranking, sorted, decrescente)")
    beyond_words: dict[str, list[str]] = Field(
        default_factory=dict, description="words that ask for the rows past a document's figure (exceed, acima)")
    within_words: dict[str, list[str]] = Field(
        default_factory=dict, description="words that ask for the rows inside a document's figure (within, dentro)")
    negations: dict[str, list[str]] = Field(default_factory=dict, description="not, não: before a within word")
    exclusion_words: dict[str, list[str]] = Field(
        default_factory=dict, description="words right before a segment's word that ask for the rows outside it "
                                          "(below, except, fora de)")
    number_words: dict[str, dict[str, int]] = Field(
        default_factory=dict, description="cardinal numbers in words (three, três) -> their value")
    durations: Durations = Field(default_factory=lambda: Durations(),
                                 description="spans of time counted back from today, and their units")
    contractions: dict[str, list[str]] = Field(
        default_factory=dict, description="a preposition -> its forms joined with an article (em: no, na, nos)")
    open_ended: dict[str, list[str]] = Field(
        default_factory=dict, description="phrases that bound nothing in time: every row up to now (so far, até hoje)")
    count_superlatives: dict[str, list[str]] = Field(
        default_factory=dict, description="superlatives that, before the records' plural word, rank by how many "
                                          "(most, mais)")
    measure_prepositions: dict[str, list[str]] = Field(
        default_factory=dict, description="words between such a superlative and the records' word that make it an "
                                          "amount (on, em)")
    bound_superlatives: dict[str, list[str]] = Field(
        default_factory=dict, description="superlatives that name a bound as often as a rank (maximum, máximo): "
                                          "next to a record's word they do not make a ranking question")


def grain_words(path: Path = QUERY_CUES_FILE) -> dict[str, list[str]]:
    """Time grain → the words people use for it (pt/en)."""
    return dict(query_cue_file(path).grain_words)


@lru_cache(maxsize=4)
def query_cue_file(path: Path = QUERY_CUES_FILE) -> QueryCues:
    """The validated cue file, read once per process."""
    cues: QueryCues = load_model(path, QueryCues)
    return cues


@dataclass(frozen=True)
class FoldedCues:
    """The cue file's word lists, all languages together, folded once (`settle` reads them per word)."""

    grouping: frozenset[str]
    fillers: frozenset[str]
    superlatives: frozenset[str]
    singular: frozenset[str]
    person: frozenset[str]
    aggregations: dict[str, tuple[str, ...]] = field(default_factory=dict)  # agg -> folded words or phrases
    breakdown: frozenset[str] = frozenset()
    time: frozenset[str] = frozenset()  # time cues, grain words and month names
    references: frozenset[str] = frozenset()  # "those", "esses": a word pointing at an earlier source's set
    recency: dict[str, tuple[str, ...]] = field(default_factory=dict)  # latest/earliest -> folded phrases
    row_references: tuple[str, ...] = ()  # "cada um": folded phrases
    days: frozenset[str] = frozenset()  # day cues and month names
    whole: tuple[str, ...] = ()  # "in total", "ao todo": folded phrases
    least: frozenset[str] = frozenset()  # superlatives that rank smallest first
    comparative: frozenset[str] = frozenset()  # "than": a superlative word then one of these compares
    number_prepositions: frozenset[str] = frozenset()  # "de": ... compares when a number follows
    pronouns: frozenset[str] = frozenset()  # "ela", "her": one thing named before
    order: frozenset[str] = frozenset()  # "ranking", "sorted": an order asked for by name
    beyond: tuple[str, ...] = ()  # "exceed", "acima": folded phrases asking for rows past a figure
    within: tuple[str, ...] = ()  # "within", "dentro": folded phrases asking for rows inside it
    negations: frozenset[str] = frozenset()  # "not", "nao"
    numbers: dict[str, int] = field(default_factory=dict)  # folded number words -> value
    contractions: dict[str, frozenset[str]] = field(default_factory=dict)  # "em" -> {"no", "na", ...}
    open_ended: tuple[str, ...] = ()  # "so far", "ate hoje": folded phrases that place nothing in time
    exclusions: tuple[str, ...] = ()  # "below", "fora do": folded phrases before a segment's word, its outside
    count_superlatives: frozenset[str] = frozenset()  # "most", "mais": before the records' word, a count
    measure_prepositions: frozenset[str] = frozenset()  # "on", "em": between them, an amount
    lists: frozenset[str] = frozenset()  # "which", "quais": a question that asks for rows
    relatives: frozenset[str] = frozenset()  # "que", "which": a clause about the word before follows
    bounds: frozenset[str] = frozenset()  # "maximum", "maximo": a superlative that also names a limit
    demonstratives: frozenset[str] = frozenset()  # "esse", "that": a reference word before a noun

    @property
    def pointers(self) -> frozenset[str]:
        """Every word that points back: the reference words and the personal pronouns."""
        return self.references | self.pronouns


@lru_cache(maxsize=4)
def folded_cues(path: Path = QUERY_CUES_FILE) -> FoldedCues:
    """The cue words of `path`, folded, once per process."""
    f = query_cue_file(path)

    def words(table: dict[str, list[str]]) -> frozenset[str]:
        return frozenset(fold(w) for ws in table.values() for w in ws)

    return FoldedCues(words(f.grouping_cues), words(f.fillers), words(f.superlatives), words(f.singular_cues),
                      words(f.person_cues),
                      {agg: tuple(" ".join(fold(w).split()) for w in ws) for agg, ws in f.aggregation_cues.items()},
                      words(f.breakdown_cues),
                      words(f.time_cues) | {w for w in words(f.grain_words) if " " not in w} | frozenset(MONTHS),
                      words(f.reference_words),
                      {k: tuple(" ".join(fold(w).split()) for w in ws) for k, ws in f.recency_cues.items()},
                      tuple(" ".join(fold(w).split()) for ws in f.row_references.values() for w in ws),
                      words(f.day_cues) | frozenset(MONTHS),
                      tuple(" ".join(fold(w).split()) for ws in f.whole_cues.values() for w in ws),
                      words(f.least_words), words(f.comparative_words), words(f.number_prepositions),
                      words(f.pronouns), words(f.order_words),
                      tuple(" ".join(fold(w).split()) for ws in f.beyond_words.values() for w in ws),
                      tuple(" ".join(fold(w).split()) for ws in f.within_words.values() for w in ws),
                      words(f.negations),
                      {fold(w): n for table in f.number_words.values() for w, n in table.items()},
                      {fold(p): frozenset(map(fold, forms)) for p, forms in f.contractions.items()},
                      tuple(" ".join(fold(w).split()) for ws in f.open_ended.values() for w in ws),
                      tuple(" ".join(fold(w).split()) for ws in f.exclusion_words.values() for w in ws),
                      words(f.count_superlatives), words(f.measure_prepositions), words(f.list_cues),
                      words(f.relative_words), words(f.bound_superlatives), words(f.demonstratives))


class SemanticQueryError(ValueError):
    """The query object cannot be answered by the model: an unknown name, a bad operator or value,
    no join path. The message is written to be shown to the LLM in a repair call.
    """


# ----------------------------------------------------------------------------- query object

@dataclass
class QueryObject:
    """The checked query, names as strings (`entity.member`, `role.member`, `entity.date__grain`)."""

    expressible: bool = True
    measures: list[str] = field(default_factory=list)
    dimensions: list[str] = field(default_factory=list)
    segments: list[str] = field(default_factory=list)
    filters: list[tuple[str, str, Any]] = field(default_factory=list)
    order: list[tuple[str, str]] = field(default_factory=list)
    limit: int | None = None

    def as_json(self) -> dict[str, Any]:
        """The object as the LLM writes it (every field, in the grammar's order)."""
        return {"expressible": self.expressible, "measures": self.measures, "dimensions": self.dimensions,
                "segments": self.segments,
                "filters": [{"field": f, "op": o, "value": v} for f, o, v in self.filters],
                "order": [{"field": f, "direction": d} for f, d in self.order], "limit": self.limit}


@dataclass(frozen=True)
class Ref:
    """A resolved name: the joins from the base entity, the entity reached, the member, the grain."""

    path: tuple[tuple[str, str], ...]  # ((entity, join name), ...) from the base
    entity: str
    member: str
    grain: str | None = None


@dataclass
class Plan:
    base: str
    refs: dict[str, Ref]  # every name of the query -> its resolution


@dataclass
class CompiledQuery:
    """The SQL the library wrote for a query object, with the object as linked (stored values)."""

    sql: str
    base: str
    query: QueryObject


# ------------------------------------------------------------------------------------ periods

_PERIOD = re.compile(r"^(\d{4})(?:-(?:(H[12])|(Q[1-4])|W(\d{2})|(\d{2})(?:-(\d{2}))?))?$", re.IGNORECASE)


def period_bounds(text: str) -> tuple[dt.date, dt.date]:
    """[start, end) of 'YYYY', 'YYYY-H2', 'YYYY-Q1', 'YYYY-Www' (ISO week), 'YYYY-MM' or 'YYYY-MM-DD'.
    Comparing a date column with period bounds (not with the text) is what makes 'in March' and
    'before Q2' mean the same on date and timestamp columns and on every engine.
    """
    m = _PERIOD.match(str(text).strip())
    if not m:
        raise SemanticQueryError(f"{text!r} is not a period (YYYY, YYYY-H1, YYYY-Q2, YYYY-Www, YYYY-MM or YYYY-MM-DD)")
    year = int(m.group(1))
    try:
        if m.group(2):
            half = int(m.group(2)[1])
            start = dt.date(year, 1 + 6 * (half - 1), 1)
            return start, dt.date(year + half - 1, 1 if half == 2 else 7, 1)
        if m.group(3):
            q = int(m.group(3)[1])
            start = dt.date(year, 3 * q - 2, 1)
            return start, (dt.date(year + 1, 1, 1) if q == 4 else dt.date(year, 3 * q + 1, 1))
        if m.group(4):
            start = dt.date.fromisocalendar(year, int(m.group(4)), 1)
            return start, start + dt.timedelta(days=7)
        if m.group(6):
            start = dt.date(year, int(m.group(5)), int(m.group(6)))
            return start, start + dt.timedelta(days=1)
        if m.group(5):
            month = int(m.group(5))
            start = dt.date(year, month, 1)
            return start, (dt.date(year + 1, 1, 1) if month == 12 else dt.date(year, month + 1, 1))
    except ValueError as exc:
        raise SemanticQueryError(f"{text!r} is not a valid period: {exc}") from exc
    return dt.date(year, 1, 1), dt.date(year + 1, 1, 1)


def _period_label(day: dt.date, grain: str) -> str:
    """The period of `grain` that holds `day`, written as the calendar writes it ('2026-Q3', '2026-03', '2026-W19')."""
    if grain == "year":
        return f"{day.year}"
    if grain == "quarter":
        return f"{day.year}-Q{(day.month - 1) // 3 + 1}"
    if grain == "month":
        return f"{day:%Y-%m}"
    if grain == "week":
        iso = day.isocalendar()
        return f"{iso.year}-W{iso.week:02d}"
    return day.isoformat()


def period_labels(period: str, grain: str) -> tuple[list[str], bool]:
    """The periods of `grain` that `period` overlaps, in order, and whether they cover exactly it
    ('2026' in quarters: 2026-Q1…Q4, exactly; '2026-03': 2026-Q1, not exactly). Why: a column that
    stores a period as text ('2026-Q3') is asked about by any period ("em 2026", "no segundo
    semestre"), and a text comparison finds only the value written the same way.
    """
    start, end = period_bounds(period)
    out: list[str] = []
    day = start
    while day < end:
        label = _period_label(day, grain)
        if label not in out:
            out.append(label)
        day += dt.timedelta(days=1)
    return out, period_bounds(out[0])[0] == start and period_bounds(out[-1])[1] == end if out else False


_ORDINAL = {"1": 1, "2": 2, "3": 3, "4": 4, "primeiro": 1, "segundo": 2, "terceiro": 3, "quarto": 4, "first": 1,
            "second": 2, "third": 3, "fourth": 4, "1o": 1, "2o": 2, "3o": 3, "4o": 4, "1st": 1, "2nd": 2, "3rd": 3,
            "4th": 4}


def question_periods(question: str, today: str) -> list[tuple[str, str]]:
    """(words, period) for the calendar periods a question names, in Portuguese or English: the small
    model misreads 'primeiro trimestre de 2026' or 'last month' far more often than it copies a
    period it is given.
    """
    text = fold(question).replace("º", "o")
    out: list[tuple[str, str]] = []
    month_names = "|".join(MONTHS)
    for m in re.finditer(rf"\b({month_names})\b(?:\s+(?:de|of))?\s+(\d{{4}})\b", text):
        out.append((m.group(0), f"{m.group(2)}-{MONTHS[m.group(1)]:02d}"))
    ords = "|".join(_ORDINAL)
    for m in re.finditer(rf"\b({ords})\s*(?:tri|trimestre|quarter|qtr)\b(?:\s+(?:de|of))?\s+(\d{{4}})\b", text):
        out.append((m.group(0), f"{m.group(2)}-Q{_ORDINAL[m.group(1)]}"))
    for m in re.finditer(r"\bq([1-4])\s+(?:de\s+|of\s+)?(\d{4})\b", text):
        out.append((m.group(0), f"{m.group(2)}-Q{m.group(1)}"))
    for m in re.finditer(rf"\b({ords})\s*(?:semestre|half)\b(?:\s+(?:de|of))?\s+(\d{{4}})\b", text):
        if _ORDINAL[m.group(1)] <= 2:
            out.append((m.group(0), f"{m.group(2)}-H{_ORDINAL[m.group(1)]}"))
    for m in re.finditer(r"\b(?:semana|week)\s+(\d{1,2})\s+(?:de|of)\s+(\d{4})\b", text):
        out.append((m.group(0), f"{m.group(2)}-W{int(m.group(1)):02d}"))
    try:
        day = dt.date.fromisoformat(today)
    except ValueError:
        return out
    prev_month = (day.replace(day=1) - dt.timedelta(days=1))
    iso = day.isocalendar()
    last_week = (day - dt.timedelta(days=7)).isocalendar()
    relative = {
        r"\b(?:este|neste|esse|nesse) mes\b|\bthis month\b": f"{day:%Y-%m}",
        r"\bmes passado\b|\bultimo mes\b|\blast month\b": f"{prev_month:%Y-%m}",
        r"\b(?:esta|nesta|essa|nessa) semana\b|\bthis week\b": f"{iso.year}-W{iso.week:02d}",
        r"\bsemana passada\b|\bultima semana\b|\blast week\b": f"{last_week.year}-W{last_week.week:02d}",
        r"\b(?:este|neste|esse|nesse) ano\b|\bthis year\b": f"{day.year}",
        r"\bano passado\b|\blast year\b": f"{day.year - 1}",
        r"\bhoje\b|\btoday\b": f"{day}",
        r"\bontem\b|\byesterday\b": f"{day - dt.timedelta(days=1)}",
    }
    for pattern, period in relative.items():
        found = re.search(pattern, text)
        if found:
            out.append((found.group(0), period))
    return out


def question_durations(question: str, today: str, path: Path = QUERY_CUES_FILE) -> list[tuple[str, str, str]]:
    """(words, op, day) for each span counted back from `today` the question names: "nos últimos
    30 dias" → (…, ">=", today - 30 days); "more than two weeks ago" → (…, "<", today - 14 days).
    """
    try:
        day = dt.date.fromisoformat(today)
    except ValueError:
        return []
    spans = query_cue_file(path).durations
    numbers = folded_cues(path).numbers
    units = {fold(w): unit for unit, ws in spans.units.items() for w in ws}
    if not units:
        return []
    n_re = "|".join([r"\d{1,4}", *map(re.escape, sorted(numbers, key=len, reverse=True))])
    unit_re = "|".join(map(re.escape, sorted(units, key=len, reverse=True)))
    text = " ".join(fold(question).split())
    out: list[tuple[str, str, str]] = []
    for op, phrases in ((">=", spans.since), ("<", spans.before)):
        for phrase in phrases:
            words = [f"({n_re})" if w == "{n}" else f"({unit_re})" if w == "{unit}" else re.escape(fold(w))
                     for w in phrase.split()]
            pattern = r"\b" + r"\s+".join(words) + r"\b"
            for m in re.finditer(pattern, text):
                count = int(m.group(1)) if m.group(1).isdigit() else numbers[m.group(1)]
                out.append((m.group(0), op, _back(day, count, units[m.group(2)]).isoformat()))
    return list(dict.fromkeys(out))


def _back(day: dt.date, n: int, unit: str) -> dt.date:
    """`day` minus `n` units (a month back from the 31st is the month's last day)."""
    if unit in ("day", "week"):
        return day - dt.timedelta(days=n * (7 if unit == "week" else 1))
    months = day.year * 12 + day.month - 1 - n * (12 if unit == "year" else 1)
    year, month = divmod(months, 12)
    last = (dt.date(year + (month + 1) // 12, (month + 1) % 12 + 1, 1) - dt.timedelta(days=1)).day
    return dt.date(year, month + 1, min(day.day, last))


# ------------------------------------------------------------------------------------ layer

_DEFAULTS: dict[str, Any] = {"expressible": True, "measures": [], "dimensions": [], "segments": [], "filters": [],
                             "order": [], "limit": None}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _GrammarSchema(_Strict):
    """The query model, whose JSON schema (what llama.cpp turns into a sampling grammar) writes each
    list of names as a regular expression factored into a prefix tree. Measured: as a flat `enum`
    of ~300 names the grammar kept hundreds of parses alive per token, and sampling took ~12 s per
    token; the factored form keeps about one. Validation still uses the enums.
    """

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        schema = super().model_json_schema(*args, **kwargs)
        for d in schema.get("$defs", {}).values():
            values = d.get("enum")
            if values and all(isinstance(v, str) and re.fullmatch(r"[a-z0-9_.]+", v) for v in values):
                d.pop("enum")
                d["type"] = "string"
                d["pattern"] = trie_pattern(values)
        return schema


def trie_pattern(names: Iterable[str]) -> str:
    """`^(...)$` matching exactly `names` (letters, digits, '_' and '.'), factored into a prefix tree;
    '.' is written `[.]`, which llama.cpp's regex-to-grammar conversion keeps literal.
    """
    trie: dict[str, Any] = {}
    for name in names:
        node = trie
        for ch in name:
            node = node.setdefault(ch, {})
        node[""] = {}

    def lit(ch: str) -> str:
        return "[.]" if ch == "." else ch

    def emit(node: dict[str, Any]) -> str:
        alts: list[str] = []
        for ch, child in sorted(node.items()):
            if ch == "":
                alts.append("")
                continue
            text = lit(ch)
            while len(child) == 1 and "" not in child:
                ((nxt, child),) = child.items()
                text += lit(nxt)
            alts.append(text + emit(child))
        if len(alts) == 1:
            return alts[0]
        optional = "" in alts
        body = "(" + "|".join(a for a in alts if a) + ")"
        return body + "?" if optional else body

    return "^" + emit(trie) + "$"


class SemanticLayer:
    """One semantic model over one database dialect; built once per model file and schema."""

    def __init__(self, spec: SemanticModelSpec, catalog: Catalog, dialect: str, *, source: str = "",
                 compile_examples: bool = True) -> None:
        """Check the model against the catalog, derive the names and the query model, and compile
        every worked example (a model whose own examples fail is refused here, not mid-question);
        `compile_examples=False` parses them only (`tramita ingest` compiled them already, and
        compiling costs seconds at each process start).
        """
        if dialect not in ("sqlite", "postgres"):
            raise ValueError(f"unsupported dialect {dialect!r}")
        self.spec = spec
        self.catalog = catalog
        self.dialect = dialect
        self.source = source or spec.name
        problems = check_against_catalog(spec, catalog)
        if problems:
            raise PolicyError("\n".join(f"{self.source}: field {p}" for p in problems))
        self._roles: dict[str, set[str]] = {}  # role -> target entities
        for ent in spec.entities.values():
            for jname, join in ent.joins.items():
                self._roles.setdefault(jname, set()).add(join.entity)
        self.dimension_names, self.filter_names = self._dimension_names()
        self.measure_names = [f"{e}.{m}" for e, ent in spec.entities.items() for m in ent.measures]
        self.segment_names = [f"{e}.{s}" for e, ent in spec.entities.items() for s in ent.segments]
        self.query_model = self._query_model()
        self._paths: dict[str, dict[str, list[tuple[tuple[str, str], ...]]]] = {}
        for i, ex in enumerate(spec.examples):
            try:
                parsed = self.parse(ex.query)
                if compile_examples:
                    self.compile(parsed)
            except SemanticQueryError as exc:
                raise PolicyError(f"{self.source}: field examples.{i}.query: {exc}") from exc

    # -------------------------------------------------------------------------------- names

    def kind(self, entity: str, dim: str) -> ColumnKind:
        """The semantic type of a dimension: declared, else its column's database type."""
        d = self.spec.entities[entity].dimensions[dim]
        if d.type:
            return d.type
        if d.expr:
            return "number"
        table = self.spec.entities[entity].table_name(entity)
        return column_kind(self.catalog[table].columns[d.column or dim])

    def _dimension_names(self) -> tuple[list[str], list[str]]:
        dims: list[str] = []
        filters: list[str] = []
        for ename, ent in self.spec.entities.items():
            for dname, d in ent.dimensions.items():
                dims.append(f"{ename}.{dname}")
                dims.extend(f"{ename}.{dname}{GRAIN_SEP}{g}" for g in d.time_grains)
                filters.append(f"{ename}.{dname}")
        for role, targets in self._roles.items():
            for target in sorted(targets):
                for dname in self.spec.entities[target].dimensions:
                    name = f"{role}.{dname}"
                    if name not in dims:
                        dims.append(name)
                        filters.append(name)
        return dims, filters

    def _query_model(self) -> type[BaseModel]:
        """The pydantic model the LLM's output must satisfy: every name an enum, operators a closed
        set. Only `expressible` is required: every token costs a forward pass on the CPU (measured
        ~5 s a token on a loaded 2-core machine), so empty lists are left out, as in the examples.
        Generated from the model file, so a name that does not exist cannot even be sampled (see
        `_GrammarSchema`).
        """

        def names(title: str, values: list[str]) -> Any:
            return enum.Enum(title, {f"v{i}": n for i, n in enumerate(values)}, type=str) if values else str

        dim = names("Dimension", self.dimension_names)
        fld = names("Field", self.filter_names + self.measure_names)
        ordr = names("OrderField", self.dimension_names + self.measure_names)
        meas = names("Measure", self.measure_names)
        seg = names("Segment", self.segment_names)
        op = names("Operator", list(OPERATORS))
        value_type: Any = str | float | list[str | float] | None
        direction: Any = Literal["asc", "desc"]
        filt: Any = create_model("Filter", __base__=_Strict, field=(fld, ...), op=(op, ...), value=(value_type, ...))
        order: Any = create_model("Order", __base__=_Strict, field=(ordr, ...), direction=(direction, ...))
        items: Any = Field(default_factory=list, max_length=MAX_ITEMS)
        fields: dict[str, Any] = {
            "expressible": (bool, ...), "measures": (list.__class_getitem__(meas), items),
            "dimensions": (list.__class_getitem__(dim), items), "segments": (list.__class_getitem__(seg), items),
            "filters": (list.__class_getitem__(filt), items), "order": (list.__class_getitem__(order), items),
            "limit": (int | None, Field(None, ge=1, le=1000))}
        model: type[BaseModel] = create_model(
            "SemanticQuery", __base__=_GrammarSchema,
            __doc__="ONE query over the semantic model; expressible=false when it cannot answer the question.",
            **fields)
        return model

    # -------------------------------------------------------------------------------- parse

    def parse(self, data: dict[str, Any] | str | BaseModel) -> QueryObject:
        """A query object from JSON text, a dict or the LLM's parsed model; a refusal names the
        field, the bad value and the closest valid names.
        """
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as exc:
                raise SemanticQueryError(f"not JSON: {exc}") from exc
        if isinstance(data, BaseModel):
            data = data.model_dump(mode="json")
        if not isinstance(data, dict):
            raise SemanticQueryError("the query must be a JSON object")
        data = {**_DEFAULTS, **data}
        try:
            parsed = self.query_model.model_validate(data)
        except ValidationError as exc:
            raise SemanticQueryError(self._explain(exc, data)) from exc
        raw = parsed.model_dump(mode="json")
        return QueryObject(
            expressible=raw["expressible"], measures=list(dict.fromkeys(raw["measures"])),
            dimensions=list(dict.fromkeys(raw["dimensions"])), segments=list(dict.fromkeys(raw["segments"])),
            filters=[(f["field"], f["op"], f["value"]) for f in raw["filters"]],
            order=[(o["field"], o["direction"]) for o in raw["order"]], limit=raw["limit"])

    def _explain(self, exc: ValidationError, data: dict[str, Any]) -> str:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            bad = err.get("input")
            where = str(err["loc"][0]) if err["loc"] else ""
            if err["type"] == "enum" and isinstance(bad, str):
                if loc.endswith(".op"):
                    lines.append(f"{loc}: unknown operator {bad!r}; operators: {' '.join(OPERATORS)}")
                    continue
                pool = {"measures": self.measure_names, "segments": self.segment_names,
                        "dimensions": self.dimension_names}.get(where, self.filter_names + self.measure_names)
                kind = {"measures": "measure", "segments": "segment", "dimensions": "dimension"}.get(where, "field")
                close = difflib.get_close_matches(bad, pool, n=3, cutoff=0.5)
                lines.append(f"{loc}: unknown {kind} {bad!r}" + (f"; did you mean {', '.join(close)}?" if close else ""))
            else:
                lines.append(f"{loc or '(root)'}: {err['msg']}")
        return "; ".join(lines)

    # --------------------------------------------------------------------------------- plan

    def _follows(self, entity: str, jname: str, join: Join) -> bool:
        """Whether the plain entity name follows this join (see `Join.default`)."""
        if join.default is not None:
            return join.default
        if join.entity == entity:
            return False
        same = [j for j in self.spec.entities[entity].joins.values() if j.entity == join.entity]
        return len(same) == 1

    def _reach(self, base: str) -> dict[str, list[tuple[tuple[str, str], ...]]]:
        """Shortest default join paths from `base` to every entity (several = ambiguous)."""
        if base in self._paths:
            return self._paths[base]
        best: dict[str, list[tuple[tuple[str, str], ...]]] = {base: [()]}
        frontier: list[tuple[str, tuple[tuple[str, str], ...]]] = [(base, ())]
        for _ in range(MAX_JOIN_DEPTH):
            nxt: list[tuple[str, tuple[tuple[str, str], ...]]] = []
            found: dict[str, list[tuple[tuple[str, str], ...]]] = {}
            for ent, path in frontier:
                for jname, join in self.spec.entities[ent].joins.items():
                    if not self._follows(ent, jname, join) or join.entity in best:
                        continue
                    p = (*path, (ent, jname))
                    found.setdefault(join.entity, []).append(p)
                    nxt.append((join.entity, p))
            best.update(found)
            frontier = nxt
        self._paths[base] = best
        return best

    def resolve(self, name: str, base: str, kind: str) -> Ref | None:
        """The join path and member `name` reaches from `base` (a dimension, measure or segment), or
        None where it is unknown, unreachable or reachable in several ways.
        """
        try:
            return self._resolve(name, base, kind)
        except SemanticQueryError:
            return None

    def _resolve(self, name: str, base: str, kind: str) -> Ref:
        prefix, _, member = name.partition(".")
        grain = None
        if GRAIN_SEP in member:
            member, _, grain = member.partition(GRAIN_SEP)
        reach = self._reach(base)
        if prefix in self.spec.entities:
            paths = reach.get(prefix, [])
            if not paths:
                raise SemanticQueryError(f"{name}: {prefix} is not reachable from {base} through its joins"
                                         + self._role_hint(prefix, base))
            if len(paths) > 1:
                raise SemanticQueryError(f"{name}: {prefix} is reachable from {base} in several ways"
                                         + self._role_hint(prefix, base))
            return self._member(Ref(paths[0], prefix, member, grain), name, kind)
        if prefix in self._roles:
            owners = sorted(((len(p[0]), e, p[0]) for e, p in reach.items()
                             if len(p) == 1 and prefix in self.spec.entities[e].joins), key=lambda t: t[0])
            if not owners:
                raise SemanticQueryError(f"{name}: no entity reachable from {base} has the join {prefix}")
            if len(owners) > 1 and owners[0][0] == owners[1][0]:
                raise SemanticQueryError(f"{name}: the join {prefix} exists on {owners[0][1]} and {owners[1][1]}; "
                                         "name the entity instead")
            _, owner, path = owners[0]
            join = self.spec.entities[owner].joins[prefix]
            return self._member(Ref((*path, (owner, prefix)), join.entity, member, grain), name, kind)
        raise SemanticQueryError(f"{name}: unknown entity or join {prefix!r}")

    def _reachable_roles(self, q: QueryObject, text: str) -> tuple[QueryObject, list[str]]:
        """A field written through a join role its measures' entity does not have ("employee.full_name"
        on a count of tickets) is written through the role that entity has to the same target and that
        the question names ("atribuídos a" → assignee), or through its only such role. A field written
        through the plain entity name, which follows the default role, takes the one other role the
        question names instead ("quem mais aprovou" → approver, not the spender). A filter on one row
        of the measures' own entity goes through the role that entity has to itself when the question
        names that role ("how many people report to X" counts X's reports, not X).

        Why: the small model copies a role from another entity's worked example; the refusal costs a
        repair call, and the repaired query often drops the person altogether.
        """
        bases = {m.split(".", 1)[0] for m in q.measures}
        if not bases:
            return self._listed_roles(q, text)
        if len(bases) != 1 or (base := next(iter(bases))) not in self.spec.entities:
            return q, []
        return self._roles_from(base, q, text)

    def _listed_roles(self, q: QueryObject, text: str) -> tuple[QueryObject, list[str]]:
        """`_reachable_roles` for a list (no measures): a query that already resolves is left as it
        is; else the rows are those of an entity the filters, then the dimensions, name by its own
        name, the first from which the rewritten query resolves ("who commanded INC-1": the
        incident's commander, not the plain employees the model named beside it).
        """
        try:
            self.plan(q)
            return q, []
        except SemanticQueryError:
            pass
        named = [f.split(".", 1)[0] for f in [*(f for f, _, _ in q.filters), *q.dimensions]]
        for base in dict.fromkeys(n for n in named if n in self.spec.entities):
            out, notes = self._roles_from(base, q, text)
            if not notes:
                continue
            try:
                self.plan(out)
            except SemanticQueryError:
                continue
            return out, notes
        return q, []

    def _roles_from(self, base: str, q: QueryObject, text: str) -> tuple[QueryObject, list[str]]:
        """`_reachable_roles` with the rows of `base`."""
        reach = self._reach(base)
        owned = {j: join for e, paths in reach.items() if len(paths) == 1
                 for j, join in self.spec.entities[e].joins.items()} | dict(self.spec.entities[base].joins)
        renamed: dict[str, str] = {}
        words = text.split()
        ent = self.spec.entities[base]
        for name in [f for f, _, _ in q.filters]:
            role, _, member = name.partition(".")
            if role == base and member in (self.label_of(base), ent.primary_key):
                # a filter naming one row of the entity, through the one role the entity has to
                # itself that the question names ("quantas pessoas reportam à X": the manager)
                own = [j for j, join in ent.joins.items() if join.entity == base
                       and any(_says(words, phrase) for phrase in [j, *join.synonyms])]
                if len(own) == 1:
                    renamed[name] = f"{own[0]}.{member}"
        for name in [*q.dimensions, *(f for f, _, _ in q.filters), *(f for f, _ in q.order)]:
            role, _, member = name.partition(".")
            if role in owned or name in renamed or role == base:
                continue
            targets = {role} if role in self.spec.entities else self._roles.get(role, set())
            options = [j for j, join in owned.items() if join.entity in targets]
            named = [j for j in options if any(_says(words, phrase) for phrase in [j, *owned[j].synonyms])]
            if role in self.spec.entities:
                # the entity's plain name follows its default join ("who spent"); a question that
                # names only another role's words ("quem mais aprovou") means that role
                defaults = [j for j in options if owned[j].default]
                pick = named if len(named) == 1 and defaults and named != defaults else []
                if not defaults and len(reach.get(role, [])) != 1:
                    # the plain name reaches nothing by itself: the role the question names, or the only one
                    pick = named if len(named) == 1 else options if len(options) == 1 else []
            else:
                pick = named if len(named) == 1 else options if len(options) == 1 else []
            if pick:
                renamed[name] = f"{pick[0]}.{member}"
        if not renamed:
            return q, []
        q = QueryObject(q.expressible, list(q.measures), [renamed.get(d, d) for d in q.dimensions], list(q.segments),
                        [(renamed.get(f, f), o, v) for f, o, v in q.filters], [(renamed.get(f, f), d) for f, d in q.order],
                        q.limit)
        return q, [f"{old} written as {new} (the role {base} has)" for old, new in renamed.items()]

    def _pointed_roles(self, q: QueryObject, words: list[str]) -> tuple[QueryObject, list[str]]:
        """A filter on a value the question does not say (an earlier source's), through a role the
        question names only right after a word that points back ("that manager", "esse gestor"),
        moved to the one role of the base entity to the same kind of row that the rest of the
        question names ("approve"): the pointed words say what the value is, not its role here.

        Why: "Who manages X, and how many expenses did that manager approve?" was filled with the
        graph's manager through the spender's manager, and counted the expenses of her reports.
        """
        try:
            base = self.plan(q).base
        except SemanticQueryError:
            return q, []
        ent, text = self.spec.entities[base], " " + " ".join(words) + " "
        pointers = folded_cues().pointers
        renamed: dict[str, str] = {}
        for name, op, value in q.filters:
            found = self._dimension(name)
            if found is None or op != "=" or not isinstance(value, str) or _has(text, value):
                continue
            prefix, target, member, _ = found
            joins = [j for e in self.spec.entities.values() for r, j in e.joins.items() if r == prefix and j.entity == target]
            if len(joins) != 1:
                continue
            # the question without the pointed words that name this role ("that manager")
            cut: set[int] = set()
            for i, t in enumerate(words):
                width = next((k for k in (1, 2) if t in pointers and _role_said(
                    " " + " ".join(words[i + 1:i + 1 + k]) + " ", prefix, joins[0])), 0)
                cut |= set(range(i, i + 1 + width)) if width else set()
            rest = " " + " ".join(w for i, w in enumerate(words) if i not in cut) + " "
            # "that manager's team", "the reports of that manager": the role is still said
            if not cut or _role_rooted(rest, prefix, joins[0]) or " s " in text:
                continue
            others = [r for r, j in ent.joins.items() if j.entity == target and r != prefix and _role_rooted(rest, r, j)]
            if len(others) == 1:
                renamed[name] = f"{others[0]}.{member}"
        if not renamed:
            return q, []
        q = QueryObject(q.expressible, list(q.measures), list(q.dimensions), list(q.segments),
                        [(renamed.get(f, f), o, v) for f, o, v in q.filters], list(q.order), q.limit)
        return q, [f"filter {old} written as {new} (the pointed words say what the value is; the question's other "
                   f"words name its role)" for old, new in renamed.items()]

    def _roles_said_before(self, q: QueryObject, words: list[str]) -> tuple[QueryObject, list[str], list[str]]:
        """A filter that names a row by its label through one role of the base entity, moved to the
        role whose words stand right before that name in the question ("abertos pela X",
        "approved by X"; an article between at most), or, after the base entity's own word and "of"
        ("the expenses of X", "as despesas da X"), to the entity's default role. A value of the base
        entity that only the role's words say ("abertos" in "abertos pela X") goes; those words are
        returned as spent (the rest of `settle` does not read them as a value).

        Why: the small model put the person a question names where the question's other role is
        asked: "who approved the expenses of X?" filled with X as the approver, "tickets abertos
        pela X" with X as the assignee.
        """
        try:
            base = self.plan(q).base
        except SemanticQueryError:
            return q, [], []
        ent = self.spec.entities[base]
        own = [fold(w) for w in self._entity_words(base)]
        renamed: dict[str, str] = {}
        spent: set[int] = set()
        for name, op, value in q.filters:
            role, _, member = name.partition(".")
            # "tickets.assignee_id = 'Ana'" names the assignee through the join's key column
            on_key = self._joins_on(base, member) if role == base and member in ent.dimensions else []
            current = on_key[0][0] if on_key else role
            join = ent.joins.get(current)
            target = join.entity if join is not None else role if role in self.spec.entities and role != base else None
            if op != "=" or not isinstance(value, str) or target is None or not (on_key or member == self.label_of(target)):
                continue
            at = phrase_starts(words, fold(value).split())
            if not at:
                continue
            before = words[max(0, at[0] - 5):at[0]]
            roles = {j: r for j, r in ent.joins.items() if r.entity == target}
            phrases = {j: [p for p in [j.replace("_", " "), *r.synonyms] if _ends_with(before, p)] for j, r in roles.items()}
            said = [j for j, found in phrases.items() if found]
            default = [j for j, r in roles.items() if r.default]
            of_own = any(_ends_with(before, f"{w} {prep}") for w in own for prep in ("of", "de", "da", "do", "das", "dos"))
            pick = said[0] if len(said) == 1 else default[0] if not said and of_own and len(default) == 1 else None
            if pick is not None and pick != current:
                renamed[name] = f"{base}.{ent.joins[pick].column}" if on_key else f"{pick}.{member}"
            if len(said) == 1:  # the role's words are spent on it ("abertos pela X" is no status "open")
                longest = max(len(fold(p).split()) for p in phrases[said[0]])
                width = longest if any(_says(before[-longest:], p) for p in phrases[said[0]]) else longest + 1
                spent |= set(range(at[0] - width, at[0]))
        unsaid = {(f, v) for f, o, v in q.filters if spent and o == "=" and isinstance(v, str)
                  and (dim := self._dimension(f)) is not None and f.split(".", 1)[0] == base
                  and self._said(dim[3], v, set(words), set())
                  and not self._said(dim[3], v, {w for i, w in enumerate(words) if i not in spent}, set())}
        if not renamed and not unsaid:
            return q, [], []
        # only the filters move: a column the model chose to show stays its choice
        q = QueryObject(q.expressible, list(q.measures), list(q.dimensions), list(q.segments),
                        [(renamed.get(f, f), o, v) for f, o, v in q.filters if (f, v) not in unsaid],
                        list(q.order), q.limit)
        notes = [*(f"filter {old} written as {new} (the role the question's words before the value name)"
                   for old, new in renamed.items()),
                 *(f"filter {f} = {v!r} (its word is the role's: {', '.join(sorted(renamed.values()))})"
                   for f, v in sorted(unsaid))]
        return q, notes, [" ".join(words[i] for i in sorted(spent))] if spent else []

    def _role_hint(self, target: str, base: str) -> str:
        roles = sorted({j for e, paths in self._reach(base).items() if len(paths) == 1
                        for j, join in self.spec.entities[e].joins.items() if join.entity == target})
        return f"; write it through a join: {', '.join(r + '.<field>' for r in roles)}" if roles else ""

    def _member(self, ref: Ref, name: str, kind: str) -> Ref:
        ent = self.spec.entities[ref.entity]
        pools: dict[str, dict[str, Any]] = {"measure": ent.measures, "segment": ent.segments,
                                             "dimension": ent.dimensions}
        pool = pools[kind]
        if ref.member not in pool:
            raise SemanticQueryError(f"{name}: {ref.entity} has no {kind} {ref.member!r}")
        if kind == "dimension" and ref.grain is not None and ref.grain not in ent.dimensions[ref.member].time_grains:
            raise SemanticQueryError(f"{name}: {ref.entity}.{ref.member} has no time grain {ref.grain!r}")
        return ref

    def plan(self, q: QueryObject) -> Plan:
        """The base entity (the measures' entity; without measures, the entity from which every
        named entity is reachable) and each name's join path.
        """
        if not (q.measures or q.dimensions):
            raise SemanticQueryError("name at least one measure or dimension")
        dim_names = [*q.dimensions, *(f for f, _, _ in q.filters if f not in self.measure_names),
                     *(f for f, _ in q.order if f not in self.measure_names)]
        measure_names = [*q.measures, *(f for f, _, _ in q.filters if f in self.measure_names),
                         *(f for f, _ in q.order if f in self.measure_names)]
        bases = sorted({m.split(".", 1)[0] for m in measure_names})
        if len(bases) > 1:
            raise SemanticQueryError(f"measures of one entity per query, not of {' and '.join(bases)}")
        if bases:
            candidates, n_named = bases, 1
        else:
            named = [n.split(".", 1)[0] for n in [*dim_names, *q.segments]]
            referenced = [n for n in named if n in self.spec.entities]
            owners = [e for e, ent in self.spec.entities.items() if any(n in ent.joins for n in named)]
            first = list(dict.fromkeys([*referenced, *owners]))
            candidates, n_named = first + [e for e in self.spec.entities if e not in first], len(first)
        errors: list[str] = []
        options: list[tuple[bool, int, int, Plan]] = []
        for rank, base in enumerate(candidates):
            try:
                refs = {n: self._resolve(n, base, "dimension") for n in dim_names}
                refs.update({n: self._resolve(n, base, "measure") for n in measure_names})
                refs.update({n: self._resolve(n, base, "segment") for n in q.segments})
            except SemanticQueryError as exc:
                errors.append(str(exc))
                continue
            # an entity the query names beats a bridge entity; then the shortest joins
            options.append((rank >= n_named, sum(len(r.path) for r in refs.values()), rank, Plan(base, refs)))
        if not options:
            raise SemanticQueryError(errors[0] if errors else "no entity answers this query")
        return min(options, key=lambda o: o[:3])[3]

    # ----------------------------------------------------------------------------- settle

    def settle(self, q: QueryObject, question: str, heard: Iterable[str] = ()) -> tuple[QueryObject, list[str]]:
        """Drop the dimensions a small model copies in but the question does not ask to see, and
        say which (for the trace). Why: "the total for team X in Q1" filled with the team, the date
        and the person as dimensions gives one row per person and day instead of one total.

        - a dimension fixed to one value by an `=` filter is a constant column;
        - in an aggregate query (measures), a date dimension without a grain that is also filtered
          is the period of the total, not a breakdown;
        - in an aggregate query, a dimension without a grain is kept only when the question names
          the column itself (its name or synonyms) or names its entity right after a grouping cue
          (`policies/query_cues.yaml`: "per team", "qual colaborador").

        Order entries on a dropped dimension go too. A query keeps at least one field. A breakdown
        (measures by dimensions) with no order, or ordered by a measure when the question asks for
        no ranking, reads in its groups' order (in time order over a date grain); a lone count
        nobody asked for lists its rows (`_rows_behind`).

        A text value the question does not say is dropped from its filter (the span rule, for query
        slots): "incidents … with severity?" filled with severity = 'SEV1' answers another question.
        Said means its words, or one of the model's words for that value, are in the question (a
        one-letter typo allowed), or the database's value index found it there (`heard`). A value
        that names one of the entity's segments ("status = 'active'") becomes that segment. A
        filter on a date column goes when the question names no time at all (`_names_time`): the
        small model fills "today" into questions that never ask about a day. A list question that
        asks for an entity by a question word ("qual projeto …") shows that entity's label. A segment
        of the base entity the question names ("chamados ativos") and the model left out is added.
        """
        # the roles read every word ("opened by X" names the requester); the rest reads no
        # breakdown in a "by" before a name (`_without_agent_cues`)
        written = re.findall(r"\w+", fold(question))
        roles_text = " " + " ".join(_without_phrases(written, folded_cues().row_references)) + " "
        said = re.findall(r"\w+", fold(_without_agent_cues(question)))
        q, dropped_roles = self._reachable_roles(q, roles_text)
        q, recounted = self._counted_entity(q, roles_text)
        dropped_roles += recounted
        q, one = self._one_record_figures(q, roles_text)
        dropped_roles += one
        q, by_words, spent = self._roles_said_before(q, written)
        dropped_roles += by_words
        q, pointed = self._pointed_roles(q, written)
        dropped_roles += pointed
        said = _without_phrases(said, spent)  # "abertos pela X" says no status "open" to what follows
        tokens = _without_phrases(said, folded_cues().row_references)
        each_row = len(tokens) < len(said)  # "e o status de cada um": a column beside each listed row
        text = " " + " ".join(tokens) + " "
        merged, either = _either(q.filters)
        filters = [flt for flt in merged if not self._column_word(*flt)]
        dropped: list[str] = [*dropped_roles, *either, *(f"filter {f} = {v!r} (a word for a column, not a value)"
                                                         for f, o, v in merged if (f, o, v) not in filters)]
        # "Which teams …" filled as teams.name = 'Teams': the entity's word, which would fix its rows
        itself = [(f, o, v) for f, o, v in filters if o == "=" and isinstance(v, str) and self._names_itself(f, v)]
        filters = [flt for flt in filters if flt not in itself]
        dropped += [f"filter {f} = {v!r} (the word for its entity, not a value)" for f, _, v in itself]
        dated = [flt for flt in filters if self._date_on_number(*flt)]
        filters = [flt for flt in filters if flt not in dated]
        dropped += [f"filter {f} {o} {v!r} (a date on a column of numbers)" for f, o, v in dated]
        # a column the question names by its word is one it asks to see ("e quem lidera?")
        shown = [self._shown_for(f) for f, o, v in merged if (f, o, v) not in filters and (f, o, v) not in itself]
        filters, segments, named = self._segment_filters(filters, list(q.segments))
        dropped += named
        said_segments = self._said_segments(q, segments, filters, text)
        segments += said_segments
        dropped += [f"segment {g} added (the question names it)" for g in said_segments]
        unspent = self._unspent_words(tokens, self._reached(q))
        said = self._said_filters(filters, unspent, {fold(h) for h in heard} | self._segment_values(text))
        dropped += [f"filter {f} {o} {v!r} (a value the question does not say)" for f, o, v in filters
                    if (f, o, v) not in said]
        filters, twice = self._one_filter_per_value(said, tokens)
        dropped += twice
        added = self._said_values(q, segments, filters, tokens, unspent)
        filters += added
        dropped += [f"filter {f} {o} {v!r} added (the question says it)" for f, o, v in added]
        segments, outside = self._excluded_segments(segments, tokens)
        filters += outside
        dropped += [f"filter {f} {o} {v!r} (the rows outside a segment the question excludes)" for f, o, v in outside]
        timeless = _without_phrases(tokens, folded_cues().open_ended)  # "até hoje" bounds nothing
        if not _names_time(question, timeless):
            # a period the question never states is the model's ("today", by default), not the user's
            timed = [(f, o, v) for f, o, v in filters if o not in ("is_null", "not_null") and self._timed(f)]
            dropped += [f"filter {f} {o} {v!r} (the question names no period)" for f, o, v in timed]
            filters = [flt for flt in filters if flt not in timed]
        elif not _names_day(question, timeless):
            # "the most recent incident" names a time, not a day: one day fixed is the model's
            days = [(f, o, v) for f, o, v in filters if o == "=" and self._timed(f) and _DAY.fullmatch(str(v))]
            dropped += [f"filter {f} {o} {v!r} (the question names no day)" for f, o, v in days]
            filters = [flt for flt in filters if flt not in days]
        filters, scaled = self._on_scale(filters, text)
        dropped += scaled
        counted = self._counted_values(filters, q.limit, tokens)
        dropped += [f"filter {f} {o} {v!r} (the number of rows asked for, not a value)" for f, o, v in counted]
        filters = [flt for flt in filters if flt not in counted]
        q = QueryObject(q.expressible, list(q.measures), list(q.dimensions), segments, filters, list(q.order), q.limit)
        fixed = {f for f, op, v in q.filters  # one value in every row (an empty one for is_null)
                 if (op == "=" and not isinstance(v, list)) or (op == "in" and isinstance(v, list) and len(v) == 1)
                 or op == "is_null"}
        filtered = {f for f, _, _ in q.filters}
        rows_named = self._named_rows(q.filters)
        kept: list[str] = []
        gone: set[str] = set()
        spared: dict[str, str] = {}  # kept only as the query's last field
        for name in q.dimensions:
            reason = self._why_drop(name, q, text, tokens, fixed, filtered, rows_named)
            if reason and (kept or q.measures or len(q.dimensions) > len(gone) + 1):
                dropped.append(f"{name} ({reason})")
                gone.add(name)
            else:
                kept.append(name)
                if reason:
                    spared[name] = reason
        kept += [d for d in dict.fromkeys(shown) if d not in kept and d in self.dimension_names]
        measures, swapped = self._asked_measures(q.measures, text)
        measures, by_count = self._most_records(measures, tokens, text)
        dropped += swapped + by_count
        renamed = dict(zip(q.measures, measures, strict=True))
        order = [(renamed.get(f, f), d) for f, d in q.order if f not in gone]
        limit = q.limit
        for m in list(measures):
            # a dimension only the order names is grouped by too: the compiler selects it
            column = self._over_shown(m, [*kept, *(f for f, _ in order if f in self.dimension_names)])
            if column is None:
                continue
            if self._aggregation_said(m, tokens):  # "o aumento total": one figure, not one per value
                kept = [d for d in kept if d != column]
                order = [(f, d) for f, d in order if f != column]
                dropped.append(f"{column} (the question asks for the {m} itself, not one per value)")
            else:  # "the increase asked in each one": the rows' own values, not a sum per value
                kept += [] if column in kept else [column]
                measures = [x for x in measures if x != m]
                order = [(f, d) for f, d in order if f != m]
                dropped.append(f"{m} (an aggregate of the column it is grouped by: each row's own value)")
        records = self._records_asked(q, measures, kept, limit, tokens, text)
        if records is not None:  # "quais despesas … estão pendentes?" filled as a sum per category: the expenses
            dropped.append(f"{', '.join(measures)} (the question asks which {measures[0].split('.', 1)[0]}: "
                           f"the rows, {', '.join(records)})")
            measures, kept = [], records
            order = [(f, d) for f, d in order if f not in self.measure_names]
        record = self._extreme_record(measures, kept, tokens)
        if record is not None:  # "which expense was the largest" is that expense, not the amount alone
            dropped.append(f"{measures[0]} (the question asks which {measures[0].split('.', 1)[0]} has it: "
                           f"that row, {', '.join(record[0])})")
            measures, kept, order, limit = [], *record, 1
        latest = self._latest_record(measures, kept, order, tokens)
        if latest is not None and self._lists(q, latest[0]):  # "the most recent incident" is that row
            dropped.append(_one_row_note(measures, latest))
            measures, kept, order, limit = [], *latest, 1
        if limit is None and kept and self._asks_for_one(tokens, kept):
            if measures and not order:
                # "quem mais aprovou despesas?" filled with no order: ranked by the measure, then one row
                least = bool(folded_cues().least & set(ranking_words(tokens)))
                order = [(measures[0], "asc" if least else "desc")]
            if any(f in self.measure_names for f, _ in order):
                limit = 1
                dropped.append("limit 1 (a single 'which/who … most' answer)")
        ranked = self._ranked_groups(q, measures, kept, limit, tokens)
        if ranked is not None:
            measures, kept, order, notes = ranked
            dropped += notes
        if not kept and order and all(f in self.measure_names for f, _ in order):
            # one figure has no order ("which tickets were opened in the last 10 days?" filled as
            # their count ordered by it): the order says no ranking the question asks for
            dropped.append(f"order {', '.join(f for f, _ in order)} (one figure has no order)")
            order = []
        single, note = self._one_count(measures, order, tokens, text)
        if note:
            measures = single
            dropped.append(note)
        # a period's or a span's words rank nothing ("the first quarter of 2026", "há menos de 90 dias":
        # "menos" there bounds a date, it ranks no count); the day a span counts back from is not read
        spans = [w for w, _, _ in question_durations(question, dt.date.today().isoformat())]
        timeless_tokens = _without_phrases(tokens, [*(" ".join(fold(w).split()) for w, _ in question_periods(question, "")),
                                                    *spans])
        listed = self._rows_behind(measures, kept, order, timeless_tokens, " " + " ".join(timeless_tokens) + " ",
                                   q.filters)
        if listed and not self._lists(q, listed):  # the rows must be reachable from one entity, or the count stays
            listed = []
        if listed:
            dropped.append(f"{measures[0]} (the question asks for no number: the rows, {', '.join(listed)})")
            measures, kept, order = [], listed, [(f, d) for f, d in order if f not in self.measure_names]
            latest = self._latest_record(measures, kept, order, tokens) if limit is None else None
            if latest is not None and self._lists(q, latest[0]):  # the count was the model's: now a list
                dropped.append(_one_row_note(measures, latest))
                kept, order, limit = *latest, 1
        if not measures and kept:
            swapped_in, notes = self._named_dimensions(kept, text)
            if notes and self._lists(q, swapped_in):
                renamed = dict(zip(kept, swapped_in, strict=False))  # an added column renames nothing
                kept, order, dropped = swapped_in, [(renamed.get(f, f), d) for f, d in order], [*dropped, *notes]
            asked = self._asked_labels(kept, tokens, q.filters)
            if each_row:
                asked += [a for a in self._row_labels([*asked, *kept]) if a not in asked]
            if asked and not self._lists(q, [*asked, *kept]):  # only an entity the query reaches
                asked = []
            kept = [*asked, *kept]
            dropped += [f"{a} (the question asks which {a.split('.', 1)[0]})" for a in asked]
            if asked:  # the label is now the field a spared column was kept as
                dropped += [f"{s} ({spared[s]})" for s in kept if s in spared]
                kept = [k for k in kept if k not in spared]
            roles = self._named_roles(kept, roles_text, q.filters, segments)
            if roles and self._lists(q, [*kept, *roles]):
                kept = [*kept, *roles]
                dropped += [f"{r} (the question names the role {r.split('.', 1)[0]})" for r in roles]
            named = self._key_labels(kept)
            if named and self._lists(q, [*kept, *named]):
                kept = [*kept, *named]
                dropped += [f"{n} (names the rows of the key shown)" for n in named]
        if measures:
            grouped = self._named_breakdown(q, measures, kept, tokens)
            kept += grouped
            dropped += [f"{g} added (the question asks for the figure per {g.split('.', 1)[1]})" for g in grouped]
        if measures and not kept and folded_cues().person & set(tokens):
            # "who leads P, and what is its budget?" filled with the budget alone: the person the
            # question asks for is the role it names, one group per person
            roles = self._named_roles(measures[:1], roles_text, q.filters, segments)
            if roles and self._groups(q, measures, roles):
                kept = roles
                dropped += [f"{r} added (the question asks who: the role {r.split('.', 1)[0]})" for r in roles]
        if measures and kept and folded_cues().person & set(tokens):
            # "who approved the most expensive …" grouped by the approver's key: the person, by name
            named = self._key_labels(kept)
            if named and self._groups(q, measures, [*kept, *named]):
                kept = [*kept, *named]
                dropped += [f"{n} (names the rows of the key shown; the question asks who)" for n in named]
        if measures and kept and order and limit is None and all(f in measures for f, _ in order) \
                and not ranking_words(tokens) and not folded_cues().order & set(tokens):
            # the model orders "how many per office" by the count on its own: the question asks for
            # no ranking (no superlative, no word for an order), so the groups' own order applies
            dropped.append(f"order {order[0][0]} {order[0][1]} (the question asks for no ranking)")
            order = []
        if measures and kept and not order:
            # a breakdown that names no order reads in its groups' own order, as a list reads in its
            # records' (P1 to P4, a series in time order): a ranking is asked for by its own words
            # (most, top, largest), which fill an order; the full list of groups follows a short
            # answer (synthesis), so the largest need not come first to be named
            grains = [d for d in kept if GRAIN_SEP in d]
            order = [(d, "asc") for d in (grains or kept)]
            dropped.append(f"order {order[0][0]} asc (a breakdown reads "
                           f"{'in time order' if grains else 'in its groups order'})")
        if not measures and kept and not order and limit is None:
            own = self._own_order(kept, q.filters)
            if own is not None:
                order = [(own, "asc")]
                dropped.append(f"order {own} asc (a list reads in its records' own order)")
        out = QueryObject(q.expressible, measures, kept, list(q.segments), list(q.filters), order, limit)
        # the rows, once settled: a condition on the one record a key names is shown, not filtered
        out, checked = self._checked_conditions(out)
        dropped += checked
        if not dropped:
            return q, []
        return out, dropped

    def _own_order(self, kept: list[str], filters: list[tuple[str, str, Any]]) -> str | None:
        """The field a list of records reads in when the question names no order: the date of the
        listed entity a period is on ("who joined in 2025": the span the list covers, by hire
        date), else its key (ids count up as records are made; a bound such as "not touched since
        March" is a condition, not the list's span), else nothing (the dimensions' own order, as
        before). The listed entity is the first field's, when that field is the entity's own.
        """
        prefix = kept[0].partition(".")[0]
        ent = self.spec.entities.get(prefix)
        if ent is None:
            return None
        dated = [f for f, op, _ in filters if op == "=" and f in kept and f.partition(".")[0] == prefix
                 and self._dated(f)]
        if dated:
            return dated[0]
        key = f"{prefix}.{ent.primary_key}" if ent.primary_key else ""
        return key if key in kept or self._unseen_key(key, kept) else None

    def _unseen_key(self, field_name: str, dimensions: list[str]) -> bool:
        """Whether `field_name` is an entity's key that orders a list of its rows without being
        shown: the rows are named by the entity's label among `dimensions` (a list of names reads
        in the records' order; a list of distinct values, with no label, has no records to order).
        """
        prefix, _, member = field_name.partition(".")
        ent = self.spec.entities.get(prefix)
        if ent is None or not member or member != ent.primary_key or field_name in dimensions:
            return False
        label = self.label_of(prefix)
        return label is not None and f"{prefix}.{label}" in dimensions

    def _named_breakdown(self, q: QueryObject, measures: list[str], kept: list[str], tokens: list[str]) -> list[str]:
        """The one column a breakdown cue names ("por cidade de escritório", "per office") that
        the model left out of an aggregate: a dimension, of an entity the measures' entity reaches
        by its default joins, one of whose words follows the cue (a filler may stand between).
        [] when none or several do, or the question already groups by it.

        Why: the small model filled "quanto foi gasto com hospedagem por cidade de escritório"
        with one total; the office is the spender's, a column of another entity.
        """
        try:
            base = self.plan(QueryObject(q.expressible, measures, [], list(q.segments), list(q.filters), [],
                                         None)).base
        except SemanticQueryError:
            return []
        shown = {d.partition(GRAIN_SEP)[0] for d in kept}
        found: list[str] = []
        for entity, paths in self._reach(base).items():
            if len(paths) != 1:
                continue  # two ways to reach it: whose column is meant is not said
            for dname, dim in self.spec.entities[entity].dimensions.items():
                if dim.time_grains or f"{entity}.{dname}" in shown:
                    continue
                if any(_after_cue(tokens, w, folded_cues().breakdown) for w in dim.synonyms):
                    found.append(f"{entity}.{dname}")
        found = list(dict.fromkeys(found))
        target = self._dimension(found[0]) if len(found) == 1 else None
        if target is None or any((d := self._dimension(k)) is not None and d[1:3] == target[1:3]
                                 for k in kept if GRAIN_SEP not in k):
            return []  # none, several, or that column already groups under another name
        return found if self._groups(q, measures, [*kept, *found]) else []

    def _checked_conditions(self, q: QueryObject) -> tuple[QueryObject, list[str]]:
        """Beside an `=` filter on an entity's primary key (one record), an `=` filter on one of its
        columns of declared values is shown instead: "BR-0002 was requested by whom, and was it
        approved?" filled with status = 'approved' asks whether, and the model read the row the
        filter let through as a no; a record the condition excludes would read as none at all.
        """
        if q.measures:
            return q, []
        # each `=` filter on an entity's own column (not through a role): (filter, entity, member, dimension)
        own = [(flt, found[1], found[2], found[3]) for flt in q.filters if flt[1] == "="
               and (found := self._dimension(flt[0])) is not None and found[0] == found[1]]
        keyed = {e for _, e, m, _ in own if m == self.spec.entities[e].primary_key}
        checks = [flt for flt, e, m, d in own if e in keyed and d.values and m != self.spec.entities[e].primary_key]
        if not checks:
            return q, []
        # the record's key beside its state: the answer names the record it says yes or no about
        key = [f"{e}.{self.spec.entities[e].primary_key}" for e in sorted(keyed)]
        shown = QueryObject(q.expressible, [], list(dict.fromkeys([*key, *q.dimensions, *(f for f, _, _ in checks)])),
                            list(q.segments), [flt for flt in q.filters if flt not in checks], list(q.order), q.limit)
        return shown, [f"filter {f} = {v!r} shown instead (one record: the question asks whether)" for f, _, v in checks]

    def _one_record_figures(self, q: QueryObject, text: str) -> tuple[QueryObject, list[str]]:
        """Sums, averages and extremes over one record (an `=` filter on its entity's key or label)
        read as that record's columns, kept only where the question (`text`: spaced, folded) names
        them: a list, which then shows the columns and roles the question names. "Quem lidera o
        projeto P e quando ele termina?" filled with P's average budget, and "quem comandou o INC-…"
        filled with its times to resolve, answered with figures nobody asked for.
        """
        if not q.measures:
            return q, []
        base = q.measures[0].split(".", 1)[0]
        ent = self.spec.entities.get(base)
        if ent is None:
            return q, []
        label = f"{base}.{self.label_of(base)}"
        keys = {f"{base}.{k}" for k in (ent.primary_key, self.label_of(base)) if k}
        if not any(o == "=" and f in keys for f, o, _ in q.filters):
            return q, []
        if label != f"{base}.{ent.primary_key}" and any(o == "=" and f == label for f, o, _ in q.filters) \
                and folded_cues().person & set(text.split()) \
                and not any(_role_said(text, r, j) for r, j in ent.joins.items()):
            return q, []  # "who … and what's that person's limit": the named person is asked, as a ranked row
        columns: list[str] = []
        for name in q.measures:
            entity, _, mname = name.partition(".")
            measure = ent.measures.get(mname) if entity == base else None
            if measure is None or measure.agg not in ("sum", "avg", "min", "max"):
                return q, []
            said = any(_has(text, w) for w in measure.synonyms)
            if not measure.column:  # a figure computed from columns: kept as a figure where it is named
                if said:
                    return q, []
                continue
            member = next((m for m, d in ent.dimensions.items() if (d.column or m) == measure.column), None)
            if member is not None and (self._said_column(base, member, text) or said):
                columns.append(f"{base}.{member}")
        # the record's other columns the question names ("e quando ele termina": the end date)
        filtered = {f for f, _, _ in q.filters}
        columns += [f"{base}.{m}" for m in ent.dimensions if f"{base}.{m}" not in keys | filtered
                    and not self._joins_on(base, m) and self._said_column(base, m, text)]
        columns = list(dict.fromkeys(columns))
        dimensions = list(dict.fromkeys([*q.dimensions, *columns]))
        if not dimensions:
            return q, []
        listed = QueryObject(q.expressible, [], dimensions, list(q.segments), list(q.filters),
                             [(f, d) for f, d in q.order if f not in q.measures], q.limit)
        try:
            self.plan(listed)
        except SemanticQueryError:
            return q, []
        return listed, [f"{', '.join(q.measures)} over one record: its columns the question names "
                        f"({', '.join(columns) or 'none'})"]

    def _counted_entity(self, q: QueryObject, text: str) -> tuple[QueryObject, list[str]]:
        """A lone distinct count of a join key, over an entity the question (`text`: spaced, folded)
        never names, counted on the key's target entity, which it names: "quantos colaboradores
        trabalham em Lisboa" filled as the project staffing's distinct people counts only the people
        on a project. Only when every filter is on the target's own fields or through that join.
        """
        if len(q.measures) != 1:
            return q, []
        base, _, mname = q.measures[0].partition(".")
        ent = self.spec.entities.get(base)
        measure = ent.measures.get(mname) if ent is not None else None
        if ent is None or measure is None or measure.agg != "count_distinct" or _mentions(text, ent, base):
            return q, []
        role, join = next(((r, j) for r, j in ent.joins.items() if j.column == measure.column), (None, None))
        if join is None or not _mentions(text, self.spec.entities[join.entity], join.entity):
            return q, []
        count = next((f"{join.entity}.{n}" for n, m in self.spec.entities[join.entity].measures.items()
                      if m.agg == "count"), None)
        names = [*(f for f, _, _ in q.filters), *q.segments, *q.dimensions,
                 *(f for f, _ in q.order if f != q.measures[0])]
        if count is None or not {n.split(".", 1)[0] for n in names} <= {role, join.entity}:
            return q, []

        def moved_name(name: str) -> str:
            return f"{join.entity}.{name.split('.', 1)[1]}"

        moved = QueryObject(q.expressible, [count], [moved_name(d) for d in q.dimensions],
                            [moved_name(s) for s in q.segments], [(moved_name(f), o, v) for f, o, v in q.filters],
                            [(moved_name(f) if f != q.measures[0] else count, d) for f, d in q.order], q.limit)
        try:
            self.plan(moved)
        except SemanticQueryError:
            return q, []
        return moved, [f"{q.measures[0]} counted as {count} (the question names {join.entity}, not {base})"]

    def _groups(self, q: QueryObject, measures: list[str], dimensions: list[str]) -> bool:
        """Whether `measures` grouped by `dimensions` under `q`'s segments and filters plans."""
        try:
            self.plan(QueryObject(q.expressible, measures, dimensions, list(q.segments), list(q.filters), [], None))
        except SemanticQueryError:
            return False
        return True

    def _lists(self, q: QueryObject, dimensions: list[str]) -> bool:
        """Whether a list of `dimensions` under `q`'s segments and filters plans (one base entity reaches them)."""
        try:
            self.plan(QueryObject(q.expressible, [], dimensions, list(q.segments), list(q.filters), [], None))
        except SemanticQueryError:
            return False
        return True

    def _on_scale(self, filters: list[tuple[str, str, Any]], text: str) -> tuple[list[tuple[str, str, Any]], list[str]]:
        """A comparison with a value of a `ranked` dimension read as the values on one side of it:
        the side the question's words say ("P2 or more urgent" is P1 and P2), else the side the
        operator says, read as a comparative (the model writes "worse than SEV2" as `> SEV2`); the
        value itself is in for `>=`/`<=`. Why: stored codes compare as text, and `priority >= 'P2'`
        is P2, P3 and P4, the opposite of urgency. `text` is the question's folded words, spaced.
        """
        out: list[tuple[str, str, Any]] = []
        notes: list[str] = []
        for name, op, value in filters:
            found = self._dimension(name)
            scale = _scale(found[3]) if found is not None else None
            read = scale_side(scale, op, str(value), text) if scale is not None else None
            if read is None:
                out.append((name, op, value))
                continue
            out.append((name, "in", read[0]))
            notes.append(f"filter {name} {op} {value!r} read on its scale as {read[0]} ({read[1]})")
        return out, notes

    @cached_property
    def scales(self) -> dict[tuple[str, str], Scale]:
        """(table, column) -> the scale of the ranked dimensions that read it (for `mend_sql`)."""
        return scales_of([((ent.table_name(ename), d.column or dname), scale)
                          for ename, ent in self.spec.entities.items() for dname, d in ent.dimensions.items()
                          if not d.expr and (scale := _scale(d)) is not None])

    @cached_property
    def live_columns(self) -> dict[str, frozenset[str]]:
        """Table -> its columns in the live schema (for `mend_sql`'s qualifier mend)."""
        return {table: frozenset(info.columns) for table, info in self.catalog.items()}

    def mend_sql(self, sql: str, question: str) -> tuple[str, list[str]]:
        """Raw SQL (the fallback's) with the deterministic mends of `tools.sql_mend`: comparisons on
        this model's ranked columns read on their scale by the question's words, anti-joins written
        as inner joins made left joins, and columns under the wrong alias moved to the one table of
        the SELECT that has them; a note per mend.
        """
        return mend(sql, self.dialect, self.scales, _spaced(question), self.live_columns)

    @cached_property
    def _time_phrases(self) -> dict[str, frozenset[tuple[str, ...]]]:
        """Entity -> the folded synonyms of two or more words of its date columns ("aberto em", "created on")."""
        return {e: frozenset(tuple(fold(w).split()) for name, dim in ent.dimensions.items()
                             if self.kind(e, name) in ("date", "timestamp") for w in dim.synonyms if len(w.split()) >= 2)
                for e, ent in self.spec.entities.items()}

    def _reached(self, q: QueryObject) -> set[str]:
        """The entities whose fields the query names (a join role counts as its entity)."""
        names = [*q.measures, *q.dimensions, *q.segments, *(f for f, _, _ in q.filters)]
        return {e for e in (self._entity_of(n.partition(".")[0]) for n in names) if e is not None}

    def _unspent_words(self, tokens: list[str], entities: set[str]) -> set[str]:
        """The words that may say a filter's value: `tokens` without those of a date column's own
        phrase of two or more words that a time word or a number follows within three words
        ("abertos em 2026", "abertos no mês de março": the preposition may be joined with an
        article, `contractions`); its "abertos" says when the row was created, not status = open.
        Only the date columns of `entities` (those the query reaches): another entity's date phrase
        ("aprovado em" of expenses) spends no word of a question about budget requests.

        Why: the longer phrase is the reading meant (the longest match wins, as in value linking);
        counted twice, one word filled a filter the user did not ask for.
        """
        spent: set[int] = set()
        cues = folded_cues()

        def same(token: str, word: str) -> bool:
            return token in (word, word + "s", word + "es") or token in cues.contractions.get(word, ())

        for phrase in {p for e in entities for p in self._time_phrases.get(e, frozenset())}:
            n = len(phrase)
            for i in range(len(tokens) - n):
                if all(same(t, w) for t, w in zip(tokens[i:i + n], phrase, strict=True)) and any(
                        t in cues.time or t.isdigit() for t in tokens[i + n:i + n + 3]):
                    spent.update(range(i, i + n))
        return {t for i, t in enumerate(tokens) if i not in spent}

    def _one_filter_per_value(self, filters: list[tuple[str, str, Any]], tokens: list[str]
                              ) -> tuple[list[tuple[str, str, Any]], list[str]]:
        """One `=` filter for a text value the question says once, when the model put it on two
        columns ("no escritório de Lisboa": the people's office, not also their team's home city;
        "do time de SRE": the team, not also a job title): the column whose words, or whose
        entity's words, stand in the three words before the value. Unchanged when none or
        several do. Why: both filters together ask for rows that have it twice, and find fewer.
        """
        groups: dict[str, list[tuple[str, str, Any]]] = {}
        for flt in filters:
            if flt[1] == "=" and isinstance(flt[2], str) and self._dimension(flt[0]) is not None:
                groups.setdefault(" ".join(re.findall(r"\w+", fold(flt[2]))), []).append(flt)
        out = list(filters)
        notes: list[str] = []
        for key, group in groups.items():
            words = key.split()
            starts = phrase_starts(tokens, words)
            if len(group) < 2 or len(starts) != 1:
                continue
            before = " " + " ".join(tokens[max(0, starts[0] - 3):starts[0]]) + " "
            near = [flt for flt in group if self._named_near(flt[0], before)]
            if len(near) == 1:
                out = [flt for flt in out if flt not in group or flt == near[0]]
                notes += [f"filter {f} = {v!r} (the value is said once, for {near[0][0]})"
                          for f, _, v in group if (f, "=", v) != near[0]]
        return out, notes

    def _named_near(self, name: str, before: str) -> bool:
        """Whether `before` (folded words, spaced) says the column of dimension `name` or its entity."""
        found = self._dimension(name)
        if found is None:
            return False
        ent = self.spec.entities[found[1]]
        return any(_has(before, w) for w in [*found[3].synonyms, *ent.synonyms, found[1]])

    def _said_filters(self, filters: list[tuple[str, str, Any]], words: set[str], heard: set[str]
                      ) -> list[tuple[str, str, Any]]:
        """The filters with their unsaid text values left out (see `settle`); other kinds as they are."""
        out: list[tuple[str, str, Any]] = []
        for name, op, value in filters:
            found = self._dimension(name)
            if found is None or op not in ("=", "!=", "in", "not_in") or self.kind(found[1], found[2]) != "string" \
                    or found[3].names_period is not None:  # a period is said by the question's time words
                out.append((name, op, value))
                continue
            dim = found[3]
            values = value if isinstance(value, list) else [value]
            kept = [v for v in values if not isinstance(v, str) or self._said(dim, v, words, heard)]
            if kept:
                out.append((name, op, kept if isinstance(value, list) else kept[0]))
        return out

    def read_periods(self, q: QueryObject, question: str, today: str) -> tuple[QueryObject, list[str]]:
        """Date filter values written in the user's words ("março de 2026", "last month") read as
        the period they name, and say which (for the trace). Why: the small model copies the words
        beside the period hint more often than the period; the words are the user's, so reading
        them is the same calendar code that wrote the hint (`question_periods`), not a guess.
        A value that names no single period is left for the compiler to refuse.
        """
        said = question_periods(question, today)
        named = {fold(words): period for words, period in said}
        # the model wrote one day (today, mostly) where the question names no day and exactly one
        # period ("opened in 2026"): that period is the user's, the day is not
        periods = {period for _, period in said} or {
            m.group(0) for m in _YEARISH.finditer(fold(question)) if re.fullmatch(r"\d{4}", m.group(0))}
        lone = next(iter(periods)) if len(periods) == 1 and not _names_day(question, re.findall(r"\w+", fold(question))) \
            else None

        def read(value: Any) -> Any:
            text = str(value).strip()
            if lone is not None and isinstance(value, str) and _DAY.fullmatch(text):
                return lone
            if not isinstance(value, str) or _PERIOD.match(text) or _is_exact_timestamp(text):
                return value
            found = {p for _, p in question_periods(text, today)} or (
                {named[fold(text)]} if fold(text) in named else set())
            return found.pop() if len(found) == 1 else value

        filters: list[tuple[str, str, Any]] = []
        notes: list[str] = []
        # a day the model wrote on a column of no date ("approver_id = today") where the question
        # names one period and no date filter holds it: the user's period, on the query's date column
        moved = self._period_column(q) if lone is not None and not any(self._timed(f) for f, _, _ in q.filters) \
            else None
        for f, op, v in q.filters:
            if moved is not None and not self._timed(f) and op == "=" and isinstance(v, str) \
                    and _DAY.fullmatch(v.strip()):
                notes.append(f"filter {f} {op} {v!r} read as {moved} = {lone!r} (the period the question names)")
                f, v, moved = moved, lone, None
            new = ([read(x) for x in v] if isinstance(v, list) else read(v)) if self._timed(f) else v
            if new != v:
                notes.append(f"filter {f} {op} {v!r} read as period {new!r} (the user's words)")
                v = new
            filters.append((f, op, v))
        filters, homed = self._period_on_named_column(filters, q.measures, q.dimensions, question,
                                                      [w for w, _ in said])
        notes += homed
        if not notes:
            return q, []
        return QueryObject(q.expressible, list(q.measures), list(q.dimensions), list(q.segments), filters,
                           list(q.order), q.limit), notes

    def _period_on_named_column(self, filters: list[tuple[str, str, Any]], measures: list[str],
                                dimensions: list[str], question: str, period_words: list[str]
                                ) -> tuple[list[tuple[str, str, Any]], list[str]]:
        """A period filtered on a date column the question does not name, moved to the one other
        date column of that entity it names by its words ("despesas decididas em abril": the
        decision date, not the date of the expense). Why: the small model puts a period on an
        entity's main date whatever verb the question dates. Not when that column is also shown
        (the question asks to see it) or already filtered; the words of the query's own measures
        and columns name no date ("the longest acknowledgement time" is the measure's).
        """
        spent = list(period_words)
        for name in measures:
            found = self._measure(name)
            if found is not None:
                col = found[1].dimensions.get(found[2].column or "")
                spent += [*found[2].synonyms, *(col.synonyms if col is not None else [])]
        for name in dimensions:
            at = self._dimension(name.partition(GRAIN_SEP)[0])
            spent += at[3].synonyms if at is not None else []
        keys = [" ".join(fold(w).split()) for w in spent]
        rest = " " + " ".join(_without_phrases(fold(question).split(), [*keys, *(k + "s" for k in keys)])) + " "
        # the question less its period's words: a date of the rows it names anywhere keeps the period there
        whole = " " + " ".join(_without_phrases(fold(question).split(), [" ".join(fold(w).split())
                                                                          for w in period_words])) + " "
        taken = {f for f, _, _ in filters} | {d.partition(GRAIN_SEP)[0] for d in dimensions}
        out: list[tuple[str, str, Any]] = []
        notes: list[str] = []
        tokens = fold(question).split()
        for f, op, v in filters:
            at = self._dimension(f) if self._dated(f) else None
            nearest = self._date_before_period(at, v, tokens, period_words) if at is not None else None
            if nearest is not None:
                # "incidents opened in 2026 that took … to resolve": both dates named; the period's
                # is the one named right before it (where the model put it, or moved there)
                if nearest != f and nearest not in {g for g, _, _ in [*filters, *out]}:
                    notes.append(f"filter {f} {op} {v!r} moved to {nearest} (the date named right before the period)")
                    f = nearest
                    taken.add(f)
            elif at is not None and not self._said_column(at[1], at[2], rest):
                named = [f"{at[0]}.{m}" for m, d in self.spec.entities[at[1]].dimensions.items()
                         if d.time_grains and m != at[2] and self._said_column(at[1], m, rest)]
                if len(named) == 1 and named[0] not in taken:
                    notes.append(f"filter {f} {op} {v!r} moved to {named[0]} (the date the question names)")
                    f = named[0]
                    taken.add(f)
                elif not named and not self._said_column(at[1], at[2], whole):
                    f = self._period_home(f, op, v, at, taken, notes)
            out.append((f, op, v))
        return out, notes

    def _date_before_period(self, at: tuple[str, str, str, Dimension], value: Any, tokens: list[str],
                            period_words: list[str]) -> str | None:
        """The one date column of the filter's entity whose words stand in the three words right
        before the period's words in the question (`tokens`, folded), when the question names two
        or more of the entity's dates; None otherwise.
        """
        dates = [m for m, d in self.spec.entities[at[1]].dimensions.items() if d.time_grains]
        whole = " " + " ".join(tokens) + " "
        if sum(self._said_column(at[1], m, whole) for m in dates) < 2:
            return None
        phrases = [fold(w).split() for w in period_words] + [[fold(str(value))]]
        starts = sorted(i for p in phrases if p for i in phrase_starts(tokens, p))
        if not starts:
            return None
        before = " " + " ".join(tokens[max(0, starts[0] - 3):starts[0]]) + " "
        named = [m for m in dates if any(_has(before, w) for w in [m.replace("_", " "), *self.spec.entities[at[1]]
                                                                     .dimensions[m].synonyms])]
        return f"{at[0]}.{named[0]}" if len(named) == 1 else None

    def _period_home(self, name: str, op: str, value: Any, at: tuple[str, str, str, Dimension], taken: set[str],
                     notes: list[str]) -> str:
        """`period_home`'s column for a period put on a date column the question does not name; else `name`."""
        home = self.period_home(at[1], value) if op in ("=", "in", "between", "<", "<=", ">", ">=") else None
        if home is None or f"{at[0]}.{home}" in taken:
            return name
        notes.append(f"filter {name} {op} {value!r} moved to {at[0]}.{home} (the period the rows are for; the "
                     "question names no date of them)")
        taken.add(f"{at[0]}.{home}")
        return f"{at[0]}.{home}"

    def period_home(self, entity: str, value: Any) -> str | None:
        """The one column of `entity` that names periods (`Dimension.names_period`), for a period
        the question names without naming a date of the rows, when the period is whole periods of
        that column's grain: "o orçamento do terceiro trimestre de 2026" is the budget for that
        quarter, not one approved in it. None for a part of one ("em março": the quarter holds more
        than March), or when the entity has no such column or several.
        """
        homes = self._period_texts(entity)
        if len(homes) != 1:
            return None
        member, grain = next(iter(homes.items()))
        values = value if isinstance(value, list) else [value]
        try:
            whole = all(isinstance(v, str) and bool(_PERIOD.match(v.strip())) and period_labels(v.strip(), grain)[1]
                        for v in values)
        except SemanticQueryError:
            return None
        return member if whole and values else None

    def _period_column(self, q: QueryObject) -> str | None:
        """The period dimension of the entity the query counts, or lists; None when it has none."""
        owner = next((f[0] for f in map(self._measure, q.measures) if f is not None), None) or next(
            (d[1] for d in map(self._dimension, q.dimensions) if d is not None), None)
        when = self.spec.entities[owner].period_dimension() if owner is not None else None
        return f"{owner}.{when}" if when is not None else None

    def read_durations(self, q: QueryObject, question: str, today: str) -> tuple[QueryObject, list[str]]:
        """A span counted back from today that the question names ("nos últimos 30 dias", "more
        than two weeks ago") as the bound of the date column: the one of that entity the question
        names by its words, else the one the model's filters use, else the period dimension of the
        entity the query is about; and a time grain whose words stand
        only in that span ("dias") is no breakdown. Why: the small model writes "2026-05-15-30"
        or today's date, and reads "30 dias" as one row per day.
        """
        found = question_durations(question, today)
        if len(found) != 1:
            return q, []
        words, op, day = found[0]
        dated = [f for f, _, _ in q.filters if self._dated(f)]
        column = dated[0] if dated else None
        if column is None:
            column = self._period_column(q)
        if column is None:
            return q, []
        rest = " " + " ".join(fold(question).replace(words, " ").split()) + " "  # the question less the span
        at = self._dimension(column)
        if at is not None:  # a date column of that entity the question names by its words ("enviadas há …")
            named = [f"{at[0]}.{m}" for m, d in self.spec.entities[at[1]].dimensions.items()
                     if d.time_grains and self._said_column(at[1], m, rest)]
            column = named[0] if len(named) == 1 else column
        filters = [(f, o, v) for f, o, v in q.filters if f not in (column, *dated[:1])] + [(column, op, day)]
        notes = [f"filter {column} {op} {day!r} ('{words}', counted back from {today})"]
        grains = [d for d in q.dimensions if GRAIN_SEP in d
                  and not any(_has(rest, w) for w in grain_words().get(d.partition(GRAIN_SEP)[2], []))]
        notes += [f"{g} (its word is the span's unit, not a breakdown)" for g in grains]
        dims = [d for d in q.dimensions if d not in grains]
        order = [(f, d) for f, d in q.order if f not in grains]
        return QueryObject(q.expressible, list(q.measures), dims, list(q.segments), filters, order, q.limit), notes

    def recount(self, q: QueryObject, question: str) -> tuple[QueryObject, list[str]]:
        """A lone count of one entity, in a question whose count cue names another ("quantos
        tickets …" filled as the count of services), counts the entity named right after the cue,
        when that entity's plain count resolves with the query's other fields.

        Why: a small model counts the entity whose values the question names (the services of a
        list) instead of the one it counts; the query then answers "how many services".
        """
        if len(q.measures) != 1 or (found := self._measure(q.measures[0])) is None or found[2].agg != "count":
            return q, []
        words = re.findall(r"\w+", fold(question))
        after = [w for cue in folded_cues().aggregations.get("count", []) for i in phrase_starts(words, cue)
                 for w in words[i + len(cue.split()):i + len(cue.split()) + 2]]
        counted = {e for e in self.spec.entities if any(_says([w], word) for w in after
                                                         for word in self._entity_words(e) if " " not in word)}
        if len(counted) != 1 or (target := counted.pop()) == found[0]:
            return q, []
        plain = [n for n, m in self.spec.entities[target].measures.items() if m.agg == "count" and not m.column]
        if len(plain) != 1:
            return q, []
        out = QueryObject(q.expressible, [f"{target}.{plain[0]}"], list(q.dimensions), list(q.segments),
                          list(q.filters), [(f"{target}.{plain[0]}" if f == q.measures[0] else f, d) for f, d in q.order],
                          q.limit)
        try:
            self.plan(out)
        except SemanticQueryError:
            return q, []
        return out, [f"{q.measures[0]} counts {target} (the question counts {target})"]

    def rebase_measures(self, q: QueryObject) -> tuple[QueryObject, list[str]]:
        """A measure over a column of one entity, in a query whose other fields name an entity its
        joins do not reach, moves to that entity's measure of the same aggregation whose column
        carries the first entity's name, and says so (for the trace).

        Why: "add up the budgets of the planned projects" fills the sum of the `budgets` entity
        (the word) with a filter on projects, which budgets cannot reach; the projects' own
        `budget_usd` column is the budget meant. Only one such measure moves it: two, or none, leave
        the query for the compiler to refuse.
        """
        bases = {m.split(".", 1)[0] for m in q.measures}
        if len(bases) != 1 or (base := next(iter(bases))) not in self.spec.entities:
            return q, []
        reach = self._reach(base)
        named = [n.split(".", 1)[0] for n in [*q.dimensions, *(f for f, _, _ in q.filters), *(f for f, _ in q.order),
                                             *q.segments] if n not in self.measure_names]
        foreign = {p for p in named if p in self.spec.entities and p != base and p not in reach}
        if len(foreign) != 1:
            return q, []
        target = next(iter(foreign))
        stem = fold(base).rstrip("s")
        renamed: dict[str, str] = {}
        for name in q.measures:
            measure = self.spec.entities[base].measures.get(name.split(".", 1)[1])
            if measure is None or measure.column is None:
                return q, []
            options = [f"{target}.{m}" for m, tm in self.spec.entities[target].measures.items()
                       if tm.agg == measure.agg and tm.column and stem in fold(tm.column).split("_")]
            if len(options) != 1:
                return q, []
            renamed[name] = options[0]
        out = QueryObject(q.expressible, [renamed[m] for m in q.measures], list(q.dimensions), list(q.segments),
                          list(q.filters), [(renamed.get(f, f), d) for f, d in q.order], q.limit)
        try:
            self.plan(out)
        except SemanticQueryError:
            return q, []
        return out, [f"{old} measured on {target} as {new} ({target} is not reachable from {base}; its column "
                     f"carries the word)" for old, new in renamed.items()]

    def _date_on_number(self, name: str, op: str, value: Any) -> bool:
        """Whether a filter puts a date or a dated period ("2026-05-15", "2026-05") on a column of
        numbers: the small model copies today's date into a filter the question never asked for
        ("the largest budget" filled as budget = today), and the query is then refused as a whole.
        """
        found = self._dimension(name)
        if found is None or self.kind(found[1], found[2]) not in ("integer", "number"):
            return False
        values = value if isinstance(value, list) else [value]
        return any(isinstance(v, str) and "-" in v.strip() and bool(_PERIOD.match(v.strip())) for v in values)

    def _dated(self, name: str) -> bool:
        found = self._dimension(name)
        return found is not None and self.kind(found[1], found[2]) in ("date", "timestamp")

    def _timed(self, name: str) -> bool:
        """A date column, or a text column that names periods (`Dimension.names_period`): either
        holds the periods a question names.
        """
        found = self._dimension(name)
        return found is not None and (self._dated(name) or found[3].names_period is not None)

    def _period_texts(self, entity: str) -> dict[str, str]:
        """The entity's text columns that name periods, with the grain each names."""
        ent = self.spec.entities.get(entity)
        return {d: dim.names_period for d, dim in ent.dimensions.items() if dim.names_period} if ent else {}

    @staticmethod
    def _period_text_filter(name: str, op: str, value: Any, grain: str) -> tuple[str, str, Any]:
        """A filter on a column that names periods of `grain`, over the stored labels: a period is
        the labels it overlaps ("= 2026" → in 2026-Q1…Q4), a bound is the label at its edge
        ("< 2026-Q3" stays, ">= 2026" → >= 2026-Q1). The labels sort as text in time order.
        """
        def labels(v: Any) -> list[str]:
            try:
                return period_labels(str(v), grain)[0]
            except SemanticQueryError as exc:
                raise SemanticQueryError(f"{name}: {exc}") from exc

        if op == "contains":  # "quarter contains '2026'": the periods within it; "contains 'Q3'" as said
            try:
                return name, "in", labels(value)
            except SemanticQueryError:
                return name, op, value
        if op in ("=", "in", "!=", "not_in"):
            found = list(dict.fromkeys(x for v in (value if isinstance(value, list) else [value]) for x in labels(v)))
            positive = op in ("=", "in")
            if len(found) == 1:
                return name, "=" if positive else "!=", found[0]
            return name, "in" if positive else "not_in", found
        if op == "between":
            if not isinstance(value, list) or len(value) != 2:
                raise SemanticQueryError(f"{name}: between takes two periods")
            return name, "between", [labels(value[0])[0], labels(value[1])[-1]]
        if op in ("<", ">="):
            return name, op, labels(value)[0]
        if op in (">", "<="):
            return name, op, labels(value)[-1]
        raise SemanticQueryError(f"{name}: operator {op} does not apply to periods")

    def _segment_filters(self, filters: list[tuple[str, str, Any]], segments: list[str]
                         ) -> tuple[list[tuple[str, str, Any]], list[str], list[str]]:
        """An `=` filter whose value is not one of its column's declared values but names a segment
        of the entity ("status = 'active'" where active tickets are a segment, "role = 'c-suite'"
        where executives are) becomes that segment.
        """
        out: list[tuple[str, str, Any]] = []
        notes: list[str] = []
        for name, op, value in filters:
            found = self._dimension(name)
            measured = self._measure(name) if found is None else None  # "count = 'c-suite'": a word, no number
            owner = (found[0], found[1]) if found is not None else \
                (name.split(".", 1)[0], measured[0]) if measured is not None else None
            key = fold(value) if isinstance(value, str) else None
            if owner is None or op != "=" or key is None or (found is not None and key in _declared_words(found[3])):
                out.append((name, op, value))
                continue
            prefix, entity = owner
            seg = next((sname for sname, sg in self.spec.entities[entity].segments.items()
                        if key in {fold(sname.replace("_", " ")), fold(sname), *map(fold, sg.synonyms)}), None)
            if seg is None or prefix != entity:
                out.append((name, op, value))
                continue
            segments = [*segments, f"{entity}.{seg}"] if f"{entity}.{seg}" not in segments else segments
            notes.append(f"filter {name} = {value!r} (names the segment {entity}.{seg})")
        return out, segments, notes

    def _said_segments(self, q: QueryObject, segments: list[str], filters: list[tuple[str, str, Any]], text: str
                       ) -> list[str]:
        """The segments of the query's base entity that the question names by a declared word and
        the model left out ("quantos chamados ativos por prioridade" filled without the active
        tickets counts them all). Not when a filter already sets a column of the segment (the model
        said it another way, or said otherwise), nor for one row the question names.
        """
        try:
            base = self.plan(q).base
        except SemanticQueryError:
            return []
        if base in self._named_rows(filters):
            return []
        filtered = self._filtered_columns(filters)
        out: list[str] = []
        for sname, seg in self.spec.entities[base].segments.items():
            if f"{base}.{sname}" in segments or any((base, c.field) in filtered for c in seg.where):
                continue
            if _names_segment(text, sname, seg):
                out.append(f"{base}.{sname}")
        return out

    def _excluded_segments(self, segments: list[str], tokens: list[str]
                           ) -> tuple[list[str], list[tuple[str, str, Any]]]:
        """(segments kept, filters) where a segment the question names right after an exclusion
        word ("below the C-suite", "fora da diretoria", "except managers": within two words) is
        the rows outside it: its one condition, inverted. A segment of several conditions stays.

        Why: the model files "Below the C-suite, who has the highest approval limit?" under the
        executives themselves, or as a role no row holds; the question asks for everyone else.
        """
        ends = [i + len(c.split()) for c in folded_cues().exclusions
                for i in phrase_starts(tokens, re.findall(r"\w+", c))] if segments else []
        if not ends:
            return segments, []
        kept: list[str] = []
        out: list[tuple[str, str, Any]] = []
        for name in segments:
            entity, _, sname = name.partition(".")
            seg = self.spec.entities[entity].segments.get(sname) if entity in self.spec.entities else None
            if seg is None or len(seg.where) != 1 or seg.where[0].op not in _INVERSE:
                kept.append(name)
                continue
            starts = [i for w in [sname.replace("_", " "), *seg.synonyms]
                      for i in phrase_starts(tokens, re.findall(r"\w+", fold(w)))]
            if not any(0 <= at - end <= 2 for at in starts for end in ends):
                kept.append(name)
                continue
            cond = seg.where[0]
            out.append((f"{entity}.{cond.field}", _INVERSE[cond.op], cond.value))
        return kept, out

    def _filtered_columns(self, filters: list[tuple[str, str, Any]]) -> set[tuple[str, str]]:
        """(entity, dimension) of each filter's column."""
        return {(found[1], found[2]) for f, _, _ in filters if (found := self._dimension(f)) is not None}

    def _said_values(self, q: QueryObject, segments: list[str], filters: list[tuple[str, str, Any]],
                     tokens: list[str], unspent: set[str]) -> list[tuple[str, str, Any]]:
        """The declared values of the base entity's columns that the question says and the model
        left out, as `=` filters ("Which 2 teams have the most open tickets?" filled with no status
        counts every ticket). The mirror of the span rule: a value said is a value asked for.
        `unspent`: the words of `tokens` that may say a value (`_unspent_words`).

        Only a column the query neither filters nor bounds by a segment, only one value said per
        column, only words with no other reading: not a date column's phrase ("abertos em 2026",
        `_unspent_words`), not a word of time ("new"), not a word for another value, column, join,
        segment or entity the base reaches ("aprovou" may be the approver's role; when the query
        goes through that role, the word says both: the approver also rejects). Not for one
        row the question names by its key or label ("foi o pedido BR-… negado?" asks about that
        row's value).
        """
        try:
            base = self.plan(QueryObject(q.expressible, list(q.measures), list(q.dimensions), segments, filters,
                                         [], None)).base
        except SemanticQueryError:
            return []
        names = {f"{base}.{m}" for m in (self.spec.entities[base].primary_key, self.label_of(base)) if m}
        if any(op == "=" and f in names for f, op, _ in filters):
            return []
        bounded = self._filtered_columns(filters)
        for g in segments:
            entity, _, sname = g.partition(".")
            seg = self.spec.entities[entity].segments.get(sname) if entity in self.spec.entities else None
            bounded |= {(entity, c.field) for c in seg.where} if seg is not None else set()
        text = " " + " ".join(t for t in tokens if t in unspent) + " "
        time = folded_cues().time
        out: list[tuple[str, str, Any]] = []
        # the base's roles the query goes through ("approver.full_name"): their words are read as
        # the role already, and a word that also names a value says both ("quem mais aprovou"
        # groups by the approver of the approved expenses: the approver also rejects)
        joins = self.spec.entities[base].joins
        used = {n.split(".", 1)[0] for n in [*q.dimensions, *(f for f, _, _ in filters)] if n.split(".", 1)[0] in joins}
        for dname, dim in self.spec.entities[base].dimensions.items():
            if not dim.values or (base, dname) in bounded:
                continue
            others = self._other_words(base, dname, frozenset(used))
            said = [stored for stored, syns in dim.values.items()
                    if any(_has(text, w) and fold(w) not in time and fold(w) not in others for w in [stored, *syns])]
            if len(said) == 1:
                out.append((f"{base}.{dname}", "=", said[0]))
        return out

    def _other_words(self, base: str, dname: str, used: frozenset[str] = frozenset()) -> frozenset[str]:
        """The folded words of everything the base reaches other than column `dname`'s values: the
        entities, their columns, values, joins, segments and measures (a value said by one of these
        has two readings); not the words of the base's joins in `used` (the query reads them so).
        """
        out: set[str] = set()
        for entity in self._reach(base):
            ent = self.spec.entities[entity]
            out |= {fold(w) for w in [entity, *ent.synonyms]}
            for name, d in ent.dimensions.items():
                out |= {fold(w) for w in d.synonyms}
                if (entity, name) != (base, dname):
                    out |= _declared_words(d)
            roles = [j.synonyms for n, j in ent.joins.items() if entity != base or n not in used]
            for words in (*roles, *(g.synonyms for g in ent.segments.values()),
                          *(m.synonyms for m in ent.measures.values())):
                out |= {fold(w) for w in words}
        return frozenset(out)

    def _named_rows(self, filters: list[tuple[str, str, Any]]) -> set[str]:
        """The entities one of whose rows an `=` filter names by a name or an id (a free-text
        column); a period or a category (a column with declared values) names no row.
        """
        out: set[str] = set()
        for f, op, _ in filters:
            found = self._dimension(f)
            if op == "=" and found is not None and self.kind(found[1], found[2]) == "string" and not found[3].values:
                # a join's key ("tickets.requester_id = 'Ana'") names a row of the entity it points at
                pointed = self._joins_on(found[1], found[2])
                out.add(pointed[0][1].entity if pointed else found[1])
        return out

    def _segment_values(self, text: str) -> set[str]:
        """The values of the segments the question names ("chamados ativos" says open and in progress)."""
        out: set[str] = set()
        for ent in self.spec.entities.values():
            for sname, seg in ent.segments.items():
                if _names_segment(text, sname, seg):
                    for cond in seg.where:
                        values = cond.value if isinstance(cond.value, list) else [cond.value]
                        out |= {fold(str(v)) for v in values}
        return out

    @staticmethod
    def _said(dim: Dimension, value: str, words: set[str], heard: set[str]) -> bool:
        key = fold(value)
        if key in heard:
            return True
        forms = [key]
        for stored, syns in dim.values.items():
            if key in {fold(stored), *map(fold, syns)}:
                forms += [fold(stored), *map(fold, syns)]

        def word_said(w: str) -> bool:
            if w in words or any(x in words for x in (w + "s", w + "es", w[:-1])):
                return True
            return len(w) >= 5 and bool(difflib.get_close_matches(w, words, n=1, cutoff=0.85))

        return any(all(word_said(w) for w in re.findall(r"[^\W_]+", form)) for form in forms if form)

    def _column_word(self, name: str, op: str, value: Any) -> bool:
        """Whether an `=` filter's value is only a word for its own column ("cada escritório" filled
        as office_city = 'escritório') or for another column of its entity, and not one of the
        column's declared values.
        """
        found = self._dimension(name)
        if op != "=" or not isinstance(value, str) or found is None:
            return False
        _, entity, member, dim = found
        key = fold(value).strip()
        # a key column is also named by the join that follows it ("quem lidera" for lead_id), and by
        # the key columns (and joins) that point at it ("serviço principal" for services.service_id)
        joined = [w for role, j in self._joins_on(entity, member) for w in [role, *j.synonyms]]
        column = dim.column or member
        pointing = [w for other in self.spec.entities.values() for role, j in other.joins.items()
                    if j.entity == entity and (j.target_column or self.spec.entities[entity].primary_key) == column
                    for d_name, d in other.dimensions.items() if (d.column or d_name) == j.column
                    for w in [role, *j.synonyms, *d.synonyms]]
        # a word for another column of the entity is no value of this one either ("approver_id =
        # 'decisão'", the decision date's word, filled by the 1.5B model)
        others = [w for d_name, d in self.spec.entities[entity].dimensions.items() if d_name != member
                  for w in [d_name.replace("_", " "), *d.synonyms]]
        words = {fold(w) for w in [member.replace("_", " "), *dim.synonyms, *joined, *pointing, *others]}
        return key not in _declared_words(dim) and any(key in (w, w + "s", w + "es") for w in words)

    def _measure(self, name: str) -> tuple[str, Entity, Measure] | None:
        """(entity, its spec, measure) of a measure name; None for anything else."""
        entity, _, member = name.partition(".")
        ent = self.spec.entities.get(entity)
        m = ent.measures.get(member) if ent is not None else None
        return None if ent is None or m is None else (entity, ent, m)

    def _dimension(self, name: str) -> tuple[str, str, str, Dimension] | None:
        """(prefix, entity, member, dimension) of a dimension name, the prefix an entity or a join
        role; None for a measure, a grain or an unknown name.
        """
        prefix, _, member = name.partition(".")
        entity = self._entity_of(prefix)
        dim = self.spec.entities[entity].dimensions.get(member) if entity is not None else None
        return None if entity is None or dim is None else (prefix, entity, member, dim)

    def _joins_on(self, entity: str, member: str) -> list[tuple[str, Join]]:
        """The joins of `entity` that follow the column of its dimension `member` (lead_id → lead)."""
        ent = self.spec.entities[entity]
        column = ent.dimensions[member].column or member
        return [(role, j) for role, j in ent.joins.items() if j.column == column]

    def _shown_for(self, name: str) -> str:
        """The dimension that shows a column: for a key column, the label of the row its join points
        at (the first drill member of the target's count: lead_id → lead.full_name), else itself.
        """
        entity, _, member = name.partition(".")
        ent = self.spec.entities.get(entity)
        if ent is None or member not in ent.dimensions:
            return name
        for role, join in self._joins_on(entity, member):
            label = self.label_of(join.entity)
            if label is not None:
                return f"{role}.{label}"
        return name

    def _records_asked(self, q: QueryObject, measures: list[str], kept: list[str], limit: int | None,
                       tokens: list[str], text: str) -> list[str] | None:
        """The columns that list the records a question asks for by their entity's word right after
        a question word ("quais despesas acima de 1000 estão pendentes?"), when the model filled
        sums or averages of that entity's columns instead: each record's label, the
        dimensions the model chose, and the measured columns as each row's own values. The word must
        be a plural ("qual é o orçamento do time?" asks for a value). None when a measure is a count
        (`_rows_behind` lists those) or an extreme (a ranking), the measures are of several entities,
        or the question asks for a number, a ranking or the aggregate itself.

        Why: the 1.5B model answered that question with a sum per category and date; the user
        asked which expenses.
        """
        if not measures or limit is not None:
            return None
        found = [self._measure(m) for m in measures]
        measured = [f for f in found if f is not None]
        entities = {f[0] for f in measured}
        # extremes are rankings ("which incidents took longest"), which `_extreme_record` reads
        if len(measured) < len(found) or any(f[2].agg not in ("sum", "avg") or not f[2].column for f in measured) \
                or len(entities) != 1:
            return None
        entity = next(iter(entities))
        synonyms = [w for f in measured for w in f[2].synonyms]
        # a plural word for the records ("quais despesas"): "qual é o orçamento do time?" asks for a value
        asked = [w for w in asked_after_opener(text, self._entity_words(entity)) if fold(w).endswith("s")]
        if not asked or ranking_words(tokens) or _asks_number(tokens, text, synonyms) \
                or any(self._aggregation_said(m, tokens) for m in measures):
            return None
        label = self.label_of(entity)
        columns = [f"{entity}.{f[2].column}" for f in measured]
        rows = [d for d in dict.fromkeys([*([f"{entity}.{label}"] if label else []), *kept, *columns])
                if d in self.dimension_names]
        return rows if rows and self._lists(q, rows) else None

    def label_of(self, entity: str) -> str | None:
        """The column that names a row of `entity`: the first drill member of its count."""
        count = next((m for m in self.spec.entities[entity].measures.values() if m.agg == "count" and m.drill_members),
                     None)
        return count.drill_members[0] if count is not None else None

    def _named_by(self, kept: list[str]) -> set[str]:
        """The entities whose rows the dimensions name: a label or a primary key, or a key column
        that holds the key or label of the entity its join reaches (incidents.service_id names
        services).
        """
        shown: set[str] = set()
        for name in kept:
            found = self._dimension(name)
            if found is None:
                continue
            joins = self._joins_on(found[1], found[2])
            for entity, column in ([(j.entity, j.target_column or self.spec.entities[j.entity].primary_key)
                                    for _, j in joins] if joins else [(found[1], found[2])]):
                if column in (self.label_of(entity), self.spec.entities[entity].primary_key):
                    shown.add(entity)
        return shown

    def _row_labels(self, kept: list[str]) -> list[str]:
        """The labels of the entities of `kept` whose rows no dimension names: "o status de cada um"
        over a set of services is a status per service, and statuses alone name none.
        """
        shown = self._named_by(kept)
        out: list[str] = []
        for name in kept:
            found = self._dimension(name)
            label = None if found is None else self.label_of(found[1])
            if found is not None and label is not None and found[1] not in shown:
                out.append(f"{found[0]}.{label}")
                shown.add(found[1])
        return out

    def _asked_labels(self, kept: list[str], tokens: list[str], filters: list[tuple[str, str, Any]]) -> list[str]:
        """The labels of the entities a list question asks for by a question word ("que projeto …",
        "which service …") when no column that names their rows is shown (the label or the primary
        key; a join key names another entity's rows): "which project ends in June, and who leads
        it?" filled with the lead's name alone answers only half, and "which services are tier 1,
        and the status of each?" with the status alone names no service. An entity whose name or
        id an `=` filter gives is one row the question already names.
        """
        shown = self._named_by(kept)
        fixed = self._named_rows(filters)
        cues = folded_cues()
        asking = cues.grouping - cues.breakdown  # qual, quais, que, which, what: not "por", "each"
        out: list[str] = []
        for entity in self.spec.entities:
            label = self.label_of(entity)
            if entity in shown | fixed or label is None or f"{entity}.{label}" in kept:
                continue
            between = self._value_words(entity)  # once per entity, not once per entity word
            if any(_after_cue(tokens, w, asking, between=between) for w in self._entity_words(entity)):
                out.append(f"{entity}.{label}")
        return out

    def _value_words(self, entity: str) -> frozenset[str]:
        """The one-word values and segment names of `entity` ("open", "abertos", "ativos"): a word
        that may stand between a question word and the entity's word ("which open tickets").
        """
        ent = self.spec.entities[entity]
        words = [*(w for d in ent.dimensions.values() for v, syn in d.values.items() for w in (v, *syn)),
                 *(w for name, seg in ent.segments.items() for w in (name, *seg.synonyms))]
        return frozenset(f for f in (fold(w) for w in words) if f and " " not in f)

    def _asked_measures(self, measures: list[str], text: str) -> tuple[list[str], list[str]]:
        """The measures with the column (`_named_columns`) and the aggregation the question names
        swapped in: "avg amount" filled as the sum of the amount becomes the average of the same
        column, when the entity declares it.
        Only when the question names exactly one aggregation (`aggregation_cues`) and the chosen
        measure's own is not named; a count, or a measure with no sibling, is left as it is.
        """
        measures, notes = self._named_columns(measures, text)
        cues = folded_cues().aggregations
        named = {agg for agg, words in cues.items() if agg != "count" and any(f" {w} " in text for w in words)}
        if len(named) != 1:
            return list(measures), notes
        (want,) = named
        out: list[str] = []
        for name in measures:
            found = self._measure(name)
            sibling = None
            if found is not None and found[2].column and found[2].agg not in (want, "count"):
                _, ent, m = found
                sibling = next((n for n, o in ent.measures.items() if o.agg == want and o.column == m.column), None)
            out.append(f"{found[0]}.{sibling}" if found is not None and sibling else name)
            if sibling:
                notes.append(f"{name} (the question asks for {want}: {out[-1]})")
        return out, notes

    def _most_records(self, measures: list[str], tokens: list[str], text: str) -> tuple[list[str], list[str]]:
        """The measures with the entity's count swapped in for a sum, average or extreme of its
        column when the question ranks by how many of its records ("who approved the most
        expenses", "quem mais aprovou despesas"): a count superlative (`count_superlatives`) right
        before the entity's plural word, one word between at most and none of
        `measure_prepositions` ("gastou mais em despesas" is an amount). Left as it is when the
        question names the measure, its column or its aggregation.

        Why: the 1.5B model filled "who approved the most expenses" with the largest amount.
        """
        cues = folded_cues()
        out: list[str] = []
        notes: list[str] = []
        for name in measures:
            found = self._measure(name)
            count = None
            if found is not None and found[2].column and found[2].agg in ("sum", "avg", "min", "max") \
                    and not self._column_said(found[0], name.partition(".")[2], text) \
                    and not any(phrase_starts(tokens, w) for w in cues.aggregations.get(found[2].agg, ())):
                plural = {fold(w) for w in self._entity_words(found[0]) if fold(w).endswith("s") and " " not in w}
                ranked = any(tok in cues.count_superlatives and any(
                    after in plural and not set(tokens[i + 1:j]) & cues.measure_prepositions
                    for j, after in enumerate(tokens[i + 1:i + 3], start=i + 1)) for i, tok in enumerate(tokens))
                count = next((n for n, m in found[1].measures.items() if m.agg == "count" and not m.column), None) \
                    if ranked else None
            out.append(f"{found[0]}.{count}" if found is not None and count else name)
            if count:
                notes.append(f"{name} (the question ranks by how many {name.partition('.')[0]}: {out[-1]})")
        return out, notes

    def _named_columns(self, measures: list[str], text: str) -> tuple[list[str], list[str]]:
        """The measures with the column the question names swapped in: "average time to acknowledge"
        filled as the average time to resolve becomes the average of the column whose declared
        words the question says. Only when the chosen column's words are not said and exactly one
        other column of the entity with a measure of the same aggregation is.
        """
        out: list[str] = []
        notes: list[str] = []
        for name in measures:
            found = self._measure(name)
            if found is None or not found[2].column or self._column_said(found[0], name.partition(".")[2], text):
                out.append(name)
                continue
            entity, ent, m = found
            said = [n for n, o in ent.measures.items()
                    if o.agg == m.agg and o.column and o.column != m.column and self._column_said(entity, n, text)]
            if len(said) == 1:
                out.append(f"{entity}.{said[0]}")
                notes.append(f"{name} (the question names {ent.measures[said[0]].column}: {out[-1]})")
            else:
                out.append(name)
        return out, notes

    def _column_said(self, entity: str, measure: str, text: str) -> bool:
        """Whether `text` says one of the phrases declared for the measure or its column, whole or
        as all of its content words (other words may come between).
        """
        m = self.spec.entities[entity].measures[measure]
        dim = self.spec.entities[entity].dimensions.get(m.column or "")
        for phrase in [*m.synonyms, *(dim.synonyms if dim is not None else [])]:
            content = [w for w in fold(phrase).split() if len(w) > 3]  # "tempo (médio) de reconhecimento"
            if _has(text, phrase) or (content and all(_has(text, w) for w in content)):
                return True
        return False

    def _over_shown(self, measure: str, kept: list[str]) -> str | None:
        """The dimension of `kept` that `measure` sums, averages or takes the extreme of
        (`sum(change)` grouped by `change`: one value per group, the column's own), or None.
        """
        found = self._measure(measure)
        if found is None:
            return None
        prefix, _, m = found
        column = f"{prefix}.{m.column}"
        return column if m.agg in ("sum", "avg", "min", "max") and m.column is not None and column in kept else None

    def _aggregation_said(self, measure: str, tokens: list[str]) -> bool:
        """Whether the question says the measure's aggregation ("total", "média"; a superlative for
        a minimum or a maximum).
        """
        found = self._measure(measure)
        if found is None:
            return False
        agg, cues = found[2].agg, folded_cues()
        return any(phrase_starts(tokens, w) for w in cues.aggregations.get(agg, ())) or (
            agg in ("min", "max") and bool(cues.superlatives & set(tokens)))

    def _named_roles(self, kept: list[str], text: str, filters: list[tuple[str, str, Any]], segments: list[str]
                     ) -> list[str]:
        """The label of each role (join) of a listed entity that the question names by its name or
        synonyms and that no field reads yet: "the oldest open ticket, and who asked for it?" filled
        with the ticket's own columns shows the requester's name. A role a filter or segment is on
        ("with no assignee"), or whose entity a filter reads ("the people of team X"), is a condition, not a
        column to show.
        """
        fields = [*kept, *(f for f, _, _ in filters)]
        for name in segments:  # a segment's conditions read columns too ("unassigned": the assignee)
            prefix, _, seg = name.partition(".")
            entity = self._entity_of(prefix)
            segment = self.spec.entities[entity].segments.get(seg) if entity is not None else None
            fields += [f"{entity}.{c.field}" for c in segment.where] if segment is not None else []
        out: list[str] = []
        for prefix in dict.fromkeys(name.split(".", 1)[0] for name in kept):
            entity = self._entity_of(prefix)
            if entity is None:
                continue
            for jname, join in self.spec.entities[entity].joins.items():
                label = self.label_of(join.entity)
                if label is None or not _role_said(text, jname, join):
                    continue
                # a filter through another of the entity's roles ("the expenses of X": the spender) is
                # no condition on this one ("who approved them")
                others = set(self.spec.entities[entity].joins) - {jname}
                if any(f.startswith(f"{jname}.") or f in (f"{prefix}.{join.column}", f"{entity}.{join.column}")
                       for f in fields) or any(self._entity_of(f.split(".", 1)[0]) == join.entity
                                               and f.split(".", 1)[0] not in others for f, _, _ in filters):
                    continue
                out.append(f"{jname}.{label}")
        return list(dict.fromkeys(out))

    def _key_labels(self, kept: list[str]) -> list[str]:
        """The label of the one role a shown key column follows, when that label is not the key
        itself and no field of the role is shown: "quem comandou o INC-…" filled with the incident's
        `commander_id` shows the commander's name beside it.

        Why: an id alone ("E047") answers no one; the 1.5B model then repeats the id as the answer.
        """
        out: list[str] = []
        for name in kept:
            found = self._dimension(name)
            if found is None or GRAIN_SEP in name:
                continue
            joins = self._joins_on(found[1], found[2])
            if len(joins) != 1:
                continue
            role, join = joins[0]
            label = self.label_of(join.entity)
            target_key = self.spec.entities[join.entity].primary_key
            if label is None or label == target_key or any(k.split(".", 1)[0] == role for k in kept):
                continue
            out.append(f"{role}.{label}")
        return list(dict.fromkeys(out))

    def referents(self, text: str, hits: Iterable[tuple[str, str, str]], *, labels: bool = True) -> list[str]:
        """The stored labels among `hits` (table, column, value: what the value index found in an
        earlier source's passages) of the entities `text` names by their words or by a role's
        words (a join's synonyms name its target): "quantas pessoas reportam a ela" after a
        passage naming one person and two teams is about that person. `labels=False`: the values
        of their other text columns instead (a person named by a job title, "signed by the CFO").
        """
        folded = _spaced(text)
        kinds = self._pointed_kinds(folded)
        if not kinds:
            kinds = {e for e in self.spec.entities if any(_has(folded, w) for w in self._entity_words(e))}
            kinds |= {j.entity for ent in self.spec.entities.values() for name, j in ent.joins.items()
                      if _role_said(folded, name, j)}
        hits = list(hits)
        columns, keys = set(), set()
        for entity in kinds:
            label, ent = self.label_of(entity), self.spec.entities[entity]
            for member, dim in ent.dimensions.items():
                if not dim.expr and (member == label) is labels and self.kind(entity, member) == "string":
                    columns.add((ent.table_name(entity), dim.column or member))
            if entity in self.key_columns:
                keys.add(self.key_columns[entity])
        found = list(dict.fromkeys(v for t, c, v in hits if (t, c) in columns))
        # a record the passages name by its id alone ("o projeto PRJ-110") is named by its key
        return found if found or not labels else list(dict.fromkeys(v for t, c, v in hits if (t, c) in keys))

    def _pointed_kinds(self, folded: str) -> set[str]:
        """The entities named by the one or two words right after a word that points back ("esse
        projeto", "that person's"): what the pointing word means, whatever else the text names
        ("quem lidera esse projeto" is about the project, not its lead). Empty when none is.
        """
        return {e for after in pointed_phrases(folded) for e in self.spec.entities
                if any(_has(after, w) for w in self._entity_words(e))}

    def columns_named(self, text: str, columns: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """The (table, column) pairs of `columns` whose dimension `text` names by its words ("the
        offices" for the office city), in the model's order; only those of the entities `text` names
        by their words, when it names any ("people … in the offices": the people's office, not a
        team's).
        """
        folded, wanted = _spaced(text), set(columns)
        out: list[tuple[str, tuple[str, str]]] = []
        for entity, ent in self.spec.entities.items():
            for member, dim in ent.dimensions.items():
                key = (ent.table_name(entity), dim.column or member)
                if key in wanted and key not in [k for _, k in out] and not dim.expr \
                        and self._said_column(entity, member, folded):
                    out.append((entity, key))
        named = [k for e, k in out if any(_has(folded, w) for w in self._entity_words(e))]
        return named or [k for _, k in out]

    def _entity_of(self, prefix: str) -> str | None:
        """The entity a name's prefix stands for: itself, or the target of a join role."""
        return prefix if prefix in self.spec.entities else next(iter(self._roles.get(prefix, ())), None)

    def _entity_words(self, prefix: str) -> list[str]:
        """The prefix, its entity and the entity's synonyms: the words that name it in a question."""
        entity = self._entity_of(prefix)
        return [] if entity is None else [prefix, entity, *self.spec.entities[entity].synonyms]

    def _why_drop(self, name: str, q: QueryObject, text: str, tokens: list[str], fixed: set[str],
                  filtered: set[str], rows_named: set[str]) -> str:
        prefix, _, member = name.partition(".")
        if GRAIN_SEP in member:  # a grain is a breakdown, unless the filter leaves one bucket of it
            column, _, grain = member.partition(GRAIN_SEP)
            periods = [v for f, op, v in q.filters if f == f"{prefix}.{column}" and op == "=" and not isinstance(v, list)]
            if any(_one_bucket(str(v), grain) for v in periods):
                return "one period of its grain"
            if q.measures and not any(_has(text, w) for w in grain_words().get(grain, [])):
                return "a grain the question does not name"  # "how many … in 2025" is one total
            return ""
        entity = self._entity_of(prefix)
        if entity is None or member not in self.spec.entities[entity].dimensions:
            return ""  # an unknown name: `parse`/`plan` refuse it with their own message
        dated = self.kind(entity, member) in ("date", "timestamp")
        if name in fixed and not dated:  # a date "= 2026-03" is a period: its rows differ
            return "fixed by a filter"
        if not dated and any(j.entity in rows_named for _, j in self._joins_on(entity, member)):
            return "its entity's row is fixed by a filter"  # projects.owner_team_id under teams.name = X
        if not q.measures:
            return ""
        if name in filtered and dated:
            return "the filtered period"
        role_words = [w for e in self.spec.entities.values() for jn, j in e.joins.items() if jn == prefix
                      for w in j.synonyms]
        if any(_after_cue(tokens, w) for w in [*self._entity_words(prefix), *role_words]):
            return ""
        if q.limit is not None and q.limit > 1 and any(
                _counted(tokens, w, q.limit) for w in [*self._entity_words(prefix), *role_words]):
            return ""  # "os 3 serviços com mais incidentes": that many of the entity's groups, ranked
        if self._said_column(entity, member, _unreferenced(text), own_word=not dated):
            # "how many open tickets in total for the services a, b, c" names the column, and asks one figure
            return "one figure over them all" if any(phrase_starts(tokens, w) for w in folded_cues().whole) else ""
        return "not asked for"

    def _said_column(self, entity: str, member: str, text: str, own_word: bool = True) -> bool:
        """Whether the folded, space-padded `text` names the dimension: its name, a synonym, or a
        cognate of its name ("severidade" ~ severity). `own_word` False: not by a cognate of the
        part of its name that is its entity's own word ("expenses" is no "expense_date").
        """
        dim = self.spec.entities[entity].dimensions[member]
        if any(_has(text, w) for w in _column_words(member, dim)):
            return True
        own = frozenset(fold(w)[:STEM] for w in self._entity_words(entity)) if not own_word else frozenset()
        return _cognate(text.split(), member, skip=own)

    def _named_dimensions(self, kept: list[str], text: str) -> tuple[list[str], list[str]]:
        """A list's dimensions with the column the question names swapped in: "the latest incident
        and its severity" filled with the time to resolve shows the severity. Only for a column of
        the model's that the question does not name and that does not name rows itself (a label, a
        key, a join key, the period date), when exactly one other column of its entity is named
        and not shown; with nothing to swap, that one column is added ("the latest incident of X,
        and its severity" filled with the id and the date).
        """
        out, notes = list(kept), []
        for i, name in enumerate(kept):
            found = self._dimension(name)
            if found is None or GRAIN_SEP in name:
                continue
            prefix, entity, member, _ = found
            if member in self._plain(entity) or self._joins_on(entity, member) \
                    or self._said_column(entity, member, text):
                continue
            said = self._columns_said(prefix, entity, out, [text])
            if len(said) == 1:
                out[i] = f"{prefix}.{said[0]}"
                notes.append(f"{name} (the question names {said[0]}: {out[i]})")
        first = self._dimension(kept[0]) if kept and not notes else None
        if first is None:
            return out, notes
        from tools.backends.base import question_parts

        later = [f" {fold(part)} " for part in question_parts(text)[1:]]
        # nothing to swap (the model showed only the key and the date), and a later part of the
        # question asks for one column by its word ("…, e qual a severidade?"): it is added
        said = self._columns_said(first[0], first[1], out, later) if later else []
        if len(said) == 1:
            out.append(f"{first[0]}.{said[0]}")
            notes.append(f"{out[-1]} added (a part of the question asks for {said[0]})")
        return out, notes

    def _plain(self, entity: str) -> set[str | None]:
        """The columns that name the rows themselves: the label, the key, the period date."""
        ent = self.spec.entities[entity]
        return {self.label_of(entity), ent.primary_key, ent.period_dimension()}

    def _columns_said(self, prefix: str, entity: str, shown: list[str], texts: list[str]) -> list[str]:
        """The entity's columns that one of `texts` names by its word and `shown` lacks, leaving out
        those that name the rows (`_plain`) and join keys.
        """
        plain = self._plain(entity)
        return [m for m in self.spec.entities[entity].dimensions if m not in plain and f"{prefix}.{m}" not in shown
                and not self._joins_on(entity, m) and any(self._said_column(entity, m, t) for t in texts)]

    def _rows_behind(self, measures: list[str], kept: list[str], order: list[tuple[str, str]], tokens: list[str],
                     text: str, filters: list[tuple[str, str, Any]]) -> list[str]:
        """The dimensions that list the rows behind a lone count the question does not ask for
        ("Which open tickets …?", "Quais serviços são tier 2?" filled as a count): the dimensions
        the model chose to show, else the count's `drill_members` (less those an `=` filter fixes)
        and the columns the question bounds by a range or a period ("not touched since March",
        "joined in 2025"). [] when the question asks for a number or a ranking: an aggregation or
        count word, the count's own words ("headcount"), a superlative, a breakdown word ("per",
        "cada"), or an order on the count.
        """
        if len(measures) != 1 or any(f in self.measure_names for f, _ in order):
            return []
        found = self._measure(measures[0])
        # a count of distinct values lists those values ("quem lidera o projeto X?" filled as the
        # number of distinct members who lead it)
        distinct = [found[2].column] if found is not None and found[2].agg == "count_distinct" and found[2].column \
            else []
        # an amount in a question that lists ("Which budget requests are for Q3?" filled as the sum
        # of their change): the rows its entity's count would list
        amount = found is not None and found[2].agg in ("sum", "avg") and \
            bool(folded_cues().lists & set(tokens)) and found[1].measures.get("count") is not None
        if found is None or not ((found[2].agg == "count" and found[2].drill_members) or distinct or amount):
            return []
        entity, _, m = found
        column = found[1].dimensions.get(m.column or "") if amount else None
        if _asks_number(tokens, text, [*m.synonyms, *(column.synonyms if column is not None else [])]):
            return []
        if amount:
            m = found[1].measures["count"]
        shown = [d for d in kept if GRAIN_SEP not in d]
        if shown:  # the model chose what to show; a count per row of it is 1
            return shown
        if distinct:
            return [f"{entity}.{distinct[0]}"]
        ranged = [f for f, op, _ in filters if f.startswith(f"{entity}.") and f not in self.measure_names and (
            op in ("<", "<=", ">", ">=", "between") or self._dated(f))]
        # a member an `=` filter fixes is the same in every row: it repeats the question ("which
        # services are degraded?" needs no status column), as for the model's own dimensions
        fixed = {f for f, op, v in filters if op == "=" and not isinstance(v, list)}
        drill = [f"{entity}.{d}" for d in m.drill_members]
        return list(dict.fromkeys([*([d for d in drill if d not in fixed] or drill), *ranged]))

    def _one_count(self, measures: list[str], order: list[tuple[str, str]], tokens: list[str], text: str
                   ) -> tuple[list[str], str]:
        """Several counts the question does not ask for ("quais serviços são tier 3, e de que time
        é cada um?" filled as the count of services and of teams) become the count of the entity it
        names first, and a note; that lone count then lists its rows (`_rows_behind`). ([], "")
        when the measures are not all plain counts, or the question asks for a number or a ranking.

        Why: counts of two entities are no query the model can compile, and the question lists.
        """
        found = [self._measure(m) for m in measures]
        counts = [f for f in found if f is not None and f[2].agg == "count" and not f[2].column]
        if len(measures) < 2 or len(counts) != len(measures) or any(f in self.measure_names for f, _ in order) \
                or _asks_number(tokens, text, [w for f in counts for w in f[2].synonyms]):
            return [], ""

        def named_at(measure: str) -> int:
            at = [i for w in self._entity_words(measure.split(".", 1)[0]) for i in phrase_starts(tokens, w)]
            return min(at, default=len(tokens))

        first = min(measures, key=named_at)
        return [first], f"{', '.join(m for m in measures if m != first)} (counts the question does not ask for)"

    def _counted_values(self, filters: list[tuple[str, str, Any]], limit: int | None, tokens: list[str]
                        ) -> list[tuple[str, str, Any]]:
        """The `=` filters on a number that the question says only as how many rows it wants
        ("which three services …" filled with tier = 3 as well as limit 3): the number stands once,
        right before an entity's word, and the query's limit holds it.
        """
        if limit is None or limit < 2:
            return []
        numbers = folded_cues().numbers
        if sum(1 for t in tokens if t == str(limit) or numbers.get(t) == limit) != 1 or not any(
                _counted(tokens, w, limit) for e in self.spec.entities for w in self._entity_words(e)):
            return []
        return [(f, o, v) for f, o, v in filters if o == "=" and _as_number(v) == limit and self._dimension(f)]

    def _ranked_groups(self, q: QueryObject, measures: list[str], kept: list[str], limit: int | None,
                       tokens: list[str]) -> tuple[list[str], list[str], list[tuple[str, str]], list[str]] | None:
        """(measures, dimensions, order, notes) of a "top N" question ("os 3 serviços com mais
        incidentes", "which five teams have the most open tickets"): the entity named right after
        the number the query's limit holds is shown by its label (an undated breakdown: a date
        column would split each group into its rows), and a count of that entity itself, one per
        group, becomes the count of the entity the question ranks by (named after a superlative),
        ordered by it, or, with no such entity, goes: the question lists that many rows ("the 5 most
        recent incidents"). None when the question is no such ranking or nothing changes.
        """
        if limit is None or limit < 2 or len(measures) != 1:
            return None
        grouped = next((e for e in self.spec.entities
                        if any(_counted(tokens, w, limit) for w in self._entity_words(e))), None)
        label = None if grouped is None else self.label_of(grouped)
        if grouped is None or label is None:
            return None
        notes: list[str] = []
        measure = measures[0]
        found = self._measure(measure)
        if found is not None and found[0] == grouped and found[2].agg == "count" and not found[2].column:
            ranks = folded_cues().superlatives
            by = next((f"{e}.{name}" for e, ent in self.spec.entities.items() if e != grouped
                       for name, m in ent.measures.items() if m.agg == "count" and not m.column
                       if any(_after_cue(tokens, w, ranks, between=self._value_words(e)) for w in self._entity_words(e))),
                      None)
            if by is not None:
                notes.append(f"{measure} (one per {grouped}: the question ranks them by {by})")
                measure = by
            else:  # "the 5 most recent incidents": that many rows, in the model's order
                notes.append(f"{measure} (one per {grouped}: the question lists {limit} of them)")
                measure = ""
        shown = [d for d in kept if GRAIN_SEP in d or not self._dated(d)]
        notes += [f"{d} (a date splits each ranked group into its rows)" for d in kept if d not in shown]
        if grouped not in self._named_by(shown):
            shown = [f"{grouped}.{label}", *shown]
            notes.append(f"{grouped}.{label} (the question asks for {limit} {grouped}, ranked)")
        if not notes:
            return None
        least = bool(folded_cues().least & set(ranking_words(tokens)))
        order = [(measure, "asc" if least else "desc")] if measure else [
            (f, d) for f, d in q.order if f != measures[0] and f not in self.measure_names]
        out = ([measure] if measure else [], shown, order, notes)
        try:
            self.plan(QueryObject(q.expressible, out[0], out[1], list(q.segments), list(q.filters), out[2], limit))
        except SemanticQueryError:
            return None
        return out

    def _extreme_record(self, measures: list[str], kept: list[str], tokens: list[str]
                        ) -> tuple[list[str], list[tuple[str, str]]] | None:
        """(dimensions, order) of the one row a largest/smallest value belongs to, when the question
        asks for that row: a lone max or min measure of an entity that a singular question word
        names, with at most three words between ("which incident waited the longest", "qual foi a
        maior despesa"), or a person cue that is a word of the entity's label ("who has the highest
        approval limit"). The row shows the entity's label, the dimensions the model chose ("de
        quem era") and the measured column, ordered by it, one row. "What is the longest time to
        resolve" names no row after its question word: it stays the value.
        """
        if len(measures) != 1 or any(GRAIN_SEP in d for d in kept):
            return None
        found = self._measure(measures[0])
        if found is None or found[2].agg not in ("max", "min") or not found[2].column:
            return None
        entity, ent, measure = found
        column = next((m for m, d in ent.dimensions.items() if (d.column or m) == measure.column), None)
        label = self.label_of(entity)
        if column is None or label is None:
            return None
        words = [" ".join(fold(w).split()) for w in self._entity_words(entity)]
        singular = folded_cues().singular
        # "who has the highest …" names a row of the entity whose label is the word for a person
        named = bool(folded_cues().person & set(tokens) & {fold(w) for w in ent.dimensions[label].synonyms})
        for i, tok in enumerate(tokens):
            if tok not in singular:
                continue
            for j in range(i + 1, min(len(tokens), i + 5)):
                # one row: the entity's word in the singular ("which incidents …" asks for several)
                named = named or any(w and not w.endswith("s") and " ".join(tokens[j:j + len(w.split())]) == w
                                     for w in words)
        if not named:
            return None
        dims = list(dict.fromkeys([f"{entity}.{label}", *kept, f"{entity}.{column}"]))
        return dims, [(f"{entity}.{column}", "desc" if measure.agg == "max" else "asc")]

    def _latest_record(self, measures: list[str], kept: list[str], order: list[tuple[str, str]], tokens: list[str]
                       ) -> tuple[list[str], list[tuple[str, str]]] | None:
        """(dimensions, order) of the newest or the oldest row of an entity, when a recency cue
        (`policies/query_cues.yaml`) stands right before or after the entity's word in the singular
        ("o incidente mais recente", "the latest expense"): the entity's label, the dimensions the
        model chose and its period dimension, ordered by that date. Only when the model filled no
        measure or only a largest/smallest of that entity ("most recent" read as the longest time);
        a count, a sum or a plural ("the last incidents") keeps the model's query.
        """
        cues = folded_cues().recency
        for entity, ent in self.spec.entities.items():
            when, label = ent.period_dimension(), self.label_of(entity)
            if when is None or label is None:
                continue
            own = [self._measure(m) for m in measures]
            if any(f is None or f[0] != entity or f[2].agg not in ("max", "min") for f in own):
                continue
            words = [w for w in (" ".join(fold(x).split()) for x in self._entity_words(entity))
                     if w and not w.endswith("s")]
            direction = next((d for d, phrases in cues.items() for phrase in phrases
                              if any(_next_to(tokens, phrase, w) for w in words)), None)
            if direction is None:
                continue
            dims = list(dict.fromkeys([f"{entity}.{label}", *(d for d in kept if GRAIN_SEP not in d),
                                       f"{entity}.{when}"]))
            return dims, [(f"{entity}.{when}", "desc" if direction == "latest" else "asc")]
        return None

    def _asks_for_one(self, tokens: list[str], dims: list[str]) -> bool:
        """Whether a ranked aggregate asks for ONE row: a superlative word (`policies/query_cues.yaml`)
        and a singular subject right after a singular question cue ("qual colaborador", "which team",
        "who"), not "quais times" or "which services".
        """
        cues = folded_cues()
        if not ranking_words(tokens):
            return False
        words = [w for name in dims for w in self._entity_words(name.split(".", 1)[0])]
        if any(_after_cue(tokens, w, cues.breakdown) for w in words):
            return False  # "… mais despesas, por pessoa?": every group, ranked
        for i, tok in enumerate(tokens):
            if tok not in cues.singular:
                continue
            if tok in cues.person:
                return True
            nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
            if nxt and not nxt.endswith("s") and any(_after_cue([tok, nxt], w) for w in words):
                return True
        return False

    # ----------------------------------------------------------------------------- values

    def link_values(self, q: QueryObject, plan: Plan, stored: Callable[[str, str], list[str] | None]) -> QueryObject:
        """Each text filter value replaced by the stored value it names: exactly, ignoring case and
        accents, through the model's value synonyms, or as the one stored value containing it; a
        value that matches another text column of the same entity moves the filter there. A column
        with a closed list of values refuses anything else. Numbers and periods are checked here too.
        """
        out: list[tuple[str, str, Any]] = []
        for name, op, value in q.filters:
            if name in self.measure_names:
                out.append((name, op, _number(name, op, value)))
                continue
            ref = plan.refs[name]
            kind = self.kind(ref.entity, ref.member)
            _check_shape(name, op, value)
            if op in ("is_null", "not_null"):
                out.append((name, op, None))
            elif ref.member in self._period_texts(ref.entity):
                out.append(self._period_text_filter(name, op, value, self._period_texts(ref.entity)[ref.member]))
            elif kind in ("date", "timestamp"):
                for v in (value if isinstance(value, list) else [value]):
                    if not _is_exact_timestamp(v):
                        period_bounds(str(v))
                out.append((name, op, value))
            elif kind in ("integer", "number"):
                out.append((name, op, _number(name, op, value)))
            elif kind == "boolean" or op == "contains":
                out.append((name, op, value))
            elif not isinstance(value, list) and self._names_itself(name, str(value)):
                continue  # "teams.name = 'Teams'": the word for the entity, not one of its rows
            else:
                values = value if isinstance(value, list) else [value]
                linked = [self._link_text(ref, name, str(v), stored) for v in values]
                fields = {f for f, _ in linked}
                if len(fields) > 1:
                    raise SemanticQueryError(f"{name}: the values {values} live in different columns")
                new_name = fields.pop()
                if new_name != name:
                    role, _, member = new_name.partition(".")
                    join = self.spec.entities[ref.entity].joins.get(role)
                    plan.refs[new_name] = Ref((*ref.path, (ref.entity, role)), join.entity, member) \
                        if join is not None and role != name.split(".", 1)[0] else Ref(ref.path, ref.entity, member)
                vals = [v for _, v in linked]
                out.append((new_name, op, vals if isinstance(value, list) else vals[0]))
        q.filters = out
        return q

    def _names_itself(self, name: str, value: str) -> bool:
        """Whether a filter value is only the word for the entity (or join) it filters, which a small
        model copies from "all teams" or "each project" into a filter.
        """
        prefix = name.split(".", 1)[0]
        entity = self.spec.entities.get(prefix)
        words = [prefix, *(entity.synonyms if entity else [])]
        key = fold(value)
        return any(key in (w, w + "s", w + "es") or (w.endswith("s") and key == w[:-1]) for w in map(fold, words))

    def _link_text(self, ref: Ref, name: str, value: str, stored: Callable[[str, str], list[str] | None]
                   ) -> tuple[str, str]:
        ent = self.spec.entities[ref.entity]
        known, closed = self._known_values(ref.entity, ref.member, stored)
        hit = _match_value(value, known, ent.dimensions[ref.member].values)
        if hit is not None:
            return name, hit
        prefix = name.split(".", 1)[0]
        for other, d in ent.dimensions.items():  # the same words in a sibling column (name vs name_en)
            if other == ref.member or d.expr or self.kind(ref.entity, other) != "string":
                continue
            other_known, _ = self._known_values(ref.entity, other, stored)
            other_hit = _match_value(value, other_known, d.values, loose=False)
            if other_hit is not None:
                return f"{prefix}.{other}", other_hit
        partial: list[tuple[str, str]] = []
        for role, join in self._joins_on(ref.entity, ref.member):  # a key column given the name of a row it points at
            target = self.spec.entities[join.entity]
            for other, d in target.dimensions.items():
                if d.expr or self.kind(join.entity, other) != "string":
                    continue
                other_known, _ = self._known_values(join.entity, other, stored)
                other_hit = _match_value(value, other_known, d.values, loose=False)
                if other_hit is not None:
                    return f"{role}.{other}", other_hit
                inside = _match_value(value, other_known, {}, loose=True)
                if inside is not None:
                    partial.append((f"{role}.{other}", inside))
        if len({v for _, v in partial}) == 1:  # "the Data team": the one row whose name holds those words
            return partial[0]
        if closed:
            shown = ", ".join(repr(v) for v in known[:20])
            raise SemanticQueryError(f"{name}: {value!r} is not a stored value; stored values: {shown}")
        return name, value

    def _known_values(self, entity: str, dim: str, stored: Callable[[str, str], list[str] | None]
                      ) -> tuple[list[str], bool]:
        """(values, closed): the model's and the schema's value lists are closed; values read from
        the database are complete when the column is small enough to be read at all.
        """
        ent = self.spec.entities[entity]
        d = ent.dimensions[dim]
        column = d.column or dim
        table = ent.table_name(entity)
        declared = list(d.values) or list(self.catalog[table].enums.get(column, ()))
        if declared:
            return declared, True
        if d.expr:
            return [], False
        read = stored(table, column)
        return (read or []), bool(read)

    # ------------------------------------------------------------------------------ compile

    def compile(self, q: QueryObject, stored: Callable[[str, str], list[str] | None] | None = None) -> CompiledQuery:
        """Plan, link values, then let boring-semantic-layer build the query over unbound Ibis tables
        and compile it for the dialect; the SQL is tidied by sqlglot's optimizer when that succeeds.
        """
        if not q.expressible:
            raise SemanticQueryError("the query says it is not expressible")
        q = QueryObject(q.expressible, list(q.measures), list(q.dimensions), list(q.segments), list(q.filters),
                        list(q.order), q.limit)
        unseen = [f for f, _ in q.order if self._unseen_key(f, q.dimensions)]
        for f, _ in q.order:  # the library orders only by selected fields
            if f in self.measure_names and f not in q.measures:
                q.measures.append(f)
            elif f not in self.measure_names and f not in q.dimensions:
                q.dimensions.append(f)
        for f, _, _ in q.filters:  # a HAVING filter needs its measure computed
            if f in self.measure_names and f not in q.measures:
                q.measures.append(f)
        plan = self.plan(q)
        q = self.link_values(q, plan, stored or (lambda _t, _c: None))
        try:
            sql = self._bsl_sql(q, plan)
        except SemanticQueryError:
            raise
        except Exception as exc:
            raise SemanticQueryError(f"the query could not be compiled: {type(exc).__name__}: {exc}"[:400]) from exc
        sql = _tidy(sql, self.dialect, self._sqlglot_schema())
        hidden = _without_columns(sql, unseen, self.dialect) if unseen else sql
        if hidden != sql:  # the trace's query object shows what the SQL selects
            sql = hidden
            q = QueryObject(q.expressible, list(q.measures), [d for d in q.dimensions if d not in unseen],
                            list(q.segments), list(q.filters), list(q.order), q.limit)
        return CompiledQuery(sql=sql, base=plan.base, query=q)

    def _bsl_sql(self, q: QueryObject, plan: Plan) -> str:
        import ibis
        from boring_semantic_layer import Dimension as BDim
        from boring_semantic_layer import to_semantic_table

        nodes = _tree(plan, self.spec)
        joined = len(nodes) > 1
        aliases = _aliases(plan, nodes)

        def qualified(path: tuple[tuple[str, str], ...], member: str) -> str:
            return f"{aliases[path]}.{member}"

        def model(path: tuple[tuple[str, str], ...]) -> Any:
            entity = nodes[path]
            ent = self.spec.entities[entity]
            table = ent.table_name(entity)
            schema = {c: _ibis_type(column_kind(t)) for c, t in self.catalog[table].columns.items()}
            tbl = ibis.table(schema, name=table).view()
            key = (lambda m: m) if joined else (lambda m: qualified(path, m))
            dims = {key(d): BDim(expr=_dim_expr(spec.column or d, spec.expr), description=spec.description or None,
                                 is_time_dimension=bool(spec.time_grains),
                                 smallest_time_grain="TIME_GRAIN_DAY" if spec.time_grains else None)
                    for d, spec in ent.dimensions.items()}
            m = to_semantic_table(tbl, name=aliases[path]).with_dimensions(**dims)
            if path == ():
                m = m.with_measures(**{key(n): _measure_expr(meas.agg, ent.dimensions[meas.column].column or meas.column
                                                             if meas.column else None,
                                                             ent.dimensions[meas.column].expr if meas.column else None)
                                       for n, meas in ent.measures.items()})
            for child in sorted(p for p in nodes if len(p) == len(path) + 1 and p[:-1] == path):
                owner, jname = child[-1]
                join = self.spec.entities[owner].joins[jname]
                target = self.spec.entities[join.entity]
                tcol = join.target_column or (target.dimensions[target.primary_key].column or target.primary_key
                                              if target.primary_key else "")
                m = m.join_one(model(child), on=lambda left, right, a=join.column, b=tcol: getattr(left, a) == getattr(right, b))
            return m

        root = model(())
        name_of = {n: qualified(r.path, r.member) for n, r in plan.refs.items()}
        dims = list(dict.fromkeys(name_of[d] for d in q.dimensions))
        grains: dict[str, str] = {}
        for d in q.dimensions:
            ref = plan.refs[d]
            if ref.grain:
                if grains.get(name_of[d], _BSL_GRAIN[ref.grain]) != _BSL_GRAIN[ref.grain]:
                    raise SemanticQueryError(f"{d}: one time grain per date dimension")
                grains[name_of[d]] = _BSL_GRAIN[ref.grain]
        measures = list(dict.fromkeys(name_of[m] for m in q.measures))
        pre: list[Any] = []
        having: list[Any] = []
        for fname, op, value in q.filters:
            if fname in self.measure_names:
                having.append({"field": name_of[fname], "operator": op, "value": value})
                continue
            ref = plan.refs[fname]
            pre.append(self._predicate(name_of.get(fname) or qualified(ref.path, ref.member),
                                       self.kind(ref.entity, ref.member), op, value))
        for sname in q.segments:
            ref = plan.refs[sname]
            for cond in self.spec.entities[ref.entity].segments[ref.member].where:
                pre.append(self._predicate(qualified(ref.path, cond.field), self.kind(ref.entity, cond.field),
                                           cond.op, cond.value))
        order = [(name_of[f], d) for f, d in q.order]
        ordered = {f for f, _ in order}
        order += [(d, "asc") for d in dims if d not in ordered]  # ties broken the same way every time
        query = root.query(dimensions=dims or None, measures=measures or None, filters=[*pre, *having] or None,
                           order_by=order or None, limit=q.limit, time_grains=grains or None)
        return str(query.sql(dialect=self.dialect))

    def _predicate(self, bsl_name: str, kind: ColumnKind, op: str, value: Any) -> Callable[[Any], Any]:
        """An Ibis predicate on one dimension; dates compare with period bounds, typed as the column."""
        import ibis

        def col(t: Any) -> Any:
            return getattr(t, bsl_name)  # dimensions first (the library's resolver), then columns

        if op == "is_null":
            return lambda t: col(t).isnull()
        if op == "not_null":
            return lambda t: col(t).notnull()
        if kind in ("date", "timestamp"):
            def lit(d: Any) -> Any:
                if kind == "date":
                    return ibis.literal(d, type="date")
                stamp = d if isinstance(d, dt.datetime) else dt.datetime.combine(d, dt.time())
                return ibis.literal(stamp, type="timestamp")

            def during(t: Any, v: Any) -> Any:
                if _is_exact_timestamp(v):
                    return col(t) == ibis.literal(dt.datetime.fromisoformat(str(v)), type="timestamp")
                a, b = period_bounds(str(v))
                return (col(t) >= lit(a)) & (col(t) < lit(b))

            if op in ("=", "in"):
                vals = value if isinstance(value, list) else [value]
                return lambda t: _any(during(t, v) for v in vals)
            if op in ("!=", "not_in"):
                vals = value if isinstance(value, list) else [value]
                return lambda t: ~_any(during(t, v) for v in vals)
            if op == "between":
                a, b = period_bounds(str(value[0]))[0], period_bounds(str(value[1]))[1]
                return lambda t: (col(t) >= lit(a)) & (col(t) < lit(b))
            start, end = period_bounds(str(value))
            bound = {"<": start, ">=": start, ">": end, "<=": end}.get(op)
            if bound is None:
                raise SemanticQueryError(f"{bsl_name}: operator {op} does not apply to dates")
            if op in ("<", "<="):
                return lambda t: col(t) < lit(bound)
            return lambda t: col(t) >= lit(bound)
        if op == "contains":
            needle = str(value).lower()
            return lambda t: col(t).lower().contains(needle)
        if op in ("in", "not_in"):
            vals = list(value)
            return (lambda t: col(t).isin(vals)) if op == "in" else (lambda t: ~col(t).isin(vals))
        if op == "between":
            lo, hi = value
            return lambda t: col(t).between(lo, hi)
        compare: dict[str, Callable[[Any, Any], Any]] = {
            "=": lambda c, v: c == v, "!=": lambda c, v: c != v, ">": lambda c, v: c > v,
            ">=": lambda c, v: c >= v, "<": lambda c, v: c < v, "<=": lambda c, v: c <= v}
        fn = compare[op]
        return lambda t: fn(col(t), value)

    def _sqlglot_schema(self) -> dict[str, object]:
        sql_type = {"string": "TEXT", "integer": "BIGINT", "number": "DOUBLE", "date": "DATE",
                    "timestamp": "TIMESTAMP", "boolean": "BOOLEAN"}
        return {t: {c: sql_type[column_kind(ty)] for c, ty in info.columns.items()} for t, info in self.catalog.items()}

    # ----------------------------------------------------------------------------- prompts

    def describe(self) -> str:
        """The model for the prompt, compact and always identical (the static, cached prefix)."""
        lines: list[str] = []
        for ename, ent in self.spec.entities.items():
            lines.append(f"{ename}: {ent.description}" if ent.description else ename)
            dims = []
            for dname, d in ent.dimensions.items():
                text = dname
                if d.values:
                    text += "{" + "|".join(d.values) + "}"
                notes: list[str] = []
                if d.time_grains:
                    notes.append(self.kind(ename, dname))
                if d.unit:
                    notes.append(d.unit)
                if d.expr:
                    notes.append(d.expr)
                if notes:
                    text += f" ({', '.join(notes)})"
                dims.append(text)
            lines.append("  dimensions: " + ", ".join(dims))
            if ent.measures:
                lines.append("  measures: " + ", ".join(ent.measures))
            if ent.segments:
                lines.append("  segments: " + "; ".join(f"{s} = {seg.description}" if seg.description else s
                                                         for s, seg in ent.segments.items()))
            if ent.joins:
                lines.append("  joins: " + ", ".join(f"{j}→{join.entity}" + _join_note(join) for j, join in ent.joins.items()))
        return "\n".join(lines)

    def examples_text(self) -> str:
        """The model file's worked examples as question → JSON, empty fields left out (fewer tokens)."""
        out = []
        for ex in self.spec.examples:
            shown = {k: v for k, v in self.parse(ex.query).as_json().items() if v not in ([], None)}
            out.append(f"Q: {ex.question}\nA: {json.dumps(shown, ensure_ascii=False)}")
        return "\n".join(out)

    @cached_property
    def column_dimensions(self) -> dict[tuple[str, str], list[str]]:
        """(table, column) -> the dimensions (entity.dimension) that read that stored column; derived
        once per layer (the model is fixed), since hints, `bind` and the fill each read it per question.
        """
        by_column: dict[tuple[str, str], list[str]] = {}
        for ename, ent in self.spec.entities.items():
            for dname, d in ent.dimensions.items():
                if not d.expr:
                    by_column.setdefault((ent.table_name(ename), d.column or dname), []).append(f"{ename}.{dname}")
        return by_column

    @cached_property
    def key_columns(self) -> dict[str, tuple[str, str]]:
        """Each entity's (table, column) its primary key is stored in, for the entities whose key is a
        dimension (derived once per layer: the model is fixed).
        """
        return {e: (ent.table_name(e), ent.dimensions[ent.primary_key].column or ent.primary_key)
                for e, ent in self.spec.entities.items() if ent.primary_key in ent.dimensions}

    def relink_heard(self, q: QueryObject, hits: Iterable[tuple[str, str, str]],
                     holds: Callable[[str, str, str], bool]) -> tuple[QueryObject, list[str]]:
        """A text filter on a column that does not hold its value moves to the one column where the
        database's value index heard that value in the question (`hits`: table, column, value),
        when one dimension reads that column. Why: a small model files a team's name under the
        projects' names; the stored values say whose name it is. `holds(table, column, value)`:
        whether the filter's own column stores the value (True when that cannot be read). A key
        column is left to value linking (it follows its join), and a move the query's rows cannot
        reach is not made.
        """
        heard: dict[str, set[tuple[str, str]]] = {}
        for t, c, v in hits:
            heard.setdefault(fold(v), set()).add((t, c))
        out: list[tuple[str, str, Any]] = []
        notes: list[str] = []
        for name, op, value in q.filters:
            found = self._dimension(name)
            values = value if isinstance(value, list) else [value]
            if found is None or found[3].expr or op not in ("=", "!=", "in", "not_in") or not values:
                out.append((name, op, value))
                continue
            _, entity, member, dim = found
            if self._joins_on(entity, member):  # a key given a name: value linking follows its join
                out.append((name, op, value))
                continue
            own = (self.spec.entities[entity].table_name(entity), dim.column or member)
            columns = [heard.get(fold(str(v)), set()) for v in values]
            common = set.intersection(*columns)
            targets = {d for tc in common for d in self.column_dimensions.get(tc, [])}
            if own in common or len(common) != 1 or len(targets) != 1 \
                    or any(holds(*own, str(v)) for v in values):
                out.append((name, op, value))
                continue
            target = targets.pop()
            out.append((target, op, value))
            notes.append(f"filter {name} {op} {value!r} moved to {target} (the column that stores that value)")
        moved = QueryObject(q.expressible, list(q.measures), list(q.dimensions), list(q.segments), out,
                            list(q.order), q.limit)
        if notes:
            try:
                self.plan(moved)
            except SemanticQueryError:  # the column is not reachable from the query's rows: as filled
                return q, []
        return moved, notes

    def names_values(self, hits: Iterable[tuple[str, str, str]]) -> bool:
        """Whether the value index found a stored value of the model's own columns (`hits`: table,
        column, value); a word that is also a value of a table the model does not cover ("tickets",
        stored in an audit log) names nothing the query could filter on.
        """
        return any(self.column_dimensions.get((t, c)) for t, c, _ in hits)

    def bind(self, q: QueryObject, bound: Sequence[tuple[str, str, Sequence[str]]], question: str = "",
             source: str = "the set an earlier source found") -> tuple[QueryObject, list[str]]:
        """Bound the query by a set an earlier source of the same turn found (`bound`: table,
        column and the values its rows hold there), when the query has no filter on that entity.

        Why: "which services did that incident hit, and how many open tickets do those services
        have?" reaches the database with "those services" and nothing to filter on; the graph found
        them. The caller binds only when the question's own part names no stored value itself: a
        part that names its own rows ("who commanded INC-1?") is not about the earlier set. The set
        is reached through the entity's default join, or through a role (join) the question names
        by one of its words ("tickets assigned to that person"); never through a role it does not.
        `source` says what the set is, in the note (a key the question writes: `unfiltered_keys`).
        """
        if not q.expressible or not bound:
            return q, []
        filtered = {found[1] for f, _, _ in q.filters if (found := self._dimension(f)) is not None}
        by_column = self.column_dimensions
        text = " " + " ".join(fold(question).split()) + " "
        for table, column, values in bound:
            for dim in by_column.get((table, column), []):
                entity, member = dim.split(".", 1)
                if entity in filtered:
                    break  # the model bounded that entity itself
                said = [f"{role}.{member}" for ename, ent in self.spec.entities.items()
                        for role, join in ent.joins.items()
                        if join.entity == entity and any(_has(text, w) for w in join.synonyms)]
                per_member = _per_member(q, text, len(values))
                for name in dict.fromkeys([*said, dim]):
                    out = QueryObject(q.expressible, list(q.measures), [*q.dimensions, *([name] if per_member else [])],
                                      list(q.segments), [*q.filters, (name, "in", list(values))], list(q.order),
                                      q.limit)
                    try:
                        self.plan(out)  # the query's entity must reach the set's
                    except SemanticQueryError:
                        continue
                    notes = [f"filter {name} in {list(values)!r} ({source})"]
                    return out, notes + ([f"dimension {name} (a figure for each of the set)"] if per_member else [])
        return q, []

    def unfiltered_keys(self, q: QueryObject, hits: Iterable[tuple[str, str, str]]
                        ) -> list[tuple[str, str, tuple[str, ...]]]:
        """The record keys the question writes (`hits` on an entity's primary key: "auth-service",
        "INC-2040") that no filter of `q` holds, as sets for `bind`; [] when it writes two keys of
        one entity (which of them bounds what is the model's reading) or `q` is no query.

        Why: "Quais tickets foram abertos nos últimos 7 dias para o auth-service?" was filled with
        the service as a column and no filter, and listed every service's tickets. A key the user
        typed names the record the rows are about.
        """
        if not q.expressible:
            return []
        held = {fold(str(x)) for _, _, v in q.filters for x in (v if isinstance(v, list) else [v])}
        keys = set(self.key_columns.values())
        said: dict[tuple[str, str], set[str]] = {}
        for t, c, v in hits:
            if (t, c) in keys:
                said.setdefault((t, c), set()).add(v)
        return [(t, c, (next(iter(vs)),)) for (t, c), vs in sorted(said.items())
                if len(vs) == 1 and not {fold(v) for v in vs} & held]

    def show_found(self, q: QueryObject, found: set[str]) -> tuple[QueryObject, list[str]]:
        """`q` with the column of each filter whose values the user did not say (`found`, folded:
        an earlier source found them) among its dimensions, for a query of rows (no measures).

        Why: "Quem lidera esse projeto?", after a postmortem named the project, was answered with
        the lead alone; the user never heard which project the rows are about, and the answer
        could not say it. A figure is not split by the column (a count stays one count).
        """
        if q.measures or not q.expressible or not found:
            return q, []

        def unsaid(value: Any) -> bool:
            values = value if isinstance(value, list) else [value]
            return bool(values) and all(isinstance(v, str) and fold(v) in found for v in values)

        add = list(dict.fromkeys(f for f, o, v in q.filters if o in ("=", "in") and unsaid(v)
                                 and f not in q.dimensions and self._dimension(f) is not None))
        if not add:
            return q, []
        out = QueryObject(q.expressible, list(q.measures), [*q.dimensions, *add], list(q.segments),
                          list(q.filters), list(q.order), q.limit)
        return out, [f"dimension {f} (its value is not the user's: an earlier source found it)" for f in add]

    def names_by_state(self, state: str, noun: str) -> bool:
        """Whether `state noun` names rows of an entity by a state ("open tickets", "active
        incidents"): `noun` is the entity's name or a one-word synonym, `state` one of its one-word
        values or segments. An English imperative may be such an adjective; a phrase is no action.
        """
        noun, state = fold(noun), fold(state)
        return any(noun in {fold(w) for w in self._entity_words(name)} and state in self._value_words(name)
                   for name in self.spec.entities)

    def names_anything(self, question: str, value_hits: Iterable[tuple[str, str, str]]) -> bool:
        """Whether the question names anything the model holds: a stored value of its columns, or
        an entity, member, segment or value by its declared words. A period alone names nothing:
        every question can say a year.
        """
        if self.names_values(value_hits):
            return True
        text = " " + " ".join(fold(question).split()) + " "
        return any(_has(text, w) for w in self._declared_phrases)

    @cached_property
    def _declared_phrases(self) -> list[str]:
        """Every word the model declares for what it holds: entity names and synonyms, and the
        synonyms of its dimensions, values, measures, segments and joins (read once per model).
        """
        out: list[str] = []
        for ename, ent in self.spec.entities.items():
            out += [ename, *ent.synonyms, *(w for d in ent.dimensions.values() for w in d.synonyms),
                    *(w for d in ent.dimensions.values() for w in _declared_words(d)),
                    *(w for m in ent.measures.values() for w in m.synonyms),
                    *(w for g in ent.segments.values() for w in g.synonyms),
                    *(w for j in ent.joins.values() for w in j.synonyms)]
        return list(dict.fromkeys(out))

    def hints(self, question: str, value_hits: Iterable[tuple[str, str, str]], today: str) -> list[str]:
        """What the question's words point at: stored values (from the database's value index),
        the model's value, member, segment and entity synonyms, and calendar periods.
        """
        text = " " + " ".join(fold(question).split()) + " "
        out: list[str] = []
        seen: set[str] = set()

        def add(line: str) -> None:
            if line not in seen and len(out) < MAX_HINTS:
                seen.add(line)
                out.append(line)

        by_column = self.column_dimensions
        for table, column, value in value_hits:
            for name in by_column.get((table, column), []):
                add(f"{name} = {value!r}")
        for words, period in question_periods(question, today):
            add(f"'{words}' = period {period}")
        mentioned = [e for e, ent in self.spec.entities.items() if _mentions(text, ent, e)]
        near = {r for e in mentioned for r in self._reach(e)} or set(self.spec.entities)
        for ename, ent in self.spec.entities.items():
            if ename not in near:
                continue  # 'approved' names a status of every entity that has one: only the nearby ones
            for dname, d in ent.dimensions.items():
                for stored, syns in d.values.items():
                    if any(_has(text, w) for w in [stored, *syns]):
                        add(f"{ename}.{dname} = {stored!r}")
        for ename, ent in self.spec.entities.items():
            for sname, seg in ent.segments.items():
                word = next((w for w in seg.synonyms if _has(text, w)), None)
                if word:
                    add(f"'{word}' → segment {ename}.{sname}")
            for mname, meas in ent.measures.items():
                word = next((w for w in meas.synonyms if _has(text, w)), None)
                if word and _mentions(text, ent, ename):
                    add(f"'{word}' → {ename}.{mname}")
            for jname, join in ent.joins.items():
                word = next((w for w in join.synonyms if _has(text, w)), None)
                if word and _mentions(text, ent, ename):
                    add(f"'{word}' → {jname} (join of {ename} to {join.entity})")
            for dname, d in ent.dimensions.items():
                word = next((w for w in d.synonyms if _has(text, w)), None)
                if word and _mentions(text, ent, ename):
                    add(f"'{word}' → {ename}.{dname}")
        for ename, ent in self.spec.entities.items():
            word = next((w for w in [ename, *ent.synonyms] if _has(text, w)), None)
            if word:
                add(f"'{word}' → {ename}")
        return out

    def named_values(self, text: str, value_hits: Iterable[tuple[str, str, str]], today: str) -> set[str]:
        """The stored values `text` names, as `hints` writes them ("incidents.severity = 'SEV2'"):
        from the value index's `value_hits` and from the model's value synonyms.
        """
        return {h for h in self.hints(text, value_hits, today) if _VALUE_HINT.match(h)}

    def figure_hints(self, question: str, asked: set[str], figures: Sequence[Figure], today: str,
                     named: Callable[[str], set[str]]) -> tuple[list[str], list[Figure]]:
        """Hint lines for the document figures that bound rows the question asks about, and those
        figures: a figure whose row or line names a stored value the question names (`asked`, as
        `named_values` writes them; `named` reads a figure's key the same way), of a kind one of the
        entities of those values measures, converted to each unit those entities keep it in, and a
        duration of days also as the day that long before today (for a date column).

        Why: the policy's number for "SEV2" sits in the row that names SEV2, in hours, and the
        incident keeps minutes; the small model copies a figure it is shown, with its unit.
        """
        from tools.doc_figures import before, plain, units

        table = units()
        entities = {h.partition(".")[0] for h in asked} | {
            e for e, ent in self.spec.entities.items() if _mentions(_spaced(question), ent, e)}
        kept: dict[tuple[str, str], None] = {}
        dated = False
        for ename in entities & set(self.spec.entities):
            for dname, d in self.spec.entities[ename].dimensions.items():
                unit = table.named(d.unit)
                if unit is not None:
                    kept[unit] = None
                dated = dated or self.kind(ename, dname) in ("date", "timestamp")
        kinds = {k for k, _ in kept}
        lines: list[str] = []
        chosen: list[Figure] = []
        for fig in figures:
            if table.sizes.get((fig.kind, fig.unit)) is None or not (fig.kind in kinds or (dated and fig.kind == "duration")):
                continue  # a unit that cannot be converted (business days), or a kind no column keeps
            if not named(fig.key) & asked:
                continue
            said = [fig.said]
            for unit in kept:
                value = table.convert(fig.number, (fig.kind, fig.unit), unit)
                if value is not None and unit != (fig.kind, fig.unit):
                    said.append(f"{plain(value)} {unit[1]}")
            day = before(today, fig) if dated else None
            line = f"document: '{fig.label}' = {' = '.join(said)}" + (f" (that long before today: {day})" if day else "")
            if line not in lines and len(lines) < MAX_FIGURES:
                lines.append(line)
                chosen.append(fig)
        return lines, chosen

    def document_bound(self, question: str, asked: set[str], figures: Sequence[Figure],
                       named: Callable[[str], set[str]] | None = None) -> tuple[list[QueryObject], str] | None:
        """The queries for the rows of one entity that a document's figures bound, with no LLM call:
        the question's stored values as filters, and the entity's column of the figure's kind
        compared with the figure in the column's unit; the rows (key and column), or their count
        when the question asks how many. One query for a figure whose row names a value the question
        names (`asked`); when none does, one per row of a table whose rows each name one value of the
        same column of the entity ("the limit of each category": each category with its own limit),
        read through `named`, with that column shown. The comparison's side is the question's words
        (`beyond_words`, `within_words`, a negation before a within word); a question with neither is
        no such comparison (None). Of several columns of the figure's kind, the one whose words the
        question and the figure's header share most (`_stems`); None when the question names none of
        them, or when two figures (or tables) rank alike. Returns the queries and a note saying
        which figures bound them.

        Why: "which SEV3 incidents took longer to resolve than the policy allows" is a filter by a
        number the model never sees in the question; shown it as a hint, the 1.5B model filtered a
        date column by it or reported a maximum.
        """
        from tools.doc_figures import plain, units

        cues = folded_cues()
        text = _spaced(question)
        op = _side(text)
        if op is None:
            return None
        table = units()
        ename = self._bounded_entity(text, asked)
        if ename is None:
            return None
        ent = self.spec.entities[ename]
        values = [(h.partition(" = ")[0], h.partition(" = ")[2]) for h in sorted(asked)]
        # a value of an entity the rows do not reach is no condition on them ("their" read as a policy)
        values = [(n, raw) for n, raw in values if n.partition(".")[0] in self._reach(ename)]
        asked = {h for h in asked if h.partition(".")[0] in self._reach(ename)}
        kinds = {u[0] for d in ent.dimensions.values() if not d.expr and (u := table.named(d.unit)) is not None}
        figures = [f for f in dict.fromkeys(figures) if f.kind in kinds and table.sizes.get((f.kind, f.unit))]
        options = self._figure_options(ename, asked, figures, named)
        # how many rows of its table a column gives a figure for: the table's figure column gives
        # one for every row, a notes column for a few ("máximo de 250 USD por noite")
        filled = Counter(f.header for f in figures if f.header)
        asked_stems = stems(question)
        ranked: list[tuple[int, int, int, str]] = []
        for i, (header, rows) in enumerate(options):
            kind = rows[0][0].kind
            columns = {n: d for n, d in ent.dimensions.items()
                       if not d.expr and (u := table.named(d.unit)) is not None and u[0] == kind}
            for dname, d in columns.items():
                words = stems(" ".join([dname.replace("_", " "), d.description or "", *d.synonyms]))
                if len(columns) > 1 and not asked_stems & words:
                    continue
                hstems = stems(header)
                ranked.append((len(asked_stems & words) + len(hstems & words) + len(asked_stems & hstems),
                               filled[header], -i, dname))
        ranked.sort(reverse=True)
        numbers = [tuple(f.number for f, _ in rows) for _, rows in options]
        if not ranked or (len(ranked) > 1 and ranked[1][:2] == ranked[0][:2]
                          and numbers[-ranked[1][2]] != numbers[-ranked[0][2]]):
            return None  # nothing to bound by, or two figures the words and the tables cannot tell apart
        _, _, i, dname = ranked[0]
        header, rows = options[-i]
        unit = table.named(ent.dimensions[dname].unit)
        base: list[tuple[str, str, Any]] = [(name, "=", _literal(raw)) for name, raw in values]
        counted = any(_has(text, w) for w in cues.aggregations.get("count", ())) and "count" in ent.measures
        key = [f"{ename}.{ent.primary_key}"] if ent.primary_key else []
        queries: list[QueryObject] = []
        said: list[str] = []
        for fig, extra in rows:
            value = table.convert(fig.number, (fig.kind, fig.unit), unit) if unit is not None else None
            if value is None:
                return None
            number = int(value) if float(value).is_integer() else value
            shown = [extra[0]] if extra else []
            filters = [*base, *([(extra[0], "=", extra[1])] if extra else []), (f"{ename}.{dname}", op, number)]
            queries.append(QueryObject(True, [f"{ename}.count"] if counted else [],
                                       [] if counted else [*key, *shown, f"{ename}.{dname}"], [], filters, [], None))
            converted = "" if plain(value) == plain(fig.number) else f" = {plain(value)}"
            said.append(f"{extra[1] if extra else fig.key}: {fig.said}{converted}")
        if len(rows) == 1:
            fig = rows[0][0]
            return queries, (f"every one of these {ename} has {dname} {op} {plain(queries[0].filters[-1][2])}: "
                             f"the document's '{fig.label}' is {said[0].partition(': ')[2]}")
        keyed = rows[0][1][0] if rows[0][1] else ename
        return queries, (f"every one of these {ename} has {dname} {op} the figure of its {keyed} "
                         f"in the document's '{header}': {'; '.join(said)}")

    def _figure_options(self, ename: str, asked: set[str], figures: list[Figure],
                        named: Callable[[str], set[str]] | None
                        ) -> list[tuple[str, list[tuple[Figure, tuple[str, Any] | None]]]]:
        """(header, [(figure, the filter its row stands for)]) a bound may take: each figure whose row
        names a value the question names, alone; else each table column whose rows each name one
        distinct value of one column of `ename` (two rows or more).
        """
        direct = figures if named is None else [f for f in figures if asked and named(f.key) & asked]
        if direct or named is None:
            return [(f.header, [(f, None)]) for f in direct]
        groups: dict[tuple[str, str], list[tuple[Figure, tuple[str, Any] | None]]] = {}
        for f in figures:
            own = [h for h in named(f.key) if h.startswith(f"{ename}.")] if f.header else []
            if len(own) == 1:
                field_name, _, raw = own[0].partition(" = ")
                groups.setdefault((f.header, f.kind), []).append((f, (field_name, _literal(raw))))
        out: list[tuple[str, list[tuple[Figure, tuple[str, Any] | None]]]] = []
        for (head, _), rows in groups.items():
            fields = {extra[0] for _, extra in rows if extra}
            stored = {repr(extra[1]) for _, extra in rows if extra}
            if len(fields) == 1 and len(stored) == len(rows) >= 2:
                out.append((head, rows))
        return out

    def stated_bound(self, q: QueryObject, question: str, asked: set[str]) -> tuple[QueryObject, list[str]]:
        """The comparison a question states with a figure of its own ("took more than 10 hours to
        resolve", "acima de 1000 USD"), read as `document_bound` reads a document's, as the filter
        on that column in the column's unit; it replaces the model's filter on the column, if any.
        An aggregate of that same column that the question does not ask for by an aggregation word
        ("which incidents took more than …" filled as the longest time) becomes the rows (or their
        count) the comparison bounds. Unchanged when the question states no such figure or the
        column is not one clear column of the entity.

        Why: the small model reported the maximum, or bounded a date column, and left the number out.
        """
        from tools.doc_figures import figures, plain

        found = figures(question)
        bounded = self.document_bound(question, asked, found, None) if found else None
        if bounded is None or len(bounded[0]) != 1:
            return q, []
        b = bounded[0][0]
        bound = [f for f in b.filters if f[1] in (">", "<=")]
        if len(bound) != 1:
            return q, []
        shown = [] if q.measures or bound[0][0] in q.dimensions else [bound[0][0]]  # a list shows what bounds it
        column = bound[0][0]
        member = column.partition(".")[2]
        numbers = {plain(f.number) for f in found}
        # the model's own filter on the column, on an aggregate of it, or the figure read as a date
        # ("acima de 2000 dólares" filled as the year 2000) goes: the bound replaces them
        mine = [f for f in q.filters if f[0] == column or self._on_column(f[0], column)
                or (self._dated(f[0]) and str(f[2]).strip() in numbers)]
        filters = [f for f in q.filters if f not in mine] + bound
        notes = [f"filter {column} {bound[0][1]} {bound[0][2]!r} (the figure the question states)"]
        notes += [f"filter {f} {o} {v!r} (replaced by the figure the question states)" for f, o, v in mine]
        measured = [self._measure(m) for m in q.measures]
        named = {agg for agg, words in folded_cues().aggregations.items() if any(_has(_spaced(question), w)
                                                                                for w in words)}
        measures, dimensions = list(q.measures), [*q.dimensions, *shown]
        if measured and all(m is not None and (m[0], m[2].column) == (column.partition('.')[0], member)
                                  and m[2].agg not in named for m in measured) \
                and not ranking_words(re.findall(r"\w+", fold(question))):
            notes.append(f"{', '.join(q.measures)} (the question asks for the rows the figure bounds, not an "
                         "aggregate of them)")
            measures, dimensions = list(b.measures), [*b.dimensions, *(d for d in q.dimensions if d not in b.dimensions)]
        if measures and column in dimensions and not _after_cue(re.findall(r"\w+", fold(question)), member,
                                                                folded_cues().breakdown):
            dimensions = [d for d in dimensions if d != column]  # the figure's column bounds; it groups nothing
            notes.append(f"{column} (the figure's column, not a breakdown)")
        order = [(f, d) for f, d in q.order if (f in measures or f not in q.measures) and f in [*measures, *dimensions]]
        return QueryObject(q.expressible, measures, dimensions, list(q.segments), filters, order, q.limit), notes

    def _on_column(self, measure: str, column: str) -> bool:
        """Whether `measure` aggregates dimension `column` (both `entity.member`)."""
        found = self._measure(measure)
        return found is not None and f"{found[0]}.{found[2].column}" == column

    def ranks_records(self, question: str) -> bool:
        """Whether the question ranks one entity's records: a superlative word (`superlatives` of
        `policies/query_cues.yaml`) with at most one word between it and a word of an entity
        ("o incidente mais longo", "the longest incident", "a maior despesa"), not followed within
        three words by a comparative ("mais despesas do que") or right by a number ("mais de 3"), and not one that also names a
        limit ("o valor máximo por despesa": `bound_superlatives`). Why: which record is first by a
        measure is the records' own answer, whatever a passage about that kind of record says; a
        question of that shape was planned to the postmortems, whose words it shares.
        """
        cues = folded_cues()
        tokens = re.findall(r"\w+", fold(question))
        starts = self._entity_starts(tokens)
        for i, tok in enumerate(tokens):
            if tok not in cues.superlatives or tok in cues.bounds:
                continue
            after = tokens[i + 1:i + 4]
            if set(after) & cues.comparative or (
                    after[:1] and after[0] in cues.number_prepositions and len(after) > 1 and after[1].isdigit()):
                continue  # "mais despesas do que …", "more tickets than …", "mais de 3 …" compare
            if any(abs(i - j) <= 2 and j != i for j in starts):
                return True
        return False

    def counts_records(self, question: str) -> bool:
        """Whether the question counts one entity's records: a count cue (`aggregation_cues`)
        right before a word of an entity, one word between at most ("quantas despesas de
        hardware", "how many open tickets"). Why: a count of records is the records' own answer; a
        part that counts the records a passage's figure bounds ("… e quantas despesas passaram
        dele?") was planned to the documents, whose words it shares.
        """
        tokens = re.findall(r"\w+", fold(question))
        entity_at = self._entity_starts(tokens)
        count_at = {i + len(c.split()) for c in folded_cues().aggregations.get("count", ())
                    for i in _word_at(tokens, c)}
        return any(j in entity_at or j + 1 in entity_at for j in count_at)

    def _entity_starts(self, tokens: list[str]) -> set[int]:
        """Where a word of an entity (its name or a synonym, singular or plural) starts in `tokens`."""
        return {i for ename, ent in self.spec.entities.items() for w in [ename, *ent.synonyms]
                for i in _word_at(tokens, w.replace("_", " "))}

    def asks_about_record(self, question: str, hits: Iterable[tuple[str, str, str]]) -> bool:
        """Whether the question names one record by its key (a stored value of an entity's primary
        key, from `hits`: (table, column, value)) and a quantity of that entity, or of one its joins
        reach (a column with a unit), by the column's name or a synonym. A column without a unit is
        as often a condition as what is asked ("quais serviços tier 1 seriam impactados").

        Why: "the approval limit of the person who commanded INC-…" was planned to the documents
        alone (the postmortems share its words); a record's figure is the database's answer.
        """
        from tramita.base.text import asked_after_opener

        text = _spaced(question)
        keyed = {e for t, c, _ in hits for e, ent in self.spec.entities.items()
                 if ent.table_name(e) == t and ent.primary_key == c}
        reached = keyed | {j.entity for e in keyed for j in self.spec.entities[e].joins.values()}
        # a column without a unit counts where a question word asks for it ("qual a severidade do
        # INC-…"), not where it asks for other rows of the entity ("quais serviços tier 1 …")
        rows = {e for e in keyed if asked_after_opener(question, [e, *self.spec.entities[e].synonyms])}
        return any(any(_has(text, w) for w in _column_words(m, d))
                   and (d.unit or (e in keyed - rows and asked_after_opener(question, _column_words(m, d))))
                   for e in reached for m, d in self.spec.entities[e].dimensions.items())

    def record_query(self, question: str, hits: Iterable[tuple[str, str, str]]) -> dict[str, Any] | None:
        """The query object of the one record the question names by its key (a stored value of an
        entity's primary key, from `hits`: (table, column, value)), else by its label: its columns and roles the
        question names (each role by its target's label), else the whole record with every role's
        label. None when the question names no such record, or several.

        Why: when the small model's fill fails, "quem revisou o pedido BR-… e qual o valor pedido?"
        and "o INC-… foi reconhecido dentro do prazo da política?" went to raw text-to-SQL, which
        wrote joins over the wrong tables; the record itself answers them, and beside the
        policy's passage the synthesis compares.
        """
        # by its key, else by its label ("Design System Aurora"): one record either way
        keyed = {(e, c, v) for t, c, v in hits for e, ent in self.spec.entities.items()
                 if ent.table_name(e) == t and ent.primary_key == c}
        keyed = keyed or {(e, c, v) for t, c, v in hits for e, ent in self.spec.entities.items()
                          if ent.table_name(e) == t and ent.primary_key and self.label_of(e) == c}
        if len(keyed) != 1:
            return None
        (entity, column, value), = keyed
        ent, text = self.spec.entities[entity], _spaced(question)
        if any(j.entity == entity for e, other in self.spec.entities.items() if e != entity
               and _mentions(text, other, e) for j in other.joins.values()):
            return None  # "quantos tickets tem o payments-api": the records that point at it
        keys = {j.column for j in ent.joins.values()}
        plain = [m for m, d in ent.dimensions.items() if m != ent.primary_key and (d.column or m) not in keys]
        # a column named, or one whose declared value is said ("foi resolvido?": its status); the
        # entity's own words name no column ("the expense policy … EXP-…" is no expense date)
        own = sorted({fold(x) for x in [entity, *ent.synonyms]}, key=len, reverse=True)
        bare = text
        for w in own:
            bare = bare.replace(f" {w} ", " ")
        columns = [f"{entity}.{m}" for m in plain if self._said_column(entity, m, bare)
                   or any(_has(bare, w) for w in _record_words(ent.dimensions[m], own))
                   or any(_has(text, w) for w in _declared_words(ent.dimensions[m]))]
        roles = [(r, j) for r, j in ent.joins.items() if _role_said(text, r, j)]
        if columns or roles:
            labels = [f"{r}.{label}" for r, j in roles if (label := self.label_of(j.entity)) is not None]
            shown = [*columns, *labels]
        else:  # nothing named: the whole record, its figures and states, its roles, then its texts
            stated = [f"{entity}.{m}" for m in plain if ent.dimensions[m].unit or ent.dimensions[m].values]
            labels = [f"{r}.{label}" for r, j in ent.joins.items() if (label := self.label_of(j.entity)) is not None]
            shown = [*stated, *labels, *(f"{entity}.{m}" for m in plain if f"{entity}.{m}" not in stated)]
        return {"dimensions": list(dict.fromkeys([f"{entity}.{column}", *shown]))[:MAX_ITEMS],
                "filters": [{"field": f"{entity}.{column}", "op": "=", "value": value}]}

    def names_beyond(self, query: Mapping[str, Any], question: str, taken: Sequence[str] = ()) -> list[str]:
        """What the question names that a fixed query neither shows nor filters on: a column (by its
        name or a synonym) or a join role of an entity the query reaches or the question names, as
        `entity.member` / `entity.role`. `taken` are the folded words its parameters took.

        Why: a mirrored pattern answers one relation; "the cost center of the team that owns X" and
        "who leads project P, and its end date" were answered with the owning team's name and with
        the project's members, each read out as the answer.
        """
        text = _spaced(question)
        for surface in taken:
            text = text.replace(_spaced(surface), " ")
        filtered = [f["field"] for f in query.get("filters", ())]
        fields = [*query.get("dimensions", ()), *filtered, *(o["field"] for o in query.get("order", ()))]
        covered: set[tuple[str, str]] = set()
        roles: set[str] = set()
        keyed: set[str] = set()  # the entities a filter on a join key names a row of
        bounds: set[tuple[str, str]] = set()  # (entity, member) of each filter
        for name in fields:
            found = self._dimension(name)
            if found is None:
                continue
            prefix, entity, member, _ = found
            covered.add((entity, member))
            if prefix != entity:
                roles.add(prefix)
            if name in filtered:
                bounds.add((entity, member))
                keyed |= {j.entity for _, j in self._joins_on(entity, member)}
        entities = ({e for e, _ in covered} | keyed
                    | {e for e, ent in self.spec.entities.items() if _mentions(text, ent, e)})
        # a word a shown column answers to ("role": the member's role on the project) names no
        # other entity's column of that name
        answered = {fold(w) for e, m in covered for w in _column_words(m, self.spec.entities[e].dimensions[m])}
        out: list[str] = []
        for ename in sorted(entities):
            ent = self.spec.entities[ename]
            columns = {d.column or m for m, d in ent.dimensions.items() if (ename, m) in covered}
            out += [f"{ename}.{m}" for m, d in ent.dimensions.items() if (ename, m) not in covered
                    and any(_has(text, w) for w in _column_words(m, d) if fold(w) not in answered)]
            out += [f"{ename}.{role}" for role, j in ent.joins.items()
                    if role not in roles and j.column not in columns and _role_said(text, role, j)]
            # a value said ("degraded") of a column the query shows but does not filter on: a
            # condition the fixed query leaves to the reader
            out += [f"{ename}.{m} = {stored}" for m, d in ent.dimensions.items() if (ename, m) not in bounds
                    for stored, syns in d.values.items() if any(_has(text, w) for w in [stored, *syns])]
        return out

    def compares_rows(self, question: str, asked: set[str]) -> bool:
        """Whether the question compares rows of one entity it names (`_bounded_entity`) with a
        figure: a side word (`_side`). Why: "quais despesas de transporte passaram do limite da
        política" needs the records as well as the policy.
        """
        text = _spaced(question)
        return _side(text) is not None and self._bounded_entity(text, asked) is not None

    def _bounded_entity(self, text: str, asked: set[str]) -> str | None:
        """The one entity a figure may bound: of the entities of the stored values the question
        names (`asked`), else of those it names, the one that keeps a quantity in a unit
        (`policies/units.yaml`), named by the question (`text`: spaced, folded); None otherwise.
        """
        from tools.doc_figures import units

        table = units()
        entities = {h.partition(".")[0] for h in asked} or {
            e for e, ent in self.spec.entities.items() if _mentions(text, ent, e)}
        entities = {e for e in entities & set(self.spec.entities)
                    if any(table.named(d.unit) for d in self.spec.entities[e].dimensions.values())}
        if len(entities) != 1:
            return None
        ename = entities.pop()
        return ename if _mentions(text, self.spec.entities[ename], ename) else None

    def rebase_figures(self, q: QueryObject, figures: Sequence[Figure]) -> tuple[QueryObject, list[str]]:
        """A comparison of a column with a document figure's number in the figure's own unit, read
        in the column's unit ("> 8" on a minutes column, where the figure is 8 hours, is "> 480").

        Why: the small model copies the number it read and leaves the unit behind.
        """
        from tools.doc_figures import plain, units

        table = units()
        filters: list[tuple[str, str, Any]] = []
        notes: list[str] = []
        for name, op, value in q.filters:
            found = self._dimension(name)
            unit = table.named(found[3].unit) if found is not None else None
            number = _as_number(value) if op in _SCALAR_OPS[2:] else None
            fig = next((f for f in figures if number is not None and f.number == number
                        and unit is not None and (f.kind, f.unit) != unit), None)
            new = table.convert(fig.number, (fig.kind, fig.unit), unit) if fig is not None and unit else None
            if new is None or fig is None or unit is None:
                filters.append((name, op, value))
                continue
            filters.append((name, op, int(new) if float(new).is_integer() else new))
            notes.append(f"filter {name} {op} {value!r} read as the document's {fig.said} = {plain(new)} {unit[1]}")
        if not notes:
            return q, []
        return QueryObject(q.expressible, list(q.measures), list(q.dimensions), list(q.segments), filters,
                           list(q.order), q.limit), notes


def _side(text: str) -> Literal[">", "<="] | None:
    """The side of a figure a question asks for, from its spaced folded words: past it (`beyond_words`,
    or a negation right before a within word), inside it (`within_words`); None for neither or both.
    """
    cues = folded_cues()
    within = [w for w in cues.within if _has(text, w)]
    beyond = [w for w in cues.beyond if _has(text, w)]
    negated = any(f" {n} {w} " in text for n in cues.negations for w in within)
    if (not within and not beyond) or (within and beyond and not negated):
        return None
    return ">" if beyond or negated else "<="


def _literal(raw: str) -> Any:
    """A value as `hints` writes it (Python repr) back to the value."""
    import ast

    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw


def _spaced(text: str) -> str:
    """The folded words of `text`, space-joined and space-padded (what `_has` looks in)."""
    return " " + " ".join(re.findall(r"\w+", fold(text))) + " "


def _column_words(member: str, dim: Dimension) -> list[str]:
    """The words that name a column in a question: its name, spaced, and its synonyms."""
    return [member.replace("_", " "), *dim.synonyms]


def _record_words(dim: Dimension, own: Sequence[str]) -> list[str]:
    """A column's synonyms said of one record of its entity: without the entity's own words and the
    fillers they leave at the ends ("orçamento do projeto" → "orçamento" of a project named).

    Why: within one named record, its entity is already said; "Quem lidera o Lakehouse Migration e
    qual o orçamento dele?" asks for the project's budget, whose synonym names the project.
    """
    fillers = folded_cues().fillers
    out = []
    for synonym in dim.synonyms:
        words = _spaced(synonym)
        for w in own:
            words = words.replace(f" {w} ", " ")
        tokens = words.split()
        while tokens and tokens[0] in fillers:
            tokens = tokens[1:]
        while tokens and tokens[-1] in fillers:
            tokens = tokens[:-1]
        if tokens and tokens != _spaced(synonym).split():
            out.append(" ".join(tokens))
    return out


def _role_rooted(text: str, name: str, join: Join) -> bool:
    """Whether the spaced, folded `text` names the join role `name` by its words or by a word of
    the same root as one of them ("approve" for "approver", "aprovar" for "aprovador"): the first
    FIELD_STEM letters, both words that long.
    """
    if _role_said(text, name, join):
        return True
    roots = stems(" ".join([name.replace("_", " "), *join.synonyms]), FIELD_STEM, FIELD_STEM)
    return bool(stems(text, FIELD_STEM, FIELD_STEM) & roots)


def _role_said(text: str, name: str, join: Join) -> bool:
    """Whether the spaced, folded `text` names the join role `name` by its name or a synonym."""
    return any(_has(text, w) for w in [name.replace("_", " "), *join.synonyms])


def _scale(dim: Dimension) -> Scale | None:
    """A ranked dimension's scale (its values from the top down, with the words for each side)."""
    if dim.ranked is None:
        return None
    return Scale(tuple(dim.values), tuple(dim.ranked.up), tuple(dim.ranked.down))


def _either(filters: list[tuple[str, str, Any]]) -> tuple[list[tuple[str, str, Any]], list[str]]:
    """Two or more `=` filters on one field with different values become one `in` filter: one
    column cannot equal two values, so "x = a AND x = b" matches no row, and a question that names
    two values ("those two services") asks about either.
    """
    values: dict[str, list[Any]] = {}
    for f, op, v in filters:
        if op == "=" and not isinstance(v, list):
            values.setdefault(f, [])
            if v not in values[f]:
                values[f].append(v)
    several = {f: vs for f, vs in values.items() if len(vs) > 1}
    if not several:
        return filters, []
    out: list[tuple[str, str, Any]] = []
    for f, op, v in filters:
        if f in several and op == "=" and not isinstance(v, list):
            if (f, "in", several[f]) not in out:
                out.append((f, "in", several[f]))
        else:
            out.append((f, op, v))
    return out, [f"filter {f} in {vs!r} (one column cannot equal {len(vs)} values at once)" for f, vs in several.items()]


def _join_note(join: Join) -> str:
    notes = ["default"] if join.default else []
    if join.description and len(join.description) <= 30:
        notes.append(join.description)
    return f" ({'; '.join(notes)})" if notes else ""


def _mentions(text: str, ent: Entity, name: str) -> bool:
    return any(_has(text, w) for w in [name, *ent.synonyms])


def _per_member(q: QueryObject, text: str, size: int) -> bool:
    """Whether an aggregate over an earlier source's set is asked for each of its members: the
    query has measures and no dimension, the set has several members, and the question says a
    breakdown word (`breakdown_cues`: "each", "cada", "per") not followed by a pointing word
    ("by those people" names the set, one figure). Why: "which services depend on X, and how many
    open tickets does each have?" was one total, read out as every service's figure.
    """
    if not q.measures or q.dimensions or size < 2:
        return False
    cues = folded_cues()
    tokens = text.split()
    return any(tok in cues.breakdown and (i + 1 >= len(tokens) or tokens[i + 1] not in cues.references)
               for i, tok in enumerate(tokens))


def _one_bucket(period: str, grain: str) -> bool:
    """Whether the whole period falls in one bucket of the grain (2026-Q1 grouped by quarter)."""
    try:
        start, end = period_bounds(period)
    except SemanticQueryError:
        return False
    last = end - dt.timedelta(days=1)

    def bucket(d: dt.date) -> tuple[int, ...]:
        keys = {"day": (d.year, d.month, d.day), "week": tuple(d.isocalendar())[:2], "month": (d.year, d.month),
                "quarter": (d.year, (d.month - 1) // 3), "year": (d.year,)}
        return keys.get(grain, (d.toordinal(),))

    return bucket(start) == bucket(last)


def _cognate(tokens: list[str], member: str, skip: frozenset[str] = frozenset()) -> bool:
    """Whether a question word shares its first `STEM` letters with a word of the column's name
    ("categoria" ~ category, "prioridade" ~ priority): Portuguese and English cognates. `skip`:
    leading letters that count for nothing (its entity's own word in "expense_date").
    """
    roots = {w[:STEM] for w in member.split("_") if len(w) >= STEM} - skip
    return any(t[:STEM] in roots for t in tokens if len(t) >= STEM)


def _after_cue(tokens: list[str], words: str, only: frozenset[str] | None = None,
               between: frozenset[str] = frozenset()) -> bool:
    """Whether `words` (or its plural) follows a grouping cue (or one of `only`), with at most one
    filler (or one word of `between`) between.
    """
    cues = folded_cues()
    grouping = cues.grouping if only is None else only
    for i in _word_at(tokens, words):
        before = tokens[max(0, i - 2):i]
        if before and before[-1] in grouping:
            return True
        if len(before) == 2 and (before[-1] in cues.fillers or before[-1] in between) and before[0] in grouping:
            return True
    return False


def _word_at(tokens: list[str], words: str) -> list[int]:
    """Where `words` (folded; or its plural, or its singular) starts in `tokens`."""
    key = " ".join(fold(words).split())
    size = len(key.split())
    return [i for i in range(len(tokens)) if key and (" ".join(tokens[i:i + size]) in (key, key + "s") or (
        key.endswith("s") and " ".join(tokens[i:i + size]) == key[:-1]))]


def _counted(tokens: list[str], words: str, n: int) -> bool:
    """Whether `words` stands right after the number `n` (digits or a number word), with at most a
    superlative (and the word it grades) between: "os 3 serviços", "which five teams", "os 3 maiores
    fornecedores", "the 5 most recent incidents".
    """
    cues = folded_cues()

    def is_n(tok: str) -> bool:
        return tok == str(n) or cues.numbers.get(tok) == n

    def ranks(tok: str) -> bool:
        return tok in cues.superlatives or (tok.endswith("es") and tok[:-2] in cues.superlatives)

    for i in _word_at(tokens, words):
        before = tokens[max(0, i - 3):i]
        if (before and is_n(before[-1])) or (len(before) >= 2 and ranks(before[-1]) and is_n(before[-2])) or (
                len(before) == 3 and ranks(before[1]) and is_n(before[0])):  # "the 5 most recent incidents"
            return True
    return False


_DAY_MONTH = r"(?<![\w/-])\d{1,2}/\d{1,2}(?:/\d{2,4})?(?![\w/])"  # 13/05, 13/05/2026
_YEARISH = re.compile(r"(?<![\w-])(?:19|20)\d\d(?:-(?:[wqh]\d{1,2}|\d{2}(?:-\d{2})?))?(?![\w-])|" + _DAY_MONTH)


def _names_time(question: str, tokens: list[str]) -> bool:
    """Whether the question places itself in time at all: a year, an ISO week, quarter or date, a
    day/month date, a month name, a grain word or a time cue (`policies/query_cues.yaml`). The
    numbers inside ids (INC-2055) are not years.
    """
    return bool(folded_cues().time & set(tokens)) or bool(_YEARISH.search(fold(question)))


_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_A_DAY = re.compile(rf"{_DAY.pattern}|{_DAY_MONTH}")


def _names_day(question: str, tokens: list[str]) -> bool:
    """Whether the question names a day: a date written out, a day word or a month name
    (`policies/query_cues.yaml` `day_cues`).
    """
    return bool(folded_cues().days & set(tokens)) or bool(_A_DAY.search(question))


# each operator's opposite: a segment's one condition, inverted, is the rows outside it
_INVERSE = {"=": "!=", "!=": "=", ">": "<=", ">=": "<", "<": ">=", "<=": ">", "in": "not_in", "not_in": "in",
            "is_null": "not_null", "not_null": "is_null"}


def _names_segment(text: str, name: str, seg: Segment) -> bool:
    """Whether the folded, space-padded `text` says the segment's name or one of its synonyms."""
    return any(f" {fold(w)} " in text for w in [name.replace("_", " "), *seg.synonyms])


def _declared_words(dim: Dimension) -> set[str]:
    """A dimension's declared values and their synonyms, folded."""
    return {fold(w) for stored, syns in dim.values.items() for w in [stored, *syns]}


def _unreferenced(text: str) -> str:
    """`text` (folded, space-padded) without the word that follows a reference word ("those
    services", "esses serviços"), nor the one a clause pointing back qualifies ("the offices that
    partner covers", "os escritórios que essa pessoa cobre"): that word names a set an earlier
    source found, it does not name a column to group by. Unchanged when the question also has a
    breakdown word ("each of those services").
    """
    cues = folded_cues()
    tokens = text.split()
    if cues.breakdown & set(tokens):
        return text

    def qualified(i: int) -> bool:
        nxt = tokens[i + 1:i + 3]
        return bool(nxt) and (nxt[0] in cues.references or (nxt[0] in cues.relatives and nxt[1:] != []
                                                             and nxt[1] in cues.references))

    kept = [t for i, t in enumerate(tokens) if not (i > 0 and tokens[i - 1] in cues.references) and not qualified(i)]
    return " " + " ".join(kept) + " "


_WORD_AFTER_SPACE = re.compile(r"(?<=\s)\w+")
_ARTICLES = frozenset({"the", "a", "an", "o", "os", "as"})


def _without_agent_cues(question: str) -> str:
    """`question` less each breakdown cue written right before a name, an article between at most:
    "requested by Tatiane Lacerda", "abertos por Pagamentos" name who or which, not a breakdown
    ("by team", "por mês"). A name is a capitalised word after the sentence's first.
    """
    cues = folded_cues().breakdown

    def keep(m: re.Match[str]) -> str:
        if fold(m.group(0)) not in cues:
            return m.group(0)
        name = next((w for w in question[m.end():].split()[:2] if fold(w) not in _ARTICLES), "")
        return "" if name[:1].isupper() else m.group(0)

    return _WORD_AFTER_SPACE.sub(keep, question)


def _without_phrases(tokens: list[str], phrases: Iterable[str]) -> list[str]:
    """`tokens` with every occurrence of the (folded, space-joined) `phrases` left out."""
    out = " " + " ".join(tokens) + " "
    for phrase in sorted(phrases, key=len, reverse=True):
        out = out.replace(f" {phrase} ", " ")
    return out.split()


def ranking_words(tokens: Sequence[str]) -> list[str]:
    """The superlative words of folded `tokens` that rank (`policies/query_cues.yaml`), not those
    that bound: "mais de 3", "more than 5" compare with a number and ask for no ranking.
    """
    cues = folded_cues()
    out: list[str] = []
    for i, tok in enumerate(tokens):
        if tok not in cues.superlatives:
            continue
        after = tokens[i + 1:i + 3]
        if after and (after[0] in cues.comparative or (
                after[0] in cues.number_prepositions and len(after) > 1 and re.match(r"\d", after[1]))):
            continue
        out.append(tok)
    return out


def _one_row_note(measures: list[str], latest: tuple[list[str], list[tuple[str, str]]]) -> str:
    """The trace line for a query turned into the newest or oldest row (`_latest_record`)."""
    return (f"{', '.join(measures) or 'the list'} (the question asks for the "
            f"{'newest' if latest[1][0][1] == 'desc' else 'oldest'} row: {', '.join(latest[0])})")


def _next_to(tokens: list[str], phrase: str, word: str) -> bool:
    """Whether `phrase` stands right before `word` or right after it, one word between at most
    ("a despesa mais recente", "the latest SEV2 incident", "o último chamado").
    """
    p, w = len(phrase.split()), len(word.split())
    # the cue, then at most one word (an article, a value: "SEV2"); or the entity, then the cue
    return any(j in (i + p, i + p + 1) for i in phrase_starts(tokens, phrase) for j in phrase_starts(tokens, word)) \
        or any(j in (i + w, i + w + 1) for i in phrase_starts(tokens, word) for j in phrase_starts(tokens, phrase))


def _ends_with(words: list[str], phrase: str) -> bool:
    """Whether the folded `words` end with `phrase` as `_says` reads it, or with it and one article."""
    n = len(fold(phrase).split())
    return bool(n) and any(len(words) >= n + extra and _says(words[len(words) - n - extra:len(words) - extra], phrase)
                           and (not extra or words[-1] in _ARTICLES) for extra in (0, 1))


def _says(words: list[str], phrase: str) -> bool:
    """Whether the folded words hold `phrase` word for word, each word maybe in the plural and a
    word of two letters or less maybe contracted ("atribuídos ao" says "atribuído a"; "quem mais
    aprovou" does not say "de quem", nor "approved meal" "approved by").
    """
    key = fold(phrase).split()
    n = len(key)

    def same(w: str, k: str) -> bool:
        return w in (k, k + "s", k + "es") or (len(k) <= 2 and w.startswith(k))

    return bool(key) and any(all(same(w, k) for w, k in zip(words[i:i + n], key, strict=True))
                             for i in range(len(words) - n + 1))


def _asks_number(tokens: list[str], text: str, synonyms: Iterable[str]) -> bool:
    """Whether the question asks for a number or a ranking: a superlative or breakdown word, an
    aggregation cue, or a count's own words (`synonyms`: "headcount").
    """
    cues = folded_cues()
    return bool((cues.superlatives | cues.breakdown) & set(tokens)) or \
        any(f" {w} " in text for words in cues.aggregations.values() for w in words) or \
        any(_has(text, w) for w in synonyms)


def _has(text: str, words: str) -> bool:
    """Whole-word, accent- and case-insensitive; a trailing 's' is optional (plural), on each word
    of a phrase ("atribuídos a" says "atribuído a").
    """
    key = " ".join(fold(words).split())
    if not key:
        return False
    if f" {key} " in text or f" {key}s " in text or (key.endswith("s") and f" {key[:-1]} " in text):
        return True
    return " " in key and _plural_phrase(key).search(text) is not None


@lru_cache(maxsize=4096)
def _plural_phrase(key: str) -> re.Pattern[str]:
    """A folded phrase whose words may each be said in the plural or the singular."""
    forms = [re.escape(w[:-1]) + "s?" if w.endswith("s") and len(w) > 3 else re.escape(w) + "s?"
             for w in key.split()]
    return re.compile(" " + " ".join(forms) + " ")


def _match_value(value: str, known: list[str], synonyms: dict[str, list[str]], *, loose: bool = True) -> str | None:
    if value in known:
        return value
    key = fold(value)
    for v in known:
        if fold(v) == key:
            return v
    for stored, words in synonyms.items():
        if any(fold(w) == key for w in words):
            return stored
    if not loose or not key:
        return None
    inside = [v for v in known if f" {key} " in f" {fold(v)} " or f" {fold(v)} " in f" {key} "]
    return inside[0] if len(inside) == 1 else None


def _check_shape(name: str, op: str, value: Any) -> None:
    if op in ("in", "not_in", "between"):
        if not isinstance(value, list) or not value or (op == "between" and len(value) != 2):
            raise SemanticQueryError(f"{name}: {op} takes a list" + (" of two values" if op == "between" else ""))
    elif op in ("is_null", "not_null"):
        return
    elif isinstance(value, list) or value is None:
        raise SemanticQueryError(f"{name}: {op} takes one value")


def _as_number(value: Any) -> float | None:
    """A filter's single value as a number; None for a list, a text or nothing."""
    if isinstance(value, bool) or isinstance(value, list) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _number(name: str, op: str, value: Any) -> Any:
    _check_shape(name, op, value)
    if value is None:
        return None

    def one(v: Any) -> float | int:
        try:
            f = float(str(v).replace(",", "")) if not isinstance(v, (int, float)) else float(v)
        except ValueError as exc:
            raise SemanticQueryError(f"{name}: {v!r} is not a number") from exc
        return int(f) if f.is_integer() else f

    return [one(v) for v in value] if isinstance(value, list) else one(value)


def _is_exact_timestamp(v: Any) -> bool:
    return bool(re.match(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}", str(v)))


def _any(preds: Iterable[Any]) -> Any:
    out = None
    for p in preds:
        out = p if out is None else (out | p)
    return out


def _tree(plan: Plan, spec: SemanticModelSpec) -> dict[tuple[tuple[str, str], ...], str]:
    """Every join path the query needs (with its prefixes) -> the entity at its end."""
    nodes: dict[tuple[tuple[str, str], ...], str] = {(): plan.base}
    for ref in plan.refs.values():
        for i in range(1, len(ref.path) + 1):
            owner, jname = ref.path[i - 1]
            nodes[ref.path[:i]] = spec.entities[owner].joins[jname].entity
    return nodes


def _aliases(plan: Plan, nodes: dict[tuple[tuple[str, str], ...], str]) -> dict[tuple[tuple[str, str], ...], str]:
    """One unique name per joined table: the name the query used for it, else the join's name."""
    used: dict[tuple[tuple[str, str], ...], str] = {(): plan.base}
    for name, ref in plan.refs.items():
        used.setdefault(ref.path, name.split(".", 1)[0])
    out: dict[tuple[tuple[str, str], ...], str] = {}
    taken: set[str] = set()
    for path in sorted(nodes, key=len):
        alias = used.get(path) or path[-1][1]
        base_alias, n = alias, 2
        while alias in taken:
            alias, n = f"{base_alias}_{n}", n + 1
        taken.add(alias)
        out[path] = alias
    return out


def _ibis_type(kind: ColumnKind) -> str:
    return {"string": "string", "integer": "int64", "number": "float64", "date": "date", "timestamp": "timestamp",
            "boolean": "boolean"}[kind]


def _dim_expr(column: str, expr: str | None) -> Callable[[Any], Any]:
    if expr is None:
        return lambda t: t[column]
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(expr)
    expr_columns(expr)  # checked when the model loaded; repeated so this function stands alone

    def build(node: exp.Expr, t: Any) -> Any:
        if isinstance(node, exp.Paren):
            return build(node.this, t)
        if isinstance(node, exp.Neg):
            return -build(node.this, t)
        if isinstance(node, exp.Column):
            return t[node.name]
        if isinstance(node, exp.Literal):
            return float(node.this) if "." in node.this else int(node.this)
        ops: dict[type, Callable[[Any, Any], Any]] = {exp.Add: lambda a, b: a + b, exp.Sub: lambda a, b: a - b,
                                                      exp.Mul: lambda a, b: a * b, exp.Div: lambda a, b: a / b}
        return ops[type(node)](build(node.this, t), build(node.expression, t))

    return lambda t: build(tree, t)


def _measure_expr(agg: str, column: str | None, expr: str | None) -> Callable[[Any], Any]:
    if agg == "count" and column is None:
        return lambda t: t.count()
    value = _dim_expr(column or "", expr)
    fns: dict[str, Callable[[Any], Any]] = {
        "count": lambda c: c.count(), "sum": lambda c: c.sum(), "avg": lambda c: c.mean(), "min": lambda c: c.min(),
        "max": lambda c: c.max(), "count_distinct": lambda c: c.nunique()}
    fn = fns[agg]
    return lambda t: fn(value(t))


# sqlglot's optimizer without the rules that change types or simplify expressions: it only merges
# the library's nested subqueries and drops unused columns, so the SQL reads like a person's.
_TIDY_RULES = ("qualify", "pushdown_projections", "unnest_subqueries", "eliminate_subqueries", "merge_subqueries",
               "eliminate_joins", "eliminate_ctes", "quote_identifiers")


def _tidy(sql: str, dialect: str, schema: dict[str, object]) -> str:
    try:
        import sqlglot
        from sqlglot.optimizer import RULES, optimize

        rules = [r for r in RULES if getattr(r, "__name__", "") in _TIDY_RULES]
        tree = optimize(sqlglot.parse_one(sql, read=dialect), schema=schema, dialect=dialect, rules=rules)
        return str(tree.sql(dialect=dialect))
    except Exception:  # noqa: BLE001 - tidying is cosmetic: the library's SQL is correct as it is
        return sql


def _without_columns(sql: str, names: list[str], dialect: str) -> str:
    """`sql` with the outermost projections named `names` left out; the ORDER BY still reads them
    from the subquery. Why: the library orders only by selected fields, and a key that only orders a
    list of names is not what the question asked to see. Unchanged when that cannot be done safely
    (a DISTINCT, which orders only by what it selects, or SQL sqlglot does not parse).
    """
    try:
        import sqlglot
        from sqlglot import exp

        tree = sqlglot.parse_one(sql, read=dialect)
        if not isinstance(tree, exp.Select) or tree.args.get("distinct"):
            return sql
        kept = [e for e in tree.expressions if e.alias_or_name not in names]
        if not kept or len(kept) == len(tree.expressions):
            return sql
        tree.set("expressions", kept)
        return str(tree.sql(dialect=dialect))
    except Exception:  # noqa: BLE001 - the key shown is a cosmetic loss, not a wrong answer
        return sql


# --------------------------------------------------------------------------- load and answer

_lock = threading.Lock()


def layer_for(model_path: Path, tool: Any) -> SemanticLayer:
    """The layer for a model file and a SQL tool (its dialect and schema), rebuilt when the file
    changes. Raises `PolicyError` (file and field named) for an invalid model.
    """
    mtime = model_path.stat().st_mtime_ns if model_path.exists() else 0
    with _lock:
        return _layer(str(model_path), mtime, str(tool.schema_path), tool.dialect)


@lru_cache(maxsize=8)
def _layer(path: str, _mtime: int, schema_path: str, dialect: str) -> SemanticLayer:
    from tools.sql_schema import load_schema

    spec = load_semantic_model(Path(path))
    return SemanticLayer(spec, catalog_from_schema(load_schema(Path(schema_path))), dialect, source=path,
                         compile_examples=False)


_values_cache: dict[tuple[str, str, str], tuple[float, list[str] | None]] = {}
_VALUES_SECONDS = 300.0


def _holds(tool: Any, indexed: Collection[tuple[str, str]]) -> Callable[[str, str, str], bool]:
    """Whether a column stores a value (any case): an indexed column was matched against the
    question already, so it does not; another is asked through the tool's read-only queries, and
    a read that fails counts as holding it (nothing is moved on a guess).
    """

    def holds(table: str, column: str, value: str) -> bool:
        if (table, column) in indexed:
            return False
        quoted = value.replace("'", "''")
        try:
            return bool(tool.query(f'SELECT 1 AS x FROM "{table}" WHERE LOWER("{column}") = LOWER(\'{quoted}\') LIMIT 1'))
        except Exception:  # noqa: BLE001 - a column that cannot be read keeps its filter
            return True

    return holds


def stored_values(tool: Any) -> Callable[[str, str], list[str] | None]:
    """Distinct values of a text column read through the tool's own validated, read-only queries
    (`tools.sql_values.read_values`: None for free text or a column too large to list).
    """
    from tools.sql_values import read_values

    def read(table: str, column: str) -> list[str] | None:
        key = (tool.url, table, column)
        hit = _values_cache.get(key)
        if hit and time.monotonic() - hit[0] < _VALUES_SECONDS:
            return hit[1]
        values = read_values(tool.query, [(table, column)]).get((table, column))
        _values_cache[key] = (time.monotonic(), values)
        return values

    return read


@dataclass
class SemanticRun:
    """The semantic path's outcome: rows, or `reason` why raw text-to-SQL should answer instead."""

    ok: bool = False
    query_object: dict[str, Any] | None = None
    sql: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 0
    reason: str = ""
    fatal: bool = False  # the database is down: falling back cannot help
    settled: list[str] = field(default_factory=list)  # dimensions `SemanticLayer.settle` dropped, and why
    direct: bool = False  # filled by `tools.semantic_direct` without an LLM call
    document: str = ""  # the document figure that bounds the query (`SemanticLayer.document_bound`), no LLM call
    accounted: dict[str, str] = field(default_factory=dict)  # the direct fill: each word -> what it stands for
    repairable: bool = False  # the last refusal is one the LLM may correct (a SemanticQueryError)


def pointing_words(question: str) -> list[str]:
    """The question's words that point at something named before ("esses", "that", "ela"), in
    order: `reference_words` and `pronouns` in the cue file.
    """
    cues = folded_cues()
    return [w for w in re.findall(r"\w+", fold(question)) if w in cues.pointers]


def pointed_phrases(text: str) -> list[str]:
    """The one or two words right after each word of `text` that points back, space-padded ("esse
    projeto" gives " projeto "): what the pointing word means, when they name a kind.
    """
    cues = folded_cues()
    tokens = re.findall(r"\w+", fold(text))
    return [f" {' '.join(tokens[i + 1:i + 3])} " for i, t in enumerate(tokens) if t in cues.pointers]


def points_back(question: str) -> bool:
    """Whether the question says a word that points at something named before (`pointing_words`)."""
    return bool(pointing_words(question))


def heard_before(question: str, given: Sequence[Finding]) -> list[Finding]:
    """What earlier sources found that the question may take values from: their passages only when
    it points back at them (`points_back`: "how many incidents has that person commanded?"); the
    sets their rows are, always.

    Why: otherwise the passages' names are another answer's words. "Which employee has the highest
    approval limit?", after the expense policy was read, was filled with the policy's approver
    roles and answered with the CFO, not the CEO.
    """
    return list(given) if points_back(question) else [replace(f, text="") for f in given]


def earlier_values(index: Any, given: Sequence[Finding]
                   ) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, tuple[str, ...]]]]:
    """What earlier backends of the turn found, in the database's terms: (the stored values their
    rows or passages name, as value hits; the sets their rows are, as (table, column, values) where
    every value of a result column is stored in that one column).
    """
    from tools.sql_values import fold as value_fold

    hits: list[tuple[str, str, str]] = []
    bound: list[tuple[str, str, tuple[str, ...]]] = []
    for f in given:
        if f.text:
            hits += index.triples(f.text)
        if not f.values:
            continue
        stored: list[dict[tuple[str, str], str]] = []  # per value: column -> the value as that column stores it
        for value in f.values:
            stored.append({(h.table, h.column): h.value for h in index.match(value)
                           if value_fold(h.value) == value_fold(value)})
            hits += [(t, c, v) for (t, c), v in stored[-1].items()]
        common = set.intersection(*(set(m) for m in stored)) if stored else set()
        # a column that stores the values exactly as the rows show them first (ids before names)
        ranked = sorted(common, key=lambda tc: (-sum(m[tc] == v for m, v in zip(stored, f.values, strict=True)), tc))
        bound += [(t, c, tuple(m[(t, c)] for m in stored)) for t, c in ranked]
    return list(dict.fromkeys(hits)), bound


@dataclass
class DocumentFigures:
    """The figures of the passages an earlier stage found, as the semantic fill reads them."""

    lines: list[str] = field(default_factory=list)  # hint lines (`SemanticLayer.figure_hints`)
    chosen: list[Figure] = field(default_factory=list)  # the figures whose rows name the question's values
    found: list[Figure] = field(default_factory=list)  # every figure of the passages
    asked: set[str] = field(default_factory=set)  # the stored values the question names
    named: Callable[[str], set[str]] | None = None  # a text's stored values, memoised


def document_figures(layer: SemanticLayer, index: Any, question: str, passages: str,
                     hits: Sequence[tuple[str, str, str]], today: str) -> DocumentFigures:
    """The figures of the passages an earlier stage found, the hint lines for those that bound the
    rows the question names (`SemanticLayer.figure_hints`), and the stored values it names; empty
    without passages or figures.
    """
    from tools.doc_figures import figures

    found = figures(passages) if passages.strip() else []
    if not found:
        return DocumentFigures()
    asked = layer.named_values(question, hits, today)
    keys: dict[str, set[str]] = {}

    def named(text: str) -> set[str]:
        if text not in keys:
            keys[text] = layer.named_values(text, index.triples(text), today)
        return keys[text]

    lines, chosen = layer.figure_hints(question, asked, found, today, named) if asked else ([], [])
    return DocumentFigures(lines, chosen, found, asked, named)


def answer_semantic(question: str, tool: Any, model_path: Path, *, today: str, backend: str | None,
                    usage: Any, given: Sequence[Finding] = (), found: Sequence[str] = ()) -> SemanticRun:
    """Fill the query object with ONE LLM call (none when `tools.semantic_direct` accounts for every
    word), compile it, run it through `tool.query`; a refusal is shown to the LLM once
    (`MAX_REPAIRS`), then the run reports why it gave up. `given`: what
    earlier backends of the turn found; their names are hints, and a set their rows form bounds a
    query whose question part names no stored value of its own (`SemanticLayer.bind`). `found`: the
    values the user did not say that the query may be bounded by (`SemanticLayer.show_found`).
    """
    from tools.database import DatabaseUnavailable
    from tools.llm import LLMError, structured_call
    from tools.semantic_direct import direct_query
    from tools.sql_schema import load_schema
    from tools.sql_values import value_index

    run = SemanticRun()
    try:
        layer = layer_for(model_path, tool)
    except (PolicyError, OSError) as exc:
        run.reason = f"semantic model unavailable: {exc}"[:400]
        return run
    try:
        index = value_index(tool.url, tool.query, load_schema(tool.schema_path))
        hits = index.triples(question)
    except DatabaseUnavailable as exc:
        run.reason, run.fatal = str(exc)[:400], True
        return run
    earlier, bound = earlier_values(index, heard_before(question, given))
    own = layer.names_values(hits)
    unsaid = {fold(v) for v in found} | ({fold(v) for _, _, v in earlier} - {fold(v) for _, _, v in hits})
    direct = direct_query(layer, question, hits, today, bound)
    if direct is not None:  # every word accounted for: no LLM call
        run.direct, run.settled, run.accounted = True, list(direct.settled), dict(direct.words)
        q = direct.query
        if not own and not direct.bound:
            q, bound_note = layer.bind(q, bound, question)
            run.settled += bound_note
        q, shown = layer.show_found(q, unsaid)
        run.settled += shown
        if _execute(layer, q, tool, run) or run.fatal:
            return run
        run.direct, run.accounted = False, {}
        run.settled = [f"direct fill refused ({run.reason}); the LLM fills the query"]
        run.sql, run.rows, run.reason = "", [], ""
    hints = layer.hints(question, [*hits, *earlier], today)
    by_column = layer.column_dimensions
    hints += [f"earlier answer: {by_column[(t, c)][0]} in {list(v)!r}" for t, c, v in bound if by_column.get((t, c))]
    # the whole documents found, when a backend read them (`passages`), else the passages shown
    passages = "\n".join(f.passages for f in given if f.passages) or "\n".join(f.text for f in given if f.text)
    doc = document_figures(layer, index, question, passages, hits, today)
    hints += doc.lines
    figures = doc.chosen
    bounded = layer.document_bound(question, doc.asked, doc.found, doc.named) if doc.found else None
    if bounded is not None:  # the rows a document's figures bound: no LLM call
        read = [layer.read_periods(q, question, today) for q in bounded[0]]
        run.document, run.settled = bounded[1], [bounded[1], *read[0][1]]
        if _execute_all(layer, [q for q, _ in read], tool, run) or run.fatal:
            return run
        run.document, run.settled = "", [f"document bound refused ({run.reason}); the LLM fills the query"]
        run.sql, run.rows, run.reason = "", [], ""
    static = _static(layer)
    asked = question
    for attempt in range(MAX_REPAIRS + 1):
        run.attempts = attempt + 1
        try:
            out = structured_call("text_to_sql", layer.query_model, "semantic_query", backend=backend, usage=usage,
                                  today=today, hints="; ".join(hints) or "(none)", question=asked, **static)
        except LLMError as exc:
            run.reason = f"LLM: {exc}"[:400]
            return run
        try:
            q = layer.parse(out)
        except SemanticQueryError as exc:
            run.reason = str(exc)[:400]
            return run
        q, recounted = layer.recount(q, question)
        q, periods = layer.read_periods(q, question, today)
        q, spans = layer.read_durations(q, question, today)
        periods += spans
        q, figured = layer.rebase_figures(q, figures)
        if not figures:  # no document's figure bounds the rows: one the question states may
            q, stated = layer.stated_bound(q, question, layer.named_values(question, hits, today))
            figured += stated
        q, rebased = layer.rebase_measures(q)
        q, settled = layer.settle(q, question, heard=[v for _, _, v in [*hits, *earlier]])
        q, moved = layer.relink_heard(q, hits, _holds(tool, index.columns))
        q, keyed = layer.bind(q, layer.unfiltered_keys(q, hits), question, source="a key the question writes")
        run.settled += [*recounted, *periods, *figured, *rebased, *settled, *moved, *keyed]
        if not own:  # a part that names no stored value of its own is about the earlier set
            q, bound_note = layer.bind(q, bound, question)
            run.settled += bound_note
        q, shown = layer.show_found(q, unsaid)
        run.settled += shown
        run.query_object = q.as_json()
        if not q.expressible:
            run.reason = "the model says the semantic layer cannot express this question"
            return run
        if _execute(layer, q, tool, run) or run.fatal or not run.repairable:
            return run
        asked = (f"{question}\n(Your previous query {json.dumps(run.query_object, ensure_ascii=False)} was refused: "
                 f"{run.reason}. Write a corrected query, or expressible=false.)")
    return run


def answer_object(data: dict[str, Any], tool: Any, model_path: Path) -> SemanticRun:
    """Compile and run a query object that software built (a mirrored graph pattern's database
    form, filled by the pattern's typed extraction), with no LLM call; a refusal is the run's
    reason, and the caller falls back to the LLM's fill.
    """
    from tools.database import DatabaseUnavailable

    run = SemanticRun(direct=True)
    try:
        layer = layer_for(model_path, tool)
        q = layer.parse({**data, "expressible": True})
    except DatabaseUnavailable as exc:
        run.reason, run.fatal = str(exc)[:400], True
        return run
    except (PolicyError, OSError, SemanticQueryError) as exc:
        run.reason = f"query object refused: {exc}"[:400]
        return run
    # the pattern's typed extraction resolved each key: one no row holds (a manager with no
    # reports) is an empty answer, not a value to move to the column that holds it (the person)
    _execute(layer, q, tool, run, link=False)
    return run


def _zero_groups(layer: SemanticLayer, q: QueryObject, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`rows` of a count per one dimension whose values an `in` filter lists, with a zero row for
    each listed value no row counts, in the filter's order after the counted ones.

    Why: "how many open tickets does each of them have" over six services found rows for five;
    the small model gave the sixth a count of its own making. A count over no rows is zero.
    """
    if len(q.dimensions) != 1 or not q.measures or not rows or q.limit is not None:
        return rows
    dim = q.dimensions[0]
    counts = [layer._measure(m) for m in q.measures]
    listed = [v for f, o, v in q.filters if f == dim and o == "in" and isinstance(v, list)]
    if len(listed) != 1 or not all(c is not None and c[2].agg in ("count", "count_distinct") for c in counts) \
            or any(set(r) != {dim, *q.measures} for r in rows):
        return rows
    seen = {str(r[dim]) for r in rows}
    return [*rows, *({dim: v, **dict.fromkeys(q.measures, 0)} for v in listed[0] if str(v) not in seen)]


def _static(layer: SemanticLayer) -> dict[str, str]:
    """The query prompt's static prefix values: the model and its worked examples."""
    return {"model": layer.describe(), "examples": layer.examples_text()}


def warm_semantic(tool: Any, model_path: Path, *, backend: str | None) -> object:
    """Evaluate the query prompt's static prefix (the longest one tramita has) ahead of the first question."""
    from tools.llm import warm

    return warm("text_to_sql", "semantic_query", backend=backend, **_static(layer_for(model_path, tool)))


def _execute_all(layer: SemanticLayer, queries: Sequence[QueryObject], tool: Any, run: SemanticRun,
                 link: bool = True) -> bool:
    """Compile the queries and run them through `tool.query` into `run`; False with `run.reason`
    (and `run.fatal` when the database is down, `run.repairable` when the LLM may correct it)
    otherwise. Several queries of the same columns (a document's figure per row of its table) run
    as one statement, their rows together in the first column's order, or the sum of their counts
    when each part is one count: one query for the trace and the scorer, through the same
    read-only guard. `link` False: the filters' values are resolved keys, compiled as they are
    (value linking would move a key no row holds in its column to a column that holds it).
    """
    from tools.database import DatabaseUnavailable

    run.query_object = queries[0].as_json() if len(queries) == 1 else {"union_all": [q.as_json() for q in queries]}
    run.repairable = False
    try:
        values = stored_values(tool) if link else None
        compiled = [layer.compile(q, values) for q in queries]
        if len(compiled) == 1:
            run.query_object, run.sql = compiled[0].query.as_json(), compiled[0].sql
        else:
            run.sql = _union([c.sql for c in compiled], queries)
        run.rows = tool.query(run.sql)
        if len(compiled) == 1:
            run.rows = _zero_groups(layer, compiled[0].query, run.rows)
        run.ok = True
        return True
    except SemanticQueryError as exc:
        run.reason, run.repairable = str(exc)[:400], True
    except DatabaseUnavailable as exc:
        run.reason, run.fatal = str(exc)[:400], True
    except Exception as exc:  # noqa: BLE001 - a guard refusal or an engine error: another path answers instead
        run.reason = f"{type(exc).__name__}: {exc}"[:400]
    return False


def _union(parts: Sequence[str], queries: Sequence[QueryObject]) -> str:
    """The compiled `parts` as one statement: their rows in the first column's order, or the sum
    of their counts when each part is one count and nothing else.
    """
    union = " UNION ALL ".join(f"SELECT * FROM ({sql}) AS part{i}" for i, sql in enumerate(parts))
    counts = {m for q in queries for m in q.measures}
    if len(counts) == 1 and not any(q.dimensions for q in queries):
        name = counts.pop()
        return f'SELECT SUM("{name}") AS "{name}" FROM ({union}) AS figures'
    return f"SELECT * FROM ({union}) AS figures ORDER BY 1"


def _execute(layer: SemanticLayer, q: QueryObject, tool: Any, run: SemanticRun, link: bool = True) -> bool:
    """`_execute_all` for one query."""
    return _execute_all(layer, [q], tool, run, link)


def check_model(path: Path, engine: Any) -> dict[str, int]:
    """`tramita ingest`'s check: the model file against the live database (tables, columns, join
    keys; `tools.semantic_model.validate_against_database`), then every worked example compiled for
    the database's dialect. `PolicyError` names the file and the entry.
    """
    from tools.semantic_model import catalog_from_engine, validate_against_database

    counts = validate_against_database(path, engine)
    spec = load_semantic_model(path)
    catalog = catalog_from_engine(engine, [e.table_name(n) for n, e in spec.entities.items()])
    dialect = "postgres" if engine.dialect.name.startswith("postgres") else engine.dialect.name
    SemanticLayer(spec, catalog, dialect, source=str(path))
    return {**counts, "examples": len(spec.examples)}
