"""Printing turns in the terminal: data and user text as plain text, citations styled.

Answers carry citation tags such as ``[doc-pol-travel]``, ``[SQL]`` or ``[graph]``. Passed to rich as
markup they would be read as style tags and vanish (and ``[/]`` would raise), so every piece that
comes from a user or from data is appended as a ``Text`` span, never parsed as markup. A "Sources"
footer names each cited document by the title of its front matter (`doc_titles`, read from the
document store where ingest put it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.text import Text

CITATION = re.compile(r"\[(doc-[\w.-]+|SQL|sql|graph|api:[\w.-]+)\]")


def cited_sources(answer: str) -> list[str]:
    """The distinct citation tags of an answer, in first-seen order."""
    seen: list[str] = []
    for m in CITATION.finditer(answer):
        if m.group(1) not in seen:
            seen.append(m.group(1))
    return seen


def cited_doc_ids(answer: str) -> list[str]:
    """The document ids an answer cites (``[doc-…]`` tags), in first-seen order."""
    return [t for t in cited_sources(answer) if t.startswith("doc-")]


def doc_titles(services: Any, doc_ids: Iterable[str] | None = None) -> dict[str, str]:
    """{doc_id: title} from the documents' front matter, as ingest stored it with every chunk in the
    document store; only `doc_ids` when given. Never raises: no store means no titles.
    """
    wanted = sorted(set(doc_ids)) if doc_ids is not None else None
    if wanted == []:
        return {}
    try:
        collection = services.doc_store.collection()
        where = {"doc_id": {"$in": wanted}} if wanted else None
        metadatas = collection.get(where=where, include=["metadatas"])["metadatas"] or []
    except Exception:  # noqa: BLE001 - titles are a nicety: the footer falls back to the ids
        return {}
    return {str(m["doc_id"]): str(m["title"]) for m in metadatas if m and m.get("doc_id") and m.get("title")}


def styled_answer(answer: str) -> Text:
    """The answer verbatim, with each citation tag highlighted."""
    out = Text()
    pos = 0
    for m in CITATION.finditer(answer):
        out.append(answer[pos:m.start()])
        out.append(m.group(0), style="bold magenta")
        pos = m.end()
    out.append(answer[pos:])
    return out


def sources_footer(answer: str, titles: dict[str, str] | None = None) -> Text | None:
    """A short 'Sources' line naming each cited document (by title when known), SQL or graph."""
    tags = cited_sources(answer)
    if not tags:
        return None
    titles = titles or {}
    names = [f"{t} — {titles[t]}" if t in titles else t for t in tags]
    return Text("  fontes/sources: " + "; ".join(names), style="dim")


def print_turn(console: Console, user: str, result: Any, show_trace: bool = True,
               titles: dict[str, str] | None = None) -> None:
    """One turn: the user's line, the answer with its citations and sources, then the trace."""
    console.print(Text.assemble(("você › ", "bold cyan"), user), soft_wrap=True)
    print_answer(console, result.answer, titles)
    if show_trace:
        print_trace(console, result)


def print_answer(console: Console, answer: str, titles: dict[str, str] | None = None) -> None:
    """The answer line and, when it cites anything, the sources footer."""
    console.print(Text.assemble(("tramita › ", "bold green"), styled_answer(answer)), soft_wrap=True)
    footer = sources_footer(answer, titles)
    if footer is not None:
        console.print(footer, soft_wrap=True)


def print_trace(console: Console, result: Any) -> None:
    """Path, status, LLM calls, tokens and seconds of one turn (dim, plain text)."""
    t = result.trace
    path = " → ".join(t.get("nodes", []))
    extra = f" | executed: {t.get('executed_tool')}" if t.get("executed_tool") else ""
    refused = f" | refused: {t.get('refusal')}" if t.get("refused") else ""
    console.print(Text(f"  path: {path} | status: {result.status} | LLM calls: {t.get('llm_calls', 0)} "
                       f"({t.get('prompt_tokens', 0)}+{t.get('completion_tokens', 0)} tokens) | "
                       f"{result.seconds:.1f} s{extra}{refused}", style="dim"), soft_wrap=True)
