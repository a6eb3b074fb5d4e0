"""The levels of the code base: imports only go down (shell and lab > graph > nodes > core > tools > base).

import-linter reads the contract from pyproject.toml and builds the import graph with grimp, so an
upward import anywhere (also inside a function) fails this test with the offending chain.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_imports_only_go_down() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.fail("import-linter is not installed (it is a dev dependency: `make install`)")
    proc = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_an_upward_import_is_caught(tmp_path: Path) -> None:
    """The check is not vacuous: a copy of the contract over a tiny tree with one upward import fails."""
    lint = Path(sys.executable).with_name("lint-imports")
    for pkg, body in {"low": "from high import x\n", "high": "x = 1\n"}.items():
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text(body)
    (tmp_path / "setup.cfg").write_text(
        "[importlinter]\nroot_packages =\n    low\n    high\n\n[importlinter:contract:levels]\nname = levels\n"
        "type = layers\nlayers =\n    high\n    low\n")
    proc = subprocess.run([str(lint), "--config", "setup.cfg"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode != 0 and "low" in proc.stdout, proc.stdout + proc.stderr
