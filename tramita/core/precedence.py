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

    Never on the message that starts a transaction (it names the action), on an empty message, on a
    cancel, on a plain yes/no (never a value), or on a correction of a filled value (the message is
    about that value, not an answer to a pending one); and only when something is pending.
    """
    return pending and not (starting or empty or cancel or plain_reply or correcting)


def askable_kinds(question: bool) -> tuple[str, ...]:
    """Parameter kinds the extractor must NOT be asked for: ids are found deterministically, and
    free text from a question would be dropped anyway (so the call would be wasted)."""
    return ("id", "text") if question else ("id",)


def keep_free_text(*, starting: bool, question: bool, cancel: bool, another_tool: bool) -> bool:
    """Free-text values survive only from a message that answers: not a question, not a cancel, not
    a clear request for another tool, and not the message that starts the transaction."""
    return not (starting or question or cancel or another_tool)


def keep_changes(*, another_tool: bool) -> bool:
    """Values that would rewrite filled ones are a correction, unless the message is a request for
    another tool ("approve X" while rejecting Y is a new request, not a correction)."""
    return not another_tool


def filled_anything(filled: Iterable[str], *, starting: bool, errors: bool, llm_failed: bool) -> bool:
    """A turn stays in the transaction when it filled a value, started it, or had a value refused
    or the extractor fail with a reason; otherwise it goes to intent_shift."""
    return bool(list(filled)) or starting or errors or llm_failed


def next_step(stage: Stage) -> Literal["confirm", "ready", "ask"]:
    """What the turn does after the values are applied: ask to confirm, execute, or ask the next."""
    return "confirm" if stage == "awaiting_confirmation" else ("ready" if stage == "ready" else "ask")
