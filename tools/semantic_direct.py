"""The direct fill: a count or a list of one entity, with the filters the question says, built from the
semantic model without an LLM call.

Why: on 2 cores the call that fills a query object costs seconds, and for "how many open P1 tickets
are there?" it can only add what the question does not say. So a question is filled here when EVERY
word of it is accounted for by the model (`tools.semantic_model`) or by the cue file
(`policies/query_cues.yaml`):
- a count or aggregation cue ("how many", "quantos", "average") or a list cue ("which", "liste"),
  followed by the entity it counts or lists, with only values, segments and carrier words between;
  or no cue at all, and words for columns of the entity (a lookup: "Juliana Costa approval limit?");
- stored values the database's value index found, or the model's words for a value;
- one period (a year, ISO week, quarter, month, or a calendar phrase) on the date the question
  names, or else on the entity's `time_dimension` (or its only date);
- a segment, the words for a filtered column or for the role a filter goes through;
- carrier words (articles, auxiliaries, "now");
- in a later stage of a two-part question, a reference word ("those services", "esses serviços") to
  the set an earlier source found, which then bounds the query (`SemanticLayer.bind`).

Anything else (a number, a negation, a superlative, "per", a column to show, an unknown verb) leaves
the question to the LLM fill, which sees it as before. Exactly one entity must read the question
this way. The query then goes through `SemanticLayer.settle` like the LLM's, so a list question
shows the rows behind the count.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tools.semantic_layer import (
    QueryObject,
    SemanticLayer,
    SemanticQueryError,
    folded_cues,
    period_bounds,
    query_cue_file,
    question_periods,
)
from tramita.base.text import fold

__all__ = ["DirectFill", "direct_query"]

_TOKEN = re.compile(r"[^\W_]+")
# a period written as the dataset writes it: 2026, 2026-Q2, 2026-W15, 2026-H1, 2026-03 (not inside an id)
_LITERAL_PERIOD = re.compile(r"(?<![\w-])((?:19|20)\d\d)(?:-(q[1-4]|w\d{1,2}|h[12]|\d{2}))?(?![\w-])")
_GRAIN_EXTRA = ("iso",)  # "ISO week 2026-W15": part of the week's name, not a word of its own


@dataclass(frozen=True)
class Mention:
    """A run of question words [start, end) and what it may stand for."""

    start: int
    end: int
    kind: str  # agg | list | person | value | segment | entity | role | column | period | grain | carrier | reference
    name: str = ""  # entity, entity.dimension, entity.segment, entity.measure, owner.role
    value: Any = None  # a stored value, a period, an aggregation, or the role's target entity


@dataclass(frozen=True)
class DirectFill:
    """The query object, what `settle` changed, and which words accounted for what (for the trace)."""

    query: QueryObject
    settled: list[str] = field(default_factory=list)
    words: dict[str, str] = field(default_factory=dict)
    bound: bool = False  # a reference word bounded the query by an earlier source's set (`SemanticLayer.bind`)


def _tokens(text: str) -> list[re.Match[str]]:
    return list(_TOKEN.finditer(text))


def _find(words: list[str], phrase: str) -> list[tuple[int, int]]:
    """Where the phrase's words occur in `words`; a trailing 's' is optional, as in `_has`."""
    key = _TOKEN.findall(fold(phrase))
    n = len(key)
    out: list[tuple[int, int]] = []
    if not n:
        return out
    for i in range(len(words) - n + 1):
        run = words[i:i + n]
        last, k = run[-1], key[-1]
        if run[:-1] == key[:-1] and (last in (k, k + "s") or (k.endswith("s") and last == k[:-1])):
            out.append((i, i + n))
    return out


def _covering(toks: list[re.Match[str]], start: int, end: int) -> tuple[int, int] | None:
    """The token range inside the character span [start, end)."""
    inside = [i for i, t in enumerate(toks) if t.start() >= start and t.end() <= end]
    return (inside[0], inside[-1] + 1) if inside else None


def _literal_period(m: re.Match[str]) -> str | None:
    year, part = m.group(1), m.group(2)
    if not part:
        period = year
    elif part[0] in "qh":
        period = f"{year}-{part.upper()}"
    elif part[0] == "w":
        period = f"{year}-W{int(part[1:]):02d}"
    else:
        period = f"{year}-{part}"
    try:
        period_bounds(period)
    except SemanticQueryError:
        return None
    return period


def _mentions(layer: SemanticLayer, question: str, hits: list[tuple[str, str, str]], today: str
              ) -> tuple[list[str], list[Mention]]:
    """Every reading of every run of words that the model and the cue file know."""
    text = fold(question)
    toks = _tokens(text)
    words = [t.group(0) for t in toks]
    out: list[Mention] = []

    def add(phrase: str, kind: str, name: str = "", value: Any = None) -> None:
        out.extend(Mention(s, e, kind, name, value) for s, e in _find(words, phrase))

    for m in _LITERAL_PERIOD.finditer(text):
        period, span = _literal_period(m), _covering(toks, m.start(), m.end())
        if period and span:
            out.append(Mention(*span, "period", value=period))
    for said, period in question_periods(question, today):
        at = text.find(said)
        span = _covering(toks, at, at + len(said)) if at >= 0 else None
        if span:
            out.append(Mention(*span, "period", value=period))
    cues = query_cue_file()
    for kind, by_language in (("grain", cues.grain_words), ("list", cues.list_cues), ("person", cues.person_cues),
                              ("carrier", cues.carrier_words), ("reference", cues.reference_words)):
        for w in (w for ws in by_language.values() for w in ws):
            add(w, kind)
    for w in _GRAIN_EXTRA:
        add(w, "grain")
    for agg, phrases in folded_cues().aggregations.items():
        for w in phrases:
            add(w, "agg", value=agg)
    superlatives = folded_cues().superlatives
    by_column = layer.column_dimensions
    for table, column, value in hits:
        for name in by_column.get((table, column), []):
            add(value, "value", name, value)
    for ename, ent in layer.spec.entities.items():
        for w in [ename.replace("_", " "), *ent.synonyms]:
            add(w, "entity", ename)
        for mname, meas in ent.measures.items():
            for w in meas.synonyms:
                if fold(w) not in superlatives:  # "maior despesa" asks for a row, not only the maximum
                    add(w, "agg", f"{ename}.{mname}", meas.agg)
        for sname, seg in ent.segments.items():
            for w in [sname.replace("_", " "), *seg.synonyms]:
                add(w, "segment", f"{ename}.{sname}")
        for jname, join in ent.joins.items():
            for w in join.synonyms:
                add(w, "role", f"{ename}.{jname}", join.entity)
        for dname, dim in ent.dimensions.items():
            for w in [dname.replace("_", " "), *dim.synonyms]:
                add(w, "column", f"{ename}.{dname}")
            for stored, syns in dim.values.items():
                for w in [stored, *syns]:
                    add(w, "value", f"{ename}.{dname}", stored)
    return words, out


def direct_query(layer: SemanticLayer, question: str, hits: list[tuple[str, str, str]], today: str,
                 bound: Sequence[tuple[str, str, Sequence[str]]] = ()) -> DirectFill | None:
    """The query object for a count, aggregate, list or lookup question that the model accounts for
    word by word, or None (the LLM fills it). `hits`: the value index's (table, column, value) for
    the question; `bound`: the sets earlier sources of the turn found (`earlier_values`), which a
    reference word ("those services") points at: the query is then bounded by the set
    (`SemanticLayer.bind`), or not filled here at all.
    """
    words, mentions = _mentions(layer, question, hits, today)
    if not words:
        return None
    # a value inside a longer segment phrase is part of it ("não resolvidos"), and the other way round
    named = [m for m in mentions if m.kind in ("value", "segment")]
    mentions = [m for m in mentions if m.kind not in ("value", "segment") or not any(
        o.kind != m.kind and o.start <= m.start and m.end <= o.end and o.end - o.start > m.end - m.start
        for o in named)]
    # a who-question names the entity whose role it asks about by the role alone ("who leads X?")
    asks_who = any(m.kind == "person" for m in mentions)
    bases = sorted({m.name for m in mentions if m.kind == "entity"}
                   | {m.name.split(".", 1)[0] for m in mentions if m.kind in ("agg", "column") and m.name}
                   | {m.name.split(".", 1)[0] for m in mentions if m.kind == "role" and asks_who})
    fills = [f for b in bases if (f := _read_as(layer, b, question, words, mentions, hits, bound)) is not None]
    return fills[0] if len(fills) == 1 else None


def _read_as(layer: SemanticLayer, base: str, question: str, words: list[str], mentions: list[Mention],
             hits: list[tuple[str, str, str]], bound: Sequence[tuple[str, str, Sequence[str]]] = ()
             ) -> DirectFill | None:
    """The question read with `base` as the entity counted, aggregated, listed or looked up, if
    every word fits that reading. A lookup has no aggregation or list cue: it names columns of the
    base ("Juliana Costa approval limit?") and values that pick the rows.
    """
    ent = layer.spec.entities[base]
    kept: list[Mention] = [m for m in mentions if m.kind == "carrier"]
    asks = [m for m in mentions if m.kind in ("agg", "list") and (not m.name or m.name.split(".", 1)[0] == base)]
    if len({(m.kind, m.value) for m in asks}) > 1:
        return None  # two aggregations, or an aggregate and a list
    measure = _measure(base, ent, asks, mentions) if asks else None
    if asks and measure is None:
        return None
    kept += asks
    if measure and measure.column:
        kept += [m for m in mentions if m.kind == "column" and m.name == f"{base}.{measure.column}"]
    roles = {m.name.split(".", 1)[1]: m for m in mentions if m.kind == "role"}
    # values: each through the base's own column, a role the question names, or the default join
    chosen: dict[tuple[int, int], list[tuple[int, str, Any, Mention, str]]] = {}
    # words that name a segment of the base itself ("active tickets") are that, not a value of a
    # joined entity that happens to be spelt the same (the service's status 'active')
    own_segments = {(m.start, m.end) for m in mentions if m.kind == "segment" and m.name.split(".", 1)[0] == base}
    for m in (m for m in mentions if m.kind == "value" and (m.start, m.end) not in own_segments):
        owner, member = m.name.split(".", 1)
        names = [f"{r}.{member}" for r, rm in roles.items() if rm.value == owner] + [m.name]
        for name in names:
            ref = layer.resolve(name, base, "dimension")
            if ref is None:
                continue
            chosen.setdefault((m.start, m.end), []).append((len(ref.path), name, m.value, m, ref.entity))
            break
    filters: list[tuple[str, str, Any]] = []
    said_at: list[tuple[int, int]] = []  # the words of each filter's value
    reached: set[str] = {base}
    used_roles: set[str] = set()
    spans = sorted(chosen, key=lambda s: (s[0], -(s[1] - s[0])))
    taken: set[int] = set()
    verbatim = question.casefold()
    for span in spans:
        if taken & set(range(*span)):
            continue  # a longer value at the same words won ("Plataforma de Dados" over "Plataforma")
        # nearest the base first; at one distance, a value as the question writes it ('search-service')
        options = sorted({(n, name, value, ent_) for n, name, value, _, ent_ in chosen[span]},
                         key=lambda o: (o[0], str(o[2]).casefold() not in verbatim, o[1]))
        near = [o for o in options if o[0] == options[0][0]]
        if len({o[3] for o in near}) > 1:
            return None  # the words name values of two entities equally near the base
        _, name, value, reached_entity = options[0]
        filters.append((name, "=", value))
        said_at.append(span)
        reached.add(reached_entity)
        used_roles.add(name.split(".", 1)[0])
        taken |= set(range(*span))
        kept.append(next(m for _, n, _, m, _ in chosen[span] if n == name))
    filtered = {name for name, _, _ in filters}
    # one period, on the base's date the question names, or its only date
    periods = {m.value for m in _outer(mentions, "period")}
    if len(periods) > 1:
        return None
    dated = [d for d, dim in ent.dimensions.items() if dim.time_grains]
    if periods:
        named = sorted({m.name for m in mentions if m.kind == "column" and m.name.split(".", 1)[1] in dated
                        and m.name.split(".", 1)[0] == base})
        period = next(iter(periods))
        default = layer.period_home(base, period) or ent.period_dimension()  # a budget "do 3º trimestre": its quarter
        date = named[0] if len(named) == 1 else f"{base}.{default}" if default and not named else None
        if date is None:
            return None
        if _state_or_event(ent, [words[i] for m in kept if m.kind == "value" for i in range(m.start, m.end)]):
            return None
        filters.append((date, "=", periods.pop()))
        filtered.add(date)
        kept += [m for m in mentions if m.kind == "period"]
        kept += _grains_before_period(mentions)
    segments: list[str] = []
    for m in (m for m in mentions if m.kind == "segment"):
        if layer.resolve(m.name, base, "segment") is None:
            continue
        segments.append(m.name)
        kept.append(m)
    refers = [m for m in mentions if m.kind == "reference"]
    # "esse projeto (esse: PRJ-1)": each pointing word is also written right before a value this
    # query filters by (the referent an earlier source named): it points at that value
    at = {m.start for m in kept if m.kind == "value"}
    written = {words[m.start] for m in refers if m.end in at}
    if written and all(words[m.start] in written for m in refers):
        kept += refers
        refers = []
    if refers and bound and not layer.names_values(hits):  # "those services": a set an earlier source found
        kept += refers
        reached |= {dim.split(".", 1)[0] for t, c, _ in bound for dim in layer.column_dimensions.get((t, c), [])}
    kept += [m for m in mentions if m.kind == "entity" and m.name in reached]
    kept += [m for m in mentions if m.kind == "column" and _filters_column(layer, m.name, filtered, base)]
    kept += [m for m in mentions if m.kind == "role" and m.name.split(".", 1)[1] in used_roles]
    shown: list[str] = []
    if not asks:  # a lookup: the base's columns the question names, of the rows its values pick
        shown = list(dict.fromkeys(m.name for m in sorted(mentions, key=lambda m: m.start) if m.kind == "column"
                                   and m.name.split(".", 1)[0] == base and m.name not in filtered))
        looked = None if shown else _role_looked_up(layer, base, mentions, used_roles)
        if looked is not None:  # "quem lidera o projeto X?": the role's person, beside the record's label
            role_label, role_words = looked
            # "approved" in "who approved" names the role, not the record's state
            # (the state is shown instead: "who approved X?" of a rejected X names who rejected it)
            inside = {i for i, (start, end) in enumerate(said_at)
                      if any(r.start <= start and end <= r.end for r in role_words)}
            kept = [m for m in kept if m.kind != "value" or (m.start, m.end) not in {said_at[i] for i in inside}]
            states = [filters[i][0] for i in sorted(inside) if filters[i][0].split(".", 1)[0] == base]
            filters = [f for i, f in enumerate(filters) if i not in inside]
            filtered = {name for name, _, _ in filters}
            label = layer.label_of(base)
            shown = [role_label, *([f"{base}.{label}"] if label and f"{base}.{label}" not in filtered else []), *states]
            kept += [*role_words, *(m for m in mentions if m.kind == "person")]
        if not shown or not _names_a_record(base, ent, filters):
            return None
        kept += [m for m in mentions if m.kind == "column" and m.name in shown]
    covered = {i for m in kept for i in range(m.start, m.end)}
    if len(covered) != len(words):
        return None
    if _value_against_column(kept):
        return None
    if asks and not _anchored(base, asks, kept, len(words)):
        return None
    measures = [f"{base}.{measure.name}"] if measure else []
    q = QueryObject(True, measures, shown, list(dict.fromkeys(segments)), filters, [], None)
    settled, notes = layer.settle(q, question, heard=[v for _, _, v in hits])
    if refers:
        settled, bound_note = layer.bind(settled, bound, question)
        if not bound_note:
            return None  # the words point at an earlier set this query cannot be bounded by
        notes += bound_note
    if not asks:
        if settled.measures or not set(shown) <= set(settled.dimensions):
            return None
    elif asks[0].kind == "list":
        if settled.measures or not settled.dimensions:
            return None  # a list question whose count has no rows to show
    elif settled.measures != measures or settled.dimensions:
        return None
    said = {words[i]: m.kind if m.kind in ("carrier", "list", "grain", "reference") else f"{m.kind} {m.name or m.value}"
            for m in kept for i in range(m.start, m.end)}
    return DirectFill(settled, notes, said, bound=bool(refers))


@dataclass(frozen=True)
class _Measure:
    name: str
    column: str | None


def _measure(base: str, ent: Any, asks: list[Mention], mentions: list[Mention]) -> _Measure | None:
    """The base's measure the question asks for: its plain count for a count or a list (a list shows
    the rows behind it); for a sum, average, minimum or maximum, the base's one measure of that
    aggregation, or the one whose column or own words the question says.
    """
    named = [m.name.split(".", 1)[1] for m in asks if m.kind == "agg" and m.name]
    if named:
        meas = ent.measures[named[0]]
        return _Measure(named[0], meas.column)
    agg = "count" if asks[0].kind == "list" else asks[0].value
    options = [(n, meas) for n, meas in ent.measures.items() if meas.agg == agg and (agg != "count" or not meas.column)]
    if len(options) > 1:
        said = {m.name for m in mentions if m.kind == "column"}
        options = [(n, meas) for n, meas in options if f"{base}.{meas.column}" in said]
    if len(options) != 1:
        return None
    name, meas = options[0]
    return _Measure(name, meas.column)


def _role_looked_up(layer: SemanticLayer, base: str, mentions: list[Mention], used_roles: set[str]
                    ) -> tuple[str, list[Mention]] | None:
    """The label of the one role of `base` a who-question names and no filter goes through ("quem
    lidera o projeto X?": `lead.full_name`), with the mentions that say it; None when it names no
    such role, several, one of the base's own entity ("o gestor da X" and "os liderados da X" name
    one join in opposite directions), or one whose entity has no label.

    Why: the small model filled "Quem lidera esse projeto (esse: PRJ-…)" as the employees with the
    highest approval limit, and "Quem aprovou a despesa EXP-…?" as the expense's amount.
    """
    if not any(m.kind == "person" for m in mentions):
        return None
    said = [m for m in mentions if m.kind == "role" and m.name.split(".", 1)[0] == base
            and m.name.split(".", 1)[1] not in used_roles]
    roles = {m.name.split(".", 1)[1] for m in said}
    if len(roles) != 1:
        return None
    role = roles.pop()
    target = layer.spec.entities[base].joins[role].entity
    label = layer.label_of(target)
    if target == base or label is None:
        return None
    return f"{role}.{label}", said


def _names_a_record(base: str, ent: Any, filters: list[tuple[str, str, Any]]) -> bool:
    """Whether a filter names records of the base by what identifies them (its key, or the label its
    count lists first): "Juliana Costa approval limit?" looks one record up; "incidents in W10, with
    severity?" lists incidents, and the LLM decides what to show with them.
    """
    labels = {ent.primary_key, *(m.drill_members[0] for m in ent.measures.values() if m.drill_members)}
    return any(op == "=" and name in {f"{base}.{d}" for d in labels if d} for name, op, _ in filters)


def _related(a: str, b: str) -> bool:
    """Two words of one stem: the shorter's first five letters (four or more) begin the longer."""
    short, long_ = sorted((a, b), key=len)
    return len(short) >= 4 and long_.startswith(short[:5])


def _state_or_event(ent: Any, value_words: list[str]) -> bool:
    """Whether a value word shares its stem with a word for one of the entity's dates ("abertos" and
    "aberto em", "closed" and "closed on"): next to a period it may name the event ("opened in Q1"),
    not the state, and only the LLM reads which.
    """
    date_words = {w for d in ent.dimensions.values() if d.time_grains
                  for phrase in d.synonyms for w in _TOKEN.findall(fold(phrase))}
    return any(_related(v, w) for v in value_words for w in date_words)


def _outer(mentions: list[Mention], kind: str) -> list[Mention]:
    """The mentions of `kind` not inside a longer one ("2025" inside "segundo semestre de 2025")."""
    runs = [m for m in mentions if m.kind == kind]
    return [m for m in runs if not any(o.start <= m.start and m.end <= o.end and o.end - o.start > m.end - m.start
                                       for o in runs)]


def _grains_before_period(mentions: list[Mention]) -> list[Mention]:
    """Grain words that name the period right after them ("ISO week 2026-W15", "no ano de 2025"),
    with only carrier or grain words between; a grain word anywhere else ("monthly") asks for a breakdown.
    """
    starts = {m.start for m in mentions if m.kind == "period"}
    joiners = {i for m in mentions if m.kind in ("carrier", "grain") for i in range(m.start, m.end)}
    out: list[Mention] = []
    for m in (m for m in mentions if m.kind == "grain"):
        i = m.end
        while i not in starts and i in joiners:
            i += 1
        if i in starts:
            out.append(m)
    return out


def _filters_column(layer: SemanticLayer, column: str, filtered: set[str], base: str) -> bool:
    """Whether the words for `column` (entity.dimension) name a column some filter is on."""
    entity, member = column.split(".", 1)
    for name in filtered:
        ref = layer.resolve(name, base, "dimension")
        if ref is not None and (ref.entity, ref.member) == (entity, member):
            return True
    return False


def _value_against_column(kept: list[Mention]) -> bool:
    """Whether some words are read both as a value and as the name of another column: two readings."""
    values = {(i, m.name) for m in kept if m.kind == "value" for i in range(m.start, m.end)}
    at = {i for i, _ in values}
    return any(i in at and (i, m.name) not in values
               for m in kept if m.kind == "column" for i in range(m.start, m.end))


def _anchored(base: str, asks: list[Mention], kept: list[Mention], n: int) -> bool:
    """Whether the base entity is what is counted or listed: named by the count's own words
    ("headcount"), or right after the cue with only values, segments, periods and carrier words between.
    """
    if any(m.kind == "agg" and m.name for m in asks):
        return True
    role: dict[int, set[str]] = {}
    for m in kept:
        for i in range(m.start, m.end):
            role.setdefault(i, set()).add(m.kind if m.kind != "entity" else f"entity:{m.name}")
    for cue in asks:
        i = cue.end
        while i < n:
            kinds = role.get(i, set())
            if f"entity:{base}" in kinds:
                return True
            if not kinds & {"value", "segment", "period", "carrier", "grain", "column"}:
                break
            i += 1
    return False
