"""Figures a document states (a time limit, an amount cap), read from the passages an earlier stage
found, each with its label and its unit, so a database query can be bounded by a policy's number.

Why: "which incidents took longer than the SLA policy allows" needs the policy's target, and the
database keeps the duration in minutes while the policy writes "8 hours". A small model copies a
number it is shown, but does not convert units reliably, and the number it needs sits in a table
whose row and column say what it bounds. So the figures are read by software: from a table (the
row's first cell and the column's header are its label; a bare number takes the header's unit) and
from a line of prose (the line is its label). Units and their sizes are data (`policies/units.yaml`).
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from tramita.base.paths import POLICIES_DIR
from tramita.base.policyfile import load_model
from tramita.base.text import stems

UNITS_FILE = POLICIES_DIR / "units.yaml"
MAX_LABEL = 90  # characters of a prose line kept as a figure's label


class Unit(BaseModel):
    """One unit of a kind of quantity."""

    model_config = ConfigDict(extra="forbid")
    size: float | None = Field(default=None, gt=0, description="its size in the kind's first unit; none: not convertible")
    words: list[str] = Field(min_length=1, description="the words that name it (pt/en)")


class Sides(BaseModel):
    """The words a document writes right before a figure that bounds something: "above 250000
    USD" (what is past it), "até 30 dias" (what is within it).
    """

    model_config = ConfigDict(extra="forbid")
    above: list[str] = Field(min_length=1, description="past the figure (pt/en)")
    up_to: list[str] = Field(min_length=1, description="within the figure (pt/en)")


class UnitFile(BaseModel):
    """`policies/units.yaml`: kind of quantity -> unit name -> `Unit`."""

    model_config = ConfigDict(extra="forbid")
    kinds: dict[str, dict[str, Unit]] = Field(min_length=1, description="kind -> unit name -> unit")
    sides: Sides = Field(description="the words right before a document's figure that make it a bound")


@dataclass(frozen=True)
class Figure:
    """One number a passage states with its unit: "SEV2 · Resolve within: 8 hours"."""

    key: str  # the table row's first cell (the prose line for prose): what names the rows it bounds
    header: str  # the table column's header ("" for prose)
    number: float
    unit: str  # the unit's name in the units file ("hours")
    kind: str  # the unit's kind ("duration")

    @property
    def label(self) -> str:
        """What the number is about: the row's key and the column's header, or the prose line."""
        return f"{self.key} · {self.header}".strip(" ·")

    @property
    def said(self) -> str:
        """The figure as the document writes it."""
        return f"{plain(self.number)} {self.unit}"


@dataclass(frozen=True)
class Units:
    """The units file read once: each folded word's (kind, unit name), longest words first."""

    sizes: dict[tuple[str, str], float | None]  # (kind, unit name) -> size
    words: tuple[tuple[str, str, str], ...]  # (folded word, kind, unit name)
    sides: tuple[tuple[str, str], ...] = ()  # (folded word, ">" or "<="), longest first

    def named(self, unit: str | None) -> tuple[str, str] | None:
        """(kind, unit name) for a unit as the semantic model writes it ("minutes", "USD"); None
        for a unit the file does not know ("%").
        """
        key = light(unit or "")
        return next(((k, n) for w, k, n in self.words if w == key or light(n) == key), None)

    def convert(self, number: float, unit: tuple[str, str], into: tuple[str, str]) -> float | None:
        """`number` of `unit` in `into`'s unit; None across kinds or for a unit with no size."""
        size, target = self.sizes.get(unit), self.sizes.get(into)
        if unit[0] != into[0] or size is None or target is None:
            return None
        return number * size / target


@lru_cache(maxsize=4)
def units(path: Path = UNITS_FILE) -> Units:
    """The validated units file, once per process."""
    data: UnitFile = load_model(path, UnitFile)
    sizes = {(k, n): u.size for k, table in data.kinds.items() for n, u in table.items()}
    words = sorted({(light(w), k, n) for k, table in data.kinds.items() for n, u in table.items()
                    for w in u.words}, key=lambda t: (-len(t[0]), t))
    sides = sorted({(light(w), ">") for w in data.sides.above} | {(light(w), "<=") for w in data.sides.up_to},
                   key=lambda t: (-len(t[0]), t))
    return Units(sizes, tuple(words), tuple(sides))


_NUMBER = r"(\d+(?:[.,]\d+)?)"


def light(text: str) -> str:
    """Lower case, accents stripped, single spaces; punctuation kept ("0,25", "US$")."""
    text = "".join(c for c in unicodedata.normalize("NFKD", text.lower()) if not unicodedata.combining(c))
    return " ".join(text.split())


def plain(number: float) -> str:
    """A number as a query value or a hint writes it (no trailing .0)."""
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


def _value(raw: str) -> float:
    """A document's number: a decimal comma read as a point."""
    return float(raw.replace(",", "."))


def _quantities(text: str, table: Units) -> list[tuple[float, str, str]]:
    """(number, kind, unit name) for each number followed by a unit word in `text` (bold marks and
    spaces between them allowed), left to right.
    """
    folded = light(text.replace("*", " "))
    out: list[tuple[float, str, str]] = []
    for m in re.finditer(_NUMBER + r"\s*", folded):
        before = folded[:m.start()]
        if re.search(r"[\w.-]$", before):
            continue  # a digit inside an id, a date or a code ("INC-2034", "2026-05-15")
        rest = folded[m.end():]
        hit = next(((k, n) for w, k, n in table.words if re.match(rf"{re.escape(w)}(?!\w)", rest)), None)
        prefix = next(((k, n) for w, k, n in table.words if not w.isalpha()
                       and re.search(rf"(?<!\w){re.escape(w)}\s*$", before)), None)  # "US$ 250"
        if hit or prefix:
            k, n = hit or prefix  # type: ignore[misc]
            out.append((_value(m.group(1)), k, n))
    return out


def _header_unit(header: str, table: Units) -> tuple[str, str] | None:
    """The unit a table column's header names ("Limite por pedido (USD)"), for its bare numbers."""
    folded = light(header)
    return next(((k, n) for w, k, n in table.words if re.search(rf"(?<!\w){re.escape(w)}(?!\w)", folded)), None)


def _cells(line: str) -> list[str]:
    """A markdown table line's cells, without bold marks."""
    return [c.strip().replace("**", "").strip() for c in line.strip().strip("|").split("|")]


_RULE = re.compile(r"\|?[\s:|-]+\|?")  # a markdown table's separator line


def _walk(lines: list[str]) -> Iterator[tuple[int, list[str] | None, list[str] | str]]:
    """(index, cells, header cells) for each table row of `lines` (the header is the line above a
    separator, [] before one), and (index, None, sentence) for each sentence of prose, in order;
    separators and headers are not yielded, and prose ends a table.
    """
    header: list[str] = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("|"):
            if _RULE.fullmatch(stripped):
                continue  # the separator under a header
            if i + 1 < len(lines) and _RULE.fullmatch(lines[i + 1].strip()):
                header = _cells(stripped)  # the line above a separator is the header
                continue
            yield i, _cells(stripped), header
            continue
        header = []
        for sentence in re.split(r"(?<=[.;])\s+", stripped.lstrip("-* ")):
            yield i, None, sentence


def figures(text: str, path: Path = UNITS_FILE) -> list[Figure]:
    """Every figure with a unit in `text` (passages as the documents backend hands them on)."""
    table = units(path)
    out: list[Figure] = []
    lines = text.splitlines()
    # every header (the line above a separator), by position: a passage cut from the middle of a
    # table has rows and no header, which another passage of the same table holds
    headers = [(i, _cells(line)) for i, line in enumerate(lines[:-1])
               if line.strip().startswith("|") and _RULE.fullmatch(lines[i + 1].strip())]
    fallback: list[str] = []
    for i, cells, rest in _walk(lines):
        if cells is None:
            fallback = []
            label = str(rest).replace("**", "")[:MAX_LABEL]
            out += [Figure(label, "", n, u, k) for n, k, u in _quantities(str(rest), table)]
            continue
        header = list(rest) or fallback
        if not header:  # a headerless run of rows: the nearest header with as many cells
            near = sorted((abs(j - i), h) for j, h in headers if len(h) == len(cells))
            fallback = header = near[0][1] if near else []
        key = cells[0]
        for j, cell in enumerate(cells[1:], start=1):
            head = header[j] if j < len(header) else ""
            found = _quantities(cell, table)[:1]  # "72 hours (3 days)": the first is the figure
            bare = re.fullmatch(_NUMBER, cell.replace(" ", ""))
            unit = _header_unit(head, table) if not found and bare else None
            if unit is not None and bare is not None:
                found = [(_value(bare.group(1)), *unit)]
            out += [Figure(key, head, n, u, k) for n, k, u in found]
    return out


def before(today: str, figure: Figure, path: Path = UNITS_FILE) -> str | None:
    """The day `figure` (a duration of whole days or more) before `today`: "hired in the last 90
    days" is hired after that day. None for a shorter or unconvertible duration.
    """
    table = units(path)
    days = table.convert(figure.number, (figure.kind, figure.unit), (figure.kind, "days"))
    if days is None or days < 1 or not float(days).is_integer():
        return None
    return (dt.date.fromisoformat(today) - dt.timedelta(days=int(days))).isoformat()


YEARS = (1900, 2100)  # a bare four-digit number in this range is a year, not an amount


@lru_cache(maxsize=1)
def _amount_pattern() -> re.Pattern[str]:
    """A number not inside an id, a date or a code, with a multiplier word of the business rules
    after it ("300k", "20 mil"), built once per process.
    """
    from tools.business.catalog import rules

    multipliers = "|".join(re.escape(light(k)) for k in sorted(rules().number_multipliers, key=len, reverse=True))
    return re.compile(rf"(?<![\w.,-])\d(?:[\d.,]*\d)?(?:\s*(?:{multipliers})(?![^\W\d_]))?")


def _amounts(folded: str, table: Units) -> list[tuple[int, float, tuple[str, str] | None]]:
    """(position, number, unit or None) of each number the light-folded `folded` states that is no
    id, date, week or code, a multiplier word after it applied ("300k", "20 mil"), with the unit
    after it ("30 minutes") or the currency mark before it ("us$ 500").
    """
    from tools.business.resolvers import parse_number

    out: list[tuple[int, float, tuple[str, str] | None]] = []
    for m in _amount_pattern().finditer(folded):
        rest = folded[m.end():]
        if re.match(r"[\w-]", rest):
            continue  # "2026-Q3", "3rd", "10kg": part of a code or of a word
        number = parse_number(m.group(0))
        if number is None:
            continue
        after = next(((k, n) for w, k, n in table.words if re.match(rf"\s*{re.escape(w)}(?!\w)", rest)), None)
        prefix = next(((k, n) for w, k, n in table.words if not w.isalpha()
                       and re.search(rf"(?<!\w){re.escape(w)}\s*$", folded[:m.start()])), None)
        unit = after or prefix
        bare = unit is None and m.group(0).isdigit()
        if bare and len(m.group(0)) == 4 and YEARS[0] <= int(m.group(0)) <= YEARS[1]:
            continue  # "em 2026": a year
        out.append((m.start(), float(number), unit))
    return out


def amounts(text: str, path: Path = UNITS_FILE) -> list[tuple[float, tuple[str, str] | None]]:
    """The amounts `text` states, each with its (kind, unit name) when it says one: "a 300k/year
    contract" is 300000 with no unit, "30 minutes" is 30 of duration.

    Why: a question writes "300k" where a policy writes "250000 USD"; digits inside ids, dates and
    weeks are not amounts.
    """
    return [(n, u) for _, n, u in _amounts(light(text.replace("*", " ")), units(path))]


def _lines(text: str) -> list[tuple[str, str]]:
    """(line, header) for the sentences of `text`'s prose ("" for header) and its table rows (the
    table's header line), in order.
    """
    out: list[tuple[str, str]] = []
    for _, cells, rest in _walk(text.splitlines()):
        if cells is not None:
            out.append((" | ".join(cells), " | ".join(rest)))
        elif rest:
            out.append((str(rest), ""))
    return out


def _bounds(line: str, amount: float, unit: tuple[str, str] | None, table: Units,
            header: tuple[str, str] | None = None) -> list[tuple[bool, float, bool]]:
    """(holds, slack, same unit) for each bound of `line` ("above 250000 USD": a figure with a side
    word right before it, a bare one in the unit of its table's `header`) that `amount` can be read
    against: whether it lies on the bound's side, how far from it (relative to the figure), and
    whether both state a unit of one kind. A bound in another kind of unit than
    `amount`'s is not read; one with no unit, or beside an amount with none, reads as the same unit.
    """
    folded = light(line.replace("*", " ").replace("|", " "))
    out: list[tuple[bool, float, bool]] = []
    for at, number, stated in _amounts(folded, table):
        found = stated or header
        before = re.sub(r"(?:[^\w\s]+\s*)+$", "", folded[:at]).rstrip()  # "us$ " before the number
        side = next((s for w, s in table.sides if re.search(rf"(?<!\w){re.escape(w)}$", before)), None)
        value: float | None = amount
        if unit is not None and found is not None:
            value = table.convert(amount, unit, found) if unit[0] == found[0] else None
        if side is not None and value is not None:
            out.append((value > number if side == ">" else value <= number, abs(value - number) / max(number, 1),
                        unit is not None and found is not None))
    return out


def bounding_lines(text: str, amount: float, unit: tuple[str, str] | None, about: str,
                   path: Path = UNITS_FILE) -> list[str]:
    """The lines of `text` (a sentence of prose, a table row; each clause of a sentence that states
    several bounds) whose bounds ("above 250000 USD", "até 30 dias") all hold `amount` and that share
    a word with `about` (the question; a row with its table's header) unless every bound and `amount`
    state units of one kind, the tightest bracket first (the figure nearest `amount`).

    Why: a policy states who signs or approves by brackets ("Contracts above 250000 USD per year are
    signed by the CEO, X"; "a Finance Manager decide até 5000 USD, o Head até 25000 USD …"); the
    question's own figure ("a 300k contract") says which bracket it means, and the person it then
    asks about is the one that bracket names.
    """
    table = units(path)
    near = stems(about)
    found: list[tuple[float, int, str]] = []
    for line, header in _lines(text):
        about_it = bool(near & stems(f"{header} {line}"))  # a row is about what its table's header says
        unit_of_header = _header_unit(header, table) if header else None
        whole = _bounds(line, amount, unit, table, unit_of_header)
        pieces = [(line, whole)]
        if not header and len(whole) > 1:  # one bracket per clause
            pieces = [(c, _bounds(c, amount, unit, table)) for c in re.split(r",\s+|;\s+|\s+(?:e|and)\s+", line)
                      if c.strip()]
        for clause, bounds in pieces:
            # a figure in the question's own unit is about the line's bound without a shared word
            # (a Portuguese question, an English policy); a bare one needs one
            if bounds and all(b[0] for b in bounds) and (about_it or all(b[2] for b in bounds)):
                found.append((min(b[1] for b in bounds), len(found), clause))
    return [clause for _, _, clause in sorted(found)]
