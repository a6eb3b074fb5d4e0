"""The answer streams while it is written: `Session.stream_turn` in process, `stream_mode="messages"`
through `langgraph dev` (what Studio and agent-chat-ui read), and the real llama.cpp model's `_stream`.

The scripted model streams its replies in several chunks (tools/scripted_model.py `stream_pieces`),
so these tests prove chunking without a real model; one real-model test proves llama.cpp's tokens
arrive as more than one chunk.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_graph import scripted_session
from test_langgraph_dev import CONTEXT, client, server  # noqa: F401 - module-scoped dev server fixtures

from graph.session import STREAM_NODE, AnswerToken, TurnResult
from tools.scripted_model import stream_pieces

QUESTION = "Segundo a política de reembolso, qual o limite para refeições?"  # names a policy: the documents


def test_stream_pieces_cover_the_text() -> None:
    text = "O limite é 80 dólares por pedido [doc-pol-expense], conforme a política."
    pieces = stream_pieces(text)
    assert len(pieces) > 1 and "".join(pieces) == text
    assert stream_pieces("") == [""] and stream_pieces("sim") == ["sim"]


def test_stream_turn_yields_answer_tokens_then_the_result(novaops_services: Any) -> None:
    with scripted_session(services=novaops_services) as s:
        events = list(s.stream_turn("q", QUESTION))
        tokens = [e for e in events if isinstance(e, AnswerToken)]
        result = events[-1]
        assert isinstance(result, TurnResult) and all(isinstance(e, AnswerToken) for e in events[:-1])
        assert len(tokens) > 1, "the scripted synthesis streams in several chunks"
        streamed = "".join(t.text for t in tokens)
        assert streamed.strip() and result.answer.startswith(streamed.strip()[:40])
        assert result.first_token_seconds is not None and result.first_token_seconds <= result.seconds
        assert [t.seconds for t in tokens] == sorted(t.seconds for t in tokens)
        assert "synthesize" in result.trace["nodes"]
        # a turn that writes no answer with the LLM streams nothing, and its result is turn()'s
        events = list(s.stream_turn("x", "quero aprovar uma despesa"))
        assert len(events) == 1 and isinstance(events[0], TurnResult)
        assert events[0].status == "collecting" and events[0].first_token_seconds is None
        assert s.turn("x", "EXP-0264").status == "awaiting_confirmation"


def test_structured_calls_stay_out_of_the_messages_stream(novaops_services: Any) -> None:
    """The planner's JSON is the graph's own business: only synthesis chunks reach stream_mode="messages"."""
    from langchain_core.messages import HumanMessage

    with scripted_session(services=novaops_services) as s:
        nodes = set()
        for chunk, meta in s.graph.stream({"messages": [HumanMessage(QUESTION)]}, config={"configurable": {"thread_id": "m"}},
                                          context=s.context, stream_mode="messages"):
            if chunk.type in ("ai", "AIMessageChunk"):
                nodes.add(meta["langgraph_node"])
        assert "plan" not in nodes and STREAM_NODE in nodes


@pytest.mark.slow
def test_langgraph_dev_streams_synthesis_chunks(client: Any) -> None:  # noqa: F811 - the imported fixture
    thread = client.threads.create()
    chunks: list[str] = []
    final: dict[str, Any] = {}
    for part in client.runs.stream(thread["thread_id"], "tramita", input={"messages": [{"role": "user", "content": QUESTION}]},
                                   context=CONTEXT, stream_mode=["messages-tuple", "values"]):
        if part.event == "messages":
            message, meta = part.data
            if meta.get("langgraph_node") == STREAM_NODE and message.get("content"):
                chunks.append(message["content"])
        elif part.event == "values":
            final = part.data
    assert len(chunks) > 1, f"expected the answer in several chunks, got {chunks!r}"
    assert final["answer"].startswith("".join(chunks).strip()[:40])
    assert "synthesize" in final["turn"]["nodes"]


@pytest.mark.real_model
def test_real_model_streams_a_synthesis_in_several_chunks(tmp_path: Path) -> None:
    """LangGraph's stream_mode="messages" sees llama.cpp's tokens one by one, through text_call."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    from tools.llamacpp_chat import ChatLlamaCppShared
    from tools.llm import Usage, override_model, text_call
    from tools.model_assets import gguf_path

    if not os.environ.get("TRAMITA_MODELS_DIR") and not os.environ.get("TRAMITA_DATA_DIR"):
        pytest.skip("set TRAMITA_MODELS_DIR to a folder with the GGUF")
    override_model("stream-test", ChatLlamaCppShared(model_path=str(gguf_path()), max_tokens=12, temperature=0.0))
    usage = Usage()

    def synthesize(state: MessagesState) -> dict[str, Any]:
        answer = text_call("synthesis", "synthesize", backend="stream-test", usage=usage, language="Portuguese (Brazil)",
                           context="[doc-pol-expense] Refeições: limite de 80 dólares por pedido.", question=QUESTION)
        return {"messages": []} if not answer else {}

    graph = StateGraph(MessagesState)
    graph.add_node("synthesize", synthesize)
    graph.add_edge(START, "synthesize")
    graph.add_edge("synthesize", END)
    try:
        pieces = [chunk.content for chunk, meta in graph.compile().stream({"messages": []}, stream_mode="messages")
                  if meta.get("langgraph_node") == "synthesize" and chunk.content]
    finally:
        override_model("stream-test", None)
    assert len(pieces) > 1, pieces
    assert usage.calls == 1 and usage.first_token_s is not None and usage.completion_tokens > 1
