"""Classify the reply to a pending write: confirm / reject / correct / other, or "unsure".

Why: the word lexicon alone misses colloquial assent ("fechou", "go for it") and typos, and the LLM
fallback has cancelled a plain assent. Three stages, cheapest first:

1. the lexicon (`classify` of the lexicon module), also on a typo-corrected variant of the reply
   (transpositions, repeated letters: "confrimo", "siim");
2. e5 similarity to per-class prototypes (`policies/confirmation_prototypes.yaml`): the mean of the
   top_k cosines per class (top_k 1: the nearest prototype), accepted only when the best class
   beats the runner-up by `margin`, or by the larger `confirm_margin` for "confirm" (unless most of
   the reply's words are lexicon assent phrases), because a wrong "confirm" executes a write;
3. otherwise "unsure": the caller asks the LLM and accepts only a label in `result.allowed`.

Deterministic guards sit over every stage because the one error that must never happen is a
confirmation the user did not give. A reply that carries a new value (an id, a number or an enum
value that is not in the pending summary) is a correction ("other" with an additive word:
"aprova também a EXP-…" is a new request); a conditional, hedge or sarcasm marker makes it "other";
a question without a new value is "other"; a contrast ("mas", "but") rules "confirm" out; a
negation sends a would-be "confirm" to the LLM. The guards use generic function words (data, in the
YAML) and value shapes, never phrases fitted to a benchmark.

The module is pure: the embedding function is injected, prototype vectors are cached per instance,
nothing is read from the environment.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tools.registry_models import load_model
from tramita.base.paths import POLICIES_DIR
from tramita.base.text import fold as _fold
from tramita.core.lexicon import classify, lexicons

Label = Literal["confirm", "reject", "correct", "other"]
Stage = Literal["lexicon", "guard", "prototype", "unsure"]
Embed = Callable[[list[str]], np.ndarray]
"""A batch of texts -> an (n, d) array of L2-normalised vectors (e5: with the "query: " prompt)."""

LABELS: tuple[Label, ...] = ("confirm", "reject", "correct", "other")
PROTOTYPES_FILE = POLICIES_DIR / "confirmation_prototypes.yaml"

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
        return [*self.pt, *self.en]


class PrototypeSets(BaseModel):
    model_config = ConfigDict(extra="forbid")
    confirm: PerLanguage
    reject: PerLanguage
    correct: PerLanguage
    other: PerLanguage

    def of(self, label: Label) -> PerLanguage:
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
            scores = self._scores(queries)
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
        if reply is None:
            return None
        return self._final("confirm" if reply == "confirm" else "reject", f, 1.0, 1.0, "lexicon", {})

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
            return ConfirmationResult(label, score, margin, at, allowed=allowed, reason=why, scores=scores)

        if f.doubt:
            return result("other", "guard", f.doubt)
        if f.new_values:
            if f.additive:
                return result("other", "guard", f"additional value {f.new_values[0]}: a new request")
            if proposal != "other":
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
