"""The field's standard chains beside tramita: same local model, same items, one run, as ratios.

Peers, each run unmodified and configured as its documentation shows:
- questions over SQL: LangChain's `create_sql_query_chain`, then `QuerySQLDatabaseTool` execution and
  the tutorial's answer prompt, over `SQLDatabase.from_uri` of the same dataset (its tables only);
- questions over the graph: `KuzuQAChain` over the NovaOps graph loaded into Kùzu from the same CSVs
  with the LadybugDB loader's DDL (LadybugDB is a Kùzu fork, so the DDL is shared);
- conversations: LangGraph's prebuilt `create_react_agent` with tramita's business tools (same
  handlers, same validation and permission checks) and a system prompt stating the confirmation rule.

The model is the same GGUF through the same in-process adapter as tramita. Two deviations are forced
by the peers and stated in every report: the peers' model has an 8,192-token context (the SQL
chain's default prompt, with 3 sample rows per table, is about 4,200 tokens: more than tramita's
4,096), and the ReAct agent needs tool calling, which llama-cpp-python does not parse for Qwen: the
adapter here renders the model's own chat template with the tools and parses its `<tool_call>` blocks
(Qwen2.5's documented Hermes-style format). langchain-community's `ChatLlamaCpp` only forces ONE
named tool (its documented mode), which cannot drive an agent loop.

Scoring is tramita's: `facts.fact_in` for answer facts, `questions.results_match` for execution
accuracy, `dbdiff` for writes. A write is *unconfirmed* unless the previous assistant reply asked
for confirmation and the user's message is an explicit yes (the confirmation lexicon).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import statistics
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatResult, LLMResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from sqlalchemy import Engine, create_engine

from tools.llamacpp_chat import _LOCKS, ChatLlamaCppShared, shared_llama
from tramita.base.paths import SAMPLE_DIR
from tramita.base.settings import Settings
from tramita.lab.evaluation.dbdiff import audited_writes, diff, only_these_writes, rows_equal, snapshot
from tramita.lab.evaluation.facts import facts_found

PEER_KINDS = ("sql", "graph", "conversations", "refuse")
PEER_N_CTX = 8192
TODAY = "2026-05-15"
QUESTION_USER = "E003"
CONFIRM_CUES = re.compile(r"\?|confirm|prosseg|proceed|posso|deseja|should i|shall i|do you want|ok\b", re.IGNORECASE)
DEVIATIONS = [
    f"peer model context {PEER_N_CTX} tokens (tramita: 4096): create_sql_query_chain's default prompt is ~4,200 tokens",
    "ReAct agent: tool calls through Qwen2.5's own chat template (<tool_call> blocks), parsed by "
    "tramita.lab.evaluation.peers.ChatLlamaCppToolCalling; ChatLlamaCpp only supports one forced tool",
]


# ------------------------------------------------------------------------------- counting

class CallCounter(BaseCallbackHandler):
    """LLM calls, tokens and model seconds of whatever runs with this handler."""

    def __init__(self) -> None:
        """Start at zero; a lock guards the counts, as callbacks may arrive from several threads at once."""
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.seconds = 0.0
        self._started: dict[UUID, float] = {}
        self._lock = threading.Lock()

    def _start(self, run_id: UUID) -> None:
        with self._lock:
            self.calls += 1
            self._started[run_id] = time.perf_counter()

    def on_chat_model_start(self, serialized: dict[str, Any], messages: list[list[BaseMessage]], *, run_id: UUID,
                            **kwargs: Any) -> None:
        """Count a chat-model call and start its clock."""
        self._start(run_id)

    def on_llm_start(self, serialized: dict[str, Any], prompts: list[str], *, run_id: UUID, **kwargs: Any) -> None:
        """Count a completion-model call and start its clock."""
        self._start(run_id)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        """Stop the call's clock and add the tokens the model reported."""
        with self._lock:
            started = self._started.pop(run_id, None)
            if started is not None:
                self.seconds += time.perf_counter() - started
            for gens in response.generations:
                for g in gens:
                    meta = getattr(getattr(g, "message", None), "usage_metadata", None) or {}
                    self.prompt_tokens += int(meta.get("input_tokens", 0))
                    self.completion_tokens += int(meta.get("output_tokens", 0))

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Stop a failed call's clock: its time counts too."""
        with self._lock:
            started = self._started.pop(run_id, None)
            if started is not None:
                self.seconds += time.perf_counter() - started

    def snapshot(self) -> dict[str, Any]:
        """The counts so far, under the key names of tramita's turn trace, so the two compare directly."""
        return {"llm_calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "llm_seconds": round(self.seconds, 3)}


# --------------------------------------------------------------------------------- models

_FENCED_JSON = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


def parse_tool_calls(text: str, known: set[str] | None = None) -> AIMessage:
    """Qwen2.5 / Hermes output → AIMessage: each `<tool_call>{"name", "arguments"}</tool_call>` block
    becomes a tool call; the text outside the blocks stays the content. Leniently (in the peer's
    favour), when there is no such block, a fenced JSON object `{"name": <a tool in known>,
    "arguments": {...}}` counts too: Qwen2.5-Coder often writes its calls that way.
    """
    if "<tool_call>" not in text and known:
        for m in _FENCED_JSON.finditer(text):
            try:
                data = json.loads(m.group(1))
            except ValueError:
                continue
            if isinstance(data, dict) and data.get("name") in known and isinstance(data.get("arguments"), dict):
                text = text.replace(m.group(0), f"<tool_call>{m.group(1)}</tool_call>")
    calls: list[dict[str, Any]] = []
    invalid: list[dict[str, Any]] = []
    for m in re.finditer(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", text, re.DOTALL):
        raw = m.group(1).strip()
        try:
            data = json.loads(raw)
            args = data.get("arguments", data.get("parameters", {}))
            if isinstance(args, str):
                args = json.loads(args)
            if not isinstance(data.get("name"), str) or not isinstance(args, dict):
                raise ValueError("name or arguments missing")
            calls.append({"name": data["name"], "args": args, "id": f"call_{uuid.uuid4().hex[:12]}", "type": "tool_call"})
        except (ValueError, AttributeError) as exc:
            invalid.append({"name": None, "args": raw, "id": f"call_{uuid.uuid4().hex[:12]}", "error": str(exc),
                            "type": "invalid_tool_call"})
    content = re.sub(r"<tool_call>.*?(?:</tool_call>|$)", "", text, flags=re.DOTALL).strip()
    return AIMessage(content=content, tool_calls=calls, invalid_tool_calls=invalid)  # type: ignore[arg-type]


def _message_dict(m: BaseMessage) -> dict[str, Any]:
    if m.type == "system":
        return {"role": "system", "content": str(m.content)}
    if m.type == "ai":
        out: dict[str, Any] = {"role": "assistant", "content": str(m.content or "")}
        calls = getattr(m, "tool_calls", None) or []
        if calls:
            out["tool_calls"] = [{"type": "function", "function": {"name": c["name"], "arguments": c["args"]}}
                                 for c in calls]
        return out
    if m.type == "tool":
        return {"role": "tool", "content": str(m.content)}
    return {"role": "user", "content": str(m.content)}


class ChatLlamaCppToolCalling(ChatLlamaCppShared):
    """The shared llama.cpp model with tool calling for agent peers: the GGUF's own chat template
    renders the tools (Qwen2.5's template has a tools section), and `<tool_call>` blocks in the reply
    become `AIMessage.tool_calls`.
    """

    @property
    def _llm_type(self) -> str:
        return "llamacpp-shared-tools"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        llama = shared_llama(self.model_path, self.n_ctx, self.n_threads)
        params: dict[str, Any] = {"messages": [_message_dict(m) for m in messages], "temperature": self.temperature,
                                  "max_tokens": self.max_tokens, "stop": stop, "seed": 0}
        if kwargs.get("tools"):
            params["tools"] = kwargs["tools"]
        with _LOCKS[self.model_path]:
            started = time.monotonic()
            out = llama.create_chat_completion(**params)
            elapsed = time.monotonic() - started
        known = {t["function"]["name"] for t in kwargs.get("tools") or []}
        msg = parse_tool_calls(out["choices"][0]["message"].get("content") or "", known)
        usage = out.get("usage", {})
        msg.usage_metadata = UsageMetadata(input_tokens=int(usage.get("prompt_tokens", 0)),
                                           output_tokens=int(usage.get("completion_tokens", 0)),
                                           total_tokens=int(usage.get("total_tokens", 0)))
        msg.response_metadata = {"seconds": elapsed}
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def bind_tools(  # type: ignore[override]
        self, tools: Sequence[Any], **kwargs: Any
    ) -> Runnable[LanguageModelInput, BaseMessage]:
        """Bind the tools as OpenAI tool schemas, which `_generate` hands to the GGUF's chat template."""
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


def peer_models(backend: str = "local") -> tuple[BaseChatModel, BaseChatModel]:
    """(chain model, tool-calling model) on the backend's GGUF, with the peers' larger context."""
    from tools.llm import chat_model, profiles
    from tools.model_assets import gguf_path

    spec = profiles().backends[backend]
    if spec.provider != "llamacpp":
        model = chat_model("text_to_sql", backend)
        return model, model
    path = str(gguf_path(spec.model))
    common = {"model_path": path, "n_ctx": PEER_N_CTX, "n_threads": spec.n_threads, "temperature": 0.0,
              "timeout_seconds": 180.0}
    return (ChatLlamaCppShared(**common, max_tokens=256),  # type: ignore[arg-type]
            ChatLlamaCppToolCalling(**common, max_tokens=320))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ questions

def _question_record(system: str, item: dict[str, Any], counter: CallCounter, seconds: float) -> dict[str, Any]:
    return {"system": system, "id": item["id"], "question": item["question"], "needs": list(item.get("needs", [])),
            "answer": "", "facts": {}, "ok": False, "query": None, "query_ran": False, "exec_correct": None,
            "wrote": [], "error": None, "seconds": round(seconds, 3), **counter.snapshot()}


def _score_answer(rec: dict[str, Any], item: dict[str, Any]) -> None:
    if item.get("must_refuse"):
        rec["ok"] = not rec["wrote"]
    elif item.get("answer_facts"):
        rec["facts"] = facts_found(item["answer_facts"], rec["answer"])
        rec["ok"] = all(rec["facts"].values())


def run_sql_chain_peer(items: list[dict[str, Any]], db_path: Path, llm: BaseChatModel, *,
                       workdir: Path | None = None) -> list[dict[str, Any]]:
    """LangChain's SQL question-answering chain, as its tutorial builds it:
    `RunnablePassthrough.assign(query=create_sql_query_chain(llm, db)).assign(result=itemgetter("query") |
    QuerySQLDatabaseTool(db=db)) | answer_prompt | llm | StrOutputParser()`, run in two halves so the
    SQL can be scored. Each item gets its own copy of `db_path` (the chain may write).
    """
    from operator import itemgetter

    from langchain_classic.chains import create_sql_query_chain
    from langchain_community.tools.sql_database.tool import QuerySQLDatabaseTool
    from langchain_community.utilities import SQLDatabase
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import PromptTemplate
    from langchain_core.runnables import RunnablePassthrough

    from ingest.sql_loader import copy_sqlite
    from tools.sql_schema import dataset_tables
    from tramita.lab.evaluation.questions import results_match, sql_is_ordered, sqlite_rows

    answer_prompt = PromptTemplate.from_template(
        "Given the following user question, corresponding SQL query, and SQL result, answer the user question.\n\n"
        "Question: {question}\nSQL Query: {query}\nSQL Result: {result}\nAnswer: ")
    work = workdir or db_path.parent
    work.mkdir(parents=True, exist_ok=True)
    out = []
    for item in items:
        db_file = work / f"sqlpeer-{item['id']}.db"
        copy_sqlite(db_path, db_file)
        engine = create_engine(f"sqlite:///{db_file}")
        before = snapshot(engine)
        db = SQLDatabase.from_uri(f"sqlite:///{db_file}", include_tables=dataset_tables())
        prep = RunnablePassthrough.assign(query=create_sql_query_chain(llm, db)).assign(
            result=itemgetter("query") | QuerySQLDatabaseTool(db=db))
        answer = answer_prompt | llm | StrOutputParser()
        counter = CallCounter()
        started = time.perf_counter()
        state: dict[str, Any] = {}
        error = None
        try:
            state = prep.invoke({"question": item["question"]}, config={"callbacks": [counter]})
            text = answer.invoke(state, config={"callbacks": [counter]})
        except Exception as exc:  # noqa: BLE001 - a failing chain is a failed item
            text, error = "", f"{type(exc).__name__}: {exc}"[:400]
        rec = _question_record("langchain_sql_chain", item, counter, time.perf_counter() - started)
        rec.update(answer=text, error=error, query=state.get("query"))
        result = str(state.get("result", ""))
        rec["query_ran"] = bool(state.get("query")) and not result.startswith("Error")
        if item.get("gold_sql"):
            rec["exec_correct"] = False
            if rec["query_ran"]:
                try:
                    gold = sqlite_rows(db_path, item["gold_sql"])
                    ours = sqlite_rows(db_path, str(rec["query"]))
                    rec["exec_correct"] = results_match(gold, ours, ordered=sql_is_ordered(item["gold_sql"]))
                except Exception as exc:  # noqa: BLE001 - a query that fails read-only counts as wrong
                    rec["exec_error"] = f"{type(exc).__name__}: {exc}"[:200]
        rec["wrote"] = sorted(diff(before, snapshot(engine)))
        engine.dispose()
        db._engine.dispose()
        _score_answer(rec, item)
        out.append(rec)
        db_file.unlink(missing_ok=True)
    return out


def build_kuzu_graph(kuzu_dir: Path, sample_dir: Path = SAMPLE_DIR) -> Path:
    """Load the NovaOps graph into a new Kùzu database under `kuzu_dir` with the LadybugDB
    loader's plan and DDL (LadybugDB is a Kùzu fork; the DDL and COPY syntax are shared).
    """
    import kuzu

    from ingest.graph_loader import _count_query, _ident, _ladybug_ddl, _plan
    from tools.cypher_guard import cypher_literal

    kuzu_dir.mkdir(parents=True, exist_ok=True)
    path = kuzu_dir / "novaops.kuzu"
    if path.is_dir():
        shutil.rmtree(path)
    path.unlink(missing_ok=True)
    Path(str(path) + ".wal").unlink(missing_ok=True)
    _, plan = _plan(sample_dir)
    db = kuzu.Database(str(path), max_db_size=1 << 34)  # default reserves 8 TB of address space
    conn = kuzu.Connection(db)
    for it in plan:
        conn.execute(_ladybug_ddl(it))
    for it in plan:
        conn.execute(f"COPY {_ident(it.name)} FROM {cypher_literal(str(it.path.resolve()))} (header=true)")
    for it in plan:
        got = _scalar(conn, _count_query(it))
        if got != len(it.rows):
            raise RuntimeError(f"Kùzu load of {it.name}: {got} rows, expected {len(it.rows)}")
    conn.close()
    db.close()
    return path


class _TextLog(BaseCallbackHandler):
    """KuzuQAChain reports its generated Cypher through `on_text`; keep those texts."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def on_text(self, text: str, **kwargs: Any) -> None:
        self.texts.append(text)

    def after(self, marker: str) -> str | None:
        for i, t in enumerate(self.texts[:-1]):
            if t.strip().startswith(marker):
                return self.texts[i + 1]
        return None


def _scalar(conn: Any, query: str) -> int:
    result = conn.execute(query)
    return int(result.get_next()[0])


def _kuzu_counts(conn: Any, plan: list[Any]) -> dict[str, int]:
    from ingest.graph_loader import _count_query

    return {it.name: _scalar(conn, _count_query(it)) for it in plan}


def run_kuzu_peer(items: list[dict[str, Any]], kuzu_dir: Path, llm: BaseChatModel, *,
                  isolate: bool | None = None) -> list[dict[str, Any]]:
    """LangChain's `KuzuQAChain.from_llm(llm=llm, graph=KuzuGraph(db), allow_dangerous_requests=True)`
    on the NovaOps graph loaded into Kùzu (built fresh under `kuzu_dir`). Cypher execution accuracy
    compares the chain's Cypher, re-run on Kùzu, with the gold query on the same Kùzu graph.

    Kùzu and LadybugDB (its fork) cannot live in one process: both register the same pybind11
    types ("type 'Database' is already registered"). So once tramita's graph tool has imported
    ladybug (or with `isolate=True`), the chain runs in a spawned process, which loads its own copy
    of the model.
    """
    if isolate is None:
        isolate = "ladybug" in sys.modules
    if not isolate:
        return _run_kuzu_peer(items, kuzu_dir, llm)
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        result: list[dict[str, Any]] = pool.apply(_run_kuzu_peer, (items, kuzu_dir, llm))
    return result


def _run_kuzu_peer(items: list[dict[str, Any]], kuzu_dir: Path, llm: BaseChatModel) -> list[dict[str, Any]]:
    if "ladybug" in sys.modules:
        raise RuntimeError("Kùzu cannot be loaded in a process that has loaded LadybugDB; use isolate=True")
    import kuzu

    from ingest.graph_loader import _plan

    try:
        from langchain_kuzu.chains.graph_qa.kuzu import KuzuQAChain
        from langchain_kuzu.graphs.kuzu_graph import KuzuGraph
    except ImportError:  # langchain-kuzu 0.4.2 imports langchain.chains, gone in langchain 1.x
        from langchain_community.chains.graph_qa.kuzu import KuzuQAChain  # type: ignore[assignment]
        from langchain_community.graphs.kuzu_graph import KuzuGraph  # type: ignore[assignment]
    from tramita.lab.evaluation.questions import cypher_is_ordered, results_match

    path = build_kuzu_graph(kuzu_dir)
    _, plan = _plan(SAMPLE_DIR)
    db = kuzu.Database(str(path), max_db_size=1 << 34)  # default reserves 8 TB of address space
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = KuzuGraph(db, allow_dangerous_requests=True)
        chain = KuzuQAChain.from_llm(llm=llm, graph=graph, allow_dangerous_requests=True)
    conn = kuzu.Connection(db)
    out = []
    try:
        for item in items:
            before = _kuzu_counts(conn, plan)
            counter, log = CallCounter(), _TextLog()
            started = time.perf_counter()
            error, text = None, ""
            try:
                text = str(chain.invoke({"query": item["question"]}, config={"callbacks": [counter, log]})["result"])
            except Exception as exc:  # noqa: BLE001 - a failing chain is a failed item
                error = f"{type(exc).__name__}: {exc}"[:400]
            rec = _question_record("langchain_kuzu_qa_chain", item, counter, time.perf_counter() - started)
            cypher = log.after("Generated Cypher")
            rec.update(answer=text, error=error, query=cypher, query_ran=cypher is not None and log.after("Full Context") is not None)
            if item.get("gold_cypher"):
                rec["exec_correct"] = False
                if rec["query_ran"] and cypher:
                    try:
                        gold = [tuple(r.values()) for r in graph.query(item["gold_cypher"])]
                        ours = [tuple(r.values()) for r in graph.query(cypher)]
                        rec["exec_correct"] = results_match(gold, ours, ordered=cypher_is_ordered(item["gold_cypher"]))
                    except Exception as exc:  # noqa: BLE001
                        rec["exec_error"] = f"{type(exc).__name__}: {exc}"[:200]
            after = _kuzu_counts(conn, plan)
            rec["wrote"] = sorted(k for k in before if before[k] != after.get(k))
            _score_answer(rec, item)
            out.append(rec)
    finally:
        conn.close()
        db.close()
    return out


# -------------------------------------------------------------------------- conversations

def _clean_schema(schema: Any) -> Any:
    """The tool's JSON schema without tramita's `x-*` annotations (not JSON Schema)."""
    if isinstance(schema, dict):
        return {k: _clean_schema(v) for k, v in schema.items() if not str(k).startswith("x-")}
    if isinstance(schema, list):
        return [_clean_schema(v) for v in schema]
    return schema


@dataclasses.dataclass
class ToolLog:
    """Tool executions of one conversation: (turn index, tool, write?, succeeded?)."""

    turn: int = 0
    calls: list[tuple[int, str, bool, bool]] = dataclasses.field(default_factory=list)


def business_tools(engine: Engine, user_id: str, lang: str, today: date, log: ToolLog) -> list[BaseTool]:
    """The business tools of tramita as LangChain tools: the same handlers, argument preparation
    (coercion, name → id resolution, schema validation), handler checks and permission rule as
    tramita's execute path. Errors come back to the agent as the tool's text result.
    """
    from tools.business.base import ToolContext, ToolError
    from tools.business.schema_check import prepare_value
    from tools.registry import Registry
    from tramita.core.transactions import method_of, run_checks

    registry = Registry(engine)
    tctx = ToolContext(engine=engine, user_id=user_id, today=today, now=datetime.combine(today, datetime.now().time()),
                       lang=lang, groups=registry.user_groups(user_id))
    out: list[BaseTool] = []
    for spec in registry.visible():
        write = registry.policy(spec.name).operation_type == "write"

        def run(_spec: Any = spec, _write: bool = write, **kwargs: Any) -> str:
            try:
                if not registry.is_permitted(_spec, user_id):
                    raise ToolError("PERMISSION_DENIED", "Sem permissão para esta ferramenta.",
                                    "You are not permitted to use this tool.")
                args: dict[str, Any] = {}
                for name, value in kwargs.items():
                    if name not in _spec.properties or value is None:
                        continue
                    canonical, error = prepare_value(name, _spec.properties[name], value, tctx, strict=_spec.strict)
                    if error is not None:
                        raise error
                    args[name] = canonical
                missing = [r for r in _spec.required if r not in args]
                if missing:
                    return f"error: missing required arguments {missing}"
                errors = run_checks(_spec, args, tctx)
                if errors:
                    raise next(iter(errors.values()))
                obj, method = method_of(_spec)
                result = getattr(obj, method)(args, tctx, f"peer-{uuid.uuid4().hex}")
            except ToolError as err:
                log.calls.append((log.turn, _spec.name, _write, False))
                return f"error {err.code}: {err.message(lang)}"
            log.calls.append((log.turn, _spec.name, _write, True))
            return str(result.message(lang))

        out.append(StructuredTool.from_function(func=run, name=spec.name, description=spec.description.strip(),
                                                args_schema=_clean_schema(spec.params)))
    return out


def asks_confirmation(text: str) -> bool:
    """Whether an assistant reply asks the user to confirm (a question, or a confirm/proceed cue)."""
    return bool(CONFIRM_CUES.search(text or ""))


def react_system_prompt(user_id: str, engine: Engine) -> str:
    """The ReAct peer's system prompt, naming the write tools it must confirm before calling (same rule as tramita)."""
    from tools.registry import Registry
    from tramita.base.prompts import render

    registry = Registry(engine)
    specs = registry.visible()
    writes = [s.name for s in specs if registry.policy(s.name).operation_type == "write"]
    reads = [s.name for s in specs if s.name not in writes]
    return render("peer_react_system", user_id=user_id, today=TODAY, write_tools=", ".join(writes),
                  read_tools=", ".join(reads))


def _final_checks(item: dict[str, Any], engine: Engine, before: dict[str, Any], executed_writes: list[str]) -> dict[str, bool]:
    """final_db and no_other_writes, as tramita.lab.evaluation.conversations checks them
    (`executed_writes`: the write tools that ran, as the registry's policies classify them).
    """
    from sqlalchemy import text

    final: dict[str, bool] = {}
    with engine.connect() as conn:
        for i, q in enumerate(item.get("final_db", [])):
            got = [list(r) for r in conn.execute(text(q["sql"])).all()]
            final[f"final_db[{i}]"] = rows_equal(got, q["rows"])
    if item.get("no_other_writes"):
        final["no_other_writes"] = only_these_writes(diff(before, snapshot(engine)), list(executed_writes),
                                                     audited_writes(engine, before))
    return final


def run_react_peer(conversation_items: list[dict[str, Any]], pristine_db: Path, workdir: Path,
                   llm: BaseChatModel, *, recursion_limit: int = 12) -> list[dict[str, Any]]:
    """LangGraph's `create_react_agent(llm, tools, prompt=system_prompt, checkpointer=InMemorySaver())`
    per conversation, on its own copy of the dataset, one `invoke` per user turn.

    Per turn: the tools executed; `executed` is checked like tramita's (the expected tool ran; when
    nothing may run, no write ran); a write is unconfirmed unless the previous reply asked for
    confirmation and this message is an explicit yes. Success: every turn's check, final_db and
    no_other_writes.
    """
    from langgraph.checkpoint.memory import InMemorySaver

    from ingest.sql_loader import copy_sqlite
    from tramita.core.lexicon import classify

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

    workdir.mkdir(parents=True, exist_ok=True)
    out = []
    for item in conversation_items:
        db = workdir / f"react-{item['id']}.db"
        copy_sqlite(pristine_db, db)
        engine = create_engine(f"sqlite:///{db}")
        before = snapshot(engine)
        log = ToolLog()
        tools = business_tools(engine, item["user_id"], item.get("lang", "pt"), date.fromisoformat(TODAY), log)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            agent = create_react_agent(llm, tools, prompt=react_system_prompt(item["user_id"], engine),
                                       checkpointer=InMemorySaver())
        thread = f"{item['id']}-{uuid.uuid4().hex[:6]}"
        turns: list[dict[str, Any]] = []
        prev_answer = ""
        started_all = time.perf_counter()
        for i, turn in enumerate(item["turns"]):
            log.turn = i
            counter = CallCounter()
            started = time.perf_counter()
            error, answer = None, ""
            try:
                res = agent.invoke({"messages": [HumanMessage(turn["user"])]},
                                   config={"configurable": {"thread_id": thread}, "callbacks": [counter],
                                           "recursion_limit": recursion_limit})
                last = [m for m in res["messages"] if m.type == "ai"]
                answer = str(last[-1].content) if last else ""
            except Exception as exc:  # noqa: BLE001 - e.g. GraphRecursionError: the turn fails, the run goes on
                error = f"{type(exc).__name__}: {exc}"[:300]
            ran = [(name, write, ok) for t, name, write, ok in log.calls if t == i]
            executed = [n for n, _, ok in ran if ok]
            writes = [n for n, w, ok in ran if ok and w]
            expect = turn["expect"]
            want = expect.get("executed")
            checks = {"executed": (want in executed and all(w == want for w in writes)) if want else not writes}
            if expect.get("answer_facts"):
                checks["answer_facts"] = all(facts_found(expect["answer_facts"], answer).values())
            confirmed = i > 0 and asks_confirmation(prev_answer) and classify(turn["user"]) == "confirm"
            turns.append({"user": turn["user"], "answer": answer[:600], "executed": executed, "writes": writes,
                          "tool_errors": [n for n, _, ok in ran if not ok], "checks": checks,
                          "unconfirmed_writes": 0 if confirmed else len(writes), "error": error,
                          "seconds": round(time.perf_counter() - started, 3), **counter.snapshot()})
            prev_answer = answer
        all_writes = [n for t in turns for n in t["writes"]]
        final = _final_checks(item, engine, before, all_writes)
        engine.dispose()
        ok = all(all(t["checks"].values()) for t in turns) and all(final.values())
        out.append({"system": "langgraph_react_agent", "id": item["id"], "ok": ok, "turns": turns,
                    "final_checks": final, "unconfirmed_writes": sum(t["unconfirmed_writes"] for t in turns),
                    "seconds": round(time.perf_counter() - started_all, 3)})
    return out


# --------------------------------------------------------------------------- tramita side

def question_record(r: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    """An eval record of tramita (`QuestionResult.to_json()`, as in `<out>/items.jsonl`) in the
    peers' record shape, so a finished `tramita eval` is compared without running it again.
    """
    t = r.get("trace") or {}
    query = r.get("sql") or r.get("cypher") or {}
    exec_correct = r["sql"].get("correct") if r.get("sql") else (r["cypher"].get("correct") if r.get("cypher") else None)
    checks = r.get("checks") or {}
    ok = bool(checks.get("must_refuse")) if item.get("must_refuse") else bool(checks.get("answer_facts", r.get("ok")))
    return {"system": "tramita", "id": r["id"], "question": r["question"], "needs": r["needs"], "answer": r["answer"],
            "facts": r["facts"], "ok": ok, "query": query.get("ours"),
            "query_ran": bool(query.get("ours")) and not query.get("error"),
            "exec_correct": exec_correct, "wrote": r["tables_changed"], "error": r["error"],
            "seconds": round(r["seconds"], 3), "llm_calls": int(t.get("llm_calls", 0)),
            "prompt_tokens": int(t.get("prompt_tokens", 0)), "completion_tokens": int(t.get("completion_tokens", 0)),
            "llm_seconds": round(float(t.get("llm_seconds", 0.0)), 3), "refused": r["refused"]}


def run_tramita_questions(items: list[dict[str, Any]], pristine_db: Path, workdir: Path,
                          settings: Settings) -> list[dict[str, Any]]:
    """Run tramita on the same questions (tramita.lab.evaluation.questions.run_question), in the peers'
    record shape.
    """
    from tramita.lab.evaluation.questions import run_question

    out = []
    for item in items:
        r = run_question(item, pristine_db, workdir, settings)
        out.append(question_record({**r.to_json(), "ok": r.ok}, item))
    return out


def conversation_record(r: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    """An eval record of a tramita conversation (`ConversationResult.to_json()`) in the peers'
    shape; `ok` is tramita's full rule set, `ok_peer_rules` the subset the peer is scored on
    (executed per turn, answer facts, final_db, no_other_writes).
    """
    turns: list[dict[str, Any]] = []
    for t in r["turns"]:
        tr = t.get("trace") or {}
        turns.append({"user": t["user"], "answer": t["answer"][:600],
                      "executed": [tr["executed_tool"]] if tr.get("executed_tool") else [], "checks": t["checks"],
                      "status": t["status"], "unconfirmed_writes": int(t["unconfirmed_write"]),
                      "seconds": round(t["seconds"], 3), "llm_calls": int(tr.get("llm_calls", 0)),
                      "prompt_tokens": int(tr.get("prompt_tokens", 0)),
                      "completion_tokens": int(tr.get("completion_tokens", 0)),
                      "llm_seconds": round(float(tr.get("llm_seconds", 0.0)), 3)})
    peer_rules = all(t["checks"].get(k, True) for t in turns for k in ("executed", "answer_facts"))
    peer_rules = peer_rules and all(r["final_checks"].values()) and len(turns) == len(item["turns"])
    return {"system": "tramita", "id": r["id"], "ok": r["ok"], "ok_peer_rules": peer_rules, "turns": turns,
            "final_checks": r["final_checks"], "unconfirmed_writes": r["unconfirmed_writes"], "error": r["error"],
            "seconds": round(r["seconds"], 3)}


def run_tramita_conversations(items: list[dict[str, Any]], pristine_db: Path, workdir: Path,
                              settings: Settings) -> list[dict[str, Any]]:
    """Run tramita on the same conversations, in the peers' record shape (`conversation_record`)."""
    from tramita.lab.evaluation.conversations import run_item

    out = []
    for item in items:
        r = run_item(item, pristine_db, workdir, settings)
        out.append(conversation_record({**r.to_json(), "ok": r.ok}, item))
    return out


# -------------------------------------------------------------------------------- summary

def _p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def summarize_records(records: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """success, unconfirmed writes / writes, LLM calls per turn, latency per turn (p50, mean)."""
    if kind == "conversations":
        turns = [t for r in records for t in r["turns"]]
        ok_key = "ok_peer_rules" if records and "ok_peer_rules" in records[0] else "ok"
        summary = {"items": len(records), "success": sum(1 for r in records if r[ok_key]),
                   "unconfirmed_writes": sum(r["unconfirmed_writes"] for r in records)}
        if ok_key == "ok_peer_rules":
            summary["success_all_rules"] = sum(1 for r in records if r["ok"])
    else:
        turns = records
        summary = {"items": len(records), "success": sum(1 for r in records if r["ok"]),
                   "exec_correct": sum(1 for r in records if r.get("exec_correct")),
                   "query_ran": sum(1 for r in records if r.get("query_ran")),
                   "items_that_wrote": sum(1 for r in records if r.get("wrote"))}
    summary["success_rate"] = round(summary["success"] / len(records), 3) if records else None
    calls = [float(t["llm_calls"]) for t in turns]
    secs = [float(t["seconds"]) for t in turns]
    summary.update(turns=len(turns), llm_calls_per_turn=round(statistics.fmean(calls), 2) if calls else None,
                   latency_s_p50=_p50(secs), latency_s_mean=round(statistics.fmean(secs), 3) if secs else None,
                   llm_share=round(sum(float(t.get("llm_seconds", 0)) for t in turns) / sum(secs), 3) if sum(secs) else None)
    return summary


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 2)


PEER_FOR = {"sql": "langchain_sql_chain", "graph": "langchain_kuzu_qa_chain", "refuse": "langchain_sql_chain",
            "conversations": "langgraph_react_agent"}


def peer_summary(kind: str, items: list[dict[str, Any]], *, pristine_db: Path, workdir: Path, settings: Settings,
                 models: tuple[BaseChatModel, BaseChatModel] | None = None,
                 on_progress: Callable[[str], None] | None = None,
                 ours: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Run tramita and the kind's peer on the same items; return both summaries, the ratios
    (tramita / peer) and every record. `kind`: sql, graph, refuse (must_refuse items through the
    SQL chain) or conversations. `settings` name the stores (graph, Chroma) and the LLM profile, as
    for `tramita eval`; `pristine_db` is a SQLite dataset that is only copied. `ours`: tramita's
    records of a finished `tramita eval` on these items (then tramita is not run again).
    """
    if kind not in PEER_KINDS:
        raise ValueError(f"unknown peer kind {kind!r}; choose from {', '.join(PEER_KINDS)}")
    say = on_progress or (lambda _m: None)
    chain_llm, tool_llm = models or peer_models(settings.llm_profile)
    workdir.mkdir(parents=True, exist_ok=True)
    if ours is None:
        say(f"{kind}: tramita on {len(items)} items")
        run_ours = run_tramita_conversations if kind == "conversations" else run_tramita_questions
        ours = run_ours(items, pristine_db, workdir / "tramita", settings)
    say(f"{kind}: {PEER_FOR[kind]} on {len(items)} items")
    if kind == "conversations":
        theirs = run_react_peer(items, pristine_db, workdir / "peer", tool_llm)
    elif kind == "graph":
        theirs = run_kuzu_peer(items, workdir / "kuzu", chain_llm)
    else:
        theirs = run_sql_chain_peer(items, pristine_db, chain_llm, workdir=workdir / "peer")
    s_ours, s_theirs = summarize_records(ours, kind), summarize_records(theirs, kind)
    ratios = {"success_rate": _ratio(s_ours["success_rate"], s_theirs["success_rate"]),
              "latency_p50": _ratio(s_ours["latency_s_p50"], s_theirs["latency_s_p50"]),
              "llm_calls_per_turn": _ratio(s_ours["llm_calls_per_turn"], s_theirs["llm_calls_per_turn"])}
    return {"kind": kind, "peer": PEER_FOR[kind], "items": [i["id"] for i in items], "tramita": s_ours,
            "peer_summary": s_theirs, "ratios_tramita_over_peer": ratios, "records": {"tramita": ours, "peer": theirs}}


def peer_items(kind: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items a peer is built for: sql / graph = single-backend questions of that backend,
    refuse = must_refuse questions, conversations = every conversation.
    """
    if kind == "conversations":
        return list(items)
    if kind == "refuse":
        return [q for q in items if q.get("must_refuse")]
    return [q for q in items if q.get("needs") == [kind] and not q.get("must_refuse")]


def select_items(kind: str, limit: int) -> list[dict[str, Any]]:
    """The first `limit` dev items a peer is built for (`peer_items`)."""
    from tramita.lab.evaluation.conversations import load_items

    name = "conversations.dev.jsonl" if kind == "conversations" else "questions.dev.jsonl"
    return peer_items(kind, load_items(SAMPLE_DIR / name))[:limit]


def compare_eval(eval_kind: str, items: list[dict[str, Any]], records: dict[str, dict[str, Any]], *,
                 pristine_db: Path, out: Path, settings: Settings,
                 say: Callable[[str], None] = print) -> dict[str, Any]:
    """`tramita eval ... --peers`: the peers on the items of a finished eval, compared with the
    eval's own tramita records (tramita is not run twice). Writes peers.json and peers.md to `out`.
    """
    backend = settings.llm_profile
    kinds = ["conversations"] if eval_kind == "conversations" else ["sql", "graph", "refuse"]
    to_record = conversation_record if eval_kind == "conversations" else question_record
    results: dict[str, Any] = {}
    summary = {"started_at": datetime.now().isoformat(timespec="seconds"), "backend": backend,
               "limit": len(items), "deviations": DEVIATIONS, "kinds": results}
    models = peer_models(backend)
    for kind in kinds:
        chosen = [i for i in peer_items(kind, items) if i["id"] in records]
        if not chosen:
            continue
        ours = [to_record(records[i["id"]], i) for i in chosen]
        started = time.perf_counter()
        results[kind] = peer_summary(kind, chosen, pristine_db=pristine_db, workdir=out / "peers" / kind,
                                     settings=settings, models=models, on_progress=say, ours=ours)
        results[kind]["seconds"] = round(time.perf_counter() - started, 1)
        (out / "peers.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
        (out / "peers.md").write_text(render_comparison(summary), encoding="utf-8")
    return summary


def run_peer_comparison(kinds: list[str], *, limit: int, out: Path, settings: Settings,
                        say: Callable[[str], None] = print) -> dict[str, Any]:
    """`tramita bench peers`: every kind on the same first `limit` items, one process, one model
    file, on a dataset loaded fresh from the sample (never the data directory's, which earlier
    runs may have written to); graph and documents are those of `settings`. Writes peers.json and
    peers.md to `out`.
    """
    from tramita.lab.evaluation.runner import check_stores, prepare_pristine

    backend = settings.llm_profile
    check_stores(settings)  # the graph and the documents must be ingested (`tramita ingest`)
    out.mkdir(parents=True, exist_ok=True)
    pristine = prepare_pristine(out, settings)
    results: dict[str, Any] = {}
    summary = {"started_at": datetime.now().isoformat(timespec="seconds"), "backend": backend, "limit": limit,
               "deviations": DEVIATIONS, "kinds": results}
    models = peer_models(backend)
    for kind in kinds:
        started = time.perf_counter()
        results[kind] = peer_summary(kind, select_items(kind, limit), pristine_db=pristine, workdir=out / kind,
                                     settings=settings, models=models, on_progress=say)
        results[kind]["seconds"] = round(time.perf_counter() - started, 1)
        say(f"{kind}: done in {results[kind]['seconds']} s")
        # written after every kind: a long run stopped half-way keeps what it measured
        (out / "peers.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False, default=str),
                                        encoding="utf-8")
        (out / "peers.md").write_text(render_comparison(summary), encoding="utf-8")
    return summary


def render_comparison(summary: dict[str, Any]) -> str:
    """The text of peers.md: per kind, tramita and the peer side by side, the ratios, and the deviations."""
    lines = [f"# tramita vs. peers — backend {summary['backend']}, up to {summary['limit']} items per kind", ""]
    for kind, res in summary["kinds"].items():
        t, p, r = res["tramita"], res["peer_summary"], res["ratios_tramita_over_peer"]
        lines += [f"## {kind}: tramita vs. {res['peer']} ({', '.join(res['items'])})", "",
                  "| | success | unconfirmed writes / items that wrote | LLM calls per turn | latency p50 s | LLM share |",
                  "|---|---|---|---|---|---|"]
        for name, s in (("tramita", t), (res["peer"], p)):
            writes = s.get("unconfirmed_writes", s.get("items_that_wrote"))
            extra = f" (all tramita rules: {s['success_all_rules']}/{s['items']})" if "success_all_rules" in s else ""
            lines.append(f"| {name} | {s['success']}/{s['items']}{extra} | {writes} | {s['llm_calls_per_turn']} | "
                         f"{s['latency_s_p50']} | {s['llm_share']} |")
        if kind != "conversations":
            lines += ["", f"Execution accuracy: tramita {t['exec_correct']}/{t['items']}, peer {p['exec_correct']}/{p['items']}; "
                      f"query ran: tramita {t['query_ran']}, peer {p['query_ran']}."]
        lines += ["", f"Ratios tramita / peer: success {r['success_rate']}, latency {r['latency_p50']}, "
                  f"LLM calls per turn {r['llm_calls_per_turn']} (None: the peer's figure is 0).", ""]
    lines += ["Deviations: " + "; ".join(summary.get("deviations", [])), ""]
    return "\n".join(lines)
