"""Horizontal scale, short CI version: two `tramita serve` processes share one PostgreSQL
checkpointer and one PostgreSQL business database and serve alternate turns of the same threads.

Ten concurrent conversations of ten turns (two confirmed writes each) run on loopback, bounded in
count and time. Afterwards the database accounts for every write: none lost, none duplicated, none
without its confirmation turn (audit rows and idempotency keys), and no thread's messages,
transaction or rows belong to another thread. The latency figures are printed, never asserted.
The long run (50 conversations, 500 turns) is `tramita reliability`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tramita.lab.pgcluster import PgCluster
from tramita.lab.reliability import (
    audit_base,
    dialog,
    fetch_states,
    prepare_stores,
    run_load,
    run_servers,
    verify_load,
)

CONVERSATIONS = 10

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def test_two_servers_share_threads_without_losing_writes(pg_server: PgCluster | str, pristine: Path,
                                                          tmp_path: Path) -> None:
    admin = pg_server if isinstance(pg_server, str) else pg_server.url
    stores = prepare_stores(admin, pristine, tmp_path, prefix="scale")
    env = {**stores.env(), "TRAMITA_LLM": "scripted", "TRAMITA_TODAY": "2026-05-15",
           "TRAMITA_DATA_DIR": str(tmp_path / "server-data")}
    with run_servers(2, env, tmp_path) as servers:
        urls = [s.url for s in servers]
        base = audit_base(stores.business_url)
        load = run_load(urls, CONVERSATIONS, time_limit=600)
        states = fetch_states(urls, load)
        report = verify_load(load, stores.business_url, base, states)
    print(f"\nscale: {report['turns']} turns on {report['servers']} servers in {report['seconds']} s; "
          f"p50 {report['latency_p50_ms']} ms, p95 {report['latency_p95_ms']} ms (scripted model)")
    assert report["turns"] == CONVERSATIONS * len(dialog(0))
    assert report["turns_failed"] == 0, report["errors"]
    assert report["servers_used_per_thread"] == 2  # every thread was served by both processes
    assert report["writes_expected"] == report["writes_reported"] == report["audit_rows"] == report["idempotency_keys"] == 20
    assert report["writes_lost"] == 0 and report["writes_duplicated"] == 0 and report["writes_unconfirmed"] == 0, report["problems"]
    assert report["state_bleed"] == 0, report["problems"]
    # each thread ended idle with its whole history (ten turns, ten replies), read from the other process
    for i, state in states.items():
        assert state["status"] == "idle" and state["transaction"] is None, i
        assert [m["type"] for m in state["messages"]] == ["human", "ai"] * len(dialog(i)), i
        assert state["last_transaction"]["tool"] == "submit_expense", i

    # the accounting can fail: a replayed write and a write nobody confirmed are both caught
    from sqlalchemy import text

    from tools.database import writer_engine

    with writer_engine(stores.business_url).begin() as conn:
        conn.execute(text("INSERT INTO audit_log (audit_id, occurred_at, actor_id, tool_name, target_table, target_id, "
                          "arguments_json, outcome) SELECT audit_id + 1000, occurred_at, actor_id, tool_name, target_table, "
                          "target_id, arguments_json, outcome FROM audit_log WHERE audit_id = (SELECT MAX(audit_id) FROM audit_log)"))
        conn.execute(text("INSERT INTO audit_log (audit_id, occurred_at, actor_id, tool_name, target_table, target_id, "
                          "arguments_json, outcome) VALUES (5000, '2026-05-15 12:00:00', 'E028', 'create_ticket', 'tickets', "
                          "'TCK-9999', '{\"title\": \"conv-001: forged\"}', 'success')"))
    tampered = verify_load(load, stores.business_url, base, states)
    assert tampered["writes_duplicated"] >= 1 and tampered["writes_unconfirmed"] >= 1
