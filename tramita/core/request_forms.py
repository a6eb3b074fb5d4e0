"""Request forms: whether a message asks the assistant to act, and which action its verb names.

Question marks do not separate requests from questions: "pode aprovar a EXP-0290?", "libera a
EXP-0282 pra mim?", "could you reassign TCK-1142 to me?" and "coloca o TCK-1130 no meu nome?" ask
for a write, while "a Luciana pode aprovar a EXP-0259?" asks about someone else's ability. What
decides is the *form*, read from `policies/request_forms.yaml` (data, validated here):

- a request opener at the start ("pode", "você pode", "dá pra", "can you", "please", "quero"),
- an imperative (or, after an opener, an infinitive) verb listed under `actions`, which also names
  the tool(s) the message asks for ("passa" → reassign_ticket, "file" → three tools),
- a benefactive anywhere ("pra mim", "for me", "no meu nome"),
- and, against all of these, a modal whose subject is someone else ("a Luciana pode …",
  "can Luciana …", "pode a Luciana …"): a question about that person.

`read_form` is a pure function of the text and the policy file.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from tramita.base.paths import POLICIES_DIR
from tramita.base.policyfile import load_model

REQUEST_FORMS_FILE = POLICIES_DIR / "request_forms.yaml"
PerLanguage = dict[str, list[str]]


class RequestForms(BaseModel):
    """`policies/request_forms.yaml`."""

    model_config = ConfigDict(extra="forbid")
    fillers: PerLanguage = Field(description="dropped at the start")
    openers: PerLanguage = Field(description="a request addressed to the assistant")
    modals: PerLanguage = Field(description="modal verbs (ability questions when someone else is the subject)")
    addressee: PerLanguage = Field(description="subjects that keep a modal a request (you)")
    subjects: PerLanguage = Field(description="words after a bare modal that make someone else the subject")
    benefactive: PerLanguage = Field(description="'for me' anywhere: a request")
    actions: dict[str, PerLanguage] = Field(description="tool name -> the verbs that ask for it")


@lru_cache(maxsize=4)
def request_forms(path: Path = REQUEST_FORMS_FILE) -> RequestForms:
    """The validated policy of `path`, read once per process."""
    forms: RequestForms = load_model(path, RequestForms)
    return forms


_WORD = re.compile(r"\w+")


def _fold(word: str) -> str:
    decomposed = unicodedata.normalize("NFKD", word.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _table(per_language: PerLanguage) -> list[tuple[str, ...]]:
    out = {tuple(_fold(w) for w in _WORD.findall(p)) for phrases in per_language.values() for p in phrases}
    return sorted((p for p in out if p), key=len, reverse=True)


@lru_cache(maxsize=4)
def _compiled(path: Path = REQUEST_FORMS_FILE) -> dict[str, list[tuple[str, ...]]]:
    f = request_forms(path)
    return {name: _table(getattr(f, name)) for name in ("fillers", "openers", "modals", "addressee", "subjects",
                                                         "benefactive")}


@lru_cache(maxsize=4)
def _actions(path: Path = REQUEST_FORMS_FILE) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(verb phrase, tools it names), longest phrases first."""
    by_phrase: dict[tuple[str, ...], list[str]] = {}
    for tool, per_language in request_forms(path).actions.items():
        for phrase in _table(per_language):
            by_phrase.setdefault(phrase, []).append(tool)
    return sorted(((p, tuple(ts)) for p, ts in by_phrase.items()), key=lambda pt: len(pt[0]), reverse=True)


def _at(words: list[str], i: int, phrases: list[tuple[str, ...]]) -> tuple[str, ...] | None:
    for phrase in phrases:
        if tuple(words[i:i + len(phrase)]) == phrase:
            return phrase
    return None


@dataclass(frozen=True)
class Form:
    """How a message asks: `request` (addressed to the assistant as a request), `about_others`
    (a modal about someone else's ability), the `tools` its opening verb names and that `verb`;
    `bare` when the verb opens the message with no opener nor benefactive, and `after` the folded
    word right after it (an English verb may be the adjective of a noun phrase: "open tickets").
    """

    request: bool = False
    about_others: bool = False
    tools: tuple[str, ...] = ()
    verb: str = ""
    bare: bool = False
    after: str = ""


def read_form(text: str, path: Path = REQUEST_FORMS_FILE) -> Form:
    """Read the request form of `text` (see the module doc)."""
    raw = _WORD.findall(text)
    words = [_fold(w) for w in raw]
    capital = [w[:1].isupper() for w in raw]
    t = _compiled(path)
    i = 0
    while i < len(words) and (p := _at(words, i, t["fillers"])):
        i += len(p)
    benefactive = any(_at(words, k, t["benefactive"]) for k in range(len(words)))
    opener = _at(words, i, t["openers"])
    if opener:
        after = i + len(opener)
        if opener in t["modals"]:
            # a bare modal: "pode a Luciana …" / "can Luciana …" asks about someone else
            nxt_subject = _at(words, after, t["subjects"])
            named = after < len(words) and capital[after] and not _at(words, after, [a for a, _ in _actions(path)])
            if nxt_subject or named:
                return Form(about_others=True)
        while after < len(words) and (p := _at(words, after, [*t["fillers"], *t["openers"]])):
            after += len(p)
        verb = _at(words, after, [a for a, _ in _actions(path)])
        tools = dict(_actions(path)).get(verb, ()) if verb else ()
        return Form(request=True, tools=tuple(tools), verb=" ".join(verb or ()))
    verb = _at(words, i, [a for a, _ in _actions(path)])
    if verb:
        nxt = i + len(verb)
        return Form(request=True, tools=tuple(dict(_actions(path))[verb]), verb=" ".join(verb),
                    bare=not benefactive, after=words[nxt] if nxt < len(words) else "")
    # a modal after a subject: "a Luciana pode aprovar?", "can Luciana approve?" (not "você pode")
    for k in range(i, min(len(words), i + 6)):
        if _at(words, k, t["modals"]):
            before = words[i:k]
            if any(_at(before, j, t["addressee"]) for j in range(len(before))):
                return Form(request=True)
            if k == i:  # sentence-initial modal without an opener's subject: "can Luciana …"
                nxt = k + 1
                if nxt < len(words) and (capital[nxt] or _at(words, nxt, t["subjects"])) \
                        and not _at(words, nxt, t["addressee"]):
                    return Form(about_others=True)
                break
            if before:
                return Form(about_others=True)
    return Form(request=benefactive)
