"""Invented values are counted by the conversation eval (tramita/lab/evaluation/conversations.py).

For every executed write, each free-text argument must be a span of the user's own messages; one that
is not (a reason the model wrote) is counted, per turn and per item, and is a headline figure beside
the unconfirmed writes in the JSON summary and the HTML report.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_graph import copy_settings

from tramita.lab.evaluation.conversations import invented_values, run_item, summarize
from tramita.lab.evaluation.report import render_html

REJECT = {"expense_id": {"type": "string", "pattern": "^EXP-\\d{4}$"},
          "reason": {"type": "string", "minLength": 10}}
SAID = ["rejeita a EXP-0263", "o recibo do táxi é de outro dia", "sim"]


def test_a_span_of_the_users_words_is_not_invented() -> None:
    assert invented_values({"expense_id": "EXP-0263", "reason": "o recibo do táxi é de outro dia"}, REJECT,
                           SAID) == (1, [])
    assert invented_values({"expense_id": "EXP-0263", "reason": "O RECIBO DO TAXI é de outro dia"}, REJECT,
                           SAID) == (1, [])  # case and accents aside, the same words


def test_a_wrong_invented_value_is_counted() -> None:
    checked, invented = invented_values({"expense_id": "EXP-0263", "reason": "recibo com data divergente"},
                                        REJECT, SAID)
    assert checked == 1 and invented == ["reason='recibo com data divergente'"]


def test_typed_values_are_not_checked() -> None:
    assert invented_values({"expense_id": "EXP-9999"}, REJECT, SAID) == (0, [])


def _record(invented: list[str], unconfirmed: bool = False) -> dict[str, Any]:
    turn = {"user": "sim", "answer": "ok", "status": "idle", "expect": {"status_after": "idle"},
            "checks": {"status_after": True}, "trace": {"executed_tool": "reject_expense", "llm_calls": 0},
            "seconds": 0.1, "unconfirmed_write": unconfirmed, "free_text_checked": 1, "invented": invented}
    return {"id": "x", "ok": True, "turns": [turn], "final_checks": {}, "unconfirmed_writes": int(unconfirmed),
            "error": None, "seconds": 0.1, "invented_values": len(invented)}


def test_the_summary_and_the_report_show_the_count() -> None:
    summary = summarize([_record([]), _record(["reason='recibo com data divergente'"])])
    assert summary["invented_values"] == 1 and summary["free_text_values_checked"] == 2
    payload = {"kind": "conversations", "file": "f.jsonl", "profile": "scripted", "generated_at": "now",
               "summary": summary, "items": [_record(["reason='recibo com data divergente'"])]}
    page = render_html(payload)
    assert "the user never said (invented" in page and "⚠ invented: reason=" in page


@pytest.fixture(autouse=True)
def _shared_models(pristine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAMITA_MODELS_DIR", os.environ.get("TRAMITA_MODELS_DIR") or str(pristine / "models"))


def test_an_invented_reason_written_by_the_model_is_counted_end_to_end(pristine: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A model that returns its own reason instead of pointing at the user's words: the span rule
    refuses it in the graph (nothing invented is stored). With the span rule switched off (as a
    broken build would be), the eval counts the invented value."""
    import tramita.core.extraction as extraction
    from tools.llm import override_model
    from tools.scripted_model import ScriptedChatModel, rule_based

    def invents(prompt: str) -> str:
        if prompt.startswith("You extract tool arguments"):
            return '{"reason": "recibo com data divergente da viagem"}'
        return rule_based(prompt)

    override_model("scripted", ScriptedChatModel(responder=invents))
    try:
        _both_runs(pristine, tmp_path, monkeypatch, extraction)
    finally:
        override_model("scripted", None)


def _both_runs(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extraction: Any) -> None:
    item = {"id": "inv", "user_id": "E006", "turns": [
        {"user": "rejeita a EXP-0263", "expect": {"status_after": "collecting"}},
        {"user": "o recibo do táxi é de outro dia", "expect": {"status_after": "awaiting_confirmation"}},
        {"user": "sim", "expect": {"status_after": "idle", "executed": "reject_expense"}}]}
    settings = copy_settings(pristine, tmp_path, tmp_path / "unused.db")
    guarded = run_item(item, pristine / "novaops.db", tmp_path / "guarded", settings)
    assert guarded.invented_values == 0
    assert not guarded.ok  # the invented reason was refused: the reason is still pending

    monkeypatch.setattr(extraction.spans, "verify", lambda value, message, others=(), path=None:
                        extraction.spans.Verdict(str(value), "unchecked"))
    broken = run_item(item, pristine / "novaops.db", tmp_path / "broken", settings)
    assert broken.turns[-1].trace["executed_tool"] == "reject_expense"
    assert broken.invented_values == 1 and broken.turns[-1].invented == [
        "reason='recibo com data divergente da viagem'"]
