"""A throwaway PostgreSQL cluster on 127.0.0.1 for the tests that need a real server.

`.ci/run` installs Debian's postgresql package when it is absent; this module starts a cluster in a
temporary directory on a free port (fsync off: it is thrown away) and stops it at the end.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    """A port that is free now (the OS picks it); another process may still take it before the server binds."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pg_bin() -> Path | None:
    """Debian's newest installed PostgreSQL bin directory, or None when the server is not installed."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: [int(x) for x in Path(p).parent.name.split(".") if x.isdigit()])
    return Path(found[-1]) if found else None


@dataclass
class PgCluster:
    """A running throwaway cluster: its binaries, its temporary directory and its port."""

    bindir: Path
    root: Path
    port: int

    @property
    def url(self) -> str:
        """The superuser URL; trust authentication on 127.0.0.1, so no password."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = list(args)
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, check=True, capture_output=True, text=True)

    def start(self) -> None:
        """Start the server without durability (fsync off: the data is thrown away), waiting up to 30 s for it."""
        opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        self._as_postgres(str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"), "-l",
                          str(self.root / "log"), "-w", "-t", "30", "-o", opts, "start")

    def stop(self) -> None:
        """Stop the server with a fast shutdown, waiting until it is down."""
        self._as_postgres(str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        """Stop and start again, to test what survives a server restart."""
        self.stop()
        self.start()

    def create_database(self, name: str) -> str:
        """A fresh, empty database named `name` (an old one is dropped, connections and all); returns its URL."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"


def start_cluster() -> PgCluster:
    """Start a fresh cluster; raises RuntimeError with the reason when PostgreSQL is not installed."""
    bindir = pg_bin()
    if bindir is None:
        raise RuntimeError("PostgreSQL server binaries not found (apt-get install -y --no-upgrade postgresql)")
    root = Path(tempfile.mkdtemp(prefix="tramita-pg-"))
    os.chmod(root, 0o755)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    cluster = PgCluster(bindir, root, free_port())
    cmd = [str(bindir / "initdb"), "-D", str(root / "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8",
           "--locale=C.UTF-8", "-N"]
    cluster._as_postgres(*cmd)
    cluster.start()
    return cluster
