"""Outbound HTTP for declared API sources: GET only, to one allow-listed origin, through ssrfguard.

Why a guard at all: the API backend turns a user's question into an HTTP request, so every value in
that request is attacker-influenced. The rules (docs/architecture.md, "Add a source"):

- The origin (scheme, host, port) is fixed by configuration, never by the question. A host must be
  written in canonical form: a DNS name, or an IP literal exactly as `ipaddress` prints it, so
  `2130706433`, `0177.0.0.1`, `0x7f.1` and `::ffff:127.0.0.1` are refused before anything resolves.
- Connections go through `ssrfguard` (PyPI), which resolves a name ONCE, validates every answer and
  connects to the address it validated (DNS rebinding cannot move the socket), refuses credentials
  in the authority, proxies and unix sockets, and checks the peer after connecting. Loopback and
  private addresses are refused unless the source's host IS that literal address (the sample API
  on 127.0.0.1 lists itself); link-local/metadata (169.254.0.0/16, fe80::/10), unspecified
  (0.0.0.0, ::), multicast and broadcast addresses are refused even when listed: no API lives there.
- Redirects are followed by hand, only to the same origin, at most `max_redirects` times.
- One deadline covers the whole exchange (`anyio.fail_after`), so a server that trickles bytes
  (slow-loris) is cut off however it paces them; the body is streamed and the read aborts past
  `max_response_bytes`; only the listed content types are accepted.
- Path parameters are percent-encoded segment by segment (`/`, backslash, `.`/`..` and control characters
  refused), query parameters are encoded by httpx from a mapping: nothing is pasted into a URL.
- The credential is read from the source's environment variable at request time and placed in
  one header; it never enters an exception message, a log line, a trace or the rendered context.

The client is synchronous for callers (`HttpGuard.get`) and async inside, because cancellation is
the only way to put a hard deadline on a read that httpcore performs in its own loop.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import anyio
import httpx
from ssrfguard import Policy, SSRFGuardError
from ssrfguard.httpx import AsyncClient

from tramita.base.logmask import get_logger

__all__ = [
    "GuardLimits",
    "GuardedResponse",
    "HttpGuard",
    "RequestRefused",
    "check_host",
    "encode_path",
    "run_sync",
]

log = get_logger("tramita.http_guard")

# A DNS name in A-label form: letters, digits and hyphens per label, no empty label.
_HOSTNAME = re.compile(r"^(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_NUMERIC_SHAPED = re.compile(r"^[0-9a-fx.]+$", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")
# never a legitimate API target, even when someone lists it
_ALWAYS_DENIED = [ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "255.255.255.255/32",
    "::/128", "fe80::/10", "ff00::/8", "fd00:ec2::254/128",
)]
_REDIRECTS = (301, 302, 303, 307, 308)


class RequestRefused(Exception):
    """The guard refused a request or its response; `code` is stable, the message is safe to show."""

    def __init__(self, code: str, message: str) -> None:
        """A refusal `code` (e.g. SSRF_REFUSED) and a message that never carries a credential."""
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class GuardLimits:
    """Caps on one exchange (a request plus its same-origin redirects)."""

    timeout_seconds: float = 5.0
    connect_timeout_seconds: float = 2.0
    max_response_bytes: int = 256 * 1024
    content_types: tuple[str, ...] = ("application/json",)
    max_redirects: int = 2


@dataclass
class GuardedResponse:
    """What came back: status, final URL, content type and the (capped) body."""

    status: int
    url: str
    content_type: str
    body: bytes
    redirects: list[str] = field(default_factory=list)

    def json(self) -> Any:
        """The body as JSON (the content type was already checked)."""
        import json

        return json.loads(self.body.decode("utf-8"))


def check_host(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """Validate a configured host; returns its address when it is an IP literal, None for a name.

    Refuses every non-canonical spelling of an address (decimal, octal, hex, short forms, IPv4-mapped
    IPv6), userinfo, ports and anything that is neither a DNS name nor a literal, plus the ranges no
    API lives in (`_ALWAYS_DENIED`).
    """
    raw = host.strip()
    if not raw or raw != host or _CONTROL.search(raw) or any(c in raw for c in "@/\\?#%[] "):
        raise RequestRefused("BAD_HOST", f"host {host!r} is not a bare host name or address")
    text = raw.lower().rstrip(".")
    address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = None
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        address = None
    if address is None:
        if ":" in text or _NUMERIC_SHAPED.match(text) and not _HOSTNAME.match(text):
            raise RequestRefused("ENCODED_ADDRESS", f"host {host!r} is an encoded or malformed address")
        if text.replace(".", "").isdigit() or not _HOSTNAME.match(text):
            raise RequestRefused("BAD_HOST", f"host {host!r} is not a well-formed DNS name")
        return None
    if str(address) != text:
        raise RequestRefused("ENCODED_ADDRESS", f"host {host!r} is not written in canonical form ({address})")
    if isinstance(address, ipaddress.IPv6Address) and (address.ipv4_mapped or address.sixtofour or address.teredo):
        raise RequestRefused("ENCODED_ADDRESS", f"host {host!r} wraps an IPv4 address; list the IPv4 form")
    for net in _ALWAYS_DENIED:
        if address.version == net.version and address in net:
            raise RequestRefused("DENIED_ADDRESS", f"{address} is in {net} (link-local, metadata, unspecified or multicast)")
    return address


def encode_path(template: str, values: Mapping[str, Any]) -> str:
    r"""`/services/{service_id}/deploys` with each `{name}` replaced by its percent-encoded value.

    A value may not contain `/` or `\`, be `.` or `..`, contain control characters or be empty:
    those are refused rather than encoded, because a server or proxy may decode and normalise them.
    """
    names = re.findall(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", template)
    out = template
    for name in names:
        if name not in values or values[name] is None:
            raise RequestRefused("MISSING_PATH_PARAM", f"path parameter {name!r} has no value")
        value = str(values[name])
        if not value or value in (".", "..") or "/" in value or "\\" in value or _CONTROL.search(value):
            raise RequestRefused("BAD_PATH_PARAM", f"path parameter {name!r} has a value that could change the path")
        out = out.replace("{" + name + "}", quote(value, safe=""))
    if "{" in out or "}" in out:
        raise RequestRefused("BAD_TEMPLATE", f"path template {template!r} is malformed")
    return out


Resolver = Callable[..., Iterable[Any]]


class HttpGuard:
    """GET requests to one allow-listed origin (see the module doc for every rule)."""

    def __init__(self, base_url: str, allowed_hosts: Sequence[str], limits: GuardLimits | None = None, *,
                 credential_env: str | None = None, credential_header: str = "Authorization",
                 credential_scheme: str = "Bearer", resolver: Resolver | None = None) -> None:
        """Check `base_url` against `allowed_hosts` now, so a bad configuration fails at start-up.

        `resolver` stands in for `socket.getaddrinfo` (tests inject a rebinding one); whatever it
        returns is validated by ssrfguard before any connection.
        """
        self.limits = limits or GuardLimits()
        if _CONTROL.search(base_url) or "\\" in base_url:
            raise RequestRefused("BAD_URL", "the base URL contains control characters or backslashes")
        try:
            url = httpx.URL(base_url)
        except httpx.InvalidURL as exc:
            raise RequestRefused("BAD_URL", f"base URL is not a URL: {exc}") from exc
        if url.scheme not in ("http", "https"):
            raise RequestRefused("BAD_SCHEME", f"scheme {url.scheme!r} is not http or https")
        if url.userinfo:
            raise RequestRefused("USERINFO", "the base URL carries credentials in its authority (user@host)")
        if url.query or url.fragment:
            raise RequestRefused("BAD_URL", "the base URL may not have a query or a fragment")
        self.address = check_host(url.host)
        listed: set[str] = set()
        for entry in allowed_hosts:
            check_host(entry)
            listed.add(entry.lower().rstrip("."))
        host = url.host.lower().rstrip(".")
        if host not in listed:
            raise RequestRefused("HOST_NOT_ALLOWED", f"host {url.host!r} is not in the allow-list {sorted(listed)}")
        self.base = url
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.origin = (url.scheme, host, self.port)
        self.credential_env = credential_env
        if not _HEADER_NAME.match(credential_header):
            raise RequestRefused("BAD_HEADER", f"credential header {credential_header!r} is not a header name")
        self.credential_header = credential_header
        self.credential_scheme = credential_scheme
        self.resolver = resolver
        # the listed literal address itself may be loopback/private: allow exactly that address
        networks = (ipaddress.ip_network(self.address),) if self.address is not None else ()
        self.policy = Policy(
            allowed_schemes=frozenset({url.scheme}), allowed_ports=frozenset({self.port}),
            allowed_hosts=frozenset({host}), allowed_networks=networks, allow_userinfo=False,
            max_redirects=self.limits.max_redirects, on_partial_block="reject",
            sensitive_headers=frozenset({"authorization", "cookie", "proxy-authorization", credential_header.lower()}),
        )

    # ------------------------------------------------------------------ URL building
    def url_for(self, path_template: str, path_params: Mapping[str, Any]) -> httpx.URL:
        """The request URL: base path + the encoded template; the origin cannot change."""
        path = encode_path(path_template, path_params)
        if not path.startswith("/"):
            raise RequestRefused("BAD_TEMPLATE", f"path template {path_template!r} must start with '/'")
        full = self.base.raw_path.decode("ascii").split("?", 1)[0].rstrip("/") + path
        if any(seg in (".", "..") for seg in full.split("/")):
            raise RequestRefused("BAD_PATH_PARAM", "the path has a dot segment")
        return self.base.copy_with(raw_path=full.encode("ascii"))

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": ", ".join(self.limits.content_types), "Accept-Encoding": "identity",
                   "User-Agent": "tramita-api-backend"}
        if self.credential_env:
            secret = os.environ.get(self.credential_env, "")
            if secret:
                if _CONTROL.search(secret):
                    raise RequestRefused("BAD_CREDENTIAL", f"the value of {self.credential_env} has control characters")
                headers[self.credential_header] = f"{self.credential_scheme} {secret}".strip()
        return headers

    def _same_origin(self, url: httpx.URL) -> bool:
        port = url.port or (443 if url.scheme == "https" else 80)
        return (url.scheme, url.host.lower().rstrip("."), port) == self.origin and not url.userinfo

    # ------------------------------------------------------------------ the request
    def get(self, path_template: str, path_params: Mapping[str, Any] | None = None,
            query: Mapping[str, Any] | None = None) -> GuardedResponse:
        """One GET (plus same-origin redirects) under every cap; raises RequestRefused."""
        url = self.url_for(path_template, path_params or {})
        params = {k: _query_value(k, v) for k, v in (query or {}).items() if v is not None}
        return run_sync(lambda: self._aget(url, params))

    async def _aget(self, url: httpx.URL, params: dict[str, str]) -> GuardedResponse:
        limits = self.limits
        timeout = httpx.Timeout(limits.timeout_seconds, connect=limits.connect_timeout_seconds)
        redirects: list[str] = []
        try:
            with anyio.fail_after(limits.timeout_seconds):
                async with AsyncClient(policy=self.policy, resolver=self.resolver, trust_env=False,
                                       follow_redirects=False, timeout=timeout) as client:
                    current: httpx.URL = url
                    current_params: dict[str, str] | None = params
                    while True:
                        async with client.stream("GET", current, params=current_params, headers=self._headers()) as resp:
                            if resp.status_code in _REDIRECTS:
                                target = _redirect_target(resp, current)
                                if not self._same_origin(target):
                                    raise RequestRefused("REDIRECT_REFUSED", "redirect to another origin refused")
                                if len(redirects) >= limits.max_redirects:
                                    raise RequestRefused("TOO_MANY_REDIRECTS", f"more than {limits.max_redirects} redirects")
                                redirects.append(str(target.copy_with(query=None)))
                                current, current_params = target, None
                                continue
                            return await self._read(resp, redirects)
        except TimeoutError as exc:
            raise RequestRefused("TIMEOUT", f"no complete answer within {limits.timeout_seconds:g} s") from exc
        except httpx.TimeoutException as exc:
            raise RequestRefused("TIMEOUT", f"{type(exc).__name__} (limit {limits.timeout_seconds:g} s)") from exc
        except httpx.ConnectError as exc:
            raise RequestRefused("CONNECT_FAILED", _short(exc)) from exc
        except SSRFGuardError as exc:
            raise RequestRefused("SSRF_REFUSED", _short(exc)) from exc
        except httpx.HTTPError as exc:
            raise RequestRefused("HTTP_ERROR", f"{type(exc).__name__}: {_short(exc)}") from exc
        except OSError as exc:
            raise RequestRefused("CONNECT_FAILED", f"{type(exc).__name__}: {_short(exc)}") from exc

    async def _read(self, resp: httpx.Response, redirects: list[str]) -> GuardedResponse:
        limits = self.limits
        ctype = resp.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if ctype not in limits.content_types:
            raise RequestRefused("CONTENT_TYPE", f"content type {ctype or '(none)'!r} is not one of {list(limits.content_types)}")
        declared = resp.headers.get("content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > limits.max_response_bytes:
            raise RequestRefused("TOO_LARGE", f"the response declares {declared} bytes (cap {limits.max_response_bytes})")
        body = bytearray()
        async for chunk in resp.aiter_bytes():
            body += chunk
            if len(body) > limits.max_response_bytes:
                raise RequestRefused("TOO_LARGE", f"the response passed the cap of {limits.max_response_bytes} bytes")
        return GuardedResponse(resp.status_code, str(resp.url.copy_with(query=None)), ctype, bytes(body), redirects)


def _redirect_target(resp: httpx.Response, current: httpx.URL) -> httpx.URL:
    location = resp.headers.get("location", "")
    if not location or _CONTROL.search(location):
        raise RequestRefused("REDIRECT_REFUSED", "a redirect without a usable Location")
    try:
        return current.join(location)
    except httpx.InvalidURL as exc:
        raise RequestRefused("REDIRECT_REFUSED", "a redirect to a malformed URL") from exc


def _query_value(name: str, value: Any) -> str:
    """A query value as text; control characters (CR/LF) are refused, not encoded."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float, str)):
        text = str(value)
    else:
        raise RequestRefused("BAD_QUERY_PARAM", f"query parameter {name!r} must be a scalar")
    if _CONTROL.search(text):
        raise RequestRefused("BAD_QUERY_PARAM", f"query parameter {name!r} has control characters")
    return text


def _short(exc: BaseException) -> str:
    return str(exc).replace("\n", " ")[:240]


def run_sync(factory: Callable[[], Any]) -> Any:
    """Run the coroutine `factory()` to completion from synchronous code.

    In a thread with no event loop (retrieval's worker threads, the CLI) that is `asyncio.run`;
    inside a running loop (an async server calling a sync path) it runs on a short-lived thread.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(factory())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name="http-guard", daemon=True)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
