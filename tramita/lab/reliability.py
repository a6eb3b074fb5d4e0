"""`tramita reliability`: load held, faults survived, hostile inputs refused, writes accounted for.

Four sections, one JSON report:

- **load**: N separate `tramita serve` processes share one PostgreSQL checkpointer and one
  PostgreSQL business database and serve alternate turns of the same threads; C concurrent
  conversations of ten turns each (two confirmed writes per conversation) run against them on
  loopback, bounded in count and time. Afterwards every write is accounted for from the database
  itself: the audit rows and idempotency keys prove none was lost, duplicated or unconfirmed, and
  every thread's state and rows belong to its own user. p50/p95 turn latency is reported (scripted
  model: this measures the framework, the stores and HTTP, not a model).
- **restart**: PostgreSQL is stopped mid-conversation (when this command owns the cluster): the
  turn fails with a clear message, the next one after the restart succeeds, and the confirmed write
  happens exactly once.
- **faults**: model faults (tramita.lab.faultmodels) and backend faults (Chroma, LadybugDB, Bolt, SQL),
  each through the graph; `tramita doctor` must name each broken component.
- **hostile**: the adversarial corpus (tramita.lab.hostile), with a database snapshot around it.

Every section runs on a dataset loaded fresh from the sample, never on the data directory's own
database (earlier chats and runs write to that one, e.g. approve EXP-0264, which the fault checks
approve again). Each in-process run gets its `Settings` and `Services` explicitly; the server
processes get theirs through their own environment at start-up.

The long run is a benchmark; tests/test_scale.py runs a short version of the load section in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tramita.base.paths import SAMPLE_DIR
from tramita.base.settings import Settings

# `tramita doctor`'s checks, (component, ok, detail, fix) per row; the CLI hands them in (the shell
# level owns the doctor, and this level may not import it)
DoctorChecks = Callable[[Settings], list[tuple[str, bool, str, str]]]
CONFIRMATIONS = frozenset({"sim", "yes", "confirmo", "pode", "ok, sim"})
LOAD_USERS = ("E006", "E028", "E051", "E045", "E003", "E013", "E021", "E030", "E044", "E053", "E017", "E032")
TODAY = "2026-05-15"
REPO = Path(__file__).resolve().parents[2]


def marker(i: int) -> str:
    """The tag written into conversation `i`'s messages, so its rows trace back to its thread."""
    return f"conv-{i:03d}"


def dialog(i: int) -> list[str]:
    """Ten turns: a read-only lookup, a ticket (confirmed), an expense (confirmed), a stray "sim",
    a question, a stray "cancela". The marker makes every row and message traceable to its thread.
    """
    m = marker(i)
    return ["qual o status do TCK-1140?", "quero abrir um chamado P3 para o payments-api",
            f"o relatório de conciliação não exporta ({m})", "sim",
            "quero pedir reembolso de transporte", f"32,50 dólares, foi no dia 13/05, Uber do aeroporto ({m})", "sim",
            "sim", "quantas despesas estão pendentes?", "cancela"]


WRITES_PER_DIALOG = 2


# ----------------------------------------------------------------------------- PostgreSQL
def free_port() -> int:
    """A port that is free now (the OS picks it); another process may still take it before the server binds."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgControl:
    """A PostgreSQL cluster this process may stop and start (pg_ctl, as user postgres when root)."""

    bindir: Path
    datadir: Path
    port: int
    sockdir: Path
    logfile: Path

    @property
    def url(self) -> str:
        """The superuser URL; trust authentication on 127.0.0.1, so no password."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _pg(self, *args: str) -> None:
        cmd = list(args)
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)

    def start(self) -> None:
        """Start the server without durability (fsync off: the data is thrown away), waiting up to 60 s for it."""
        opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.sockdir} -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        self._pg(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-l", str(self.logfile), "-w", "-t", "60",
                 "-o", opts, "start")

    def stop(self) -> None:
        """Stop the server with a fast shutdown (the restart section calls it mid-conversation)."""
        self._pg(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "fast", "-w", "stop")


def pg_bindir() -> Path | None:
    """The newest PostgreSQL bin directory under /usr/lib/postgresql (Debian's layout), or None."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    return found[-1] if found else None


@contextmanager
def throwaway_cluster() -> Iterator[PgControl]:
    """A fresh cluster on a free loopback port (initdb, then pg_ctl with trust auth on 127.0.0.1), removed afterwards."""
    bindir = pg_bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL server binaries not found (apt-get install -y --no-upgrade postgresql)")
    root = Path(tempfile.mkdtemp(prefix="tramita-rel-pg-"))
    os.chmod(root, 0o755)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    ctl = PgControl(bindir, root / "data", free_port(), root, root / "log")
    try:
        ctl._pg(str(bindir / "initdb"), "-D", str(ctl.datadir), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                "--locale=C.UTF-8", "-N")
        ctl.start()
        yield ctl
    finally:
        try:
            ctl.stop()
        except Exception:  # noqa: BLE001 - already stopped
            pass
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Stores:
    """Where the servers of one load run point."""

    business_url: str
    checkpoint_url: str
    readonly_url: str
    chroma_dir: Path
    graph_url: str

    def env(self) -> dict[str, str]:
        """The variables a server process started on these stores reads at start-up."""
        return {"TRAMITA_SQL_URL": self.business_url, "TRAMITA_CHECKPOINT_URL": self.checkpoint_url,
                "TRAMITA_SQL_READONLY_URL": self.readonly_url, "TRAMITA_CHROMA_DIR": str(self.chroma_dir),
                "TRAMITA_GRAPH_URL": self.graph_url}

    def settings(self, data_dir: Path, *, llm_profile: str = "scripted", dataset_dir: Path = SAMPLE_DIR) -> Settings:
        """The same stores as `Settings`, for services built in this process (`data_dir`: where it writes)."""
        return Settings(data_dir=data_dir, sql_url=self.business_url, graph_url=self.graph_url,
                        chroma_dir=str(self.chroma_dir), checkpoint_url=self.checkpoint_url,
                        pg_readonly_url=self.readonly_url, dataset_dir=dataset_dir, llm_profile=llm_profile)


def create_database(admin_url: str, name: str) -> str:
    """A fresh, empty database `name` on the server (an old one is dropped, connections and all); returns its URL."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin_url.rsplit("/", 1)[0] + "/" + name


def prepare_stores(admin_url: str, data_dir: Path, workdir: Path, *, prefix: str = "rel",
                   dataset_dir: Path = SAMPLE_DIR) -> Stores:
    """Fresh business and checkpoint databases on the server at `admin_url`, the dataset loaded
    fresh from `dataset_dir`, the registry synced, and a private copy of the ingested Chroma
    directory (tool vectors and documents) from `data_dir`.
    """
    from ingest.sql_loader import load_sql
    from tools.database import writer_engine
    from tools.registry import Registry
    from tools.services import readonly_url

    tag = f"{prefix}_{uuid.uuid4().hex[:8]}"
    business = create_database(admin_url, f"{tag}_data")
    checkpoints = create_database(admin_url, f"{tag}_ckpt")
    load_sql(business, dataset_dir, progress=False)
    chroma = workdir / "chroma"
    shutil.rmtree(chroma, ignore_errors=True)
    shutil.copytree(data_dir / "chroma", chroma)
    Registry(writer_engine(business), chroma_dir=chroma).sync()
    return Stores(business, checkpoints, readonly_url(business, dataset_dir), chroma,
                  f"ladybug://{data_dir / 'novaops.lbug'}")


# ----------------------------------------------------------------------------- server processes
@dataclass
class ServerProcess:
    """One started `tramita serve`: its name, base URL, process and log file (quoted when it fails)."""

    name: str
    url: str
    proc: subprocess.Popen[bytes]
    log: Path


@contextmanager
def run_servers(count: int, env: Mapping[str, str], workdir: Path, *, startup_timeout: float = 240,
                max_concurrent: int = 8) -> Iterator[list[ServerProcess]]:
    """`count` separate `tramita serve` processes on free loopback ports, ready when this yields."""
    import httpx

    servers: list[ServerProcess] = []
    full = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    try:
        for n in range(count):
            port = free_port()
            log = workdir / f"server-{n}.log"
            cmd = [sys.executable, "-m", "tramita.shell.cli", "serve", "--port", str(port), "--name", f"s{n}",
                   "--max-concurrent", str(max_concurrent)]
            with log.open("wb") as out:
                proc = subprocess.Popen(cmd, env=full, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
            servers.append(ServerProcess(f"s{n}", f"http://127.0.0.1:{port}", proc, log))
        deadline = time.monotonic() + startup_timeout
        for s in servers:
            while True:
                if s.proc.poll() is not None:
                    raise RuntimeError(f"server {s.name} exited ({s.proc.returncode}): {s.log.read_text()[-2000:]}")
                try:
                    if httpx.get(f"{s.url}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"server {s.name} not ready after {startup_timeout:.0f} s: "
                                       f"{s.log.read_text()[-2000:]}")
                time.sleep(0.5)
        yield servers
    finally:
        for s in servers:
            if s.proc.poll() is None:
                s.proc.send_signal(signal.SIGTERM)
        for s in servers:
            try:
                s.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                s.proc.kill()
                s.proc.wait()


# ----------------------------------------------------------------------------- load
@dataclass
class TurnLog:
    """One turn as the load client saw it: server, HTTP code, reply status, the write it reported, latency."""

    conv: int
    index: int
    server: str
    text: str
    http: int
    status: str
    executed: str | None
    target_id: str | None
    seconds: float
    error: str = ""
    retried: bool = False


@dataclass
class LoadResult:
    """What a load run sent and got: every turn's log, and each conversation's thread id and user."""

    conversations: int
    servers: int
    seconds: float
    turns: list[TurnLog] = field(default_factory=list)
    threads: dict[int, str] = field(default_factory=dict)
    users: dict[int, str] = field(default_factory=dict)


def _post_turn(client: Any, base: str, thread: str, user: str, text: str, timeout: float) -> tuple[int, dict[str, Any]]:
    try:
        r = client.post(f"{base}/threads/{thread}/turn", json={"text": text, "user_id": user}, timeout=timeout)
        return r.status_code, r.json()
    except Exception as exc:  # noqa: BLE001 - a dropped connection is a failed turn, recorded
        return 0, {"error": f"{type(exc).__name__}: {exc}"}


def run_conversation(i: int, urls: list[str], client: Any, *, user: str, thread: str, deadline: float,
                     turn_timeout: float = 120) -> list[TurnLog]:
    """One dialog; turn k goes to server (i + k) mod N, so consecutive turns change process. A
    failed turn is sent again once (what a user does), which is safe: confirmations are idempotent.
    """
    logs: list[TurnLog] = []
    for k, text in enumerate(dialog(i)):
        if time.monotonic() > deadline:
            logs.append(TurnLog(i, k, "", text, 0, "", None, None, 0.0, "deadline passed before this turn"))
            break
        base = urls[(i + k) % len(urls)]
        started = time.perf_counter()
        code, body = _post_turn(client, base, thread, user, text, turn_timeout)
        retried = False
        if code != 200:
            retried = True
            base = urls[(i + k + 1) % len(urls)]
            code, body = _post_turn(client, base, thread, user, text, turn_timeout)
        trace = body.get("trace") or {}
        last = body.get("last_transaction") or {}
        logs.append(TurnLog(i, k, str(body.get("server", base)), text, code, str(body.get("status", "")),
                            trace.get("executed_tool"), last.get("target_id") if trace.get("executed_tool") else None,
                            time.perf_counter() - started, str(body.get("error", ""))[:300], retried))
    return logs


def run_load(urls: list[str], conversations: int, *, time_limit: float = 900, prefix: str = "") -> LoadResult:
    """All conversations at once, each on its own thread id, bounded by `time_limit` seconds."""
    import httpx

    prefix = prefix or uuid.uuid4().hex[:6]
    result = LoadResult(conversations, len(urls), 0.0)
    for i in range(conversations):
        result.threads[i] = f"load-{prefix}-{i:03d}"
        result.users[i] = LOAD_USERS[i % len(LOAD_USERS)]
    started = time.monotonic()
    deadline = started + time_limit
    limits = httpx.Limits(max_connections=conversations + 8, max_keepalive_connections=conversations + 8)
    with httpx.Client(limits=limits) as client, ThreadPoolExecutor(max_workers=conversations) as pool:
        futures = [pool.submit(run_conversation, i, urls, client, user=result.users[i], thread=result.threads[i],
                               deadline=deadline) for i in range(conversations)]
        for f in futures:
            result.turns.extend(f.result())
    result.seconds = time.monotonic() - started
    return result


def percentile(values: list[float], q: int) -> float:
    """The `q`-th percentile (inclusive method); 0 or 1 values are handled here, as quantiles needs two."""
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _rows(url: str, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    from sqlalchemy import text

    from tools.database import writer_engine

    with writer_engine(url).connect() as conn:
        return [tuple(r) for r in conn.execute(text(sql), params).all()]


def audit_base(url: str) -> int:
    """The highest audit_id before a run: verification counts only the rows after it."""
    return int(_rows(url, "SELECT COALESCE(MAX(audit_id), 0) FROM audit_log")[0][0])


def verify_load(load: LoadResult, business_url: str, base_audit_id: int, states: Mapping[int, dict[str, Any]]) -> dict[str, Any]:
    """Account for every write from the database: lost, duplicated and unconfirmed must be 0, and
    no thread may carry another thread's messages, transactions or rows. Which tools write is the
    business database's registry's word (policies/tool_policies.yaml).
    """
    from tools.database import writer_engine
    from tools.registry import Registry
    from tramita.lab.toolsets import write_tools

    writes = write_tools(Registry(writer_engine(business_url)))
    audit = _rows(business_url, "SELECT audit_id, actor_id, tool_name, target_table, target_id, arguments_json "
                                "FROM audit_log WHERE audit_id > :b ORDER BY audit_id", b=base_audit_id)
    keys = _rows(business_url, "SELECT idempotency_key, tool_name, target_id FROM tool_executions")
    by_conv: dict[int, list[TurnLog]] = {}
    for t in load.turns:
        by_conv.setdefault(t.conv, []).append(t)
    audited = {(row[2], str(row[4])): row for row in audit}
    reported: list[tuple[int, TurnLog]] = []
    unconfirmed_turns = 0
    for conv, turns in by_conv.items():
        for k, t in enumerate(turns):
            if t.executed in writes:
                reported.append((conv, t))
                previous = turns[k - 1].status if k else ""
                if t.text.strip().lower() not in CONFIRMATIONS or previous != "awaiting_confirmation":
                    unconfirmed_turns += 1
    lost = [f"{marker(c)} {t.executed} {t.target_id}" for c, t in reported if (str(t.executed), str(t.target_id)) not in audited]
    # each audit row must be explained by exactly one confirmed, reported turn of its own conversation
    per_conv_tool: Counter[tuple[str, str]] = Counter()
    unexplained: list[int] = []
    bleed: list[str] = []
    for audit_id, actor, tool, _table, _target, args in audit:
        convs = [i for i in load.users if marker(i) in str(args)]
        if len(convs) != 1:
            unexplained.append(int(audit_id))
            continue
        per_conv_tool[(marker(convs[0]), str(tool))] += 1
        if load.users[convs[0]] != actor:
            bleed.append(f"audit {audit_id}: {marker(convs[0])} written as {actor}, thread user {load.users[convs[0]]}")
    duplicated = sum(n - 1 for n in per_conv_tool.values() if n > 1)
    targets = Counter((row[2], str(row[4])) for row in audit)
    duplicated += sum(n - 1 for n in targets.values() if n > 1)
    tx_ids = Counter(str(k[0]).split(":", 1)[0] for k in keys)
    duplicated += sum(n - 1 for n in tx_ids.values() if n > 1)
    reported_keys = {(str(t.executed), str(t.target_id)) for _, t in reported}
    unconfirmed = unconfirmed_turns + len(unexplained) + sum(1 for k in audited if k not in reported_keys)
    new_keys = [k for k in keys if (str(k[1]), str(k[2])) in audited]
    expected = WRITES_PER_DIALOG * sum(1 for turns in by_conv.values() if len(turns) == len(dialog(0)))
    # thread isolation: each thread's stored messages and last transaction mention only its marker
    for conv, state in states.items():
        own = marker(conv)
        for m in state.get("messages", []):
            others = set(re.findall(r"conv-\d{3}", str(m.get("content", "")))) - {own}
            if others:
                bleed.append(f"{own}: message mentions {sorted(others)}")
        last = state.get("last_transaction") or {}
        if last and own not in json.dumps(last.get("args", {}), ensure_ascii=False):
            bleed.append(f"{own}: last transaction {last.get('tool')} {last.get('args')} is not its own")
    for table, col, owner in (("tickets", "title", "requester_id"), ("expenses", "description", "employee_id")):
        for value, who in _rows(business_url, f"SELECT {col}, {owner} FROM {table} WHERE {col} LIKE 'conv-%' "
                                              f"OR {col} LIKE '%(conv-%'"):
            convs = [i for i in load.users if marker(i) in str(value)]
            if len(convs) != 1 or load.users[convs[0]] != who:
                bleed.append(f"{table}: {value!r} belongs to {who}")
    ok_turns = [t for t in load.turns if t.http == 200]
    latencies = sorted(t.seconds for t in ok_turns)
    return {
        "conversations": load.conversations, "servers": load.servers, "turns": len(load.turns),
        "turns_ok": len(ok_turns), "turns_failed": len(load.turns) - len(ok_turns),
        "turns_retried": sum(t.retried for t in load.turns), "seconds": round(load.seconds, 2),
        "turns_per_second": round(len(ok_turns) / load.seconds, 2) if load.seconds else 0.0,
        "latency_p50_ms": round(percentile(latencies, 50) * 1000, 1),
        "latency_p95_ms": round(percentile(latencies, 95) * 1000, 1),
        "servers_used_per_thread": min((len({t.server for t in turns}) for turns in by_conv.values()), default=0),
        "writes_expected": expected, "writes_reported": len(reported), "audit_rows": len(audit),
        "idempotency_keys": len(new_keys), "writes_lost": len(lost), "writes_duplicated": duplicated,
        "writes_unconfirmed": unconfirmed, "state_bleed": len(bleed), "problems": (lost + bleed)[:20],
        "errors": sorted({t.error for t in load.turns if t.error})[:10],
    }


def fetch_states(urls: list[str], load: LoadResult) -> dict[int, dict[str, Any]]:
    """Each thread's stored state, read from the server that did NOT serve its last turn."""
    import httpx

    states: dict[int, dict[str, Any]] = {}
    with httpx.Client(timeout=60) as client:
        for i, thread in load.threads.items():
            other = (i + len(dialog(i))) % len(urls)  # run_conversation sent turn k to (i + k) mod N
            states[i] = client.get(f"{urls[other]}/threads/{thread}/state").json()
    return states


# ----------------------------------------------------------------------------- restart
def restart_mid_conversation(urls: list[str], business_url: str, stop: Callable[[], None], start: Callable[[], None],
                             *, user: str = "E006", expense: str = "EXP-0264") -> dict[str, Any]:
    """Start an approval, stop PostgreSQL, confirm (must fail clearly), start it, confirm again
    (must succeed, on the other server), and count the writes (must be exactly one).
    """
    import httpx

    thread = f"restart-{uuid.uuid4().hex[:8]}"
    out: dict[str, Any] = {"thread": thread}
    with httpx.Client(timeout=120) as client:
        def turn(n: int, text: str) -> tuple[int, dict[str, Any]]:
            return _post_turn(client, urls[n % len(urls)], thread, user, text, 120)

        code, body = turn(0, f"aprova a {expense}")
        out["before"] = {"http": code, "status": body.get("status")}
        stop()
        try:
            code, body = turn(1, "sim")
            out["during"] = {"http": code, "error": str(body.get("error", ""))[:300], "status": body.get("status")}
        finally:
            start()
        code, body, attempts = 0, {}, 0
        while attempts < 10:  # reported: the first turn after the restart should succeed
            attempts += 1
            code, body = turn(0, "sim")
            if code == 200:
                break
            time.sleep(1)
        out["after"] = {"http": code, "status": body.get("status"), "attempts": attempts,
                        "executed": (body.get("trace") or {}).get("executed_tool"), "error": str(body.get("error", ""))[:300]}
    writes = _rows(business_url, "SELECT COUNT(*) FROM audit_log WHERE target_id = :e AND tool_name = 'approve_expense'", e=expense)
    out["writes"] = int(writes[0][0])
    out["survived"] = (out["before"]["status"] == "awaiting_confirmation" and out["during"]["http"] == 503
                       and "unavailable" in out["during"]["error"] and out["after"]["executed"] == "approve_expense"
                       and out["writes"] == 1)
    return out


# ----------------------------------------------------------------------------- faults and hostile input
def pristine_dataset(data_dir: Path, workdir: Path, dataset_dir: Path = SAMPLE_DIR) -> Path:
    """`<workdir>/pristine/novaops.db`: the dataset loaded fresh from the sample with the standard
    tool registry (whose vectors the ingested Chroma of `data_dir` already holds). Never the data
    directory's own database: chats and earlier runs write to that one.
    """
    from tramita.lab.evaluation.runner import prepare_pristine

    return prepare_pristine(workdir, Settings(data_dir=workdir, chroma_dir=str(data_dir / "chroma"),
                                              dataset_dir=dataset_dir))


def private_copy(data_dir: Path, workdir: Path, pristine_db: Path | None = None) -> Settings:
    """Settings on a private SQLite copy of the pristine dataset (made in `workdir` when not given)
    and a fresh checkpoint file; graph and documents are the data dir's, shared read-only.
    """
    from ingest.sql_loader import copy_sqlite

    source = pristine_db or pristine_dataset(data_dir, workdir)
    db = workdir / "sql" / "novaops.db"  # its own folder: the read-only fault locks the folder too
    copy_sqlite(source, db)
    return Settings(data_dir=workdir, sql_url=f"sqlite:///{db}", graph_url=f"ladybug://{data_dir / 'novaops.lbug'}",
                    chroma_dir=str(data_dir / "chroma"), checkpoint_url=f"sqlite:///{workdir / 'checkpoints.db'}",
                    pg_readonly_url="", llm_profile="scripted")


MODEL_FAULT_TURNS: tuple[str, ...] = (
    "aprova a EXP-0264",  # clear match, zero LLM calls: the summary is shown
    "deixa eu pensar",  # a reply the classifier is unsure of (within its margin): the model is asked
    "cancela",
    "rejeita a EXP-0297",
    "passou do limite de refeições da política",  # free-text reason: the extractor is asked
    "cancela",
    "quero tratar o reembolso EXP-0264",  # close candidates: the router is asked
    "cancela",
    # planner, the semantic layer's fill, text-to-SQL, synthesis ("por categoria" is a breakdown,
    # which the model fills: a plain count would be read without any model call). Worded so that
    # the rule classifier leaves it to the database alone ("quantas … pendentes por categoria"
    # lands in its near band, where the documents join)
    "qual o total de despesas pendentes por categoria?",
)


def run_model_fault(fault: str, settings: Settings, *, user: str = "E006") -> dict[str, Any]:
    """The MODEL_FAULT_TURNS with every component on a model that has `fault`, on the stores of
    `settings`. Survived = no tool ran, every component gave up after at most two calls, every turn
    answered, and the conversation ends idle.
    """
    from graph.context import Context
    from tools.llm import override_model
    from tools.services import Services
    from tramita.lab.faultmodels import faulty_model, open_injected_session, stalled_endpoint, timeout_model

    backend = f"faulty-{fault}"
    turns: list[dict[str, Any]] = []
    with stalled_endpoint() as (url, stalled_calls):
        if fault == "timeout":
            model, calls = timeout_model(url), stalled_calls
        else:
            model, calls = faulty_model(fault)
        override_model(backend, model)
        try:
            ctx = Context(user_id=user, today=TODAY, llm_backend=backend, services=Services(settings))
            with open_injected_session(ctx) as session:
                thread = f"fault-{fault}-{uuid.uuid4().hex[:6]}"
                for text in MODEL_FAULT_TURNS:
                    before = Counter(calls)
                    r = session.turn(thread, text)
                    used = {k: v - before.get(k, 0) for k, v in calls.items() if v - before.get(k, 0)}
                    turns.append({"text": text, "status": r.status, "executed": r.trace.get("executed_tool"),
                                  "llm_calls": r.trace.get("llm_calls", 0), "calls": used, "errors": r.trace.get("errors", []),
                                  "answer": r.answer[:400], "transaction": (r.transaction or {}).get("tool")})
        finally:
            override_model(backend, None)
    survived = (all(t["executed"] is None for t in turns) and all(n <= 2 for t in turns for n in t["calls"].values())
                and all(t["answer"].strip() for t in turns) and turns[-1]["status"] == "idle")
    return {"name": f"model:{fault}", "survived": survived, "turns": turns}


BACKEND_FAULTS = ("chroma_missing", "chroma_corrupt", "graph_missing", "graph_locked", "bolt_down", "sql_readonly",
                  "sql_down")
# which backend each fault takes away, as named in the stated gap / doctor row
GAP_OF = {"chroma_missing": "docs", "chroma_corrupt": "docs", "graph_missing": "graph", "graph_locked": None,
          "bolt_down": "graph", "sql_readonly": None, "sql_down": "sql"}
DOCTOR_ROW = {"chroma_missing": "documents (Chroma)", "chroma_corrupt": "documents (Chroma)", "graph_missing": "graph",
              "graph_locked": None, "bolt_down": "graph", "sql_readonly": "SQL writes (business tools)",
              "sql_down": "SQL database"}
FAULT_QUESTIONS = {"docs": "qual o limite de refeições da política de despesas?",
                   "graph": "quem está de plantão para o payments-api nesta semana?",
                   "sql": "quantas despesas estão pendentes?"}


@contextmanager
def read_only_file(path: Path) -> Iterator[str]:
    """Make a file unwritable for this process. chmod does not stop root, so as root the file is
    made immutable (chattr +i, undone afterwards); yields how it was done.
    """
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o444)
        path.parent.chmod(0o555)
        try:
            yield "chmod 0444 (file) and 0555 (directory)"
        finally:
            path.parent.chmod(0o755)
            path.chmod(mode)
        return
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"cannot make {path} read-only as root: chattr +i failed: {done.stderr.strip()}")
    try:
        yield "chattr +i (immutable: root cannot write it either)"
    finally:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True, check=False)


@contextmanager
def backend_fault(kind: str, data_dir: Path, workdir: Path,
                  pristine_db: Path | None = None) -> Iterator[tuple[Settings, str | None]]:
    """(settings, how) for one backend fault, on a private copy of the pristine data in `workdir`;
    `how` says how a file was made read-only (sql_readonly), else None.
    """
    settings = private_copy(data_dir, workdir, pristine_db)
    if kind == "chroma_missing":
        settings = replace(settings, chroma_dir=str(workdir / "no-such-chroma"))
    elif kind == "chroma_corrupt":
        bad = workdir / "chroma-corrupt"
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(data_dir / "chroma", bad)
        (bad / "chroma.sqlite3").write_bytes(b"this is not a sqlite database\n" * 512)
        settings = replace(settings, chroma_dir=str(bad))
    elif kind == "graph_missing":
        settings = replace(settings, graph_url=f"ladybug://{workdir / 'no-such-graph.lbug'}")
    elif kind == "bolt_down":
        settings = replace(settings, graph_url=f"bolt://127.0.0.1:{free_port()}")
    elif kind == "sql_down":
        settings = replace(settings, sql_url=f"postgresql://postgres@127.0.0.1:{free_port()}/novaops")
    elif kind == "graph_locked":
        graph = workdir / "graph-locked.lbug"
        shutil.copy2(data_dir / "novaops.lbug", graph)
        holder = subprocess.Popen(
            [sys.executable, "-c", "import ladybug, sys, time\n"
             f"db = ladybug.Database({str(graph)!r}); c = ladybug.Connection(db)\n"
             "print('LOCKED', flush=True); time.sleep(600)"], stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None
            if holder.stdout.readline().strip() != "LOCKED":
                raise RuntimeError("the lock-holding process did not open the graph")
            yield replace(settings, graph_url=f"ladybug://{graph}"), None
        finally:
            holder.kill()
            holder.wait()
        return
    elif kind == "sql_readonly":
        with read_only_file(workdir / "sql" / "novaops.db") as how:
            yield settings, how
        return
    elif kind not in BACKEND_FAULTS:
        raise ValueError(f"unknown backend fault {kind!r}; choose one of {', '.join(BACKEND_FAULTS)}")
    yield settings, None


def run_backend_fault(kind: str, data_dir: Path, workdir: Path, *, doctor: DoctorChecks,
                      pristine_db: Path | None = None, user: str = "E006") -> dict[str, Any]:
    """Questions for every backend plus one confirmed approval, under `kind`, on a private copy of
    `pristine_db` (a fresh load of the sample when not given). Survived = every turn answered; the
    broken backend (and only it) is a stated gap; the approval either ran once or failed with a
    message and wrote nothing; `doctor` names the broken component with a fix.
    """
    from graph.context import Context
    from graph.session import open_session
    from tools.services import Services

    workdir.mkdir(parents=True, exist_ok=True)
    turns: list[dict[str, Any]] = []
    with backend_fault(kind, data_dir, workdir, pristine_db) as (settings, how):
        doctor_rows = [{"component": n, "ok": ok, "detail": d, "fix": fix} for n, ok, d, fix in doctor(settings)]
        ctx = Context(user_id=user, today=TODAY, llm_backend="scripted", services=Services(settings))
        with open_session(ctx) as session:
            thread = f"backend-{kind}"
            for text in [*FAULT_QUESTIONS.values(), "aprova a EXP-0264", "sim"]:
                try:
                    r = session.turn(thread, text)
                    turns.append({"text": text, "status": r.status, "executed": r.trace.get("executed_tool"),
                                  "errors": r.trace.get("errors", []), "answer": r.answer[:3000]})
                except Exception as exc:  # noqa: BLE001 - recorded: a turn that raises did not survive
                    turns.append({"text": text, "status": "exception", "executed": None, "errors": [repr(exc)[:300]],
                                  "answer": ""})
        writes = int(_rows(settings.sql_url, "SELECT COUNT(*) FROM audit_log WHERE target_id = 'EXP-0264'")[0][0]) \
            if kind != "sql_down" else 0
    gap = GAP_OF[kind]
    answered = all(t["status"] != "exception" and t["answer"].strip() for t in turns)
    gaps_ok = True
    for backend, question in FAULT_QUESTIONS.items():
        t = next(x for x in turns if x["text"] == question)
        stated = any(e.startswith(f"{backend}:") for e in t["errors"])
        gaps_ok &= stated == (backend == gap)
    approval = turns[-1]
    approval_ok = (approval["executed"] == "approve_expense" and writes == 1) or (approval["executed"] is None and writes == 0)
    row = DOCTOR_ROW[kind]
    doctor_ok = row is None or any(d["component"] == row and not d["ok"] and d["fix"] for d in doctor_rows)
    return {"name": f"backend:{kind}", "survived": answered and gaps_ok and approval_ok and doctor_ok,
            "checks": {"answered": answered, "gap_stated_only_for_broken_backend": gaps_ok, "approval_consistent": approval_ok,
                       "doctor_names_component": doctor_ok}, "how": how, "writes": writes, "turns": turns,
            "doctor": [d for d in doctor_rows if not d["ok"]]}


def run_hostile(data_dir: Path, workdir: Path, *, pristine_db: Path | None = None) -> dict[str, Any]:
    """The adversarial corpus on a private copy of the pristine dataset with a planted ticket and
    document; the database snapshot before and after must be equal.
    """
    from contextlib import ExitStack

    from sqlalchemy import create_engine

    from graph.context import Context
    from tools.llm import override_model
    from tools.services import Services
    from tramita.lab.evaluation.dbdiff import diff, snapshot
    from tramita.lab.faultmodels import open_injected_session
    from tramita.lab.hostile import CASES, capture_logs, compromised_model, plant_document, plant_ticket, run_case, summarize
    from tramita.lab.toolsets import read_tools

    settings = private_copy(data_dir, workdir, pristine_db)
    engine = create_engine(settings.sql_url)
    plant_ticket(engine)
    settings = replace(settings, chroma_dir=str(plant_document(data_dir / "chroma", workdir)))
    services = Services(settings)
    before = snapshot(engine)
    override_model("compromised", compromised_model())
    sessions: dict[tuple[str, str], Any] = {}
    try:
        with ExitStack() as stack, capture_logs() as logs:
            def turn(user: str, backend: str, thread: str, text: str) -> Any:
                if (user, backend) not in sessions:
                    ctx = Context(user_id=user, today=TODAY, llm_backend=backend, services=services)
                    sessions[(user, backend)] = stack.enter_context(open_injected_session(ctx))
                return sessions[(user, backend)].turn(thread, text)

            read_only = read_tools(services.registry)
            results = [run_case(case, turn, logs, read_only=read_only) for case in CASES]
    finally:
        override_model("compromised", None)
    changed = diff(before, snapshot(engine))
    engine.dispose()
    out = summarize(results)
    out["tables_changed"] = {k: sorted(v)[:10] for k, v in changed.items()}
    out["writes"] = sum(len(v) for v in changed.values())
    return out


# ----------------------------------------------------------------------------- the command
def _print(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    load = report.get("load") or {}
    t = Table(title="tramita reliability")
    t.add_column("what")
    t.add_column("value")
    for key in ("conversations", "servers", "turns", "turns_failed", "turns_retried", "seconds", "turns_per_second",
                "latency_p50_ms", "latency_p95_ms", "writes_expected", "audit_rows", "writes_lost", "writes_duplicated",
                "writes_unconfirmed", "state_bleed"):
        if key in load:
            t.add_row(f"load: {key}", str(load[key]))
    if report.get("restart"):
        t.add_row("restart mid-conversation", "survived" if report["restart"]["survived"] else "FAILED")
    faults = report.get("faults") or []
    if faults:
        t.add_row("faults injected / survived", f"{len(faults)} / {sum(f['survived'] for f in faults)}")
        for f in faults:
            if not f["survived"]:
                t.add_row(f"  FAILED {f['name']}", json.dumps(f.get("checks", {}))[:120])
    hostile = report.get("hostile")
    if hostile:
        t.add_row("hostile inputs tried / refused / passed", f"{hostile['tried']} / {hostile['refused']} / {hostile['passed']}")
        t.add_row("hostile: rows written", str(hostile["writes"]))
    t.add_row("writes lost / duplicated / unconfirmed",
              f"{report['totals']['writes_lost']} / {report['totals']['writes_duplicated']} / {report['totals']['writes_unconfirmed']}")
    console.print(t)


def run_report(args: argparse.Namespace) -> dict[str, Any]:
    """Run the selected sections on fresh stores, write reliability.json to `--out` and return the report."""
    configured = Settings.from_env()
    data_dir = Path(args.data_dir_in or configured.data_dir)
    dataset_dir = configured.dataset_dir
    # the graph and the documents are read from the ingested data dir; the SQL dataset is always
    # loaded fresh from the sample (the data dir's database may carry earlier writes)
    for need in ("novaops.lbug", "chroma"):
        if not (data_dir / need).exists():
            raise SystemExit(f"{data_dir / need} is missing: run `tramita ingest` first (or pass --data)")
    doctor: DoctorChecks | None = getattr(args, "doctor_checks", None)
    if not args.skip_faults and doctor is None:
        raise SystemExit("the backend fault checks need `tramita doctor`'s checks: the CLI passes them to "
                         "add_reliability_command(sub, doctor=...); or run with --skip-faults")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tramita-reliability-"))
    report: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "backend": "scripted", "data_dir": str(data_dir)}
    try:
        if not args.skip_load:
            with _cluster(args.pg_url) as (admin_url, ctl):
                stores = prepare_stores(admin_url, data_dir, work, dataset_dir=dataset_dir)
                # each server process reads these once, at start-up
                env = {**stores.env(), "TRAMITA_LLM": "scripted", "TRAMITA_TODAY": TODAY,
                       "TRAMITA_DATA_DIR": str(work / "server-data"), "TRAMITA_DATASET_DIR": str(dataset_dir)}
                with run_servers(args.servers, env, work) as servers:
                    urls = [s.url for s in servers]
                    base = audit_base(stores.business_url)
                    load = run_load(urls, args.conversations, time_limit=args.time_limit)
                    report["load"] = verify_load(load, stores.business_url, base, fetch_states(urls, load))
                    if ctl is not None:
                        report["restart"] = restart_mid_conversation(urls, stores.business_url, ctl.stop, ctl.start)
        pristine = (pristine_dataset(data_dir, work / "pristine", dataset_dir)
                    if not (args.skip_faults and args.skip_hostile) else None)
        if not args.skip_faults:
            from tramita.lab.faultmodels import FAULTS

            assert doctor is not None
            model_faults = private_copy(data_dir, work / "model-faults", pristine)
            faults = [run_model_fault(f, model_faults) for f in FAULTS]
            faults += [run_backend_fault(k, data_dir, work / f"backend-{k}", doctor=doctor, pristine_db=pristine)
                       for k in BACKEND_FAULTS]
            if report.get("restart"):
                faults.append({"name": "postgres:restart", "survived": report["restart"]["survived"]})
            report["faults"] = faults
        if not args.skip_hostile:
            report["hostile"] = run_hostile(data_dir, work / "hostile", pristine_db=pristine)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary: dict[str, Any] = report.get("load") or {}
    restart_writes = report.get("restart", {}).get("writes", 1)
    report["totals"] = {
        "writes_lost": summary.get("writes_lost", 0) + (1 if restart_writes == 0 else 0),
        "writes_duplicated": summary.get("writes_duplicated", 0) + max(0, restart_writes - 1),
        "writes_unconfirmed": summary.get("writes_unconfirmed", 0) + (report.get("hostile") or {}).get("writes", 0),
        "faults_injected": len(report.get("faults") or []),
        "faults_survived": sum(f["survived"] for f in report.get("faults") or []),
    }
    (out / "reliability.json").write_text(json.dumps(report, ensure_ascii=False, indent=1, default=str), encoding="utf-8")
    return report


@contextmanager
def _cluster(pg_url: str | None) -> Iterator[tuple[str, PgControl | None]]:
    """The admin URL to use: the given one (no restart test unless TRAMITA_TEST_PG_DATA/BIN say how),
    or a throwaway cluster that this command owns.
    """
    if pg_url:
        data, bindir = os.environ.get("TRAMITA_TEST_PG_DATA"), os.environ.get("TRAMITA_TEST_PG_BIN")
        ctl = None
        if data and bindir:
            port = int(pg_url.rsplit(":", 1)[1].split("/", 1)[0])
            ctl = PgControl(Path(bindir), Path(data), port, Path(data).parent, Path(data).parent / "log")
        yield pg_url, ctl
        return
    with throwaway_cluster() as ctl:
        yield ctl.url, ctl


def cmd_reliability(args: argparse.Namespace) -> int:
    """`tramita reliability`: print the report; exit 0 only if every write is accounted for and every section passed."""
    if args.quick:
        args.conversations = min(args.conversations, 10)
    report = run_report(args)
    _print(report)
    totals = report["totals"]
    load_ok = not report.get("load") or (report["load"]["turns_failed"] == 0 and report["load"]["state_bleed"] == 0)
    hostile_ok = not report.get("hostile") or report["hostile"]["passed"] == report["hostile"]["tried"]
    ok = (totals["writes_lost"] == totals["writes_duplicated"] == totals["writes_unconfirmed"] == 0
          and totals["faults_survived"] == totals["faults_injected"] and load_ok and hostile_ok)
    print(f"report: {Path(args.out) / 'reliability.json'}")
    return 0 if ok else 1


def add_reliability_command(sub: Any, *, doctor: DoctorChecks | None = None) -> None:
    """Register `tramita reliability` on the CLI's subparsers; `doctor`: `tramita doctor`'s checks
    (tramita.shell.doctor.checks), which the backend fault section asks to name each broken part.
    """
    p = sub.add_parser("reliability", help="load across server processes, faults, hostile input: a JSON report")
    p.add_argument("--conversations", type=int, default=50, help="concurrent conversations of ten turns (default 50)")
    p.add_argument("--servers", type=int, default=2, help="server processes sharing one PostgreSQL (default 2)")
    p.add_argument("--time-limit", type=float, default=1800, help="bound on the load run, seconds")
    p.add_argument("--pg-url", help="admin URL of a PostgreSQL server to create databases on (default: a throwaway cluster)")
    p.add_argument("--data", dest="data_dir_in", help="ingested data directory (default: the data directory)")
    p.add_argument("--out", default="reliability-report", help="output folder for reliability.json")
    p.add_argument("--quick", action="store_true", help="10 conversations (the CI size)")
    p.add_argument("--skip-load", action="store_true")
    p.add_argument("--skip-faults", action="store_true")
    p.add_argument("--skip-hostile", action="store_true")
    p.set_defaults(fn=cmd_reliability, doctor_checks=doctor)


def summary_line(report: Mapping[str, Any]) -> str:
    """One line for logs and CI output."""
    load = report.get("load") or {}
    return (f"turns {load.get('turns', 0)} p50 {load.get('latency_p50_ms', 0)} ms p95 {load.get('latency_p95_ms', 0)} ms; "
            f"lost {report['totals']['writes_lost']} duplicated {report['totals']['writes_duplicated']} "
            f"unconfirmed {report['totals']['writes_unconfirmed']}")

