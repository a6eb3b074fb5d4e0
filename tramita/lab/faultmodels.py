"""Chat models that fail on purpose, for the reliability suite (tests and `tramita reliability`).

Five faults, each answering every prompt of every component the same broken way: a timeout (a
real one: the OpenAI-compatible client against a loopback endpoint that never answers), invalid
JSON, JSON for the wrong schema, an empty reply, and a router that names a tool that does not
exist. Each model counts the calls it receives per component, so a test can check that every
component retried once and then gave up (docs/architecture.md: "retry once with the error, then fail").
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel

from tools.scripted_model import ScriptedChatModel, rule_based

if TYPE_CHECKING:
    from graph.context import Context
    from graph.session import Session

FAULTS = ("timeout", "invalid_json", "wrong_schema", "empty", "unknown_tool")
UNKNOWN_TOOL = "delete_all_records"

# first words of each prompt template (prompts/*.txt) -> the component that sends it
_PREFIXES = (
    ("You extract tool arguments", "transaction_parameter_extraction"),
    ("You route a user's message", "router"),
    ("The assistant showed a summary", "confirmation"),
    ("You plan how to answer", "planner"),
    ("You write ONE read-only", "text_to_query"),
    ("The query failed", "text_to_query"),
    ("You answer questions", "synthesis"),
    ("You translate a question", "query_translation"),
)


def component_of(prompt: str) -> str:
    """The component a rendered prompt belongs to (text_to_sql and text_to_cypher share a prefix:
    the reply format on their first line tells them apart).
    """
    head = prompt.lstrip()
    for prefix, name in _PREFIXES:
        if head.startswith(prefix):
            if name == "text_to_query":
                return "text_to_cypher" if '{"cypher"' in head.split("\n", 1)[0] else "text_to_sql"
            return name
    return "other"


def _reply(fault: str, prompt: str) -> str:
    if fault == "invalid_json":
        return '{"decision": "confirm", "tool": "approve_expense", "sql": "SELECT 1"'  # truncated: not JSON
    if fault == "wrong_schema":
        return json.dumps({"answer": "yes", "confidence": 0.99, "items": [1, 2, 3]})
    if fault == "empty":
        return ""
    if fault == "unknown_tool":  # only the router is broken; everything else answers normally
        return json.dumps({"tool": UNKNOWN_TOOL}) if component_of(prompt) == "router" else rule_based(prompt)
    raise ValueError(f"unknown fault {fault!r}; choose one of {', '.join(FAULTS)}")


def faulty_model(fault: str) -> tuple[ScriptedChatModel, Counter[str]]:
    """A model with `fault` (not "timeout": see `stalled_endpoint`) and its per-component call counter."""
    calls: Counter[str] = Counter()

    def respond(prompt: str) -> str:
        calls[component_of(prompt)] += 1
        return _reply(fault, prompt)

    return ScriptedChatModel(responder=respond), calls


class _Stalled(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _StallHandler)
        self.calls: Counter[str] = Counter()
        self.stop = threading.Event()


class _StallHandler(socketserver.BaseRequestHandler):
    """Reads the HTTP request, records which component sent it, and never answers."""

    def handle(self) -> None:
        server: _Stalled = self.server  # type: ignore[assignment]
        sock: socket.socket = self.request
        sock.settimeout(0.2)
        data = b""
        while b"\r\n\r\n" not in data and not server.stop.is_set():
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
        while len(body) < length and not server.stop.is_set():
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                break
            body += chunk
        try:
            messages = json.loads(body or b"{}").get("messages", [])
            prompt = "\n".join(str(m.get("content", "")) for m in messages)
        except ValueError:
            prompt = ""
        server.calls[component_of(prompt)] += 1
        while not server.stop.is_set():  # hold the connection until the client gives up
            try:
                if not sock.recv(65536):
                    return
            except TimeoutError:
                continue
            except OSError:
                return


@contextmanager
def stalled_endpoint() -> Iterator[tuple[str, Counter[str]]]:
    """An OpenAI-compatible base URL on 127.0.0.1 that accepts requests and never replies."""
    server = _Stalled()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", server.calls
    finally:
        server.stop.set()
        server.shutdown()
        server.server_close()


def timeout_model(base_url: str, timeout_seconds: float = 0.5) -> BaseChatModel:
    """The real OpenAI-compatible client (what the `openai` backend builds) with a short timeout."""
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key="not-needed",  # type: ignore[arg-type]
                      timeout=timeout_seconds, max_retries=0, temperature=0.0)


def structured_calls(counter: Counter[str]) -> dict[str, Any]:
    """The counter as a plain dict (for reports)."""
    return dict(sorted(counter.items()))


@contextmanager
def open_injected_session(context: Context) -> Iterator[Session]:
    """A Session as `graph.session.open_session` opens it, for a context whose `llm_backend` names a
    model installed with `tools.llm.override_model` (a faulty or a compromised model). No profile
    file names those, so open_session's start-up check of the profile, which is there for a
    deployment's `--profile`, would refuse them; everything else is the same.
    """
    from graph.builder import compile_graph
    from graph.checkpointer import open_checkpointer
    from graph.session import Session

    with open_checkpointer(context.svc.settings.checkpoint_url) as saver:
        yield Session(compile_graph(checkpointer=saver), context)
