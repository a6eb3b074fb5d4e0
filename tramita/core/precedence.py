"""The precedence rules of a parameter turn, as pure functions.

collect_parameters applies them in order; each is a decision over facts already computed (is the
message a question, a cancel, a plain yes/no, a clear request for another tool), so each can be
tested without a model or a database.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

Stage = Literal["collecting", "awaiting_confirmation", "ready"]


def ask_extractor(*, starting: bool, pending: bool, empty: bool, cancel: bool, plain_reply: bool,
                  correcting: bool) -> bool:
    """Whether the LLM extractor runs on this message at all.

    Never on the message that starts a transaction (a clear tool match costs zero calls: its typed
    values are found deterministically and its free text only from a clear marker, see
    `keep_free_text`), on an empty message, on a cancel, on a plain yes/no (never a value), or on a
    correction of a filled value (the message is about that value, not an answer to a pending one);
    and only when something is pending.
    """
    return pending and not (starting or empty or cancel or plain_reply or correcting)


def askable_kinds(question: bool) -> tuple[str, ...]:
    """Parameter kinds the extractor must NOT be asked for: ids are found deterministically, and
    free text from a question would be dropped anyway (so the call would be wasted).
    """
    return ("id", "text") if question else ("id",)


def keep_free_text(*, starting: bool, marked: bool, question: bool, cancel: bool, another_tool: bool) -> bool:
    """Whether free-text values found in this message are kept.

    Never from a cancel or a clear request for another tool. From the message that starts the
    transaction only when it has a clear span for them ("abre um chamado P2 no search-service: o
    autocomplete parou" → the title; "rejeita a EXP-0291 porque …" → the reason): that message names
    the action, and without a marker its words are the request, not a reason. From any later
    message unless it is a question (a digression is not a reason).
    """
    if cancel or another_tool:
        return False
    if starting:
        return marked
    return not question


def keep_values(*, starting: bool, question: bool, request: bool, values_only: bool) -> bool:
    """Whether the values a message carries may fill parameters at all.

    Mid-transaction, a question that is not a request ("quem é o gestor do Lucas Oliveira?", "how
    long do we have to acknowledge a SEV1 page?") is a digression: the names and ids in it are what
    it asks about, not answers, so it fills nothing and goes to intent_shift. A message made only of
    values with a question mark ("P3?") still answers.
    """
    return starting or not question or request or values_only


def ends_on_refusal(*, starting: bool, read_only: bool, refused: bool, complete: bool) -> bool:
    """Whether a lookup ends in the turn that starts it: "qual o status do TCK-1199?" gets the
    NOT_FOUND refusal and nothing waits for another id; a write (or a lookup asked without its id)
    stays open for the value.
    """
    return starting and read_only and refused and not complete


def keep_changes(*, another_tool: bool) -> bool:
    """Values that would rewrite filled ones are a correction, unless the message is a request for
    another tool ("approve X" while rejecting Y is a new request, not a correction).
    """
    return not another_tool


def filled_anything(filled: Iterable[str], *, starting: bool, errors: bool, llm_failed: bool) -> bool:
    """A turn stays in the transaction when it filled a value, started it, or had a value refused
    or the extractor fail with a reason; otherwise it goes to intent_shift.
    """
    return bool(list(filled)) or starting or errors or llm_failed


def next_step(stage: Stage | str) -> Literal["confirm", "ready", "ask"]:
    """What the turn does after the values are applied: ask to confirm, execute, or ask the next."""
    return "confirm" if stage == "awaiting_confirmation" else ("ready" if stage == "ready" else "ask")
