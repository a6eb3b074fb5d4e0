"""Which retrieval backends a question needs, decided from the backends' own vocabularies.

Why: an LLM call per question is the most expensive step on two cores, and a hand-kept word list
per backend ends up restating the evaluation items. So each backend declares what it holds in its
own data (`RetrievalBackend.vocabulary`: the semantic model, the graph patterns, the document
titles and headings, the API operations) plus its planner line, and the question is matched
against those texts with e5 — the registry's margin rule (`tools.registry_index`), applied to
backends:

- score(backend) = mean cosine of the question with its `top_k` closest vocabulary texts, both
  sides with the entities the references know masked by kind ("payments-api" → "service",
  "INC-2047" → "id": a name shared with an example says nothing about what is asked), plus a small
  bonus per question word that only that backend's vocabulary uses;
- the top backend beats the runner-up by `margin` → chosen, no LLM call; a question that asks two
  things ("… ? E quanto …") is also matched part by part, each clear part adding its winner (and,
  when a part is close, each part's top source is the plan without the LLM: `Route.best`);
- a backend whose `names_nothing` hook says the text names nothing it holds (the database: no
  entity, member or value of the semantic model; the graph: no node, id or week, and no pattern
  above the patterns' floor) is no candidate for that text: the small model fills a query for any
  question, and a rule asked of the database came back as an unrelated count;
- a question that names a kind of document (policy, rule, deadline, process: `document_kinds`
  and the words the document titles share), or asks why (`reason_words`: a reason is written in a
  postmortem or a decision, not in a row), reaches the documents, and a backend whose
  `required_by` hook claims the question is in the plan too (the graph: a relation of any depth,
  "direta ou indiretamente", read from the patterns' own depth words); when it names a kind of
  document, a backend whose `compares_with_documents` hook says it compares that backend's records
  with a figure joins too (the database: "which X passed the policy's limit");
- a backend whose `defers` hook says another record store holds the text's relation one join away
  (the graph: a person's manager, a team's services) gives its place and score to that store;
- a text that asks what a rule sets (a deadline, a limit, who must approve) rather than what the
  records hold, by the margin of a prototype classifier (`rule_lead`), goes to the rules' backend
  alone, unless it names a person or a record id;
- nothing clear → `Route.decision` is "close" (the LLM chooses among the backends within the
  margin) or "none" (below the floor: the LLM chooses among all).

The vectors are cached per vocabulary revision (a hash of the masked texts and the model), in
memory and under the models directory, so a data change re-embeds only then.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from tools.backends import BACKENDS
from tools.backends.base import PART_JOINER, part_position
from tools.backends.base import question_parts as parts
from tools.registry_models import load_model
from tramita.base.logmask import get_logger
from tramita.base.paths import POLICIES_DIR
from tramita.base.text import fold, phrase_starts, span_of

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from tools.registry_index import ToolIndex
    from tools.services import Services

log = get_logger("tramita.planner")

Decision = Literal["clear", "close", "none"]
_ID = re.compile(r"\b[A-Za-z]{1,4}-?\d{2,6}\b|\b\d{4}-[WQ]\d{1,2}\b")
_RECORD_ID = re.compile(r"\b[A-Za-z]{1,4}-\d{2,6}\b")  # a record's id ("INC-2066"), not a week or a quarter

class Matching(BaseModel):
    """`matching:` of policies/planner.yaml (see the file for what each knob does)."""

    model_config = ConfigDict(extra="forbid")
    top_k: int = Field(3, ge=1, le=20)
    lexical_weight: float = Field(0.02, ge=0.0, le=0.2)
    margin: float = Field(0.03, ge=0.0, le=0.5)
    floor: float = Field(0.80, ge=0.0, le=1.0)
    llm_when_close: bool = Field(False, description="ask the LLM planner in a close case (else: the best match)")
    evidence_offset: float | None = Field(
        None, ge=0.0, le=0.5,
        description="a backend's score is at least its content evidence minus this (None: vocabulary only)")
    offsets: dict[str, float] = Field(
        default_factory=dict,
        description="backend -> a constant added to its score: a calibration for vocabularies whose texts are "
                    "shaped unlike questions (titles) or like every question (API examples)")


class RuleQuestions(BaseModel):
    """`rule_questions:` of policies/planner.yaml: a prototype classifier for questions that ask
    what a rule sets (a deadline, a limit, who must approve) rather than what the records hold.
    """

    model_config = ConfigDict(extra="forbid")
    backend: str = Field(description="the backend that holds the rules (it answers a rule question)")
    margin: float = Field(ge=0.0, le=0.5, description="rule minus records class score needed to call a text a rule "
                          "question")
    near: float | None = Field(None, ge=0.0, le=0.5, description="a lead at or above this and below `margin` "
                               "adds the rules' backend to the text's own sources instead of replacing them: the "
                               "classes overlap there; none: no such band")
    top_k: int = Field(3, ge=1, le=20, description="prototypes averaged per class")
    not_naming: list[str] = Field(
        default_factory=list,
        description="masked kinds (a gazetteer kind, or \"id\") whose mention makes a text no rule question: it asks "
                    "about one record or one person, which the records hold")
    rule: list[str] = Field(min_length=1, description="questions about what a rule sets, both languages")
    records: list[str] = Field(min_length=1, description="questions about what the records hold, both languages")

    @model_validator(mode="after")
    def _disjoint(self) -> RuleQuestions:
        """A prototype in both classes would make the margin meaningless."""
        both = {fold(p) for p in self.rule} & {fold(p) for p in self.records}
        if both:
            raise ValueError(f"prototypes in both rule and records: {sorted(both)}")
        if self.near is not None and self.near >= self.margin:
            raise ValueError(f"near ({self.near}) must be below margin ({self.margin})")
        return self


class PlannerFile(BaseModel):
    """`policies/planner.yaml`: planner lines, the margin rule, document kinds."""

    model_config = ConfigDict(extra="forbid")
    descriptions: dict[str, str] = {}
    matching: Matching
    rule_questions: RuleQuestions | None = None
    document_kinds: list[str] = []
    reason_words: list[str] = Field(
        default_factory=list, description="words or phrases that ask why: a reason is written in a document, "
                                          "never in a row's figures")
    stopwords: list[str] = Field(default_factory=list, description="function words that say nothing about a source")
    back_pronouns: list[str] = Field(
        default_factory=list, description="pronouns that stand for a thing the part before names, never a person "
                                          "(\"it\", \"its\"): a part that has one and names nothing takes that name")
    pointing_pronouns: list[str] = Field(
        default_factory=list, description="pronouns that stand for a thing or a person (\"ele\", \"dela\"): the "
                                          "same, unless the part before asks for a person (`person_openers`)")
    person_openers: list[str] = Field(
        default_factory=list, description="words that ask for a person (\"who\", \"quem\"): a pointing pronoun "
                                          "after such a part may stand for the person found")
    chain: list[str] = Field(
        default_factory=list,
        description="the order in which planned backends run; each later one reads what the earlier ones found "
                    "(a backend not listed runs in the last stage)")


@lru_cache(maxsize=1)
def _file() -> PlannerFile:
    f: PlannerFile = load_model(POLICIES_DIR / "planner.yaml", PlannerFile)
    rules = {f.rule_questions.backend: None} if f.rule_questions is not None else {}
    for name, given in (("descriptions", f.descriptions), ("matching.offsets", f.matching.offsets),
                        ("chain", dict.fromkeys(f.chain)), ("rule_questions.backend", rules)):
        unknown = set(given) - set(BACKENDS)
        if unknown:
            raise ValueError(f"{POLICIES_DIR / 'planner.yaml'}: field {name}: unknown backends {sorted(unknown)}; "
                             f"known: {sorted(BACKENDS)}")
    return f


def llm_when_close() -> bool:
    """Whether a close case goes to the LLM planner (`matching.llm_when_close`)."""
    return _file().matching.llm_when_close


def stages(names: Sequence[str], parts: Mapping[str, str] | None = None, question: str = "") -> list[list[str]]:
    """`names` (planned backends) as the stages retrieval runs one after the other (`chain`): a
    backend sees what every earlier stage found; the backends of one stage run in parallel.

    When the planner split the question (`parts`) and a later part points back at an earlier one
    ("quem lidera o projeto X, e essa pessoa está de plantão?"), the backends of those parts run in
    the question's order, in the places the chain gives them: the chain puts the graph before the
    database, and the graph's part would then ask about a person not found yet. Not when the
    first part names a record by its id: the later part's "nele" points at that record ("quem
    comandou o INC-…? e algum serviço foi atingido nele?"), which it reads from the question.
    """
    order = _file().chain
    listed = [n for n in order if n in names]
    rest = [n for n in names if n not in order]
    parted = [n for n in listed if parts and n in parts]
    if parts and len(parted) > 1:
        from tools.semantic_layer import points_back

        at = {n: part_position(question, parts[n]) for n in parted}
        spoken = sorted(parted, key=lambda n: at[n])
        if min(at.values()) >= 0 and spoken != parted and any(points_back(parts[n]) for n in spoken[1:]) \
                and not _RECORD_ID.search(parts[spoken[0]]):
            queue = iter(spoken)
            listed = [next(queue) if n in parted else n for n in listed]
    return [*([n] for n in listed), *([rest] if rest else [])]


def descriptions() -> dict[str, str]:
    """The planner line of each backend that the policy file describes."""
    return dict(_file().descriptions)


def description(name: str) -> str:
    """A backend's planner line: the policy file's, else its own `planner_description`."""
    return _file().descriptions.get(name) or BACKENDS[name].planner_description


# ------------------------------------------------------------------------------------ texts

def _stem(word: str) -> str:
    """A crude shared stem for pt and en inflections (politica/politicas, deploy/deploys)."""
    return word[:5]


def _stopwords() -> frozenset[str]:
    """The policy file's function words, folded. Not the language detector's signal words: those
    include content words ("política", "budget") that tell the sources apart.
    """
    return frozenset(fold(w) for w in _file().stopwords)


class Masker:
    """Replaces the entities a deployment's references know by their kind, and ids by "id"."""

    def __init__(self, gazetteer: Mapping[str, Sequence[tuple[str, str]]]) -> None:
        """`gazetteer`: kind → (folded surface form, id), as `tramita.core.extraction.gazetteer` gives."""
        pairs = {(surface, kind) for kind, forms in gazetteer.items() for surface, _ in forms if len(surface) >= 3}
        self.forms = sorted(pairs, key=lambda p: -len(p[0]))
        self.signature = hashlib.sha256(repr(self.forms).encode()).hexdigest()[:16]

    def mask(self, text: str) -> str:
        """The folded text with entities and ids replaced by their kind."""
        folded = f" {fold(_ID.sub(' id ', text))} "
        for surface, kind in self.forms:
            if f" {surface} " in folded:
                folded = folded.replace(f" {surface} ", f" {kind} ")
        return folded.strip()

    def named(self, text: str) -> list[str]:
        """The record ids and known names `text` writes, as written there (weeks and quarters are no
        thing a pronoun stands for).
        """
        found = _RECORD_ID.findall(text)
        folded = f" {fold(_ID.sub(' ', text))} "
        for surface, _ in self.forms:
            if f" {surface} " in folded:
                folded = folded.replace(f" {surface} ", " ")
                found.append(span_of(text, surface) or surface)
        return found

    def words(self, text: str, stop: frozenset[str]) -> set[str]:
        """The stems of the content words of `text` (entities, ids, numbers and stop words out)."""
        masked = f" {self.mask(text)} "
        kinds = {kind for _, kind in self.forms} | {"id"}
        return {_stem(w) for w in masked.split() if w not in stop and w not in kinds and len(w) > 2 and not w.isdigit()}


# ------------------------------------------------------------------------------------ index

@dataclass
class VocabularyIndex:
    """The backends' masked vocabulary vectors and their exclusive words, for one revision."""

    revision: str
    index: ToolIndex
    exclusive: dict[str, str]  # stem → the only backend whose vocabulary uses it
    document_kinds: frozenset[str]  # stems that name a kind of document
    masker: Masker
    stop: frozenset[str]
    sizes: dict[str, int] = field(default_factory=dict)
    # folded field phrase → the only backend that holds it: none of its words is in another
    # backend's vocabulary (`field_words`)
    own_fields: dict[str, str] = field(default_factory=dict)
    stems: dict[str, frozenset[str]] = field(default_factory=dict)  # backend → its vocabulary's stems

    def claim(self, text: str) -> tuple[str, set[str]] | None:
        """(the one backend whose own field words `text` says, the stems of those words): "quem foi
        o comandante do INC-…" asks for a field only the database holds. None when no backend's or
        several backends' field words are said.
        """
        spaced = f" {_spaced(text)} "
        said = {phrase: b for phrase, b in self.own_fields.items() if f" {phrase} " in spaced}
        if len(set(said.values())) != 1:
            return None
        return next(iter(said.values())), {_stem(w) for phrase in said for w in phrase.split()}


_LOCK = threading.Lock()
_INDEXES: dict[str, VocabularyIndex] = {}


def vocabularies(services: Services) -> dict[str, list[str]]:
    """Each registered backend's texts: its planner line plus its `vocabulary(services)` (a
    backend without the hook, or whose data cannot be read, has its planner line only).
    """
    out: dict[str, list[str]] = {}
    for name, backend in BACKENDS.items():
        texts = [description(name)]
        hook: Callable[[Services], list[str]] | None = getattr(backend, "vocabulary", None)
        if hook is not None:
            try:
                texts += [t for t in hook(services) if t and t.strip()]
            except Exception as exc:  # noqa: BLE001 - a broken source narrows the plan, never fails the turn
                log.warning("planner: %s vocabulary unavailable: %s", name, exc)
        out[name] = list(dict.fromkeys(texts))
    return out


def _spaced(text: str) -> str:
    """The folded words of `text`, one space apart."""
    return " ".join(re.findall(r"\w+", fold(text)))


def field_words(services: Services) -> dict[str, dict[str, list[str]]]:
    """Each backend's `field_words(services)`: field → its words (a backend without the hook, or
    whose data cannot be read, has none).
    """
    out: dict[str, dict[str, list[str]]] = {}
    for name, backend in BACKENDS.items():
        hook: Callable[[Services], Mapping[str, list[str]]] | None = getattr(backend, "field_words", None)
        if hook is None:
            continue
        try:
            out[name] = {f: [w for w in ws if w and w.strip()] for f, ws in hook(services).items()}
        except Exception as exc:  # noqa: BLE001 - no field words: the vocabulary still plans
            log.warning("planner: %s field words unavailable: %s", name, exc)
    return out


def _own_fields(vocab: Mapping[str, list[str]], fields: Mapping[str, Mapping[str, list[str]]],
                stop: frozenset[str]) -> dict[str, str]:
    """Folded field phrase → its backend, for the phrases of the fields no other backend holds (by
    the field's name: the graph's `office_city` is the database's too) none of whose content words
    another backend's vocabulary uses (function words alone name nothing).
    """
    used = {name: {w for t in texts for w in _spaced(t).split()} for name, texts in vocab.items()}
    out: dict[str, str] = {}
    for name, held in fields.items():
        others = set().union(*(ws for n, ws in used.items() if n != name))
        shared = set().union(*(set(f) for n, f in fields.items() if n != name))
        for phrase in (p for f, ps in held.items() if f not in shared for p in ps):
            words = _spaced(phrase).split()
            content = {w for w in words if w not in stop}
            if content and not others & content:
                out[" ".join(words)] = name
    return out


def _document_kinds(docs: Sequence[str], masker: Masker, stop: frozenset[str]) -> frozenset[str]:
    """The kinds of documents: the policy file's words, and the words that three or more document
    titles share ("Política …", "… Policy", "Runbook: …", "Postmortem …"; titles are the docs
    vocabulary texts without a " — section"). Two titles sharing a word is chance ("mudança").
    """
    titles = [t for t in docs[1:] if " — " not in t]
    counts: dict[str, int] = {}
    for title in titles:
        for w in masker.words(title, stop):
            counts[w] = counts.get(w, 0) + 1
    shared = {w for w, n in counts.items() if n >= 3}
    return frozenset(shared | {_stem(fold(w)) for w in _file().document_kinds})


def _cache_file(revision: str) -> Path | None:
    try:
        from tools.model_files import models_dir

        return models_dir() / "cache" / "planner" / f"{revision}.npy"
    except Exception:  # noqa: BLE001 - no writable models dir: memory only
        return None


_VECTORS: dict[str, np.ndarray] = {}


def _embed(texts: list[str], revision: str, embeddings: Embeddings) -> np.ndarray:
    """The passage vectors of `texts`: from memory, else the revision's cache file, else e5."""
    with _LOCK:
        hit = _VECTORS.get(revision)
    if hit is not None and hit.shape[0] == len(texts):
        return hit
    vectors = _embed_uncached(texts, revision, embeddings)
    with _LOCK:
        _VECTORS[revision] = vectors
    return vectors


def _embed_uncached(texts: list[str], revision: str, embeddings: Embeddings) -> np.ndarray:
    path = _cache_file(revision)
    if path is not None and path.exists():
        try:
            cached = np.load(path)
            if cached.shape[0] == len(texts):
                return np.asarray(cached, dtype=np.float32)
        except Exception as exc:  # noqa: BLE001 - a damaged cache is rebuilt
            log.warning("planner: vector cache %s unreadable: %s", path, exc)
    vectors = np.asarray(embeddings.embed_documents(texts), dtype=np.float32)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.stem}.{threading.get_ident()}.tmp.npy")
            np.save(tmp, vectors)
            tmp.replace(path)
        except OSError as exc:
            log.warning("planner: vector cache %s not written: %s", path, exc)
    return vectors


def _default_embeddings() -> Embeddings:
    from tools.embeddings import make_embeddings

    return make_embeddings()


_RULE_VECTORS: dict[str, tuple[np.ndarray, np.ndarray]] = {}


def _unit_queries(texts: Sequence[str], model: Embeddings) -> np.ndarray:
    """Normalised query vectors: prototypes and questions are both short questions (e5 "query: ")."""
    vectors = np.asarray([model.embed_query(t) for t in texts], dtype=np.float32)
    unit: np.ndarray = vectors / (np.linalg.norm(vectors, axis=1, keepdims=True) + 1e-12)
    return unit


def rule_lead(vector: Sequence[float], model: Embeddings) -> float | None:
    """How much closer a question (its masked query `vector`) is to the rule prototypes than to the
    records ones (mean of the `top_k` best cosines per class); None when the policy has no classifier.
    The prototypes name no entity, so they are embedded as written (folding them lowered the margin
    between the classes on the own set).

    Why: "how fast must a SEV1 be acknowledged?" uses the incidents' own words, so the database's
    vocabulary beats the documents'; what it asks is the rule, and the database's query would
    answer another question (the average time it took). Whether a question asks what a rule sets
    or what the records hold is its shape, not its nouns, which prototypes of both shapes capture.
    """
    config = _file().rule_questions
    if config is None:
        return None
    name = getattr(model, "model_name", None) or type(model).__name__
    key = hashlib.sha256(f"{name}\n{config.model_dump_json()}".encode()).hexdigest()[:24]
    with _LOCK:
        pair = _RULE_VECTORS.get(key)
    if pair is None:
        pair = (_unit_queries(list(config.rule), model),
                _unit_queries(list(config.records), model))
        with _LOCK:
            _RULE_VECTORS[key] = pair
    q = np.asarray(vector, dtype=np.float32)
    q = q / (np.linalg.norm(q) + 1e-12)
    rule, records = (float(np.sort(m @ q)[-config.top_k:].mean()) for m in pair)
    return rule - records


def _masker(services: Services) -> Masker:
    from tramita.core.extraction import gazetteer

    try:
        return Masker(gazetteer(services.engine))
    except Exception as exc:  # noqa: BLE001 - no SQL store: ids are still masked
        log.warning("planner: no gazetteer: %s", exc)
        return Masker({})


def vocabulary_index(services: Services, embeddings: Embeddings | None = None) -> VocabularyIndex:
    """The index of the backends' vocabularies for the data as it is now (built once per revision)."""
    from tools.registry_index import ToolIndex

    vocab = vocabularies(services)
    fields = field_words(services)
    masker = _masker(services)
    model = getattr(embeddings, "model_name", None) or ("default" if embeddings is None else type(embeddings).__name__)
    digest = hashlib.sha256(f"{model}\n{masker.signature}\n".encode())
    for name, texts in vocab.items():
        digest.update(f"\n#{name}\n".encode() + "\n".join(texts).encode())
    for name, held in fields.items():
        digest.update(f"\n#{name} fields\n".encode() + repr(sorted(held.items())).encode())
    revision = digest.hexdigest()[:24]
    with _LOCK:
        hit = _INDEXES.get(revision)
    if hit is not None:
        return hit
    stop = _stopwords()
    source = embeddings or _default_embeddings()
    groups: dict[str, list[Any]] = {}
    for name, texts in vocab.items():
        # one cache entry per backend: a new or changed backend re-embeds only its own texts
        masked = [masker.mask(t) for t in texts]
        own = hashlib.sha256(f"{model}\n{name}\n".encode() + "\n".join(masked).encode()).hexdigest()[:24]
        groups[name] = list(_embed(masked, own, source))
    owners: dict[str, set[str]] = {}
    for name, texts in vocab.items():
        for t in texts:
            for w in masker.words(t, stop):
                owners.setdefault(w, set()).add(name)
    exclusive = {w: next(iter(names)) for w, names in owners.items() if len(names) == 1}
    built = VocabularyIndex(revision, ToolIndex.build(revision, groups), exclusive,
                            _document_kinds(vocab.get("docs", []), masker, stop), masker, stop,
                            {n: len(t) for n, t in vocab.items()}, _own_fields(vocab, fields, stop),
                            {n: frozenset(w for w, names in owners.items() if n in names) for n in vocab})
    with _LOCK:
        if len(_INDEXES) >= 4:
            _INDEXES.clear()
        _INDEXES[revision] = built
    return built


# ------------------------------------------------------------------------------------ route

@dataclass
class Match:
    """One text (the question or a part of it) against the backends."""

    text: str
    ranked: list[tuple[str, float]]
    decision: Decision
    best: str | None
    close: list[str]
    rule_lead: float | None = None  # rule minus records prototype score (`rule_lead`)
    rule: bool = False  # decided as a rule question: the rules' backend alone
    near_rule: bool = False  # a lead in the `near` band: the rules' backend joins the text's own sources
    required: list[str] = field(default_factory=list)  # backends this part's words require (parts only)

    def pointing_candidates(self, won: set[str | None]) -> list[str]:
        """A close part that points back at another part's answer ("… e quantas passaram desse
        valor?") asks it of another source: its close candidates that no clear part has won (`won`),
        best first; [] for a clear part or one that points at nothing.
        """
        from tools.semantic_layer import points_back

        if self.decision != "close" or not points_back(self.text):
            return []
        return [n for n in self.close if n not in won]

    def trace(self) -> dict[str, Any]:
        """The match as the turn trace shows it."""
        out: dict[str, Any] = {"text": self.text[:120], "decision": self.decision, "best": self.best,
                               "scores": [[n, round(s, 4)] for n, s in self.ranked]}
        if self.rule_lead is not None:
            out["rule_lead"] = round(self.rule_lead, 4)
            out["rule"] = self.rule
            if self.near_rule:
                out["near_rule"] = True
        return out


@dataclass
class Route:
    """The vocabulary match of a question: what is chosen without the LLM, or what it must decide."""

    decision: Decision
    chosen: list[str]
    candidates: list[str]
    matches: list[Match]
    reason: str
    required: list[str] = field(default_factory=list)  # in the plan whatever the LLM says (named documents)
    best: list[str] = field(default_factory=list)  # a close case's plan without the LLM (default: the top candidate)
    hands_on: list[str] = field(default_factory=list)  # answer the relation only: a source that aggregates follows
    alone: list[str] = field(default_factory=list)  # required, and answering a one-part question's count itself

    def trace(self) -> dict[str, Any]:
        """The route as the turn trace shows it (`plan_match`)."""
        return {"decision": self.decision, "chosen": self.chosen, "candidates": self.candidates,
                "required": self.required, "best": self.best, "hands_on": self.hands_on, "alone": self.alone,
                "matches": [m.trace() for m in self.matches]}

    def aggregator(self, chosen: Sequence[str]) -> str | None:
        """The backend to add to `chosen`: when a chosen backend answers only the question's
        relation (`hands_on`) and none of `chosen` aggregates, the best-ranked backend that does.

        Why: "the total of the expenses of everyone under X" matches the graph (the relation) a
        little better than the database (the sum); the graph alone lists the people and no total.
        """
        if not set(chosen) & set(self.hands_on) or any(aggregates(n) for n in chosen):
            return None
        ranked = [n for n, _ in self.matches[0].ranked] if self.matches else []
        return next((n for n in ranked if aggregates(n) and n not in chosen), None)

    def relation(self, chosen: Sequence[str]) -> str | None:
        """The backend to put before `chosen`: when `chosen` aggregates but holds none of the
        backends that answer the question's relation (`hands_on`), the first of those.

        Why: "for each service X hit, how many tickets were opened" matched the database (the
        count) a little better than the graph (the services hit); the database alone counted every
        service's tickets.
        """
        if set(chosen) & set(self.hands_on) or not any(aggregates(n) for n in chosen):
            return None
        return next((n for n in self.hands_on if n not in chosen), None)

    def standby(self, chosen: Sequence[str]) -> str | None:
        """The backend that answers in place of a planned one whose query fails: the best-ranked
        unplanned backend that writes its own query over records, when a planned one does too.

        Why: the database and the graph hold many of the same records (incidents, services,
        people), and a question near both is often matched to the one whose query the small model
        then cannot write ("the most recent incident" as a Cypher path); the other one's query
        answers it. Documents never stand in: passages near a failed query's question invite an
        answer they do not hold.
        """
        if not any(stands_in(n) for n in chosen) or not self.matches:
            return None
        return next((n for n, _ in self.matches[0].ranked if n not in chosen and stands_in(n)), None)

    def parts(self, chosen: Sequence[str]) -> dict[str, str]:
        """Which part of the question each chosen backend answers: the parts whose top source it is,
        in the question's order. Empty unless the question asks two or more things and their top
        sources are two or more of `chosen`; a chosen backend that tops no part is not listed (it
        answers the whole question).

        Why: the whole question sent to every source makes each one answer the other's part too
        ("who was on call …, and how many tickets does that person have?" filled as tickets of the
        service in that week).
        """
        pieces = self.matches[1:]
        # a source that answers only a part's relation (`hands_on`) claims no part: the part is a
        # chain, the relation's rows then the aggregate over them
        claimed = {n for m in pieces for n in m.required if n in chosen and n not in self.hands_on}
        won = {m.best for m in pieces if m.decision == "clear"}
        by: dict[str, list[str]] = {}
        for m in pieces:
            top = m.best or (m.ranked[0][0] if m.ranked and m.decision != "none" else None)
            own = [n for n in m.required if n in claimed]
            rest = [n for n, _ in m.ranked if n in chosen and n not in claimed]
            back = [n for n in m.pointing_candidates(won) if n in rest]
            if own:  # "… atingido indiretamente": the source its words require answers it
                top = own[0]
            elif back:  # "… desse valor": not the source of the part it points at
                top = back[0]
            elif m.decision == "close" and rest:  # a close part: not to a source another part requires
                top = rest[0]
            if top is not None and top in chosen:
                by.setdefault(top, []).append(m.text)
        return {n: PART_JOINER.join(texts) for n, texts in by.items()} if len(by) > 1 else {}


def aggregates(name: str) -> bool:
    """Whether backend `name` counts and sums over what another found (its `aggregates` attribute)."""
    return bool(getattr(BACKENDS.get(name), "aggregates", False))


def stands_in(name: str) -> bool:
    """Whether backend `name` writes its own query over records (its `stands_in` attribute)."""
    return bool(getattr(BACKENDS.get(name), "stands_in", False))


def _saying(hook_name: str, services: Services, text: str) -> list[str]:
    """The backends whose boolean hook `hook_name(services, text)` says yes (a failing hook says
    nothing: the vocabulary match still plans).
    """
    out: list[str] = []
    for name, backend in BACKENDS.items():
        hook: Callable[[Services, str], bool] | None = getattr(backend, hook_name, None)
        if hook is None:
            continue
        try:
            if hook(services, text):
                out.append(name)
        except Exception as exc:  # noqa: BLE001 - no hint
            log.debug("planner: %s %s unavailable: %s", name, hook_name, exc)
    return out


def hands_on(question: str, services: Services) -> list[str]:
    """The backends whose `leaves_aggregate(services, question)` hook says they answer the
    question's relation but not its aggregate.
    """
    return _saying("leaves_aggregate", services, question)


def counting(question: str, services: Services) -> list[str]:
    """The backends whose `answers_count(services, question)` hook says they answer its count themselves."""
    return _saying("answers_count", services, question)


def required(question: str, services: Services) -> list[str]:
    """The backends whose `required_by(services, question)` hook says the question needs them
    whatever the scores say (the graph: a relation of any depth).
    """
    return _saying("required_by", services, question)


def compared(question: str, services: Services) -> list[str]:
    """The backends whose `compares_with_documents(services, question)` hook says the question
    compares their records with a figure; with a kind of document named, they join the plan.
    """
    return _saying("compares_with_documents", services, question)


def names_by_state(phrase: str, services: Services) -> bool:
    """Whether a backend's `names_by_state(services, phrase)` hook reads the two words as rows it
    holds named by their state ("open tickets"): a noun phrase, not an imperative and its object.
    """
    return bool(_saying("names_by_state", services, phrase))


def silent(text: str, services: Services) -> set[str]:
    """The backends whose `names_nothing(services, text)` hook says `text` names nothing they hold.
    Such a backend is not a candidate for `text`: its query would answer another question.
    """
    return set(_saying("names_nothing", services, text))


def deferring(text: str, services: Services) -> set[str]:
    """The backends whose `defers(services, text)` hook says another record store answers `text`."""
    return set(_saying("defers", services, text))


def _handed_over(ranked: list[tuple[str, float]], defer: set[str]) -> list[tuple[str, float]]:
    """`ranked` with each deferring backend's place given to the best-ranked other backend that
    writes its own query over records (`stands_in`), at the higher of the two scores; a deferring
    backend with no such other backend keeps its place.

    Why: a person's manager, a team's services or a project's members are in the database and in
    the graph alike; the graph's examples of those relations drew such questions to the graph,
    where the data's convention keeps them in the database.
    """
    out = dict(ranked)
    for name, score in ranked:
        heir = next((n for n, _ in ranked if n != name and n not in defer and stands_in(n)), None)
        if name in defer and heir is not None:
            out[heir] = max(out[heir], score)
            del out[name]
    return sorted(out.items(), key=lambda kv: -kv[1])


def evidence(text: str, services: Services) -> dict[str, float]:
    """Each backend's `evidence(services, text)`: how close its own content comes to `text` (the
    documents: the best passage). A backend without the hook, or whose store fails, gives none.
    """
    out: dict[str, float] = {}
    for name, backend in BACKENDS.items():
        hook: Callable[[Services, str], float | None] | None = getattr(backend, "evidence", None)
        if hook is None:
            continue
        try:
            value = hook(services, text)
        except Exception as exc:  # noqa: BLE001 - no evidence narrows nothing: the vocabulary still scores
            log.debug("planner: %s evidence unavailable: %s", name, exc)
            continue
        if value is not None:
            out[name] = float(value)
    return out


def _scores(index: VocabularyIndex, vector: Sequence[float], words: set[str], m: Matching,
            found: Mapping[str, float] | None = None) -> list[tuple[str, float]]:
    """Each backend's score: mean cosine of its `top_k` closest texts plus the exclusive-word bonus,
    or its content evidence less `evidence_offset` when that is higher.
    """
    q = np.asarray(vector, dtype=np.float32)
    q = q / (np.linalg.norm(q) + 1e-12)
    cosines = index.index.matrix @ q
    ends = [*index.index.offsets[1:].tolist(), len(cosines)]
    out: list[tuple[str, float]] = []
    for name, start, end in zip(index.index.names, index.index.offsets.tolist(), ends, strict=True):
        top = np.sort(cosines[start:end])[::-1][: m.top_k]
        bonus = m.lexical_weight * min(3, sum(1 for w in words if index.exclusive.get(w) == name))
        score = float(top.mean()) + bonus
        if found and m.evidence_offset is not None and name in found:
            score = max(score, found[name] - m.evidence_offset)
        out.append((name, score + m.offsets.get(name, 0.0)))
    return sorted(out, key=lambda kv: -kv[1])


def _decide(text: str, ranked: list[tuple[str, float]], m: Matching) -> Match:
    if not ranked or ranked[0][1] < m.floor:
        return Match(text, ranked, "none", None, [n for n, _ in ranked])
    top = ranked[0][1]
    runner = ranked[1][1] if len(ranked) > 1 else 0.0
    if top - runner >= m.margin:
        return Match(text, ranked, "clear", ranked[0][0], [ranked[0][0]])
    return Match(text, ranked, "close", None, [n for n, s in ranked if top - s < m.margin])


def _may_be_rule(masked: str) -> bool:
    """Whether a masked text names none of the kinds that make it a question about one record."""
    config = _file().rule_questions
    return config is not None and not set(masked.split()) & set(config.not_naming)


def _rule_or_decide(text: str, ranked: list[tuple[str, float]], m: Matching, lead: float | None) -> Match:
    """`_decide`, except that a text the rule classifier calls a rule question by its margin goes
    to the rules' backend alone (when that backend is ranked, i.e. deployed and not silent).
    """
    config = _file().rule_questions
    if config is not None and lead is not None and lead >= config.margin \
            and any(n == config.backend for n, _ in ranked):
        first = [(n, sc) for n, sc in ranked if n == config.backend]
        return Match(text, [*first, *(p for p in ranked if p[0] != config.backend)], "clear", config.backend,
                     [config.backend], rule_lead=lead, rule=True)
    decided = _decide(text, ranked, m)
    decided.rule_lead = lead
    decided.near_rule = (config is not None and config.near is not None and lead is not None
                         and config.near <= lead < config.margin and any(n == config.backend for n, _ in ranked))
    return decided


def resolved(pieces: list[str], masker: Masker) -> list[str]:
    """The parts, each that names nothing but has a pronoun that points back (`back_pronouns`,
    `pointing_pronouns`) written with the one thing the part before names in the pronoun's place:
    "Who commanded INC-7, and which services did it hit?" → "which services did INC-7 hit". Left as
    it is when the part before names none or several, and for a pronoun that may stand for a person
    after a part that asks for one ("Quem comandou o INC-7 e de que time ele é?").

    Why: alone, "which services did it hit" names no incident; the graph's patterns could not fill
    it, and the planner matched it to no source that holds incidents.
    """
    config = _file()
    things = {fold(w) for w in config.back_pronouns}
    either = {fold(w) for w in config.pointing_pronouns}
    persons = [fold(w) for w in config.person_openers]
    out = list(pieces)
    for i in range(1, len(out)):
        said = re.findall(r"\w+", fold(out[i]))
        before = out[i - 1]
        asked = re.findall(r"\w+", fold(before))
        named = list(dict.fromkeys(masker.named(before)))
        if masker.named(out[i]) or len(named) != 1:
            continue
        pronouns = things if any(phrase_starts(asked, p.split()) for p in persons) else things | either
        at = next((k for k, w in enumerate(said) if w in pronouns), None)
        if at is not None:
            words_ = re.findall(r"\S+", out[i])
            spots = [k for k, w in enumerate(words_) if fold(re.sub(r"\W", "", w)) == said[at]]
            if spots:
                words_[spots[0]] = named[0]
                out[i] = " ".join(words_)
    return out


def _counted_top(part: Match, top: str, names: Sequence[str], services: Services) -> str:
    """A close part's source: `top`, unless it holds no records and the part counts records a
    record store holds ("quantas despesas essa gestora aprovou", nearest the expense policy by its
    words): that store counts them.
    """
    if part.decision != "close" or stands_in(top):
        return top
    counters = [n for n in _saying("counts_records", services, part.text) if n in names and n != top]
    return counters[0] if counters else top


def route(question: str, services: Services, *, embeddings: Embeddings | None = None,
          index: VocabularyIndex | None = None) -> Route:
    """The vocabulary match of `question` (see the module docstring); never calls an LLM."""
    m = _file().matching
    index = index or vocabulary_index(services, embeddings)
    model = embeddings or _default_embeddings()
    written = parts(question, stop=index.stop)
    texts = [question, *resolved(written, index.masker)]
    matches: list[Match] = []
    for text, said in zip(texts, [question, *written], strict=True):
        masked = index.masker.mask(text)
        vector = model.embed_query(masked)
        found = evidence(text, services) if m.evidence_offset is not None else {}
        ranked = _scores(index, vector, index.masker.words(text, index.stop), m, found)
        quiet = silent(text, services)
        ranked = [(n, sc) for n, sc in ranked if n not in quiet] or ranked
        defer = deferring(text, services) - quiet
        claim = index.claim(text)
        if claim is not None and stands_in(claim[0]):
            # a field only one record store holds, and no other word another record store uses: it
            # takes that store's place ("quem foi o comandante do INC-…", near the graph's incidents
            # by the id alone); "quem está de plantão …, e qual o cargo dele" keeps the graph, whose
            # words name what the database does not hold
            rest = index.masker.words(text, index.stop) - claim[1]
            own = index.stems.get(claim[0], frozenset())
            defer |= {n for n, _ in ranked if n != claim[0] and stands_in(n)
                      and not rest & (index.stems.get(n, frozenset()) - own)}
        ranked = _handed_over(ranked, defer)
        # whether a part asks what a rule sets is read as the user wrote it: "quanto ele recebe por
        # semana de plantão" asks the rule, whoever "ele" is
        as_said = masked if said == text else index.masker.mask(said)
        lead = rule_lead(vector if said == text else model.embed_query(as_said), model) \
            if _may_be_rule(as_said) else None
        matches.append(_rule_or_decide(text, ranked, m, lead))
        if matches[1:]:  # a part of the question (the whole's requirements are `Route.required`)
            matches[-1].required = required(text, services)
    names = list(index.index.names)
    relation_only = hands_on(question, services)
    kinds = index.masker.words(question, index.stop) & index.document_kinds
    asked = re.findall(r"\w+", fold(question))
    reasons = [w for w in _file().reason_words if phrase_starts(asked, re.findall(r"\w+", fold(w)))]
    kinds |= {f"'{w}'" for w in reasons}
    docs = ["docs"] if kinds and "docs" in names else []
    named = [n for n in required(question, services) if n in names and n not in docs]
    # a count of records is the records' answer when the question is nearest a source that holds
    # none (the documents: "…, e quantas despesas de hardware passaram dele?"), unless another
    # backend counts it itself; a record store ranked first (the graph: "quantos colaboradores
    # ficam abaixo de X") counts its own
    first = matches[0].ranked[0][0] if matches[0].ranked else None
    counted = [n for n in _saying("counts_records", services, question) if n in names and n not in [*docs, *named]] \
        if first is None or not stands_in(first) else []
    if counted:  # whether another backend counts it itself costs that backend a pattern ranking: only now
        counters = counting(question, services)
        named += [n for n in counted if not [c for c in counters if c != n]]
    named += [n for n in (compared(question, services) if docs else []) if n in names and n not in [*docs, *named]]
    needed = [*docs, *named]
    whole, pieces = matches[0], matches[1:]
    # one question: its own match decides; a question asking several things is clear only when
    # every part is (each part then adds its winner), otherwise the LLM sees all their candidates
    decided = pieces if pieces else [whole]
    # a text the rule classifier cannot tell from a records question: the rules' backend joins
    # its sources (a rule answer needs the passage; a records answer keeps its query)
    config = _file().rule_questions
    near = any(x.near_rule for x in decided)
    if config is not None and near and config.backend not in needed:
        needed.append(config.backend)
    if all(x.decision == "clear" for x in decided):
        chosen = [n for n in names if n in {x.best for x in decided} | set(needed)]
        rules = sum(1 for x in decided if x.rule)
        why = "vocabulary match" + (f"; asks what a rule sets ({rules} of {len(decided)})" if rules else "") + \
            (f"; names a kind of document ({', '.join(sorted(kinds))})" if kinds else "") + \
            (f"; {', '.join(named)} required by its words" if named else "") + \
            ("; near a rule question (documents added)" if near else "")
        return Route("clear", chosen, chosen, matches, why, needed, hands_on=relation_only)
    if whole.decision == "none" and all(x.decision == "none" for x in pieces):
        return Route("none", [], [n for n, _ in whole.ranked], matches, "no backend clears the floor", needed,
                     hands_on=relation_only)
    candidates = {n for x in matches for n in x.close} | set(needed)
    # a part's candidate the whole question's ranking left out (a backend silent on, or deferring
    # for, the whole) stays a candidate, after the whole's
    ordered = [n for n, _ in whole.ranked if n in candidates]
    ordered += [n for x in pieces for n, _ in x.ranked if n in candidates and n not in ordered]
    # "how many people are under X, at any level": the graph its words require counts the answer
    # itself; the database, ranked first on "how many people", would count another set
    alone = [n for n in named if not pieces and n not in relation_only and n in counting(question, services)]
    # without the LLM, a question that asks two things takes each part's top source: one source
    # for a two-part question loses the other part's answer
    # a close part that points back takes its best candidate no clear part has won
    won = {x.best for x in pieces if x.decision == "clear"}
    tops = {_counted_top(x, (x.pointing_candidates(won) or [x.ranked[0][0]])[0], names, services)
            for x in pieces if x.ranked and x.decision != "none"}
    # parts that agree on one source take it (with any source the whole question's words require),
    # whichever source the whole question ranked first
    best = [n for n in names if n in tops | set(needed)] if tops else []
    return Route("close", [], ordered, matches, "close backends: the LLM decides", needed, best, relation_only, alone)
