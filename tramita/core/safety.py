"""Policy refusals that never change state (bulk actions, injection, raw writes).

Two layers, both deterministic so that a refusal costs no LLM call and cannot be talked out of by
the model (the engines stay read-only regardless; this is the first layer, with a clear message):

1. Patterns from `policies/safety.yaml` (`categories`): SQL/Cypher write syntax, injection
   phrasing, bulk actions.
2. A structural check for plain-language writes addressed to the data (`write_request`), because
   no word list can enumerate "set the approval limit of …", "apaga o plantão de …", "muda direto
   no banco …": a clause that OPENS with an imperative write verb (after fillers and request
   openers such as "por favor", "can you", "quero") and whose object names
   - the store itself ("banco", "tabela", "graph", or a table of the schema) → always refused; or
   - stored data: an id, a person/team/service the references know, or an entity, field or
     measure the semantic model declares → refused unless a registered business tool matches the
     message clearly and carries its identifier (then it is that tool's request, which runs only
     after a summary and an explicit yes).
   Questions are exempt unless addressed to us as a request ("pode apagar …?"); inside a pending
   transaction a data-object clause is a correction ("muda para P2") and is left to the
   transaction. The verb classes and the store words live in `policies/safety.yaml`; the data
   objects come from the deployment's own data (`DataVocabulary`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from tools.registry_models import load_model
from tramita.base.logmask import get_logger
from tramita.base.paths import POLICIES_DIR
from tramita.base.text import STEM, fold, is_question, stems, words
from tramita.core.lexicon import is_polite_request, lexicons

if TYPE_CHECKING:
    from graph.context import Context
    from tools.registry_models import ToolSpec
    from tools.services import Services

log = get_logger("tramita.safety")

RAW_WRITE = "raw_write"
WriteKind = Literal["store", "data"]
_ID = re.compile(r"\b[A-Za-z]{1,4}-?\d{2,6}\b")  # EXP-0264, INC-2047, E006, TCK-1085, PRJ-102


class Category(BaseModel):
    """One refusal category: its reasons (pt/en) and patterns."""

    model_config = ConfigDict(extra="forbid")
    reason_pt: str
    reason_en: str
    patterns: list[str]
    questions_exempt: bool = False


class WriteRequests(BaseModel):
    """The structural check's closed word classes (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    category: str = RAW_WRITE
    change_verbs: list[str]  # regexes over one folded word: verbs that change or delete what exists
    create_verbs: list[str]  # verbs that add something: a write only when aimed at the store itself
    store_words: list[str]  # words naming the store (database, table, graph, register)
    clause_openers: list[str]  # words skipped before the verb ("e", "then", "agora")
    read_phrasals: list[str] = []  # a write verb + particle that reads ("add up"): never a write


class SafetyFile(BaseModel):
    """`policies/safety.yaml`."""

    model_config = ConfigDict(extra="forbid")
    categories: dict[str, Category]
    write_requests: WriteRequests


@lru_cache(maxsize=1)
def _file() -> SafetyFile:
    f: SafetyFile = load_model(POLICIES_DIR / "safety.yaml", SafetyFile)
    if f.write_requests.category not in f.categories:
        raise ValueError(f"{POLICIES_DIR / 'safety.yaml'}: field write_requests.category: "
                         f"{f.write_requests.category!r} is not a category")
    return f


@lru_cache(maxsize=1)
def _compiled() -> list[tuple[str, Category, list[re.Pattern[str]]]]:
    out = []
    for name, cat in _file().categories.items():
        try:
            pats = [re.compile(p, re.IGNORECASE | re.MULTILINE) for p in cat.patterns]
        except re.error as exc:
            raise ValueError(f"{POLICIES_DIR / 'safety.yaml'}: category {name!r}: field patterns: {exc}") from exc
        out.append((name, cat, pats))
    return out


@lru_cache(maxsize=1)
def _word_classes() -> tuple[re.Pattern[str], re.Pattern[str], frozenset[str], tuple[str, ...], frozenset[str]]:
    w = _file().write_requests
    try:
        change = re.compile(r"^(?:" + "|".join(w.change_verbs) + r")$")
        create = re.compile(r"^(?:" + "|".join(w.create_verbs) + r")$")
    except re.error as exc:
        raise ValueError(f"{POLICIES_DIR / 'safety.yaml'}: field write_requests: {exc}") from exc
    openers = {fold(p) for table in (lexicons().request,) for ps in table.values() for p in ps}
    openers |= {fold(p) for p in w.clause_openers}
    return (change, create, frozenset(fold(s) for s in w.store_words), tuple(sorted(openers, key=len, reverse=True)),
            frozenset(fold(p) for p in w.read_phrasals))


# ------------------------------------------------------------------------------ data vocabulary

@dataclass(frozen=True)
class DataVocabulary:
    """Folded phrases that name stored data in one deployment: `objects` (entities, fields and
    measures of the semantic model, tables and columns of the schema, spaced) and `names` (the
    people, teams and services the references resolve). `tables` are the schema's tables, which
    count as the store itself.
    """

    objects: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()
    tables: frozenset[str] = frozenset()


_VOCAB_LOCK = threading.Lock()
_VOCABS: dict[tuple[str, str, int], DataVocabulary] = {}


def data_vocabulary(services: Services) -> DataVocabulary:
    """The deployment's `DataVocabulary`, built once per database URL and semantic model version.
    A store that cannot be read leaves its part empty (the check then relies on ids and the
    store words).
    """
    model = services.settings.semantic_model_file()
    try:
        mtime = model.stat().st_mtime_ns
    except OSError:
        mtime = 0
    key = (services.settings.sql_url, str(model), mtime)
    with _VOCAB_LOCK:
        hit = _VOCABS.get(key)
    if hit is not None:
        return hit
    vocab = _build_vocabulary(services, model)
    with _VOCAB_LOCK:
        _VOCABS[key] = vocab
    return vocab


def _spaced(name: str) -> str:
    return fold(re.sub(r"[-_]+", " ", name))


def _build_vocabulary(services: Services, model: Path) -> DataVocabulary:
    objects: set[str] = set()
    names: set[str] = set()
    tables: set[str] = set()
    try:
        from sqlalchemy import inspect

        inspector = inspect(services.engine)
        for table in inspector.get_table_names():
            tables |= {fold(table), _spaced(table)}
            objects |= {_spaced(c["name"]) for c in inspector.get_columns(table)}
    except Exception as exc:  # noqa: BLE001 - no database: ids and store words still apply
        log.warning("safety: schema unreadable: %s", exc)
    if model.exists():
        try:
            from tools.semantic_model import load_semantic_model

            spec = load_semantic_model(model)
            for ename, ent in spec.entities.items():
                objects |= {_spaced(ename), *map(fold, ent.synonyms)}
                for group in (ent.dimensions, ent.measures, ent.segments, ent.joins):
                    for name, item in group.items():
                        objects |= {_spaced(name), *map(fold, item.synonyms)}
        except Exception as exc:  # noqa: BLE001 - a broken model is reported by its own loader
            log.warning("safety: semantic model unusable: %s", exc)
    try:
        from tools.references import load_references, reference_candidates

        for kind in load_references().kinds:
            names |= {fold(n) for c in reference_candidates(kind, services.engine) for n in c.names}
    except Exception as exc:  # noqa: BLE001
        log.warning("safety: references unreadable: %s", exc)
    short = {w for w in objects | names if len(w) < 3}
    return DataVocabulary(frozenset(objects - short), frozenset(names - short), frozenset(tables))


# ----------------------------------------------------------------------------- structural check

_CLAUSE = re.compile(r"[.;:!?\n]+|,\s+|\s+(?:e|and|then|entao|depois)\s+")


def _contains(text: str, phrases: Iterable[str]) -> bool:
    padded = f" {text} "
    return any(f" {p} " in padded for p in phrases if p)


def _strip_openers(words: list[str], openers: tuple[str, ...]) -> list[str]:
    """Drop leading fillers and request openers ("por favor", "can you", "quero") repeatedly."""
    changed = True
    while words and changed:
        changed = False
        text = " ".join(words)
        for opener in openers:
            if text == opener or text.startswith(opener + " "):
                words = words[len(opener.split()):]
                changed = True
                break
        if words and words[0] in ("to", "que", "voce", "vc", "you", "me", "pra", "para", "just", "so"):
            words, changed = words[1:], True
    return words


DataSource = DataVocabulary | Callable[[], DataVocabulary] | None


def write_request(text: str, data: DataSource = None) -> tuple[WriteKind, str] | None:
    """("store" | "data", the clause) when a clause of `text` opens with an imperative write verb
    aimed at the store or at stored data; None otherwise (see the module docstring). `data` may be
    a factory: it is called only when some clause opens with a write verb (most messages do not,
    and reading the vocabulary costs a schema and reference scan the first time).
    """
    change, create, store, openers, phrasals = _word_classes()
    found: tuple[WriteKind, str] | None = None
    for raw in _CLAUSE.split(text):
        words = _strip_openers(fold(raw).split(), openers)
        if len(words) < 2:
            continue
        verb, rest = words[0], " ".join(words[1:])
        if " ".join(words[:2]) in phrasals:
            continue
        changing = change.match(verb) is not None
        if not changing and create.match(verb) is None:
            continue
        if callable(data):
            data = data()
        data = data or DataVocabulary()
        if _contains(_common_words(raw), store | data.tables):
            return "store", raw.strip()
        if changing and found is None and (_ID.search(raw) or _contains(rest, data.objects | data.names)):
            found = ("data", raw.strip())
    return found


# ----------------------------------------------------------------------------------- screening

def _common_words(clause: str) -> str:
    """The clause's folded words less those capitalised after its first: a store word written as a
    name ("o orçamento do time de Dados", "the Data team's budget") names a team, not the store.
    """
    said = clause.split()
    return " ".join(fold(w) for i, w in enumerate(said) if i == 0 or not w[:1].isupper())


def _variants(text: str) -> list[str]:
    """The raw text (for SQL/Cypher syntax) and its folded form (accents and case removed)."""
    return [text, fold(text), " ".join(text.lower().split())]


def screen(text: str, *, pending: bool = False, data: DataSource = None,
           tool_matches: Callable[[str], bool] | None = None) -> tuple[str, str, str] | None:
    """(category, reason_pt, reason_en) for a message that must be refused, else None.

    `pending`: a transaction is in progress (a data-object clause is then a correction).
    `data`: the deployment's data vocabulary (`data_vocabulary`), or a factory of it. `tool_matches(text)`: whether a
    registered business tool matches the message clearly (`business_tool_matches`); without it a
    data-object clause is not refused, since it might be a tool request.
    """
    variants = _variants(text)
    asking = is_question(text) and not is_polite_request(text)
    for name, cat, pats in _compiled():
        if cat.questions_exempt and asking:
            continue
        for pat in pats:
            if any(pat.search(v) for v in variants):
                return name, cat.reason_pt, cat.reason_en
    if asking:
        return None
    found = write_request(text, data)
    if found is None:
        return None
    kind, _clause = found
    if kind == "data" and (pending or tool_matches is None or tool_matches(text)):
        return None
    category = _file().write_requests.category
    cat = _file().categories[category]
    return category, cat.reason_pt, cat.reason_en


def business_tool_matches(text: str, ctx: Context, services: Services) -> bool:
    """Whether a registered business tool matches `text` clearly enough to be what the user asks
    for: the registry's margin rule says clear (or denied: a clear match the user may not run,
    which the permission check refuses on its own), or close, AND the message carries the top
    tool's identifier when the tool takes one ("set INC-2080 to SEV2" is escalate_incident's;
    "set Sofia's approval limit to 5000" carries no expense id, so it is no approve_expense).
    """
    from tramita.core.extraction import kind_of
    from tramita.core.intent import carries_value

    try:
        match = services.registry.match(text, ctx.user_id, ctx.tenant)
    except Exception:  # noqa: BLE001 - registry down: do not refuse on a guess
        return True
    if match.best is None or match.decision == "none":
        return False
    spec = services.registry.get(match.best, ctx.tenant)
    takes_id = any(kind_of(p) == "id" for p in spec.properties.values())
    if takes_id:
        if carries_value(spec, text, services):
            return True
        # no record yet and the tool's own verb ("raise the severity of an incident": the id comes
        # in the next turn); a record named otherwise ("raise Bianca's limit") is not the tool's,
        # and a near match with another verb ("apaga uma despesa" near approve_expense) is not either
        return (match.decision in ("clear", "denied") and _own_verb(text, spec)
                and not names_record(text, data_vocabulary(services)))
    return match.decision in ("clear", "denied")


def names_record(text: str, data: DataVocabulary) -> bool:
    """Whether `text` names a stored record: an id, or a person, team or service the references know."""
    return _ID.search(text) is not None or _contains(" ".join(words(text)), data.names)


def _own_verb(text: str, spec: ToolSpec) -> bool:
    """Whether a change verb of `text` is a word of the tool's own description or examples."""
    change = _word_classes()[0]
    said = {w[:STEM] for w in words(text) if change.match(w)}
    return bool(said & stems(" ".join([spec.description, spec.short_description, *spec.examples])))
