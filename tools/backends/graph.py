"""Graph: named graph patterns first, then text-to-Cypher with the graph's schema, dialect notes and repair.

The local model writes bad Cypher paths, so the traversals the company declared
(`Settings.graph_patterns_file()`, see `tools.graph_patterns`) answer first: a clear pattern with
every parameter found costs no LLM call, and its Cypher runs with the values as query parameters.
Anything else (no clear pattern, a parameter that cannot be filled, an execution error, a missing
or broken patterns file) falls back to today's guarded text-to-Cypher with repair. Both paths go
through `GraphTool.query` (guard, read-only, row cap), and the context records which one answered
(`path`: "pattern:<name>" or "fallback") with the Cypher and parameters actually run.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tools.backends.base import PART_JOINER, BackendCall, Finding, pointing_split, render_about, row_findings
from tools.services import Services
from tramita.base.text import fields_asked, fold, phrase_starts

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from tools.graph_patterns import PatternAttempt, PatternEngine

log = logging.getLogger("tramita.graph")

MAX_ROWS = 50


class GraphBackend:
    """The company graph (LadybugDB embedded, or Bolt), read-only."""

    name = "graph"
    citation = "graph"
    planner_description = ("the graph: relationships such as who is on call, service dependencies direct or indirect, "
                           "downstream impact, management chains and reporting lines")
    # writes its own query over records: may answer what the database failed to query (`Plan.standby`)
    stands_in = True

    def available(self, services: Services) -> bool:
        """Whether the graph database opens."""
        return services.graph_tool.available()

    def run(self, call: BackendCall) -> dict[str, Any]:
        """A named pattern when one fits; otherwise generate, validate and repair a Cypher query."""
        from tools.cypher_guard import inline_parameters
        from tools.text_to_cypher import MissedLabelError, answer_cypher

        tool = call.services.graph_tool
        # its own part of the question first, then each piece of a part the planner joined (one
        # piece may ask for an aggregate that is not the graph's, the other for a relation it
        # holds); the whole question when the part alone names too little ("… Name the services too")
        pieces = call.question.split(PART_JOINER) if PART_JOINER in call.question else []
        for text in dict.fromkeys([call.question, *pieces, call.whole or call.question]):
            attempt, reason = self._pattern(call, text)
            missed = self._missed(call, attempt.cypher) if attempt is not None and attempt.ok else []
            if attempt is not None and missed:  # a traversal over other records ("which projects…" answered with on-call shifts)
                reason = f"pattern {attempt.pattern} reads no {', '.join(missed)} record, which the question asks for"
            elif attempt is not None and attempt.ok:
                break
        trail = {"pattern_choice": attempt.choice.trace()} if attempt is not None else {}
        if attempt is not None and attempt.ok and not missed:
            return {"backend": self.name, "path": f"pattern:{attempt.pattern}",
                    # `query` is self-contained (values inlined as escaped literals) so that the
                    # evals and the synthesis prompt can read or re-run it; `cypher` + `params` is
                    # exactly what ran
                    "query": inline_parameters(attempt.cypher, attempt.params),
                    "cypher": attempt.cypher, "params": attempt.params, "rows": attempt.rows[:MAX_ROWS],
                    "error": None, "attempts": 1, "llm_filled": attempt.llm_filled,
                    "about": self._about(call, str(attempt.pattern), attempt.echoed, attempt.named),
                    **({"clause": attempt.clause} if attempt.clause else {}), **trail}
        asked = call.whole or call.question
        run = answer_cypher(asked, tool, today=call.today, backend=call.profile, usage=call.usage,
                            unsaid=self._unsaid(call, asked))
        missed = self._missed(call, run.query) if run.error is None and run.query else []
        if missed:  # rows of other records: a failed query, which the plan's standby may answer
            run.rows = []
            run.error = (f"{MissedLabelError.__name__}: the query reads no {', '.join(missed)} record, which the "
                         "question asks for")
        return {"backend": self.name, "path": "fallback", "query": run.query, "cypher": run.query, "params": {},
                "rows": run.rows[:MAX_ROWS], "error": run.error, "attempts": run.attempts,
                "pattern_reason": reason, **({"unwritten": True} if run.error and not run.down else {}),
                **({"mended": run.mended} if run.mended else {}), **trail}

    def leaves_aggregate(self, services: Services, question: str) -> bool:
        """Whether a named pattern answers the question's relation but not its aggregate (see
        `PatternEngine.leaves_aggregate`): the planner then adds a source that aggregates.
        """
        engine = _patterns(services)
        if engine is None:
            return False
        try:
            sql = services.engine
        except Exception:  # noqa: BLE001 - no SQL store: names resolve through the graph only
            sql = None
        return engine.leaves_aggregate(question, engine=sql, tool=services.graph_tool)

    def answers_count(self, services: Services, question: str) -> bool:
        """Whether a named pattern answers the question's count itself (`PatternEngine.counts_itself`):
        a backend its words require then answers a one-part question alone.
        """
        engine = _patterns(services)
        return engine is not None and engine.counts_itself(question, engine=services.engine, tool=services.graph_tool)

    def required_by(self, services: Services, text: str) -> bool:
        """Whether the question names a relation of any depth (`PatternEngine.names_closure`): the
        graph is then in the plan whatever the scores say, as the documents are for a named policy.
        """
        engine = _patterns(services)
        return engine is not None and engine.names_closure(text)

    def defers(self, services: Services, text: str) -> bool:
        """Whether the text asks for a relation the database also holds one join away (the patterns
        near it are `mirrored`): the planner then gives the graph's place to the database, which
        the data's own convention keeps for records and their direct links; the graph stays for
        what only it holds and for relations of any depth.
        """
        engine = _patterns(services)
        return engine is not None and engine.mirrored(text, engine=services.engine, tool=services.graph_tool)

    def names_nothing(self, services: Services, text: str) -> bool:
        """Whether `text` names no node the graph holds and comes near no named pattern
        (`PatternEngine.names_nothing`); without a patterns file, nothing is known: False.
        """
        engine = _patterns(services)
        return engine is not None and engine.names_nothing(text, engine=services.engine, tool=services.graph_tool)

    def findings(self, context: dict[str, Any]) -> list[Finding]:
        """The rows' text columns: the set a later backend's part of the question is about."""
        return row_findings(context)

    def render(self, context: dict[str, Any]) -> str:
        """The rows, tagged [graph]; a pattern's rows come with what the pattern finds, so the model
        reads "manager | role" as the person's manager and not the other way round.
        """
        return render_about(self.citation, context)

    @staticmethod
    def _about(call: BackendCall, name: str, echoed: dict[str, Any] | None = None,
               named: dict[str, str] | None = None) -> str:
        """The first sentence of pattern `name`'s description ("" when it cannot be read), with the
        records the question named for its parameters ("manager: André Figueiredo") and the values
        of the columns left out because every row held the one value the question gave ("every
        row: week 2026-W21"). Why: without them, ten shifts of a person in the week asked about
        read as rows of no week, and the model answered that the person was not on call; and "how
        many people report to X" was answered as X reporting to them.
        """
        from tools.graph_patterns import PatternEngine, described

        try:
            about = PatternEngine.for_file(call.services.settings.graph_patterns_file()).patterns.pattern(name).about()
        except Exception:  # noqa: BLE001 - only context for synthesis
            return ""
        return described(about, named, echoed)

    def warm(self, services: Services, today: str, profile: str | None) -> dict[str, object]:
        """The text-to-Cypher prompt's static prefix for `today` (patterns need no call on a clear match)."""
        from tools.text_to_cypher import warm_cypher

        return {"text_to_cypher": warm_cypher(services.graph_tool, today=today, backend=profile)}

    def field_words(self, services: Services) -> dict[str, list[str]]:
        """Property → its words, for every property of the graph's schema ("office_city"): a field
        another source also names is no field only that source holds.
        """
        schema = services.graph_tool.schema()
        props = [p.name for n in schema.nodes for p in n.props] + [p.name for r in schema.rels for p in r.props]
        # the columns a mirrored pattern's relation is in the database ("employees.manager_id" for
        # REPORTS_TO): the graph holds that field too
        engine = _patterns(services)  # the process-wide engine: the planner asks on every question
        forms = [p.mirrored for p in engine.patterns.patterns if p.mirrored is not None] if engine is not None else []
        props += [f.rsplit(".", 1)[-1] for form in forms for f in [*form.columns.values(), *form.keys.values()]]
        return {name: [name.replace("_", " ")] for name in dict.fromkeys(props)}

    def vocabulary(self, services: Services) -> list[str]:
        """What the graph answers: the named patterns' descriptions and examples (the planner embeds these)."""
        from tools.backends.vocabulary import graph_patterns_vocabulary

        return graph_patterns_vocabulary(services.settings.graph_patterns_file())

    @staticmethod
    def _unsaid(call: BackendCall, question: str) -> Callable[[str], list[str]] | None:
        """The fallback's check that its query names only records the question names (see
        `tools.graph_patterns.unsaid_values`); None without a usable patterns file (no gazetteer).
        """
        try:
            engine = _patterns(call.services)
        except Exception as exc:  # noqa: BLE001 - a bad file is reported by the pattern path already
            log.warning("graph patterns unusable for the fallback's value check: %s", exc)
            return None
        if engine is None:
            return None
        sql = _sql_engine(call.services)
        return lambda query: engine.unsaid(query, question, engine=sql, tool=call.services.graph_tool)

    @staticmethod
    def _missed(call: BackendCall, query: str) -> list[str]:
        """The node labels the graph's part asks for that `query` does not read (see
        `tools.graph_patterns.missed_labels`); none without a usable patterns file. With a later
        source to build on its rows, what the question counts and the pieces that point back are
        that source's ("os serviços que dependem do X tiveram quantos incidentes?", "…, and how
        many incidents did each of them have?").
        """
        asked = call.question
        if call.feeds:
            pieces, at = pointing_split(asked)
            for piece in pieces[at:] if at else []:
                asked = asked.replace(piece, " ")
            asked = _without_counted(asked)
        try:
            engine = _patterns(call.services)
            return [] if engine is None else engine.missed(query, asked, call.services.graph_tool)
        except Exception as exc:  # noqa: BLE001 - a bad file is reported by the pattern path already
            log.warning("graph patterns unusable for the fallback's label check: %s", exc)
            return []

    @staticmethod
    def _pattern(call: BackendCall, question: str) -> tuple[PatternAttempt | None, str]:
        """(the pattern attempt or None, the reason it did not answer). Never raises: any problem of
        the pattern path is a reason to fall back, logged so a broken patterns file is noticed.
        """
        from tools.graph_patterns import PatternEngine

        path = call.services.settings.graph_patterns_file()
        if not path.exists():
            return None, f"no patterns file at {path}"
        try:
            engine = PatternEngine.for_file(path)
        except Exception as exc:  # noqa: BLE001 - a bad file names itself; the fallback still answers
            log.warning("graph patterns unusable: %s", exc)
            return None, f"patterns file unusable: {exc}"[:400]
        sql = _sql_engine(call.services)
        given = "\n".join([f.text for f in call.given] + [", ".join(f.values) for f in call.given])
        focus = fields_asked("\n".join(f.text for f in call.given if f.text), call.whole or question)
        try:
            question = engine.referent(question, given, focus, engine=sql, tool=call.services.graph_tool,
                                       whole=call.whole)
            attempt = engine.answer(question, tool=call.services.graph_tool, today=call.today, usage=call.usage,
                                    backend=call.profile, engine=sql, rows_for_later=call.feeds, given=given,
                                    focus=focus)
        except Exception as exc:  # noqa: BLE001 - embeddings or store trouble: the fallback still answers
            log.warning("graph patterns failed: %s", exc)
            return None, f"pattern path failed: {type(exc).__name__}: {exc}"[:400]
        return attempt, attempt.reason


def _sql_engine(services: Services) -> Engine | None:
    """The SQL store's engine for the patterns' gazetteer; None without one (names then resolve
    through the graph or the LLM only).
    """
    try:
        return services.engine
    except Exception:  # noqa: BLE001 - no SQL store is a deployment, not an error
        return None


def _patterns(services: Services) -> PatternEngine | None:
    """The deployment's pattern engine for the planner's hooks; None without a patterns file."""
    from tools.graph_patterns import PatternEngine

    path = services.settings.graph_patterns_file()
    return PatternEngine.for_file(path) if path.exists() else None


def _without_counted(text: str) -> str:
    """`text` without each count cue and the two words after it ("quantos incidentes", "how many
    open tickets"): what a question counts.
    """
    from tools.semantic_layer import folded_cues

    words = re.findall(r"\S+", text)
    folded = [fold(re.sub(r"\W", "", w)) for w in words]
    cut: set[int] = set()
    for phrase in folded_cues().aggregations.get("count", ()):
        size = len(phrase.split())
        for i in phrase_starts(folded, phrase.split()):
            cut |= set(range(i, i + size + 2))
    return " ".join(w for i, w in enumerate(words) if i not in cut)
