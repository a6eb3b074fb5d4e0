"""The precedence rules of a parameter turn, one by one, without a model or a database."""

from __future__ import annotations

import pytest

from tramita.core.precedence import (
    ask_extractor,
    askable_kinds,
    ends_on_refusal,
    filled_anything,
    keep_changes,
    keep_free_text,
    keep_values,
    next_step,
)

ANSWER = dict(starting=False, pending=True, empty=False, cancel=False, plain_reply=False, correcting=False)


def test_the_extractor_runs_on_a_plain_answer_with_something_pending() -> None:
    assert ask_extractor(**ANSWER) is True


@pytest.mark.parametrize("flag", ["starting", "empty", "cancel", "plain_reply", "correcting"])
def test_the_extractor_never_runs_on_these_messages(flag: str) -> None:
    assert ask_extractor(**{**ANSWER, flag: True}) is False


def test_the_extractor_never_runs_on_the_starting_message() -> None:
    """A clear tool match costs zero LLM calls: the starting message's free text comes only from a
    clear marker, found without a model."""
    assert ask_extractor(**{**ANSWER, "starting": True}) is False


def test_the_extractor_does_not_run_with_nothing_pending() -> None:
    assert ask_extractor(**{**ANSWER, "pending": False}) is False


def test_ids_are_never_asked_and_free_text_not_from_a_question() -> None:
    assert askable_kinds(question=False) == ("id",)
    assert set(askable_kinds(question=True)) == {"id", "text"}


ANSWERING = dict(starting=False, marked=False, question=False, cancel=False, another_tool=False)


def test_free_text_survives_an_answer_but_not_a_question_a_cancel_or_another_request() -> None:
    assert keep_free_text(**ANSWERING) is True
    assert keep_free_text(**{**ANSWERING, "marked": True}) is True
    for flag in ("question", "cancel", "another_tool"):
        assert keep_free_text(**{**ANSWERING, flag: True}) is False, flag


def test_the_starting_message_keeps_free_text_only_from_a_clear_span() -> None:
    """The old rule ("never from the starting message") is gone: "abre um chamado P2 no X: o Y
    parou" carries its title after the colon; "abre um chamado P2 no X" carries none."""
    starting = {**ANSWERING, "starting": True}
    assert keep_free_text(**{**starting, "marked": True}) is True
    assert keep_free_text(**starting) is False
    # a request in question form still has its clear span ("pode abrir um chamado …: …?")
    assert keep_free_text(**{**starting, "marked": True, "question": True}) is True
    for flag in ("cancel", "another_tool"):
        assert keep_free_text(**{**starting, "marked": True, flag: True}) is False, flag


def test_a_digression_question_fills_nothing_mid_transaction() -> None:
    """"quem é o gestor do Lucas Oliveira?" names a person it asks about, not the new assignee."""
    assert keep_values(starting=False, question=True, request=False, values_only=False) is False
    assert keep_values(starting=False, question=True, request=False, values_only=True) is True  # "P3?"
    assert keep_values(starting=False, question=True, request=True, values_only=False) is True  # "pode pôr pro X?"
    assert keep_values(starting=False, question=False, request=False, values_only=False) is True
    assert keep_values(starting=True, question=True, request=False, values_only=False) is True


def test_a_lookup_of_something_missing_ends_with_the_refusal() -> None:
    assert ends_on_refusal(starting=True, read_only=True, refused=True, complete=False) is True
    assert ends_on_refusal(starting=True, read_only=False, refused=True, complete=False) is False  # a write waits
    assert ends_on_refusal(starting=False, read_only=True, refused=True, complete=False) is False
    assert ends_on_refusal(starting=True, read_only=True, refused=False, complete=False) is False  # asks for the id


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
