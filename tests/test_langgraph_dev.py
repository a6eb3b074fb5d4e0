"""The graph served by `langgraph dev` (what LangGraph Studio and agent-chat-ui talk to).

A real dev server is started from the repository's langgraph.json on a free local port, with every
TRAMITA_* store pointing at a prepared data directory outside the tree (`--no-reload`, and file
persistence off, so nothing is written into the repository). Through `langgraph_sdk` the test runs a
two-turn transaction on one thread — the server's own persistence carries it from run to run — and
checks the graph and the schemas Studio draws its canvas and forms from.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_graph import REPO, audit_rows, data_env, expense_status, prepare_data_dir

from graph.context import Context

pytestmark = pytest.mark.slow

READY_TIMEOUT_S = 120
RUN_TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ok(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/ok", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def absolute_config(path: Path) -> dict[str, Any]:
    """langgraph.json with `./x` graph paths and dependencies made absolute (they resolve against
    the cwd otherwise)."""
    config: dict[str, Any] = json.loads(path.read_text())
    base = path.parent

    def absolute(ref: str) -> str:
        return str((base / ref).resolve()) if ref.startswith(".") else ref

    config["graphs"] = {name: absolute(spec) for name, spec in config["graphs"].items()}
    config["dependencies"] = [absolute(d) for d in config.get("dependencies", [])]
    return config


@pytest.fixture(scope="module")
def server(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(base URL, SQLite file) of a `langgraph dev` server; killed (with its children) afterwards."""
    langgraph = Path(sys.executable).parent / "langgraph"
    assert langgraph.exists(), f"langgraph CLI not installed next to {sys.executable}"
    workdir = tmp_path_factory.mktemp("langgraph-dev")
    db = prepare_data_dir(pristine, workdir / "data")
    # The dev server pickles its threads into .langgraph_api/ under its cwd (the CLI forces file
    # persistence on), so it runs from the work dir on the repository's langgraph.json with its
    # relative paths made absolute — the tree stays untouched.
    (workdir / "langgraph.json").write_text(json.dumps(absolute_config(REPO / "langgraph.json")))
    env = {**os.environ, **data_env(pristine, workdir / "data"),
           "TRAMITA_MODELS_DIR": os.environ.get("TRAMITA_MODELS_DIR") or str(pristine / "models"),
           "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_TRACING": "false", "LANGCHAIN_TRACING_V2": "false"}
    env.pop("TRAMITA_CRASH_AT", None)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (workdir / "server.log").open("w")
    proc = subprocess.Popen([str(langgraph), "dev", "--no-browser", "--no-reload", "--port", str(port),
                             "--config", str(workdir / "langgraph.json")], cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _ok(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(f"langgraph dev did not become ready (rc={proc.poll()}):\n"
                            + (workdir / "server.log").read_text()[-4000:])
            time.sleep(0.5)
        yield url, db
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


@pytest.fixture(scope="module")
def client(server: tuple[str, Path]) -> Any:
    from langgraph_sdk import get_sync_client

    return get_sync_client(url=server[0], api_key=None, timeout=RUN_TIMEOUT_S)


CONTEXT = {"user_id": "E006", "today": "2026-05-15", "llm_backend": "scripted", "language": "auto"}


def _say(client: Any, thread_id: str, text: str, context: dict[str, Any] | None = None) -> dict[str, Any]:
    out = client.runs.wait(thread_id, "tramita", input={"messages": [{"role": "user", "content": text}]},
                           context=context or CONTEXT)
    assert isinstance(out, dict), out
    return out


def test_two_turn_transaction_persists_across_runs(client: Any, server: tuple[str, Path]) -> None:
    _, db = server
    thread = client.threads.create()
    first = _say(client, thread["thread_id"], "aprova a EXP-0264")
    assert first["status"] == "awaiting_confirmation", first.get("answer")
    assert first["transaction"]["tool"] == "approve_expense"
    assert first["transaction"]["args"] == {"expense_id": "EXP-0264"}
    assert first["turn"]["executed_tool"] is None
    assert expense_status(db, "EXP-0264") == "pending"
    # between runs, the server's own checkpointer holds the transaction
    state = client.threads.get_state(thread["thread_id"])
    assert state["values"]["status"] == "awaiting_confirmation"
    assert state["values"]["transaction"]["confirmation_hash"] == first["transaction"]["confirmation_hash"]

    second = _say(client, thread["thread_id"], "sim")
    assert second["status"] == "idle" and second["transaction"] is None
    assert second["turn"]["executed_tool"] == "approve_expense"
    assert second["turn"]["llm_calls"] == 0
    assert second["last_transaction"]["outcome"] == "executed"
    assert expense_status(db, "EXP-0264") == "approved" and audit_rows(db, "EXP-0264") == 1
    # the thread's messages are the chat UIs' view: two user turns, two assistant replies
    roles = [m["type"] for m in client.threads.get_state(thread["thread_id"])["values"]["messages"]]
    assert roles == ["human", "ai", "human", "ai"]


def test_a_yes_on_a_new_thread_executes_nothing(client: Any, server: tuple[str, Path]) -> None:
    _, db = server
    before = audit_rows(db)
    out = _say(client, client.threads.create()["thread_id"], "sim")
    assert out["status"] == "idle" and out["turn"]["executed_tool"] is None
    assert audit_rows(db) == before


def test_run_context_from_the_sdk_reaches_the_graph(client: Any, server: tuple[str, Path]) -> None:
    """The server's env says E006 (a finance approver); the run's context says E028, who is not."""
    _, db = server
    out = _say(client, client.threads.create()["thread_id"], "aprova a EXP-0268", {**CONTEXT, "user_id": "E028"})
    assert out["turn"]["refused"] is True and out["turn"]["executed_tool"] is None
    assert out["status"] == "idle" and out.get("transaction") is None
    assert expense_status(db, "EXP-0268") == "pending"


def _assistant_id(client: Any) -> str:
    found = client.assistants.search(graph_id="tramita")
    assert found, "the dev server registered no assistant for graph 'tramita'"
    return str(found[0]["assistant_id"])


def test_studio_graph_has_the_design_nodes(client: Any) -> None:
    drawn = client.assistants.get_graph(_assistant_id(client))
    nodes = {n["id"] for n in drawn["nodes"]}
    assert {"collect_parameters", "await_confirmation", "intent_shift", "plan", "retrieve", "synthesize"} <= nodes
    edges = {(e["source"], e["target"]) for e in drawn["edges"]}
    assert ("await_confirmation", "execute_tool") in edges and ("intent_shift", "plan") in edges
    assert ("plan", "retrieve") in edges and ("retrieve", "synthesize") in edges


def test_studio_schemas_describe_input_output_state_and_context(client: Any) -> None:
    schemas = client.assistants.get_schemas(_assistant_id(client))
    for key in ("input_schema", "output_schema", "state_schema", "context_schema"):
        assert schemas.get(key), key
    assert set(schemas["input_schema"]["properties"]) == {"messages"}
    assert {"answer", "status", "transaction", "turn"} <= set(schemas["output_schema"]["properties"])
    assert {"transaction", "last_transaction", "intent", "notices"} <= set(schemas["state_schema"]["properties"])
    props = schemas["context_schema"]["properties"]
    assert set(Context.field_names()) <= set(props)
    for field in Context.__dataclass_fields__.values():  # the form Studio renders, with our help texts
        assert props[field.name].get("description") == field.metadata["description"], field.name
