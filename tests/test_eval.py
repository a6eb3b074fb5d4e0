"""`tramita eval conversations|questions`: end-to-end through the CLI entry point with the
scripted model on the real stores, plus the result comparison and the report's self-containment."""

from __future__ import annotations

import base64
import io
import json
import os
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from tramita.base.paths import SAMPLE_DIR
from tramita.lab.evaluation.facts import fact_in
from tramita.lab.evaluation.questions import cell_matches, cypher_is_ordered, results_match, sql_is_ordered
from tramita.lab.evaluation.runner import Checkpoint, EvalSetupError, read_items
from tramita.shell.cli import main

CONVERSATIONS = SAMPLE_DIR / "conversations.dev.jsonl"
QUESTIONS = SAMPLE_DIR / "questions.dev.jsonl"


@pytest.fixture
def eval_env(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The deployment the CLI reads at start-up: stores from the ingested pristine dir (read-only),
    everything written under tmp_path. The eval hands its Settings to every item explicitly."""
    from tools.services import reset_services

    monkeypatch.setenv("TRAMITA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("TRAMITA_GRAPH_URL", f"ladybug://{pristine / 'novaops.lbug'}")
    monkeypatch.setenv("TRAMITA_CHROMA_DIR", str(pristine / "chroma"))
    monkeypatch.delenv("TRAMITA_SQL_URL", raising=False)
    # the CLI's global flags (--profile, --today) become these at start-up; registering them
    # restores them afterwards
    monkeypatch.setenv("TRAMITA_LLM", "scripted")
    monkeypatch.setenv("TRAMITA_TODAY", "2026-05-15")
    reset_services()
    yield tmp_path
    reset_services()


def _report(out: Path) -> dict:
    assert (out / "report.html").is_file()
    return json.loads((out / "report.json").read_text(encoding="utf-8"))


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_eval_conversations_smoke_and_resume(eval_env: Path) -> None:
    out = eval_env / "conv"
    rc = main(["--profile", "scripted", "eval", "conversations", str(CONVERSATIONS),
               "--ids", "c-dev-001,c-dev-014", "--out", str(out)])
    assert rc == 0
    report = _report(out)
    s = report["summary"]
    assert s["items"] == 2 and [r["id"] for r in report["items"]] == ["c-dev-001", "c-dev-014"]
    assert s["unconfirmed_writes"] == 0
    assert s["writes_executed"] == 2  # approve_expense and reassign_ticket, each after its "sim"
    assert s["success_rate"] == 1.0, [r["id"] for r in report["items"] if not r["ok"]]
    assert s["status_confusion"]["awaiting_confirmation"]["awaiting_confirmation"] >= 2
    first = _lines(out / "items.jsonl")
    assert [r["id"] for r in first] == ["c-dev-001", "c-dev-014"]

    # `--peers` compares these very records with the ReAct agent: the peers' shape keeps the facts
    from tramita.lab.evaluation.peers import conversation_record, summarize_records

    items = {i["id"]: i for i in read_items(CONVERSATIONS, "conversations")}
    shaped = [conversation_record(r, items[r["id"]]) for r in first]
    assert [len(r["turns"]) for r in shaped] == [len(items[r["id"]]["turns"]) for r in first]
    assert sum(t["executed"] != [] for r in shaped for t in r["turns"]) == 2  # the two confirmed writes
    summary = summarize_records(shaped, "conversations")
    assert summary["success"] == 2 and summary["unconfirmed_writes"] == 0

    # resume with a wider selection: the two finished items are not run again
    rc = main(["--profile", "scripted", "eval", "conversations", str(CONVERSATIONS),
               "--ids", "c-dev-001,c-dev-014,c-dev-002", "--out", str(out)])
    assert rc == 0
    lines = _lines(out / "items.jsonl")
    assert [r["id"] for r in lines] == ["c-dev-001", "c-dev-014", "c-dev-002"]
    assert lines[:2] == first
    assert _report(out)["summary"]["items"] == 3
    assert "TRAMITA_SQL_URL" not in os.environ  # item copies are Settings, never the caller's environment

    # a resumed run must not mix profiles into one report
    assert main(["--profile", "local", "eval", "conversations", str(CONVERSATIONS), "--out", str(out)]) == 1


@pytest.mark.usefixtures("llm_planner")
def test_eval_questions_smoke(eval_env: Path) -> None:
    """q-dev-001 is the one SQL question the scripted model answers right (its fixed query counts
    pending expenses); q-dev-038 is an injection that must be refused."""
    out = eval_env / "q"
    rc = main(["eval", "questions", str(QUESTIONS), "--profile", "scripted",
               "--ids", "q-dev-001,q-dev-038", "--out", str(out)])
    assert rc == 0
    report = _report(out)
    s = report["summary"]
    assert s["items"] == 2
    assert s["backends"]["sql_execution_accuracy"] == 1.0
    assert s["backends"]["refusal_accuracy"] == 1.0
    assert s["items_that_changed_data"] == 0
    by_id = {r["id"]: r for r in report["items"]}
    assert by_id["q-dev-001"]["sql"]["correct"] is True and "sql" in by_id["q-dev-001"]["plan"]["backends"]
    assert by_id["q-dev-038"]["checks"] == {"must_refuse": True, "clean_answer": True}
    assert s["llm_calls_per_turn"]["p50"] is not None

    rc = main(["eval", "questions", str(QUESTIONS), "--profile", "scripted", "--ids", "q-dev-001,q-dev-038",
               "--out", str(out)])
    assert rc == 0 and len(_lines(out / "items.jsonl")) == 2  # nothing ran again

    # the HTML stands alone: every image is an inline PNG that decodes, nothing is fetched
    from PIL import Image

    page = (out / "report.html").read_text(encoding="utf-8")
    images = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)">', page)
    assert len(images) >= 2  # rates and latency always; failures and confusion only when there are some
    for b64 in images:
        with Image.open(io.BytesIO(base64.b64decode(b64))) as im:
            assert im.format == "PNG" and im.width > 100
    assert not re.search(r'(src|href)="(?!data:)', page)


@pytest.mark.usefixtures("llm_planner")
def test_eval_with_peers_compares_the_same_items_in_one_command(eval_env: Path) -> None:
    """`--peers`: the SQL chain runs on the single-SQL item and on the must_refuse item, and is
    compared with this run's own tramita records (tramita is not run a second time)."""
    out = eval_env / "qp"
    rc = main(["eval", "questions", str(QUESTIONS), "--profile", "scripted", "--peers",
               "--ids", "q-dev-001,q-dev-038", "--out", str(out)])
    assert rc == 0
    report = _report(out)
    peers = report["peers"]["kinds"]
    assert set(peers) == {"sql", "refuse"}  # no single-graph item was selected
    assert peers["sql"]["items"] == ["q-dev-001"] and peers["refuse"]["items"] == ["q-dev-038"]
    ours = {r["id"]: r for r in report["items"]}["q-dev-001"]
    assert peers["sql"]["tramita"]["exec_correct"] == 1  # the same record as the eval's own check
    assert peers["sql"]["tramita"]["success"] == int(ours["checks"]["answer_facts"])
    assert peers["sql"]["peer"] == "langchain_sql_chain" and peers["sql"]["peer_summary"]["items"] == 1
    assert peers["refuse"]["tramita"]["items_that_wrote"] == 0
    assert "records" not in peers["sql"]  # the raw peer records stay in peers.json
    assert json.loads((out / "peers.json").read_text(encoding="utf-8"))["kinds"]["sql"]["records"]["peer"]
    assert not (out / "peers" / "sql" / "tramita").exists()  # tramita's eval records were reused
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "Peers (same model, same items)" in page and "langchain_sql_chain" in page


def test_a_worker_that_dies_fails_only_its_item(eval_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real SIGKILL (tramita.base.faults crash point after the business write commits) in one worker:
    that item is recorded as crashed, the other finishes, the run ends normally."""
    monkeypatch.setenv("TRAMITA_CRASH_AT", "after_commit")
    out = eval_env / "crash"
    rc = main(["--profile", "scripted", "eval", "conversations", str(CONVERSATIONS),
               "--ids", "c-dev-001,c-dev-013", "--jobs", "2", "--out", str(out)])
    assert rc == 0
    by_id = {r["id"]: r for r in _report(out)["items"]}
    assert by_id["c-dev-001"]["crashed"] and not by_id["c-dev-001"]["ok"]
    assert "worker process died (exit code -9)" in by_id["c-dev-001"]["error"]
    assert by_id["c-dev-013"]["ok"]  # never executes a tool, so never reaches the crash point
    assert Checkpoint(out / "items.jsonl").load().done() == {"c-dev-013"}  # a resume retries the crash


def test_the_eval_serves_the_sample_api_its_deployment_declares(tmp_path: Path) -> None:
    """A question the planner sends to the declared sample API is answered as under `make run`,
    whatever its gold needs; a dataset that declares no such source starts nothing."""
    from tramita.base.settings import Settings
    from tramita.lab.evalcli import _serves_sample_api

    assert _serves_sample_api(Settings.embedded(tmp_path / "data"))  # the sample dataset declares it
    bare = Settings.embedded(tmp_path / "data", dataset_dir=tmp_path / "dataset")
    assert not _serves_sample_api(bare)


def test_bad_input_names_the_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAMITA_LLM", "scripted")  # the CLI's global flags write the environment
    bad = tmp_path / "c.jsonl"
    good = CONVERSATIONS.read_text(encoding="utf-8").splitlines()[0]
    bad.write_text(good + "\n" + json.dumps({"id": "x", "user_id": "E006", "turns": [{"user": "oi", "expect": {}}]})
                   + "\n", encoding="utf-8")
    with pytest.raises(EvalSetupError, match=r"c.jsonl:2: field turns.0.expect.status_after"):
        read_items(bad, "conversations")
    with pytest.raises(EvalSetupError, match="is this a questions file"):
        read_items(QUESTIONS, "conversations")
    with pytest.raises(EvalSetupError, match="unknown ids nope"):
        read_items(CONVERSATIONS, "conversations", ids=["c-dev-001", "nope"])
    assert [i["id"] for i in read_items(QUESTIONS, "questions", limit=2)] == ["q-dev-001", "q-dev-002"]
    assert main(["--profile", "scripted", "eval", "conversations", str(bad), "--out", str(tmp_path / "o")]) == 1
    # an unknown profile: the eval's own --profile fails when the eval starts (1), the global one at
    # the CLI's start-up (2)
    assert main(["eval", "questions", str(QUESTIONS), "--profile", "nosuch", "--out", str(tmp_path / "o")]) == 1
    assert main(["--profile", "nosuch", "eval", "questions", str(QUESTIONS), "--out", str(tmp_path / "o")]) == 2


def test_checkpoint_survives_a_cut_line(tmp_path: Path) -> None:
    ck = Checkpoint(tmp_path / "items.jsonl")
    ck.append({"id": "a", "ok": True})
    ck.append({"id": "b", "ok": False, "crashed": True})
    with ck.path.open("a", encoding="utf-8") as f:
        f.write('{"id": "c", "ok": tr')  # killed mid-write
    again = Checkpoint(ck.path).load()
    assert again.done() == {"a"}  # the crashed item and the cut one run again
    assert again.skipped_lines == 1


def test_a_crashed_question_fails_every_check_it_asks_for() -> None:
    from tramita.lab.evaluation.questions import summarize
    from tramita.lab.evaluation.runner import crashed_record

    items = read_items(QUESTIONS, "questions", ids=["q-dev-030", "q-dev-038"])
    records = [crashed_record("questions", it, "worker process died (exit code -6)") for it in items]
    assert records[0]["checks"] == {"answer_facts": False, "sql_execution": False, "doc_recall_at_5": False,
                                    "no_crash": False}
    s = summarize(records)
    assert s["backends"]["sql_execution_accuracy"] == 0.0 and s["backends"]["doc_recall_at_5"] == 0.0
    assert s["backends"]["refusal_accuracy"] == 0.0 and s["success_rate"] == 0.0


# ----------------------------------------------------------------------- result comparison

def test_numbers_compare_numerically() -> None:
    assert cell_matches(612, 612.00) and cell_matches(612.0, Decimal("612.00")) and cell_matches(612, "612.00")
    assert not cell_matches(612, 612.5)
    assert cell_matches(17.3, 17.2857)  # within the gold's shown precision (ROUND(...,1))
    assert not cell_matches(6, 6.4)  # an integer gold must match exactly
    assert cell_matches(2424.47, 2424.4700000000003)
    assert not cell_matches("E003", "e003")


def test_answer_facts_normalise_number_formats() -> None:
    """README: answers are normalised; numbers compare at the dataset's two decimals (the strict
    rules, each with a wrong answer, are in tests/test_scorer.py)."""
    assert not fact_in("17.3", "The average is 17.27 minutes.")
    assert not fact_in("17.3", "The average is 17.4 minutes.")
    assert fact_in("2424.47", "US$ 2.424,47") and not fact_in("2424.47", "2424.5")
    assert fact_in("470000", "470.000,00 dólares") and fact_in("470000", "470 mil")
    assert not fact_in("44", "43.99")


def test_null_only_equals_null() -> None:
    assert results_match([(None, "x")], [(None, "x")])
    assert not results_match([(None,)], [(0,)])
    assert not results_match([(0,)], [(None,)])
    assert not results_match([("",)], [(None,)])


def test_row_order_and_columns() -> None:
    gold = [("a", 1), ("b", 2), ("c", 2)]
    shuffled = [("c", 2), ("a", 1), ("b", 2)]
    assert results_match(gold, shuffled)
    assert not results_match(gold, shuffled, ordered=True)
    assert results_match(gold, list(gold), ordered=True)
    assert results_match(gold, [(1, "a", "x"), (2, "b", "y"), (2, "c", "z")])  # swapped + extra column
    assert not results_match(gold, [("a",), ("b",), ("c",)])  # a gold column is missing
    assert not results_match(gold, gold[:2])  # row counts differ
    assert not results_match([("a", 1), ("a", 1)], [("a", 1), ("b", 1)])  # multisets, not sets
    # one column mapping for all rows: row-wise swaps do not fake a match
    assert not results_match([("1", "2"), ("3", "4")], [("1", "2"), ("4", "3")])
    assert results_match([], [])
    assert not results_match([], [(1,)])


def test_order_detection() -> None:
    assert sql_is_ordered("SELECT a FROM t ORDER BY a")
    assert not sql_is_ordered("SELECT a FROM (SELECT a FROM t ORDER BY a LIMIT 3) s")
    assert not sql_is_ordered("SELECT COUNT(*) FROM t")
    assert cypher_is_ordered("MATCH (n) RETURN n.id ORDER BY n.id")
    assert not cypher_is_ordered("MATCH (n) WITH n ORDER BY n.id LIMIT 3 RETURN n.id")
