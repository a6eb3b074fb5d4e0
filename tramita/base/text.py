"""Text normalisation and cheap, model-free signals about a message.

These decide things the small model is bad at (measured: it mistakes a question for a parameter
value) without spending an LLM call: language, question form, normalised comparison.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from tramita.base.paths import POLICIES_DIR
from tramita.base.policyfile import load_model

MAX_MESSAGE_CHARS = 4000  # longer messages are truncated before any model sees them

# the calendar's month names, folded, in both languages -> month number (1..12)
MONTHS: dict[str, int] = {
    **{m: i + 1 for i, m in enumerate(["janeiro", "fevereiro", "marco", "abril", "maio", "junho", "julho", "agosto",
                                       "setembro", "outubro", "novembro", "dezembro"])},
    **{m: i + 1 for i, m in enumerate(["january", "february", "march", "april", "may", "june", "july", "august",
                                       "september", "october", "november", "december"])},
}

_SURROGATE = re.compile(r"[\ud800-\udfff]")  # invalid UTF-8 decoded with surrogateescape, or JSON "\ud800"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")


def clean(text: str) -> str:
    """NFKC, control and bidi characters removed, length capped: what every node works on."""
    text = unicodedata.normalize("NFKC", _SURROGATE.sub("\ufffd", text))  # not "?": that reads as a question
    text = text.encode("utf-8", "replace").decode("utf-8", "replace")
    text = _CONTROL.sub(" ", text)
    return text[:MAX_MESSAGE_CHARS].strip()


@lru_cache(maxsize=8192)
def fold(text: str) -> str:
    """Lower-case, accents stripped, punctuation to spaces, single spaces: for lexicon matching.

    Memoised: a routing turn folds the same lexicon phrases and message a few hundred times (about
    3 ms of a 5 ms budget on 2 cores, measured with `tramita bench`'s overhead profile).
    """
    text = unicodedata.normalize("NFKD", text.lower())
    text = "".join(c for c in text if not unicodedata.combining(c))
    text = re.sub(r"[^\w\s-]", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def words(text: str) -> list[str]:
    """The folded words of a message."""
    return fold(text).split()


STEM = 5  # leading letters two words share to count as one ("resolve", "resolver", "resolução")


def stems(text: str, size: int = STEM, least: int = 4) -> set[str]:
    """The leading `size` letters of each folded word of `least` letters or more: Portuguese and
    English inflections of one word (and the two languages' cognates) read alike.
    """
    return {w[:size] for w in re.findall(rf"[^\W\d_]{{{least},}}", fold(text))}


def tokens(text: str) -> list[str]:
    """The folded words of `text`, hyphenated names kept whole ("payments-api", "tier-1")."""
    return re.findall(r"[\w-]+", fold(text))


def span_of(text: str, folded: str) -> str | None:
    """The stretch of `text` whose folded form is `folded` ("Cláudia Reis" for "claudia reis"),
    from a word's start to a word's end; None when `text` does not say it.
    """
    marks = list(re.finditer(r"[\w-]+", text))
    size = len(folded.split())
    for i in range(len(marks) - size + 1):
        stretch = text[marks[i].start():marks[i + size - 1].end()]
        if fold(stretch) == folded:
            return stretch
    return None


def phrase_starts(found: Sequence[str], phrase: str | Sequence[str]) -> list[int]:
    """Where the folded `phrase` starts in the token list `found`, as indices.

    Why: cue rules ask whether a phrase stands within a few words of another ("quantas pessoas",
    "inclusive o impacto indireto", "a despesa mais recente"); each checks its own window from
    these positions.
    """
    target = fold(phrase).split() if isinstance(phrase, str) else list(phrase)
    if not target:
        return []
    n = len(target)
    return [i for i in range(len(found) - n + 1) if list(found[i:i + n]) == target]


class LanguageSignals(BaseModel):
    """`policies/language.yaml`: function words per language, question openers, leading fillers."""

    model_config = ConfigDict(extra="forbid")
    function_words: dict[str, list[str]]
    question_openers: list[str]
    leading_fillers: list[str]
    orthography: dict[str, list[str]] = {}
    partitive_openers: list[str] = Field(default_factory=list, description="words that open a clause naming a set, "
                                         "put before the question about it (\"dos\", \"of the\")")
    names: dict[str, str] = Field(default_factory=dict, description="language code -> its name in English, for "
                                  "prompts that name a language (a question translated for the documents)")


@lru_cache(maxsize=1)
def _language_file() -> LanguageSignals:
    """`policies/language.yaml`, validated once per process (every reader below shares it)."""
    f: LanguageSignals = load_model(POLICIES_DIR / "language.yaml", LanguageSignals)
    return f


@lru_cache(maxsize=1)
def _orthography() -> dict[str, list[re.Pattern[str]]]:
    f = _language_file()
    return {lang: [re.compile(p) for p in pats] for lang, pats in f.orthography.items()}


def _spelling_votes(text: str) -> dict[str, int]:
    """Per language, the words whose spelling only that language uses ("password", "length" are
    English by their letters; "orçamento" is Portuguese by its accent, decided earlier). Ids,
    words of one or two letters and capitalised words after the first (names) do not vote, and
    fewer than two voting words decide nothing: "EXP-0264" or "ok" must not switch the language.
    """
    tokens = [t for t in text.split() if not re.search(r"\d", t)]
    words = [w for w in re.findall(r"[^\W\d_]+", " ".join(tokens)) if len(w) >= 3]
    words = [w for i, w in enumerate(words) if not (i and w[:1].isupper())]
    votes = {lang: 0 for lang in _orthography()}
    if len(words) < 2:
        return votes
    for word in map(fold, words):
        for lang, patterns in _orthography().items():
            if any(p.search(word) for p in patterns):
                votes[lang] += 1
    return votes


@lru_cache(maxsize=1)
def _signals() -> tuple[dict[str, frozenset[str]], tuple[str, ...], re.Pattern[str]]:
    f = _language_file()
    votes = {lang: frozenset(fold(w) for w in ws) for lang, ws in f.function_words.items()}
    fillers = re.compile(r"^(" + "|".join(re.escape(fold(w)) for w in f.leading_fillers) + r")\s+")
    return votes, tuple(fold(w) for w in f.question_openers), fillers


def language_name(code: str) -> str:
    """The English name of a language code (`names` in policies/language.yaml), else the code itself."""
    return _language_file().names.get(code, code)


def detect_language(text: str, default: str = "pt") -> str:
    """'pt' or 'en' by function-word votes; accents are a strong Portuguese signal. A tie (a short
    question with no function word, "Minimum password length?") is broken by spelling
    (`orthography` in policies/language.yaml), and only then falls back to `default`.
    """
    words_only = text.split()
    unnamed = " ".join(w for i, w in enumerate(words_only) if not (i and w[:1].isupper()))  # names do not vote
    if re.search(r"[ãõçáéíóúâêô]", unnamed.lower()):
        return "pt"
    ws = words(text)
    votes = _signals()[0]
    pt = sum(w in votes.get("pt", frozenset()) for w in ws)
    en = sum(w in votes.get("en", frozenset()) for w in ws)
    if pt == en:
        spelled = _spelling_votes(text)
        pt, en = spelled.get("pt", 0), spelled.get("en", 0)
    if pt == en:
        return default
    return "pt" if pt > en else "en"


def is_question(text: str) -> bool:
    """Question form: a '?' or a leading interrogative (after fillers like 'antes,' / 'e')."""
    if "?" in text:
        return True
    _, openers, fillers = _signals()
    f = fillers.sub("", fold(text))
    return f.startswith(openers)


def fronted_set(sentence: str) -> tuple[str, str] | None:
    """(clause, question) of a sentence that puts a partitive clause before its question: "Dos
    serviços que X chama diretamente, quais tiveram incidente?" → ("Dos serviços que X chama
    diretamente", "quais tiveram incidente?"); None when it does not open with a partitive word
    (`partitive_openers`) or no comma is followed by a question word.
    """
    start = fold(sentence).strip()
    if not any(start.startswith(f"{fold(w)} ") for w in _language_file().partitive_openers):
        return None
    split = split_at_question(sentence)
    return None if split is None else (split[0].strip(), split[1].strip())


def asked_after_opener(text: str, phrases: Iterable[str], reach: int = 2) -> list[str]:
    """The `phrases` that start within `reach` words after a question opener, in `phrases`' order:
    "Which projects …", "Em quais os projetos …", "How many services …" ask for projects and
    services; "… owned by the team that runs it?" asks for no team.

    Why: a query that answers such a question must read the records it asks for; a fallback query
    over other records ("which projects does a team own?" answered with the team's services) reads
    as an answer and is not one.
    """
    found = words(text)
    _, openers, _ = _signals()
    ends = [i + len(o.split()) for o in openers for i in phrase_starts(found, o)]
    return [p for p in phrases if any(end <= at <= end + reach for at in phrase_starts(found, p) for end in ends)]


def split_at_question(text: str) -> tuple[str, str] | None:
    """(before, after) `text`'s first comma that a whole question word follows ("…, quantos
    tickets …"); None when no comma is. A comma before an adverbial ("…, directly") splits nothing.
    """
    pieces = text.split(",")
    for k in range(1, len(pieces)):
        if opens_question(pieces[k]):
            return ",".join(pieces[:k]), ",".join(pieces[k:])
    return None


def opens_question(text: str) -> bool:
    """Whether `text` starts with an interrogative as a whole word (after fillers): "quantos tickets
    …", "and who …"; not "comandou …" or "isso …", which only share a prefix with one.
    """
    _, openers, fillers = _signals()
    f = fillers.sub("", fold(text).strip())
    return any(f == o or f.startswith(f"{o} ") for o in openers)


_FIELD_SEPARATOR = re.compile(r"\s+[·|•]\s+|\n")
_FIELD = re.compile(r"^\s*(?:[-*]\s+)?([^\W\d_][^\n:]{0,40}?)\s*:\s*(\S.*)$")


# between a stored passage's title and section on its opening line ("Title — Section", then a
# blank line): the document loader writes it, `labelled_fields` reads past it
HEADING_SEPARATOR = " — "
_PASSAGE_HEADING = re.compile(rf"^[^\n]*{HEADING_SEPARATOR}[^\n]*\n[ \t]*\n", re.MULTILINE)


def labelled_fields(text: str) -> list[tuple[str, str]]:
    """The "Label: value" fields of a text, in reading order ("**Incident commander:** Ana ·
    **Authors:** …" gives ("Incident commander", "Ana"), ("Authors", "…")). Markdown emphasis is
    read through; a label is at most a few words, so a sentence with a colon is no field. A
    passage's opening "Title — Section" line is where it comes from, not a field: a title with a
    colon ("Postmortem INC-1: …") read as one whose label the question says, and its names were
    taken for what the question points back at.
    """
    out: list[tuple[str, str]] = []
    body = _PASSAGE_HEADING.sub("", text)
    for piece in _FIELD_SEPARATOR.split(body.replace("**", "").replace("__", "")):
        m = _FIELD.match(piece)
        if m and len(m.group(1).split()) <= 4:
            out.append((m.group(1).strip(), m.group(2).strip()))
    return out


FIELD_STEM = 6  # a field label's word and a question's word of one root ("comandante", "comandou")


def fields_asked(text: str, asked: str) -> list[str]:
    """The values of the `labelled_fields` of `text` whose label the question `asked` says (every
    word of three letters or more), in reading order: "names an incident commander" asks for the
    value of "Incident commander: …", not of "Authors: …", and so does "who commanded …".
    """
    said = set(re.findall(r"\w+", fold(asked)))
    # a label word said in another form ("commanded" for "Incident commander", "comandou" for
    # "Comandante"): the same first FIELD_STEM letters, both words that long
    roots = stems(asked, FIELD_STEM, FIELD_STEM)
    out = []
    for label, value in labelled_fields(text):
        needed = [w for w in re.findall(r"\w+", fold(label)) if len(w) >= 3]
        if needed and all(w in said or (len(w) >= FIELD_STEM and w[:FIELD_STEM] in roots) for w in needed):
            out.append(value)
    return out


_TABLE_ROW = re.compile(r"^\s*\|(.*)\|\s*$")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*\|?\s*$")


def _cells(line: str) -> list[str]:
    m = _TABLE_ROW.match(line)
    return [c.strip() for c in m.group(1).split("|")] if m else []


def _header_at(lines: list[str], i: int) -> bool:
    """Whether `lines[i]` heads a markdown table: two cells or more, and a rule line under it."""
    return len(_cells(lines[i])) >= 2 and i + 1 < len(lines) and bool(_TABLE_RULE.match(lines[i + 1]))


def tables_as_lines(text: str) -> str:
    """The text with each markdown table's data rows written as one line each, every cell behind
    its column's header ("- Severity: SEV2; Acknowledge within: 30 minutes; Resolve within: 8
    hours"); other text unchanged.

    Why: a small model reading a grid takes a cell from the wrong column (the resolve time given
    as the acknowledge time); with the header beside each value there is no column to count.
    """
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        if _header_at(lines, i):
            header = _cells(lines[i])
            i += 2
            while i < len(lines) and (row := _cells(lines[i])):
                pairs = [f"{h}: {c}" if h else c for h, c in zip(header, row, strict=False) if c]
                out.append(f"- {'; '.join(pairs)}")
                i += 1
            continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


def last_table_header(text: str) -> str | None:
    """The header line and rule line of the last markdown table that starts in `text`, or None."""
    lines = text.split("\n")
    found = None
    for i in range(len(lines) - 1):
        if _header_at(lines, i):
            found = f"{lines[i]}\n{lines[i + 1]}"
    return found


def continued_table(piece: str, header: str | None) -> str:
    """`piece` with the table `header` (header and rule lines) before it when it opens inside a
    table: a chunk cut from the middle of a table keeps what its columns are.
    """
    lines = piece.lstrip("\n").split("\n")
    opens_in_table = bool(_cells(lines[0])) and not (len(lines) > 1 and _TABLE_RULE.match(lines[1]))
    return f"{header}\n{piece.lstrip()}" if header and opens_in_table else piece
