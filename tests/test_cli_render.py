"""What the terminal shows: answers verbatim (citation tags are text, never rich markup), a sources
footer with the documents' titles, and no library noise unless `--verbose`."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from helpers_graph import REPO
from rich.console import Console

ANSWER = ("O limite é 250 USD por noite [doc-pol-travel]; a equipe de plantão vem do grafo [graph] "
          "e a contagem do banco [SQL]. Um texto com [/] e [bold]isto não é markup[/bold] fica igual.")
TITLES = {"doc-pol-travel": "Política de Viagens Corporativas"}


def _result(answer: str = ANSWER) -> SimpleNamespace:
    return SimpleNamespace(answer=answer, status="idle", seconds=1.25, transaction=None, last_transaction=None,
                           trace={"nodes": ["route_turn", "plan", "retrieve", "synthesize", "respond"], "llm_calls": 2,
                                  "prompt_tokens": 900, "completion_tokens": 80})


def _recorder() -> Console:
    return Console(file=io.StringIO(), width=100, highlight=False, color_system=None)


def _text(console: Console) -> str:
    file = console.file
    assert isinstance(file, io.StringIO)
    return file.getvalue()


def test_print_turn_keeps_tags_verbatim_and_names_sources() -> None:
    """`[doc-x]`, `[graph]`, `[SQL]`, `[/]` and markup-looking text reach the terminal unchanged;
    the footer names the cited document by its title."""
    from tramita.shell.render import print_turn, sources_footer

    console = _recorder()
    print_turn(console, "limite de hotel? [/] [red]", _result(), titles=TITLES)
    out = _text(console)
    assert "você › limite de hotel? [/] [red]" in out
    assert ANSWER in out
    assert "fontes/sources: doc-pol-travel — Política de Viagens Corporativas; graph; SQL" in out
    assert "path: route_turn → plan → retrieve → synthesize → respond | status: idle | LLM calls: 2 (900+80 tokens)" in out
    assert sources_footer("nada citado [/]") is None


def _fake_session(answer: str) -> Any:
    @contextmanager
    def open_session(ctx: Any = None, services: Any = None) -> Iterator[Any]:
        yield SimpleNamespace(turn=lambda thread, text: _result(answer), context=ctx)

    return open_session


def test_cli_ask_and_chat_print_answers_verbatim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the real `ask` and `chat` commands (the graph replaced by a canned turn): the answer
    and the titled sources footer are printed as they are. (`--verbose` keeps the quiet switches
    out of this test process's environment.)"""
    import graph.session
    from tramita.shell import cli

    monkeypatch.setenv("TRAMITA_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TRAMITA_LLM", "scripted")
    monkeypatch.setattr(graph.session, "open_session", _fake_session(ANSWER))
    seen: list[list[str]] = []
    monkeypatch.setattr(cli, "doc_titles", lambda services, ids: seen.append(list(ids)) or TITLES)
    console = _recorder()
    monkeypatch.setattr(cli, "console", console)
    assert cli.main(["--verbose", "ask", "--user", "E006", "limite", "de", "hotel?"]) == 0
    lines = iter(["e o plantão? [/]", ""])
    monkeypatch.setattr(console, "input", lambda prompt="": next(lines))
    assert cli.main(["--verbose", "chat", "--user", "E006"]) == 0
    out = _text(console)
    assert out.count(ANSWER) == 2 and out.count("doc-pol-travel — Política de Viagens Corporativas") == 2
    assert seen == [["doc-pol-travel"], ["doc-pol-travel"]]  # titles are looked up for the cited documents only


def test_plain_lines_are_not_markup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ingest's progress lines ("[ingest] sql …") are printed as text, not eaten as markup tags."""
    from tramita.shell import cli

    console = _recorder()
    monkeypatch.setattr(cli, "console", console)
    cli._plain("[ingest] sql: done in 0.5 s [/]")
    assert _text(console) == "[ingest] sql: done in 0.5 s [/]\n"


def test_quiet_libraries_keeps_tramita_bars() -> None:
    """The quiet switches silence library bars that do not choose (TQDM_DISABLE is a default) and
    leave tramita's own bars, which pass `disable=` explicitly."""
    code = ("import sys; from tramita.shell.cli import quiet_libraries; quiet_libraries()\n"
            "from tqdm import tqdm\n"
            "for _ in tqdm(range(2), desc='tramita-bar', disable=False): pass\n"
            "for _ in tqdm(range(2), desc='library-bar'): pass\n"
            "import transformers.utils.logging as hf\n"
            "print('hf bars', hf.is_progress_bar_enabled())\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
                          check=True)
    assert "tramita-bar" in proc.stderr and "library-bar" not in proc.stderr
    assert "hf bars False" in proc.stdout


@pytest.mark.slow
def test_cli_loading_the_embedding_model_prints_no_library_noise(novaops: Path) -> None:
    """A real `tramita ask` (scripted LLM; the e5 model is loaded for tool matching and retrieval):
    no "Loading weights" bar, no absl lines, and the citation and titled footer verbatim."""
    env = {k: v for k, v in os.environ.items() if k not in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS",
                                                            "TRANSFORMERS_VERBOSITY")}
    env["TRAMITA_LLM"] = "scripted"
    proc = subprocess.run([sys.executable, "-m", "tramita.shell.cli", "ask", "--user", "E006",
                           "Qual é o limite de gastos com hotel na política de viagens?"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Loading weights" not in out and "absl" not in out and "Warning" not in out, out[-3000:]
    assert "[doc-pol-travel]" in proc.stdout
    assert "doc-pol-travel — Política de Viagens Corporativas" in proc.stdout
