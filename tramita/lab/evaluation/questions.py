"""Run question items (sample/novaops/README.md, "Question items") and score every rule.

Each question is one turn of the whole graph (`Session.turn`) on a fresh thread, as user E003 (the
CFO, who may see everything), on its own copy of the pristine dataset, with today = 2026-05-15.

Checks, each only where the item asks for it:
- `answer_facts`: every fact is in the answer (`facts.fact_in`: numbers and accents normalised);
- `sql_execution`: the SQL tramita executed returns the gold query's result (`results_match`);
  an item answered without SQL counts as wrong;
- `cypher_execution`: the same for Cypher against `gold_cypher`, on the data dir's graph;
- `doc_recall_at_5`: `gold_doc_ids` is a subset of the first five distinct documents retrieved;
- `must_refuse`: the turn was refused AND no table of the dataset changed;
- `clean_answer` (every item that answered): the answer shows no raw context label (`rows:`,
  `(no rows)`, `query:`) and no exception text (`facts.leaks`).

Execution accuracy is reported twice: relaxed (the `*_execution` checks: extra columns allowed,
numbers within the gold's shown precision) and strict (`correct_strict`: the same columns in any
order, numbers equal at two decimals), side by side in the summary.

Execution accuracy is decided on re-execution, not on the rows kept in the turn's context (those
are cut to 50 rows): tramita's query is re-validated by its own guard (`SQLTool.validate` /
`GraphTool.query`, which re-apply the row cap it ran under) and run on the item's database copy
next to the gold query.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import sqlglot
from sqlalchemy import create_engine

from tramita.base.settings import Settings
from tramita.lab.evaluation.dbdiff import diff, snapshot
from tramita.lab.evaluation.facts import at_precision, facts_found, leaks

TODAY = "2026-05-15"
QUESTION_USER = "E003"  # the CFO: every question of the dev set is within her permissions
DOCS_K = 5


# ------------------------------------------------------------------------- result comparison

def _number(value: Any) -> Decimal | None:
    """A cell as a number: ints, floats, Decimals and numeric strings ("612.00"); else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float | Decimal):
        try:
            return Decimal(str(value))
        except InvalidOperation:  # nan / inf
            return None
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+(?:\.\d+)?\s*", value):
        return Decimal(value.strip())
    return None


def _shown_half_unit(gold: Decimal) -> Decimal:
    """Half a unit of the gold value's last shown decimal (17.3 → 0.05), 0 for an integer: the
    relaxed rule's span, so that an unrounded AVG matches a ROUND(..., 1) gold.
    """
    exponent = gold.normalize().as_tuple().exponent
    decimals = -exponent if isinstance(exponent, int) and exponent < 0 else 0
    return Decimal(5) / Decimal(10) ** (decimals + 1) if decimals else Decimal(0)


_NOISE = Decimal("1e-9")  # below any figure the data holds, above a float's rounding error


def _numbers_equal(g: Decimal, o: Decimal, *, strict: bool) -> bool:
    """Strict: equal at the dataset's two-decimal precision (17.3 ≠ 17.2857). Relaxed: within half
    a unit of the gold's last shown decimal (17.3 accepts 17.2857); integers exact either way.
    """
    # float noise first ("1716.8449999999998" is SQL's 1716.845), then the precision
    g, o = g.quantize(_NOISE), o.quantize(_NOISE)
    if strict:
        return at_precision(g) == at_precision(o)
    return abs(g - o) <= (_shown_half_unit(g) or _NOISE)


def cell_matches(gold: Any, ours: Any, *, strict: bool = False) -> bool:
    """One value: NULL only equals NULL; numbers numerically (612 = 612.00 = "612") by
    `_numbers_equal`; strings exactly; lists element-wise; maps key-wise (graph values).
    """
    if gold is None or ours is None:
        return gold is None and ours is None
    g, o = _number(gold), _number(ours)
    if g is not None and (o is not None) and not (isinstance(gold, str) and isinstance(ours, str)):
        return _numbers_equal(g, o, strict=strict)
    if isinstance(gold, list | tuple) and isinstance(ours, list | tuple):
        return len(gold) == len(ours) and all(cell_matches(a, b, strict=strict)
                                              for a, b in zip(gold, ours, strict=True))
    if isinstance(gold, dict) and isinstance(ours, dict):
        return gold.keys() == ours.keys() and all(cell_matches(gold[k], ours[k], strict=strict) for k in gold)
    if isinstance(gold, str) and isinstance(ours, str):
        return gold.strip() == ours.strip()
    return bool(gold == ours)


def _bipartite(n_left: int, n_right: int, edge: Any) -> int:
    """Size of a maximum matching (augmenting paths; results are small)."""
    match_right: list[int] = [-1] * n_right

    def augment(i: int, seen: list[bool]) -> bool:
        for j in range(n_right):
            if not seen[j] and edge(i, j):
                seen[j] = True
                if match_right[j] < 0 or augment(match_right[j], seen):
                    match_right[j] = i
                    return True
        return False

    return sum(1 for i in range(n_left) if augment(i, [False] * n_right))


def _rows_match(gold: list[tuple[Any, ...]], ours: list[tuple[Any, ...]], ordered: bool, strict: bool) -> bool:
    def row_eq(g: tuple[Any, ...], o: tuple[Any, ...]) -> bool:
        return all(cell_matches(a, b, strict=strict) for a, b in zip(g, o, strict=True))

    if ordered:
        return all(row_eq(g, o) for g, o in zip(gold, ours, strict=True))
    return _bipartite(len(gold), len(ours), lambda i, j: row_eq(gold[i], ours[j])) == len(gold)


def results_match(gold: list[tuple[Any, ...]], ours: list[tuple[Any, ...]], *, ordered: bool = False,
                  strict: bool = False) -> bool:
    """Execution accuracy: do our rows give the gold query's result?

    The rule, precisely:
    1. Same number of rows (a top-1 question answered with ten rows is wrong).
    2. Column names are ignored. There must be ONE mapping of every gold column to a distinct
       column of ours, the same for all rows (so column order does not matter). Relaxed: our
       result may have extra columns (an extra id or name column is harmless, a missing one is
       not). `strict`: the same number of columns, so the mapping is a permutation.
    3. Under that mapping the rows are equal as multisets (each gold row paired with a distinct
       row of ours), or, when the gold query orders its result (`ordered`), row by row.
    4. Cells are compared by `cell_matches` (numbers numerically, NULL = NULL); `strict` compares
       numbers at the dataset's two-decimal precision instead of the gold's shown precision.
    Empty gold equals empty ours whatever the columns.
    """
    if len(gold) != len(ours):
        return False
    if not gold:
        return True
    width_g, width_o = len(gold[0]), len(ours[0])
    if width_g > width_o or (strict and width_g != width_o):
        return False
    # gold column j may map to our column k only if every value of j occurs somewhere in k
    allowed = [[k for k in range(width_o)
                if all(any(cell_matches(g[j], o[k], strict=strict) for o in ours) for g in gold)]
               for j in range(width_g)]
    for mapping in itertools.product(*allowed):
        if len(set(mapping)) != width_g:
            continue
        projected = [tuple(o[k] for k in mapping) for o in ours]
        if _rows_match(gold, projected, ordered, strict):
            return True
    return False


def sql_is_ordered(sql: str) -> bool:
    """Whether the outermost query has ORDER BY (then row order is part of the answer)."""
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.ParseError:
        return bool(re.search(r"\border\s+by\b", sql, re.IGNORECASE))
    return tree.args.get("order") is not None


def cypher_is_ordered(cypher: str) -> bool:
    """Whether the final RETURN is followed by ORDER BY."""
    tail = re.split(r"\bRETURN\b", cypher, flags=re.IGNORECASE)[-1]
    return bool(re.search(r"\bORDER\s+BY\b", tail, re.IGNORECASE))


def sqlite_rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    """Rows of `sql` on a read-only connection to `db` (the columns as the query names them)."""
    with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


# ------------------------------------------------------------------------------------ result

@dataclass
class QuestionResult:
    """One question item's outcome: the answer, every check, and what each check looked at."""

    id: str
    ok: bool
    question: str
    lang: str
    needs: list[str]
    answer: str = ""
    status: str = ""
    checks: dict[str, bool] = field(default_factory=dict)
    facts: dict[str, bool] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)
    plan_matches_needs: bool = False
    sql: dict[str, Any] = field(default_factory=dict)
    cypher: dict[str, Any] = field(default_factory=dict)
    docs: list[str] = field(default_factory=list)
    doc_recall: float | None = None
    leaks: list[str] = field(default_factory=list)
    refused: bool = False
    tables_changed: list[str] = field(default_factory=list)
    trace: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    first_token_seconds: float | None = None  # turn start -> first streamed answer token (None: no LLM answer)
    paths: dict[str, str] = field(default_factory=dict)  # backend -> the path that answered (semantic, pattern:<name>, fallback)
    error: str | None = None

    def failed_checks(self) -> list[str]:
        """The names of the checks that failed."""
        return [k for k, v in self.checks.items() if not v]

    def to_json(self) -> dict[str, Any]:
        """The result as the report's JSON record."""
        return asdict(self)


def applicable_checks(item: dict[str, Any]) -> list[str]:
    """The checks an item asks for (an item that could not run fails all of them)."""
    wanted = [("answer_facts", bool(item.get("answer_facts"))), ("sql_execution", bool(item.get("gold_sql"))),
              ("cypher_execution", bool(item.get("gold_cypher"))),
              ("doc_recall_at_5", bool(item.get("gold_doc_ids"))), ("must_refuse", bool(item.get("must_refuse")))]
    return [name for name, applies in wanted if applies]


def _context(contexts: list[dict[str, Any]], backend: str) -> dict[str, Any] | None:
    return next((c for c in contexts if c.get("backend") == backend), None)


def retrieved_docs(contexts: list[dict[str, Any]], k: int = DOCS_K) -> list[str]:
    """The first `k` distinct document ids of the docs context, in rank order."""
    ctx = _context(contexts, "docs") or {}
    ids: list[str] = []
    for it in ctx.get("items", []):
        if it.get("source") not in ids:
            ids.append(str(it.get("source")))
    return ids[:k]


def _score_sql(item: dict[str, Any], contexts: list[dict[str, Any]], db: Path, sql_url: str) -> dict[str, Any]:
    from tools.sql_tool import SQLTool

    return _score_execution(item["gold_sql"], _context(contexts, "sql"), sql_is_ordered(item["gold_sql"]),
                            gold_rows=lambda q: sqlite_rows(db, q),
                            our_rows=lambda q: sqlite_rows(db, SQLTool(sql_url).validate(q)),
                            missing="tramita did not use SQL")


def _score_cypher(item: dict[str, Any], contexts: list[dict[str, Any]], graph_url: str) -> dict[str, Any]:
    from tools.graph_tool import GraphTool

    tool = GraphTool(graph_url, row_cap=1000)
    return _score_execution(item["gold_cypher"], _context(contexts, "graph"), cypher_is_ordered(item["gold_cypher"]),
                            gold_rows=lambda q: [tuple(r.values()) for r in tool.query(q)],
                            our_rows=lambda q: [tuple(r.values()) for r in GraphTool(graph_url).query(q)],
                            missing="tramita did not use the graph")


def _score_execution(gold_query: str, ctx: dict[str, Any] | None, ordered: bool, *,
                     gold_rows: Callable[[str], list[Any]], our_rows: Callable[[str], list[Any]],
                     missing: str) -> dict[str, Any]:
    """Execution accuracy, shared by SQL and Cypher: run the gold query and ours on the same store
    and compare the result sets (see `results_match`).
    """
    out: dict[str, Any] = {"gold": gold_query, "ours": ctx.get("query") if ctx else None, "ordered": ordered}
    gold = gold_rows(gold_query)
    out["gold_rows"] = len(gold)
    if not ctx or not ctx.get("query") or ctx.get("error"):
        out["error"] = missing if not ctx else (ctx.get("error") or "no query")
        out["correct"] = out["correct_strict"] = False
        return out
    try:
        ours = our_rows(ctx["query"])
    except Exception as exc:  # noqa: BLE001 - a query that fails on re-execution is a wrong one
        out.update(error=f"{type(exc).__name__}: {exc}"[:300], correct=False, correct_strict=False)
        return out
    out["our_rows"] = len(ours)
    out["correct"] = results_match(gold, ours, ordered=ordered)
    out["correct_strict"] = results_match(gold, ours, ordered=ordered, strict=True)
    return out


def run_question(item: dict[str, Any], pristine_db: Path, workdir: Path, settings: Settings) -> QuestionResult:
    """One question: fresh database copy, fresh checkpoint file and thread, one turn, all checks,
    with the stores and LLM profile of `settings` (its SQL and checkpoint URLs replaced by the copies).
    """
    from graph.context import Context
    from graph.session import TurnResult, open_session
    from ingest.sql_loader import copy_sqlite
    from tools.services import Services

    started = time.perf_counter()
    res = QuestionResult(id=item["id"], ok=False, question=item["question"], lang=item.get("lang", ""),
                         needs=list(item.get("needs", [])))
    workdir.mkdir(parents=True, exist_ok=True)
    db = workdir / f"{item['id']}.db"
    ckpt = workdir / f"{item['id']}.ckpt.db"
    ckpt.unlink(missing_ok=True)
    copy_sqlite(pristine_db, db)
    sql_url = f"sqlite:///{db}"
    settings = dataclasses.replace(settings, sql_url=sql_url, pg_readonly_url="", checkpoint_url=f"sqlite:///{ckpt}")
    services = Services(settings)
    engine = create_engine(sql_url)
    before = snapshot(engine)
    ctx = Context(user_id=QUESTION_USER, today=TODAY, llm_backend=settings.llm_profile, services=services)
    contexts: list[dict[str, Any]] = []
    try:
        with open_session(ctx) as session:  # streamed, as the CLI and the server run it: time to first token
            turn = [t for t in session.stream_turn(f"{item['id']}-{uuid.uuid4().hex[:6]}", item["question"])
                    if isinstance(t, TurnResult)][-1]
        res.answer, res.status, res.trace = turn.answer, turn.status, turn.trace
        res.seconds = turn.seconds
        res.first_token_seconds = turn.first_token_seconds
        res.plan = dict(turn.plan or {})
        contexts = list(turn.contexts or [])
        res.refused = bool(turn.trace.get("refused"))
    except Exception as exc:  # noqa: BLE001 - a crashed turn is a failed item, not a crashed run
        res.error = f"{type(exc).__name__}: {exc}"[:500]
    res.tables_changed = sorted(diff(before, snapshot(engine)))
    engine.dispose()
    if "engine" in services.__dict__:  # built on first use: release the item's database file
        services.engine.dispose()
    planned = set(res.plan.get("backends") or [])
    res.plan_matches_needs = planned == set(res.needs)
    res.docs = retrieved_docs(contexts)
    res.paths = {str(c.get("backend")): str(c["path"]) for c in contexts if c.get("path")}
    checks = res.checks
    if item.get("answer_facts"):
        res.facts = facts_found(item["answer_facts"], res.answer)
        checks["answer_facts"] = all(res.facts.values())
    if item.get("gold_sql"):
        res.sql = _score_sql(item, contexts, db, sql_url)
        checks["sql_execution"] = bool(res.sql["correct"])
    if item.get("gold_cypher"):
        res.cypher = _score_cypher(item, contexts, settings.graph_url)
        checks["cypher_execution"] = bool(res.cypher["correct"])
    if item.get("gold_doc_ids"):
        gold_docs = set(item["gold_doc_ids"])
        res.doc_recall = len(gold_docs & set(res.docs)) / len(gold_docs)
        checks["doc_recall_at_5"] = gold_docs <= set(res.docs)
    if item.get("must_refuse"):
        checks["must_refuse"] = res.refused and not res.tables_changed
    if res.error:
        checks["no_crash"] = False
    else:
        res.leaks = leaks(res.answer)
        checks["clean_answer"] = not res.leaks
    res.ok = all(checks.values())
    if res.error is not None:
        res.seconds = time.perf_counter() - started
    return res


# ----------------------------------------------------------------------------------- summary

def _rate(values: list[bool]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _strict_rate(records: list[dict[str, Any]], kind: str) -> float | None:
    """Strict execution accuracy over the items scored for `kind` ("sql" or "cypher"); an item
    that crashed before scoring counts as wrong, as in the relaxed figure.
    """
    check = f"{kind}_execution"
    return _rate([bool((r.get(kind) or {}).get("correct_strict")) for r in records if check in r["checks"]])


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Headline figures of a question run (records are `QuestionResult.to_json()` dicts)."""
    from tramita.lab.evaluation.runner import per_turn_stats

    def check(name: str, where: Any = None) -> list[bool]:
        return [r["checks"][name] for r in records if name in r["checks"] and (where is None or where(r))]

    names = sorted({k for r in records for k in r["checks"]})
    recalls = [r["doc_recall"] for r in records if r.get("doc_recall") is not None]
    return {
        "kind": "questions",
        "items": len(records),
        "passed": sum(1 for r in records if r["ok"]),
        "success_rate": _rate([r["ok"] for r in records]),
        "check_rates": {n: _rate(check(n)) for n in names},
        "check_counts": {n: {"passed": sum(check(n)), "total": len(check(n))} for n in names},
        "failures_by_check": dict(sorted(((n, len(check(n)) - sum(check(n))) for n in names
                                         if len(check(n)) > sum(check(n))), key=lambda kv: -kv[1])),
        "backends": {
            "sql_execution_accuracy": _rate(check("sql_execution")),
            "sql_execution_accuracy_strict": _strict_rate(records, "sql"),
            "cypher_execution_accuracy": _rate(check("cypher_execution")),
            "cypher_execution_accuracy_strict": _strict_rate(records, "cypher"),
            "graph_answer_facts": _rate(check("answer_facts", lambda r: "graph" in r["needs"])),
            "doc_recall_at_5": round(sum(recalls) / len(recalls), 4) if recalls else None,
            "answer_facts": _rate(check("answer_facts")),
            "refusal_accuracy": _rate(check("must_refuse")),
        },
        "plan_matches_needs": _rate([r["plan_matches_needs"] for r in records if r["needs"]]),
        "paths": _path_shares(records),
        "items_that_changed_data": sum(1 for r in records if r["tables_changed"]),
        "answers_with_leaks": sum(1 for r in records if r.get("leaks")),
        "errors": sum(1 for r in records if r.get("error")),
        **per_turn_stats([(r["trace"], r["seconds"]) for r in records]),
        "first_answer_token_s": _first_tokens(records),
    }


def _first_tokens(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The time from the turn's start to the first streamed answer token, over the answers that had one."""
    from tramita.lab.evaluation.runner import distribution

    values = [float(r["first_token_seconds"]) for r in records if r.get("first_token_seconds") is not None]
    return {"n": len(values), **distribution(values)} if values else None


def _path_shares(records: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per backend, how many items each path answered ("pattern:<name>" counted as "pattern")."""
    shares: dict[str, Counter[str]] = {}
    for r in records:
        for backend, path in (r.get("paths") or {}).items():
            shares.setdefault(backend, Counter())[path.split(":", 1)[0]] += 1
    return {backend: dict(c) for backend, c in shares.items()}
