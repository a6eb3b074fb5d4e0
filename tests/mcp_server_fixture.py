"""A tiny MCP server over stdio for tests/test_mcp_import.py: a notebook in a SQLite file.

    python tests/mcp_server_fixture.py --db /tmp/notes.db [--variant 2]

`list_notes` is read-only (annotated `readOnlyHint: true`); `add_note` appends one row (annotated
`readOnlyHint: false`), so the test can count exactly how many times tramita wrote. `--variant 2`
changes add_note's description, which a re-import must see as a new version.
"""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations


def build(db: Path, variant: int) -> FastMCP:
    """The server with its two tools on the notebook `db`."""
    server = FastMCP("notes")
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL, tag TEXT NOT NULL)")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def list_notes() -> list[dict[str, object]]:
        """Lista as notas do caderno de notas. Lists the notes in the notebook."""
        with sqlite3.connect(db) as conn:
            return [{"id": i, "text": t, "tag": g} for i, t, g in conn.execute("SELECT id, text, tag FROM notes")]

    description = ("Adiciona uma nota ao caderno de notas. Adds a note to the notebook." if variant == 1 else
                   "Adiciona uma nota (com etiqueta) ao caderno de notas da equipe. Adds a tagged note to the team notebook.")

    @server.tool(description=description, annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
    def add_note(text: str, tag: str = "geral") -> dict[str, object]:
        with sqlite3.connect(db) as conn:
            cur = conn.execute("INSERT INTO notes (text, tag) VALUES (?, ?)", (text, tag))
            return {"id": cur.lastrowid, "text": text, "tag": tag}

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True, type=Path)
    parser.add_argument("--variant", type=int, default=1)
    args = parser.parse_args()
    build(args.db, args.variant).run("stdio")


if __name__ == "__main__":
    main()
