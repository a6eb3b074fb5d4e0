"""Answer-fact matching as sample/novaops/README.md describes it.

Numbers are compared as numbers whatever their format ("450.000", "450,000", "450000.00",
"450 mil" all equal 450000), and a fact written with fewer decimals is the rounded form of the
answer's number (fact "17.3" accepts 17.27); names and other strings case-insensitively and
without accents.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal, InvalidOperation

_NUM = re.compile(r"(?<![\w])-?\d[\d.,\s]*\d(?:\s*(?:mil|k)\b)?|(?<![\w])-?\d(?:\s*(?:mil|k)\b)?", re.IGNORECASE)


def fold(text: str) -> str:
    text = unicodedata.normalize("NFKD", text.casefold())
    text = "".join(c for c in text if not unicodedata.combining(c))
    return re.sub(r"\s+", " ", text).strip()


def _parse(token: str) -> Decimal | None:
    t = token.strip().lower()
    mult = Decimal(1)
    m = re.search(r"\s*(mil|k)$", t)
    if m:
        mult = Decimal(1000)
        t = t[: m.start()].strip()
    t = t.replace(" ", "")
    if "," in t and "." in t:
        dec = "," if t.rfind(",") > t.rfind(".") else "."
        t = t.replace("." if dec == "," else ",", "").replace(dec, ".")
    elif "," in t:
        parts = t.split(",")
        t = "".join(parts) if all(len(p) == 3 for p in parts[1:]) and len(parts) > 1 and len(parts[-1]) == 3 else t.replace(",", ".")
    elif t.count(".") >= 1:
        parts = t.split(".")
        if len(parts) > 2 or (len(parts) == 2 and len(parts[1]) == 3 and mult == 1 and len(parts[0]) <= 3):
            t = "".join(parts)  # 450.000 → thousands separators
    try:
        return Decimal(t) * mult
    except InvalidOperation:
        return None


def numbers_in(text: str) -> list[Decimal]:
    out = []
    for m in _NUM.finditer(text):
        v = _parse(m.group(0))
        if v is not None:
            out.append(v)
        # also each whitespace-separated piece ("80 dólares por 30 dias" → 80, 30)
        for piece in re.split(r"\s+", m.group(0).strip()):
            pv = _parse(piece)
            if pv is not None:
                out.append(pv)
    return out


def is_number(fact: str) -> bool:
    return re.fullmatch(r"-?\d+(?:\.\d+)?", fact.strip()) is not None


def half_unit(value: Decimal) -> Decimal:
    """Half a unit of the last decimal `value` shows (17.3 → 0.05; "17.30" → 0.005), 0 for an
    integer: the span within which a more precise number rounds to `value`."""
    exponent = value.as_tuple().exponent
    decimals = -exponent if isinstance(exponent, int) and exponent < 0 else 0
    return Decimal(5) / Decimal(10) ** (decimals + 1) if decimals else Decimal(0)


def _precision(fact: Decimal) -> Decimal:
    """How far an answer's number may be from a numeric fact: `half_unit` of the fact ("17.3" is
    the rounded form of 17.27), and never less than half a cent, so that "470000" accepts
    "470,000.00"."""
    return max(Decimal("0.005"), half_unit(fact))


def fact_in(fact: str, text: str) -> bool:
    if is_number(fact):
        target = Decimal(fact)
        return any(abs(n - target) <= _precision(target) for n in numbers_in(text))
    return fold(fact) in fold(text)


def facts_found(facts: list[str], text: str) -> dict[str, bool]:
    return {f: fact_in(f, text) for f in facts}
