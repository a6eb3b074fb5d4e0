"""The span rule: a free-text value is a contiguous span of the user's own message.

A reason, a title, a description or a justification is stored verbatim from what the user typed,
never as the model's paraphrase: a small model asked for "the reason" happily writes one, and a
reason nobody gave is an invented fact in the audit trail. So every free-text value must be

- a contiguous span of the message (the LLM may only *point* at one: it copies, `verify` checks
  the copy and stores the message's own characters),
- trimmed of fillers at its ends (greetings, apologies, "hmm", "por favor"), of an opening copula or
  lead-in ("é o …", "it's …", "na verdade"), of a leading marker ("motivo:", "because") and of whole
  clauses at its ends that carry no content ("é no expense-portal, o upload …"),
- and left with content: at least one word that is not a filler, a function word, a word that only
  restates a value ("despesa", "dólares"), a value used for another parameter, or anything with a
  digit (ids, numbers, dates). "desculpa, é o INC-2079" therefore fills no reason.

Where a clear marker exists (":" after the action, " - ", "porque"/"because", "motivo:"/"title:")
the span is found without a model (`marked`); `head_clause` is the text before that marker, the
clause that names the action, which tool matching and typed extraction read first.

Everything here is a pure function of its arguments and of `policies/spans.yaml` (validated once).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from tramita.base.paths import POLICIES_DIR
from tramita.base.policyfile import load_model

SPANS_FILE = POLICIES_DIR / "spans.yaml"

PerLanguage = dict[str, list[str]]


class Label(BaseModel):
    """A label that introduces a free-text value ("motivo:"), and the parameters it may fill."""

    model_config = ConfigDict(extra="forbid")
    params: list[str] = Field(min_length=1, description="parameter names, in preference order")
    phrases: PerLanguage = Field(description="the label's words per language, without the colon")


class SpanRules(BaseModel):
    """`policies/spans.yaml`: fillers, openers, markers, and the words that never count as content."""

    model_config = ConfigDict(extra="forbid")
    fillers: dict[str, PerLanguage] = Field(description="groups of phrases trimmed at both ends")
    openers: PerLanguage = Field(description="phrases trimmed at the start only")
    because: PerLanguage = Field(description="words that open a reason")
    labels: list[Label]
    function_words: PerLanguage
    value_words: PerLanguage


@lru_cache(maxsize=4)
def span_rules(path: Path = SPANS_FILE) -> SpanRules:
    """The validated rules of `path`, read once per process."""
    rules: SpanRules = load_model(path, SpanRules)
    return rules


# ------------------------------------------------------------------------------------- tokens

_TOKEN = re.compile(r"\w+(?:[-/]\w+)*")
# Where a clause ends inside a span: punctuation, or a spaced dash.
_CLAUSE_BREAK = re.compile(r"[,;.!?…]+(?=\s|$)|\s[-–—]\s|:(?=\s)")
_UNIT_SIGNS = "%°"
_EDGE_PUNCT = " \t\n\r,;:.!?…-–—\"'“”‘’«»*"
_OPENERS = "([{“‘«\"'"
_CLOSERS = {"(": ")", "[": "]", "{": "}", "“": "”", "‘": "’", "«": "»", '"': '"', "'": "'"}


def _fold_word(word: str) -> str:
    decomposed = unicodedata.normalize("NFKD", word.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


@dataclass(frozen=True)
class Token:
    """A word of the original text: its folded form and where it is."""

    word: str
    start: int
    end: int


def tokens(text: str) -> list[Token]:
    """The words of `text` (ids and hyphenated names are one word), folded, with their offsets."""
    return [Token(_fold_word(m.group(0)), m.start(), m.end()) for m in _TOKEN.finditer(text)]


def _phrase_table(table: Iterable[str]) -> list[tuple[str, ...]]:
    """Folded phrases as word tuples, longest first (so "foi mal" wins over "foi")."""
    out = {tuple(_fold_word(w) for w in _TOKEN.findall(p)) for p in table}
    return sorted((p for p in out if p), key=len, reverse=True)


def _flat(table: PerLanguage) -> list[str]:
    return [p for phrases in table.values() for p in phrases]


@lru_cache(maxsize=4)
def _compiled(path: Path = SPANS_FILE) -> dict[str, list[tuple[str, ...]]]:
    r = span_rules(path)
    both = [p for group in r.fillers.values() for p in _flat(group)]
    return {
        "both": _phrase_table(both),
        "start": _phrase_table([*both, *_flat(r.openers)]),
        "because": _phrase_table(_flat(r.because)),
        "noncontent": _phrase_table([*both, *_flat(r.openers), *_flat(r.function_words), *_flat(r.value_words)]),
    }


@lru_cache(maxsize=4)
def _labels(path: Path = SPANS_FILE) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(label phrase, the parameters it fills), longest phrases first."""
    out = [(phrase, tuple(label.params)) for label in span_rules(path).labels
           for phrase in _phrase_table(_flat(label.phrases))]
    return sorted(out, key=lambda pair: len(pair[0]), reverse=True)


def _starts_with(toks: list[Token], i: int, phrase: tuple[str, ...]) -> bool:
    return tuple(t.word for t in toks[i:i + len(phrase)]) == phrase


def _ends_with(toks: list[Token], j: int, phrase: tuple[str, ...]) -> bool:
    n = len(phrase)
    return j - n >= 0 and tuple(t.word for t in toks[j - n:j]) == phrase


def _value_words(others: Iterable[object]) -> set[str]:
    """The words of the values other parameters use (their surface forms and canonical values)."""
    out: set[str] = set()
    for value in others:
        if value is None:
            continue
        out.update(t.word for t in tokens(str(value)))
    return out


# ------------------------------------------------------------------------------------ content

def content_words(text: str, others: Iterable[object] = (), path: Path = SPANS_FILE) -> list[str]:
    """The words of `text` that carry content: not fillers, function or value words, not a word of
    another parameter's value, and without a digit.
    """
    toks = tokens(text)
    taken = _value_words(others)
    skip = [False] * len(toks)
    for i in range(len(toks)):
        for phrase in _compiled(path)["noncontent"]:
            if _starts_with(toks, i, phrase):
                for k in range(i, i + len(phrase)):
                    skip[k] = True
                break
    return [t.word for t, s in zip(toks, skip, strict=True)
            if not s and t.word not in taken and not any(c.isdigit() for c in t.word)]


def has_content(text: str, others: Iterable[object] = (), path: Path = SPANS_FILE) -> bool:
    """Whether `text` says something beyond fillers, values and their restatement."""
    return bool(content_words(text, others, path))


# --------------------------------------------------------------------------------------- trim

def clauses(text: str) -> list[tuple[int, int]]:
    """(start, end) of each clause of `text`, split at punctuation and spaced dashes."""
    out: list[tuple[int, int]] = []
    start = 0
    for m in _CLAUSE_BREAK.finditer(text):
        out.append((start, m.start()))
        start = m.end()
    out.append((start, len(text)))
    return [(s, e) for s, e in out if text[s:e].strip()]


def _trim_words(text: str, path: Path) -> tuple[int, int]:
    """Offsets of `text` without fillers at its ends and openers / markers at its start."""
    toks = tokens(text)
    i, j = 0, len(toks)
    table = _compiled(path)
    labels = [p for p, _ in _labels(path)]
    changed = True
    while changed and i < j:
        changed = False
        for phrase in [*table["start"], *table["because"]]:
            if len(phrase) <= j - i and _starts_with(toks, i, phrase):
                i += len(phrase)
                changed = True
                break
        if changed:
            continue
        for phrase in labels:  # "motivo: …" at the start of a span
            n = len(phrase)
            if n <= j - i and _starts_with(toks, i, phrase) and text[toks[i + n - 1].end:].lstrip().startswith(":"):
                i += n
                changed = True
                break
        if changed:
            continue
        for phrase in table["both"]:
            if len(phrase) <= j - i and _ends_with(toks, j, phrase):
                j -= len(phrase)
                changed = True
                break
    if i >= j:
        return 0, 0
    return toks[i].start, toks[j - 1].end


def _close_brackets(text: str, start: int, end: int) -> int:
    """Extend `end` over closing brackets/quotes whose opener is inside the span ("(PRJ-106)")."""
    inside = text[start:end]
    while end < len(text) and text[end] in _CLOSERS.values():
        opener = next((o for o, c in _CLOSERS.items() if c == text[end]), "")
        if inside.count(opener) > inside.count(text[end]) or (opener == text[end] and inside.count(opener) % 2 == 1):
            inside += text[end]
            end += 1
        else:
            break
    return end


def _open_brackets(text: str, start: int, end: int) -> int:
    """Extend `start` back over an opening bracket/quote whose closer is inside the span."""
    while start > 0 and text[start - 1] in _OPENERS:
        closer = _CLOSERS[text[start - 1]]
        if closer in text[start:end]:
            start -= 1
        else:
            break
    return start


def trim_offsets(text: str, others: Iterable[object] = (), path: Path = SPANS_FILE) -> tuple[int, int]:
    """Offsets of the part of `text` that is the value: fillers, openers and markers trimmed, and
    clauses at either end that carry no content dropped; (0, 0) when nothing is left.
    """
    values = list(others)
    start, end = 0, len(text)
    while True:
        a, b = _trim_words(text[start:end], path)
        if a == b:
            return 0, 0
        start, end = start + a, start + b
        parts = clauses(text[start:end])
        if len(parts) > 1:
            first, last = parts[0], parts[-1]
            if not has_content(text[start + first[0]:start + first[1]], values, path):
                start = start + parts[1][0]
                continue
            if not has_content(text[start + last[0]:start + last[1]], values, path):
                end = start + parts[-2][1]
                continue
        break
    end = _close_brackets(text, start, end)
    start = _open_brackets(text, start, end)
    return start, _past_signs(text, end)


def _past_signs(text: str, end: int) -> int:
    """`end` moved past the unit signs right after it ("90%" keeps its sign)."""
    while end < len(text) and text[end] in _UNIT_SIGNS:
        end += 1
    return end


def trim(text: str, others: Iterable[object] = (), path: Path = SPANS_FILE) -> str:
    """`text` without fillers, openers, markers and content-free end clauses ("" when nothing is left)."""
    a, b = trim_offsets(text, others, path)
    return text[a:b].strip(_EDGE_PUNCT.replace('"', "").replace("'", "")) if b > a else ""


# ------------------------------------------------------------------------------ locate and snap

def _normalized(text: str) -> tuple[str, list[int]]:
    """Lower case, accents and repeated spaces removed, with each kept character's offset in `text`."""
    chars: list[str] = []
    where: list[int] = []
    for i, ch in enumerate(text):
        if ch.isspace():
            if chars and chars[-1] != " ":
                chars.append(" ")
                where.append(i)
            continue
        folded = _fold_word(ch)
        for f in folded:
            chars.append(f)
            where.append(i)
    while chars and chars[-1] == " ":
        chars.pop()
        where.pop()
    return "".join(chars), where


def locate(value: str, message: str) -> tuple[int, int] | None:
    """Where `value` occurs in `message` (case, accents and spacing ignored), as offsets of the
    message; None when it is not a contiguous part of it.
    """
    needle, _ = _normalized(str(value).strip().strip(_EDGE_PUNCT))
    if not needle:
        return None
    hay, where = _normalized(message)
    at = hay.find(needle)
    if at < 0:
        return None
    return where[at], where[at + len(needle) - 1] + 1


SNAP_RATIO = 0.85  # how close a copy must be to the window of the message it points at
RUN_WORDS = 4  # a copy with words added around it: the shared run must be this long ...
RUN_SHARE = 0.6  # ... and cover this share of the copy's words


def snap(value: str, message: str) -> tuple[int, int] | None:
    """The window of `message` that a near-copy points at, or None.

    A small model copying a span sometimes drops an article or a comma; the window between the
    copy's first and last words in the message is taken when the words agree closely (difflib
    ratio ≥ SNAP_RATIO). A paraphrase shares too few words in order and is not snapped.
    """
    want = [t.word for t in tokens(str(value))]
    have = tokens(message)
    if len(want) < 2 or not have:
        return None
    best: tuple[float, int, int] | None = None
    for i, t in enumerate(have):
        if t.word != want[0]:
            continue
        for j in range(i, min(len(have), i + 2 * len(want) + 2)):
            if have[j].word != want[-1]:
                continue
            window = [h.word for h in have[i:j + 1]]
            ratio = SequenceMatcher(a=window, b=want, autojunk=False).ratio()
            if ratio >= SNAP_RATIO and (best is None or ratio > best[0]):
                best = (ratio, have[i].start, have[j].end)
    return (best[1], best[2]) if best else None


def shared_run(value: str, message: str) -> tuple[int, int] | None:
    """The window of `message` that a copy with words added or moved around it contains, or None.

    A small model asked to point at "the title" sometimes copies the clause and then appends a
    value from elsewhere in the message ("… trava em 90% no expense-portal"). The longest run of
    the message's words found, in order, in the copy is taken when it is at least RUN_WORDS long
    and covers RUN_SHARE of the copy: what is stored is still only the message's own words.
    """
    want = [t.word for t in tokens(str(value))]
    have = tokens(message)
    if len(want) < RUN_WORDS or not have:
        return None
    words = [h.word for h in have]
    m = SequenceMatcher(a=words, b=want, autojunk=False).find_longest_match(0, len(words), 0, len(want))
    if m.size < RUN_WORDS or m.size < RUN_SHARE * len(want):
        return None
    return have[m.a].start, have[m.a + m.size - 1].end


# ------------------------------------------------------------------------------------- verify

@dataclass(frozen=True)
class Verdict:
    """The span rule's answer for one value: the value to store (the message's own words), or why not."""

    value: str | None
    reason: str

    @property
    def ok(self) -> bool:
        """Whether the value passed the span rule."""
        return self.value is not None


def verify(value: object, message: str, others: Iterable[object] = (), path: Path = SPANS_FILE) -> Verdict:
    """Apply the span rule to a free-text value proposed for `message` (by the LLM or a marker).

    `others` are the values (surface forms and canonical values) used by the other parameters: a
    span made only of them restates them and fills nothing.
    """
    if value is None or not str(value).strip():
        return Verdict(None, "empty")
    where = locate(str(value), message) or snap(str(value), message) or shared_run(str(value), message)
    if where is None:
        return Verdict(None, "not a span of the message (paraphrased or invented)")
    span = message[where[0]:_past_signs(message, where[1])]
    kept = trim(span, others, path)
    if not kept:
        return Verdict(None, "only fillers, apologies or values of other parameters")
    if not has_content(kept, others, path):
        return Verdict(None, "no content beyond fillers and values")
    return Verdict(kept, "span")


def is_span(value: object, messages: Iterable[str]) -> bool:
    """Whether `value` is a contiguous span of one of `messages` (case, accents, spacing ignored).

    The evals' invented-value check: anything stored as free text must pass it.
    """
    return value is not None and any(locate(str(value), m) is not None for m in messages)


# ------------------------------------------------------------------------------------ markers

@dataclass(frozen=True)
class Marked:
    """A clear marker in a message: what comes before it (the clause that names the action), the
    raw text after it, and the parameters a label names (empty for ":", " - " and "porque").
    """

    head: str
    tail: str
    params: tuple[str, ...]
    kind: str
    start: int


_COLON = re.compile(r"(?<!\d):(?!//)(?!\d)|(?<=\d):(?=\D)")
_DASH = re.compile(r"\s[-–—]\s")


def marked(message: str, path: Path = SPANS_FILE) -> Marked | None:
    """The earliest clear marker of a free-text value in `message`, or None.

    Markers, earliest first wins: a label and its colon ("motivo:", "title:"), a "because" word
    ("porque", "because"), a colon that is not part of a time or a URL, a spaced dash.
    """
    toks = tokens(message)
    found: list[Marked] = []
    for i in range(len(toks)):
        for phrase, params in _labels(path):
            n = len(phrase)
            if _starts_with(toks, i, phrase):
                after = message[toks[i + n - 1].end:]
                stripped = after.lstrip()
                if stripped.startswith(":"):
                    cut = toks[i + n - 1].end + (len(after) - len(stripped)) + 1
                    found.append(Marked(message[:toks[i].start], message[cut:], params, "label", toks[i].start))
                    break
        for phrase in _compiled(path)["because"]:
            if _starts_with(toks, i, phrase):
                end = toks[i + len(phrase) - 1].end
                found.append(Marked(message[:toks[i].start], message[end:], (), "because", toks[i].start))
                break
        if found:
            break
    for kind, pattern in (("colon", _COLON), ("dash", _DASH)):
        m = pattern.search(message)
        if m:
            found.append(Marked(message[:m.start()], message[m.end():], (), kind, m.start()))
    found = [f for f in found if f.tail.strip()]
    if not found:
        return None
    first = min(found, key=lambda f: (f.start, f.kind != "label"))
    return Marked(first.head.strip(" \t,;"), first.tail.strip(), first.params, first.kind, first.start)


def head_clause(message: str, path: Path = SPANS_FILE) -> str:
    """The clause that names the action: the text before the first clear marker ("abre um chamado P2
    no search-service" of "… : o autocomplete parou"), or the whole message when there is none.
    """
    m = marked(message, path)
    if m is None or not m.head.strip():
        return message
    return m.head


# ------------------------------------------------------------------------------------------ fit

_FIT_BREAK = re.compile(r"[,;.!?…]+\s|\s[-–—]\s|\s(?=porque\b|because\b|mas\b|but\b|e\s+o\b|and\s+the\b)", re.IGNORECASE)


def fit(span: str, max_len: int, others: Iterable[object] = (), path: Path = SPANS_FILE) -> str | None:
    """`span` when it fits in `max_len` characters, else its longest leading clause(s) that fit (a
    shorter span of the same words, still the user's own), else its longest leading run of whole
    words; None when not even that keeps content.
    """
    if len(span) <= max_len:
        return span
    values = list(others)
    cuts = sorted({m.start() for m in _FIT_BREAK.finditer(span) if 0 < m.start() <= max_len}, reverse=True)
    for cut in cuts:
        piece = trim(span[:cut], values, path)
        if piece and has_content(piece, values, path) and len(piece) <= max_len:
            return piece
    cut = span.rfind(" ", 0, max_len + 1)
    if cut > 0:
        piece = trim(span[:cut], values, path)
        if piece and has_content(piece, values, path):
            return piece
    return None
