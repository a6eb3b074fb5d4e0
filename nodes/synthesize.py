"""synthesize: one answer, in the user's language, citing only the sources it used. It never runs a tool.

What the user reads is decided here, on every path (answered, nothing found, model failed):
- the model sees each result as a small table with column names and units, numbers already
  written the way the user's language writes them (`tools.backends.base.present_rows`), never a
  query or a `rows:` dump it could copy;
- a backend that failed is named in one plain sentence (`source_gap`, policies/replies.yaml), and
  only when it was part of the plan and no standby answered for it; its error stays in the trace;
- `clean_answer` runs last on what the model wrote: it removes context labels and exception text
  that slipped through, citation tags of sources the answer did not use (or that do not exist),
  and a currency the context never showed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.state import State
from nodes.common import ctx_of, lang_of, svc, trace, user_text
from tools.backends import BACKENDS
from tools.backends.base import column_units, format_number, present_rows
from tools.llm import LLMError, Usage, text_call
from tools.text_to_cypher import UnsaidValueError
from tramita.base.logmask import get_logger
from tramita.base.text import fold
from tramita.core.replies import say

log = get_logger("tramita.synthesize")

LANGUAGE = {"pt": "Portuguese (Brazil)", "en": "English"}
_LABEL_LINE = re.compile(r"\brows:|\(no rows\)|\bquery:|\bTraceback\b|\b\d+ results?:|\bno matching records\b"
                         r"|\[api:[^\[\]\n]{1,60}\]\s*(?:data:|GET\b)|-> HTTP \d{3}",
                         re.IGNORECASE)
_EXCEPTION = re.compile(r"\b\w+(?:Error|Exception)\b(?::\s*[^.\n]*)?")
_TAG = re.compile(r"\[([^\[\]\n]{1,80})\]")
_CUT_TAG = re.compile(r"[ \t]*\[[^\[\]\n]{0,80}\Z")  # a tag the token limit cut ("… Leonardo Rocha [doc")
_TABLE_LINE = re.compile(r"^\s*\||\S \| \S")  # a result-table line, two columns or more
_SENTENCE = re.compile(r".+?(?:[.!?]+(?=\s|$)|$)", re.MULTILINE)  # "23.183,12" does not end a sentence
_CONTENT = re.compile(r"\d[\d.,]*\d|\d|[^\W\d_]{4,}")
_NUMBER = re.compile(r"[-+]?\d[\d.,]*")


# ----------------------------------------------------------------------------------- context

def render_contexts(contexts: list[dict[str, Any]], lang: str = "en", units: Mapping[str, str] | None = None,
                    max_chars: int = 4500) -> str:
    """Context block for synthesis: each backend renders its own result under its citation tag, in
    the plan's order (numbers per `lang`, units from `units`). Within `max_chars`, result tables are
    kept whole and passages share what is left.

    Why: passages come first in the plan's order, and a long policy section cut a database result
    that came after it off the block; the model then said that no row matched.
    """
    parts: list[tuple[bool, str]] = []
    for c in contexts:
        if c.get("error") or c.get("backend") not in BACKENDS:
            continue
        rows = isinstance(c.get("rows"), list) and "items" not in c
        shown = present_rows(c, lang, units) if rows else c
        text = BACKENDS[c["backend"]].render(shown)
        if text:
            parts.append((rows, text))
    room = max_chars - sum(len(t) + 2 for rows, t in parts if rows)
    passages = sum(1 for rows, _ in parts if not rows)
    share = max(room // passages - 2, 0) if passages else 0
    return "\n\n".join(t if rows else t[:share] for rows, t in parts if rows or share)[:max_chars]


def source_name(backend: str) -> str:
    """How a backend is named in the no-records sentence: its citation tag, or its name for documents."""
    b = BACKENDS.get(backend)
    return b.citation if b is not None and not b.citation.endswith("-") else backend


def source_label(backend: str, lang: str) -> str:
    """How a backend is named to the user in plain words (policies/replies.yaml `source_<name>`)."""
    try:
        return say(f"source_{backend}", lang)
    except KeyError:
        return backend


def _joined(items: list[str], lang: str) -> str:
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {say('and', lang)} {items[-1]}"


UNNAMED = UnsaidValueError.__name__  # how a context's error starts when its query named an unsaid record


def gap_sentence(failed: Iterable[str], lang: str, key: str = "source_gap") -> str:
    """One plain sentence naming the sources that could not be checked ("" for none)."""
    labels = list(dict.fromkeys(source_label(b, lang) for b in failed))
    return say(key, lang, sources=_joined(labels, lang)) if labels else ""


def _gaps(contexts: list[dict[str, Any]], planned: set[str], lang: str) -> str:
    """The sentences for the planned sources that failed: a source whose query could only be
    written with a record the question does not name, or to which the question gave nothing it can
    ask (`unasked`: no declared operation, a required value missing), says so (the user can name
    it), not that the source could not be reached; so does one whose query the model could not
    write (`unwritten`: every attempt refused or failed, the store up). A failed source another answered for
    (`replaced_by`, the plan's standby) is no gap to the user.
    """
    failed = [c for c in contexts
              if c.get("error") and str(c.get("backend")) in planned and not c.get("replaced_by")]

    def nameable(c: dict[str, Any]) -> bool:  # naming who or what the part is about may help
        return bool(c.get("unasked")) or str(c["error"]).startswith(UNNAMED)

    down = [str(c["backend"]) for c in failed if not nameable(c) and not c.get("unwritten")]
    unnamed = [str(c["backend"]) for c in failed if nameable(c)]
    # a query the model could not write is no outage: "just now" would send the user back to retry
    unwritten = [str(c["backend"]) for c in failed if not nameable(c) and c.get("unwritten")]
    return " ".join(s for s in (gap_sentence(down, lang), gap_sentence(unnamed, lang, "source_unnamed"),
                                gap_sentence(unwritten, lang, "source_unwritten")) if s)


def _units(ctx: Context) -> dict[str, str]:
    """The semantic model's units for this deployment ({} when there is none to read)."""
    try:
        from tools.backends.vocabulary import semantic_units

        return semantic_units(svc(ctx).settings.semantic_model_file())
    except Exception:  # noqa: BLE001 - units then come from column names only
        return {}


# -------------------------------------------------------------------------------- sanitiser

def _tags_by_context(block: str) -> dict[str, str]:
    """Citation tag (case-folded) → the text shown under it, from the rendered context block."""
    out: dict[str, str] = {}
    current = ""
    for line in block.splitlines():
        m = re.match(r"^\[([^\[\]\n]{1,80})\]", line)
        if m:
            current = m.group(1)
            out.setdefault(current.casefold(), "")
            if re.match(r"^\[[^\]]+\]\s+no matching records\.?$", line.strip()):
                out.pop(current.casefold(), None)
                current = ""
                continue
        if current:
            out[current.casefold()] = out.get(current.casefold(), "") + "\n" + line
    return out


def _content(text: str) -> set[str]:
    return {fold(t).replace(",", ".") for t in _CONTENT.findall(text)}


def _table_as_list(lines: list[str]) -> list[str]:
    """An answer that is only a copied result table, as a plain list: cells joined by commas, the
    header line (the column names, often in parentheses) left out.
    """
    out = []
    header = True
    for ln in lines:
        if not _TABLE_LINE.search(ln):
            out.append(ln)
            continue
        cells = [c.strip() for c in ln.strip().strip("()").split("|") if c.strip()]
        if header or ln.strip().startswith("(") or all(re.fullmatch(r":?-+:?", c) for c in cells):
            header = False
            continue  # the header (column names, not data) and a markdown rule under it
        out.append("- " + ", ".join(cells))
    return out


def _writes(folded: str, value: str) -> bool:
    """Whether the folded text `folded` writes `value` as a whole word run (folded alike)."""
    return re.search(rf"(?<!\w){re.escape(fold(value))}(?!\w)", folded) is not None


def _in_results(value: str, sources: dict[str, str]) -> bool:
    """Whether `value` is written, as a whole word run, in the material shown under some tag."""
    return bool(value) and any(_writes(fold(body), value) for body in sources.values())


def _unlabelled(line: str) -> str:
    """The line without its sentences that carry a context label: the model sometimes ends a real
    sentence with a copied label ("… não tem plantão. [graph] no matching records."), and dropping
    the whole line would drop the answer with it. A line of only labels comes back empty.
    """
    if not _LABEL_LINE.search(line):
        return line
    kept = [s.strip() for s in _SENTENCE.findall(line) if s.strip() and not _LABEL_LINE.search(s)]
    return " ".join(kept) if any(re.search(r"[^\W\d_]{2,}", s) for s in kept) else ""


def clean_answer(answer: str, block: str) -> str:
    """The model's answer without what a user must never see, and citing only what it used.

    - lines carrying a context label (`rows:`, `(no rows)`, `query:`), copying the line on what
      a result's rows are, or a traceback go, and so
      does exception text (`SomethingError: …`), and result-table lines copied verbatim, unless
      the prose beside them says nothing the context holds: then the table's rows are the answer;
    - a citation tag stays only when the context shows that tag with material under it AND its
      sentence shares a word or number with that material (the answer used it); any other tag,
      invented or unused, goes;
    - "R$" becomes the context's "US$" when the context never shows reais;
    - a tag left open at the end (the token limit cut the answer inside it) goes.
    """
    # the line on what a result's rows are ("(The on-call schedule of one employee)") is a label too
    abouts = {ln.strip() for ln in block.splitlines() if ln.strip().startswith("(") and ln.strip().endswith(")")}
    lines = [rest for ln in answer.splitlines() if ln.strip() not in abouts and (rest := _unlabelled(ln))]
    kept = [ln for ln in lines if not _TABLE_LINE.search(ln)]
    # prose that says nothing the context holds ("Here is the answer:") only introduced the table
    says = _content("\n".join(kept)) & _content(block)
    text = "\n".join(kept if says or len(kept) == len(lines) else _table_as_list(lines))
    text = _EXCEPTION.sub("", text)
    sources = _tags_by_context(block)
    shown = {tag: _content(body) for tag, body in sources.items()}

    def sentence(m: re.Match[str]) -> str:
        s = m.group(0)
        words = _content(_TAG.sub(" ", s))

        def tag(t: re.Match[str]) -> str:
            used = [p.strip() for p in t.group(1).split(",")
                    if p.strip().casefold() in shown and words & shown[p.strip().casefold()]]
            if used:
                return f"[{', '.join(used)}]"
            # a value of the results written in brackets like a tag ("[api-gateway], [auth-service]")
            # is the answer itself: keep its text, not the brackets
            inner = t.group(1).strip()
            return inner if inner.casefold() not in sources and _in_results(inner, sources) else ""

        return _TAG.sub(tag, s)

    text = _SENTENCE.sub(sentence, text)
    text = _CUT_TAG.sub("", text)
    if "R$" in text and "R$" not in block and "BRL" not in block and ("US$" in block or "USD" in block):
        text = text.replace("R$", "US$")
    text = re.sub(r"[ \t]+([.,;:!?])", r"\1", text)
    text = re.sub(r"[ \t]{2,}", " ", text)
    text = re.sub(r"\(\s*\)", "", text)
    return "\n".join(ln.rstrip() for ln in text.splitlines()).strip()


_CLAUSE_START = re.compile(r"[,;:]\s+|\s(?:and|but|e|mas)\s", re.IGNORECASE)


def without_column_names(answer: str, contexts: list[dict[str, Any]]) -> str:
    """The answer without the clause that writes a result column's name where its value belongs
    ("… is Pagamentos, and its head is owner_team.name"): from the clause's start (a comma, "and",
    "e") to the sentence's end, or the whole sentence when it is one clause. Only names that are
    identifiers (with '.' or '_'), so a column called "team" is not taken for the word, and only
    where the sentence writes none of that column's values. Why: the 1.5B model writes the header
    of a column it has no value for, and the user must not see it.
    """
    values: dict[str, set[str]] = {}
    nested: set[str] = set()  # a column of lists or records (an API's open incidents) is left alone
    for c in contexts:
        for r in c.get("rows") or []:
            for k, v in (r.items() if isinstance(r, dict) else ()):
                if re.search(r"[._]", str(k)):
                    values.setdefault(str(k).casefold(), set()).add(str(v).strip())
                    if isinstance(v, (list, tuple, dict)):
                        nested.add(str(k).casefold())
    values = {k: v for k, v in values.items() if k not in nested}
    if not values:
        return answer
    column = re.compile(r"(?<![\w.])`?(" + "|".join(re.escape(n) for n in sorted(values, key=len, reverse=True))
                        + r")`?(?![\w])", re.IGNORECASE)

    def sentence(m: re.Match[str]) -> str:
        s = m.group(0)
        labels: list[tuple[int, int]] = []
        for hit in column.finditer(s):
            starts = [c.start() for c in _CLAUSE_START.finditer(s, 0, hit.start())]
            after = next((c.start() for c in _CLAUSE_START.finditer(s, hit.end()) if c.group(0).strip() != ":"), len(s))
            clause = fold(s[starts[-1] if starts else 0:after])
            # a name beside one of its values is a label the model copied ("SRE teams.name"): the
            # name goes, the value stays
            if any(v and _writes(clause, v) for v in values[hit.group(1).casefold()]):
                labels.append(hit.span())
                continue
            if not starts:
                return ""
            end = s.rstrip()[-1] if s.rstrip()[-1:] in ".!?" else "."
            return s[:starts[-1]].rstrip(" ,;:") + end + s[len(s.rstrip()):]
        for a, b in reversed(labels):
            tail = re.match(r"\s*[:=]\s*", s[b:])  # "incident_id: INC-2080"
            s = s[:a].rstrip(" ") + (" " if a and tail is None else "") + s[b + (tail.end() if tail else 0):].lstrip(" ")
        return re.sub(r" +([,.;!?])", r"\1", s) if labels else s

    text = _SENTENCE.sub(sentence, answer)
    return "\n".join(ln.rstrip() for ln in text.splitlines() if ln.strip() or not ln).strip()


_LIST_ITEM = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s")


def _bare(text: str) -> str:
    return " ".join(re.findall(r"\w+", fold(text)))


def without_preamble(answer: str, question: str, block: str) -> str:
    """The answer without lines that restate the question, and without an opening line that only
    announces what follows ("Here is the answer:"): it ends with a colon, says nothing the context
    holds, and prose (not a list it introduces) follows it.

    Why: the 1.5B model sometimes opens with both; the user asked the question and wants the answer.
    """
    asked = _bare(question)
    # a question of the user's copied back as a sentence of the answer ("… não tem plantão. E
    # quantos tickets estão ativos?") answers nothing
    parts = {_bare(s) for s in _SENTENCE.findall(question) if s.strip().endswith("?")}
    lines = [" ".join(s.strip() for s in _SENTENCE.findall(ln) if not (s.strip().endswith("?") and _bare(s) in parts))
             if "?" in ln else ln
             for ln in answer.splitlines() if not (ln.strip() and _bare(ln) == asked)]
    # a line said again is the model looping ("Aqui está a resposta:" twenty times): once is enough
    said_lines: set[str] = set()
    once: list[str] = []
    for ln in lines:
        if ln.strip() and _bare(ln) in said_lines:
            continue
        said_lines.add(_bare(ln))
        once.append(ln)
    lines = once
    body = [i for i, ln in enumerate(lines) if ln.strip()]
    opening = lines[body[0]].strip() if body else ""
    if opening.endswith(":") and len(opening.split()) <= 12 and not _content(opening) & _content(block):
        if len(body) == 1:  # it announces nothing: the rows are listed after it (`complete_list`)
            return ""
        if not _LIST_ITEM.match(lines[body[1]]):
            lines = lines[body[1]:]
    return "\n".join(lines).strip() or answer.strip()


_DATED = re.compile(r"\d{4}-\d{2}")  # a date or timestamp cell: when a row was read, not what it is
_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)+")
_ID_COLUMN = re.compile(r"(^|[._])(\w+_)?(id|code)$", re.IGNORECASE)


def _stored_identifiers(contexts: list[dict[str, Any]]) -> set[str]:
    """String cells that name a record: hyphenated slugs ("legacy-invoicing") and the values of
    id or code columns. Enum codes with underscores ("in_progress") are not: a status read as
    words is still right.
    """
    out: set[str] = set()

    def walk(column: str, value: Any) -> None:  # an API's record nests its lists of records
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(str(key), inner)
        elif isinstance(value, list):
            for inner in value:
                walk(column, inner)
        elif isinstance(value, str) and re.search(r"[A-Za-z]", value) and (
                _SLUG.fullmatch(value) or (_ID_COLUMN.search(column) and re.search(r"[-_]", value))):
            out.add(value)

    for c in contexts:
        for row in c.get("rows") or []:
            if isinstance(row, dict):
                walk("", row)
    return out


def stored_spelling(answer: str, contexts: list[dict[str, Any]]) -> str:
    """The answer with each record identifier of the results written as stored. Why: the 1.5B
    model restyles ids into titles ("Legacy Invoicing" for `legacy-invoicing`), and a user who
    searches, pages or files a ticket needs the id itself. Only a run of the same letters and
    digits, in any case, with spaces or other separators between the id's parts, is rewritten.
    """
    for value in sorted(_stored_identifiers(contexts), key=len, reverse=True):
        parts = [p for p in re.split(r"[-_]", value) if p]
        pattern = re.compile(r"(?<![\w-])" + r"[\s_-]?".join(re.escape(p) for p in parts) + r"(?![\w-])", re.IGNORECASE)
        answer = pattern.sub(value.replace("\\", "\\\\"), answer)  # a literal replacement: backslashes escaped
    return answer


LIST_ROWS = 12  # a result this short is a list the answer can name in full
_GROUPED = re.compile(r"\bGROUP\s+BY\b", re.IGNORECASE)


def _text_column(rows: list[dict[str, Any]], column: str) -> bool:
    """Whether every row's `column` is a short text that is not a number (an id, a name)."""
    return all(isinstance(v, str) and v.strip() and not _NUMBER.fullmatch(v.strip()) and len(v) <= 60
               for v in (r.get(column) for r in rows))


def _label_column(rows: list[dict[str, Any]]) -> str | None:
    """A result's first text column (ids, names) whose value differs between rows, else its first
    text column: what a listing answer names. Why: a person's shifts in one week are rows of one
    role and ten services; the role, the same in every row, names none of them.
    """
    texts = [c for c in rows[0] if _text_column(rows, c)]
    return next((c for c in texts if len({str(r[c]).strip() for r in rows}) > 1), texts[0] if texts else None)


def _labels(rows: list[dict[str, Any]]) -> list[str]:
    """The values of a result's label column (`_label_column`): what a listing answer names."""
    column = _label_column(rows)
    return [] if column is None else list(dict.fromkeys(str(r[column]).strip() for r in rows))


def _attribute_column(rows: list[dict[str, Any]], labels: list[str]) -> tuple[str, str] | None:
    """(label column, attribute column) when the rows have exactly one text column besides the
    label and one row per label; None otherwise (numbers of an ungrouped result, such as a path's
    hop counts, say nothing of a row).
    """
    label = _label_column(rows)
    others = [c for c in rows[0] if c != label and _text_column(rows, c)]
    return None if label is None or len(others) != 1 or len(labels) != len(rows) else (label, others[0])


def _with_attribute(rows: list[dict[str, Any]], labels: list[str]) -> list[str] | None:
    """Each label with its row's one other text ("reporting-portal (Dados)"). Why: "which services
    are tier 3, and whose is each?" answered for two of three rows; the names alone drop what was
    asked of each.
    """
    pair = _attribute_column(rows, labels)
    return None if pair is None else [f"{str(r[pair[0]]).strip()} ({str(r[pair[1]]).strip()})" for r in rows]


def _attributes_cut(rows: list[dict[str, Any]], labels: list[str], folded: str) -> bool:
    """Whether the answer names some of the attribute column's distinct values but not all: every
    service named, and one team given for all of them where the rows hold three.
    """
    pair = _attribute_column(rows, labels)
    if pair is None:
        return False
    values = list(dict.fromkeys(str(r[pair[1]]).strip() for r in rows))
    # a code is read as words ("client_entertainment" written "Client Entertainment")
    named = [v for v in values if _writes(folded, v) or _writes(folded, v.replace("_", " "))]
    return 1 <= len(named) < len(values)


def _is_figure(value: Any) -> bool:
    """Whether a result cell is a number (not a flag)."""
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _with_figures(rows: list[dict[str, Any]], labels: list[str], query: str, lang: str,
                  units: Mapping[str, str]) -> list[str] | None:
    """Each label with its row's one figure ("Dados (US$ 961,00)") when the rows are a breakdown:
    a grouped query (GROUP BY), one row per label and exactly one numeric column. Why: a list of
    the groups alone drops what was asked of each ("gasto por time" answered with one team's total
    and the teams' names). None otherwise (a path's hop counts are no figure).
    """
    if not _GROUPED.search(query):
        return None
    numeric = [c for c in rows[0] if all(_is_figure(r.get(c)) for r in rows)]
    if len(numeric) != 1 or len(labels) != len(rows):
        return None
    column = numeric[0]
    unit = column_units(query, list(rows[0]), units).get(column)
    return [f"{label} ({format_number(r[column], lang, unit)})" for label, r in zip(labels, rows, strict=True)]


def _figures_cut(rows: list[dict[str, Any]], labels: list[str], query: str, answer: str) -> bool:
    """Whether the answer names every group of a breakdown (`_with_figures`' rows) but leaves out
    some of their figures: "each of these services had 8 incidents" over counts of 1 to 8.
    """
    if not _GROUPED.search(query) or len(labels) != len(rows):
        return False
    numeric = [col for col in rows[0] if all(_is_figure(r.get(col)) for r in rows)]
    if len(numeric) != 1:
        return False
    return not all(_figure_written(answer, v) for v in {r[numeric[0]] for r in rows})


def _figure_written(answer: str, value: Any) -> bool:
    """Whether `answer` writes the number `value` (to two decimals), in either language's marks
    ("1.478,93" or "1,478.93"); False for a value that is no number.
    """
    if not _is_figure(value):
        return False
    target = round(Decimal(str(value)), 2)
    for raw in _NUMBER.findall(answer):
        raw = raw.strip(".,")
        for thousands, mark in ((".", ","), (",", ".")):
            try:
                if round(Decimal(raw.replace(thousands, "").replace(mark, ".")), 2) == target:
                    return True
            except ArithmeticError:
                continue
    return False


def complete_list(answer: str, contexts: list[dict[str, Any]], lang: str, question: str | None = None,
                  units: Mapping[str, str] | None = None) -> str:
    """The answer, plus the full list when it names some rows of a short query result but not all
    of them. Why: the 1.5B model stops listing after three or four items ("depends on A, B and C"
    out of seven rows), or names only the first level of a chain, and a user cannot tell a cut
    list from a complete one. One row named is enough when the question has no superlative that
    ranks (`ranking_words`: "the closest …" asks for one row, "menos de 100 dias" none); without
    the question, two.
    An answer that names no row and does not state how many there are gets the list too: the
    model misread the rows ("nenhum serviço chama o redis-cache" over the four that do); so does
    an answer that denies (a negation word) a one-row result and names none of its cells, and one
    that names none of the cells of a one-row result a later stage's query took a value from: that
    row answered the question's first part ("whose is X, and what is that team's cost center?"
    answered with the cost center alone); so does a one-row result whose cells and figures the
    answer writes none of (it only announced an answer it then did not give).
    """
    from tools.semantic_layer import folded_cues, ranking_words

    # a superlative that compares with a number ranks nothing: "quem tem menos de 100 dias de casa"
    one = question is None or bool(ranking_words(re.findall(r"\w+", fold(question))))
    folded = fold(answer)
    # the last stage first: its rows answer the question (a count per service), the earlier ones
    # are the set it was computed over (the services), whose names its list then already gives
    denies = bool(folded_cues().negations & set(re.findall(r"\w+", folded)))
    for at in range(len(contexts) - 1, -1, -1):
        c = contexts[at]
        rows = [r for r in c.get("rows") or [] if isinstance(r, dict)]
        if not 1 <= len(rows) <= LIST_ROWS:
            continue
        labels = _labels(rows)
        named = [v for v in labels if _writes(folded, v)]
        if len(rows) == 1:
            # one row the answer denies ("não há serviços … atingidos" over the one the graph found),
            # or whose value a later stage queried by, and that the answer does not name: that row
            # follows; a one-row lookup the answer reads is left alone
            cells = [v for v in rows[0].values() if isinstance(v, str) and v.strip()]
            later = " ".join(str(x.get("query") or "") for x in contexts[at + 1:])
            handed = any(f"'{v}'" in later or f'"{v}"' in later for v in cells)
            # nor a figure of it: the answer did not read the row at all ("Here is the answer:"); a
            # row of lists or records (an API's report) or named by a date is no answer to list
            unread = not any(_figure_written(answer, v) for v in rows[0].values()) and not any(
                isinstance(v, list | tuple | dict) for v in rows[0].values()) and not _DATED.match(labels[0] if labels else "")
            if labels and (denies or handed or unread) and not any(_writes(folded, v) for v in cells):
                # with its one other text ("Ana (Ledger v2)"): the row answers both of what was asked
                figures = _with_figures(rows, labels, str(c.get("query") or ""), lang, units or {}) or \
                    _with_attribute(rows, labels)
                answer = _rows_said(answer, ", ".join(figures or labels), lang, sole=_sole_source(contexts, c))
                folded = fold(answer)
            elif not labels and unread and rows[0] and all(_is_figure(v) for v in rows[0].values()):
                # a count or a sum alone, which the answer never wrote ("the handbook does not say
                # how many" over the database's count): the figures follow, in the column's unit
                shown = column_units(str(c.get("query") or ""), list(rows[0]), units or {})
                items = "; ".join(format_number(v, lang, shown.get(k)) for k, v in rows[0].items())
                answer = f"{answer}\n{say('figures', lang, items=items)}"
                folded = fold(answer)
            continue
        if not named and _named_by_other_column(rows, folded):
            continue  # the answer names each row by another of its columns (the people, not their ids)
        # none named and no count of them stated: the answer did not read the result ("no service
        # calls it" over four rows that do), so the rows themselves are given
        unread = bool(labels) and not named and not re.search(rf"(?<![\w.,]){len(labels)}(?![\w]|[.,]\d)", answer)
        if (2 if one else 1) <= len(named) < len(labels) or unread or _attributes_cut(rows, labels, folded) \
                or (len(named) == len(labels) and _figures_cut(rows, labels, str(c.get("query") or ""), answer)):
            figures = _with_figures(rows, labels, str(c.get("query") or ""), lang, units or {}) or \
                _with_attribute(rows, labels)
            items = "; ".join(figures) if figures else ", ".join(labels)
            # an answer that writes other cells of the rows (who approved each) read them
            reads_cells = any(_writes(folded, v) for r in rows for v in r.values() if isinstance(v, str) and v.strip())
            answer = _rows_said(answer, items, lang, sole=not named and not reads_cells and _sole_source(contexts, c))
            folded = fold(answer)
    return answer


def _named_by_other_column(rows: list[dict[str, Any]], folded: str) -> bool:
    """Whether the (folded) answer writes every value of a text column other than the label column,
    one distinct value per row: "Inês, Daniela and Natália" over rows whose label column is the
    members' ids.
    """
    label = _label_column(rows)
    for column in (c for c in rows[0] if c != label and _text_column(rows, c)):
        values = {str(r[column]).strip() for r in rows}
        if len(values) == len(rows) and all(_writes(folded, v) for v in values):
            return True
    return False


def _sole_source(contexts: list[dict[str, Any]], context: dict[str, Any]) -> bool:
    """Whether `context` is the only one that found anything (rows, passages or records)."""
    return all(x is context or not (x.get("rows") or x.get("items")) for x in contexts)


def _rows_said(answer: str, items: str, lang: str, *, sole: bool) -> str:
    """The answer with the rows it left out after it; or the rows alone, when they are all the
    turn found and the answer names none of them. Why: "No, nobody from that team is on call",
    over the one person the graph found, read as a denial with the list after it.
    """
    if sole:
        return say("found", lang, items=items)
    return f"{answer}\n{say('full_list', lang, items=items)}"


_RECORD_CODE = re.compile(r"[A-Za-z]+-\d+")


def name_records(answer: str, contexts: list[dict[str, Any]], lang: str, question: str | None = None) -> str:
    """The answer, plus the ids of the records it speaks about when it names none of them. Why: the
    1.5B model answers "the largest rejected claim was US$ 4,021, by X" and drops the claim's id,
    which is what the user looks the record up by. Only for a short result (at most `LIST_ROWS`
    rows) with an id column of record codes (letters, a hyphen, digits) that neither the answer
    nor the question names.
    """
    folded = fold(f"{answer} {question or ''}")
    for c in contexts:
        rows = [r for r in c.get("rows") or [] if isinstance(r, dict)]
        if not 1 <= len(rows) <= LIST_ROWS:
            continue
        for column in rows[0]:
            values = [r.get(column) for r in rows]
            if not (_ID_COLUMN.search(str(column))
                    and all(isinstance(v, str) and _RECORD_CODE.fullmatch(v.strip()) for v in values)):
                continue
            ids = list(dict.fromkeys(str(v).strip() for v in values))
            if len(rows) > 1 and len(ids) == 1:
                break  # the one record every row shares (the project whose members are listed)
            if not any(re.search(rf"(?<![\w-]){re.escape(fold(v))}(?![\w-])", folded) for v in ids):
                answer = f"{answer}\n{say('records', lang, items=', '.join(ids))}"
                folded = fold(f"{answer} {question or ''}")
            break
    return answer


# -------------------------------------------------------------------------------------- node

def synthesize(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """One answer from the retrieved contexts, or a plain sentence when there is nothing to say."""
    ctx = ctx_of(runtime)
    lang = lang_of(state)
    usage = Usage()
    contexts = state.get("contexts", []) or []
    plan_backends: list[str] = list((state.get("plan") or {}).get("backends") or [])
    planned = set(plan_backends) or {str(c.get("backend")) for c in contexts}
    gap = _gaps(contexts, planned, lang)
    answered = [c for c in contexts if not c.get("error")]
    with_material = [c for c in answered if c.get("rows") or c.get("items")]
    if not with_material:
        if not answered:
            return {"answer": gap or say("no_answer", lang), "notices": [],
                    "turn": trace("synthesize", route="answer:gap" if gap else "answer:empty")}
        # Only empty result sets: the 1.5B model, given nothing, writes a sentence around a blank
        # ("o orçamento é de [SQL]"). Saying plainly that nothing matched is the honest answer.
        sources = ", ".join(source_name(c["backend"]) for c in answered)
        return {"answer": say("no_rows", lang, sources=sources), "notices": [gap] if gap else [],
                "turn": trace("synthesize", route="answer:no-rows")}
    units = _units(ctx)
    block = render_contexts(answered, lang, units)
    try:
        answer = text_call("synthesis", "synthesize", backend=ctx.llm_backend, usage=usage,
                           language=LANGUAGE.get(lang, "Portuguese (Brazil)"), context=block, question=user_text(state))
    except LLMError as exc:
        log.warning("synthesis failed: %s", exc)
        return {"answer": say("synthesis_failed", lang), "notices": [gap] if gap else [],
                "turn": trace("synthesize", route="answer:llm-failed", errors=[str(exc)[:200]], **usage.trace())}
    question = user_text(state)
    cleaned_text = without_column_names(clean_answer(answer, block), answered)
    listed = complete_list(stored_spelling(without_preamble(cleaned_text, question, block), answered),
                           answered, lang, question, units)
    cleaned = name_records(listed, answered, lang, question) if listed else say("no_answer", lang)
    extra: dict[str, Any] = {"sanitised": True} if cleaned != answer.strip() else {}
    return {"answer": cleaned, "notices": [gap] if gap else [],
            "turn": trace("synthesize", route="answer", **extra, **usage.trace())}
