"""Classify the reply to a pending write: confirm / reject / correct / other, or "unsure".

Why: the word lexicon alone misses colloquial assent ("fechou", "go for it") and typos, and the LLM
fallback has cancelled a plain assent. Three stages, cheapest first:

1. the lexicon (`classify` of the lexicon module), also on a typo-corrected variant of the reply
   (transpositions, repeated letters: "confrimo", "siim");
2. e5 similarity to per-class prototypes (`policies/confirmation_prototypes.yaml`): the mean of the
   top_k cosines per class (top_k 1: the nearest prototype), accepted only when the best class
   beats the runner-up by `margin`, or by the larger `confirm_margin` for "confirm" (unless most of
   the reply's words are lexicon assent phrases), because a wrong "confirm" executes a write;
3. otherwise "unsure": the caller asks the LLM and accepts only a label in `result.allowed`, which
   then holds the two classes the prototypes could not separate (and "other"): a small model reads
   colloquial assent ("fechou") literally, as a refusal, and must not cancel a reply the prototypes
   found assent-like, nor confirm one they found refusal-like.

Deterministic guards sit over every stage because the one error that must never happen is a
confirmation the user did not give. A reply that carries a new value (an id, a number or an enum
value that is not in the pending summary) is a correction ("other" with an additive word:
"aprova também a EXP-…" is a new request); a conditional, hedge or sarcasm marker makes it "other";
a question without a new value is "other"; a contrast ("mas", "but") rules "confirm" out; a
negation sends a would-be "confirm" to the LLM. The guards use generic function words (data, in the
YAML) and value shapes, never phrases fitted to a benchmark.

Beyond the pending confirmation, the same prototypes answer two questions a parameter turn asks
(`cancel`, `assent`): is this message a cancel (a lexicon cancel clause, or a near-paraphrase of a
"reject" prototype: free-text answers such as "não tem recibo" resemble refusals, so only a very close
match counts), and is it a bare assent ("sim, pode continuar") that carries no value?

The classifier is pure: the embedding function is injected and prototype vectors are cached per
instance. `shared_classifier()` is the one per-process instance the nodes use, built on the
project's e5 on first use (a plain "sim" never loads the model) and cached by the prototypes
file's content hash, so an edited file is picked up and nothing is read from the environment.
`llm_decision` is the constrained LLM fallback for an "unsure" reply, shared by the
await_confirmation node and the benchmark so both ask the model the same way.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from tools.llm import Usage, structured_call
from tools.registry_models import load_model
from tramita.base.paths import POLICIES_DIR
from tramita.base.text import fold as _fold
from tramita.core.lexicon import CancelClause, cancel_clause, classify, clauses, lexicons

Label = Literal["confirm", "reject", "correct", "other"]
Stage = Literal["lexicon", "guard", "prototype", "unsure"]
LLMLabel = Literal["confirm", "reject", "other"]
Embed = Callable[[list[str]], np.ndarray]
"""A batch of texts -> an (n, d) array of L2-normalised vectors (e5: with the "query: " prompt)."""

LABELS: tuple[Label, ...] = ("confirm", "reject", "correct", "other")
LLM_LABELS: tuple[LLMLabel, ...] = ("confirm", "reject", "other")
PROTOTYPES_FILE = POLICIES_DIR / "confirmation_prototypes.yaml"
SHORT_REPLY_WORDS = 6  # a bare assent or a cancel paraphrase is short; longer messages carry content
LLM_REPLY_WORDS = 12  # an unsure reply longer than this is not a yes/no: no LLM call, intent_shift decides

# A value-shaped token: anything containing a digit (EXP-0312, P2, SEV1, E014, 2026-Q3, 45,90, 15k).
_VALUE_TOKEN = re.compile(r"[\w/.,-]*\d[\w/.,-]*")
_NUMBER = re.compile(r"^(\d+(?:[.,]\d+)?)(k?)$", re.IGNORECASE)
_THOUSANDS_WORD = re.compile(r"^\s*(mil|thousand)\b", re.IGNORECASE)
_ENGLISH_NOT = re.compile(r"\w+n['’]t\b", re.IGNORECASE)  # isn't, can't, won't: a negation
_LONG_RUN = re.compile(r"(\w)\1{2,}")  # "siiiim" -> "sim"


# --------------------------------------------------------------------------- data (YAML) models


class PerLanguage(BaseModel):
    """One list per language; both must be non-empty so neither language is silently unsupported."""

    model_config = ConfigDict(extra="forbid")
    pt: list[str] = Field(min_length=1)
    en: list[str] = Field(min_length=1)

    @field_validator("pt", "en")
    @classmethod
    def _no_blank(cls, v: list[str]) -> list[str]:
        if any(not s.strip() for s in v):
            raise ValueError("entries must be non-empty strings")
        return [s.strip() for s in v]

    def all(self) -> list[str]:
        """Both languages' entries: classification never depends on the detected language."""
        return [*self.pt, *self.en]


class PrototypeSets(BaseModel):
    """One prototype list per class; every class must exist so no label is silently unreachable."""

    model_config = ConfigDict(extra="forbid")
    confirm: PerLanguage
    reject: PerLanguage
    correct: PerLanguage
    other: PerLanguage

    def of(self, label: Label) -> PerLanguage:
        """The prototypes of one class."""
        sets: dict[Label, PerLanguage] = {"confirm": self.confirm, "reject": self.reject,
                                          "correct": self.correct, "other": self.other}
        return sets[label]


class Cues(BaseModel):
    """Generic function words for the guards, matched as whole folded phrases."""

    model_config = ConfigDict(extra="forbid")
    conditional: PerLanguage
    hedge: PerLanguage
    sarcasm: PerLanguage
    question: PerLanguage
    lead_in: PerLanguage
    contrast: PerLanguage
    additive: PerLanguage
    reference: PerLanguage
    negation: PerLanguage


class ConfirmationPrototypes(BaseModel):
    """`policies/confirmation_prototypes.yaml`."""

    model_config = ConfigDict(extra="forbid")
    margin: float = Field(ge=0.0, le=1.0, description="best minus runner-up class score needed to decide")
    confirm_margin: float = Field(ge=0.0, le=1.0, description="the same, for a prototype 'confirm' (costlier error)")
    top_k: int = Field(ge=1, le=20, description="prototypes averaged per class")
    cancel_similarity: float = Field(ge=0.0, le=1.0, description="reject-class score a message (or leading "
                                     "clause) needs to count as a cancel outside a confirmation")
    assent_similarity: float = Field(0.9, ge=0.0, le=1.0, description="confirm-class score a reply needs to "
                                     "count as a bare assent while parameters are collected")
    prototypes: PrototypeSets
    cues: Cues

    @model_validator(mode="after")
    def _disjoint(self) -> ConfirmationPrototypes:
        """A prototype in two classes would make the margin meaningless."""
        seen: dict[str, Label] = {}
        for label in LABELS:
            for p in self.prototypes.of(label).all():
                key = _fold(p)
                if key in seen and seen[key] != label:
                    raise ValueError(f"prototype {p!r} is in both {seen[key]!r} and {label!r}")
                seen[key] = label
        return self


def load_prototypes(path: Path = PROTOTYPES_FILE) -> ConfirmationPrototypes:
    """Validated prototypes; a malformed file raises `RegistryError` naming the file and the field."""
    loaded: ConfirmationPrototypes = load_model(path, ConfirmationPrototypes)
    return loaded


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ConfirmationResult:
    """What the reply is, and how sure.

    `label` is "unsure" when no stage could decide: ask the LLM and accept only a label in
    `allowed` (confirm is left out whenever a guard forbids it). `score` is the winning class's
    similarity (1.0 for a lexicon decision), `margin` its lead over the runner-up class.
    """

    label: Label | Literal["unsure"]
    score: float
    margin: float
    stage: Stage
    allowed: tuple[Label, ...] = LABELS
    reason: str = ""
    scores: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class _Facts:
    question: bool
    doubt: str  # "conditional" / "hedge" / "sarcasm" / "": such a reply is "other"
    contrast: bool
    additive: bool
    negation: bool
    new_values: tuple[str, ...]
    assent_share: float  # share of the reply's non-filler words inside lexicon assent phrases

    @property
    def no_confirm(self) -> bool:
        return self.question or self.contrast or bool(self.doubt) or bool(self.new_values)


# --------------------------------------------------------------------------- helpers


def _lexicon_reply(text: str) -> str | None:
    """The lexicon's verdict: "confirm" / "reject" / "cancel" / None."""
    return classify(text)


def _lexicon_words() -> dict[str, set[str]]:
    """Single words of the lexicon phrases, by group (confirm / refuse / filler), for typo correction."""
    lex = lexicons()
    groups = {"confirm": [lex.confirm], "refuse": [lex.reject, lex.cancel], "filler": [lex.filler]}
    return {g: {w for table in tables for ps in table.values() for p in ps for w in _fold(p).split()}
            for g, tables in groups.items()}


def _squeeze(word: str) -> str:
    return re.sub(r"(\w)\1+", r"\1", word)


def _one_edit(a: str, b: str) -> bool:
    """`a` becomes `b` by one adjacent transposition, or (both ≥5 letters) one insertion or deletion.

    Substitutions are not typos we accept: they turn real words into lexicon words ("correio" ->
    "correto"), and a wrong "confirm" is the error that must never happen.
    """
    if a == b:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]
    if min(len(a), len(b)) < 5 or abs(len(a) - len(b)) != 1:
        return False
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    return any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))


def _typo_variant(text: str, vocab: dict[str, set[str]]) -> str | None:
    """The reply with each unknown word replaced by the one lexicon word it is a typo of, else None.

    A word is corrected only when all its candidates share a group, so "siim" -> "sim" and
    "confrimo" -> "confirmo", but a word close to both a confirm and a refusal word is left alone.
    The variant is then judged by the lexicon itself, whole phrases only.
    """
    known = set().union(*vocab.values())
    words = _fold(text).split()
    out: list[str] = []
    changed = False
    for w in words:
        if w in known or len(w) < 3 or any(c.isdigit() for c in w):
            out.append(w)
            continue
        cands = sorted(v for v in known if len(v) >= 3 and (_squeeze(w) == _squeeze(v) or _one_edit(w, v)))
        groups = [{g for g, vs in vocab.items() if v in vs} for v in cands]
        if cands and set.intersection(*groups):
            out.append(cands[0])
            changed = True
        else:
            out.append(w)
    return " ".join(out) if changed else None


def _norm_value(token: str, following: str) -> str | None:
    """Canonical form of a value-shaped token: numbers as floats ("45,90" == "45.90", "15k" == 15000)."""
    token = token.strip(".,/-")
    if not token or not any(c.isdigit() for c in token):
        return None
    m = _NUMBER.match(token)
    if m:
        num = float(m.group(1).replace(",", "."))
        if m.group(2) or _THOUSANDS_WORD.match(following):
            num *= 1000
        return f"{num:g}"
    return token.upper()


def _values_in(text: str) -> list[str]:
    out = []
    for m in _VALUE_TOKEN.finditer(text):
        v = _norm_value(m.group(0), text[m.end():])
        if v:
            out.append(v)
    return out


def _pending_forms(pending: Iterable[object]) -> set[str]:
    """Every form a pending value may take in a reply: itself, and an id's bare number ("0312")."""
    forms: set[str] = set()
    for value in pending:
        s = str(value)
        forms.update(_values_in(s))
        forms.add(s.strip().upper())
        forms.update(f"{float(d):g}" for d in re.findall(r"\d+", s))
    return forms


def _allowed(f: _Facts) -> tuple[Label, ...]:
    return tuple(lab for lab in LABELS if lab != "confirm") if f.no_confirm else LABELS


def _has_phrase(folded: str, phrases: Iterable[str]) -> bool:
    """Whether a folded phrase occurs in the folded reply as whole words."""
    padded = f" {folded} "
    return any(f" {p} " in padded for p in phrases)


# --------------------------------------------------------------------------- the classifier


class ConfirmationClassifier:
    """Lexicon, then prototypes with a margin, under never-confirm guards. See the module docstring.

    `embed` must return L2-normalised vectors; use `e5_query_embedder(make_embeddings())` for the
    project's e5 (symmetric short texts, so both sides get the "query: " prompt).
    """

    def __init__(self, prototypes: ConfirmationPrototypes, embed: Embed, *, margin: float | None = None,
                 confirm_margin: float | None = None, top_k: int | None = None) -> None:
        """Margins and top_k default to the file's; the benchmark overrides them to sweep."""
        self.config = prototypes
        self.embed = embed
        self.margin = prototypes.margin if margin is None else margin
        self.confirm_margin = prototypes.confirm_margin if confirm_margin is None else confirm_margin
        self.top_k = prototypes.top_k if top_k is None else top_k
        self._cues = {name: [_fold(c) for c in table.all()] for name, table in prototypes.cues}
        self._vectors: dict[Label, np.ndarray] | None = None
        self._vocab: dict[str, set[str]] | None = None
        self._phrases: list[tuple[str, ...]] | None = None

    @classmethod
    def from_file(cls, embed: Embed, path: Path = PROTOTYPES_FILE, **kwargs: Any) -> ConfirmationClassifier:
        """A classifier on the validated prototypes file (see `load_prototypes`)."""
        return cls(load_prototypes(path), embed, **kwargs)

    # ------------------------------------------------------------------ public API

    def classify(self, text: str, pending: Iterable[object] = (), choices: Iterable[str] = ()) -> ConfirmationResult:
        """Classify one reply.

        `pending`: the values shown in the summary (the transaction's arguments); a value the reply
        repeats from it is not a change. `choices`: the enum values of the pending tool's
        parameters ("P1", "meals"), so a bare enum word counts as a new value.
        """
        return self.classify_batch([text], [pending], choices)[0]

    def classify_batch(self, texts: Sequence[str], pending: Sequence[Iterable[object]] | None = None,
                       choices: Iterable[str] = ()) -> list[ConfirmationResult]:
        """`classify` for many replies with one embedding call (benchmarks)."""
        pend = list(pending) if pending is not None else [()] * len(texts)
        if len(pend) != len(texts):
            raise ValueError("pending must have one entry per text")
        choice_list = [c for c in choices if c.strip()]
        results: list[ConfirmationResult | None] = []
        facts: list[_Facts] = []
        to_embed: list[int] = []
        for i, text in enumerate(texts):
            f = self._facts(text, pend[i], choice_list)
            facts.append(f)
            early = self._early(text, f)
            results.append(early)
            if early is None:
                to_embed.append(i)
        if to_embed:
            queries = [self._embedding_text(texts[i], pend[i]) for i in to_embed]
            try:
                scores = self._scores(queries)
            except Exception as exc:  # noqa: BLE001 - no embedding model: the guards still hold, the LLM decides
                for i in to_embed:
                    results[i] = self._without_prototypes(facts[i], f"prototypes unavailable: {exc}"[:200])
            else:
                for row, i in enumerate(to_embed):
                    results[i] = self._decide({lab: float(scores[lab][row]) for lab in LABELS}, facts[i])
        return [r for r in results if r is not None]

    # ------------------------------------------------------------------ stages

    def _facts(self, text: str, pending: Iterable[object], choices: list[str]) -> _Facts:
        folded = _fold(text)
        cues = self._cues
        doubt = next((name for name in ("sarcasm", "conditional", "hedge") if _has_phrase(folded, cues[name])), "")
        negation = _has_phrase(folded, cues["negation"]) or bool(_ENGLISH_NOT.search(text))
        pending = list(pending)
        forms = _pending_forms(pending)
        new = [v for v in _values_in(text) if v not in forms]
        pending_words = {_fold(str(p)) for p in pending}
        new += [c.upper() for c in choices if _fold(c) not in pending_words and _has_phrase(folded, [_fold(c)])]
        return _Facts(question="?" in text or self._leading_question(folded), doubt=doubt,
                      contrast=_has_phrase(folded, cues["contrast"]), additive=_has_phrase(folded, cues["additive"]),
                      negation=negation, new_values=tuple(dict.fromkeys(new)),
                      assent_share=self._assent_share(text, pending))

    def _assent_share(self, text: str, pending: Iterable[object]) -> float:
        """Share of the content words covered by whole lexicon assent phrases ("sim sim, faz isso": 3/4).

        Fillers and words pointing back at the pending item ("só essa mesma, pode") are not content.
        Whole phrases, not their words: "it" of "do it" is no assent; one-letter phrases ("s", "y")
        only count in the lexicon stage, where they are the whole reply.
        """
        fillers, reference = self._lexicon_vocab()["filler"], set(self._cues["reference"])
        phrases = self._assent_phrases()
        words = [w for w in _fold(self._embedding_text(text, pending)).split() if w not in fillers]
        covered, content, i = 0, 0, 0
        while i < len(words):
            n = next((len(p) for p in phrases if tuple(words[i:i + len(p)]) == p), 0)
            if n:
                covered += n
                content += n
            elif words[i] not in reference:
                content += 1
            i += max(n, 1)
        return covered / content if content else 0.0

    def _assent_phrases(self) -> list[tuple[str, ...]]:
        if self._phrases is None:
            folded = {tuple(_fold(p).split()) for ps in lexicons().confirm.values() for p in ps}
            self._phrases = sorted((p for p in folded if len("".join(p)) > 1), key=len, reverse=True)
        return self._phrases

    def _lexicon_vocab(self) -> dict[str, set[str]]:
        if self._vocab is None:
            self._vocab = _lexicon_words()
        return self._vocab

    def _leading_question(self, folded: str) -> bool:
        """A question word opens the reply, after lead-ins ("e quanto custa", "so what now")."""
        lead = set(self._cues["lead_in"])
        words = folded.split()
        while words and words[0] in lead:
            words = words[1:]
        head = " ".join(words) + " "
        return any(head.startswith(q + " ") for q in self._cues["question"])

    def _early(self, text: str, f: _Facts) -> ConfirmationResult | None:
        """Empty replies and lexicon hits (also typo-corrected), under the guards; None: use prototypes."""
        if not _fold(text):
            return ConfirmationResult("other", 1.0, 1.0, "guard", reason="empty")
        reply = _lexicon_reply(text)
        if reply is None:
            variant = _typo_variant(text, self._lexicon_vocab())
            reply = _lexicon_reply(variant) if variant else None
        if reply is None and cancel_clause(text).cancel:  # "pensando bem, deixa quieto"
            reply = "cancel"
        if reply is None:
            return None
        return self._final("confirm" if reply == "confirm" else "reject", f, 1.0, 1.0, "lexicon", {})

    def _without_prototypes(self, f: _Facts, why: str) -> ConfirmationResult:
        """The guards alone (the embedding model failed): their verdicts, else "unsure"."""
        allowed = _allowed(f)
        if f.doubt:
            return ConfirmationResult("other", 0.0, 0.0, "guard", allowed=allowed, reason=f.doubt)
        if f.new_values:
            label: Label = "other" if f.additive else "correct"
            return ConfirmationResult(label, 0.0, 0.0, "guard", allowed=allowed, reason=f"new value {f.new_values[0]}")
        if f.question:
            return ConfirmationResult("other", 0.0, 0.0, "guard", allowed=allowed, reason="question")
        return ConfirmationResult("unsure", 0.0, 0.0, "unsure", allowed=allowed, reason=why)

    def _decide(self, scores: dict[str, float], f: _Facts) -> ConfirmationResult:
        """The best class among those the guards allow, and its lead over the next allowed one."""
        ranked = sorted(_allowed(f), key=lambda lab: scores[lab], reverse=True)
        best, second = ranked[0], ranked[1]
        return self._final(best, f, scores[best], scores[best] - scores[second], "prototype", scores,
                           reason=f"{best} vs {second}")

    def _final(self, proposal: Label, f: _Facts, score: float, margin: float, stage: Stage,
               scores: dict[str, float], reason: str = "") -> ConfirmationResult:
        """Apply the guards to a stage's proposal; they only ever move away from "confirm"."""
        allowed = _allowed(f)

        def result(label: Label | Literal["unsure"], at: Stage, why: str) -> ConfirmationResult:
            if label == "unsure" and scores:  # the LLM arbitrates what the prototypes could not separate
                top2 = sorted(allowed, key=lambda lab: scores[lab], reverse=True)[:2]
                narrowed = tuple(lab for lab in allowed if lab in top2 or lab == "other")
                return ConfirmationResult(label, score, margin, at, allowed=narrowed, reason=why, scores=scores)
            return ConfirmationResult(label, score, margin, at, allowed=allowed, reason=why, scores=scores)

        if f.doubt:
            return result("other", "guard", f.doubt)
        if f.new_values:
            if f.additive:
                return result("other", "guard", f"additional value {f.new_values[0]}: a new request")
            if proposal != "other" or margin < self.margin:  # "other" must win clearly over a new value
                return result("correct", "guard", f"new value {f.new_values[0]}")
        elif f.question:
            return result("other", "guard", "question")
        if proposal not in allowed:  # a lexicon "confirm" with a contrast
            return result("unsure", "unsure", "contrast")
        if stage == "lexicon":
            return result(proposal, stage, "lexicon")
        if proposal == "confirm" and f.negation:
            return result("unsure", "unsure", "negation")
        # a prototype "confirm" needs the larger margin, unless most of its words are assent words
        strict = proposal == "confirm" and f.assent_share < 0.5
        if margin < (self.confirm_margin if strict else self.margin):
            return result("unsure", "unsure", reason)
        return result(proposal, stage, reason)

    # ------------------------------------------------------------------ outside a confirmation

    def assent(self, text: str, choices: Iterable[str] = ()) -> bool:
        """A bare assent ("sim, pode continuar", "ok", "yes, go on"): a short reply, no value, no
        question, doubt, contrast or negation, that the lexicon or the prototypes call "confirm".

        Used while parameters are collected, where an assent answers nothing: it must not become a
        free-text value nor a request for another tool. Any value-shaped token, even one the
        transaction already holds ("aprova a EXP-0264"), makes the reply more than an assent: it is
        then an answer or a request, for the nodes' other rules. A wrong "assent" drops the
        user's answer ("comprar café para a copa" as a note's text), so besides the margin the
        prototype must also be close: `assent_similarity`.
        """
        f = self._facts(text, (), [c for c in choices if c.strip()])
        if f.no_confirm or f.negation or not _fold(text) or len(_fold(text).split()) > SHORT_REPLY_WORDS:
            return False
        early = self._early(text, f)
        if early is not None:
            return early.label == "confirm"
        scores = self._scores([self._embedding_text(text, ())])
        ranked = sorted(LABELS, key=lambda lab: float(scores[lab][0]), reverse=True)
        best = float(scores["confirm"][0])
        return (ranked[0] == "confirm" and best - float(scores[ranked[1]][0]) >= self.margin
                and best >= self.config.assent_similarity)

    def cancel(self, text: str) -> CancelClause:
        """Whether the message cancels, and the text after the cancel (a new request, or "").

        First the lexicon's leading cancel clause ("cancela isso, quero …"); then each short leading
        clause without a value or a question is compared with the "reject" prototypes, and counts only
        as a near-paraphrase: the best class, by `margin`, with a score of at least
        `cancel_similarity` ("mudei de ideia", "I changed my mind, …").
        """
        lexical = cancel_clause(text)
        if lexical.cancel:
            return lexical
        candidates: list[tuple[str, int]] = []
        for clause, end in clauses(text)[:3]:
            if "?" in clause or _VALUE_TOKEN.search(clause) or len(_fold(clause).split()) > SHORT_REPLY_WORDS:
                break
            candidates.append((clause, end))
        if not candidates:
            return CancelClause(False)
        scores = self._scores([self._embedding_text(c, ()) for c, _ in candidates])
        for row, (_, end) in enumerate(candidates):
            ranked = sorted(LABELS, key=lambda lab: float(scores[lab][row]), reverse=True)
            best, second = float(scores[ranked[0]][row]), float(scores[ranked[1]][row])
            if ranked[0] == "reject" and best >= self.config.cancel_similarity and best - second >= self.margin:
                return CancelClause(True, text[end:].strip(" \t\n,;:.!?…-–—"))
        return CancelClause(False)

    # ------------------------------------------------------------------ embeddings

    @staticmethod
    def _embedding_text(text: str, pending: Iterable[object]) -> str:
        """Lower case, long letter runs squeezed, pending values removed ("EXP-0312 mesmo, pode")."""
        out = _LONG_RUN.sub(r"\1", text.lower())
        for value in sorted({str(p).lower() for p in pending if str(p).strip()}, key=len, reverse=True):
            out = re.sub(rf"(?<![\w-]){re.escape(value)}(?![\w-])", " ", out)
        out = " ".join(out.split())
        return out or text.lower()

    def _prototype_vectors(self) -> dict[Label, np.ndarray]:
        if self._vectors is None:
            per_label = {lab: [self._embedding_text(p, ()) for p in self.config.prototypes.of(lab).all()] for lab in LABELS}
            flat = [t for lab in LABELS for t in per_label[lab]]
            matrix = np.asarray(self.embed(flat), dtype=np.float32)
            vectors: dict[Label, np.ndarray] = {}
            start = 0
            for lab in LABELS:
                n = len(per_label[lab])
                vectors[lab] = matrix[start:start + n]
                start += n
            self._vectors = vectors
        return self._vectors

    def _scores(self, queries: list[str]) -> dict[Label, np.ndarray]:
        """Per class, the mean of the top-k cosines of each query with that class's prototypes."""
        q = np.asarray(self.embed(queries), dtype=np.float32)
        out: dict[Label, np.ndarray] = {}
        for lab, protos in self._prototype_vectors().items():
            sims = q @ protos.T
            k = min(self.top_k, sims.shape[1])
            out[lab] = np.sort(sims, axis=1)[:, -k:].mean(axis=1)
        return out


def e5_query_embedder(embeddings: Any) -> Embed:
    """Adapt the project's `HuggingFaceEmbeddings` (tools.embeddings.make_embeddings) to `Embed`.

    Replies and prototypes are both short texts compared with each other, so both are encoded as
    e5 queries (the "query: " prompt that make_embeddings configures for `embed_query`), in batch.
    """
    client = getattr(embeddings, "_client", None)
    kwargs = dict(getattr(embeddings, "query_encode_kwargs", {}) or {})

    def embed(texts: list[str]) -> np.ndarray:
        if client is not None:
            kwargs.setdefault("normalize_embeddings", True)
            return np.asarray(client.encode(texts, **kwargs), dtype=np.float32)
        return np.asarray([embeddings.embed_query(t) for t in texts], dtype=np.float32)

    return embed


# --------------------------------------------------------------------------- the shared instance

_shared: dict[tuple[str, str], ConfirmationClassifier] = {}
_shared_lock = threading.Lock()


def _lazy_e5() -> Embed:
    """The project's e5, loaded on the first embedding: lexicon and guard verdicts never load it."""
    loaded: list[Embed] = []

    def embed(texts: list[str]) -> np.ndarray:
        if not loaded:
            from tools.embeddings import make_embeddings

            loaded.append(e5_query_embedder(make_embeddings()))
        return loaded[0](texts)

    return embed


def shared_classifier(path: Path = PROTOTYPES_FILE) -> ConfirmationClassifier:
    """One classifier per process and prototypes content (sha256 of the file): the prototype
    vectors are embedded once, and an edited file gets a fresh instance.
    """
    key = (str(path), hashlib.sha256(path.read_bytes()).hexdigest())
    with _shared_lock:
        clf = _shared.get(key)
        if clf is None:
            clf = ConfirmationClassifier.from_file(_lazy_e5(), path)
            _shared[key] = clf
        return clf


def cancel_split(text: str) -> CancelClause:
    """`ConfirmationClassifier.cancel` on the shared instance; the lexicon alone if the model fails."""
    lexical = cancel_clause(text)
    if lexical.cancel:
        return lexical
    try:
        return shared_classifier().cancel(text)
    except Exception:  # noqa: BLE001 - no embedding model: the lexicon's verdict stands
        return lexical


def mentions_cancel(text: str) -> bool:
    """The message cancels (a leading cancel clause or a close paraphrase of one); see `cancel_split`."""
    return cancel_split(text).cancel


def is_assent(text: str, choices: Iterable[str] = ()) -> bool:
    """`ConfirmationClassifier.assent` on the shared instance; the lexicon alone if the model fails."""
    try:
        return shared_classifier().assent(text, choices)
    except Exception:  # noqa: BLE001
        return classify(text) == "confirm"


# --------------------------------------------------------------------------- the LLM fallback

_decision_models: dict[tuple[str, ...], type[BaseModel]] = {}


def decision_model(allowed: Iterable[str]) -> type[BaseModel]:
    """`{"decision": …}` restricted to the LLM labels in `allowed`: the schema constrains sampling,
    so a reply the guards ruled out as a confirmation cannot even be generated as one.
    """
    labels = tuple(lab for lab in LLM_LABELS if lab in set(allowed) or lab == "other")
    model = _decision_models.get(labels)
    if model is None:
        choice: Any = Literal[labels]
        model = create_model("Decision", decision=(choice, ...))
        _decision_models[labels] = model
    return model


def llm_decision(text: str, summary: str, allowed: Iterable[str], *, backend: str | None,
                 usage: Usage | None = None) -> LLMLabel:
    """Ask the LLM (prompts/confirmation.txt, the pending summary shown) for confirm / reject / other.

    Only labels in `allowed` can come back; raises `tools.llm.LLMError` when the model fails twice.
    """
    allowed = tuple(allowed)
    out = structured_call("confirmation", decision_model(allowed), "confirmation", backend=backend, usage=usage,
                          summary=summary or "-", message=text)
    label = str(getattr(out, "decision", "other"))
    return label if label in allowed and label in LLM_LABELS else "other"
