"""The retrieval-backend protocol: what the planner, retrieval and synthesis need from a source.

A backend declares its name (the plan's vocabulary and the context's `backend`), the citation tag
answers use, one line the planner reads, whether it is available, how to run a question, and how its
result reads in the synthesis prompt. Nodes only ever go through this protocol, so a new source is
one module here plus one line in `tools.backends.BACKENDS`.

Optional hooks, looked up by name: `vocabulary(services)` (texts the planner matches),
`evidence(services, text)` (how close the backend's own content comes), `findings(context)` (what
a later stage reads), `warm(services, today, profile)` (the static prompt prefixes its LLM
calls share, evaluated ahead of the first question by `tramita warm`), and
`leaves_aggregate(services, question)` (it answers the question's relation, not its aggregate),
`names_nothing(services, text)` (the text names nothing the backend holds: not a candidate for it),
`required_by(services, text)` (the question needs the backend whatever the scores say),
`compares_with_documents(services, text)` (the question compares the backend's records with a
figure: with a kind of document named, it needs both),
`field_words(services)` (field name → the words naming it, for the fields it holds: a text
saying the words of a field no other backend holds, and no other backend's vocabulary uses, asks
that backend to show it),
`defers(services, text)` (another backend that writes its own query holds the text's relation: it
takes this backend's place for that text), `answers_count(services, question)` (it counts the
question's answer itself: a required backend then answers a one-part question alone), and
`names_by_state(services, phrase)` (two words name rows it holds by their state: "open tickets" is a
noun phrase, not the verb "open" and its object); an attribute `aggregates = True` marks a backend that counts and sums over what another found, and
`stands_in = True` one that writes its own query over records, so it may answer a question another
such backend failed to query (the plan's `standby`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Protocol, runtime_checkable

from tools.llm import Usage
from tools.services import Services
from tramita.base.prompts import render
from tramita.base.text import fronted_set, tokens


@dataclass(frozen=True)
class Finding:
    """What an earlier backend of the same turn found, for a later one to build on.

    Why: a question such as "which services did INC-1 hit, and how many open tickets do those
    services have?" can only be answered by the second source with the first one's answer. `values`
    are the cells of a result table's column (a set the later query is bounded by); `text` is what
    a backend read (passages), in which names and values may be found but which bounds nothing.
    `clause` is the part of the question the values stand for, when the backend matched one.
    """

    backend: str
    column: str = ""
    values: tuple[str, ...] = ()
    text: str = ""
    clause: str = ""  # the words of the question these values answer ("that depend on X")
    # the documents the passages come from (ids), and the text of those whole documents once a
    # later backend has read them: a document's figures are read there (`tools.doc_figures`),
    # names are not (a whole document names far more than the question is about)
    documents: tuple[str, ...] = ()
    passages: str = ""


@dataclass
class BackendCall:
    """One question for one backend, with what it may use.

    `question` is the part of the user's question this backend answers (the whole question when
    the planner did not split it); `whole` is always the user's whole question. `given` holds what
    the backends before it found (`Finding`); `feeds` says that a later backend will build on this
    one's rows, so it answers the relation even when the question's aggregate is another's job.
    """

    question: str
    today: str
    profile: str
    services: Services
    usage: Usage
    top_k: int = 5
    whole: str = ""
    given: tuple[Finding, ...] = ()
    feeds: bool = False


@runtime_checkable
class RetrievalBackend(Protocol):
    """A source the planner can choose and retrieval can run in parallel with the others."""

    name: str
    citation: str
    planner_description: str

    def available(self, services: Services) -> bool:
        """Whether this deployment has the backend configured (no network call needed)."""
        ...

    def run(self, call: BackendCall) -> dict[str, Any]:
        """Answer material for the question: a context dict with at least `backend`."""
        ...

    def render(self, context: dict[str, Any]) -> str:
        """The context as the synthesis prompt reads it, every fact tagged with its citation."""
        ...


MAX_FINDING_VALUES = 30
PART_JOINER = "; "  # between the pieces of a question that one backend answers (`Plan.parts`)


def part_position(question: str, part: str) -> int:
    """Where a backend's part (`Plan.parts`; several joined pieces: the first) starts in the
    question, by its first 40 characters; -1 when it is not found there.
    """
    return question.find(part.split(PART_JOINER)[0].strip()[:40])


def row_findings(context: dict[str, Any]) -> list[Finding]:
    """A query backend's rows as findings: one per column, its distinct text cells (numbers and
    empty cells say nothing a later query could be bounded by). None for a failed or empty result.
    """
    rows = [r for r in context.get("rows") or [] if isinstance(r, dict)]
    if context.get("error") or not rows or len(rows) > MAX_FINDING_VALUES:
        return []
    out: list[Finding] = []
    for column in dict.fromkeys(k for r in rows for k in r):
        cells = [r.get(column) for r in rows]
        values = tuple(dict.fromkeys(str(c).strip() for c in cells if isinstance(c, str) and str(c).strip()))
        if values and all(isinstance(c, str) for c in cells if c is not None):
            out.append(Finding(str(context.get("backend") or ""), column=column, values=values,
                               clause=str(context.get("clause") or "")))
    return out


def bounded_question(question: str, given: Sequence[Finding]) -> str:
    """`question` with each clause an earlier backend answered replaced by the values it found:
    "tickets of the services that depend on X" → "tickets of the services a, b, c".

    Why: the later source answers its own part over that set; left in, the relation is one the
    later source cannot express (the semantic layer declares no dependency closure) and the whole
    question is refused or answered about X.
    """
    answered = [f.clause for f in given if f.clause and f.values and f.clause in question]
    # "…, and how many open tickets does each of them have?" with the dependencies written in X's
    # place asked which services they depend on: when the first piece holds every answered clause
    # and the pieces that point back hold none, those pieces are the later source's own question
    pieces, at = pointing_split(question)
    if answered and at and all(c in pieces[0] for c in answered) and not any(c in p for c in answered for p in pieces[at:]):
        return ", ".join(pieces[at:])
    for clause, values in ((f.clause, f.values) for f in given if f.clause in answered):
        question = question.replace(clause, ", ".join(values), 1)
    return question


def asks_each_row(piece: str) -> bool:
    """Whether `piece` says a row reference ("cada um", "each of them"): a column of each row."""
    from tools.semantic_layer import folded_cues

    said = f" {' '.join(tokens(piece))} "
    return any(f" {r} " in said for r in folded_cues().row_references)


def demonstrative_nouns(piece: str) -> list[str]:
    """The folded word right after each demonstrative of `piece` ("that manager" → "manager")."""
    from tools.semantic_layer import folded_cues

    said = tokens(piece)
    return [said[i + 1] for i, w in enumerate(said[:-1]) if w in folded_cues().demonstratives]


def pointing_split(question: str) -> tuple[list[str], int]:
    """The pieces of `question`, and the index of the first after its first that points back at
    what came before ("each of them", "esses", "that person"); 0 when none does.
    """
    from tools.semantic_layer import folded_cues

    pieces = [p.strip() for p in _PARTS.split(question) if p and p.strip()]
    pointers = folded_cues().pointers
    at = next((i for i, piece in enumerate(pieces[1:], start=1)
               if pointers & set(tokens(piece)) or asks_each_row(piece)), 0)
    return pieces, at


# where a question that asks two things splits ("… agora? E o que diz o runbook …")
# ("… e em que cidade essa pessoa trabalha?": a question word after a preposition starts one too)
_PARTS = re.compile(r"[?;!]+|\.\s+|,\s*(?:e|and|mas|but)\s+|\s+(?:e|and)\s+(?=(?:(?:em|de|para|com|in|for|on|at)\s+"
                    r"(?:que|qual|quais|quem|what|which|whom)|qual|quais|quem|quando|como|"
                    r"quantos|quantas|quanto|o que|onde|what|which|who|when|how|where|is|are|does|did)\b)",
                    re.IGNORECASE)


def question_parts(question: str, *, stop: frozenset[str] | None = None) -> list[str]:
    """The parts of a question that asks two or more things (each of three words or more); [] for
    a question that asks one thing. A question embeds as the mix of its parts, so the planner and
    the document search also look at each part alone. With `stop` (folded function words), a part
    naming at most one word outside them continues the part before.

    Why: "…, and for how many minutes?", "e qual o valor?" ask one more column of what the part
    before finds; alone, one word is matched to whichever source uses it, and the question was
    split between two sources that each answered half of it.
    """
    from tools.semantic_layer import folded_cues

    rows = folded_cues().row_references
    found: list[str] = []
    pieces: list[str] = []
    for p in (p.strip() for p in _PARTS.split(question) if p):
        fronted = fronted_set(p)  # "Dos serviços que X chama, quais …": the set, then the question
        pieces += [p] if fronted is None else list(fronted)
    for piece in (p for p in pieces if len(p.split()) >= 3):
        said = tokens(piece)
        words = " " + " ".join(said) + " "
        elliptic = stop is not None and sum(1 for t in said if t not in stop) <= 1
        if found and (elliptic or any(f" {r} " in words for r in rows)):
            # "… e qual o status de cada um?" asks for a column of the rows the part before asks
            # for: one thing, answered where those rows are
            found[-1] = f"{found[-1]}, {piece}"
        else:
            found.append(piece)
    return found if len(found) > 1 else []


# -------------------------------------------------------------------------- rows for synthesis
#
# Why rows are formatted here, in code: a small model asked to restate "[SQL] rows: [{...}]" copies
# the label, invents a currency ("R$") or mangles a number ("23.183.12"). So the synthesis context
# shows each result as a small table with column names and units, every number already written
# the way the user's language writes it, and no query or label to copy.

# column-name conventions for units, used when the semantic model does not name the column
UNIT_CONVENTIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(^|_)usd($|_)"), "USD"),
    (re.compile(r"(^|_)(pct|percent)($|_)"), "%"),
    (re.compile(r"(^|_)minutes($|_)"), "minutes"),
)
_IDENTIFIER_COLUMN = re.compile(r"(^|_)(id|ids|year|ano|week|semana|quarter|trimestre|tier|level|nivel|code|codigo|"
                                r"number|numero|version)($|_)", re.IGNORECASE)
_COUNTING = re.compile(r"^\s*count\s*\(", re.IGNORECASE)
_UNIT_WORDS = {"pt": {"minutes": "min", "%": "%"}, "en": {"minutes": "min", "%": "%"}}


def unit_of(column: str, units: Mapping[str, str]) -> str | None:
    """The unit of a result column: the semantic model's (`units`), else a naming convention."""
    key = column.lower().split(".")[-1]
    if key in units:
        return units[key]
    for pattern, unit in UNIT_CONVENTIONS:
        if pattern.search(key):
            return unit
    return None


def column_units(query: str, columns: Sequence[str], units: Mapping[str, str]) -> dict[str, str]:
    """Each output column's unit. An alias ("total") takes the unit of the one column its
    expression reads ("SUM(x.amount_usd) AS total" → USD); a COUNT has none.
    """
    out: dict[str, str] = {}
    for col in columns:
        unit = unit_of(col, units)
        if unit:
            out[col] = unit
    if not query or len(out) == len(columns):
        return out
    try:
        import sqlglot
        from sqlglot import exp

        tree = sqlglot.parse_one(query, read="sqlite")
    except Exception:  # noqa: BLE001 - Cypher or unparsable SQL: names only
        return out
    if not isinstance(tree, exp.Query):
        return out
    selects = tree.selects if isinstance(tree, exp.Select) else []
    for projection in selects:
        name = projection.alias_or_name
        if name not in columns or name in out:
            continue
        if projection.find(exp.Count) is not None and not projection.find(exp.Sum):
            continue
        read = {unit_of(c.name, units) for c in projection.find_all(exp.Column)}
        if len(read) == 1 and None not in read:
            out[name] = str(next(iter(read)))
    return out


def format_number(value: int | float | Decimal, lang: str, unit: str | None = None, *, grouping: bool = True) -> str:
    """A number as `lang` writes it: pt "1.234,56", en "1,234.56"; money (USD) with two decimals
    and its currency, other decimals rounded to two places, percent and minutes with their unit.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    number = Decimal(str(value))
    money = unit == "USD"
    if money:
        number = number.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        if number == number.to_integral_value() and isinstance(value, int):
            number = number.quantize(Decimal(1))
    elif number != number.to_integral_value():
        number = number.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP).normalize()
    sign = "-" if number < 0 else ""
    digits = f"{abs(number):f}"
    whole, _, frac = digits.partition(".")
    if grouping and (money or len(whole) > 4):
        whole = f"{int(whole):,}"
    thousands, decimal_mark = (".", ",") if lang == "pt" else (",", ".")
    whole = whole.replace(",", thousands)
    text = sign + whole + (decimal_mark + frac if frac else "")
    if money:
        return f"US$ {text}" if lang == "pt" else f"USD {text}"
    if unit:
        word = _UNIT_WORDS.get(lang, {}).get(unit, unit)
        return f"{text}%" if word == "%" else f"{text} {word}"
    return text


def _cell(value: Any, column: str, lang: str, unit: str | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return ("sim" if value else "não") if lang == "pt" else ("yes" if value else "no")
    if isinstance(value, int | float | Decimal):
        if _IDENTIFIER_COLUMN.search(column) and not unit:
            return str(value)
        return format_number(value, lang, unit)
    if isinstance(value, str) and unit and re.fullmatch(r"-?\d+(?:\.\d+)?", value.strip()):
        return format_number(Decimal(value.strip()), lang, unit)
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v, column, lang, unit) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_cell(v, str(k), lang, None)}" for k, v in value.items())
    return " ".join(str(value).split())


def present_rows(context: dict[str, Any], lang: str, units: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A copy of a query backend's context whose rows are display strings (numbers per `lang`,
    units from `units` or the column names) and whose `columns` carry their unit.
    """
    rows = list(context.get("rows") or [])
    if not all(isinstance(r, dict) for r in rows):
        return context  # not a table (an API's JSON list): its backend renders it as it is
    columns: list[str] = list(dict.fromkeys(k for r in rows for k in r))
    col_units = column_units(str(context.get("query") or ""), columns, units or {})
    shown = [{c: _cell(r.get(c), c, lang, col_units.get(c)) for c in columns} for r in rows]
    return {**context, "rows": shown, "columns": columns, "units": col_units, "presented": True}


def render_rows(tag: str, context: dict[str, Any], max_rows: int = 25) -> str:
    """A query backend's result for synthesis: a compact table under its citation tag, column
    names first (with units), one line per row; no query, no JSON, no label to copy.
    """
    rows = [r for r in context.get("rows") or [] if isinstance(r, dict)]
    if not rows:
        return f"[{tag}] no matching records."
    if not context.get("presented"):
        context = present_rows(context, "en")
    columns: list[str] = context.get("columns") or list(rows[0])
    units: dict[str, str] = context.get("units") or {}
    head = " | ".join(f"{c} ({units[c]})" if c in units and units[c] != "USD" else c for c in columns)
    lines = [" | ".join(str(r.get(c, "")) for c in columns) for r in context["rows"][:max_rows]]
    more = f"\n… {len(rows) - max_rows} more" if len(rows) > max_rows else ""
    count = f"{len(rows)} result{'s' if len(rows) != 1 else ''}"
    return f"[{tag}] {count}:\n{head}\n" + "\n".join(lines) + more


def render_about(tag: str, context: dict[str, Any]) -> str:
    """`render_rows`, with what the rows are (a named pattern's `about`) under the head, so the
    model reads "manager | role" as the person's manager and not the other way round.
    """
    table = render_rows(tag, context)
    about = str(context.get("about") or "").strip()
    if not about or not context.get("rows"):
        return table
    head, _, rest = table.partition("\n")
    return f"{head}\n({about})\n{rest}"


@dataclass
class QueryRun:
    """The outcome of a generate-validate-repair loop."""

    query: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 0
    error: str | None = None
    mended: list[str] = field(default_factory=list)  # deterministic fixes applied before the guard ran it
    down: bool = False  # the error is the store's (a `fatal` type), not a query the model could not write


def generate_validate_repair(question: str, generate: Callable[[str], str],
                             execute: Callable[[str], list[dict[str, Any]]], *,
                             fatal: tuple[type[BaseException], ...] = (), max_repairs: int = 2) -> QueryRun:
    """Generate a query, run it through the backend's guard, and feed any error back, at most
    `max_repairs` times. An error of a `fatal` type (the database is down) ends the loop at once:
    repairing the query cannot help. The guard runs on every attempt, so a repaired query is as
    read-only as the first.
    """
    run = QueryRun()
    prompt = question
    for attempt in range(max_repairs + 1):
        run.attempts = attempt + 1
        run.query = generate(prompt)
        try:
            run.rows = execute(run.query)
            run.error = None
            return run
        except fatal as exc:
            run.error, run.down = str(exc)[:400], True
            return run
        except Exception as exc:  # noqa: BLE001 - guard refusals and execution errors are fed back
            run.error = f"{type(exc).__name__}: {exc}"[:400]
        prompt = f"{question}\n{render('repair', query=run.query, error=run.error)}"
    return run
