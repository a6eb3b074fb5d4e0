"""Running evaluation items: input files, the pristine dataset, a resumable checkpoint, workers.

A run lives in one output directory:
- `run.json`: what is being run (kind, file, profile); a resumed run must match it, so one report
  never mixes two profiles;
- `pristine/novaops.db`: the dataset built fresh from the sample (`load_sql`) plus the standard
  tool registry; every item runs on its own copy of it;
- `items.jsonl`: one finished item per line, appended as soon as it finishes, so an interrupted
  run loses at most the items in flight and a restart skips the ids already there;
- `work/`: per-item database copies and checkpoint files (kept only for failed items).

Items run one after another in this process, or in `jobs` worker processes (spawn). Every item gets
the run's `Settings` (a frozen, picklable dataclass) and builds its own `Services` over its own
database copy and checkpoint file; nothing is switched through the environment.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing import get_context
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as mp_wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from tramita.base.settings import Settings

Kind = Literal["conversations", "questions"]
KINDS: tuple[Kind, ...] = ("conversations", "questions")
TODAY = "2026-05-15"


class EvalSetupError(RuntimeError):
    """The run cannot start: bad input file, missing stores, a mismatched resume. Says what to do."""


# ----------------------------------------------------------------------------- input files

class _Expect(BaseModel):
    model_config = ConfigDict(extra="allow")
    status_after: Literal["idle", "collecting", "awaiting_confirmation"]
    tool: str | None = None
    params: dict[str, Any] = {}
    executed: str | None = None
    refused: bool = False
    answer_facts: list[str] = []


class _Turn(BaseModel):
    model_config = ConfigDict(extra="allow")
    user: str
    expect: _Expect


class _FinalQuery(BaseModel):
    model_config = ConfigDict(extra="allow")
    sql: str
    rows: list[list[Any]]


class ConversationItem(BaseModel):
    """Validation of one line of conversations.dev.jsonl (the runner keeps the raw dict)."""

    model_config = ConfigDict(extra="allow")
    id: str
    lang: str = ""
    user_id: str
    description: str = ""
    turns: list[_Turn]
    final_db: list[_FinalQuery] = []
    no_other_writes: bool = False


class QuestionItem(BaseModel):
    """Validation of one line of questions.dev.jsonl."""

    model_config = ConfigDict(extra="allow")
    id: str
    lang: str = ""
    question: str
    needs: list[str]  # names of registered retrieval backends (checked below)
    gold_sql: str | None = None
    gold_cypher: str | None = None
    gold_doc_ids: list[str] = []
    answer_facts: list[str] = []
    must_refuse: bool = False
    notes: str = ""

    @field_validator("needs")
    @classmethod
    def _known_backends(cls, value: list[str]) -> list[str]:
        """A needed backend must be one tramita registers (`tools.backends.BACKENDS`)."""
        from tools.backends import BACKENDS

        unknown = [n for n in value if n not in BACKENDS]
        if unknown:
            raise ValueError(f"unknown backend(s) {unknown}; registered: {sorted(BACKENDS)}")
        return value


_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")
_MODELS: dict[str, type[BaseModel]] = {"conversations": ConversationItem, "questions": QuestionItem}
_KNOWN_EXPECT = set(_Expect.model_fields)


def read_items(path: Path, kind: Kind, *, ids: Sequence[str] | None = None,
               limit: int | None = None) -> list[dict[str, Any]]:
    """The items of a JSONL file, validated against the README's format; errors name the line
    and the field. `ids` selects (unknown ids are an error), then `limit` keeps the first n.
    """
    if not path.is_file():
        raise EvalSetupError(f"{path}: no such file")
    model = _MODELS[kind]
    items: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvalSetupError(f"{path}:{n}: not valid JSON ({exc.msg} at column {exc.colno})") from exc
        try:
            model.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            hint = (" (is this a questions file? use `tramita eval questions`)" if kind == "conversations"
                    and "question" in raw else " (is this a conversations file? use `tramita eval conversations`)"
                    if kind == "questions" and "turns" in raw else "")
            raise EvalSetupError(f"{path}:{n}: field {where}: {first['msg']}{hint}") from exc
        if not _ID.fullmatch(raw["id"]):
            raise EvalSetupError(f"{path}:{n}: field id: {raw['id']!r} is not a plain id (letters, digits, '_', '-', '.'), "
                                 "it names files of the run")
        if raw["id"] in seen:
            raise EvalSetupError(f"{path}:{n}: duplicate id {raw['id']!r} (first on line {seen[raw['id']]})")
        seen[raw["id"]] = n
        items.append(raw)
    if ids:
        unknown = [i for i in ids if i not in seen]
        if unknown:
            raise EvalSetupError(f"{path}: unknown ids {', '.join(unknown)}")
        wanted = set(ids)
        items = [i for i in items if i["id"] in wanted]
    return items[:limit] if limit else items


def unknown_expect_keys(items: list[dict[str, Any]]) -> set[str]:
    """Keys of `expect` the README does not define (probably typos; they are not checked)."""
    return {k for it in items for t in it.get("turns", []) for k in t["expect"] if k not in _KNOWN_EXPECT}


# ------------------------------------------------------------------------ stores and dataset

def check_stores(settings: Settings) -> None:
    """The graph and the document store must be ingested; the eval never builds them itself."""
    from tools.doc_store import DocStore, DocStoreUnavailable
    from tools.graph_tool import GraphTool

    hint = "run `tramita ingest` first (or point TRAMITA_GRAPH_URL / TRAMITA_CHROMA_DIR at an ingested store)"
    try:
        rows = GraphTool(settings.graph_url).query("MATCH (e:Employee) RETURN count(e) AS n")
        if not rows or not rows[0].get("n"):
            raise EvalSetupError(f"the graph at {settings.graph_url} is empty: {hint}")
    except EvalSetupError:
        raise
    except Exception as exc:
        raise EvalSetupError(f"the graph at {settings.graph_url} cannot be read ({exc}): {hint}") from exc
    try:
        if DocStore(settings.chroma_dir).count() == 0:
            raise EvalSetupError(f"the document store at {settings.chroma_dir} is empty: {hint}")
    except DocStoreUnavailable as exc:
        raise EvalSetupError(f"{exc}; {hint}") from exc


def prepare_pristine(out: Path, settings: Settings) -> Path:
    """`<out>/pristine/novaops.db`: the sample loaded fresh (idempotent on resume) with the
    standard tool registry, whose vectors already sit in the data dir's Chroma.
    """
    from ingest.sql_loader import load_sql
    from tools.database import writer_engine
    from tools.registry import Registry

    db = out / "pristine" / "novaops.db"
    url = f"sqlite:///{db}"
    load_sql(url, settings.dataset_dir, progress=False)
    engine = writer_engine(url)
    Registry(engine, chroma_dir=settings.chroma_dir).sync()
    engine.dispose()
    return db


# ----------------------------------------------------------------------------- the checkpoint

@dataclass
class Checkpoint:
    """`items.jsonl`: finished items, one JSON object per line, appended and flushed one by one."""

    path: Path
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped_lines: int = 0

    def load(self) -> Checkpoint:
        """Read the records so far; a line cut short by a kill is skipped and counted, and that item runs again."""
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                    self.records[str(rec["id"])] = rec
                except (json.JSONDecodeError, KeyError, TypeError):
                    self.skipped_lines += 1  # a line cut short by a kill: that item runs again
        return self

    def done(self) -> set[str]:
        """Ids that need not run again (an item whose runner crashed is retried)."""
        return {i for i, r in self.records.items() if not r.get("crashed")}

    def append(self, record: dict[str, Any]) -> None:
        """Record one finished item, fsynced at once so that a kill loses at most the item in progress."""
        self.records[str(record["id"])] = record
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())


def check_run_meta(out: Path, meta: dict[str, Any]) -> None:
    """Write `run.json`, or check that a resumed run asks for the same kind, file and profile."""
    path = out / "run.json"
    if path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        for key in ("kind", "file", "profile"):
            if old.get(key) != meta.get(key):
                raise EvalSetupError(f"{out} holds a run with {key}={old.get(key)!r}, not {meta.get(key)!r}: "
                                     "use another --out (one report never mixes two runs)")
        return
    path.write_text(json.dumps(meta, indent=2, ensure_ascii=False), encoding="utf-8")


# --------------------------------------------------------------------------------- running

def run_one(kind: Kind, item: dict[str, Any], pristine_db: str, workdir: str, settings: Settings) -> dict[str, Any]:
    """Run one item (in this process or a worker) and return its JSON record. `settings` are the
    run's stores and LLM profile; the item replaces the SQL and checkpoint URLs with its own copies.
    """
    work = Path(workdir)
    for leftover in item_files(work, item["id"]):
        leftover.unlink(missing_ok=True)  # an earlier, interrupted attempt
    try:
        if kind == "conversations":
            from tramita.lab.evaluation.conversations import run_item

            record = run_item(item, Path(pristine_db), work, settings).to_json()
        else:
            from tramita.lab.evaluation.questions import run_question

            record = run_question(item, Path(pristine_db), work, settings).to_json()
    except Exception as exc:  # noqa: BLE001 - the item failed to run; it is retried on resume
        record = crashed_record(kind, item, f"{type(exc).__name__}: {exc}")
    if record.get("ok"):
        for f in item_files(work, item["id"]):
            f.unlink(missing_ok=True)  # keep the databases of failed items only, for inspection
    return record


def item_files(work: Path, item_id: str) -> list[Path]:
    """The files an item's runner writes: its database copy and its checkpoint database."""
    return [work / f"{item_id}{base}{suffix}" for base in (".db", ".ckpt.db") for suffix in ("", "-wal", "-shm", "-journal")]


def crashed_record(kind: Kind, item: dict[str, Any], error: str) -> dict[str, Any]:
    """A failed record for an item whose runner raised, with every check it asks for marked failed."""
    base = {"id": item["id"], "ok": False, "error": error[:500], "crashed": True, "seconds": 0.0}
    if kind == "conversations":
        return {**base, "turns": [], "final_checks": {"no_crash": False}, "unconfirmed_writes": 0}
    from tramita.lab.evaluation.questions import applicable_checks

    # every check the item asks for counts as failed, so a crash never flatters an accuracy figure
    checks = {name: False for name in applicable_checks(item)} | {"no_crash": False}
    return {**base, "question": item.get("question", ""), "lang": item.get("lang", ""),
            "needs": item.get("needs", []), "answer": "", "status": "", "checks": checks,
            "facts": {}, "plan": {}, "plan_matches_needs": False, "sql": {}, "cypher": {}, "docs": [],
            "doc_recall": 0.0 if item.get("gold_doc_ids") else None, "refused": False, "tables_changed": [],
            "trace": {}}


def run_items(kind: Kind, items: list[dict[str, Any]], *, pristine_db: Path, workdir: Path, settings: Settings,
              jobs: int, on_done: Callable[[dict[str, Any]], None]) -> None:
    """Run `items` under `settings` (stores and LLM profile), calling `on_done(record)` in this
    process as each finishes (in finishing order). KeyboardInterrupt propagates after the workers
    are stopped; finished items are kept.

    Items run in `jobs` worker processes; with one job and the scripted model (pure Python,
    nothing native that can abort) they run in this process instead, which is faster to start.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    if jobs <= 1 and settings.llm_profile == "scripted":
        for item in items:
            on_done(run_one(kind, item, str(pristine_db), str(workdir), settings))
        return
    _run_in_workers(kind, items, (str(pristine_db), str(workdir)), jobs, settings, on_done)


@dataclass
class _Worker:
    proc: BaseProcess
    conn: Connection
    item: dict[str, Any] | None = None


def _worker_main(conn: Connection, settings: Settings) -> None:
    """A worker: run the items the parent sends, under the run's settings, until it sends None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    while True:
        job = conn.recv()
        if job is None:
            return
        kind, item, pristine_db, workdir = job
        conn.send(run_one(kind, item, pristine_db, workdir, settings))


def _run_in_workers(kind: Kind, items: list[dict[str, Any]], where: tuple[str, str], jobs: int,
                    settings: Settings, on_done: Callable[[dict[str, Any]], None]) -> None:
    """Each worker holds one item at a time. A worker that dies (a native abort in llama.cpp, the
    OOM killer) fails only the item it held, and a fresh worker takes its place.
    """
    ctx = get_context("spawn")
    queue = list(items)
    workers: list[_Worker] = []

    def spawn() -> _Worker:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker_main, args=(child, settings), daemon=True)
        proc.start()
        child.close()
        return _Worker(proc, parent)

    def feed(i: int) -> None:
        """Give worker i the next item (or tell it to stop); a worker found dead is replaced."""
        w = workers[i]
        w.item = queue.pop(0) if queue else None
        try:
            w.conn.send((kind, w.item, *where) if w.item is not None else None)
        except OSError:  # it died after its last answer
            if w.item is not None:
                queue.insert(0, w.item)
                w.item = None
                workers[i] = spawn()
                feed(i)

    try:
        workers = [spawn() for _ in range(min(jobs, len(queue)))]
        for i in range(len(workers)):
            feed(i)
        while any(w.item is not None for w in workers):
            busy = [w for w in workers if w.item is not None]
            ready = mp_wait([w.conn for w in busy] + [w.proc.sentinel for w in busy])
            for i, w in enumerate(list(workers)):
                if w.item is None or (w.conn not in ready and w.proc.sentinel not in ready):
                    continue
                try:
                    record = w.conn.recv()
                except (EOFError, OSError):
                    w.proc.join(5)
                    on_done(crashed_record(kind, w.item, f"worker process died (exit code {w.proc.exitcode})"))
                    w.item = None
                    w.conn.close()
                    if queue:
                        workers[i] = spawn()
                        feed(i)
                    continue
                on_done(record)
                feed(i)
    finally:
        for w in workers:
            if w.proc.is_alive():
                w.proc.terminate()  # after Ctrl-C: items in flight are not recorded and run again
            w.proc.join(5)


# ------------------------------------------------------------------------------ statistics

def distribution(values: list[float]) -> dict[str, float | None]:
    """p50, p95, mean and max of `values` (all None when empty), as every report shows them."""
    if not values:
        return {"p50": None, "p95": None, "mean": None, "max": None}
    arr = np.asarray(values, dtype=float)
    return {"p50": round(float(np.percentile(arr, 50)), 4), "p95": round(float(np.percentile(arr, 95)), 4),
            "mean": round(float(arr.mean()), 4), "max": round(float(arr.max()), 4)}


def per_turn_stats(turns: list[tuple[dict[str, Any], float]]) -> dict[str, Any]:
    """LLM calls, tokens (prompt + completion) and latency per turn, from (trace, seconds) pairs."""
    traced = [(t, s) for t, s in turns if t]
    return {
        "turns": len(traced),
        "llm_calls_per_turn": distribution([float(t.get("llm_calls", 0)) for t, _ in traced]),
        "tokens_per_turn": distribution([float(t.get("prompt_tokens", 0)) + float(t.get("completion_tokens", 0))
                                  for t, _ in traced]),
        "latency_s": distribution([float(s) for _, s in traced]),
    }


def turn_series(kind: str, records: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per-turn values for the histograms."""
    pairs = ([(t["trace"], t["seconds"]) for r in records for t in r.get("turns", [])] if kind == "conversations"
             else [(r["trace"], r["seconds"]) for r in records])
    pairs = [(t, s) for t, s in pairs if t]
    return {"llm_calls": [float(t.get("llm_calls", 0)) for t, _ in pairs],
            "tokens": [float(t.get("prompt_tokens", 0)) + float(t.get("completion_tokens", 0)) for t, _ in pairs],
            "latency_s": [float(s) for _, s in pairs]}
