"""Named graph patterns: the traversals a company asks about, declared as data; the model fills slots.

Why: a 1.5B local model writes wrong Cypher paths (direction, bounds, dialect) far more often than
it picks a name from a short list or copies a name out of a question. So the graph questions a
company actually asks are declared in a YAML file that ships with its data
(`Settings.graph_patterns_file()`), each with a description, example questions, typed parameters
and read-only Cypher for both dialects, and this module answers a question in three steps:

1. choose (`PatternEngine.choose`): e5 similarity of the question against every pattern's
   description and examples (best vector per pattern, `tools.registry_index.ToolIndex`) under the
   tool registry's margin rule (`decide`). A clear winner costs no LLM call; close candidates go
   to ONE constrained LLM choice among their names (or "none"), and so does a best match less
   than the margin below the floor; further below there is no pattern.
2. fill (`PatternEngine.fill`): typed, model-free extraction, as transactions do it: ids by
   regex, enum options and their synonyms as words, entity names through a gazetteer (the
   reference kinds of `policies/references.yaml`, or a node label of the graph), numbers next to
   a unit word within bounds, ISO weeks written out, relative ("next week") or as a date. Only
   required parameters still missing go to the LLM, as one small JSON object under a schema built
   from those parameters, and every value it returns must appear in the question and then pass
   the same typed resolution. An entity or id the question names that no parameter took means the
   question asks something narrower than the pattern, so the pattern is not used.
3. run: the dialect's Cypher through `GraphTool.query` (guard, read-only, row cap) with the values
   bound as query parameters, never pasted into the text. A question that asks how many of the
   pattern's answers there are ("quantas pessoas …", one of its `counts` nouns after a count word)
   runs the same traversal rewritten to count them (`counting_query`); any other aggregate is the
   fallback's.

Every failure is a `PatternAttempt` with a reason; the graph backend then falls back to guarded
text-to-Cypher with repair. Nothing here knows a label, a property or a word of one company: all of
that is in the patterns file.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from tools.cypher_guard import UnsafeCypherError, tokenize, validate_cypher
from tools.llm import LLMError, Usage, structured_call
from tools.references import check_identifier, load_references
from tramita.base.policyfile import load_model
from tramita.base.text import MONTHS, asked_after_opener, fold, phrase_starts, span_of, split_at_question, tokens

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from sqlalchemy import Engine

    from tools.graph_tool import GraphTool
    from tools.registry_index import MatchResult, ToolIndex

__all__ = [
    "Choice", "GraphPattern", "PatternAttempt", "PatternEngine", "PatternFile", "load_patterns",
]

log = logging.getLogger("tramita.graph_patterns")

NAME_RE = r"^[a-z][a-z0-9_]*$"
CHOOSE_COMPONENT = "router"  # a constrained choice among a few names, like routing to a tool
FILL_COMPONENT = "transaction_parameter_extraction"  # the same small JSON extraction transactions use
GAZETTEER_ROW_CAP = 20_000  # node names read for a graph-backed entity kind


# =========================================================================== the file


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _ParamBase(_Strict):
    name: str = Field(pattern=NAME_RE, description="the Cypher parameter name ($name)")
    description: str = Field(min_length=3, description="what the value is; the fill prompt shows it")


class IdParam(_ParamBase):
    """A canonical id written in the question (INC-2041): found by regex, bound as a string."""

    kind: Literal["id"]
    pattern: str = Field(description="regular expression of the canonical id, e.g. ^INC-\\d{4}$")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from exc
        return value

    @property
    def source(self) -> str:
        """Mentions of this id shape, across all patterns, share one source."""
        return f"id:{self.pattern}"

    def search(self) -> re.Pattern[str]:
        """The id anywhere in a text, not glued to other word characters."""
        return re.compile(rf"(?<![\w-]){self.pattern.strip('^$')}(?![\w-])", re.IGNORECASE)


class EnumParam(_ParamBase):
    """One or more options; bound as a LIST (`x IN $name`) so that 'both' needs no second query."""

    kind: Literal["enum"]
    options: list[str] = Field(min_length=1)
    synonyms: dict[str, list[str]] = Field(default_factory=dict, description="option -> words that name it")
    default: list[str] | None = Field(None, description="bound when the question names no option; null: required")
    values: dict[str, str | int] = Field(default_factory=dict, description=(
        "option -> the value bound in the query when it is not the option's name (tier1 -> 1: a "
        "number cannot be an option's word, '1' would match any number of the question)"))

    @model_validator(mode="after")
    def _known_options(self) -> EnumParam:
        unknown = [o for o in [*self.synonyms, *(self.default or []), *self.values] if o not in self.options]
        if unknown:
            raise ValueError(f"synonyms/default/values name options that are not in options {self.options}: {unknown}")
        return self

    def bound(self, options: list[str]) -> list[str | int]:
        """The query values of the chosen options (`values`, else the options themselves)."""
        return [self.values.get(o, o) for o in options]


class GraphLookup(_Strict):
    """Entities read from the graph itself: nodes of `label`, id `key`, human names in `names`."""

    label: str
    key: str
    names: list[str] = Field(default_factory=list)

    @field_validator("label", "key")
    @classmethod
    def _identifier(cls, value: str) -> str:
        return check_identifier(value)

    @field_validator("names")
    @classmethod
    def _identifiers(cls, value: list[str]) -> list[str]:
        return [check_identifier(v) for v in value]


class EntityParam(_ParamBase):
    """A thing the question names (a person, a team...), resolved to its key through a gazetteer."""

    kind: Literal["entity"]
    resolve: str | None = Field(None, description="a reference kind of policies/references.yaml")
    titles: list[str] = Field(default_factory=list, description=(
        "with `resolve`: columns of the kind's table whose value names a row when exactly one row holds "
        "it (a job title: 'the CTO'), unless it is also a name of another entity kind"))
    graph: GraphLookup | None = Field(None, description="or: the graph nodes whose names resolve it")

    @model_validator(mode="after")
    def _one_source(self) -> EntityParam:
        if (self.resolve is None) == (self.graph is None):
            raise ValueError("give exactly one of `resolve` (a reference kind) or `graph` (label, key, names)")
        if self.titles and self.resolve is None:
            raise ValueError("titles: only an entity resolved through a reference kind (`resolve`) has title columns")
        self.titles = [check_identifier(t) for t in self.titles]
        if self.resolve is not None:
            kinds = load_references().kinds
            if self.resolve not in kinds:
                raise ValueError(f"resolve: unknown reference kind {self.resolve!r}; "
                                 f"policies/references.yaml defines {', '.join(sorted(kinds))}")
        return self

    @property
    def source(self) -> str:
        """The gazetteer this entity is looked up in (one per reference kind or node label)."""
        if self.graph is not None:
            return f"graph:{self.graph.label}.{self.graph.key}"
        return f"ref:{self.resolve}"


class IntParam(_ParamBase):
    """A bounded whole number (a depth) taken only when a unit word follows it ('3 levels')."""

    kind: Literal["int"]
    minimum: int
    maximum: int
    default: int | None = Field(None, description="bound when the question gives no number; null: required")
    units: list[str] = Field(min_length=1, description="words that must follow the number")
    exact_of: str | None = Field(None, description=(
        "a lower bound: the value of that other int parameter when the question says one of the "
        "vocabulary's `exact_words` right before its number ('exactly two levels'), else its own "
        "`word_values` ('the manager's manager' is level two and only that level), else `default`"))
    word_values: dict[int, list[str]] = Field(default_factory=dict, description=(
        "value -> words that give it with no number ('directly' is one hop); a number with a unit wins, "
        "and of two values said ('directly or indirectly') the largest, the wider bound, is taken"))

    @model_validator(mode="after")
    def _bounds(self) -> IntParam:
        if self.minimum > self.maximum:
            raise ValueError(f"minimum {self.minimum} is above maximum {self.maximum}")
        if self.default is not None and not self.minimum <= self.default <= self.maximum:
            raise ValueError(f"default {self.default} is outside {self.minimum}..{self.maximum}")
        outside = sorted(v for v in self.word_values if not self.minimum <= v <= self.maximum)
        if outside:
            raise ValueError(f"word_values: {outside} outside {self.minimum}..{self.maximum}")
        return self

    def said_value(self, text: str) -> int | None:
        """The largest of the `word_values` whose words `text` says, or None."""
        said = [v for v, words in self.word_values.items()
                if (regex := _word_re(words)) is not None and regex.search(fold(text))]
        return max(said) if said else None


class WeekParam(_ParamBase):
    """An ISO week 'YYYY-Www': written out, relative to today, or the week of a date."""

    kind: Literal["iso_week"]
    default_offset: int | None = Field(None, description="weeks from today's week when none is named; null: required")
    many: bool = Field(False, description=(
        "bind a LIST of weeks (write `x IN $name`): a named week is a list of one, a named month its ISO "
        "weeks ('who is on call in May?')"))
    every_when_unnamed: bool = Field(False, description=(
        "with `many` and no `default_offset`: no week named binds an EMPTY list, which the Cypher must "
        "read as every week (write `size($name) = 0 OR x IN $name`)"))

    @model_validator(mode="after")
    def _unnamed(self) -> WeekParam:
        # why: "when is X on call?" asks for every week and "is X on call next week?" for one, the
        # same traversal; an empty list is the only binding that leaves the week open in both dialects
        if self.every_when_unnamed and (not self.many or self.default_offset is not None):
            raise ValueError("every_when_unnamed needs many: true and no default_offset")
        return self


Param = Annotated[IdParam | EnumParam | EntityParam | IntParam | WeekParam, Field(discriminator="kind")]


class Examples(_Strict):
    pt: list[str] = Field(min_length=1)
    en: list[str] = Field(min_length=1)


class DialectCypher(_Strict):
    """The same traversal for each Cypher dialect GraphTool speaks."""

    ladybug: str = Field(description="LadybugDB (embedded, Kuzu openCypher)")
    neo4j: str = Field(description="Neo4j 5 over Bolt")

    def for_backend(self, backend: str) -> str:
        """The text for a GraphTool backend ('ladybug' or 'bolt')."""
        return self.ladybug if backend == "ladybug" else self.neo4j


def _parameters_in(cypher: str) -> set[str]:
    text = unicodedata.normalize("NFKC", cypher)
    return {t.text[1:].strip("`") for t in tokenize(text) if t.kind == "param"}


class WordOrder(_Strict):
    """Where the question's entity stands relative to a verb: what embeddings cannot see. "Which
    services depend on X" and "which services does X depend on" embed alike, yet ask opposite
    directions. Phrases are folded words; an entity is any mention the gazetteer or an id finds.
    """

    entity_after: list[str] = Field(default_factory=list, description="the entity comes right after one of these")
    entity_before: list[str] = Field(default_factory=list, description="the entity comes before one of these")


class DatabaseForm(_Strict):
    """A `mirrored` pattern's relation as a query over the semantic model: software builds the
    query object from it and the pattern's filled parameters, so the database answers the
    relation with no LLM call and no join written by a model.
    """

    columns: dict[str, str] = Field(description=(
        "each column the pattern returns -> the semantic field (entity.member or join.member) that holds it; "
        "a detail column the database does not hold may be left out"))
    keys: dict[str, str] = Field(default_factory=dict, description=(
        "each entity or id parameter -> the semantic field equal to its resolved key"))
    when: dict[str, list[str]] = Field(default_factory=dict, description=(
        "enum parameter -> the options the database holds: the form answers only when the parameter's value "
        "is among them (an incident's primary service is a column; its downstream impact is the graph's)"))


class GraphPattern(_Strict):
    """One named traversal: what it answers, how people ask it, its slots and its Cypher."""

    name: str = Field(pattern=NAME_RE)
    description: str = Field(min_length=10)
    examples: Examples
    word_order: WordOrder | None = Field(None, description=(
        "when a pattern's declared word order fits the question, the patterns whose order does not fit, or "
        "that declare none, leave the candidates"))
    parameters: list[Param] = Field(default_factory=list)
    ruled_out_by: list[str] = Field(default_factory=list, description=(
        "words (folded, whole) that rule the pattern out whatever the similarity: 'indirectly' asks for "
        "more than the direct reports"))
    needs_one_of: list[str] = Field(default_factory=list, description=(
        "words (folded, whole) one of which the question must say, whatever the similarity: a pattern "
        "about an absence needs a word of absence ('nobody', 'without'), which embeddings barely weigh"))
    cypher: DialectCypher
    details: dict[str, list[str]] = Field(default_factory=dict, description=(
        "returned column -> the words that ask for it: a column that only adds to the answer, shown "
        "when the question uses one of its words (the role of each person, the hops of each service)"))
    keys: list[str] = Field(default_factory=list, description=(
        "returned columns that are each answer's key (a person's id): returned only when a later source "
        "of the same turn reads the rows, which then bounds its query by the key, not by a name two "
        "records may share"))
    counts: list[str] = Field(default_factory=list, description=(
        "nouns that name one answer of the pattern (people, services): 'how many <noun>' is answered by "
        "counting the pattern's distinct answers"))
    mirrored: DatabaseForm | None = Field(None, description=(
        "every relation the pattern reads is also a column or a link table of the SQL store, one join "
        "away, written here as semantic fields: the planner leaves such questions to the database (the "
        "graph is planned for what only it holds and for relations of any depth), and the pattern still "
        "answers when the graph is planned"))

    @model_validator(mode="after")
    def _consistent(self) -> GraphPattern:
        names = [p.name for p in self.parameters]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"parameters: duplicate names {dupes}")
        ints = {p.name: p for p in self.parameters if isinstance(p, IntParam)}
        for p in ints.values():
            if p.exact_of is not None and (p.exact_of not in ints or ints[p.exact_of].exact_of is not None
                                           or p.default is None):
                raise ValueError(f"parameters.{p.name}.exact_of: {p.exact_of!r} must be another int parameter of the "
                                 "pattern (itself not a lower bound), and the lower bound needs a default")
        unknown = sorted(set(self.details) - set(self.returns()))
        if unknown:
            raise ValueError(f"details: {unknown} are not columns the pattern returns ({self.returns()})")
        if self.details and not set(self.returns()) - set(self.details):
            raise ValueError("details: at least one returned column must be the answer itself")
        odd = sorted(set(self.keys) - set(self.returns()) | set(self.keys) & (set(self.details) | self.ordered_by()))
        if odd or (self.keys and not set(self.returns()) - set(self.keys) - set(self.details)):
            raise ValueError(f"keys: {odd or self.keys} must be returned columns that are neither details nor "
                             f"ordered by, beside a column that is the answer itself ({self.returns()})")
        if self.counts and counting_query(self.cypher.ladybug, self.answer_column() or "") is None:
            raise ValueError("counts: the pattern's RETURN cannot be rewritten to count its answers "
                             "(a SKIP or LIMIT, or no returned column that is not a detail)")
        if self.mirrored is not None:
            form, returned = self.mirrored, set(self.returns())
            enums = {p.name: p for p in self.parameters if isinstance(p, EnumParam)}
            if set(form.columns) - returned or returned - set(self.details) - set(self.keys) - set(form.columns):
                raise ValueError(f"mirrored: columns must be returned columns {self.returns()}, every one that is "
                                 f"not a detail among them")
            if set(form.keys) | set(form.when) != set(names) or set(form.when) - set(enums):
                raise ValueError(f"mirrored: keys and when must name exactly the parameters {names} (when: the "
                                 "enum ones)")
            for name, options in form.when.items():
                if set(options) - set(enums[name].options):
                    raise ValueError(f"mirrored.when.{name}: {sorted(set(options) - set(enums[name].options))} "
                                     f"are not options of the parameter ({enums[name].options})")
        if set(self.details) & self.ordered_by():
            raise ValueError(f"details: {sorted(set(self.details) & self.ordered_by())} order the answer (the levels "
                             "of a chain): a column the pattern orders by is part of the answer, not a detail")
        needed = _word_re(self.needs_one_of)
        missing = [e for e in [*self.examples.pt, *self.examples.en] if needed is not None and not needed.search(fold(e))]
        if missing:
            raise ValueError(f"needs_one_of: examples say none of these words, so the pattern could never match "
                             f"them: {missing}")
        for dialect in ("ladybug", "neo4j"):
            text = getattr(self.cypher, dialect)
            try:
                validate_cypher(text)
            except UnsafeCypherError as exc:
                raise ValueError(f"cypher.{dialect}: refused by the Cypher guard: {exc}") from exc
            used = _parameters_in(text)
            if used - set(names):
                raise ValueError(f"cypher.{dialect}: uses undeclared parameters {sorted(used - set(names))}")
            if set(names) - used:
                raise ValueError(f"cypher.{dialect}: does not use parameters {sorted(set(names) - used)}")
        return self

    def about(self) -> str:
        """The first sentence of the description: what the rows are, for synthesis to read them by."""
        first = " ".join(self.description.split()).split(": ", 1)[0].split(". ", 1)[0]
        if len(first) <= 160:
            return first
        # cut at the last clause that fits, not inside a word or a parenthesis
        cut = first[:160]
        at = max(cut.rfind(" ("), cut.rfind(", "), cut.rfind("; "))
        return cut[:at] if at > 40 else cut.rsplit(" ", 1)[0]

    def returns(self) -> list[str]:
        """The column names of the final RETURN (its `AS` aliases), i.e. what the pattern answers with."""
        tail = re.split(r"\bRETURN\b", self.cypher.ladybug, flags=re.IGNORECASE)[-1]
        tail = re.split(r"\bORDER\s+BY\b|\bLIMIT\b", tail, flags=re.IGNORECASE)[0]
        return re.findall(r"\bAS\s+(\w+)", tail, flags=re.IGNORECASE)

    def answer_column(self) -> str | None:
        """The first returned column that is neither a detail nor a key: what "how many" counts."""
        return next((c for c in self.returns() if c not in self.details and c not in self.keys), None)

    def ordered_by(self) -> set[str]:
        """The columns the final ORDER BY sorts on (their aliases, as `returns` names them)."""
        tail = re.split(r"\bRETURN\b", self.cypher.ladybug, flags=re.IGNORECASE)[-1]
        order = re.split(r"\bORDER\s+BY\b", tail, flags=re.IGNORECASE)
        if len(order) < 2:
            return set()
        keys = re.split(r"\b(?:SKIP|LIMIT)\b", order[1], flags=re.IGNORECASE)[0]
        return {k.split()[0] for k in keys.split(",") if k.strip()}

    def embedding_texts(self) -> list[str]:
        """The texts a question is compared with: the description and every example."""
        return [self.description, *self.examples.pt, *self.examples.en]


class Matching(_Strict):
    """The margin rule's knobs (see `tools.registry_index.decide`)."""

    floor: float = Field(ge=0.0, le=1.0)
    margin: float = Field(ge=0.0, le=1.0)
    candidates: int = Field(3, ge=2, le=8)


class Vocabulary(_Strict):
    """Words, per language, that the typed extraction reads (kept out of the code)."""

    week_offsets: dict[int, list[str]] = Field(default_factory=dict, description="weeks from today -> words")
    month_offsets: dict[int, list[str]] = Field(default_factory=dict, description="months from today's -> words")
    month_words: list[str] = Field(default_factory=list, description=(
        "words right before a month's name that make it the month, not another word ('in May', 'em maio'; "
        "'who may' is no month); a name followed by a year is a month anyway"))
    number_words: dict[int, list[str]] = Field(default_factory=dict, description="number -> words")
    aggregate_words: list[str] = Field(default_factory=list, description=(
        "words of a question that asks for a count, a total or a comparison: patterns return rows, "
        "so such a question goes to the fallback, unless it only counts a pattern's answers"))
    inclusive_words: list[str] = Field(default_factory=list, description=(
        "words that, up to three words before an enum option's word, add the option to the default "
        "instead of narrowing to it ('contando impacto indireto', 'including indirect impact')"))
    exact_words: list[str] = Field(default_factory=list, description=(
        "words right before a number that make it exact, not an upper bound ('exatamente dois níveis'): "
        "an int parameter's `exact_of` lower bound then takes the same number"))
    count_words: list[str] = Field(default_factory=list, description=(
        "the aggregate words that ask how many: followed by one of a pattern's `counts` nouns, the "
        "pattern's answers are counted"))
    relative_words: list[str] = Field(default_factory=list, description=(
        "words that open a relative clause ('que', 'that', 'whose'): when a later source aggregates over "
        "the pattern's rows and the whole question matches no pattern, the clause that states the "
        "relation is matched alone"))
    label_words: dict[str, list[str]] = Field(default_factory=dict, description=(
        "node label -> the words that name its records ('projetos', 'projects'): a question that asks for "
        "them right after a question word ('which projects …') is not answered by a fallback query that "
        "reads none of them"))

    @field_validator("label_words")
    @classmethod
    def _labels(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for label, said in value.items():
            if not re.fullmatch(r"[A-Za-z_]\w*", label) or not [w for w in said if fold(w)]:
                raise ValueError(f"label_words: {label!r} must be a node label with at least one word")
        return value


class PatternFile(_Strict):
    """`graph_patterns.yaml`."""

    version: Literal[1]
    matching: Matching
    vocabulary: Vocabulary = Field(default_factory=Vocabulary)
    patterns: list[GraphPattern] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> PatternFile:
        names = [p.name for p in self.patterns]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"patterns: duplicate names {dupes}")
        return self

    def pattern(self, name: str) -> GraphPattern:
        """The pattern called `name` (the index and the choice only ever hold declared names)."""
        return next(p for p in self.patterns if p.name == name)


def load_patterns(path: Path) -> PatternFile:
    """Read and check a patterns file; a bad one raises PolicyError naming the file and the field."""
    loaded: PatternFile = load_model(path, PatternFile)
    return loaded


# =========================================================================== gazetteer and mentions


@dataclass(frozen=True)
class Mention:
    """An entity or id the question names: which gazetteer (or id pattern), its key, the text."""

    source: str
    value: str
    surface: str
    title: bool = False  # named by a unique title ("the CTO"), not by a name or id


Gazetteer = dict[str, list[tuple[str, str]]]  # source -> (folded surface form, key), longest first
TITLE_MARK = "#title"  # a gazetteer key `source + TITLE_MARK` holds the source's unique titles


def _spaced(ident: str) -> str:
    return re.sub(r"[-_]+", " ", ident)


def build_gazetteer(patterns: PatternFile, engine: Engine | None, tool: GraphTool | None) -> Gazetteer:
    """Surface forms of every entity source the file uses: reference kinds from SQL (as the
    transactions' gazetteer reads them), graph-backed kinds from the graph. A source that cannot be
    read stays empty: its parameters then go to the LLM and resolve or fail there.
    """
    from tools.references import reference_candidates, unique_titles

    out: Gazetteer = {}
    titled: dict[str, list[tuple[str, str]]] = {}
    columns: dict[str, list[str]] = {}
    for param in _entity_params(patterns):
        columns.setdefault(param.source, [])
        columns[param.source] += [t for t in param.titles if t not in columns[param.source]]
    for param in _entity_params(patterns):
        if param.source in out:
            continue
        pairs: list[tuple[str, str]] = []
        try:
            if param.graph is not None and tool is not None:
                for key, names in _graph_candidates(param.graph, tool):
                    pairs += [(fold(n), key) for n in names]
            elif param.resolve is not None and engine is not None:
                for cand in reference_candidates(param.resolve, engine):
                    pairs += [(fold(n), cand.id) for n in cand.names]
                if columns[param.source]:
                    titled[param.source] = [(fold(v), k) for k, v in
                                            unique_titles(param.resolve, columns[param.source], engine)]
        except Exception as exc:  # noqa: BLE001 - a missing store only disables deterministic matching
            log.warning("graph patterns: gazetteer %s unavailable: %s", param.source, exc)
            pairs = []
        out[param.source] = pairs
    surfaces = {source: {s for s, _ in forms} for source, forms in out.items()}
    for source, forms in titled.items():
        # a title that is also another kind's name ("SRE": a team and one person's role) names neither
        others: set[str] = set().union(*(n for s, n in surfaces.items() if s != source))
        out[source + TITLE_MARK] = [(s, k) for s, k in forms if s not in others and s not in surfaces[source]]
    return {source: sorted(dict.fromkeys(p for p in pairs if p[0]), key=lambda p: len(p[0]), reverse=True)
            for source, pairs in out.items()}


def _graph_candidates(lookup: GraphLookup, tool: GraphTool) -> list[tuple[str, list[str]]]:
    """(key, [key, names..., key with -/_ as spaces]) for every node of the label."""
    from tools.graph_tool import GraphTool

    reader = GraphTool(tool.url, row_cap=GAZETTEER_ROW_CAP, timeout_s=tool.timeout_s, sample_dir=tool.sample_dir)
    columns = ", ".join([f"n.{lookup.key} AS k", *[f"n.{c} AS n{i}" for i, c in enumerate(lookup.names)]])
    rows = reader.query(f"MATCH (n:{lookup.label}) RETURN {columns}")
    out = []
    for row in rows:
        key = str(row["k"])
        labels = [str(row[f"n{i}"]) for i in range(len(lookup.names)) if row.get(f"n{i}") not in (None, "")]
        out.append((key, list(dict.fromkeys([key, *labels, _spaced(key)]))))
    return out


def _entity_params(patterns: PatternFile) -> list[EntityParam]:
    return [p for pat in patterns.patterns for p in pat.parameters if isinstance(p, EntityParam)]


def _id_params(patterns: PatternFile) -> list[IdParam]:
    return [p for pat in patterns.patterns for p in pat.parameters if isinstance(p, IdParam)]


def find_mentions(question: str, gazetteer: Gazetteer, id_params: Iterable[IdParam]) -> list[Mention]:
    """Every entity (longest surface first, each stretch of text used once) and id in the question."""
    by_surface: dict[str, list[tuple[str, str]]] = {}
    for source, pairs in gazetteer.items():
        for surface, key in pairs:
            if len(surface) >= 2:
                by_surface.setdefault(surface, []).append((source, key))
    folded = f" {fold(question)} "
    found: list[Mention] = []
    for surface in sorted(by_surface, key=len, reverse=True):
        if f" {surface} " in folded:
            found += [Mention(source.removesuffix(TITLE_MARK), key, surface, source.endswith(TITLE_MARK))
                      for source, key in dict.fromkeys(by_surface[surface])]
            folded = folded.replace(f" {surface} ", " ")
    for param in id_params:
        for match in param.search().finditer(question):
            found.append(Mention(param.source, match.group(0).upper(), fold(match.group(0))))
    # a title beside a name of the same kind is where the name leads ("the chain of X up to the
    # CEO"), not a second person to ask about
    named = {m.source for m in found if not m.title}
    return list(dict.fromkeys(m for m in found if not (m.title and m.source in named)))


def unsaid_values(query: str, question: str, gazetteer: Gazetteer, id_params: Iterable[IdParam]) -> list[str]:
    """The string literals of a generated Cypher `query` that name an entity the gazetteer knows, or
    an id of a declared shape, which `question` does not name (by any of its surface forms).

    Why: the fallback model copies the schema's example values; a question about who takes more
    than one on-call week was answered for one service it never named, and the user could not
    tell. A value the user did not say is no condition of the answer (the span rule of slot filling).
    """
    params = list(id_params)
    named = {m.value for m in find_mentions(question, gazetteer, params)}
    words = f" {fold(question)} "
    keys: dict[str, set[str]] = {}
    for source, pairs in gazetteer.items():
        if not source.endswith(TITLE_MARK):  # a title is a role's wording, not a record's value
            for surface, key in pairs:
                keys.setdefault(surface, set()).add(key)
    shapes = [re.compile(p.pattern, re.IGNORECASE) for p in params]
    out: list[str] = []
    for token in tokenize(query):
        if token.kind != "string":
            continue
        value = token.text[1:-1]
        folded = fold(value)
        if not folded or f" {folded} " in words:
            continue
        entity = keys.get(folded, set())
        if (entity and not entity & named) or (not entity and any(r.match(value) for r in shapes)
                                                and value.upper() not in named):
            out.append(value)
    return list(dict.fromkeys(out))


def missed_labels(query: str, question: str, label_words: dict[str, list[str]],
                  rels: Iterable[tuple[str, str, str]]) -> list[str]:
    """The node labels `question` asks for (one of their `label_words` within two words after a
    question opener) that a generated Cypher `query` reads nowhere: no node written with the label
    and no relationship type that ends at it (`rels`: type, source label, target label).

    Why: the fallback answered "which projects does a team own?", which the graph holds no relation
    for, with the team's services; an answer about other records reads as right and is not.
    """
    asked = [label for label, said in label_words.items() if asked_after_opener(question, [fold(w) for w in said])]
    if not asked:
        return []
    try:
        names = {t.text.strip("`") for t in tokenize(query) if t.kind in ("word", "quoted")}
    except UnsafeCypherError:  # the guard refuses it anyway
        return []
    read = names | {end for rtype, src, dst in rels if rtype in names for end in (src, dst)}
    return [label for label in asked if label not in read]


def _placeholder(source: str) -> str:
    """The word an entity is masked with: its reference kind, or its node label, in lower case."""
    return source.removesuffix(TITLE_MARK).split(":", 1)[1].split(".", 1)[0].lower()


_ISO_WEEK = re.compile(r"(?<![\w-])\d{4}-w\d{1,2}(?![\w-])")


def mask_entities(text: str, gazetteer: Gazetteer | None) -> str:
    """The folded text with every entity the gazetteer knows replaced by its kind ('employee'), and
    every ISO week by 'week'. Why the weeks: "who is on call for X in 2026-W21?" scored below the
    patterns' floor, its week's digits pulling it away from "… this week"; a week is a value, as a
    name is.
    """
    if not gazetteer:
        return text
    folded = f" {fold(text)} "
    for mention in find_mentions(text, gazetteer, []):
        folded = folded.replace(f" {mention.surface} ", f" {_placeholder(mention.source)} ")
    return _ISO_WEEK.sub("week", folded).strip()


def _signature(gazetteer: Gazetteer | None) -> str:
    if not gazetteer:
        return "plain"
    return str(hash(tuple((source, tuple(pairs)) for source, pairs in sorted(gazetteer.items()))))


# =========================================================================== typed extraction


def _alternation(words: Iterable[str]) -> str:
    """The folded `words` as one regex alternation, longest first ("" for none)."""
    return "|".join(re.escape(f) for f in sorted({fold(w) for w in words if fold(w)}, key=len, reverse=True))


def _word_re(words: Iterable[str]) -> re.Pattern[str] | None:
    forms = _alternation(words)
    return re.compile(r"(?<![\w-])(" + forms + r")(?![\w-])") if forms else None


def _units_of(pattern: GraphPattern, name: str) -> list[str]:
    """The unit words of the pattern's int parameter `name` (none for another kind)."""
    param = next((p for p in pattern.parameters if p.name == name), None)
    return list(param.units) if isinstance(param, IntParam) else []


def _numbers(text: str, vocab: Vocabulary, units: list[str] | None = None, *,
             before: list[str] | None = None) -> list[int]:
    """Numbers written as digits or words; with `units`, only those a unit word follows; with
    `before`, only those right after one of those words.
    """
    words = {fold(w): n for n, ws in vocab.number_words.items() for w in ws}
    alternatives = [r"\d{1,3}", *[re.escape(w) for w in sorted(words, key=len, reverse=True)]]
    number = "(" + "|".join(alternatives) + ")"
    if before is not None:
        lead = "|".join(re.escape(fold(w)) for w in sorted(before, key=len, reverse=True) if fold(w))
        if not lead:
            return []
        number = rf"(?<![\w-])(?:{lead})\s+" + number
    if units:
        unit = "|".join(re.escape(fold(u)) for u in sorted(units, key=len, reverse=True))
        regex = re.compile(rf"(?<![\w-]){number}[\s-]+(?:\w+\s+)?(?:{unit})(?![\w-])")
    else:
        regex = re.compile(rf"(?<![\w-]){number}(?![\w-])")
    out = []
    for match in regex.finditer(fold(text)):
        raw = match.group(1)
        out.append(int(raw) if raw.isdigit() else words[raw])
    return list(dict.fromkeys(out))


def _iso_week(day: date) -> str:
    year, week, _ = day.isocalendar()
    return f"{year}-W{week:02d}"


def _weeks(text: str, today: date, vocab: Vocabulary, *, raw: str) -> list[str]:
    """ISO weeks a text names: '2026-W21', 'W21', relative words, else the week of a date found
    in `raw` (the unfolded text, whose '13/05' folding would break), else the weeks of the months
    it names (`_month_weeks`).
    """
    from tools.business.resolvers import parse_date

    folded = fold(text)
    found = [f"{y}-W{int(w):02d}" for y, w in re.findall(r"(?<!\d)(20\d\d)\s*-?\s*w(\d{1,2})(?!\d)", folded)]
    rest = re.sub(r"(?<!\d)(20\d\d)\s*-?\s*w(\d{1,2})(?!\d)", " ", folded)
    found += [f"{today.isocalendar()[0]}-W{int(w):02d}" for w in re.findall(r"(?<![\w-])w(\d{1,2})(?![\w-])", rest)]
    for offset, words in sorted(vocab.week_offsets.items()):
        regex = _word_re(words)
        if regex is not None and regex.search(rest):
            found.append(_iso_week(today + timedelta(weeks=offset)))
    if not found:
        day = parse_date(raw, today)
        if day:
            found.append(_iso_week(date.fromisoformat(day)))
    if not found:
        found = _month_weeks(rest, today, vocab)
    return list(dict.fromkeys(found))


def _month_weeks(folded: str, today: date, vocab: Vocabulary) -> list[str]:
    """The ISO weeks of the months `folded` names: a month's name followed by a year, or after one
    of `vocab.month_words` (this year's), or a relative month (`vocab.month_offsets`). A week
    belongs to the month of its Thursday, the ISO 8601 rule, so each week is in one month only.
    """
    names = "|".join(MONTHS)
    months = [(int(y), MONTHS[m]) for m, y in re.findall(rf"\b({names})\s+(?:de\s+|of\s+)?(20\d\d)\b", folded)]
    lead = _alternation(vocab.month_words)
    if lead:
        for m in re.finditer(rf"(?<![\w-])(?:{lead})\s+({names})\b(?!\s+(?:de\s+|of\s+)?\d)", folded):
            months.append((today.year, MONTHS[m.group(1)]))
    for offset, words in sorted(vocab.month_offsets.items()):
        regex = _word_re(words)
        if regex is not None and regex.search(folded):
            index = today.year * 12 + today.month - 1 + offset
            months.append((index // 12, index % 12 + 1))
    weeks: list[str] = []
    for year, month in dict.fromkeys(months):
        day = date(year, month, 1)
        day += timedelta(days=(3 - day.weekday()) % 7)  # the month's first Thursday
        while day.month == month:
            weeks.append(_iso_week(day))
            day += timedelta(weeks=1)
    return weeks


def _enum_options(param: EnumParam, text: str) -> list[str]:
    folded = fold(text)
    hits: set[str] = set()
    for option in param.options:
        regex = _word_re([option, *param.synonyms.get(option, [])])
        if regex is not None and regex.search(folded):
            hits.add(option)
    return [o for o in param.options if o in hits]


def _only_included(param: EnumParam, text: str, inclusive: list[str]) -> bool:
    """Whether every word of the text that names one of the param's options has an inclusive word
    (`Vocabulary.inclusive_words`) at most three words before it: "counting indirect impact too"
    widens the default to the indirect impact, where "indirect impact only" narrows to it.
    """
    found = tokens(text)
    cues = [c for c in inclusive if fold(c)]
    named = False
    for option in param.options:
        for word in [option, *param.synonyms.get(option, [])]:
            for i in phrase_starts(found, word):
                named = True
                if not any(phrase_starts(found[max(0, i - 3):i], c) for c in cues):
                    return False
    return named


@dataclass
class Filled:
    """The outcome of filling one pattern: the bound values, or why it cannot be used."""

    values: dict[str, Any] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)  # still unknown: the LLM's job
    problem: str | None = None
    llm_values: dict[str, Any] = field(default_factory=dict)


# =========================================================================== the engine


@dataclass
class Choice:
    """Which pattern the question gets, and how that was decided."""

    name: str | None
    decision: str  # clear | close | none
    scores: list[tuple[str, float]] = field(default_factory=list)
    by_llm: bool = False
    note: str = ""  # why an LLM choice gave no pattern, when it failed

    def trace(self) -> dict[str, Any]:
        """The choice as the backend's context records it (JSON-ready, scores rounded)."""
        return {"decision": self.decision, "chosen": self.name, "by_llm": self.by_llm,
                "scores": [[n, round(s, 4)] for n, s in self.scores]}


@dataclass
class PatternAttempt:
    """What the pattern path did: a run with rows, or the reason the caller must fall back."""

    choice: Choice
    pattern: str | None = None
    cypher: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    ok: bool = False
    reason: str = ""
    llm_filled: list[str] = field(default_factory=list)
    echoed: dict[str, Any] = field(default_factory=dict)  # columns left out as the one value the question gave
    clause: str = ""  # the relative clause the pattern answered, when the whole question matched none
    named: dict[str, str] = field(default_factory=dict)  # parameter -> the record's name as the question wrote it


def named_parameters(question: str, params: dict[str, Any], gazetteer: Gazetteer) -> dict[str, str]:
    """Each parameter bound to a record the question names, with that name as the question wrote
    it ("manager": "André Figueiredo"); ids and values the question does not spell are left out.

    Why: the rows of "how many people report to X" name the people only; without X beside them the
    model wrote that X reports to them.
    """
    out: dict[str, str] = {}
    for name, value in params.items():
        keys = _keys_of(value) if value not in (None, [], "") else set()
        spelt = [span_of(question, surface) for forms in gazetteer.values() for surface, key in forms if key in keys]
        said = list(dict.fromkeys(s for s in spelt if s))
        if said:
            out[name] = ", ".join(said)
    return out


def described(about: str, named: dict[str, str] | None = None, echoed: dict[str, Any] | None = None) -> str:
    """A pattern's line on what its rows are (`GraphPattern.about`) with the records the question
    named for its parameters ("manager: X") and the values every row held ("every row: week W");
    the line as it is when there are none.
    """
    if not about or not (named or echoed):
        return about
    subjects = ", ".join(f"{param}: {text}" for param, text in (named or {}).items())
    given = ", ".join(f"{column} {value}" for column, value in (echoed or {}).items())
    return about.rstrip(".") + (f"; {subjects}" if subjects else "") + (f"; every row: {given}" if given else "")


def _keys_of(value: Any) -> set[str]:
    """A filled parameter's keys as text: one value, or each of a list's."""
    return {str(v) for v in value} if isinstance(value, list | tuple) else {str(value)}


@dataclass(frozen=True)
class MirroredQuery:
    """A mirrored pattern's relation as a semantic query object, and the words its parameters took."""

    pattern: str
    query: dict[str, Any]
    surfaces: tuple[str, ...]  # folded: what the question named for the parameters
    about: str = ""  # what the rows are (`GraphPattern.about`)


_engines: dict[tuple[str, int, int], PatternEngine] = {}
_gazetteers: dict[tuple[int, str, int], Gazetteer] = {}
_lock = threading.Lock()


class PatternEngine:
    """Choose, fill and run named graph patterns for one patterns file."""

    def __init__(self, patterns: PatternFile, *, embeddings: Embeddings | Callable[[], Embeddings] | None = None) -> None:
        """`embeddings` is the e5 model (or a factory of it); None: `tools.embeddings.make_embeddings()`."""
        self.patterns = patterns
        self._embeddings = embeddings
        self._indexes: dict[str, ToolIndex] = {}
        self._index_lock = threading.Lock()

    @cached_property
    def _modifiers(self) -> frozenset[str]:
        """The one-word depth modifiers of the file's int parameters ("diretamente", "directly")."""
        return frozenset(fold(w) for pat in self.patterns.patterns for p in pat.parameters if isinstance(p, IntParam)
                         for words in p.word_values.values() for w in words if len(w.split()) == 1)

    @classmethod
    def for_file(cls, path: Path) -> PatternEngine:
        """The process-wide engine of a patterns file, reloaded when the file changes."""
        stat = path.stat()
        key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
        with _lock:
            engine = _engines.get(key)
        if engine is None:
            engine = cls(load_patterns(path))
            with _lock:
                for stale in [k for k in _engines if k[0] == key[0] and k != key]:
                    del _engines[stale]  # an edited file replaces its engine
                engine = _engines.setdefault(key, engine)
        return engine

    # ------------------------------------------------------------------ choose

    def embeddings(self) -> Embeddings:
        """The embedding model, created on first use (it takes seconds to load)."""
        from langchain_core.embeddings import Embeddings

        if self._embeddings is None:
            from tools.embeddings import make_embeddings

            self._embeddings = make_embeddings()
        if not isinstance(self._embeddings, Embeddings):
            self._embeddings = self._embeddings()
        return self._embeddings

    def index(self, gazetteer: Gazetteer | None = None) -> ToolIndex:
        """One unit vector per description and example, grouped by pattern, with the entities the
        gazetteer knows masked (built once per gazetteer content).
        """
        from tools.registry_index import ToolIndex

        signature = _signature(gazetteer)
        with self._index_lock:
            cached = self._indexes.get(signature)
            if cached is None:
                texts = [(p.name, mask_entities(t, gazetteer)) for p in self.patterns.patterns for t in p.embedding_texts()]
                vectors = self.embeddings().embed_documents([t for _, t in texts])
                groups: dict[str, list[Any]] = {}
                for (name, _), vec in zip(texts, vectors, strict=True):
                    groups.setdefault(name, []).append(vec)
                cached = ToolIndex.build(signature, groups)
                if len(self._indexes) >= 4:
                    self._indexes.clear()
                self._indexes[signature] = cached
            return cached

    def rank(self, question: str, gazetteer: Gazetteer | None = None, given: str | None = None) -> MatchResult:
        """The margin rule over the patterns, best first (no LLM).

        Names are masked on both sides before embedding: measured, an example that happens to
        name the same person as the question outweighs what is asked about them. Patterns that
        have no parameter for a kind of thing the question names are left out: filling them
        would fail on that stray mention anyway. Choosing for an answer (`given`: what earlier
        sources of the turn found, maybe ""), so are patterns with a slot for a kind of thing that
        neither the question (not even by a word of a name) nor `given` names, when other patterns
        remain: "the primaries of every team" is not one team's rotation. The planner's questions
        (`given` None) keep them: whether the graph is near a question is not whether it answers it.
        """
        from tools.registry_index import MatchResult, decide

        k = self.patterns.matching.candidates
        masked = mask_entities(question, gazetteer)
        vector = self.embeddings().embed_query(masked)
        ranked = self.index(gazetteer).rank(vector)
        mentions = find_mentions(question, gazetteer or {}, _id_params(self.patterns))
        nouns = _answer_nouns(masked, self.patterns)  # not a word of a name ("Finance & People")
        fits = [(name, score) for name, score in ranked if _can_take(self.patterns.pattern(name), mentions)
                and not _ruled_out(self.patterns.pattern(name), question)
                and not _names_other_answers(self.patterns.pattern(name), nouns)]
        if given is not None:  # choosing for an answer (the planner's questions keep every fitting pattern)
            named = {m.source for m in mentions}
            if given.strip():
                named |= {m.source for m in find_mentions(given, gazetteer or {}, _id_params(self.patterns))}
            named |= _partly_named(question, gazetteer or {}, named)
            served = [(name, score) for name, score in fits
                      if all(p.source in named for p in self.patterns.pattern(name).parameters
                             if isinstance(p, (EntityParam, IdParam)))]
            fits = served or fits
        order = {name: _order_fits(self.patterns.pattern(name).word_order, question, mentions, self._modifiers)
                 for name, _ in fits}
        if any(v is True for v in order.values()):
            # the question's verb fits a declared word order: it is about that relation, in that
            # direction; patterns whose order misfits, or that declare none, go
            fits = [(name, score) for name, score in fits if order[name] is True]
        m = self.patterns.matching
        result = decide(fits, lambda _name: True, floor=m.floor, margin=m.margin, k=k)
        top = result.candidates[0] if result.candidates else None
        if (result.decision == "none" and top is not None and top.score >= m.floor - m.margin
                and self._partly_names_a_slot(self.patterns.pattern(top.name), question, gazetteer or {}, mentions)):
            # a name said by one word of it ("the Platform primary" of "Platform Engineering") is
            # not masked, and leaves the question that much further from the examples: less than
            # the margin below the floor, with such a word for the best pattern's slot, the
            # constrained choice (which may answer "none") decides, as for a close pair
            return MatchResult(result.candidates, "close", top.name)
        return result

    @staticmethod
    def _partly_names_a_slot(pattern: GraphPattern, question: str, gazetteer: Gazetteer,
                             mentions: list[Mention]) -> bool:
        """Whether the question names a kind of thing one of the pattern's slots takes only by a
        word of a longer name, and names no value of that kind in full.
        """
        named = {m.source for m in mentions}
        partly = _partly_named(question, gazetteer, named)
        return any(p.source in partly for p in pattern.parameters if isinstance(p, (EntityParam, IdParam)))

    def choose(self, question: str, *, usage: Usage, backend: str | None, gazetteer: Gazetteer | None = None,
               given: str = "") -> Choice:
        """Clear match: that pattern. Close: one constrained LLM choice among the close ones.
        `given`: what earlier sources of the turn found (it names things a pattern's slots take).
        """
        result = self.rank(question, gazetteer, given)
        scores = [(c.name, c.score) for c in result.candidates]
        if result.decision == "none" or not result.candidates:
            return Choice(None, "none", scores)
        if result.decision == "clear":
            return Choice(result.best, "clear", scores)
        top = result.candidates[0].score
        close = [c.name for c in result.candidates if top - c.score < self.patterns.matching.margin]
        try:
            picked = self._llm_choice(question, close, usage=usage, backend=backend)
        except LLMError as exc:
            return Choice(None, "close", scores, by_llm=True, note=f"the pattern choice failed: {exc}"[:300])
        return Choice(picked, "close", scores, by_llm=True)

    def _llm_choice(self, question: str, names: list[str], *, usage: Usage, backend: str | None) -> str | None:
        options = (*names, "none")
        choice_type: Any = Literal.__getitem__(options)
        schema = create_model("PatternPick", pattern=(choice_type, Field(description="the chosen pattern, or none")))
        lines = "\n".join(_candidate_line(self.patterns.pattern(n)) for n in names)
        out = structured_call(CHOOSE_COMPONENT, schema, "choose_pattern", backend=backend, usage=usage,
                              candidates=lines, question=question)
        picked = str(out.pattern)  # type: ignore[attr-defined]
        return None if picked == "none" else picked

    # ------------------------------------------------------------------ fill

    def gazetteer(self, engine: Engine | None, tool: GraphTool | None) -> Gazetteer:
        """The entity surface forms for this file, read once per SQL engine and graph."""
        key = (id(engine), tool.url if tool is not None else "", id(self))
        with _lock:
            cached = _gazetteers.get(key)
        if cached is None:
            cached = build_gazetteer(self.patterns, engine, tool)
            with _lock:
                if len(_gazetteers) >= 16:  # an eval opens one SQL engine per item
                    _gazetteers.clear()
                _gazetteers[key] = cached
        return cached

    def referent(self, question: str, given: str, focus: Sequence[str], *, engine: Engine | None,
                 tool: GraphTool | None, whole: str = "") -> str:
        """`question` with the one thing an earlier backend found that it points back at, written
        after the pointing word ("is he on call in W21? (he: X)"), when the question says a
        reference word or pronoun and the first field of `focus` that names an entity or id the
        question does not (else `given`) names exactly one, or exactly one of the kind the pointing
        names (`_pointed_labels`: the part's own "that project", else the `whole` question's);
        `question` unchanged otherwise.

        Why: "is he on call in W21?" after a postmortem that names its commander was matched
        without the person (nothing in it is a name), so the week's roster answered it, listing
        everyone on call; with the person written in, a pattern that takes a person answers. "…
        who leads that project, and is any member of it on call?" after a postmortem that names
        people, services and one project is about the project.
        """
        from tools.semantic_layer import pointing_words

        pointing = pointing_words(question)
        if not pointing or not given.strip():
            return question
        gazetteer = self.gazetteer(engine, tool)
        ids = _id_params(self.patterns)
        own = {(m.source, m.value) for m in find_mentions(question, gazetteer, ids)}
        kinds = self._pointed_labels(question) or self._pointed_labels(whole)
        for text in [*focus, given]:
            found = {(m.source, m.value): m for m in find_mentions(text, gazetteer, ids) if not m.title}
            found = {k: m for k, m in found.items() if k not in own}
            if len(found) > 1 and kinds:
                found = {k: m for k, m in found.items() if self._label_of(m.source) in kinds}
            if found:
                if len(found) != 1:
                    return question
                m = next(iter(found.values()))
                return f"{question} ({pointing[0]}: {span_of(text, m.surface) or m.surface})"
        return question

    def _pointed_labels(self, text: str) -> set[str]:
        """The node labels whose words (`vocabulary.label_words`) stand in the two words right after
        a word that points back ("esse projeto", "that person"): what the pointing means.
        """
        from tools.semantic_layer import pointed_phrases

        words = {label: {fold(w) for w in ws} for label, ws in self.patterns.vocabulary.label_words.items()}
        return {label for after in pointed_phrases(text) for label, ws in words.items() if ws & set(after.split())}

    def _label_of(self, source: str) -> str | None:
        """The node label a mention's source stands for ("graph:Project.project_id", "ref:employee")."""
        kind, _, rest = source.partition(":")
        name = rest.split(".", 1)[0].split("#", 1)[0]
        if kind == "graph":
            return name
        return next((label for label in self.patterns.vocabulary.label_words if label.lower() == name), None)

    def unsaid(self, query: str, question: str, *, engine: Engine | None, tool: GraphTool | None) -> list[str]:
        """`unsaid_values` of a generated query with this file's gazetteer and id shapes."""
        return unsaid_values(query, question, self.gazetteer(engine, tool), _id_params(self.patterns))

    def missed(self, query: str, question: str, tool: GraphTool) -> list[str]:
        """`missed_labels` of a generated query with this file's label words and the graph's schema."""
        words = self.patterns.vocabulary.label_words
        if not words:
            return []
        return missed_labels(query, question, words, [(r.type, r.src, r.dst) for r in tool.schema().rels])

    def fill(self, pattern: GraphPattern, question: str, *, today: str, gazetteer: Gazetteer,
             engine: Engine | None = None, usage: Usage | None = None, backend: str | None = None,
             given: str = "", focus: Sequence[str] = ()) -> Filled:
        """Typed values for every parameter; the LLM (when `usage` is given) sees only what the
        question did not give away. An entity or id the question names that no parameter took
        makes the pattern unusable: the question asks something narrower than the pattern.
        `given`: what earlier backends of the turn found (a passage, the cells of their rows); an
        entity or id parameter the question leaves open takes the one value of its kind named
        there ("is any member of that project on call?" after a postmortem that names one project).
        `focus`: the fields of `given` the whole question names by their label ("names an incident
        commander" → each "Incident commander: …" field, in reading order); where `given` names
        several of a kind, the one the first such field names is taken ("is he on call?" after
        postmortems that name five people).
        """
        day = date.fromisoformat(today)
        vocab = self.patterns.vocabulary
        mentions = find_mentions(question, gazetteer, _id_params(self.patterns))
        earlier = find_mentions(given, gazetteer, _id_params(self.patterns)) if given.strip() else []
        filled = Filled()
        folded = rest = f" {fold(question)} "
        for m in mentions:
            rest = rest.replace(f" {m.surface} ", " ")
        shared = _shared_sources(pattern, mentions, folded)
        for param in pattern.parameters:
            if isinstance(param, (EntityParam, IdParam)) and param.name in shared:
                filled.values[param.name] = shared[param.name]
            elif isinstance(param, (EntityParam, IdParam)):
                values = list(dict.fromkeys(m.value for m in mentions if m.source == param.source))
                found = list(dict.fromkeys(m.value for m in earlier if m.source == param.source))
                for text in focus if len(found) > 1 else ():
                    focused = list(dict.fromkeys(m.value for m in find_mentions(text, gazetteer, _id_params(
                        self.patterns)) if m.source == param.source and m.value in found))
                    if focused:
                        found = focused if len(focused) == 1 else found
                        break
                if len(values) == 1:
                    filled.values[param.name] = values[0]
                elif not values and len(found) == 1:
                    filled.values[param.name] = found[0]
                else:
                    filled.pending.append(param.name)  # none, or two different ones: the LLM decides
            elif isinstance(param, EnumParam):
                options = _enum_options(param, rest)
                if options and param.default is not None and _only_included(param, rest, vocab.inclusive_words):
                    options = [o for o in param.options if o in {*options, *param.default}]
                if options:
                    filled.values[param.name] = options
                elif param.default is not None:
                    filled.values[param.name] = list(param.default)
                else:
                    filled.pending.append(param.name)
            elif isinstance(param, IntParam) and param.exact_of is not None:
                continue  # after the bound it follows
            elif isinstance(param, IntParam):
                numbers = _numbers(rest, vocab, param.units)
                if not numbers and (worded := param.said_value(rest)) is not None:
                    numbers = [worded]
                if len(numbers) == 1:
                    if not param.minimum <= numbers[0] <= param.maximum:
                        filled.problem = f"{param.name}={numbers[0]} is outside {param.minimum}..{param.maximum}"
                        return filled
                    filled.values[param.name] = numbers[0]
                elif not numbers and param.default is not None:
                    filled.values[param.name] = param.default
                else:
                    filled.pending.append(param.name)
            else:
                weeks = _weeks(rest, day, vocab, raw=question)
                if not weeks and param.default_offset is not None:
                    weeks = [_iso_week(day + timedelta(weeks=param.default_offset))]
                if param.many and (weeks or param.every_when_unnamed):
                    filled.values[param.name] = weeks
                elif len(weeks) == 1:
                    filled.values[param.name] = weeks[0]
                else:
                    filled.pending.append(param.name)
        for param in pattern.parameters:
            if isinstance(param, IntParam) and param.exact_of is not None:
                bound = filled.values.get(param.exact_of)
                exact = isinstance(bound, int) and _numbers(rest, vocab, _units_of(pattern, param.exact_of),
                                                            before=vocab.exact_words) == [bound]
                worded = param.said_value(rest)
                filled.values[param.name] = bound if exact else worded if worded is not None else param.default
        by_name = {p.name: p for p in pattern.parameters}
        open_sources = {getattr(by_name[n], "source", "") for n in filled.pending}
        stray = [m for m in _stray(mentions, pattern, filled.values) if m.source not in open_sources]
        if not stray and filled.pending:
            if usage is None:
                filled.problem = f"parameters {filled.pending} not found in the question"
                return filled
            self._llm_fill(pattern, question, filled, day=day, gazetteer=gazetteer, engine=engine,
                           usage=usage, backend=backend)
            if filled.problem is not None:
                return filled
            stray = _stray(mentions, pattern, filled.values)
        if stray:
            filled.problem = (f"the question also names {', '.join(sorted({m.value for m in stray}))}, "
                              f"which pattern {pattern.name} has no parameter for")
        return filled

    def _llm_fill(self, pattern: GraphPattern, question: str, filled: Filled, *, day: date,
                  gazetteer: Gazetteer, engine: Engine | None, usage: Usage, backend: str | None) -> None:
        """One small JSON call for the pending parameters; each value must be grounded, then typed."""
        params = {p.name: p for p in pattern.parameters}
        pending = [params[n] for n in filled.pending]
        fields: dict[str, Any] = {p.name: (str | int | None, Field(None, description=p.description)) for p in pending}
        schema = create_model(f"Fill_{pattern.name}", __config__=ConfigDict(extra="ignore"), **fields)
        try:
            out = structured_call(FILL_COMPONENT, schema, "fill_pattern", backend=backend, usage=usage,
                                  pattern=pattern.name, description=pattern.description,
                                  pending=_describe(pending), today=day.isoformat(), question=question)
        except LLMError as exc:
            filled.problem = f"parameter extraction failed: {exc}"
            return
        vocab = self.patterns.vocabulary
        for param in pending:
            raw = getattr(out, param.name, None)
            if raw is None or str(raw).strip() == "":
                filled.problem = f"{param.name}: the question does not state it"
                return
            text = str(raw).strip()
            filled.llm_values[param.name] = text
            if not _grounded(text, question, vocab):
                filled.problem = f"{param.name}={text!r} does not appear in the question"
                return
            value = self._typed(param, text, day=day, gazetteer=gazetteer, engine=engine)
            if value is None:
                filled.problem = f"{param.name}={text!r} cannot be read as a {param.kind}"
                return
            filled.values[param.name] = value
        filled.pending = []

    def _typed(self, param: Any, text: str, *, day: date, gazetteer: Gazetteer, engine: Engine | None) -> Any:
        """The canonical value of one LLM-given text, through the same typed rules as the question."""
        vocab = self.patterns.vocabulary
        if isinstance(param, IdParam):
            hits = list(dict.fromkeys(m.group(0).upper() for m in param.search().finditer(text)))
            return hits[0] if len(hits) == 1 else None
        if isinstance(param, EnumParam):
            return _enum_options(param, text) or None
        if isinstance(param, IntParam):
            numbers = _numbers(text, vocab)
            return numbers[0] if len(numbers) == 1 and param.minimum <= numbers[0] <= param.maximum else None
        if isinstance(param, WeekParam):
            weeks = _weeks(text, day, vocab, raw=text)
            return (weeks or None) if param.many else weeks[0] if len(weeks) == 1 else None
        values = list(dict.fromkeys(m.value for m in find_mentions(text, gazetteer, []) if m.source == param.source))
        if len(values) == 1:
            return values[0]
        return None if values else _partial(param, text, gazetteer, engine)

    # ------------------------------------------------------------------ answer

    def answer(self, question: str, *, tool: GraphTool, today: str, usage: Usage, backend: str | None,
               engine: Engine | None = None, rows_for_later: bool = False, given: str = "",
               focus: Sequence[str] = ()) -> PatternAttempt:
        """Choose, fill and run; `ok` with rows, or a reason to fall back. `rows_for_later`: a later
        backend of the same turn counts or sums over these rows, so an aggregate word in the
        question is its job, not a reason to leave the pattern.
        """
        vocab = self.patterns.vocabulary
        aggregates = _aggregate_words(question, vocab) if not rows_for_later else []
        why = (f"the question asks for an aggregate ({aggregates[0]!r}); patterns return rows"
               if aggregates else "")
        if aggregates and (not set(aggregates) <= {fold(w) for w in vocab.count_words} or not any(
                counts_answers(question, vocab.count_words, p.counts) for p in self.patterns.patterns)):
            return PatternAttempt(choice=Choice(None, "none"), reason=why)  # no pattern's answers counted
        gazetteer = self.gazetteer(engine, tool)
        choice = self.choose(question, usage=usage, backend=backend, gazetteer=gazetteer, given=given)
        answered = ""
        # "how many open tickets do the services that depend on X have": the relation is one clause
        # of a question whose aggregate is a later source's job. That clause is matched alone: it
        # chooses the pattern when the whole question matched none, and it is the part of the
        # question the rows stand for (the later source reads the rows in its place)
        for clause in relative_clauses(question, vocab.relative_words, vocab.count_words) if rows_for_later else []:
            found = self.choose(clause, usage=usage, backend=backend, gazetteer=gazetteer, given=given)
            if found.decision == "clear" and (choice.decision == "none" or found.name == choice.name):
                choice, question, answered = (found, clause, clause) if choice.decision == "none" \
                    else (choice, question, clause)
                break
        attempt = PatternAttempt(choice=choice, pattern=choice.name, clause=answered)
        if choice.name is None:
            attempt.reason = ("no pattern close enough" if choice.decision == "none"
                              else choice.note or "the LLM chose none of the close patterns")
            return attempt
        pattern = self.patterns.pattern(choice.name)
        counting = bool(aggregates)
        if counting and not counts_answers(question, vocab.count_words, pattern.counts):
            attempt.reason = f"{why} (not a count of what pattern {pattern.name} answers)"
            return attempt
        filled = self.fill(pattern, question, today=today, gazetteer=gazetteer, engine=engine,
                           usage=usage, backend=backend, given=given, focus=focus)
        attempt.llm_filled = sorted(filled.llm_values)
        if filled.problem is not None:
            attempt.reason = f"pattern {pattern.name}: {filled.problem}"
            return attempt
        attempt.cypher = pattern.cypher.for_backend(tool.backend)
        attempt.params = {p.name: p.bound(filled.values[p.name]) if isinstance(p, EnumParam) else filled.values[p.name]
                          for p in pattern.parameters}
        try:
            rows = tool.query(attempt.cypher, attempt.params)
        except Exception as exc:  # noqa: BLE001 - guard, engine or store error: the fallback decides
            attempt.reason = f"pattern {pattern.name} failed: {type(exc).__name__}: {exc}"[:400]
            return attempt
        attempt.named = named_parameters(question, attempt.params, gazetteer)
        if counting:
            return self._counted(attempt, pattern, tool)
        shown = drop_echoed_columns(rows, attempt.params)
        attempt.echoed = {c: v for c, v in rows[0].items() if c not in shown[0]} if rows else {}
        attempt.rows = drop_unasked_details(shown, pattern.details, question,
                                            bounds={n for n, v in attempt.params.items()
                                                    if not isinstance(v, list) or len(v) == 1})
        if pattern.keys and not rows_for_later:  # a key serves only a later source that reads the rows
            attempt.rows = drop_unasked_details(attempt.rows, dict.fromkeys(pattern.keys, []), "")
        if attempt.rows is not rows:
            attempt.cypher = _narrowed(tool, attempt.cypher, attempt.params, rows, attempt.rows)
        attempt.ok = True
        if rows_for_later and not attempt.clause:
            attempt.clause = _anchor(question, gazetteer, self.patterns, attempt.params)
        return attempt

    def names_nothing(self, question: str, *, engine: Engine | None, tool: GraphTool | None) -> bool:
        """Whether the question names no entity, id or week the graph holds, and no pattern near
        it (above the patterns' floor) can be filled without one: the graph has nothing to say
        about it. "Which service had the most incidents?" is near the incidents of a service, which
        needs the service; its query would be the text-to-Cypher fallback's, over what the database
        also holds. "Who is on call this week?" needs no name. No LLM call.
        """
        gazetteer = self.gazetteer(engine, tool)
        if find_mentions(question, gazetteer, _id_params(self.patterns)):
            return False
        weekly = any(isinstance(p, WeekParam) for pat in self.patterns.patterns for p in pat.parameters)
        if weekly and _weeks(question, date.today(), self.patterns.vocabulary, raw=question):
            return False
        today, floor = date.today().isoformat(), self.patterns.matching.floor
        return not any(self.fill(self.patterns.pattern(c.name), question, today=today, gazetteer=gazetteer,
                                 engine=engine).problem is None
                       for c in self.rank(question, gazetteer).candidates if c.score >= floor)

    def mirrored(self, question: str, *, engine: Engine | None, tool: GraphTool | None) -> bool:
        """Whether the patterns near the question are all `mirrored` and the best of them fills
        from the words alone: a clear match, or every close candidate. The database holds that
        relation one join away, and the question is planned there. No LLM call.
        """
        return self._mirrored_fill(question, engine=engine, tool=tool) is not None

    def _mirrored_fill(self, question: str, *, engine: Engine | None, tool: GraphTool | None
                       ) -> tuple[GraphPattern, Filled] | None:
        gazetteer = self.gazetteer(engine, tool)
        result = self.rank(question, gazetteer)
        if result.decision not in ("clear", "close") or not result.candidates:
            return None
        top = result.candidates[0].score
        near = [c.name for c in result.candidates if top - c.score < self.patterns.matching.margin]
        if not all(self.patterns.pattern(n).mirrored is not None for n in near):
            return None
        pattern = self.patterns.pattern(near[0])
        filled = self.fill(pattern, question, today=date.today().isoformat(), gazetteer=gazetteer, engine=engine)
        form = pattern.mirrored
        assert form is not None  # every near pattern is mirrored
        held = all(set(_as_list(filled.values.get(n))) <= set(options) for n, options in form.when.items())
        return (pattern, filled) if filled.problem is None and held else None

    def database_query(self, question: str, *, engine: Engine | None, tool: GraphTool | None, count: bool = True
                       ) -> MirroredQuery | None:
        """The semantic query object of a question a `mirrored` pattern answers, built from the
        pattern's database form: its returned columns as dimensions, less the details the question
        does not ask for, each parameter's resolved key as an equality filter, the pattern's order;
        for "how many" of the pattern's own answers ("how many direct reports does X have"), the
        count of its keys' entity's rows under those filters (with `count` False, the rows: a
        question that also asks who they are reads the count off them). None when no mirrored pattern fits,
        the question asks for another aggregate (the semantic query's own fill answers those), or
        it names another entity or a number than the parameters took: a condition the form does not
        hold ("the tier 1 services of X"). No LLM call.
        """
        found = self._mirrored_fill(question, engine=engine, tool=tool)
        if found is None:
            return None
        pattern, filled = found
        vocab = self.patterns.vocabulary
        aggregates = _aggregate_words(question, vocab)
        counted = bool(aggregates) and set(aggregates) <= {fold(w) for w in vocab.count_words} \
            and counts_answers(question, vocab.count_words, pattern.counts)
        if aggregates and not counted:
            return None
        gazetteer = self.gazetteer(engine, tool)
        mentions = find_mentions(question, gazetteer, _id_params(self.patterns))
        keys = {str(v) for v in filled.values.values()}
        rest = f" {fold(question)} "
        for m in mentions:
            rest = rest.replace(f" {m.surface} ", " ")
        if any(m.value not in keys for m in mentions) or re.search(r"\d", rest):
            return None
        form = pattern.mirrored
        assert form is not None  # _mirrored_fill keeps mirrored patterns only
        shown = [c for c in drop_unasked_details([dict.fromkeys(pattern.returns())], pattern.details, question)[0]
                 if c in form.columns]
        filters = [{"field": form.keys[p.name], "op": "in" if isinstance(v, list) else "=", "value": v}
                   for p in pattern.parameters if p.name in form.keys for v in [filled.values[p.name]]]
        if counted and count:  # the rows the form lists, counted: its keys' entity ("the people whose manager is X")
            base = next(iter(form.keys.values())).partition(".")[0]
            query: dict[str, Any] = {"measures": [f"{base}.count"], "filters": filters}
        else:
            query = {"dimensions": [form.columns[c] for c in shown], "filters": filters,
                     "order": [{"field": form.columns[c], "direction": "asc"} for c in shown if c in pattern.ordered_by()]}
        # whom the rows are of, as the question wrote it: without it the model read "the people who
        # report to one manager" over five names as the manager reporting to the first of them
        named = named_parameters(question, {p.name: filled.values[p.name] for p in pattern.parameters
                                            if p.name in filled.values}, gazetteer)
        return MirroredQuery(pattern.name, query, tuple(m.surface for m in mentions), described(pattern.about(), named))

    def names_closure(self, question: str) -> bool:
        """Whether the question's words take a pattern's depth to its whole range ("direta ou
        indiretamente", "transitively": an int parameter's `word_values` at its maximum, above its
        minimum). Such a relation is a path of any length, which only the graph follows; a
        database query over one join answers its first step only. No LLM call.
        """
        return any(isinstance(p, IntParam) and p.maximum > p.minimum and p.said_value(question) == p.maximum
                   for pat in self.patterns.patterns for p in pat.parameters)

    def counts_itself(self, question: str, *, engine: Engine | None, tool: GraphTool | None) -> bool:
        """Whether the question's only aggregate is "how many" of what the pattern it matches
        clearly answers, filled from the words alone ("how many people are under X, at any
        level"): the pattern's count is the whole answer. No LLM call.
        """
        vocab = self.patterns.vocabulary
        aggregates = _aggregate_words(question, vocab)
        if not aggregates or not set(aggregates) <= {fold(w) for w in vocab.count_words}:
            return False
        gazetteer = self.gazetteer(engine, tool)
        ranked = self.rank(question, gazetteer)
        if ranked.decision != "clear" or ranked.best is None:
            return False
        pattern = self.patterns.pattern(ranked.best)
        return counts_answers(question, vocab.count_words, pattern.counts) and self.fill(
            pattern, question, today=date.today().isoformat(), gazetteer=gazetteer, engine=engine).problem is None

    def leaves_aggregate(self, question: str, *, engine: Engine | None, tool: GraphTool | None) -> bool:
        """Whether the question asks for an aggregate the patterns do not count (a total, an
        average, a count of other things) over a relation a pattern matches clearly and fills from
        the words alone, on the whole question or on one of its relative clauses: "the total of the
        expenses of everyone under X". The pattern gives the set; another source must aggregate
        over it. No LLM call.
        """
        vocab = self.patterns.vocabulary
        aggregates = _aggregate_words(question, vocab)
        if not aggregates:
            return False
        counting = set(aggregates) <= {fold(w) for w in vocab.count_words}
        gazetteer = self.gazetteer(engine, tool)
        for text in [question, *relative_clauses(question, vocab.relative_words, vocab.count_words)]:
            ranked = self.rank(text, gazetteer)
            if ranked.decision == "clear" and ranked.best is not None:
                pattern = self.patterns.pattern(ranked.best)
                if counting and counts_answers(question, vocab.count_words, pattern.counts):
                    return False  # "how many people are under X": the pattern counts its own answers
                if pattern.mirrored is not None:
                    return False  # a one-join relation: the source that aggregates holds it too
                # every parameter from the words themselves ("the average approval limit across the
                # company" matches a pattern about people and names nobody)
                filled = self.fill(pattern, text, today=date.today().isoformat(), gazetteer=gazetteer, engine=engine)
                if filled.problem is None:
                    return True
        return False

    @staticmethod
    def _counted(attempt: PatternAttempt, pattern: GraphPattern, tool: GraphTool) -> PatternAttempt:
        """`attempt` answered with the number of the pattern's distinct answers, by a query that
        counts them (recorded, so re-running it gives the row synthesis read); the fallback's when
        the pattern's RETURN cannot be rewritten or the count query fails.
        """
        answer = pattern.answer_column()
        cypher = counting_query(attempt.cypher, answer) if answer else None
        if cypher is None:
            attempt.reason = f"pattern {pattern.name}: its answers cannot be counted by a rewrite"
            return attempt
        try:
            rows = tool.query(cypher, attempt.params)
        except Exception as exc:  # noqa: BLE001 - a dialect the rewrite does not fit: the fallback decides
            attempt.reason = f"pattern {pattern.name} count failed: {type(exc).__name__}: {exc}"[:400]
            return attempt
        attempt.cypher, attempt.rows, attempt.ok = cypher, rows, True
        return attempt


def _anchor(question: str, gazetteer: Gazetteer, patterns: PatternFile, params: dict[str, Any]) -> str:
    """The words of the question naming the one entity a pattern started from ("Cláudia Reis" in
    "the expenses of everyone under Cláudia Reis"), as the question writes them; "" when the
    pattern took none or several. A later source reads the pattern's rows in their place: the
    question is about the rows the relation reaches, not about that entity.
    """
    bound = {str(v) for v in params.values() if not isinstance(v, list)}
    used = {m.surface for m in find_mentions(question, gazetteer, _id_params(patterns)) if m.value in bound}
    return (span_of(question, next(iter(used))) or "") if len(used) == 1 else ""


def relative_clauses(question: str, openers: Iterable[str], ends: Iterable[str] = ()) -> list[str]:
    """The relative clauses of `question`, each from its opener to the end of its sentence, or to
    the first of the phrases `ends` (the count words: "os serviços que dependem do X tiveram
    quantos incidentes" asks its count of the clause's rows), of three words or more ("… for the
    services that depend on X, directly or indirectly?" → "that depend on X, directly or
    indirectly"); an opener among a sentence's first two words opens no clause ("Que severidade …").
    """
    regex = _word_re(openers)
    if regex is None:
        return []
    stops = [fold(e).split() for e in ends]
    out: list[str] = []
    for sentence in re.split(r"[?;!]+|\.\s+", question):
        words = sentence.split()
        for i, word in enumerate(words[2:], start=2):
            if regex.fullmatch(fold(word)) and len(words) - i >= 3:
                folded = [fold(re.sub(r"\W", "", w)) for w in words[i:]]
                cut = min((at for stop in stops if stop for at in phrase_starts(folded, stop)), default=len(folded))
                # the verb right before a count phrase ("tiveram", "have") goes with the count
                if 0 < cut < len(folded) and re.fullmatch(r"[^\W\d_]+", words[i + cut - 1]) \
                        and words[i + cut - 1].islower():
                    cut -= 1
                out.append(_clause_end(" ".join(words[i:i + cut])).strip(" ,"))
    return [c for c in out if len(c.split()) >= 3]


def _clause_end(clause: str) -> str:
    """`clause` up to a comma that the sentence's own question follows: a relative clause put first
    ("Para cada serviço que X atingiu, quantos tickets …?") ends there; an adverbial after the comma
    ("…, directly or indirectly") stays in it.

    Why: the clause is what a later source's question is bounded by; running to the end, it took
    the question's own ask with it, and the later source was asked about the rows alone.
    """
    split = split_at_question(clause)
    return clause if split is None else split[0]


def _aggregate_words(question: str, vocab: Vocabulary) -> list[str]:
    """The aggregate words (`Vocabulary.aggregate_words`) the question uses, folded, in its order."""
    regex = _word_re(vocab.aggregate_words)
    return [] if regex is None else list(dict.fromkeys(m.group(0) for m in regex.finditer(fold(question))))


def counts_answers(question: str, count_words: Iterable[str], nouns: Iterable[str]) -> bool:
    """Whether the question asks how many of the pattern's answers there are: a count word with one
    of the pattern's nouns at most two words after it ("quantas pessoas", "how many tier-1
    services"). "Em quantos minutos ela escala" counts minutes, not the pattern's answers.
    """
    found = tokens(question)
    said = {fold(n) for n in nouns}
    for phrase in {fold(w) for w in count_words if fold(w)}:
        end = len(phrase.split())
        if any(said & set(found[i + end:i + end + 3]) for i in phrase_starts(found, phrase)):
            return True
    return False


def counting_query(cypher: str, answer: str) -> str | None:
    """`cypher` counting the distinct values of its returned column `answer` instead of listing
    its rows: the final `RETURN [DISTINCT] items [ORDER BY ...]` becomes `WITH [DISTINCT] items
    RETURN count(DISTINCT answer) AS count` (a SKIP or LIMIT keeps the query as declared: None).
    """
    found = list(_RETURN.finditer(cypher))
    if not found:
        return None
    last = found[-1]
    body = cypher[last.end():]
    tail_at = _TAIL.search(body)
    if tail_at and re.match(r"\s+(?:SKIP|LIMIT)\b", body[tail_at.start():], re.IGNORECASE):
        return None
    projection = body[: tail_at.start()] if tail_at else body
    order = _ORDER.match(body[tail_at.start():]) if tail_at else None
    if order and order.group(3):
        return None
    names = [re.search(r"\bAS\s+(\w+)\s*$", it, re.IGNORECASE) for it in _top_level(projection)]
    if answer not in [m.group(1) for m in names if m]:
        return None
    with_ = "WITH DISTINCT " if re.search(r"\bDISTINCT\b", last.group(0), re.IGNORECASE) else "WITH "
    return f"{cypher[: last.start()]}{with_}{projection.strip()}\nRETURN count(DISTINCT {answer}) AS count"


def drop_echoed_columns(rows: list[dict[str, Any]], params: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows without the columns that only repeat a value the question gave (every row holds the
    one value bound to a parameter: the week and the role of "who is primary in week W"). The user
    knows them already, and synthesis reads the columns that answer. At least one column stays.
    """
    if not rows:
        return rows
    given = []
    for value in params.values():
        one = value[0] if isinstance(value, list) and len(value) == 1 else value
        if isinstance(one, (str, int, float)) and not isinstance(one, bool):
            given.append(str(one))
    columns = list(rows[0])
    echoed = [c for c in columns if all(str(r.get(c)) in given and r.get(c) == rows[0].get(c) for r in rows)]
    if not echoed or len(echoed) == len(columns):
        return rows
    return [{c: v for c, v in r.items() if c not in echoed} for r in rows]


def drop_unasked_details(rows: list[dict[str, Any]], details: dict[str, list[str]], question: str,
                         bounds: frozenset[str] | set[str] = frozenset()) -> list[dict[str, Any]]:
    """The rows without the pattern's detail columns that the question does not ask for by one of
    their words (`GraphPattern.details`), duplicates then left out. Why: "quem são os liderados
    diretos da X?" asks for names; the role beside each is an answer to another question, and
    synthesis reads what the rows hold. The same rule `settle` applies to SQL dimensions. A column
    named like one of the pattern's parameters set to one value (`bounds`: "up to three hops") is
    not asked for by the words that set the bound.
    """
    if not rows or not details:
        return rows
    text = " " + " ".join(re.findall(r"[%\w]+", fold(question))) + " "
    unasked = {c for c, words in details.items() if c in rows[0] and (c in bounds or not any(
        f" {w} " in text or f" {w}s " in text for w in (" ".join(fold(x).split()) for x in words)))}
    if not unasked or not set(rows[0]) - unasked:
        return rows
    out: list[dict[str, Any]] = []
    for r in rows:
        kept = {c: v for c, v in r.items() if c not in unasked}
        if kept not in out:
            out.append(kept)
    return out


_RETURN = re.compile(r"\bRETURN\s+(?:DISTINCT\s+)?", re.IGNORECASE)
_TAIL = re.compile(r"\s+(?:ORDER\s+BY|SKIP|LIMIT)\b", re.IGNORECASE)
_ORDER = re.compile(r"(\s+ORDER\s+BY\s+)(.*?)(\s+(?:SKIP|LIMIT)\b.*)?$", re.IGNORECASE | re.DOTALL)


def _top_level(text: str) -> list[str]:
    """`text` split at the commas outside parentheses and brackets (a RETURN or ORDER BY list)."""
    items: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    items.append(text[start:].strip())
    return [it for it in items if it]


def without_columns(cypher: str, drop: set[str]) -> str | None:
    """`cypher` whose final RETURN no longer projects the aliases in `drop` (nor orders by them);
    None when there is nothing to drop or the clause cannot be read. Only for columns that hold one
    value in every row: leaving them out changes neither the rows nor their order.
    """
    found = list(_RETURN.finditer(cypher))
    if not found:
        return None
    head, body = cypher[: found[-1].end()], cypher[found[-1].end():]
    tail_at = _TAIL.search(body)
    projection, tail = (body[: tail_at.start()], body[tail_at.start():]) if tail_at else (body, "")

    def name(item: str) -> str:
        alias = re.search(r"\bAS\s+(\w+)\s*$", item, re.IGNORECASE)
        return alias.group(1) if alias else item.strip()

    items = _top_level(projection)
    kept = [it for it in items if name(it) not in drop]
    if not kept or len(kept) == len(items):
        return None
    order = _ORDER.match(tail)
    if order:
        keys = [k for k in _top_level(order.group(2)) if k.split()[0] not in drop]
        tail = (f"{order.group(1)}{', '.join(keys)}" if keys else "") + (order.group(3) or "")
    return head + ", ".join(kept) + tail


def _narrowed(tool: GraphTool, cypher: str, params: dict[str, Any], rows: list[dict[str, Any]],
              shown: list[dict[str, Any]]) -> str:
    """The pattern's Cypher without the echoed columns, when it gives exactly the rows shown; else
    the Cypher as declared. Why: the query a context records is the one that gives its rows, so
    whoever re-runs it (the evals, a user reading the trace) sees what synthesis read.
    """
    narrowed = without_columns(cypher, set(rows[0]) - set(shown[0])) if rows and shown else None
    if narrowed is None:
        return cypher
    last = list(_RETURN.finditer(narrowed))[-1]
    # a dropped column that told rows apart (the hops of each path) leaves duplicates: DISTINCT
    distinct = narrowed[: last.start()] + "RETURN DISTINCT " + narrowed[last.end():]
    for candidate in dict.fromkeys([narrowed, distinct]):
        try:
            again = tool.query(candidate, params)
        except Exception:  # noqa: BLE001 - a dialect the rewrite does not fit: the declared query stays
            continue
        if again == shown:
            return candidate
    return cypher


_ARTICLES = frozenset("o a os as the".split())


def _order_fits(order: WordOrder | None, question: str, mentions: list[Mention],
                skip: frozenset[str] = frozenset()) -> bool | None:
    """None: the pattern declares no word order; else whether the question's word order fits it.
    Articles and the one-word depth modifiers (`skip`: "directly") are read past: "services that
    depend directly on X" is "depend on X".
    """
    if order is None or not (order.entity_after or order.entity_before):
        return None
    text = f" {fold(question)} "
    for m in sorted(mentions, key=lambda m: -len(m.surface)):
        text = text.replace(f" {m.surface} ", " @entity ")
    tokens = [t for t in text.split() if t not in _ARTICLES and t not in skip]
    joined = " ".join(tokens)
    for phrase in order.entity_after:
        if f" {' '.join(fold(phrase).split())} @entity " in f" {joined} ":
            return True
    first = joined.find("@entity")
    if first >= 0:
        for phrase in order.entity_before:
            at = f" {joined} ".find(f" {' '.join(fold(phrase).split())} ")
            if at > first:
                return True
    return False


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _answer_nouns(question: str, patterns: PatternFile) -> set[str]:
    """The patterns' answer nouns (`counts`, folded) that the question says."""
    words = " " + " ".join(re.findall(r"\w+", fold(question))) + " "
    return {n for p in patterns.patterns for n in (fold(c) for c in p.counts) if f" {n} " in words}


def _names_other_answers(pattern: GraphPattern, said: set[str]) -> bool:
    """Whether a `mirrored` pattern (a one-join list of one kind of record) is asked for another
    kind: the question names what other patterns answer and none of this pattern's answer nouns.
    "Which projects does the X team own" is near the team's services by every other word, and
    answering it with services answers another question. Patterns that traverse keep their
    candidates: their questions name levels, incidents or people beside what they answer.
    """
    own = {fold(c) for c in pattern.counts}
    return pattern.mirrored is not None and bool(own) and not (own & said) and bool(said)


def _ruled_out(pattern: GraphPattern, question: str) -> bool:
    """Whether the question says one of the words that rule the pattern out (`ruled_out_by`), or
    none of the words one of which it needs (`needs_one_of`).
    """
    folded = fold(question)
    regex = _word_re(pattern.ruled_out_by)
    needed = _word_re(pattern.needs_one_of)
    return (regex is not None and regex.search(folded) is not None) or (
        needed is not None and needed.search(folded) is None)


def _can_take(pattern: GraphPattern, mentions: list[Mention]) -> bool:
    """Whether the pattern has a parameter for every kind of thing the question names (a text
    that names two kinds needs one of them), and as many parameters of a kind as the question
    names things of only that kind: one person's manager cannot take two people, and the manager
    two people share is not asked about one.
    """
    params = Counter(p.source for p in pattern.parameters if isinstance(p, (EntityParam, IdParam)))
    by_surface: dict[str, set[str]] = {}
    for m in mentions:
        by_surface.setdefault(m.surface, set()).add(m.source)
    named = Counter(next(iter(kinds)) for kinds in by_surface.values() if len(kinds) == 1)
    return all(kinds & set(params) for kinds in by_surface.values()) and all(
        n <= params[source] for source, n in named.items()) and all(
        named[source] == n for source, n in params.items() if n > 1)


def _partly_named(question: str, gazetteer: Gazetteer, named: set[str]) -> set[str]:
    """The kinds the question names only by a word of a longer name ("Eduardo" of a full name):
    the LLM's fill can still resolve those, so their patterns stay candidates.
    """
    words = {w for w in re.findall(r"\w+", fold(question)) if len(w) >= 4}
    out: set[str] = set()
    for source, pairs in gazetteer.items():
        if source in named or source.endswith(TITLE_MARK):
            continue
        if any(words & set(surface.split()) for surface, _ in pairs if " " in surface):
            out.add(source)
    return out


def _shared_sources(pattern: GraphPattern, mentions: list[Mention], folded: str) -> dict[str, str]:
    """Parameters that share one kind (the two people of "the boss A and B have in common") take
    the values of that kind in the order the question names them, when it names exactly as many:
    no single value could fill either, and the order is what the question itself gives.
    """
    by_source: dict[str, list[str]] = {}
    for p in pattern.parameters:
        if isinstance(p, (EntityParam, IdParam)):
            by_source.setdefault(p.source, []).append(p.name)
    out: dict[str, str] = {}
    for source, names in by_source.items():
        found = [m for m in mentions if m.source == source]
        values = list(dict.fromkeys(m.value for m in sorted(found, key=lambda m: folded.find(f" {m.surface} "))))
        if len(names) > 1 and len(values) == len(names):
            out.update(zip(names, values, strict=True))
    return out


def _stray(mentions: list[Mention], pattern: GraphPattern, values: dict[str, Any]) -> list[Mention]:
    """Mentions no parameter of the pattern took (a text that names two kinds counts once)."""
    taken = {(p.source, values.get(p.name)) for p in pattern.parameters if isinstance(p, (EntityParam, IdParam))}
    covered = {m.surface for m in mentions if (m.source, m.value) in taken}
    return [m for m in mentions if m.surface not in covered]


def _candidate_line(pattern: GraphPattern) -> str:
    """A close candidate as the choice prompt shows it: its description, the columns it returns and
    one example per language, because a small model tells close patterns apart better by what they
    answer with and by sample questions than by prose alone.
    """
    return (f"- {pattern.name}: {' '.join(pattern.description.split())}\n"
            f"  answers with: {', '.join(pattern.returns())}\n"
            f"  e.g. \"{pattern.examples.pt[0]}\" / \"{pattern.examples.en[0]}\"")


def _describe(params: list[Any]) -> str:
    """One line per pending parameter for the fill prompt: name, kind, description, the format."""
    lines = []
    for p in params:
        hint = {
            "id": lambda q: f"an id of the form {q.pattern}",
            "enum": lambda q: "one or more of " + ", ".join(q.options),
            "entity": lambda q: "a name or id exactly as the question writes it",
            "int": lambda q: f"a whole number from {q.minimum} to {q.maximum}",
            "iso_week": lambda q: "a week exactly as the question writes it (2026-W21, next week, a date)",
        }[p.kind](p)
        lines.append(f"- {p.name} [{p.kind}]: {p.description}; {hint}")
    return "\n".join(lines)


def _grounded(value: str, question: str, vocab: Vocabulary) -> bool:
    """Whether the model copied `value` from the question rather than inventing it."""
    folded_value, folded_question = fold(value), f" {fold(question)} "
    if folded_value and f" {folded_value} " in folded_question:
        return True
    if folded_value and folded_value in folded_question and len(folded_value) >= 4:
        return True
    numbers = _numbers(value, vocab)
    return bool(numbers) and set(numbers) <= set(_numbers(question, vocab))


def _partial(param: EntityParam, text: str, gazetteer: Gazetteer, engine: Engine | None) -> str | None:
    """A part of a name ('Eduardo', 'time de Dados') that names exactly one entity, or None."""
    if param.resolve is not None and engine is not None:
        from tools.business.resolvers import resolve_reference

        try:
            found = resolve_reference(param.resolve, text, engine)
        except Exception:  # noqa: BLE001 - store unavailable: not resolvable here
            return None
        return found if isinstance(found, str) else None
    wanted = fold(text).split()
    keys = {key for surface, key in gazetteer.get(param.source, []) if wanted and all(w in surface.split() for w in wanted)}
    return keys.pop() if len(keys) == 1 else None
