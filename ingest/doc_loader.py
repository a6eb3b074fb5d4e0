"""Chunk the NovaOps markdown documents and embed them into Chroma.

Each document is YAML front matter plus a markdown body. We split on headings first (a section
is the unit an answer cites) and cap long sections by size, so a chunk never mixes two topics
and never outgrows what a small model can read. Every chunk carries the document's metadata and
starts with "title — section", so a passage read alone still says where it comes from.

Loading is idempotent: chunk ids hash the chunk's text and metadata, so a re-run embeds nothing
that is already stored and deletes the chunks of documents that changed or disappeared.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_text_splitters import (
    MarkdownHeaderTextSplitter,
    RecursiveCharacterTextSplitter,
)
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator
from tqdm import tqdm

from tools.doc_store import DocStore
from tramita.base.paths import SAMPLE_DIR
from tramita.base.text import HEADING_SEPARATOR, continued_table, last_table_header

log = logging.getLogger(__name__)

CHUNK_SIZE = 800
CHUNK_OVERLAP = 100
EMBED_BATCH = 32
_HEADERS = [("#", "h1"), ("##", "h2"), ("###", "h3")]


class DocFormatError(ValueError):
    """A document file cannot be parsed; the message names the file and the field."""


class FrontMatter(BaseModel):
    """The header every document must carry; unknown keys are kept as extra metadata."""

    model_config = ConfigDict(extra="allow")

    doc_id: str
    title: str
    lang: str
    type: str
    owner_team: str
    related_ids: list[str] = []
    policy_id: str | None = None
    version: str | None = None
    effective_date: str | None = None

    @field_validator("version", "effective_date", mode="before")
    @classmethod
    def _as_text(cls, value: Any) -> Any:
        # YAML reads `2026-01-01` as a date and `3.2` as a float; we store them as text.
        if isinstance(value, (dt.date, int, float)):
            return value.isoformat() if isinstance(value, dt.date) else str(value)
        return value

    @field_validator("related_ids", mode="before")
    @classmethod
    def _ids_as_text(cls, value: Any) -> Any:
        return [str(v) for v in value] if isinstance(value, list) else value


def parse_doc(path: Path) -> tuple[FrontMatter, str]:
    """Split a document into validated front matter and its markdown body."""
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---"):
        raise DocFormatError(f"{path}: missing YAML front matter (the file must start with '---')")
    parts = text.split("\n---", 1)
    if len(parts) != 2:
        raise DocFormatError(f"{path}: front matter is not closed by a '---' line")
    header, body = parts[0][3:], parts[1].split("\n", 1)[1] if "\n" in parts[1] else ""
    try:
        raw = yaml.safe_load(header)
    except yaml.YAMLError as exc:
        raise DocFormatError(f"{path}: front matter is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise DocFormatError(f"{path}: front matter must be a mapping of fields")
    try:
        meta = FrontMatter.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"field '{'.'.join(str(p) for p in err['loc'])}': {err['msg']}" for err in exc.errors()
        )
        raise DocFormatError(f"{path}: {problems}") from exc
    return meta, body


def _scalar_metadata(meta: FrontMatter) -> dict[str, str | int | float | bool]:
    """Chroma metadata values must be scalars and not None: join lists, drop empty fields."""
    out: dict[str, str | int | float | bool] = {}
    for key, value in meta.model_dump().items():
        if value is None:
            continue
        if isinstance(value, list):
            out[key] = ",".join(str(v) for v in value)
        elif isinstance(value, (str, int, float, bool)):
            out[key] = value
        else:
            out[key] = str(value)
    return out


def _section_of(header_meta: dict[str, Any], title: str) -> str:
    """The deepest heading above the chunk (the part before the first `##` is the h1 intro)."""
    for key in ("h3", "h2", "h1"):
        if header_meta.get(key):
            return str(header_meta[key])
    return title


def _chunk_id(doc_id: str, index: int, text: str, metadata: dict[str, Any]) -> str:
    payload = json.dumps([text, metadata], sort_keys=True, ensure_ascii=False)
    return f"{doc_id}:{index}:{hashlib.sha256(payload.encode()).hexdigest()[:16]}"


def chunk_doc(path: Path) -> list[Document]:
    """The chunks of one document, each with scalar metadata and a stable id."""
    meta, body = parse_doc(path)
    base = _scalar_metadata(meta)
    base["source"] = path.name
    sections = MarkdownHeaderTextSplitter(_HEADERS, strip_headers=True).split_text(body)
    splitter = RecursiveCharacterTextSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
    chunks: list[Document] = []
    for section in sections:
        heading = _section_of(section.metadata, meta.title)
        header: str | None = None  # of the table the section's previous pieces opened
        for raw in splitter.split_text(section.page_content):
            if not raw.strip():
                continue
            # a piece cut from inside a table gets the table's header: its rows alone do not say
            # what their columns are, to the search or to the model
            piece = continued_table(raw, header)
            header = last_table_header(raw) or header
            index = len(chunks)
            text = f"{meta.title}{HEADING_SEPARATOR}{heading}\n\n{piece.strip()}"
            metadata: dict[str, Any] = {**base, "section": heading, "chunk_index": index}
            chunks.append(
                Document(
                    id=_chunk_id(meta.doc_id, index, text, metadata),
                    page_content=text,
                    metadata=metadata,
                )
            )
    if not chunks:
        raise DocFormatError(f"{path}: the document body is empty")
    return chunks


def chunk_docs(docs_dir: Path) -> list[Document]:
    """Chunks of every `*.md` file in `docs_dir`; two files with one doc_id are an error."""
    paths = sorted(Path(docs_dir).glob("*.md"))
    if not paths:
        raise DocFormatError(f"{docs_dir}: no *.md documents found")
    seen: dict[str, Path] = {}
    chunks: list[Document] = []
    for path in paths:
        doc_chunks = chunk_doc(path)
        doc_id = str(doc_chunks[0].metadata["doc_id"])
        if doc_id in seen:
            raise DocFormatError(f"{path}: field 'doc_id': '{doc_id}' is also used by {seen[doc_id]}")
        seen[doc_id] = path
        chunks.extend(doc_chunks)
    return chunks


def _batches(items: Sequence[Document], size: int) -> Iterable[Sequence[Document]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def load_docs(
    chroma_dir: Path | str,
    docs_dir: Path = SAMPLE_DIR / "docs",
    *,
    embeddings: Embeddings | None = None,
    reset: bool = False,
    progress: bool = True,
) -> int:
    """Make the collection mirror `docs_dir`; returns the number of chunks stored.

    Only chunks whose id is new are embedded; stored chunks whose id no longer appears (a
    changed or removed document) are deleted. `reset` drops the collection first. Every file is
    parsed before anything is written, so a malformed document changes nothing in the store.
    """
    chunks = chunk_docs(Path(docs_dir))
    store = DocStore(chroma_dir, embeddings=embeddings)
    if reset:
        store.drop()
    collection = store.collection(create=True)
    stored = set(collection.get(include=[])["ids"])
    wanted = {chunk.id for chunk in chunks if chunk.id}
    stale = sorted(stored - wanted)
    new = [chunk for chunk in chunks if chunk.id not in stored]
    if new:
        # Add before deleting: an embedding failure half-way leaves the old chunks searchable.
        model = store.embeddings
        with tqdm(total=len(new), desc="embedding documents", unit="chunk", disable=not progress) as bar:
            for batch in _batches(new, EMBED_BATCH):
                texts = [chunk.page_content for chunk in batch]
                vectors = model.embed_documents(texts)
                collection.add(
                    ids=[str(chunk.id) for chunk in batch],
                    documents=texts,
                    metadatas=[chunk.metadata for chunk in batch],
                    embeddings=vectors,  # type: ignore[arg-type]
                )
                bar.update(len(batch))
    if stale:
        collection.delete(ids=stale)
    log.info("documents: %d chunks stored, %d added, %d removed", len(wanted), len(new), len(stale))
    return len(wanted)
