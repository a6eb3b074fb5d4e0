"""The precedence rules of a parameter turn, one by one, without a model or a database."""

from __future__ import annotations

import pytest

from tramita.core.precedence import (
    ask_extractor,
    askable_kinds,
    filled_anything,
    keep_changes,
    keep_free_text,
    next_step,
)

ANSWER = dict(starting=False, pending=True, empty=False, cancel=False, plain_reply=False, correcting=False)


def test_the_extractor_runs_on_a_plain_answer_with_something_pending() -> None:
    assert ask_extractor(**ANSWER) is True


@pytest.mark.parametrize("flag", ["starting", "empty", "cancel", "plain_reply", "correcting"])
def test_the_extractor_never_runs_on_these_messages(flag: str) -> None:
    assert ask_extractor(**{**ANSWER, flag: True}) is False


def test_the_extractor_does_not_run_with_nothing_pending() -> None:
    assert ask_extractor(**{**ANSWER, "pending": False}) is False


def test_ids_are_never_asked_and_free_text_not_from_a_question() -> None:
    assert askable_kinds(question=False) == ("id",)
    assert set(askable_kinds(question=True)) == {"id", "text"}


def test_free_text_survives_only_an_answer() -> None:
    assert keep_free_text(starting=False, question=False, cancel=False, another_tool=False) is True
    for flag in ("starting", "question", "cancel", "another_tool"):
        args = dict(starting=False, question=False, cancel=False, another_tool=False) | {flag: True}
        assert keep_free_text(**args) is False, flag


def test_a_request_for_another_tool_is_not_a_correction() -> None:
    assert keep_changes(another_tool=False) is True
    assert keep_changes(another_tool=True) is False


def test_a_turn_that_filled_nothing_goes_to_intent_shift() -> None:
    assert filled_anything([], starting=False, errors=False, llm_failed=False) is False
    assert filled_anything(["expense_id"], starting=False, errors=False, llm_failed=False) is True
    assert filled_anything([], starting=True, errors=False, llm_failed=False) is True
    assert filled_anything([], starting=False, errors=True, llm_failed=False) is True
    assert filled_anything([], starting=False, errors=False, llm_failed=True) is True


def test_next_step_follows_the_stage() -> None:
    assert next_step("awaiting_confirmation") == "confirm"
    assert next_step("ready") == "ready"
    assert next_step("collecting") == "ask"
