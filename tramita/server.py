"""`tramita serve`: one HTTP request per turn, so several processes can serve one deployment.

Every turn is one `graph.invoke` on a thread, and the thread's state lives in the checkpointer, not
in the process. So any number of server processes pointed at one PostgreSQL checkpointer and one
business database can serve alternate turns of the same conversation (DESIGN.md "Where it runs").
The PostgreSQL checkpointer runs on a connection pool that checks each connection before use: after
a database restart, the turn in flight fails with a clear message and the next one reconnects.

    POST /threads/{thread_id}/turn   {"text": "...", "user_id": "E006", "language": "auto"}
    GET  /threads/{thread_id}/state
    GET  /healthz

The server trusts its caller for `user_id` (it sits behind the front end that authenticated the
user) and binds to 127.0.0.1 unless told otherwise. Bodies over `MAX_BODY_BYTES`, invalid UTF-8,
malformed ids and non-ASCII user ids are refused with 4xx and a message before the graph runs.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from typing import Any

import anyio
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from graph.context import Context
from tramita.logmask import get_logger

MAX_BODY_BYTES = 256 * 1024  # a turn is a chat message; the graph itself reads 4,000 characters
THREAD_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
USER_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # ASCII only: homoglyph ids are refused, not guessed
LANGUAGES = ("auto", "pt", "en")
_SURROGATES = re.compile(r"[\ud800-\udfff]")

log = get_logger("tramita")


def _json(content: Any, status: int = 200) -> Response:
    body = json.dumps(content, ensure_ascii=False, default=str)
    return Response(body, status_code=status, media_type="application/json")


def _error(status: int, message: str, **extra: Any) -> Response:
    return _json({"error": message, **extra}, status)


def describe_failure(exc: BaseException) -> tuple[int, str]:
    """HTTP status and a user-facing sentence for a turn that raised.

    Infrastructure failures are 503 (retry later); the turn is not recorded past the step that
    failed, and a retried confirmation never writes twice (the idempotency key), so saying so is
    true.
    """
    import psycopg
    from psycopg_pool import PoolTimeout
    from sqlalchemy.exc import DBAPIError

    from tools.database import DatabaseUnavailable

    detail = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    retry = ("Nothing was lost: send the message again in a moment (a repeated confirmation never runs "
             "an action twice).")
    if isinstance(exc, (DBAPIError, DatabaseUnavailable)):
        return 503, f"The business database is unavailable, so this turn could not finish ({detail}). {retry}"
    if isinstance(exc, (psycopg.Error, PoolTimeout, sqlite3.Error)):
        return 503, f"The conversation store (checkpointer) is unavailable, so this turn was not saved ({detail}). {retry}"
    if isinstance(exc, (OSError, TimeoutError)):
        return 503, f"A backend is unreachable ({detail}). {retry}"
    return 500, f"This turn failed with an internal error ({detail}). The conversation state is unchanged."


def clean_input(text: str) -> str:
    """Lone surrogates (JSON may carry "\\ud800") cannot be stored: make them U+FFFD."""
    return _SURROGATES.sub("\ufffd", text)


class TurnServer:
    """The compiled graph plus what each request needs: a server id and a concurrency limit."""

    def __init__(self, graph: Any, *, server_id: str, backend: str = "", max_concurrent: int = 8) -> None:
        self.graph = graph
        self.server_id = server_id
        self.backend = backend
        self.limiter = anyio.CapacityLimiter(max_concurrent)
        self.turns = 0
        self.failures = 0

    def invoke(self, thread_id: str, text: str, ctx: Context) -> dict[str, Any]:
        started = time.perf_counter()
        out = self.graph.invoke({"messages": [HumanMessage(content=text)]},
                                config={"configurable": {"thread_id": thread_id}}, context=ctx)
        trace = dict(out.get("turn") or {})
        return {"thread_id": thread_id, "server": self.server_id, "answer": str(out.get("answer", "")),
                "status": str(out.get("status", "idle")), "trace": trace, "transaction": out.get("transaction"),
                "last_transaction": out.get("last_transaction"), "seconds": round(time.perf_counter() - started, 4)}

    def state(self, thread_id: str) -> dict[str, Any]:
        values = dict(self.graph.get_state({"configurable": {"thread_id": thread_id}}).values)
        messages = [{"type": m.type, "content": m.content} for m in values.get("messages", [])]
        return {"thread_id": thread_id, "server": self.server_id, "status": values.get("status", "idle"),
                "transaction": values.get("transaction"), "last_transaction": values.get("last_transaction"),
                "messages": messages}


async def _read_body(request: Request) -> bytes | None:
    """The body, or None once it passes MAX_BODY_BYTES (read no further)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _parse_turn(body: bytes) -> tuple[dict[str, str] | None, str]:
    try:
        data = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return None, f"the request body is not valid UTF-8 (byte {exc.start})"
    except ValueError as exc:
        return None, f"the request body is not JSON: {exc}"
    if not isinstance(data, dict):
        return None, 'send a JSON object: {"text": "...", "user_id": "E006"}'
    text, user, lang = data.get("text"), data.get("user_id"), data.get("language", "auto")
    if not isinstance(text, str) or not text.strip():
        return None, "field text: a non-empty string is required"
    if not isinstance(user, str) or not USER_ID.match(user):
        return None, "field user_id: ASCII letters, digits, '-' or '_' only (1-64 characters)"
    if lang not in LANGUAGES:
        return None, f"field language: one of {', '.join(LANGUAGES)}"
    return {"text": clean_input(text), "user_id": user, "language": str(lang)}, ""


def create_app(server: TurnServer) -> Starlette:
    """The ASGI app over an already compiled graph (the caller owns the checkpointer)."""

    async def turn(request: Request) -> Response:
        thread_id = request.path_params["thread_id"]
        if not THREAD_ID.match(thread_id):
            return _error(400, "thread id: ASCII letters, digits and . _ : - only (1-128 characters)")
        body = await _read_body(request)
        if body is None:
            log.warning("refused: thread=%s oversized request body (limit %d bytes)", thread_id, MAX_BODY_BYTES)
            return _error(413, f"message too large: the limit is {MAX_BODY_BYTES} bytes per turn")
        parsed, problem = _parse_turn(body)
        if parsed is None:
            log.warning("refused: thread=%s bad request: %s", thread_id, problem)
            return _error(400, problem)
        server_ctx = Context(user_id=parsed["user_id"], language=parsed["language"], llm_backend=server.backend)
        try:
            result = await anyio.to_thread.run_sync(
                partial(server.invoke, thread_id, parsed["text"], server_ctx), limiter=server.limiter)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a clear reply, never a dropped connection
            server.failures += 1
            status, message = describe_failure(exc)
            log.error("turn failed: thread=%s user=%s server=%s %s: %s", thread_id, parsed["user_id"],
                      server.server_id, type(exc).__name__, str(exc)[:300])
            return _error(status, message, thread_id=thread_id, server=server.server_id)
        server.turns += 1
        t = result["trace"]
        log.info("turn: thread=%s user=%s status=%s route=%s executed=%s refused=%s %.0f ms", thread_id,
                 parsed["user_id"], result["status"], t.get("route"), t.get("executed_tool"), t.get("refused"),
                 result["seconds"] * 1000)
        return _json(result)

    async def state(request: Request) -> Response:
        thread_id = request.path_params["thread_id"]
        if not THREAD_ID.match(thread_id):
            return _error(400, "thread id: ASCII letters, digits and . _ : - only (1-128 characters)")
        try:
            values = await anyio.to_thread.run_sync(partial(server.state, thread_id), limiter=server.limiter)
        except Exception as exc:  # noqa: BLE001
            status, message = describe_failure(exc)
            return _error(status, message, thread_id=thread_id, server=server.server_id)
        return _json(values)

    async def healthz(request: Request) -> Response:
        return _json({"ok": True, "server": server.server_id, "pid": os.getpid(), "turns": server.turns,
                      "failures": server.failures})

    return Starlette(routes=[
        Route("/threads/{thread_id}/turn", turn, methods=["POST"]),
        Route("/threads/{thread_id}/state", state, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
    ])


@contextmanager
def open_server_checkpointer(url: str, pool_size: int = 8) -> Iterator[BaseCheckpointSaver[Any]]:
    """PostgresSaver on a checked connection pool (survives a database restart); the SQLite saver
    otherwise (one process only: SQLite is not for several servers)."""
    if url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        conninfo = url.replace("postgresql+psycopg://", "postgresql://")
        pool: ConnectionPool[Any] = ConnectionPool(
            conninfo, min_size=1, max_size=pool_size, open=False, timeout=10, check=ConnectionPool.check_connection,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row, "connect_timeout": 5})
        pool.open(wait=True, timeout=30)
        try:
            pg_saver = PostgresSaver(pool)  # type: ignore[arg-type]
            with pool.connection() as lock:  # servers starting together would race on CREATE TABLE
                # poll, never block: a waiting statement would stall the other server's
                # CREATE INDEX CONCURRENTLY (it waits for every open transaction): a deadlock
                while not lock.execute("SELECT pg_try_advisory_lock(hashtext('tramita.checkpointer.setup')) AS ok"
                                       ).fetchone()["ok"]:  # type: ignore[index, call-overload]
                    time.sleep(0.2)
                try:
                    pg_saver.setup()
                finally:
                    lock.execute("SELECT pg_advisory_unlock(hashtext('tramita.checkpointer.setup'))")
            yield pg_saver
        finally:
            pool.close()
        return
    from graph.checkpointer import open_checkpointer

    with open_checkpointer(url) as saver:
        yield saver


def warm_up() -> None:
    """Load the embedding model and the tool index before the first request (a backend that is
    down only logs: it degrades the turns that need it, not the server)."""
    from tramita.runtime import services

    try:
        services().registry.match("warm up", "")
    except Exception as exc:  # noqa: BLE001
        log.warning("warm-up: tool matching unavailable: %s: %s", type(exc).__name__, str(exc)[:200])


def serve(host: str = "127.0.0.1", port: int = 8123, *, name: str = "", max_concurrent: int = 8,
          access_log: bool = False, log_level: str = "info") -> int:
    """Run the server until interrupted (settings from the environment, like every command)."""
    import logging

    import uvicorn

    from graph.builder import compile_graph
    from tramita.logmask import mask_handler
    from tramita.settings import Settings

    handler = mask_handler(logging.StreamHandler())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(log_level.upper())
    if not log.propagate:  # the CLI keeps tramita's records for its log file: print them too
        log.addHandler(handler)
    settings = Settings.from_env()
    server_id = name or f"{socket.gethostname()}:{port}"

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        log.info("tramita serve %s: checkpoints %s, data %s", server_id, settings.checkpoint_url.split("@")[-1],
                 settings.sql_url.split("@")[-1])
        yield

    with open_server_checkpointer(settings.checkpoint_url, pool_size=max_concurrent + 2) as saver:
        warm_up()
        server = TurnServer(compile_graph(checkpointer=saver), server_id=server_id,
                            backend=Context().llm_backend, max_concurrent=max_concurrent)
        app = create_app(server)
        app.router.lifespan_context = lifespan
        uvicorn.run(app, host=host, port=port, log_config=None, access_log=access_log, log_level=log_level)
    return 0


@contextmanager
def serve_in_thread(app: Starlette, host: str = "127.0.0.1") -> Iterator[str]:
    """Run `app` under uvicorn on a free port in a background thread; yields its base URL (tests
    and tools that need a real HTTP server without a second Python process)."""
    import threading

    import uvicorn

    with socket.socket() as s:
        s.bind((host, 0))
        port = int(s.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, daemon=True, name=f"uvicorn-{port}")
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on {host}:{port}")
        time.sleep(0.05)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
