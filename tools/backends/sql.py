"""SQL: the semantic layer first, raw text-to-SQL with repair when it cannot express the question.

Measured on this project's questions: the small local model writes wrong joins and filters when it
writes SQL from scratch, and fills a small typed query object well. So the backend asks the semantic
layer first (`tools.semantic_layer`: one LLM call fills the object, or none when
`tools.semantic_direct` accounts for every word; boring-semantic-layer compiles it) and falls back to
text-to-SQL over the linked schema (`tools.text_to_sql`) when the LLM says the model cannot express
the question or the object is refused; the fallback's SQL gets the deterministic mends of
`tools.sql_mend` first (ranked codes read on their scale, anti-joins as left joins). Both paths run their SQL through
SQLTool's read-only guard; the context records which one answered (`path`).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tools.backends.base import BackendCall, Finding, bounded_question, question_parts, render_about, row_findings
from tools.services import Services
from tramita.base.policyfile import PolicyError
from tramita.base.text import fields_asked, fold

log = logging.getLogger("tramita.sql")

if TYPE_CHECKING:
    from tools.semantic_layer import SemanticLayer
    from tools.sql_tool import SQLTool
    from tools.sql_values import ValueIndex


class SQLBackend:
    """The business database, read-only (SELECT only, on a read-only connection)."""

    name = "sql"
    citation = "SQL"
    planner_description = ("the database: counts, sums, averages, lists and statuses of business records "
                           "(amounts, dates, people, teams, owners)")
    # counts, sums and averages over a set another source found ("the expenses of everyone under X")
    aggregates = True
    # writes its own query over records: may answer what the graph failed to query (`Plan.standby`)
    stands_in = True

    def available(self, services: Services) -> bool:
        """Whether the read-only connection answers."""
        return services.sql_tool.available()

    def run(self, call: BackendCall) -> dict[str, Any]:
        """The semantic path's rows, or else text-to-SQL's (generate, validate, repair); the context
        says which path answered, with the query object and the reason for a fallback.
        """
        from tools.semantic_layer import answer_semantic
        from tools.text_to_sql import answer_sql

        tool = call.services.sql_tool
        documents = _documents(call)
        read = replace(call, given=(*call.given, *documents))
        bounded = bounded_question(call.question, read.given)
        question = _named_referent(read, bounded)
        # a referent the passages name is what the part points at (their other names are not
        # heard: "that partner" after a passage naming the role was filled with the role); else the
        # stored values the rest of the question names are (`_antecedent`)
        if question == bounded:
            call = replace(call, given=(*call.given, *_antecedent(call), *documents))
            question = bounded_question(call.question, call.given)
        else:
            call = replace(read, given=tuple(replace(f, text="") for f in read.given))
        mirrored = _mirrored(call, question)
        if mirrored is not None:
            return mirrored
        sem = answer_semantic(question, tool, call.services.settings.semantic_model_file(), today=call.today,
                              backend=call.profile, usage=call.usage, given=call.given,
                              found=_unsaid_found(call, question, bounded))
        if sem.ok or sem.fatal:
            path = "semantic:document" if sem.document else "semantic:direct" if sem.direct else "semantic"
            context = {"backend": self.name, "path": path,
                       "semantic_query": sem.query_object, "query": sem.sql, "rows": sem.rows[:50],
                       "error": None if sem.ok else sem.reason, "attempts": sem.attempts, "settled": sem.settled}
            if question != call.question:
                context["bounded_question"] = question
            if sem.document:  # what the rows are: each is past (or within) the document's figure
                context["about"] = sem.document
            return {**context, "accounted": sem.accounted} if sem.direct else context
        record = _record(call, question, sem.reason)
        if record is not None:
            return record
        run = answer_sql(_with_findings(call, question), tool, today=call.today, backend=call.profile, usage=call.usage,
                         mend=_mender(call, question))
        return {"backend": self.name, "path": "fallback", "semantic_query": sem.query_object,
                "semantic_error": sem.reason, "query": run.query, "rows": run.rows[:50], "error": run.error,
                **({"unwritten": True} if run.error and not run.down else {}),
                "attempts": sem.attempts + run.attempts, **({"mended": run.mended} if run.mended else {}),
                **({"bounded_question": question} if question != call.question else {})}

    def findings(self, context: dict[str, Any]) -> list[Finding]:
        """The rows' text columns, for a backend that runs after this one (see the planner's `chain`)."""
        return row_findings(context)

    def render(self, context: dict[str, Any]) -> str:
        """The rows as a small table tagged [SQL] (every path alike), with what they are when a
        mirrored pattern's form answered (`about`).
        """
        return render_about(self.citation, context)

    def warm(self, services: Services, today: str, profile: str | None) -> dict[str, object]:
        """The semantic query prompt's static prefix, evaluated before the first question."""
        from tools.semantic_layer import warm_semantic

        return {"semantic_query": warm_semantic(services.sql_tool, services.settings.semantic_model_file(),
                                                backend=profile)}

    def names_nothing(self, services: Services, text: str) -> bool:
        """Whether `text` names nothing the semantic model holds (no entity, member, segment or
        value by its words, no stored value). Why: the small model fills a query for any question,
        and "how many days a year may I work abroad" came back as the employees hired per year.
        """
        from tools.semantic_layer import layer_for

        tool = services.sql_tool
        layer = layer_for(services.settings.semantic_model_file(), tool)
        return not layer.names_anything(text, _values(tool).triples(text))

    def required_by(self, services: Services, text: str) -> bool:
        """Whether the question ranks records the semantic model holds (`SemanticLayer.ranks_records`:
        "who commanded the longest incident"), or asks a column of one record it names by its key
        (`SemanticLayer.asks_about_record`): only the rows answer those.
        """
        layer = _layer(services)
        if layer is None:
            return False
        if layer.ranks_records(text):
            return True
        try:
            hits = _values(services.sql_tool).triples(text)
        except Exception:  # noqa: BLE001 - no database: nothing to require
            return False
        return layer.asks_about_record(text, hits)

    def counts_records(self, services: Services, text: str) -> bool:
        """Whether the question counts records the semantic model holds (`SemanticLayer.counts_records`:
        "how many hardware expenses passed it"); the planner requires the database for it unless
        another backend answers that count itself.
        """
        layer = _layer(services)
        return layer is not None and layer.counts_records(text)

    def compares_with_documents(self, services: Services, text: str) -> bool:
        """Whether the question compares rows the database holds, named by their stored values, with
        a figure (`SemanticLayer.compares_rows`): when it also names a kind of document, "which
        transport expenses passed the policy's limit" needs the records as well as the policy.
        """
        from tools.semantic_layer import layer_for

        tool = services.sql_tool
        try:
            layer = layer_for(services.settings.semantic_model_file(), tool)
            hits = _values(tool).triples(text)
        except Exception:  # noqa: BLE001 - no model or no database: nothing to require
            return False
        today = dt.date.today().isoformat()  # periods are no stored values: any day reads them alike
        return layer.compares_rows(text, layer.named_values(text, hits, today))

    def names_by_state(self, services: Services, phrase: str) -> bool:
        """Whether a two-word `phrase` names rows the database holds by their state ("open tickets"),
        read from the semantic model (`SemanticLayer.names_by_state`).
        """
        from tools.semantic_layer import layer_for

        first, _, second = phrase.partition(" ")
        layer = layer_for(services.settings.semantic_model_file(), services.sql_tool)
        return bool(second) and layer.names_by_state(first, second)

    def vocabulary(self, services: Services) -> list[str]:
        """What the database holds, in the semantic model's words (the planner embeds these)."""
        from tools.backends.vocabulary import semantic_model_vocabulary

        return semantic_model_vocabulary(services.settings.semantic_model_file())

    def field_words(self, services: Services) -> dict[str, list[str]]:
        """Column → the words naming it or the join role on it (the semantic model's)."""
        from tools.backends.vocabulary import semantic_model_fields

        return semantic_model_fields(services.settings.semantic_model_file())


def _layer(services: Services) -> SemanticLayer | None:
    """The semantic layer, or None when the model file cannot be read (what needs it is then skipped;
    `answer_semantic` reports the file's error, and a planner hook requires nothing).
    """
    from tools.semantic_layer import layer_for

    try:
        return layer_for(services.settings.semantic_model_file(), services.sql_tool)
    except (PolicyError, OSError):
        return None


def _mender(call: BackendCall, question: str) -> Callable[[str], tuple[str, list[str]]] | None:
    """The semantic layer's `mend_sql` for this question; none when the model cannot be read (the
    fallback then runs the model's SQL as written).
    """
    layer = _layer(call.services)
    return None if layer is None else (lambda sql: layer.mend_sql(sql, question))


def _values(tool: SQLTool) -> ValueIndex:
    """The database's value index (cached per URL by `tools.sql_values`)."""
    from tools.sql_schema import load_schema
    from tools.sql_values import value_index

    return value_index(tool.url, tool.query, load_schema(tool.schema_path))


def _mirrored(call: BackendCall, question: str) -> dict[str, Any] | None:
    """The context of a relation a mirrored graph pattern names (a person's manager, a team's
    services), answered from the pattern's database form with the pattern's own slot filling and
    no LLM call; None when no such pattern fits, or its query fails (the LLM's fill then answers,
    and the failure is not lost: it is logged).

    Why: the small model's fill for "who are X's direct reports" joined the manager the wrong way
    round; the pattern's typed extraction resolves the person and the form holds the join.
    """
    from tools.graph_patterns import MirroredQuery, PatternEngine
    from tools.semantic_layer import answer_object, folded_cues, ranking_words

    if call.given:  # an earlier source's set bounds this part: the LLM's fill binds it
        return None
    tokens = fold(question).split()
    if ranking_words(tokens) or folded_cues().order & set(tokens):
        return None  # "the most recent incident of X": a ranking the form does not hold
    path = call.services.settings.graph_patterns_file()
    layer = _layer(call.services)

    def form(count: bool) -> tuple[MirroredQuery | None, list[str]]:
        # the graph as every caller passes it: a store that is down leaves its names out of the
        # gazetteer (build_gazetteer), so no availability query per question is needed
        found = PatternEngine.for_file(path).database_query(question, engine=call.services.engine,
                                                            tool=call.services.graph_tool, count=count)
        beyond = layer.names_beyond(found.query, question, found.surfaces) if found and layer else []
        return found, beyond

    try:
        # "how many …, and who are they?": the rows, whose number the answer reads off them
        found, beyond = form(count=not question_parts(question)) if path.exists() else (None, [])
        if found is not None and beyond and found.query.get("measures"):
            found, beyond = form(count=False)
    except Exception as exc:  # noqa: BLE001 - no form: the semantic fill answers
        log.warning("mirrored patterns unusable: %s", exc)
        return None
    if found is None:
        return None
    said = f" {' | '.join(_words(s) for s in found.surfaces)} "
    if any(f" {_words(h.value)} " not in said for h in _values(call.services.sql_tool).match(question)):
        return None  # a stored value beyond the pattern's parameters: a condition the form does not hold
    if beyond:
        log.info("mirrored pattern %s left to the fill: the question names %s", found.pattern, ", ".join(beyond))
        return None
    name = found.pattern
    sem = answer_object(found.query, call.services.sql_tool, call.services.settings.semantic_model_file())
    if not (sem.ok or sem.fatal):
        log.warning("mirrored pattern %s: %s", name, sem.reason)
        return None
    return {"backend": SQLBackend.name, "path": f"semantic:pattern:{name}", "semantic_query": sem.query_object,
            "query": sem.sql, "rows": sem.rows[:50], "error": None if sem.ok else sem.reason, "attempts": 0,
            "about": found.about}


def _record(call: BackendCall, question: str, reason: str) -> dict[str, Any] | None:
    """The context of the one record the question names by its key (`SemanticLayer.record_query`),
    when the semantic fill failed (`reason`); None when it names none, or the query fails (raw
    text-to-SQL then answers). No LLM call.
    """
    from tools.semantic_layer import answer_object

    layer = _layer(call.services)
    if layer is None or any(f.values for f in call.given):  # an earlier source's set bounds this part
        return None
    try:
        hits = _values(call.services.sql_tool).triples(question)
        query = layer.record_query(question, [*hits, *_stored_codes(question, layer, call.services.sql_tool, hits)])
    except Exception as exc:  # noqa: BLE001 - no record lookup: the fallback answers
        log.warning("record lookup unusable: %s", exc)
        return None
    if query is None:
        return None
    sem = answer_object(query, call.services.sql_tool, call.services.settings.semantic_model_file())
    if not sem.ok or not sem.rows:
        log.info("record lookup left to the fallback: %s", sem.reason or "no row")
        return None
    return {"backend": SQLBackend.name, "path": "semantic:record", "semantic_query": sem.query_object,
            "semantic_error": reason, "query": sem.sql, "rows": sem.rows[:50], "error": None, "attempts": 0}


_CODE = re.compile(r"(?<![\w-])[A-Za-z]+-\d+(?![\w-])")


def _stored_codes(question: str, layer: SemanticLayer, tool: SQLTool,
                  hits: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """(table, key column, value) of each record code the question writes ("EXP-0150") that an
    entity's primary key stores and the value index did not hear: it links no column of more
    distinct values than a list of choices, which a table of claims has.
    """
    codes = sorted({c for c in _CODE.findall(question)} - {v for _, _, v in hits})
    if not codes:
        return []
    listed = ", ".join(f"'{c}'" for c in codes)  # letters, digits and a hyphen only: no quoting to escape
    out: list[tuple[str, str, str]] = []
    for name, ent in layer.spec.entities.items():
        if not ent.primary_key:
            continue
        table = ent.table_name(name)
        rows = tool.query(f"SELECT {ent.primary_key} AS k FROM {table} WHERE {ent.primary_key} IN ({listed})")
        out += [(table, ent.primary_key, str(r["k"])) for r in rows]
    return out


def _words(text: str) -> str:
    """The folded words of `text`, hyphens and punctuation as spaces ("auth-service" ~ "Auth Service")."""
    return " ".join(re.findall(r"\w+", fold(text)))


def _unsaid_found(call: BackendCall, question: str, bounded: str) -> tuple[str, ...]:
    """The stored values the part's query may be bounded by that the user did not say: the name
    written in for what the part points at (`_named_referent`) and the values earlier sources'
    rows hold, less those the part itself says.
    """
    index = _values(call.services.sql_tool)
    said = {fold(h.value) for h in index.match(bounded, limit=None)}
    named = [h.value for h in index.match(question, limit=None)] if question != bounded else []
    rows = [v for f in call.given for v in f.values]
    return tuple(v for v in dict.fromkeys([*named, *rows]) if fold(v) not in said)


def _antecedent(call: BackendCall) -> tuple[Finding, ...]:
    """The stored values the rest of the question names, as findings, when this backend's part
    points back at them ("O expense-portal tem plantão? E quantos tickets dele estão ativos?") and
    no earlier backend found a set for it.

    Why: the part alone ("quantos tickets dele estão ativos") names no service, and the query
    counted every active ticket; the graph, which ran first, found no shift to bound it by.
    """
    from tools.semantic_layer import folded_cues

    if not call.whole or call.question == call.whole or any(f.values for f in call.given):
        return ()
    if not folded_cues().references & set(fold(call.question).split()):
        return ()
    rest = call.whole.replace(call.question, " ", 1)
    hits = _values(call.services.sql_tool).match(rest)
    return tuple(Finding(backend="question", values=(v,)) for v in dict.fromkeys(h.value for h in hits))


def _documents(call: BackendCall) -> tuple[Finding, ...]:
    """The whole text of the documents an earlier stage's passages come from, as one finding whose
    `passages` the figures are read in (`tools.doc_figures`); none without such documents, or when
    the store cannot be read (the shown passages are read instead).

    Why: the passage search ranks a question's words, and "o teto por pedido de hardware" found the
    expense policy but not the table of limits in it; the table is in the document it found.
    """
    ids = list(dict.fromkeys(d for f in call.given for d in f.documents))
    if not ids:
        return ()
    try:
        text = "\n".join(call.services.doc_store.document_text(d) for d in ids)
    except Exception:  # noqa: BLE001 - a store that cannot be read: the shown passages stand
        return ()
    return (Finding("docs", passages=text),) if text.strip() else ()


def _named_referent(call: BackendCall, question: str) -> str:
    """`question` with the one name an earlier source's passages hold for what it points back at,
    written after the word that points ("… reportam a ela (ela: X)"), when the part says a
    reference word or pronoun, no earlier source found a set, and the passages name exactly one
    stored label of the kinds the part asks about (`SemanticLayer.referents`).

    Why: the part alone ("quantas pessoas reportam direto a ela") names nobody, and the query
    counted everyone who has a manager; the person is in the passage the documents found.
    """
    from tools.semantic_layer import pointing_words

    if any(f.values for f in call.given):
        return question
    text = "\n".join(f.text for f in call.given if f.text)
    said = pointing_words(question)
    layer = _layer(call.services) if text.strip() and said else None
    if layer is None:
        return question
    # every name the passages hold: the value index's default cap keeps the longest few, and long
    # service names crowded the one person out
    group = _clause_group(call, layer, text, question)
    if group:
        return f"{question} ({said[0]}: {', '.join(group)})"
    found = _values(call.services.sql_tool).triples(text, limit=None)
    names = layer.referents(question, found)
    asked = call.whole or question
    # the bracket the question's own figure is in names its person first, by name or by a title
    # alone ("approval by the CFO"); else the one name, or the one the field the question says holds
    bracket = _figure_named(text, asked, names, layer.referents(question, found, labels=False))
    if bracket:
        names = bracket
    elif len(names) > 1:
        names = _field_named(text, asked, names) or names
    return f"{question} ({said[0]}: {names[0]})" if len(names) == 1 else question


def _clause_group(call: BackendCall, layer: SemanticLayer, text: str, question: str) -> list[str]:
    """The stored values of a column the part names by its words ("the offices that partner
    covers") that the passage clause holding the value of that column the whole question names also
    holds ("…; Y para A, B e C" after "new hires in C"), when every such clause holds the same values
    and they are more than the question names; [] otherwise, or when the part names a value of that
    column itself.

    Why: a rule lists its cases in clauses ("X for A and B; Y for C, D and E"); the question names
    one member of a case and asks about the whole case, which the part alone does not name.
    """
    index = _values(call.services.sql_tool)
    named: dict[tuple[str, str], set[str]] = {}
    for h in index.match(call.whole or question, limit=None):
        named.setdefault((h.table, h.column), set()).add(h.value)
    own = {(h.table, h.column) for h in index.match(question, limit=None)}
    columns = [c for c in layer.columns_named(question, named) if c not in own]
    groups: set[tuple[tuple[str, str], tuple[str, ...]]] = set()
    for clause in re.split(r"[\n;]|(?<=[.!?])\s", text) if columns else []:
        found = index.match(clause, limit=None)
        for column in columns:
            held = dict.fromkeys(h.value for h in found if (h.table, h.column) == column)
            values = tuple(sorted(held, key=lambda v: _words(clause).find(_words(v))))  # as the clause lists them
            if named[column] & set(values):
                groups.add((column, values))
    if len(groups) != 1:
        return []
    (column, values), = groups
    return list(values) if set(values) - named[column] else []


def _field_named(text: str, asked: str, names: list[str]) -> list[str]:
    """The one of `names` that the first "Label: value" field of the passages whose label the
    question says holds ("The postmortem names an incident commander. How many incidents has that
    person commanded?" → "Incident commander: X"); [] when no such field names exactly one.

    Why: the passages come from several documents of one kind (every postmortem names a
    commander, authors, action owners), so they name many people; the question says which role it
    means, and the best-ranked passage comes first.
    """
    for value in fields_asked(text, asked):
        held = [n for n in names if f" {_words(n)} " in f" {_words(value)} "]
        if held:
            return held if len(held) == 1 else []
    return []


def _figure_named(text: str, asked: str, names: list[str], titles: list[str]) -> list[str]:
    """The one of `names` (else of `titles`, the people's other stored words) that the tightest
    passage line whose bounds hold a figure the question states names ("a 300k/year contract" →
    "Contracts above 250000 USD per year are signed by the CEO, X", not the lower bracket "above
    50000 … by the CFO"); [] when no such line names one of them, or the first that does names
    more than one.

    Why: a policy names a person per bracket (who signs, who approves), and the passages name
    several; the question's own figure says which bracket it is in.
    """
    from tools.doc_figures import amounts, bounding_lines

    for amount, unit in amounts(asked):
        for line in bounding_lines(text, amount, unit, asked):  # the tightest bracket naming any of them
            for group in (names, titles):  # a name before a title the same line gives ("the CEO, X")
                held = [n for n in group if f" {_words(n)} " in f" {_words(line)} "]
                if held:
                    return held if len(held) == 1 else []
    return []


def _with_findings(call: BackendCall, question: str) -> str:
    """The question for raw text-to-SQL, followed by the sets earlier backends found (it has no
    value linking of its own for them).
    """
    sets = [f"{f.column + ': ' if f.column else ''}{', '.join(f.values)}" for f in call.given if f.values]
    return f"{question}\n(Found earlier — {'; '.join(sets)})" if sets else question
