"""`tramita bench` and the peer runners, on the real stores with the zero-latency scripted model.

The bench smoke run goes through the CLI entry point and checks that every non-local section
produced figures (no timing is asserted). The peer tests run the real LangChain / LangGraph peers
on real SQLite, Kùzu and the business tools; only the model is scripted, with replies that make the
scorers say both "right" and "wrong", so each test can fail.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from tools.scripted_model import ScriptedChatModel
from tramita.base.paths import SAMPLE_DIR
from tramita.base.settings import Settings
from tramita.lab.evaluation.conversations import load_items
from tramita.lab.evaluation.peers import (
    parse_tool_calls,
    peer_summary,
    run_kuzu_peer,
    run_react_peer,
    run_sql_chain_peer,
)

QUESTIONS = {i["id"]: i for i in load_items(SAMPLE_DIR / "questions.dev.jsonl")}
CONVERSATIONS = {i["id"]: i for i in load_items(SAMPLE_DIR / "conversations.dev.jsonl")}


class ScriptedToolModel(ScriptedChatModel):
    """Scripted replies in Qwen's tool-call format, parsed exactly as the local peer model's are."""

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        assert self.script, "the agent asked the model more often than the script foresees"
        self.calls += 1
        return ChatResult(generations=[ChatGeneration(message=parse_tool_calls(self.script.pop(0)))])

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self


@pytest.mark.slow
def test_bench_quick_smoke(novaops: Path, tmp_path: Path) -> None:
    from tramita.shell.cli import main

    out = tmp_path / "bench"
    rc = main(["bench", "--quick", "--skip-local", "--match-sizes", "30", "--out", str(out)])
    report = json.loads((out / "bench.json").read_text(encoding="utf-8"))
    failed = {k: v["error"] for k, v in report.items() if isinstance(v, dict) and "error" in v}
    assert rc == 0 and not failed, failed
    assert (out / "bench.md").read_text(encoding="utf-8").startswith("# tramita bench")
    kinds = report["overhead"]["per_kind"]
    assert set(kinds) == {"intent", "parameter", "parameter_text", "confirmation", "confirmation_write", "question"}
    assert {k: v["n"] for k, v in kinds.items()} == {"intent": 4, "parameter": 4, "parameter_text": 2, "confirmation": 2,
                                                      "confirmation_write": 2, "question": 6}
    assert kinds["confirmation_write"]["path"].endswith("execute_tool → respond")
    assert kinds["question"]["path"].endswith("plan → retrieve → synthesize → respond")
    assert {"retrieve", "select_intent", "execute_tool"} <= set(report["overhead"]["per_node"])
    assert report["throughput"]["turns"] == 20 and report["throughput"]["turns_per_s_mix"] > 0
    assert [r["tools"] for r in report["matching"]["results"]] == [30]
    ck = report["checkpoints"]
    assert ck["state"]["messages"] == 8 and ck["sqlite"]["put"]["n"] == 20 and ck["sqlite"]["get_tuple"]["n"] == 20
    assert "put" in ck["postgres"] or ck["postgres"]["skipped"].startswith("no PostgreSQL server")
    ing = report["ingest"]
    assert ing["documents"]["docs"] == 3 and ing["documents"]["chunks"] > 3
    assert ing["sql_sqlite"]["rows"] == 908 and ing["graph_ladybug"]["rows"] > 0
    assert report["memory"]["bench_process_peak_mib"] > 100
    assert report["local"] == {"skipped": "--skip-local"}


def test_sql_chain_peer_scores_answers_and_writes(pristine: Path, tmp_path: Path) -> None:
    good = QUESTIONS["q-dev-001"]
    wrong = {**QUESTIONS["q-dev-002"]}
    attack = QUESTIONS["q-dev-038"]
    model = ScriptedChatModel(script=[
        good["gold_sql"], "There are 44 pending expenses.",
        "SELECT amount_usd FROM budgets LIMIT 1", "The budget is 1.",
        "DELETE FROM tickets WHERE status = 'closed'", "Done.",
    ])
    recs = run_sql_chain_peer([good, wrong, attack], pristine / "novaops.db", model, workdir=tmp_path)
    by_id = {r["id"]: r for r in recs}
    assert by_id["q-dev-001"]["ok"] and by_id["q-dev-001"]["exec_correct"] and by_id["q-dev-001"]["llm_calls"] == 2
    assert not by_id["q-dev-002"]["ok"] and by_id["q-dev-002"]["exec_correct"] is False
    assert by_id["q-dev-038"]["wrote"] == ["tickets"] and not by_id["q-dev-038"]["ok"]
    assert not model.script


def test_kuzu_peer_runs_on_the_same_graph(tmp_path: Path) -> None:
    """kuzu and ladybug (a Kùzu fork) both register a pybind11 type named "Database", so they cannot
    be imported into one process (the rest of the suite loads ladybug): `isolate=True` runs the
    chain in a spawned process, the path `tramita bench peers` takes. kuzu is never imported here."""
    import importlib.util

    if importlib.util.find_spec("kuzu") is None:
        pytest.skip("the peers extra (pip install '.[peers]') brings kuzu")
    item, bad = QUESTIONS["q-dev-014"], QUESTIONS["q-dev-018"]
    model = ScriptedChatModel(script=[item["gold_cypher"], "Caio Martins is the primary.",
                                      "MATCH (n:Nope) RETURN n", "I don't know."])
    recs = run_kuzu_peer([item, bad], tmp_path / "kuzu", model, isolate=True)
    assert recs[0]["ok"] and recs[0]["exec_correct"] and recs[0]["query_ran"] and recs[0]["wrote"] == []
    assert recs[0]["llm_calls"] == 2
    assert not recs[1]["ok"] and not recs[1]["query_ran"] and recs[1]["error"]


def test_parse_tool_calls_formats() -> None:
    tagged = parse_tool_calls('Ok.\n<tool_call>\n{"name": "approve_expense", "arguments": {"expense_id": "EXP-1"}}\n</tool_call>')
    assert tagged.content == "Ok." and tagged.tool_calls[0]["args"] == {"expense_id": "EXP-1"}
    fenced = '```json\n{"name": "approve_expense", "arguments": {"expense_id": "EXP-1"}}\n```'
    assert parse_tool_calls(fenced, {"approve_expense"}).tool_calls[0]["name"] == "approve_expense"
    assert parse_tool_calls(fenced, {"reject_expense"}).tool_calls == []  # not a bound tool: plain text
    assert parse_tool_calls("<tool_call>{not json</tool_call>").invalid_tool_calls


def test_react_peer_confirmed_and_unconfirmed_writes(pristine: Path, tmp_path: Path) -> None:
    item = CONVERSATIONS["c-dev-001"]  # approve EXP-0264, as E006, after an explicit "sim"
    call = '<tool_call>\n{"name": "approve_expense", "arguments": {"expense_id": "EXP-0264"}}\n</tool_call>'
    polite = ScriptedToolModel(script=["Qual despesa?", "Vou aprovar a despesa EXP-0264. Confirma?", call, "Feito."])
    eager = ScriptedToolModel(script=["Qual despesa?", call, "Aprovada.", "Ok."])
    ok = run_react_peer([item], pristine / "novaops.db", tmp_path / "a", polite)[0]
    assert ok["ok"] and ok["unconfirmed_writes"] == 0, ok
    assert ok["turns"][2]["writes"] == ["approve_expense"] and ok["turns"][2]["llm_calls"] == 2
    rushed = run_react_peer([item], pristine / "novaops.db", tmp_path / "b", eager)[0]
    assert rushed["unconfirmed_writes"] == 1 and not rushed["ok"]
    assert rushed["turns"][1]["checks"]["executed"] is False


@pytest.mark.usefixtures("llm_planner")
def test_peer_summary_reports_ratios(novaops: Path, novaops_settings: Settings, tmp_path: Path) -> None:
    item = QUESTIONS["q-dev-001"]
    pristine_db = tmp_path / "pristine.db"
    shutil.copy(novaops, pristine_db)
    model = ScriptedChatModel(script=["SELECT 1", "I do not know."])
    res = peer_summary("sql", [item], pristine_db=pristine_db, workdir=tmp_path / "w", settings=novaops_settings,
                       models=(model, model))
    assert res["tramita"]["items"] == res["peer_summary"]["items"] == 1
    assert res["peer_summary"]["success"] == 0 and res["peer_summary"]["llm_calls_per_turn"] == 2
    assert res["tramita"]["llm_calls_per_turn"] >= 1
    assert res["ratios_tramita_over_peer"]["success_rate"] is None  # the peer's success rate is 0
    assert res["records"]["tramita"][0]["system"] == "tramita"


def test_a_child_process_reads_back_the_settings_it_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench's local probe and the reliability servers get their Settings through their own
    environment at start-up: every field must survive the round trip (a new Settings field needs
    its variable in tramita.lab.procenv)."""
    import dataclasses

    from tramita.lab.procenv import child_env

    values = {f.name: (tmp_path / f.name if "Path" in str(f.type) else f"value-of-{f.name}")
              for f in dataclasses.fields(Settings)}
    given = Settings(**values)
    for name, value in child_env(given).items():
        monkeypatch.setenv(name, value)
    assert Settings.from_env() == given
