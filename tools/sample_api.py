"""The NovaOps sample operations API: a small real HTTP service for the `api` backend to call.

Why a real server: the API backend's guard (DNS pinning, caps, redirects, content types) can only
be shown to work against sockets, and the demo, the tests and `tramita serve --sample-api` need the
same service. It is Starlette on uvicorn, bound to 127.0.0.1 only, and serves
`sample/novaops/api/openapi.yaml` from the dataset's CSVs: `services.csv` and `incidents.csv` (a
service's status is derived from its open incidents) plus `api/deploys.csv` (the deploy history),
`employees.csv` for deployer names. Everything is read once at start; the data is a snapshot as of
2026-05-15, like the rest of the sample.

Status rule (documented in the OpenAPI file's enum): a deprecated service is `deprecated`; an open
SEV1 makes it `major_outage`, an open SEV2 `partial_outage`; any other open incident, or the catalog
saying `degraded`, makes it `degraded`; otherwise `operational`. "Open" is every incident status
but `resolved`.

Every request is recorded in `app.state.requests` (method, path, query), so tests can check that
tramita only ever sent the GETs it declared. `POST /deploys/{id}/rollback` exists (a write the
OpenAPI file describes and tramita's source file does not declare) and records that it was hit.
"""

from __future__ import annotations

import csv
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tramita.base.paths import SAMPLE_DIR

__all__ = ["AS_OF", "SampleData", "app_for", "create_app", "start_sample_api"]

AS_OF = "2026-05-15T08:00:00-03:00"
BASE_URL_ENV = "TRAMITA_API_NOVAOPS_URL"
STATUSES = ("operational", "degraded", "partial_outage", "major_outage", "deprecated")
RESULTS = ("succeeded", "failed", "rolled_back")
ENVIRONMENTS = ("production", "staging")
_SERVICE_ID = re.compile(r"^[a-z][a-z0-9-]{1,39}$")
_DEPLOY_ID = re.compile(r"^DEP-\d{4}$")
_TEAM_ID = re.compile(r"^T\d{2}$")
_RUNNING: dict[str, Starlette] = {}


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


class SampleData:
    """The CSVs the API serves, read once."""

    def __init__(self, dataset_dir: Path = SAMPLE_DIR) -> None:
        """Read services, incidents, employees and the deploys of `dataset_dir`."""
        data = dataset_dir / "data"
        self.services = {r["service_id"]: r for r in _csv(data / "services.csv")}
        self.incidents = _csv(data / "incidents.csv")
        self.names = {r["employee_id"]: r["full_name"] for r in _csv(data / "employees.csv")}
        rows = _csv(dataset_dir / "api" / "deploys.csv")
        self.deploys = sorted((self._deploy(r) for r in rows), key=lambda d: d["deployed_at"], reverse=True)

    def _deploy(self, r: dict[str, str]) -> dict[str, Any]:
        return {"deploy_id": r["deploy_id"], "service_id": r["service_id"], "version": r["version"],
                "environment": r["environment"], "deployed_at": r["deployed_at"],
                "deployed_by": {"employee_id": r["deployed_by"], "name": self.names.get(r["deployed_by"], "")},
                "result": r["result"], "duration_seconds": int(r["duration_seconds"]), "notes": r["notes"]}

    def open_incidents(self, service_id: str) -> list[dict[str, str]]:
        """The service's incidents that are not resolved, oldest first."""
        return [{k: i[k] for k in ("incident_id", "severity", "status", "title", "opened_at")}
                for i in self.incidents if i["service_id"] == service_id and i["status"] != "resolved"]

    def status(self, service_id: str) -> str:
        """The status rule of the module doc."""
        svc = self.services[service_id]
        severities = {i["severity"] for i in self.open_incidents(service_id)}
        if svc["status"] == "deprecated" and not severities:
            return "deprecated"
        if "SEV1" in severities:
            return "major_outage"
        if "SEV2" in severities:
            return "partial_outage"
        if severities or svc["status"] == "degraded":
            return "degraded"
        return "operational"

    def production_version(self, service_id: str) -> str | None:
        """The version of the newest succeeded production deploy (a rollback keeps the one before)."""
        for d in self.deploys:
            if d["service_id"] == service_id and d["environment"] == "production" and d["result"] == "succeeded":
                return str(d["version"])
        return None

    def service_status(self, service_id: str) -> dict[str, Any]:
        """The getServiceStatus answer: status, open incidents, production version, last deploy."""
        svc = self.services[service_id]
        last = next((d for d in self.deploys if d["service_id"] == service_id), None)
        return {"service_id": service_id, "name": svc["name"], "tier": int(svc["tier"]),
                "owner_team_id": svc["owner_team_id"], "status": self.status(service_id),
                "open_incidents": self.open_incidents(service_id),
                "production_version": self.production_version(service_id),
                "last_deploy": {k: last[k] for k in ("deploy_id", "version", "environment", "deployed_at", "result")}
                if last else None,
                "as_of": AS_OF}


class BadRequest(ValueError):
    """A parameter the OpenAPI file does not allow: 400 with the reason."""


def _date(value: str | None, name: str) -> str | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError as exc:
        raise BadRequest(f"{name} must be a date YYYY-MM-DD") from exc


def _choice(value: str | None, options: tuple[str, ...], name: str) -> str | None:
    if value is not None and value not in options:
        raise BadRequest(f"{name} must be one of {', '.join(options)}")
    return value


def _deploy_filter(request: Request, deploys: list[dict[str, Any]]) -> dict[str, Any]:
    q = request.query_params
    unknown = set(q) - {"since", "until", "result", "environment", "limit"}
    if unknown:
        raise BadRequest(f"unknown parameters: {', '.join(sorted(unknown))}")
    since, until = _date(q.get("since"), "since"), _date(q.get("until"), "until")
    result = _choice(q.get("result"), RESULTS, "result")
    env = _choice(q.get("environment"), ENVIRONMENTS, "environment")
    raw_limit = q.get("limit", "20")
    if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= 50:
        raise BadRequest("limit must be an integer from 1 to 50")
    chosen = [d for d in deploys
              if (since is None or d["deployed_at"][:10] >= since) and (until is None or d["deployed_at"][:10] <= until)
              and (result is None or d["result"] == result) and (env is None or d["environment"] == env)]
    page = chosen[: int(raw_limit)]
    return {"total": len(chosen), "returned": len(page), "deploys": page}


def create_app(dataset_dir: Path = SAMPLE_DIR, *, token: str | None = None) -> Starlette:
    """The API as a Starlette app. With `token`, every request needs `Authorization: Bearer <token>`."""
    data = SampleData(dataset_dir)

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

    async def list_services(request: Request) -> JSONResponse:
        q = request.query_params
        unknown = set(q) - {"status", "team_id", "tier"}
        if unknown:
            raise BadRequest(f"unknown parameters: {', '.join(sorted(unknown))}")
        status = _choice(q.get("status"), STATUSES, "status")
        team = q.get("team_id")
        if team is not None and not _TEAM_ID.match(team):
            raise BadRequest("team_id must look like T02")
        tier = q.get("tier")
        if tier is not None and tier not in ("1", "2", "3"):
            raise BadRequest("tier must be 1, 2 or 3")
        rows = []
        for sid, svc in data.services.items():
            st = data.status(sid)
            if (status and st != status) or (team and svc["owner_team_id"] != team) or (tier and svc["tier"] != tier):
                continue
            rows.append({"service_id": sid, "name": svc["name"], "tier": int(svc["tier"]),
                         "owner_team_id": svc["owner_team_id"], "status": st,
                         "open_incidents": [i["incident_id"] for i in data.open_incidents(sid)]})
        return JSONResponse({"as_of": AS_OF, "total": len(rows), "services": rows})

    def service_id(request: Request) -> str:
        sid = str(request.path_params["service_id"])
        if not _SERVICE_ID.match(sid):
            raise BadRequest("service_id is not a service id")
        if sid not in data.services:
            raise LookupError(f"no service {sid!r}")
        return sid

    async def get_status(request: Request) -> JSONResponse:
        return JSONResponse(data.service_status(service_id(request)))

    async def service_deploys(request: Request) -> JSONResponse:
        sid = service_id(request)
        out = _deploy_filter(request, [d for d in data.deploys if d["service_id"] == sid])
        return JSONResponse({"service_id": sid, **out})

    async def list_deploys(request: Request) -> JSONResponse:
        return JSONResponse(_deploy_filter(request, data.deploys))

    async def get_deploy(request: Request) -> JSONResponse:
        did = str(request.path_params["deploy_id"])
        if not _DEPLOY_ID.match(did):
            raise BadRequest("deploy_id must look like DEP-0001")
        found = next((d for d in data.deploys if d["deploy_id"] == did), None)
        if found is None:
            raise LookupError(f"no deploy {did!r}")
        return JSONResponse(found)

    async def rollback(request: Request) -> JSONResponse:
        request.app.state.rollbacks.append(str(request.path_params["deploy_id"]))
        return JSONResponse({"accepted": True}, status_code=202)

    routes = [
        Route("/v1/services", list_services, methods=["GET"]),
        Route("/v1/services/{service_id}/status", get_status, methods=["GET"]),
        Route("/v1/services/{service_id}/deploys", service_deploys, methods=["GET"]),
        Route("/v1/deploys", list_deploys, methods=["GET"]),
        Route("/v1/deploys/{deploy_id}", get_deploy, methods=["GET"]),
        Route("/v1/deploys/{deploy_id}/rollback", rollback, methods=["POST"]),
    ]
    async def record_and_guard(request: Request, call_next: Any) -> Any:
        request.app.state.requests.append((request.method, request.url.path, str(request.url.query)))
        if token is not None and request.headers.get("authorization") != f"Bearer {token}":
            return error(401, "missing or wrong credential")
        return await call_next(request)

    async def bad_request(request: Request, exc: Exception) -> JSONResponse:
        return error(400, str(exc))

    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return error(404, str(exc))

    app = Starlette(routes=routes, middleware=[Middleware(BaseHTTPMiddleware, dispatch=record_and_guard)],
                    exception_handlers={BadRequest: bad_request, LookupError: not_found})
    app.state.requests = []
    app.state.rollbacks = []
    return app


@contextmanager
def start_sample_api(port: int = 0, *, dataset_dir: Path = SAMPLE_DIR, token: str | None = None,
                     export_env: bool = True) -> Iterator[str]:
    """Run the sample API on 127.0.0.1 in a background thread; yields its base URL (`.../v1`).

    With `export_env`, `TRAMITA_API_NOVAOPS_URL` points at it while the block runs (the source file
    names that variable), so the `api` backend of this process calls this server; the old value is
    restored on exit. Port 0 picks a free port.
    """
    import uvicorn

    host = "127.0.0.1"
    if port == 0:
        with socket.socket() as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
    app = create_app(dataset_dir, token=token)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False,
                                           lifespan="off", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, daemon=True, name=f"sample-api-{port}")
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the sample API did not start on {host}:{port}")
        time.sleep(0.02)
    url = f"http://{host}:{port}/v1"
    _RUNNING[url] = app
    previous = os.environ.get(BASE_URL_ENV)
    if export_env:
        os.environ[BASE_URL_ENV] = url
    try:
        yield url
    finally:
        if export_env:
            if previous is None:
                os.environ.pop(BASE_URL_ENV, None)
            else:
                os.environ[BASE_URL_ENV] = previous
        server.should_exit = True
        thread.join(timeout=10)
        _RUNNING.pop(url, None)


def app_for(base_url: str) -> Starlette:
    """The app behind a running `start_sample_api` URL (tests read `app.state.requests`)."""
    return _RUNNING[base_url]
