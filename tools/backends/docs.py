"""Documents: the top distinct documents from the vector store, each by its best passage."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, Field

from tools.backends.base import BackendCall, Finding, question_parts
from tools.services import Services
from tramita.base.text import tables_as_lines

if TYPE_CHECKING:
    from tools.doc_store import DocStore

TOP_PASSAGES = 3
# Synthesis reads only the passages within this cosine of their search's best (every search's best
# is read): on two cores each passage costs seconds of prompt before the first answer token, and a
# passage far below the best is rarely the one that answers. On the own set's document questions
# the passage holding the answer was within 0.015 of the best wherever it was retrieved at all.
# The trace and document recall keep every retrieved passage.
PASSAGE_GAP = 0.02
_VOCAB_LOCK = threading.Lock()
_VOCAB: dict[tuple[str, int], list[str]] = {}


class DocsBackend:
    """Chroma + e5. Documents cite their own ids, so `citation` names the id prefix."""

    name = "docs"
    citation = "doc-"
    planner_description = "documents: policy rules and limits, SLA targets, deadlines, procedures, runbooks, postmortems, handbooks"

    def available(self, services: Services) -> bool:
        """Whether the store holds any passage."""
        return services.doc_store.count() > 0

    def run(self, call: BackendCall) -> dict[str, Any]:
        """The top `top_k` distinct documents plus the best TOP_PASSAGES passages overall: five
        passages alone are often two documents (a long postmortem fills the list), which hides the
        right document from synthesis and lowers document recall@5.
        """
        # the whole question: the search looks at each of its parts itself, and a document often
        # holds what another part's source needs (the person a postmortem names)
        text = call.whole or call.question
        translations, errors = translated(call.services.doc_store, text, call)
        hits = search_ranked(call.services.doc_store, text, call.top_k, also=list(translations.values()))
        out: dict[str, Any] = {"backend": self.name,
                               "items": [{"source": d, "text": p, "score": round(float(s), 4), "gap": round(float(g), 4)}
                                         for d, p, s, g in hits]}
        if translations:
            out["translations"] = translations
        if errors:
            out["translation_errors"] = errors
        return out

    def warm(self, services: Services, today: str, profile: str | None) -> dict[str, object]:
        """The query-translation prompt's static prefix for each language the documents are in (a
        question in another language is translated into it before the search).
        """
        from tools.llm import warm
        from tramita.base.text import language_name

        return {f"translate_query ({code})": warm("query_translation", "translate_query", backend=profile,
                                                  language=language_name(code))
                for code in sorted(services.doc_store.languages())}

    def findings(self, context: dict[str, Any]) -> list[Finding]:
        """The passages synthesis reads, for the later backends to find names and values in, and
        the documents they come from (a later query may be bounded by a figure elsewhere in them).
        """
        shown = shown_items(context.get("items", []))
        text = "\n".join(str(it.get("text") or "") for it in shown)
        documents = tuple(dict.fromkeys(str(it["source"]) for it in shown if it.get("source")))
        return [Finding(self.name, text=text, documents=documents)] if text.strip() else []

    def render(self, context: dict[str, Any]) -> str:
        """Each passage within PASSAGE_GAP of its search's best, after its document id (the
        citation), its tables written row by row (`tables_as_lines`).
        """
        return "\n\n".join(f"[{it['source']}] {tables_as_lines(it['text'])}" for it in shown_items(context.get("items", [])))

    def vocabulary(self, services: Services) -> list[str]:
        """What the stored documents are about, in their own words: each title, and each
        "title — section" heading, read from the chunks' metadata (the loader writes both).

        The planner embeds these, so a question about a policy, a rule, a deadline or a procedure
        reaches the documents because a document is titled or sectioned that way, not because a
        word list says so. Read once per store file version (its modification time).
        """
        store = services.doc_store
        marker = store.path / "chroma.sqlite3"
        try:
            key = (str(marker.resolve()), marker.stat().st_mtime_ns)
        except OSError:
            # no store: the dataset's own files still say what the documents are about, so a
            # document question is still planned for documents, and their gap is then stated
            return source_vocabulary(services.settings.dataset_dir / "docs")
        with _VOCAB_LOCK:
            cached = _VOCAB.get(key)
        if cached is not None:
            return list(cached)
        try:
            metas = store.collection().get(include=["metadatas"])["metadatas"] or []
        except Exception:  # noqa: BLE001 - an unreadable store: the dataset's files, as above
            return source_vocabulary(services.settings.dataset_dir / "docs")
        texts: list[str] = []
        for meta in metas:
            title = str((meta or {}).get("title") or "").strip()
            section = str((meta or {}).get("section") or "").strip()
            for text in (title, f"{title} — {section}" if section and section != title else ""):
                if text and text not in texts:
                    texts.append(text)
        with _VOCAB_LOCK:
            _VOCAB[key] = texts
        return list(texts)


    def evidence(self, services: Services, text: str) -> float | None:
        """How close the stored passages come to `text`: the best passage's cosine similarity.

        Titles and headings say what the documents are about only coarsely; a question about a
        rule that a section states without naming it in its heading matches the passage itself.
        The planner weighs this against the other backends' vocabularies (`evidence_offset`).
        """
        from tools.doc_store import DocStoreUnavailable

        try:  # the search refuses an empty or missing store itself: no separate count
            hits = services.doc_store.search(text, TOP_PASSAGES)
        except DocStoreUnavailable:
            return None
        return max((h.score for h in hits), default=None)


_HEADING = re.compile(r"^#{1,3}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def source_vocabulary(docs_dir: Path) -> list[str]:
    """Titles and "title — heading" texts read from the markdown files themselves (front matter
    `title`, `#`–`###` headings), for when the store cannot be read. It is a reading of the same
    files the loader chunks, kept here because retrieval must not depend on the ingest code.
    """
    texts: list[str] = []
    for path in sorted(docs_dir.glob("*.md")) if docs_dir.is_dir() else []:
        try:
            head, _, body = path.read_text(encoding="utf-8").removeprefix("---").partition("\n---")
            title = str((yaml.safe_load(head) or {}).get("title") or "").strip()
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        if not title:
            continue
        texts.append(title)
        texts += [f"{title} — {h}" for h in _HEADING.findall(body) if h != title]
    return list(dict.fromkeys(texts))


def shown_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The retrieved passages synthesis reads: those within PASSAGE_GAP of their search's best."""
    return [it for it in items if float(it.get("gap") or 0.0) <= PASSAGE_GAP]


class Translation(BaseModel):
    """The question in another language, as the query-translation prompt returns it."""

    question: str = Field(min_length=1, max_length=600)


def translated(store: DocStore, question: str, call: BackendCall) -> tuple[dict[str, str], list[str]]:
    """The question in each other language the stored documents are written in ({code: text}),
    and the errors of the translations that failed (the search then runs without them).

    Why: e5-small matches a question with a passage in its own language far better than across
    languages. On the own set, "Em quanto tempo um incidente SEV1 tem que ser reconhecido?" put
    the English SLA table 4th among passages and "How many business days does Finance have to
    review an expense claim?" missed the Portuguese policy; asked in the documents' language, each
    one's passage came first. One small call per document question, for documents in two languages.
    """
    from tools.llm import LLMError, structured_call
    from tramita.base.text import detect_language, language_name

    try:
        others = sorted(store.languages() - {detect_language(question)})
    except Exception as exc:  # noqa: BLE001 - no languages: the search runs on the question alone
        return {}, [f"languages: {type(exc).__name__}: {str(exc)[:120]}"]
    out: dict[str, str] = {}
    errors: list[str] = []
    for code in others:
        try:
            got = structured_call("query_translation", Translation, "translate_query", backend=call.profile,
                                  usage=call.usage, language=language_name(code), question=question)
        except LLMError as exc:
            errors.append(f"{code}: {str(exc)[:160]}")
            continue
        text = " ".join(got.question.split())
        if text and text.casefold() != question.casefold():
            out[code] = text
    return out, errors


def search(store: DocStore, question: str, top_k: int, passages: int = TOP_PASSAGES) -> list[tuple[str, str, float]]:
    """`search_ranked` without the gaps."""
    return [(d, p, s) for d, p, s, _ in search_ranked(store, question, top_k, passages)]


def search_ranked(store: DocStore, question: str, top_k: int, passages: int = TOP_PASSAGES, *,
                  also: list[str] | None = None) -> list[tuple[str, str, float, float]]:
    """The question's documents, each by its best passage, then the best passages overall, each
    with its gap below the best passage of the search that found it. `also`: the question in other
    languages; the whole question's search is theirs too, each passage at its best cosine over them.

    A question that asks two things ("Quando o Rui pega plantão? E quanto ele recebe por semana?")
    embeds as the mix of both and finds neither part's document; so each part is also searched
    alone, and the documents are taken in turn from each search's ranking (the whole question's
    first), so every part's best documents are among the `top_k`.
    """
    texts = [question, *question_parts(question)]
    runs: list[list[tuple[str, str, float, float]]] = []
    for i, text in enumerate(texts):
        found = store.retrieve_docs(text, top_k, passages=passages)
        if i == 0 and also:
            found = _best_of(top_k, passages, found, *(store.retrieve_docs(t, top_k, passages=passages) for t in also))
        if found:
            best = max(score for _, _, score in found)
            runs.append([(d, p, score, best - score) for d, p, score in found])
    if len(texts) == 1:
        return with_asked_section(store, question, runs[0] if runs else [], top_k, whole=True)
    chosen: dict[str, tuple[str, str, float, float]] = {}
    for rank in range(top_k):
        for run in runs:
            docs = list(dict.fromkeys(h[0] for h in run))
            if rank < len(docs) and docs[rank] not in chosen and len(chosen) < top_k:
                chosen[docs[rank]] = max((h for h in run if h[0] == docs[rank]), key=lambda h: h[2])
    seen = {h[1] for h in chosen.values()}
    extra: dict[str, tuple[str, str, float, float]] = {}
    for run in runs:
        for h in run:
            if h[1] not in seen and (h[1] not in extra or h[3] < extra[h[1]][3]):
                extra[h[1]] = h  # a passage two searches found keeps its smaller gap
    return with_asked_section(store, question,
                              [*chosen.values(), *sorted(extra.values(), key=lambda h: -h[2])[:passages]], top_k,
                              whole=False)


def _best_of(top_k: int, passages: int, *found: list[tuple[str, str, float]]) -> list[tuple[str, str, float]]:
    """Several searches of one question as one, shaped as `DocStore.retrieve_docs` shapes a search:
    the `top_k` best documents, each by its best passage, and the best `passages` other passages,
    in score order; a passage two searches found counts at its best cosine.
    """
    best: dict[tuple[str, str], float] = {}
    for hits in found:
        for d, p, sc in hits:
            best[(d, p)] = max(sc, best.get((d, p), -1.0))
    ranked = [(d, p, sc) for (d, p), sc in sorted(best.items(), key=lambda kv: -kv[1])]
    firsts: dict[str, tuple[str, str, float]] = {}
    for hit in ranked:
        if hit[0] not in firsts and len(firsts) < top_k:
            firsts[hit[0]] = hit
    shown = set(firsts.values())
    return sorted([*shown, *[h for h in ranked if h not in shown][:passages]], key=lambda h: -h[2])


# A record code as documents title themselves by it ("Postmortem INC-2047", "(POL-004)").
_CODE = re.compile(r"(?<![\w-])[A-Za-z]{2,6}-\d{2,6}(?![\w-])")


def named_document(titles: dict[str, str], question: str) -> str | None:
    """The one document whose title carries a record code the question names, if exactly one
    does: "a causa raiz do INC-2047" is about the INC-2047 postmortem, however well another
    postmortem's "Causa raiz" section matches the words.
    """
    codes = {c.casefold() for c in _CODE.findall(question)}
    if not codes:
        return None
    named = [d for d, title in titles.items() if codes & {c.casefold() for c in _CODE.findall(title)}]
    return named[0] if len(named) == 1 else None


ELSEWHERE = 1.0  # the gap given to a passage that must not be read (any gap above PASSAGE_GAP hides it)


def _prefixes(title: str) -> set[str]:
    """The letter parts of the record codes a title carries ("INC" of "INC-2047")."""
    return {c.split("-", 1)[0].casefold() for c in _CODE.findall(title)}


def _other_record(titles: dict[str, str], named: str, doc: str) -> bool:
    """Whether `doc` is titled by a code of the same kind as the named document's, and not the same code."""
    mine, theirs = titles.get(named, ""), titles.get(doc, "")
    same_code = {c.casefold() for c in _CODE.findall(mine)} & {c.casefold() for c in _CODE.findall(theirs)}
    return bool(_prefixes(mine) & _prefixes(theirs)) and not same_code


def with_asked_section(store: DocStore, question: str, found: list[tuple[str, str, float, float]], top_k: int,
                       *, whole: bool) -> list[tuple[str, str, float, float]]:
    """`found` with the subject document first and the section of it the question asks about shown.

    The subject is the document the question names by a record code in its title, else, for a
    question that asks one thing (`whole`), the best ranked one (a question in two parts has no
    single subject: each part found its own documents). Its best passage is often the summary or
    the timeline, which say what happened and not why: "Por que ninguém conseguiu logar?" matches the timeline's words, while the answer
    is under "Causa raiz". So the subject's sections are also ranked by their heading alone, and
    the chunk under the best heading (the opening section, which repeats the title, aside) is
    read too, with gap 0. One passage more at most, of the one document the answer comes from.
    """
    titles: dict[str, str] = {}
    if _CODE.search(question):  # the titles are read only for a question that names a code
        try:
            titles = store.titles()
        except Exception:  # noqa: BLE001 - a store that cannot list titles keeps the ranking as it is
            titles = {}
    named = named_document(titles, question)
    subject = named or (found[0][0] if found and whole else None)
    if subject is None:
        return found
    try:
        vector = store.embed_query(question)  # one vector for the chunks and the headings
        chunks = store.chunks_of(vector, subject)
    except Exception:  # noqa: BLE001 - the ranking already found stands on its own
        return found
    opening = str(chunks[0].metadata.get("section") or "") if chunks else ""
    sections = [c for c in chunks if str(c.metadata.get("section") or "") not in ("", opening)]
    first = [h for h in found if h[0] == subject]
    if not first and chunks:  # a named document the search ranked out: its best chunk, shown
        best = max(chunks, key=lambda c: c.score)
        first = [(subject, best.text, best.score, 0.0)]
    elif named and first:  # the named document's best passage is read, however far below another's
        first[0] = (*first[0][:3], 0.0)
    if sections:
        heads = list(dict.fromkeys(str(c.metadata["section"]) for c in sections))
        asked = store.closest_heading(vector, heads)
        chunk = next(c for c in sections if c.metadata["section"] == asked)
        # read it: added when the search did not find it, shown when it found it too far down
        # and read right after the best passage, before the subject's other passages
        first = [first[0], (subject, chunk.text, chunk.score, 0.0),
                 *(h for h in first[1:] if h[1] != chunk.text)] if first[0][1] != chunk.text else first
    rest = [h for h in found if h[0] != subject]
    if named:
        # another record of the same kind ("Postmortem INC-2034" when INC-2047 is named) is another
        # story: its "Causa raiz" passage is kept in the ranking (the trace, document recall) but
        # not read, or the model answers with that incident's cause
        rest = [(d, p, s, max(g, ELSEWHERE)) if _other_record(titles, named, d) else (d, p, s, g)
                for d, p, s, g in rest]
    docs = list(dict.fromkeys(h[0] for h in [*first, *rest]))[:top_k]
    return [h for h in [*first, *rest] if h[0] in docs]
