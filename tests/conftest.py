"""Shared fixtures.

PostgreSQL: `TRAMITA_TEST_PG_URL` (set by `.ci/run`) points at a running server where we may create
databases; otherwise a throwaway cluster is started here when the server binaries exist. Tests that
need it are marked `postgres` and skip with the reason when neither is possible.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_graph import copy_settings

from tools.services import Services
from tramita.base.settings import Settings
from tramita.lab.pgcluster import PgCluster, start_cluster

if TYPE_CHECKING:
    from tools.semantic_layer import SemanticLayer
    from tools.sql_tool import SQLTool


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgCluster | str]:
    """A PostgreSQL server: the URL given by CI, or a cluster we start and stop."""
    given = os.environ.get("TRAMITA_TEST_PG_URL")
    if given:
        yield given
        return
    try:
        cluster = start_cluster()
    except Exception as exc:  # noqa: BLE001 - the reason is reported in the skip
        pytest.skip(f"no PostgreSQL server available: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)


@pytest.fixture
def pg_database(pg_server: PgCluster | str) -> str:
    """A fresh, empty database on the test server; returns its URL (postgresql://...)."""
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    admin = pg_server if isinstance(pg_server, str) else pg_server.url
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(scope="session")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory with every embedded store ingested once per test session (SQLite,
    LadybugDB, Chroma documents and tool embeddings, the registry rows)."""
    from ingest.run import ingest_all

    reuse = os.environ.get("TRAMITA_TEST_PRISTINE")
    if reuse and (Path(reuse) / "novaops.db").exists():
        return Path(reuse)  # developer loop: an already-ingested data dir, treated as read-only
    base = tmp_path_factory.mktemp("tramita-data")
    with pytest.MonkeyPatch.context() as mp:
        # the stores are named by the Settings; only the model files follow the data directory
        # (tools.model_assets.models_dir), so the converted models land in this one as well
        mp.setenv("TRAMITA_DATA_DIR", str(base))
        ingest_all(Settings.embedded(base), progress=False, models=True, say=lambda *_: None)
    return base


@pytest.fixture
def novaops(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh copy of the SQL dataset for one test; graph and documents are shared read-only.
    Returns the path of the SQLite copy. `novaops_services` are explicit services on it; the
    environment points at it too, for the code paths that take the deployment's default (a
    `Context` without services, subprocesses, the CLI)."""
    from ingest.sql_loader import copy_sqlite
    from tools.services import reset_services

    db = tmp_path / "novaops.db"
    copy_sqlite(pristine / "novaops.db", db)
    settings = copy_settings(pristine, tmp_path, db)
    monkeypatch.setenv("TRAMITA_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TRAMITA_SQL_URL", settings.sql_url)
    monkeypatch.setenv("TRAMITA_GRAPH_URL", settings.graph_url)
    monkeypatch.setenv("TRAMITA_CHROMA_DIR", settings.chroma_dir)
    monkeypatch.setenv("TRAMITA_CHECKPOINT_URL", settings.checkpoint_url)
    monkeypatch.setenv("TRAMITA_TODAY", "2026-05-15")
    reset_services()
    yield db
    reset_services()


@pytest.fixture
def novaops_settings(novaops: Path, pristine: Path, tmp_path: Path) -> Settings:
    """The `novaops` copy as explicit Settings (scripted LLM profile)."""
    return copy_settings(pristine, tmp_path, novaops)


@pytest.fixture
def novaops_services(novaops_settings: Settings) -> Services:
    """Explicit services on the `novaops` copy: pass them in the Context (`Context(services=...)`)."""
    return Services(novaops_settings)


@pytest.fixture
def tool(novaops: Path) -> SQLTool:
    """The read-only SQL tool on this test's copy of the dataset."""
    from tools.sql_tool import SQLTool

    return SQLTool(f"sqlite:///{novaops}")


@pytest.fixture
def layer(tool: SQLTool) -> SemanticLayer:
    """The sample semantic model over `tool` (the shipped file, validated against that database)."""
    from tools.semantic_layer import layer_for
    from tramita.base.paths import SAMPLE_DIR

    return layer_for(SAMPLE_DIR / "semantic_model.yaml", tool)


@pytest.fixture
def llm_planner(monkeypatch: pytest.MonkeyPatch) -> None:
    """The LLM planner decides close cases (the shipped policy takes the best match): for tests
    whose model script answers the planner's call, or that exercise a planned source through it.
    """
    import nodes.plan

    monkeypatch.setattr(nodes.plan, "llm_when_close", lambda: True)
