"""Strict answer-fact matching (sample/novaops/README.md, "Question items": `answer_facts`).

The scorer must never pass a wrong answer, so every rule here errs on the side of "not found":

- a text fact is found only as whole words, case-insensitively and without accents ("Ana" is not
  in "Mariana", "EXP-011" is not in "EXP-0110");
- a numeric fact is found only as a number that is equal to it at the dataset's precision (two
  decimals: money is in cents). "17.3" does not accept 17.27: that is a different figure, not a
  rounded form; "2424.47" accepts 2424.4712 because at two decimals they are the same number;
- numbers are read one token at a time: digits separated by whitespace are never joined ("80 30"
  is 80 and 30), and a token is a number only when its separators form a valid grouping — pt
  "1.234,56" and en "1,234.56" both read as 1234.56, "450.000" and "450,000" as 450000, while a
  malformed "23.183.12" reads as no number at all;
- digits inside identifiers and calendar notation are not numbers: ids (EXP-0264, INC-2047, E006,
  SEV2, P1), dates (2026-05-15, 31/03/2026, "6 de maio", "May 6"), times (16:00), ISO weeks
  (2026-W20) and quarters (2026-Q3);
- "mil", "k", "thousand", "milhão"/"million" after a number multiply it ("450 mil" = 450000), as the
  README's normalisation asks.

`leaks` finds what an answer must never show a user: raw context labels and exception text.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

PRECISION = Decimal("0.01")  # the dataset's money and measure precision (README: numbers to cents)

# A whole token that is a number: optional sign, digits with valid thousands grouping or none,
# optional decimal part. Both pt (1.234,56) and en (1,234.56) conventions, resolved in `_parse`.
_NUMBER_TOKEN = re.compile(r"^[-−]?\d+(?:[.,]\d+)*$")
_CURRENCY_PREFIX = re.compile(r"^(?:[A-Za-z]{1,3})?[$€£]")  # US$, R$, $, €, £
_EDGE = "*_~`\"'“”‘’()[]{}<>|,.;:!?¿¡"
_UNIT_SUFFIX = re.compile(r"^(?P<num>[-−]?\d[\d.,]*)(?P<unit>%|º|ª|°|x|h|d|min|s|k|mil|km|kg|gb|mb|ms)$", re.IGNORECASE)
_MULTIPLIERS = {"mil": 1000, "k": 1000, "thousand": 1000, "milhao": 10**6, "milhoes": 10**6, "million": 10**6,
                "millions": 10**6, "mi": 10**6}
_MONTHS = frozenset("""janeiro fevereiro marco abril maio junho julho agosto setembro outubro novembro dezembro
    jan fev abr mai jun jul nov january february march april may june july august september october november
    december feb apr aug sep sept oct dec""".split())  # not "mar", "set", "out", "ago": ordinary words too
_DATE_GLUE = frozenset({"de", "of", "do", "the"})

LEAK_PATTERNS: dict[str, re.Pattern[str]] = {
    "rows:": re.compile(r"\brows:"),
    "(no rows)": re.compile(r"\(no rows\)"),
    "table line": re.compile(r"(?m)^[^|\n]*\S \| \S[^\n]*$"),
    "result label": re.compile(r"\[[^\[\]\n]{1,40}\]\s*(?:\d+ results?:|no matching records)", re.IGNORECASE),
    "api label": re.compile(r"\[api:[^\[\]\n]{1,60}\]\s*(?:data:|GET\b)|-> HTTP \d{3}"),
    "query:": re.compile(r"\bquery:"),
    "exception name": re.compile(r"\b\w+Error\b"),
    "Traceback": re.compile(r"\bTraceback\b"),
}


def fold(text: str) -> str:
    """Lower case, accents removed, whitespace collapsed (punctuation kept: ids need it)."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text).casefold())
    text = "".join(c for c in text if not unicodedata.combining(c))
    return re.sub(r"\s+", " ", text).strip()


def _parse(token: str) -> Decimal | None:
    """A number token as a Decimal, or None when its separators are not a valid grouping.

    One kind of separator repeated ("1.234.567") is a thousands separator and every group after the
    first must have three digits. Two kinds: the last one is the decimal mark, the other groups by
    three. One separator once: a decimal mark, unless exactly three digits follow and the leading
    group is 1-3 digits not starting with 0 ("450.000" → 450000; "0.125" and "17.3" are decimals).
    """
    t = token.replace("−", "-")
    sign = -1 if t.startswith("-") else 1
    t = t.lstrip("-")
    if not _NUMBER_TOKEN.match(t):
        return None
    seps = [c for c in t if c in ".,"]
    groups = re.split(r"[.,]", t)
    if not seps:
        number = t
    elif len(set(seps)) == 2:
        dec = seps[-1]
        if seps.count(dec) != 1:
            return None
        whole, frac = t.rsplit(dec, 1)
        parts = whole.split("," if dec == "." else ".")
        if not _grouped(parts):
            return None
        number = "".join(parts) + "." + frac
    elif len(seps) > 1:
        if not _grouped(groups):
            return None
        number = "".join(groups)
    else:
        head, tail = groups
        thousands = len(tail) == 3 and 1 <= len(head) <= 3 and not head.startswith("0")
        number = head + tail if thousands else f"{head}.{tail}"
    try:
        return sign * Decimal(number)
    except InvalidOperation:
        return None


def _grouped(parts: list[str]) -> bool:
    """Thousands grouping: a 1-3 digit head, then groups of exactly three digits."""
    return 1 <= len(parts[0]) <= 3 and all(len(p) == 3 for p in parts[1:])


def _strip(token: str) -> str:
    return token.strip(_EDGE)


def _is_calendar_or_id(token: str) -> bool:
    """Digits glued to letters in front (E006, SEV2, W20, EXP-0264), or joined by -, /, : to
    more digits or letters (2026-05-15, 31/03/2026, 16:00, 2026-W20, 10-15): not a quantity.
    """
    if re.search(r"[A-Za-z_]\W?\d", token) and not _CURRENCY_PREFIX.match(token):
        return True
    return bool(re.search(r"\w[-/:]\w", token))


def _tokens(text: str) -> list[str]:
    return [t for t in re.split(r"\s+", unicodedata.normalize("NFKC", text)) if t]


def numbers_in(text: str) -> list[Decimal]:
    """Every quantity the text states, one token at a time (see the module docstring)."""
    raw = _tokens(text)
    folded = [_strip(fold(t)) for t in raw]
    out: list[Decimal] = []
    for i, tok in enumerate(raw):
        t = _CURRENCY_PREFIX.sub("", _strip(tok))
        t = _strip(t)
        if not t or not re.search(r"\d", t) or _is_calendar_or_id(t):
            continue
        multiplier = 1
        m = _UNIT_SUFFIX.match(t)
        if m:
            t = m.group("num")
            unit = m.group("unit").lower()
            multiplier = _MULTIPLIERS.get(unit, 1)
        value = _parse(t.rstrip(".,"))
        if value is None or _date_part(folded, i):
            continue
        following = folded[i + 1] if i + 1 < len(folded) else ""
        if multiplier == 1 and following in _MULTIPLIERS:
            multiplier = _MULTIPLIERS[following]
        out.append(value * multiplier)
    return out


def _date_part(folded: list[str], i: int) -> bool:
    """"6 de maio", "maio de 2026", "May 6", "6 May 2026": a number next to a month name (across
    one "de"/"of") is part of a date.
    """
    def month_at(j: int) -> bool:
        return 0 <= j < len(folded) and folded[j] in _MONTHS

    for step in (1, -1):
        j = i + step
        if month_at(j):
            return True
        if 0 <= j < len(folded) and folded[j] in _DATE_GLUE and month_at(j + step):
            return True
    return False


def is_number(fact: str) -> bool:
    """A fact written as a plain number (README: "450000", "1234.5", no separators)."""
    return re.fullmatch(r"-?\d+(?:\.\d+)?", fact.strip()) is not None


def at_precision(value: Decimal) -> Decimal:
    """`value` at the dataset's precision (two decimals, half up)."""
    return value.quantize(PRECISION, rounding=ROUND_HALF_UP)


def fact_in(fact: str, text: str) -> bool:
    """Whether the answer `text` states `fact` (numbers by value, text as whole words)."""
    if is_number(fact):
        target = at_precision(Decimal(fact))
        return any(at_precision(n) == target for n in numbers_in(text))
    needle = fold(fact)
    if not needle:
        return False
    return re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", fold(text)) is not None


def facts_found(facts: list[str], text: str) -> dict[str, bool]:
    """Each fact and whether the answer states it."""
    return {f: fact_in(f, text) for f in facts}


def leaks(answer: str) -> list[str]:
    """What the answer shows that a user must never see: context labels (`rows:`, `(no rows)`,
    `query:`) or exception text (`SomethingError`, `Traceback`). Empty when clean.
    """
    return [name for name, pattern in LEAK_PATTERNS.items() if pattern.search(answer or "")]
