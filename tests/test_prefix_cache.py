"""The static-prefix KV cache (tools/prefix_cache.py) and its accounting in the turn trace.

The real-model tests prove what matters: a call whose static prefix is restored from a saved state
gives exactly the output of a call that evaluates every token, at temperature 0, and pays only for
the new tokens; and the grammar-checked greedy decoder gives exactly llama-cpp-python's
grammar-first output. They are short (small prompts, a few output tokens): the CI machine has 2 cores.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from pydantic import BaseModel

from graph.state import TurnTrace, merge_trace
from tools.llm import Usage
from tools.prefix_cache import PrefixCache, common_prefix, model_identity


# ----------------------------------------------------------------------------- without a model
def test_common_prefix() -> None:
    a = np.array([1, 2, 3, 4], dtype=np.int32)
    assert common_prefix(a, np.array([1, 2, 3, 4, 5], dtype=np.int32)) == 4
    assert common_prefix(a, np.array([1, 2, 9], dtype=np.int32)) == 2
    assert common_prefix(a, np.array([], dtype=np.int32)) == 0
    assert common_prefix(a, np.array([7], dtype=np.int32)) == 0


def test_key_changes_with_tokens_and_model(tmp_path: Path) -> None:
    weights = tmp_path / "m.gguf"
    weights.write_bytes(b"x" * 10)
    one = PrefixCache(model_identity(str(weights), flash_attn=False))
    toks = np.array([5, 6, 7], dtype=np.int32)
    assert one.key(toks) == one.key(toks.copy())
    assert one.key(toks) != one.key(np.array([5, 6, 8], dtype=np.int32))  # a prompt or schema edit
    assert one.key(toks) != PrefixCache(model_identity(str(weights), flash_attn=True)).key(toks)  # KV layout
    weights.write_bytes(b"y" * 11)  # another model file at the same path
    assert one.key(toks) != PrefixCache(model_identity(str(weights), flash_attn=False)).key(toks)


def test_usage_counts_cached_tokens_and_the_trace_adds_them() -> None:
    usage = Usage()
    usage.add(AIMessage("x", usage_metadata={"input_tokens": 300, "output_tokens": 5, "total_tokens": 305,
                                             "input_token_details": {"cache_read": 250}}), 0.5)
    usage.add(AIMessage("y", usage_metadata={"input_tokens": 100, "output_tokens": 5, "total_tokens": 105}), 0.5)
    assert (usage.prompt_tokens, usage.cached_tokens) == (400, 250)
    t = merge_trace(None, TurnTrace(route="__reset__", nodes=["route_turn"]))
    assert "cached_tokens" not in t  # additive: a turn without LLM calls keeps its old shape
    t = merge_trace(t, TurnTrace(nodes=["plan"], **usage.trace()))  # type: ignore[typeddict-item]
    t = merge_trace(t, TurnTrace(nodes=["synthesize"], cached_tokens=50, first_token_s=1.25))
    assert t["cached_tokens"] == 300 and t["prompt_tokens"] == 400 and t["first_token_s"] == 1.25


# ----------------------------------------------------------------------------- with the real model
class Pick(BaseModel):
    decision: Literal["confirm", "reject", "other"]


SYSTEM_A = ("The assistant showed a summary of an action and asked the user to confirm it. Classify the "
            "user's reply. Reply with JSON only: {\"decision\": \"confirm\" | \"reject\" | \"other\"}.\n"
            "- confirm: the user clearly says yes to the action as shown.\n- reject: the user clearly says no.\n"
            "- other: anything else (a question, a change, an unrelated request, unclear text).")
SYSTEM_B = "You answer in one short sentence, in the language of the question."


@pytest.fixture(scope="module")
def gguf(pristine: Path) -> str:
    """The shipped GGUF: the one TRAMITA_MODELS_DIR names, else the one the test session assembled."""
    from tools.model_assets import gguf_path

    if os.environ.get("TRAMITA_MODELS_DIR"):
        return str(gguf_path())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRAMITA_MODELS_DIR", str(pristine / "models"))
        return str(gguf_path())


def _model(gguf: str, **kw: Any) -> Any:
    from tools.llamacpp_chat import ChatLlamaCppShared

    return ChatLlamaCppShared(model_path=gguf, temperature=0.0, max_tokens=kw.pop("max_tokens", 12), **kw)


def _cold(model: Any) -> None:
    """Forget the live context, so the next call evaluates every prompt token."""
    loaded = model.loaded()
    loaded.llama.reset()


@pytest.mark.real_model
def test_cached_prefix_gives_the_uncached_output(gguf: str) -> None:
    uncached = _model(gguf, prefix_cache_mib=0)
    cached = _model(gguf, prefix_cache_mib=64)
    asks = [[SystemMessage(SYSTEM_A), HumanMessage("Summary shown: aprovar EXP-0264\nUser reply: \"\"\"sim, pode\"\"\"")],
            [SystemMessage(SYSTEM_A), HumanMessage("Summary shown: abrir ticket P2\nUser reply: \"\"\"e o prazo?\"\"\"")]]
    other = [SystemMessage(SYSTEM_B), HumanMessage("Qual a capital da França?")]
    structured_uncached = uncached.with_structured_output(Pick, include_raw=True)
    reference = []
    for msgs in asks:
        _cold(uncached)
        out = structured_uncached.invoke(msgs)
        assert out["raw"].usage_metadata["input_token_details"]["cache_read"] == 0
        reference.append(out["raw"].content)
    _cold(uncached)
    ref_text = uncached.invoke(asks[0]).content

    structured = cached.with_structured_output(Pick, include_raw=True)
    _cold(cached)
    first = structured.invoke(asks[0])  # a miss: evaluates and saves the static prefix
    assert first["raw"].content == reference[0]
    assert first["raw"].response_metadata["prefix_saved"] is True
    cached.invoke(other)  # another component in between: the live context no longer matches
    second = structured.invoke(asks[1])
    raw = second["raw"]
    assert raw.content == reference[1], "a restored prefix must not change the output"
    assert raw.response_metadata["prefix_cache"] == "ram"
    prompt, reused = raw.usage_metadata["input_tokens"], raw.usage_metadata["input_token_details"]["cache_read"]
    assert reused > 0.6 * prompt and raw.response_metadata["prompt_eval_tokens"] == prompt - reused
    cached.invoke(other)
    text = cached.invoke(asks[0])  # free text on the same static prefix
    assert text.content == ref_text
    assert text.response_metadata["prefix_cache"] == "ram"


@pytest.mark.real_model
def test_partial_prefix_match_is_truncated_correctly(gguf: str) -> None:
    """A prompt that shares only part of a saved prefix restores that part and evaluates the rest."""
    cached = _model(gguf, prefix_cache_mib=64, max_tokens=8)
    longer = SYSTEM_A + "\nBe strict: a reply that changes anything is other."
    msgs = [SystemMessage(longer), HumanMessage("Summary shown: aprovar EXP-0264\nUser reply: \"\"\"não\"\"\"")]
    _cold(cached)
    reference = _model(gguf, prefix_cache_mib=0, max_tokens=8).invoke(msgs).content
    cached.loaded().cache.clear()
    cached.invoke([SystemMessage(SYSTEM_A), HumanMessage("Summary shown: x\nUser reply: \"\"\"sim\"\"\"")])
    cached.invoke([SystemMessage(SYSTEM_B), HumanMessage("Olá")])
    out = cached.invoke(msgs)
    assert out.content == reference
    assert out.response_metadata["prefix_cache"] == "ram" and out.response_metadata["prefix_restored"] > 0


@pytest.mark.real_model
def test_a_prefix_saved_on_disk_serves_a_new_process(gguf: str, tmp_path: Path) -> None:
    """The disk tier (a restarted server, `tramita ask`): a prefix one process saved is loaded by
    the next with an empty RAM cache, and gives exactly the uncached output.
    """
    msgs = [SystemMessage(SYSTEM_A), HumanMessage("Summary shown: abrir ticket P2\nUser reply: \"\"\"sim, pode\"\"\"")]
    plain = _model(gguf, prefix_cache_mib=0, max_tokens=8)
    _cold(plain)
    reference = plain.invoke(msgs).content
    writer = _model(gguf, prefix_cache_mib=64, max_tokens=8, prefix_cache_dir=str(tmp_path))
    _cold(writer)
    written = writer.invoke(msgs)
    assert written.response_metadata["prefix_saved"] is True and written.content == reference
    assert list(tmp_path.glob("*.kv")), "the saved prefix is on disk"
    reader = _model(gguf, prefix_cache_mib=64, max_tokens=8, prefix_cache_dir=str(tmp_path))
    reader.loaded().cache.clear()  # what a new process starts with: nothing in RAM
    _cold(reader)
    out = reader.invoke(msgs)
    assert out.response_metadata["prefix_cache"] == "disk" and out.response_metadata["prefix_restored"] > 0
    assert out.content == written.content == reference


@pytest.mark.real_model
def test_a_warmed_prefix_serves_the_first_call_exactly(gguf: str, tmp_path: Path) -> None:
    """`tramita warm`: the static prefix evaluated before any question is the one the first real
    call restores (from disk, in a new process), whole, and the answer equals the uncached one.
    """
    msgs = [SystemMessage(SYSTEM_A), HumanMessage("Summary shown: aprovar EXP-0264\nUser reply: \"\"\"pode sim\"\"\"")]
    plain = _model(gguf, prefix_cache_mib=0, max_tokens=8)
    _cold(plain)
    reference = plain.invoke(msgs).content
    warmer = _model(gguf, prefix_cache_mib=64, max_tokens=8, prefix_cache_dir=str(tmp_path))
    warmer.loaded().cache.clear()
    _cold(warmer)
    warmed = warmer.warm(SYSTEM_A)
    assert warmed.saved is True and warmed.prompt > 0
    assert warmer.warm(SYSTEM_A).saved is False  # already kept: restored, not evaluated again
    reader = _model(gguf, prefix_cache_mib=64, max_tokens=8, prefix_cache_dir=str(tmp_path))
    reader.loaded().cache.clear()  # a new process: nothing in RAM
    _cold(reader)
    out = reader.invoke(msgs)
    meta = out.response_metadata
    assert meta["prefix_cache"] == "disk" and meta["prefix_restored"] == meta["prefix_tokens"] > 0
    assert meta["prefix_saved"] is False
    assert out.content == reference


def test_a_prompt_head_is_the_static_prefix_a_call_sends() -> None:
    from tramita.base.prompts import head, split

    values = {"model": "m: dims", "examples": "q -> x"}
    system, _ = split("semantic_query", **values, today="2026-05-15", hints="(none)", question="?")
    assert head("semantic_query", **values) == system
    with pytest.raises(KeyError):
        head("semantic_query", model="m")  # a static slot left empty is an error, as in render
    assert head("synthesize", language="English") != head("synthesize", language="Portuguese (Brazil)")


def test_the_disk_tier_defaults_to_the_models_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tools.llm import BackendSpec, prefix_cache_settings

    monkeypatch.setenv("TRAMITA_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.delenv("TRAMITA_PREFIX_CACHE_DIR", raising=False)
    monkeypatch.delenv("TRAMITA_PREFIX_CACHE_MIB", raising=False)
    spec = BackendSpec(provider="llamacpp", model="m")
    assert prefix_cache_settings(spec) == (256, str(tmp_path / "models" / "cache" / "prefix"))
    assert prefix_cache_settings(spec.model_copy(update={"prefix_cache_disk_mib": 0})) == (256, None)
    monkeypatch.setenv("TRAMITA_PREFIX_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert prefix_cache_settings(spec)[1] == str(tmp_path / "elsewhere")


class Plan(BaseModel):
    use_sql: bool
    use_graph: bool
    use_docs: bool
    reason: str


@pytest.mark.real_model
def test_grammar_checked_greedy_gives_the_library_output(gguf: str) -> None:
    """Same JSON, token for token, as llama-cpp-python's sampler chain (grammar over the whole vocabulary)."""
    system = ("You plan how to answer a question about NovaOps. Reply with JSON only: "
              "{\"use_sql\": bool, \"use_graph\": bool, \"use_docs\": bool, \"reason\": \"short\"}.")
    asks = [[SystemMessage(system), HumanMessage("Question: \"\"\"Quantas despesas estão pendentes?\"\"\"")],
            [SystemMessage(SYSTEM_A), HumanMessage("Summary shown: aprovar EXP-0264\nUser reply: \"\"\"pode ser\"\"\"")]]
    for msgs, schema in zip(asks, (Plan, Pick), strict=True):
        outs = []
        for fast in (False, True):
            model = _model(gguf, prefix_cache_mib=0, max_tokens=24, fast_grammar=fast)
            _cold(model)
            raw = model.with_structured_output(schema, include_raw=True).invoke(msgs)["raw"]
            outs.append((raw.content, raw.usage_metadata["output_tokens"]))
        assert outs[0] == outs[1], outs


def test_usage_merge_keeps_every_counter() -> None:
    """retrieve sums its backends' usage: the reused prompt tokens must reach the turn trace too."""
    from tools.llm import Usage

    total, part = Usage(), Usage(calls=2, prompt_tokens=1900, completion_tokens=60, seconds=9.0, cached_tokens=1788)
    total.merge(part)
    total.merge(Usage(calls=1, prompt_tokens=300, cached_tokens=225))
    assert (total.calls, total.prompt_tokens, total.completion_tokens, total.cached_tokens) == (3, 2200, 60, 2013)
    assert total.trace()["cached_tokens"] == 2013


def test_a_loop_is_told_apart_from_a_query_that_repeats_short_runs() -> None:
    """The local decoder stops when the text starts repeating itself (`repeats_itself`), since a
    1.5B model's loop at temperature 0 would otherwise decode to `max_tokens`."""
    from tools.llamacpp_chat import LOOP_CHARS, repeats_itself

    looping = ('{"sql": "SELECT e.full_name, e.email, e.role, e.level, e.team_id, e.manager_id, e.office_city, '
               'e.country, e.approval_limit_usd, e.hire_date, e.team_id, e.manager_id, e.office_city, e.country, '
               'e.approval_limit_usd, e.hire_date, e.team_id, e.manager_id, e.office_city, e.country')
    assert repeats_itself(looping)
    # the first time round, and half of the second, are not yet a loop
    second = looping.index("e.team_id, e.manager_id", looping.index("e.hire_date"))
    assert not any(repeats_itself(looping[:n]) for n in range(second + LOOP_CHARS // 2))
    assert repeats_itself("SELECT " + "a, " * 40)  # a short cycle, once it has run LOOP_CHARS long
    legitimate = {
        "two filters on one field": (
            '{"expressible": true, "measures": ["tickets.count"], "dimensions": [], "segments": [], '
            '"filters": [{"field": "tickets.priority", "op": "=", "value": "P1"}, '
            '{"field": "tickets.priority", "op": "=", "value": "P2"}, '
            '{"field": "tickets.status", "op": "=", "value": "open"}], "order": [], "limit": null}'),
        # a long run written twice, but not back to back (listed, then ordered by), is no loop
        "listed, then ordered by": (
            '{"expressible": true, "measures": ["budget_requests.count", "budget_requests.sum_change_usd", '
            '"budget_requests.sum_requested_amount_usd"], "dimensions": ["budget_requests.reviewed_by"], '
            '"segments": [], "filters": [], "order": [{"field": "budget_requests.count", "direction": "desc"}, '
            '{"field": "budget_requests.sum_change_usd", "direction": "desc"}], "limit": null, '
            '"note": ["budget_requests.count", "budget_requests.sum_change_usd", '
            '"budget_requests.sum_requested_amount_usd"]}'),
        "CASE branches": (
            "SELECT SUM(CASE WHEN status = 'open' THEN 1 ELSE 0 END) AS open_tickets, "
            "SUM(CASE WHEN status = 'in_progress' THEN 1 ELSE 0 END) AS in_progress_tickets, "
            "SUM(CASE WHEN status = 'resolved' THEN 1 ELSE 0 END) AS resolved_tickets FROM tickets"),
    }
    for name, text in legitimate.items():
        assert not any(repeats_itself(text[:n]) for n in range(len(text) + 1)), name


def test_a_cut_loop_is_named_in_the_retry_so_the_model_hears_what_went_wrong() -> None:
    """A reply the decoder cut as a loop fails validation; the one retry says it looped, not only
    that the JSON was unterminated."""
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from pydantic import BaseModel

    from tools.llm import override_model, structured_call
    from tools.scripted_model import ScriptedChatModel

    class Sql(BaseModel):
        sql: str

    seen: list[str] = []

    class Looping(ScriptedChatModel):
        def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            seen.append(str(messages[-1].content))
            if len(seen) == 1:
                msg = AIMessage(content='{"sql": "SELECT a, b, a, b, a, b', response_metadata={"finish_reason": "loop"})
            else:
                msg = AIMessage(content='{"sql": "SELECT 1"}')
            return ChatResult(generations=[ChatGeneration(message=msg)])

    override_model("scripted", Looping())
    try:
        out = structured_call("text_to_sql", Sql, "repair", backend="scripted", query="SELECT", error="e")
    finally:
        override_model("scripted", None)
    assert out.sql == "SELECT 1" and len(seen) == 2 and "repeating itself" in seen[1]
