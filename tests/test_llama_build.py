"""The llama.cpp build stamp: a native build is loaded only on a CPU that has its instruction sets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools import llama_build
from tools.llama_build import isa_flags, main, native, problem, stamp


def test_cmake_args_native_or_portable() -> None:
    assert native("") is True  # llama.cpp's own default
    assert native("-DGGML_NATIVE=ON") is True
    assert native("-DGGML_NATIVE=OFF") is False
    assert native("-DGGML_NATIVE=OFF -DGGML_NATIVE=ON") is True  # the last one wins, as in CMake


def test_stamp_keeps_instruction_sets_only(tmp_path: Path) -> None:
    path = tmp_path / "stamp.json"
    record = stamp("-DGGML_NATIVE=ON", frozenset({"avx2", "avx512f", "sse4_2", "fpu", "hypervisor"}), path)
    assert record["requires"] == ["avx2", "avx512f", "sse4_2"]
    assert json.loads(path.read_text())["native"] is True
    assert isa_flags({"avx512_vnni", "amx_int8", "vme"}) == {"avx512_vnni", "amx_int8"}


def test_a_cpu_without_a_required_extension_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "stamp.json"
    stamp("-DGGML_NATIVE=ON", frozenset({"avx2", "avx512f", "avx512_vnni"}), path)
    reason = problem(path, frozenset({"avx2", "fma"}))
    assert reason is not None and "avx512_vnni" in reason and "avx512f" in reason and "make install" in reason
    assert problem(path, frozenset({"avx2", "avx512f", "avx512_vnni", "fma"})) is None


def test_portable_missing_or_damaged_stamps(tmp_path: Path) -> None:
    portable = tmp_path / "portable.json"
    stamp("-DGGML_NATIVE=OFF", frozenset({"avx512f"}), portable)
    assert problem(portable, frozenset({"sse2"})) is None  # a portable build runs anywhere
    assert problem(tmp_path / "absent.json", frozenset({"sse2"})) is None  # an older build: loaded as before
    damaged = tmp_path / "damaged.json"
    damaged.write_text("{not json")
    reason = problem(damaged, frozenset({"sse2"}))
    assert reason is not None and "unreadable" in reason and str(damaged) in reason


def test_check_asks_for_a_rebuild_without_a_stamp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llama_build, "stamp_path", lambda prefix=None: tmp_path / "stamp.json")
    assert main(["check"]) == 1  # make install then compiles for this CPU
    stamp("-DGGML_NATIVE=ON", None, tmp_path / "stamp.json")  # this CPU's own flags
    assert main(["check"]) == 0
    assert main(["bogus"]) == 2


def test_the_model_is_not_loaded_on_a_cpu_the_build_does_not_fit(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from tools.llamacpp_chat import LlamaOptions, LoadedLlama

    path = tmp_path / "stamp.json"
    path.write_text(json.dumps({"native": True, "requires": ["avx9000"]}))
    monkeypatch.setattr(llama_build, "stamp_path", lambda prefix=None: path)
    llama_build.checked.cache_clear()
    try:
        # the weights path does not exist: the refusal must come before anything is loaded
        with pytest.raises(RuntimeError, match="avx9000"):
            LoadedLlama(str(tmp_path / "absent.gguf"), LlamaOptions())
    finally:
        llama_build.checked.cache_clear()


def test_this_environment_fits_this_cpu() -> None:
    # the environment the tests run in was installed by `make install`, which stamps and checks it
    if not llama_build.stamp_path().exists():
        pytest.skip("llama-cpp-python was installed outside `make install` (no build stamp to check)")
    assert problem() is None
