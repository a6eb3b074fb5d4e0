"""API: declared GET operations of external HTTP APIs, called through the SSRF guard.

Why it is shaped like this: a question must never become an arbitrary request. So the backend only
ever calls an operation that a source file declares (`tools.api_source`), on the source's
allow-listed origin (`tools.http_guard`), with arguments validated against the OpenAPI schema
before anything is sent. A URL inside the question is dropped before extraction and never fetched.

One call, step by step (the LLM budget of docs/architecture.md: 0 calls when the question is clear):
1. the operation: the question's embedding against each operation's description and examples, the
   registry's margin rule (`tools.registry_index.decide`); the LLM picks only among close candidates;
2. the parameters: typed extraction first (enum values and their synonyms, id patterns from the
   OpenAPI schema, names through `policies/references.yaml`, month/date ranges, the source's
   `extract` regexes); the LLM fills only required parameters still pending, under a schema
   generated for exactly those, and each value it returns must appear in the question;
3. `jsonschema` validation, then the GET through the guard;
4. the JSON response goes to synthesis as data, tagged `[api:<operation>]`.
"""

from __future__ import annotations

import calendar
import json
import re
import threading
import unicodedata
from datetime import date, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from tools.api_source import ApiOperation, ApiParam, ApiSource, load_sources
from tools.backends.base import BackendCall
from tools.http_guard import RequestRefused
from tools.registry_index import ToolIndex, decide
from tools.services import Services
from tramita.base.logmask import get_logger
from tramita.base.text import fold

log = get_logger("tramita.api")

FLOOR = 0.87  # e5 cosines bunch high: unrelated questions score 0.84-0.865 against the sample operations
MARGIN = 0.01
MAX_RENDER_CHARS = 3000
MAX_ROWS = 50
_URL = re.compile(r"(?i)\b(?:[a-z][a-z0-9+.-]{1,15}://|www\.)\S+")
_SINCE = ("desde", "since", "a partir de", "from", "depois de", "after")
_UNTIL = ("ate", "until", "antes de", "before", "to")
# where a question that asks two things splits: "... agora? E o que diz o runbook ..."
_CLAUSES = re.compile(r"[?;!]|,\s*(?:e|and)\s+|\s+(?:e|and)\s+(?=(?:qual|quais|quem|quando|como|quantos|quantas|o que|"
                      r"what|which|who|when|how|is|are|does|did)\b)|\.\s", re.IGNORECASE)


# ------------------------------------------------------------------------------ operation index

class _Index:
    """The operations' vectors (description + each example), built once per set of sources."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[int, ...] | None = None
        self._index: ToolIndex | None = None
        self._ops: dict[str, tuple[ApiSource, ApiOperation]] = {}

    def get(self, sources: list[ApiSource]) -> tuple[ToolIndex, dict[str, tuple[ApiSource, ApiOperation]]]:
        key = tuple(id(s) for s in sources)
        with self._lock:
            if self._key == key and self._index is not None:
                return self._index, self._ops
        from tools.embeddings import make_embeddings

        ops = {op.key: (s, op) for s in sources for op in s.operations.values()}
        texts: list[str] = []
        owners: list[str] = []
        for k, (_, op) in ops.items():
            for t in [op.description, *op.examples]:
                texts.append(t)
                owners.append(k)
        vectors = make_embeddings().embed_documents(texts) if texts else []
        groups: dict[str, list[Any]] = {}
        for owner, vec in zip(owners, vectors, strict=True):
            groups.setdefault(owner, []).append(vec)
        index = ToolIndex.build("api", groups)
        with self._lock:
            self._key, self._index, self._ops = key, index, ops
        return index, ops


_INDEX = _Index()


# ------------------------------------------------------------------------------ typed extraction

def strip_urls(question: str) -> tuple[str, int]:
    """The question without URLs (they are never fetched, nor used as values) and how many there were."""
    found = _URL.findall(question)
    return _URL.sub(" ", question), len(found)


def _plain(text: str) -> str:
    """Lower case without accents, punctuation kept (dates need their separators)."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _word_in(needle: str, folded: str) -> bool:
    return bool(needle) and re.search(rf"(?<![\w-]){re.escape(needle)}(?![\w-])", folded) is not None


def _id_pattern(pattern: str) -> re.Pattern[str] | None:
    r"""A search regex for id-shaped patterns (`^DEP-\d{4}$`, `^T\d{2}$`): a literal upper-case
    prefix is required, so a free pattern such as `^[a-z][a-z0-9-]+$` never matches every word.
    """
    core = pattern.removeprefix("^").removesuffix("$")
    if not re.match(r"^[A-Z]+(?:-|\\d)", core):
        return None
    try:
        return re.compile(rf"(?<![\w-]){core}(?![\w-])", re.IGNORECASE)
    except re.error:
        return None


def _enum_hits(param: ApiParam, folded: str) -> set[str]:
    options = [o for o in param.schema.get("enum", []) if isinstance(o, str)]
    words: dict[str, str] = {}
    for o in options:
        words[fold(o)] = o
        words[fold(o.replace("_", " "))] = o
    for option, syns in param.hint.synonyms.items():
        words.update({fold(w): option for w in syns})
    hits = [(len(w), o) for w, o in words.items() if _word_in(w, folded) and not _negated(w, folded)]
    if not hits:
        return set()
    longest = max(n for n, _ in hits)
    return {o for n, o in hits if n == longest}


_NEGATIONS = ("nao", "not", "sem", "without", "nem", "nor", "never", "nunca", "isn t", "aren t")


def _negated(word: str, folded: str) -> bool:
    """"not fully operational", "não operacionais": the value is what the question excludes."""
    m = re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", folded)
    before = folded[: m.start()].split()[-3:] if m else []
    return any(n in " ".join(before) for n in _NEGATIONS)


def _reference_hits(kind: str, folded: str, services: Services) -> set[str]:
    from tools.references import reference_candidates

    best: dict[str, str] = {}
    for cand in reference_candidates(kind, services.engine):
        for name in cand.names:
            f = fold(name)
            if len(f) >= 3 and _word_in(f, folded) and len(f) > len(best.get(cand.id, "")):
                best[cand.id] = f
    # a match inside a longer one is part of it ("api" of "payments api"); two apart are two values
    return {cid for cid, f in best.items() if not any(o != f and _word_in(f, o) for o in best.values())}


def _month_range(folded: str, today: date) -> tuple[str, str] | None:
    from tools.business.catalog import rules

    months = {fold(w): n for n, ws in rules().months.items() for w in ws if len(w) >= 4 or fold(w) == "may"}
    names = "|".join(re.escape(w) for w in sorted(months, key=len, reverse=True))
    m = re.search(rf"(?<![\w-])(?:(?:em|de|in|of|during|durante)\s+)?({names})(?:\s+(?:de\s+)?(20\d\d))?(?![\w-])", folded)
    if not m or (m[1] == "may" and not re.search(r"(?:in|of|during|since|until)\s+may", folded)):
        return None
    month = months[m[1]]
    year = int(m[2]) if m[2] else (today.year if month <= today.month else today.year - 1)
    last = calendar.monthrange(year, month)[1]
    return f"{year:04d}-{month:02d}-01", f"{year:04d}-{month:02d}-{last:02d}"


def _relative_range(folded: str, today: date) -> tuple[str, str] | None:
    m = re.search(r"(?:ultimos|last|past)\s+(\d{1,3})\s+(?:dias|days)", folded)
    if m:
        return (today - timedelta(days=int(m[1]))).isoformat(), today.isoformat()
    if re.search(r"(?:ultimo|last|past)\s+(?:mes|month)", folded):
        return (today - timedelta(days=30)).isoformat(), today.isoformat()
    if re.search(r"(?:ultima|last|past)\s+(?:semana|week)", folded) or "esta semana" in folded or "this week" in folded:
        return (today - timedelta(days=7)).isoformat(), today.isoformat()
    return None


def _dates(op: ApiOperation, question: str, folded: str, today: date) -> dict[str, str]:
    """since/until-style parameters (hint `role`) from months, relative periods, cues and dates."""
    from tools.business.resolvers import parse_date

    roles = {p.hint.role: p.name for p in op.params.values() if p.hint.role}
    if not roles:
        return {}
    out: dict[str, str] = {}
    plain = _plain(question)  # keeps "/", "." and "-": 01/05 stays a date
    for cue_words, role in ((_SINCE, "range_start"), (_UNTIL, "range_end")):
        if role not in roles:
            continue
        for cue in cue_words:
            m = re.search(rf"(?<![\w-]){re.escape(cue)}\s+(.{{3,24}})", plain)
            if m:
                found = parse_date(m[1], today)
                if found:
                    out[roles[role]] = found
                    break
    if out:
        return out
    span = _month_range(folded, today) or _relative_range(folded, today)
    if span is None:
        single = parse_date(question, today)
        if single is None:
            return {}
        span = (single, single)
    if "range_start" in roles:
        out[roles["range_start"]] = span[0]
    if "range_end" in roles:
        out[roles["range_end"]] = span[1]
    return out


def _as_type(param: ApiParam, raw: Any) -> Any:
    kind = param.schema.get("type")
    if kind == "integer":
        try:
            return int(str(raw).strip())
        except ValueError:
            return raw
    if kind == "number":
        try:
            return float(str(raw).strip().replace(",", "."))
        except ValueError:
            return raw
    if kind == "boolean" and isinstance(raw, str):
        return {"true": True, "false": False}.get(raw.strip().lower(), raw)
    return raw


def typed_values(op: ApiOperation, question: str, services: Services, today: date) -> tuple[dict[str, Any], list[str]]:
    """Values found without an LLM, and the parameters whose value is ambiguous in the question."""
    folded = fold(question)
    values: dict[str, Any] = dict(_dates(op, question, folded, today))
    ambiguous: list[str] = []
    for name, p in op.params.items():
        if name in values:
            continue
        hits: set[Any] = set()
        if p.hint.extract:
            hits |= {_as_type(p, m) for m in re.findall(p.hint.extract, question, re.IGNORECASE)}
        if "enum" in p.schema:
            hits |= _enum_hits(p, folded)
        pattern = _id_pattern(str(p.schema.get("pattern", "")))
        if pattern is not None:
            hits |= {m.group(0).upper() for m in pattern.finditer(question)}
        if p.hint.resolve and not hits:
            hits |= _reference_hits(p.hint.resolve, folded, services)
        if len(hits) == 1:
            values[name] = hits.pop()
        elif len(hits) > 1:
            ambiguous.append(name)
    return values, ambiguous


# ------------------------------------------------------------------------------ LLM fallbacks

def _describe(p: ApiParam) -> str:
    bits = [p.description]
    if "enum" in p.schema:
        bits.append("one of " + ", ".join(map(str, p.schema["enum"])))
    if p.schema.get("format") == "date":
        bits.append("date YYYY-MM-DD")
    if p.hint.resolve:
        bits.append(f"the {p.hint.resolve}'s name or id as written in the question")
    return f"- {p.name} [{p.schema.get('type', 'string')}]: " + "; ".join(b for b in bits if b)


def llm_values(op: ApiOperation, names: list[str], known: dict[str, Any], question: str, call: BackendCall) -> dict[str, Any]:
    """The pending parameters from one small structured call; values not in the question are dropped."""
    from tools.llm import LLMError, structured_call

    fields: dict[str, Any] = {n: (str | int | float | None, None) for n in names}
    schema: type[BaseModel] = create_model("ApiParams", **fields)
    try:
        out = structured_call("transaction_parameter_extraction", schema, "api_parameters", backend=call.profile,
                              usage=call.usage, operation=op.operation_id, description=op.description,
                              known=json.dumps(known, ensure_ascii=False) or "{}",
                              pending="\n".join(_describe(op.params[n]) for n in names), today=call.today,
                              question=question)
    except LLMError as exc:
        log.info("api: parameter extraction failed for %s: %s", op.key, str(exc)[:200])
        return {}
    folded = fold(question)
    got: dict[str, Any] = {}
    for n in names:
        raw = getattr(out, n, None)
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            continue
        if not _word_in(fold(str(raw)), folded) and fold(str(raw)) not in folded:
            continue  # not grounded in the question: an invented value is never sent
        got[n] = raw
    return got


def canonical(op: ApiOperation, name: str, raw: Any, call: BackendCall) -> Any:
    """An LLM value in canonical form: names resolved to ids, enum synonyms mapped, numbers typed."""
    p = op.params[name]
    if p.hint.resolve and isinstance(raw, str):
        from tools.business.resolvers import resolve_reference

        found = resolve_reference(p.hint.resolve, raw, call.services.engine, param=name)
        return found if isinstance(found, str) else None
    if "enum" in p.schema:
        hits = _enum_hits(p, fold(str(raw)))
        return hits.pop() if len(hits) == 1 else raw
    if p.schema.get("format") == "date":
        from tools.business.resolvers import parse_date

        return parse_date(str(raw), date.fromisoformat(call.today)) or raw
    return _as_type(p, raw)


def clauses(question: str) -> list[str]:
    """The question, then its parts when it asks two things (each part of three words or more)."""
    parts = [p.strip() for p in _CLAUSES.split(question) if p and len(p.split()) >= 3]
    return list(dict.fromkeys([question.strip(), *parts]))


def best_clause(question: str, index: ToolIndex, services: Services) -> tuple[str, list[tuple[str, float]]]:
    """The part of the question that matches an operation best, and its ranking.

    A question that also asks the database or the documents something embeds as a mix and scores
    low against every operation; its API half, alone, scores like any API question.
    """
    best: tuple[str, list[tuple[str, float]]] | None = None
    for part in clauses(question):
        ranked = index.rank(services.embed_query(part), 3)
        if ranked and (best is None or ranked[0][1] > best[1][0][1]):
            best = (part, ranked)
    return best if best is not None else (question, [])


def fillable(candidates: list[str], ops: dict[str, tuple[ApiSource, ApiOperation]], question: str,
             call: BackendCall) -> str | None:
    """Among close candidates, the only one whose required parameters are all in the question.

    "how many deploys in May" is as close to "deploys of a service" as to "all deploys", but only the
    second can be called without a service: the typed values decide, with no LLM call.
    """
    today = date.fromisoformat(call.today)
    complete = []
    for key in candidates:
        op = ops[key][1]
        values, _ = typed_values(op, question, call.services, today)
        if all(n in values for n in op.required):
            complete.append(key)
    return complete[0] if len(complete) == 1 else None


def choose_operation(candidates: list[str], ops: dict[str, tuple[ApiSource, ApiOperation]], question: str,
                     call: BackendCall) -> str | None:
    """The LLM's pick among close candidates (an enum schema: it cannot name anything else)."""
    from tools.llm import LLMError, structured_call

    allowed = tuple([*candidates, "none"])
    schema: type[BaseModel] = create_model("ApiOperationChoice", operation=(Literal[allowed], Field(...)))  # type: ignore[valid-type,arg-type]
    lines = "\n".join(f"- {k}: {ops[k][1].description}" for k in candidates)
    try:
        out = structured_call("router", schema, "api_operation", backend=call.profile, usage=call.usage,
                              operations=lines, question=question)
    except LLMError as exc:
        log.info("api: operation choice failed: %s", str(exc)[:200])
        return None
    chosen = str(getattr(out, "operation", "none"))
    return chosen if chosen in candidates else None


# ------------------------------------------------------------------------------ the backend

class ApiBackend:
    """Declared GET operations of the dataset's API sources (`<dataset>/api/source.yaml`)."""

    name = "api"
    citation = "api"
    _planner_override: str | None = None

    @property
    def planner_description(self) -> str:
        """The sources' own descriptions (the deployment's dataset), or a generic line.

        Read when the planner first asks (the planner caches its schema), not at import, so the
        dataset of `TRAMITA_DATASET_DIR` is the one described.
        """
        from tramita.base.settings import Settings

        if self._planner_override is not None:
            return self._planner_override

        try:
            sources = load_sources(Settings.from_env().dataset_dir)
        except Exception:  # noqa: BLE001 - a bad source file is reported by `available` and doctor
            sources = []
        if not sources:
            return "external APIs: live operational data"
        return "; ".join(s.spec.description.strip() for s in sources)

    @planner_description.setter
    def planner_description(self, value: str) -> None:
        """A fixed line instead of the sources' descriptions (the protocol's attribute is settable)."""
        self._planner_override = value

    def available(self, services: Services) -> bool:
        """Whether the dataset declares at least one source that loads (no network call)."""
        try:
            return bool(load_sources(services.settings.dataset_dir))
        except Exception:  # noqa: BLE001 - a broken file: unavailable, doctor says why
            return False

    def run(self, call: BackendCall) -> dict[str, Any]:
        """Choose one declared operation, fill and validate its arguments, call it through the guard."""
        sources = load_sources(call.services.settings.dataset_dir)
        out: dict[str, Any] = {"backend": self.name, "rows": []}
        if not sources:
            return {**out, "error": "no API source is declared for this dataset"}
        question, urls = strip_urls(call.question)
        if urls:
            out["ignored_urls"] = urls  # never fetched: only declared operations on allow-listed hosts
        index, ops = _INDEX.get(sources)
        part, ranked = best_clause(question, index, call.services)
        verdict = decide(ranked, lambda _: True, floor=FLOOR, margin=MARGIN, k=3)
        out["match"] = {"decision": verdict.decision, "clause": part,
                        "candidates": [[c.name, round(c.score, 4)] for c in verdict.candidates]}
        key: str | None = verdict.best if verdict.decision == "clear" else None
        if verdict.decision == "close":
            close = [c.name for c in verdict.candidates if verdict.candidates[0].score - c.score < MARGIN]
            key = fillable(close, ops, part, call) or choose_operation(close, ops, question, call)
        if key is None:  # the question gave the source nothing it can ask: no outage (`unasked`)
            return {**out, "error": "no declared API operation matches this question", "unasked": True}
        source, op = ops[key]
        out.update(source=source.name, operation=op.operation_id, path=op.path)
        today = date.fromisoformat(call.today)
        args, ambiguous = typed_values(op, part, call.services, today)
        # a required value may sit in the other half ("... e como ele está agora?"): of this
        # backend's text, else of the user's whole question when the planner gave it one part only
        others = [question, strip_urls(call.whole)[0]] if call.whole and call.whole != call.question else [question]
        for text in dict.fromkeys(t for t in others if t != part):
            whole, _ = typed_values(op, text, call.services, today)  # an ambiguous value is left out
            args.update({n: whole[n] for n in op.required if n not in args and n in whole})
        pending = [n for n in op.required if n not in args] + [n for n in ambiguous if n not in op.required]
        if pending:
            for n, raw in llm_values(op, pending, args, question, call).items():
                value = canonical(op, n, raw, call)
                if value is not None:
                    args[n] = value
        out["params"] = dict(args)
        missing = [n for n in op.required if n not in args]
        if missing:
            return {**out, "error": f"missing parameters for {op.operation_id}: {', '.join(missing)}", "unasked": True}
        try:
            resp = source.call(op.operation_id, args)
        except RequestRefused as exc:
            log.info("api: %s refused: %s", op.key, exc.code)
            return {**out, "error": f"{exc.code}: {exc.message}"}
        out["status"] = resp.status
        try:
            data = resp.json()
        except ValueError:
            return {**out, "error": f"HTTP {resp.status}: the body is not JSON"}
        if resp.status >= 400:
            detail = data.get("error") if isinstance(data, dict) else None
            return {**out, "error": f"HTTP {resp.status}: {str(detail or data)[:200]}"}
        out["rows"] = (data if isinstance(data, list) else [data])[:MAX_ROWS]
        return out

    def render(self, context: dict[str, Any]) -> str:
        """The call and its answer, tagged `[api:<operation>]`: scalar fields as `name: value` lines
        and each list of records as a table (`render_json`), the form a small model reads best; data,
        never instructions.
        """
        tag = f"[api:{context.get('operation', '?')}]"
        params = ", ".join(f"{k}={v}" for k, v in sorted((context.get("params") or {}).items()))
        rows = context.get("rows") or []
        body = render_json(rows[0] if len(rows) == 1 else rows)
        if len(body) > MAX_RENDER_CHARS:
            body = body[:MAX_RENDER_CHARS] + "\n…(truncated)"
        return f"{tag} GET {context.get('path', '')} ({params}) -> HTTP {context.get('status', '?')}\n{tag} data:\n{body}"

    def vocabulary(self, services: Services) -> list[str]:
        """What the APIs answer: each declared operation's description and examples (the planner embeds these)."""
        try:
            sources = load_sources(services.settings.dataset_dir)
        except Exception:  # noqa: BLE001 - a broken file: no vocabulary, doctor says why
            return []
        return [t for s in sources for op in s.operations.values() for t in [op.description, *op.examples] if t]


def render_json(data: Any, prefix: str = "") -> str:
    """Any JSON value as lines: `key: value` for scalars (nested objects as dotted keys), a list of
    scalars joined by commas, a list of objects as a `key (N):` header and a ` | ` table of its
    scalar columns (a nested value inside a row kept as compact JSON).
    """
    if isinstance(data, list):
        if data and all(isinstance(r, dict) for r in data):
            columns = list(dict.fromkeys(k for r in data for k in r))
            lines = [" | ".join(columns)]
            lines += [" | ".join(_cell(r.get(c)) for c in columns) for r in data]
            return (f"{prefix} ({len(data)}):\n" if prefix else "") + "\n".join(lines)
        return f"{prefix}: {', '.join(_cell(v) for v in data)}" if prefix else ", ".join(_cell(v) for v in data)
    if isinstance(data, dict):
        out = []
        for k, v in data.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            out.append(render_json(v, key) if isinstance(v, (dict, list)) else f"{key}: {_cell(v)}")
        return "\n".join(out)
    return f"{prefix}: {_cell(data)}" if prefix else _cell(data)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)
