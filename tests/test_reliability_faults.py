"""Model faults, backend faults and a PostgreSQL restart, through the whole graph on real stores.

Model faults: every component on a model that times out (the real OpenAI-compatible client against
a loopback endpoint that never answers), returns invalid JSON, JSON of the wrong schema, an empty
string, or a router choice naming a tool that does not exist. Each component retries once, then the
turn answers with a clear message; no tool runs and the database does not change.

Backend faults: Chroma missing or corrupt, LadybugDB missing or held by a writer, the Bolt server
down, the SQL database read-only or down. Only the answers that need the broken backend degrade,
with a stated gap; `tramita doctor` names the component and how to fix it.

PostgreSQL restart mid-conversation (a cluster this module starts, so restarting it disturbs no
other test): the turn during the outage fails with a clear message, the next succeeds, and the
confirmed write happens exactly once. A read-only business database refuses the write clearly.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_graph import TODAY, db_changes, db_snapshot

from nodes.synthesize import gap_sentence
from tramita.base.settings import Settings
from tramita.lab.faultmodels import FAULTS
from tramita.lab.hostile import capture_logs
from tramita.lab.pgcluster import PgCluster, start_cluster
from tramita.lab.reliability import (
    BACKEND_FAULTS,
    FAULT_QUESTIONS,
    GAP_OF,
    MODEL_FAULT_TURNS,
    prepare_stores,
    restart_mid_conversation,
    run_backend_fault,
    run_model_fault,
)

REASON_TURN, ROUTER_TURN, QUESTION_TURN = MODEL_FAULT_TURNS[4], MODEL_FAULT_TURNS[6], MODEL_FAULT_TURNS[8]


@pytest.fixture(autouse=True)
def _shared_models(pristine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model files live with the pristine data dir (or TRAMITA_MODELS_DIR): the runs here name
    their stores explicitly and leave the data directory, where the models would otherwise go, alone."""
    monkeypatch.setenv("TRAMITA_MODELS_DIR", os.environ.get("TRAMITA_MODELS_DIR") or str(pristine / "models"))


def _llm_failed_prefix() -> str:
    from tramita.core.replies import say

    return say("llm_failed", "pt", error="").split("(")[0].strip()


@pytest.mark.parametrize("fault", FAULTS)
def test_model_fault(fault: str, novaops: Path, novaops_settings: Settings) -> None:
    before = db_snapshot(novaops)
    with capture_logs() as logs:
        result = run_model_fault(fault, novaops_settings)
    turns = {t["text"]: t for t in result["turns"]}
    assert result["survived"], json.dumps(result["turns"], ensure_ascii=False, indent=1)
    assert all(t["executed"] is None for t in result["turns"])
    assert all(n <= 2 for t in result["turns"] for n in t["calls"].values())  # bounded: one retry at most
    for text in ("cancela",):
        assert all(t["status"] == "idle" and t["transaction"] is None for t in result["turns"] if t["text"] == text)
    assert turns[MODEL_FAULT_TURNS[0]]["status"] == "awaiting_confirmation"  # zero LLM calls on a clear match
    assert turns[MODEL_FAULT_TURNS[0]]["calls"] == {}
    if fault == "unknown_tool":
        # the router named a tool that does not exist: nothing starts, the user is told it was not understood
        router = turns[ROUTER_TURN]
        assert router["calls"] == {"router": 1} and router["status"] == "idle" and router["transaction"] is None
        assert turns[REASON_TURN]["status"] == "awaiting_confirmation"  # the other components work
    else:
        # every component that was asked failed twice, and the turn says so or degrades
        assert turns[MODEL_FAULT_TURNS[1]]["calls"] == {"confirmation": 2}
        assert turns[MODEL_FAULT_TURNS[1]]["status"] == "awaiting_confirmation"  # still needs an explicit yes
        reason = turns[REASON_TURN]
        assert reason["calls"] == {"transaction_parameter_extraction": 2}
        assert reason["status"] == "collecting" and reason["transaction"] == "reject_expense"
        assert _llm_failed_prefix() in reason["answer"]
        # the router falls back to the best match, which still needs a summary and a yes
        assert turns[ROUTER_TURN]["calls"] == {"router": 2} and turns[ROUTER_TURN]["status"] == "awaiting_confirmation"
        q = turns[QUESTION_TURN]
        # a clear vocabulary match costs no planner call; a failed planner never widens the plan
        # to every backend, so only the planned SQL writer is asked
        assert q["calls"].get("planner", 0) in (0, 2) and "text_to_cypher" not in q["calls"]
        assert q["calls"]["text_to_sql"] == 2
        assert any(e.startswith("sql: LLMError") for e in q["errors"]) and gap_sentence(["sql"], "pt") in q["answer"]
        # no backend gave material, so synthesis is not asked: the answer is the plain gap sentence
        assert "synthesis" not in q["calls"]
        assert any(line.startswith("LLM transaction_parameter_extraction failed twice") for line in logs.lines)
    assert db_changes(novaops, before) == {}


@pytest.mark.parametrize("kind", BACKEND_FAULTS)
def test_backend_fault(kind: str, pristine: Path, tmp_path: Path) -> None:
    from tramita.shell.doctor import checks

    result = run_backend_fault(kind, pristine, tmp_path, doctor=checks)
    assert result["survived"], json.dumps({k: result[k] for k in ("checks", "turns", "doctor")}, ensure_ascii=False,
                                          indent=1, default=str)
    turns = {t["text"]: t for t in result["turns"]}
    gap = GAP_OF[kind]
    if gap:  # the broken backend's answer says in plain words what could not be consulted
        assert gap_sentence([gap], "pt") in turns[FAULT_QUESTIONS[gap]]["answer"]
    approve, confirm = turns["aprova a EXP-0264"], turns["sim"]
    if kind in ("chroma_missing", "chroma_corrupt"):
        # the tool vectors are gone with Chroma: the registry embeds the catalog in memory, so the
        # transaction still works (summary, explicit yes, exactly one write) while documents are a gap
        assert approve["status"] == "awaiting_confirmation"
        assert confirm["executed"] == "approve_expense" and result["writes"] == 1
    elif kind == "sql_down":
        # the registry rows live in SQL: no transaction starts, and the user is told
        assert approve["status"] == "idle" and "tool registry" in approve["answer"]
        assert confirm["executed"] is None and result["writes"] == 0
    elif kind == "sql_readonly":
        assert result["how"]  # chmod cannot stop root: the report says how the file was made read-only
        assert approve["status"] == "awaiting_confirmation"
        assert confirm["executed"] is None and confirm["status"] == "awaiting_confirmation"  # kept for a retry
        assert "readonly" in confirm["answer"] and result["writes"] == 0
    else:  # the graph is not needed to approve an expense
        assert confirm["executed"] == "approve_expense" and result["writes"] == 1
    if kind == "graph_locked":
        # measured fact: a process holding LadybugDB's write lock does not block read-only readers
        assert not turns[FAULT_QUESTIONS["graph"]]["errors"]
    else:
        assert result["doctor"] and all(d["fix"] for d in result["doctor"])


# ----------------------------------------------------------------------------- PostgreSQL
@pytest.fixture(scope="module")
def own_cluster() -> Iterator[PgCluster]:
    """A cluster of our own: stopping the CI's shared server would disturb other tests."""
    try:
        cluster = start_cluster()
    except Exception as exc:  # noqa: BLE001 - the reason is the skip message
        pytest.skip(f"cannot start a PostgreSQL cluster to restart: {exc}")
    try:
        yield cluster
    finally:
        try:
            cluster.stop()
        except Exception:  # noqa: BLE001 - a failed test may have left it stopped
            pass
        shutil.rmtree(cluster.root, ignore_errors=True)


@pytest.mark.postgres
def test_postgres_restart_mid_conversation(own_cluster: PgCluster, pristine: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from graph.builder import compile_graph
    from graph.checkpointer import open_checkpointer
    from tools.services import Services
    from tramita.shell.server import TurnServer, create_app, serve_in_thread

    stores = prepare_stores(own_cluster.url, pristine, tmp_path, prefix="restart")
    services = Services(stores.settings(tmp_path / "data"))
    monkeypatch.setenv("TRAMITA_TODAY", TODAY)  # the server's per-request Context takes "today" from it
    monkeypatch.delenv("TRAMITA_CRASH_AT", raising=False)
    with open_checkpointer(stores.checkpoint_url) as saver:
        app = create_app(TurnServer(compile_graph(checkpointer=saver), server_id="a", services=services))
        with serve_in_thread(app) as url:
            out = restart_mid_conversation([url], stores.business_url, own_cluster.stop, own_cluster.start)
    assert out["before"]["status"] == "awaiting_confirmation"
    assert out["during"]["http"] == 503 and "unavailable" in out["during"]["error"], out["during"]
    assert out["after"]["attempts"] == 1, out["after"]  # the next turn succeeds
    assert out["after"]["executed"] == "approve_expense" and out["after"]["status"] == "idle"
    assert out["writes"] == 1 and out["survived"]


@pytest.mark.postgres
def test_postgres_read_only_business_database(own_cluster: PgCluster, pristine: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A business database that turned read-only (a standby, default_transaction_read_only):
    questions are answered, the confirmed write fails with a clear message and stays pending, doctor
    says so; once writable again the same confirmation writes exactly once."""
    import dataclasses

    import psycopg

    from graph.context import Context
    from graph.session import open_session
    from tools.services import Services
    from tramita.shell.doctor import checks

    stores = prepare_stores(own_cluster.url, pristine, tmp_path, prefix="readonly")
    settings = dataclasses.replace(stores.settings(tmp_path / "data"), checkpoint_url=f"sqlite:///{tmp_path / 'ckpt.db'}")
    monkeypatch.delenv("TRAMITA_CRASH_AT", raising=False)
    name = stores.business_url.rsplit("/", 1)[1]

    def read_only(on: bool) -> None:
        with psycopg.connect(own_cluster.url, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = {"on" if on else "off"}')
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))

    try:
        with open_session(Context(user_id="E006", today=TODAY, services=Services(settings))) as session:
            assert session.turn("ro", "aprova a EXP-0264").status == "awaiting_confirmation"
            read_only(True)
            r = session.turn("ro", "sim")
            assert r.trace.get("executed_tool") is None and r.status == "awaiting_confirmation"
            assert "read-only" in r.answer
            doctor = {n: (ok, fix) for n, ok, _, fix in checks(settings)}
            assert doctor["SQL writes (business tools)"][0] is False and doctor["SQL writes (business tools)"][1]
            assert doctor["SQL database"][0] is True
            q = session.turn("ro-q", "quantas despesas estão pendentes?")
            sql = [c for c in q.contexts or [] if c["backend"] == "sql"]
            assert sql and not sql[0]["error"] and [list(r.values()) for r in sql[0]["rows"]] == [[44]]  # reads work
            read_only(False)
            r = session.turn("ro", "sim")
            assert r.trace.get("executed_tool") == "approve_expense"
    finally:
        read_only(False)
    with psycopg.connect(stores.business_url) as conn:
        n = conn.execute("SELECT COUNT(*) FROM audit_log WHERE target_id = 'EXP-0264'").fetchone()
    assert n is not None and n[0] == 1
