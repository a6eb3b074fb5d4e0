"""`tramita serve` and `tramita web`: one HTTP request per turn, so several processes can serve one deployment.

Every turn is one graph run on a thread, and the thread's state lives in the checkpointer, not in
the process. So any number of server processes pointed at one PostgreSQL checkpointer and one
business database can serve alternate turns of the same conversation (docs/architecture.md, "Where it runs").
The PostgreSQL checkpointer runs on a connection pool that checks each connection before use: after
a database restart, the turn in flight fails with a clear message and the next one reconnects.

    POST /threads/{thread_id}/turn     {"text": "...", "user_id": "E006", "language": "auto"} -> JSON
    POST /threads/{thread_id}/stream   same body -> text/event-stream: progress, token, final | error
    GET  /threads/{thread_id}/state
    GET  /healthz
    GET  /                             the web chat (tramita/shell/web/, static, no build step)
    GET  /api/config                   how the page finds its user (picker or trusted header)
    GET  /api/users                    the employee directory for the picker (id, name, role; read-only)

Who the user is. By default the server trusts its caller for `user_id` and binds to 127.0.0.1: it
is a local tool, or sits behind a front end that authenticated the user. Behind a company SSO proxy,
`--trusted-user-header X-Forwarded-User` makes that header the user of every request (a body's
`user_id` is ignored, a request without the header is refused with 401, the web page hides its
picker). The server refuses to bind to a non-loopback address without that mode: anyone who can
reach the port could otherwise act as any employee. The proxy must strip the header from incoming
requests and be the only way to reach the port (docs/web.md).

Bodies over `MAX_BODY_BYTES`, invalid UTF-8, malformed ids and non-ASCII user ids are refused with
4xx and a message before the graph runs.
"""

from __future__ import annotations

import ipaddress
import json
import os
import queue
import re
import socket
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from langchain_core.messages import AIMessage, HumanMessage
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from graph.context import Context
from tools.services import Services
from tramita.base.logmask import get_logger
from tramita.shell.render import doc_titles

MAX_BODY_BYTES = 256 * 1024  # a turn is a chat message; the graph itself reads 4,000 characters
THREAD_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
USER_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # ASCII only: homoglyph ids are refused, not guessed
HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")
LANGUAGES = ("auto", "pt", "en")
WEB_DIR = Path(__file__).resolve().parent / "web"
STREAM_NODE = "synthesize"  # the node whose LLM tokens are the answer being written
KEEPALIVE_SECONDS = 15.0
_SURROGATES = re.compile(r"[\ud800-\udfff]")
# The page loads nothing from elsewhere: everything it needs is served from tramita/shell/web.
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

log = get_logger("tramita")


class UnsafeBind(ValueError):
    """`serve`/`web` was asked to listen beyond loopback without a trusted user header."""


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
    r"""Lone surrogates (JSON may carry "\ud800") cannot be stored: make them U+FFFD."""
    return _SURROGATES.sub("\ufffd", text)


def is_loopback(host: str) -> bool:
    """True when every address `host` names is a loopback address (127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


def check_bind(host: str, trusted_user_header: str = "") -> None:
    """Refuse a non-loopback bind unless the user comes from a trusted SSO header (see module doc)."""
    if trusted_user_header and not HEADER_NAME.match(trusted_user_header):
        raise UnsafeBind(f"--trusted-user-header {trusted_user_header!r}: a header name is ASCII letters, digits and '-'")
    if trusted_user_header or is_loopback(host):
        return
    raise UnsafeBind(
        f"refusing to listen on {host}: without an authenticating proxy anyone who reaches the port could act as "
        "any employee. Bind to 127.0.0.1, or put the server behind your SSO proxy and pass "
        "--trusted-user-header X-Forwarded-User (the header then names the user; see docs/web.md).")


def _content_text(content: Any) -> str:
    """The text of a message chunk's content (a string, or a list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p if isinstance(p, str) else str(p.get("text", "")) for p in content
                       if isinstance(p, str) or (isinstance(p, dict) and p.get("type") == "text"))
    return ""


def sse(event: str, data: Any) -> str:
    """One server-sent event; the JSON payload is one line (json.dumps escapes newlines)."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"


class TurnServer:
    """The compiled graph plus what each request needs: a server id, a concurrency limit and, when
    the deployment sits behind an SSO proxy, the header that names the user.
    """

    def __init__(self, graph: Any, *, server_id: str, services: Services, max_concurrent: int = 8,
                 trusted_user_header: str = "") -> None:
        """No I/O here; `limiter` caps the turns run at once, and the turn and failure counts feed /healthz."""
        self.graph = graph
        self.server_id = server_id
        self.services = services
        self.trusted_user_header = trusted_user_header
        self.limiter = anyio.CapacityLimiter(max_concurrent)
        self.turns = 0
        self.failures = 0

    @staticmethod
    def _config(thread_id: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": thread_id}}

    def result(self, thread_id: str, out: dict[str, Any], started: float) -> dict[str, Any]:
        """The reply to one turn: the answer and the state a client shows (transaction, plan, the
        retrieved contexts with the cited documents' titles, the trace).
        """
        contexts = list(out.get("contexts") or [])
        cited = {str(it.get("source")) for c in contexts for it in c.get("items") or [] if isinstance(it, dict)}
        titles = doc_titles(self.services, cited) if cited else {}
        return {"thread_id": thread_id, "server": self.server_id, "answer": str(out.get("answer", "")),
                "status": str(out.get("status", "idle")), "trace": dict(out.get("turn") or {}),
                "transaction": out.get("transaction"), "last_transaction": out.get("last_transaction"),
                "plan": out.get("plan"), "contexts": contexts, "titles": titles, "lang": out.get("lang"),
                "seconds": round(time.perf_counter() - started, 4)}

    def invoke(self, thread_id: str, text: str, ctx: Context) -> dict[str, Any]:
        """Run one turn to the end (`graph.invoke`)."""
        started = time.perf_counter()
        out = self.graph.invoke({"messages": [HumanMessage(content=text)]}, config=self._config(thread_id), context=ctx)
        return self.result(thread_id, out, started)

    def stream(self, thread_id: str, text: str, ctx: Context) -> Iterator[tuple[str, dict[str, Any]]]:
        """Run one turn, yielding ("progress", {"nodes"}) as nodes finish, ("token", {"text"}) as the
        answer is written, then ("final", result).

        Tokens are the synthesis model's: a model that streams gives many small chunks, one that does
        not gives the whole answer as one chunk when it returns. The final event carries the answer
        as respond wrote it (notices, the transaction's question), which a client shows in their place.
        """
        started = time.perf_counter()
        last: dict[str, Any] = {}
        for mode, payload in self.graph.stream({"messages": [HumanMessage(content=text)]}, config=self._config(thread_id),
                                               context=ctx, stream_mode=["messages", "updates", "values"]):
            if mode == "messages":
                chunk, meta = payload
                if isinstance(chunk, AIMessage) and meta.get("langgraph_node") == STREAM_NODE:
                    piece = _content_text(chunk.content)
                    if piece:
                        yield "token", {"text": piece}
            elif mode == "updates" and isinstance(payload, dict):
                nodes = [n for n in payload if not n.startswith("__")]
                if nodes:
                    yield "progress", {"nodes": nodes}
            elif mode == "values" and isinstance(payload, dict):
                last = payload
        yield "final", self.result(thread_id, last, started)

    def state(self, thread_id: str) -> dict[str, Any]:
        """The thread's persisted state: status, transactions and the message history."""
        values = dict(self.graph.get_state(self._config(thread_id)).values)
        messages = [{"type": m.type, "content": m.content} for m in values.get("messages", [])]
        return {"thread_id": thread_id, "server": self.server_id, "status": values.get("status", "idle"),
                "transaction": values.get("transaction"), "last_transaction": values.get("last_transaction"),
                "lang": values.get("lang"), "messages": messages}

    def users(self) -> list[dict[str, str]]:
        """The employee directory (id, name, role) from the business database, read-only."""
        from sqlalchemy import text

        engine = self.services.engine
        with engine.connect() as conn:
            conn = conn.execution_options(postgresql_readonly=True)
            rows = conn.execute(text("SELECT employee_id, full_name, role FROM employees ORDER BY employee_id")).all()
            conn.rollback()
        return [{"id": str(r[0]), "name": str(r[1]), "role": str(r[2] or "")} for r in rows]


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


def _parse_turn(body: bytes, *, need_user: bool = True) -> tuple[dict[str, str] | None, str]:
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
    if need_user and (not isinstance(user, str) or not USER_ID.match(user)):
        return None, "field user_id: ASCII letters, digits, '-' or '_' only (1-64 characters)"
    if lang not in LANGUAGES:
        return None, f"field language: one of {', '.join(LANGUAGES)}"
    return {"text": clean_input(text), "user_id": str(user or ""), "language": str(lang)}, ""


def create_app(server: TurnServer) -> Starlette:
    """The ASGI app over an already compiled graph (the caller owns the checkpointer)."""

    def header_user(request: Request) -> tuple[str | None, str]:
        """In trusted-header mode: the user the proxy named, or None and why not."""
        value = request.headers.get(server.trusted_user_header, "").strip()
        if not value:
            return None, f"not authenticated: the {server.trusted_user_header} header is missing"
        if not USER_ID.match(value):
            return None, f"the {server.trusted_user_header} header is not a valid user id"
        return value, ""

    async def turn_request(request: Request) -> tuple[str, dict[str, str], Context] | Response:
        """Validate a turn request (thread id, body, user) into (thread, fields, context), or a 4xx."""
        thread_id = request.path_params["thread_id"]
        if not THREAD_ID.match(thread_id):
            return _error(400, "thread id: ASCII letters, digits and . _ : - only (1-128 characters)")
        if server.trusted_user_header:
            user, problem = header_user(request)
            if user is None:
                log.warning("refused: thread=%s %s", thread_id, problem)
                return _error(401, problem)
        body = await _read_body(request)
        if body is None:
            log.warning("refused: thread=%s oversized request body (limit %d bytes)", thread_id, MAX_BODY_BYTES)
            return _error(413, f"message too large: the limit is {MAX_BODY_BYTES} bytes per turn")
        parsed, problem = _parse_turn(body, need_user=not server.trusted_user_header)
        if parsed is None:
            log.warning("refused: thread=%s bad request: %s", thread_id, problem)
            return _error(400, problem)
        if server.trusted_user_header:
            parsed["user_id"] = str(user)
        ctx = Context(user_id=parsed["user_id"], language=parsed["language"], services=server.services)
        return thread_id, parsed, ctx

    def failed(thread_id: str, user: str, exc: BaseException) -> tuple[int, str]:
        server.failures += 1
        status, message = describe_failure(exc)
        log.error("turn failed: thread=%s user=%s server=%s %s: %s", thread_id, user, server.server_id,
                  type(exc).__name__, str(exc)[:300])
        return status, message

    def logged(thread_id: str, user: str, result: dict[str, Any]) -> None:
        server.turns += 1
        t = result["trace"]
        log.info("turn: thread=%s user=%s status=%s route=%s executed=%s refused=%s %.0f ms", thread_id, user,
                 result["status"], t.get("route"), t.get("executed_tool"), t.get("refused"), result["seconds"] * 1000)

    async def turn(request: Request) -> Response:
        checked = await turn_request(request)
        if isinstance(checked, Response):
            return checked
        thread_id, parsed, ctx = checked
        try:
            result = await anyio.to_thread.run_sync(partial(server.invoke, thread_id, parsed["text"], ctx),
                                                    limiter=server.limiter)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a clear reply, never a dropped connection
            status, message = failed(thread_id, parsed["user_id"], exc)
            return _error(status, message, thread_id=thread_id, server=server.server_id)
        logged(thread_id, parsed["user_id"], result)
        return _json(result)

    async def stream(request: Request) -> Response:
        checked = await turn_request(request)
        if isinstance(checked, Response):
            return checked
        thread_id, parsed, ctx = checked
        events: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()

        def produce() -> None:
            # The whole run happens in this one thread (LangGraph's stream is synchronous); a client
            # that goes away does not stop it, so the turn is recorded exactly as a /turn would be.
            try:
                for event in server.stream(thread_id, parsed["text"], ctx):
                    if event[0] == "final":
                        logged(thread_id, parsed["user_id"], event[1])
                    events.put(event)
            except Exception as exc:  # noqa: BLE001 - reported to the client as an error event
                status, message = failed(thread_id, parsed["user_id"], exc)
                events.put(("error", {"error": message, "status": status, "thread_id": thread_id,
                                      "server": server.server_id}))
            finally:
                events.put(None)

        async def body() -> AsyncIterator[str]:
            async with server.limiter:
                threading.Thread(target=produce, daemon=True, name=f"turn-{thread_id}").start()
                while True:
                    try:
                        event = await anyio.to_thread.run_sync(partial(events.get, timeout=KEEPALIVE_SECONDS))
                    except queue.Empty:
                        yield ": keep-alive\n\n"
                        continue
                    if event is None:
                        return
                    yield sse(*event)

        return StreamingResponse(body(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def state(request: Request) -> Response:
        thread_id = request.path_params["thread_id"]
        if not THREAD_ID.match(thread_id):
            return _error(400, "thread id: ASCII letters, digits and . _ : - only (1-128 characters)")
        if server.trusted_user_header and header_user(request)[0] is None:
            return _error(401, header_user(request)[1])
        try:
            values = await anyio.to_thread.run_sync(partial(server.state, thread_id), limiter=server.limiter)
        except Exception as exc:  # noqa: BLE001
            status, message = describe_failure(exc)
            return _error(status, message, thread_id=thread_id, server=server.server_id)
        return _json(values)

    async def healthz(request: Request) -> Response:
        return _json({"ok": True, "server": server.server_id, "pid": os.getpid(), "turns": server.turns,
                      "failures": server.failures})

    async def config(request: Request) -> Response:
        if not server.trusted_user_header:
            return _json({"trusted_user_header": None, "user": None, "server": server.server_id})
        user, problem = header_user(request)
        if user is None:
            return _error(401, problem)
        return _json({"trusted_user_header": server.trusted_user_header, "user": user, "server": server.server_id})

    async def users(request: Request) -> Response:
        if server.trusted_user_header:
            return _error(403, f"the user comes from the {server.trusted_user_header} header: there is no picker")
        try:
            rows = await anyio.to_thread.run_sync(server.users, limiter=server.limiter)
        except Exception as exc:  # noqa: BLE001
            status, message = describe_failure(exc)
            return _error(status, message)
        return _json({"users": rows})

    async def index(request: Request) -> Response:
        return FileResponse(WEB_DIR / "index.html", headers=_PAGE_HEADERS)

    return Starlette(routes=[
        Route("/threads/{thread_id}/turn", turn, methods=["POST"]),
        Route("/threads/{thread_id}/stream", stream, methods=["POST"]),
        Route("/threads/{thread_id}/state", state, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/api/config", config, methods=["GET"]),
        Route("/api/users", users, methods=["GET"]),
        Route("/", index, methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=WEB_DIR), name="static"),
    ])


def warm_up(services: Services) -> None:
    """Load the embedding model and the tool index before the first request (a backend that is
    down only logs: it degrades the turns that need it, not the server).
    """
    try:
        services.registry.match("warm up", "")
    except Exception as exc:  # noqa: BLE001
        log.warning("warm-up: tool matching unavailable: %s: %s", type(exc).__name__, str(exc)[:200])


def serve(host: str = "127.0.0.1", port: int = 8123, *, name: str = "", max_concurrent: int = 8,
          access_log: bool = False, log_level: str = "info", trusted_user_header: str = "",
          announce: Callable[[str], None] | None = None) -> int:
    """Run the server until interrupted (settings from the environment, like every command).

    Raises `UnsafeBind` before loading anything when `host` is not loopback and no trusted user
    header is set. `announce` is called with the page's URL once the services are warm.
    """
    import logging

    import uvicorn

    from graph.builder import compile_graph
    from graph.checkpointer import open_checkpointer
    from tools.llm import check_profile
    from tramita.base.logmask import mask_handler
    from tramita.base.settings import Settings

    check_bind(host, trusted_user_header)
    handler = mask_handler(logging.StreamHandler())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(log_level.upper())
    if not log.propagate:  # the CLI keeps tramita's records for its log file: print them too
        log.addHandler(handler)
    settings = Settings.from_env()
    check_profile(settings.llm_profile)
    services = Services(settings)
    server_id = name or f"{socket.gethostname()}:{port}"

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        log.info("tramita serve %s: checkpoints %s, data %s, user from %s", server_id,
                 settings.checkpoint_url.split("@")[-1], settings.sql_url.split("@")[-1],
                 f"header {trusted_user_header}" if trusted_user_header else "the request (loopback only)")
        yield

    with open_checkpointer(settings.checkpoint_url, pool_size=max_concurrent + 2) as saver:
        warm_up(services)
        server = TurnServer(compile_graph(checkpointer=saver), server_id=server_id, services=services,
                            max_concurrent=max_concurrent, trusted_user_header=trusted_user_header)
        app = create_app(server)
        app.router.lifespan_context = lifespan
        if announce is not None:
            shown = f"[{host}]" if ":" in host else host
            announce(f"http://{shown}:{port}/")
        uvicorn.run(app, host=host, port=port, log_config=None, access_log=access_log, log_level=log_level)
    return 0


@contextmanager
def serve_in_thread(app: Starlette, host: str = "127.0.0.1") -> Iterator[str]:
    """Run `app` under uvicorn on a free port in a background thread; yields its base URL (tests
    and tools that need a real HTTP server without a second Python process).
    """
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
