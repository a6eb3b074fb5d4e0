"""The retrieval-backend plug-in point and the shared generate-validate-repair loop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tools.backends import BACKENDS, RetrievalBackend, generate_validate_repair
from tools.scripted_model import ScriptedChatModel, rule_based


def test_every_registered_backend_meets_the_protocol() -> None:
    assert set(BACKENDS) >= {"docs", "sql", "graph"}
    for name, backend in BACKENDS.items():
        assert isinstance(backend, RetrievalBackend) and backend.name == name and backend.citation


def test_a_toy_backend_is_one_module_and_one_registry_line(novaops: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from toy_backend import ToyBackend

    from graph.context import Context
    from graph.session import open_session
    from nodes.plan import plan_model
    from tools.llm import override_model

    monkeypatch.setitem(BACKENDS, "toy", ToyBackend())  # the one registry line
    assert "use_toy" in plan_model().model_fields

    def respond(prompt: str) -> str:
        if prompt.startswith("You plan how to answer"):
            assert "use_toy" in prompt and "the toy catalogue" in prompt  # the planner sees the new source
            return json.dumps({**{f"use_{n}": False for n in BACKENDS}, "use_toy": True, "reason": "toy"})
        return rule_based(prompt)

    override_model("scripted", ScriptedChatModel(responder=respond))
    try:
        with open_session(Context(user_id="E006", today="2026-05-15", llm_backend="scripted")) as session:
            r = session.turn("toy-1", "which toys exist in the catalogue?")
    finally:
        override_model("scripted", None)
    assert r.plan is not None and r.plan["backends"] == ["toy"]
    assert [c["backend"] for c in r.contexts or []] == ["toy"]
    assert "[toy] kite" in r.answer  # synthesis read the toy's own rendering


def test_repair_loop_feeds_the_error_back_and_stops_on_success() -> None:
    prompts: list[str] = []
    answers = iter(["SELEC 1", "SELECT 1"])

    def generate(prompt: str) -> str:
        prompts.append(prompt)
        return next(answers)

    def execute(query: str) -> list[dict[str, Any]]:
        if query != "SELECT 1":
            raise ValueError("syntax error near SELEC")
        return [{"one": 1}]

    run = generate_validate_repair("how many?", generate, execute)
    assert run.rows == [{"one": 1}] and run.attempts == 2 and run.error is None and run.query == "SELECT 1"
    assert "syntax error near SELEC" in prompts[1] and "SELEC 1" in prompts[1]


class Down(RuntimeError):
    pass


def test_repair_loop_gives_up_at_once_on_a_fatal_error_and_after_the_bound_otherwise() -> None:
    calls: list[str] = []

    def generate(prompt: str) -> str:
        calls.append(prompt)
        return "SELECT 1"

    def down(query: str) -> list[dict[str, Any]]:
        raise Down("database is down")

    run = generate_validate_repair("q", generate, down, fatal=(Down,))
    assert run.attempts == 1 and run.error == "database is down" and len(calls) == 1

    def broken(query: str) -> list[dict[str, Any]]:
        raise ValueError("no such table")

    calls.clear()
    run = generate_validate_repair("q", generate, broken, max_repairs=2)
    assert run.attempts == 3 and len(calls) == 3 and run.rows == [] and "no such table" in (run.error or "")
