"""Saved KV states of static prompt prefixes, so a llama.cpp call pays only for its new tokens.

Every component prompt starts with a long static part (instructions, schema, examples; the text
above the `---` line of `prompts/*.txt`). llama.cpp already reuses the longest common prefix of the
*previous* call in the same context, but tramita's components alternate on one shared context
(planner, text_to_sql, synthesis, ...), so each call would re-read its own static part. This cache
keeps, per distinct static prefix, the evaluated KV cells of sequence 0 (`llama_state_seq_get_data`:
only the cells, no logits, ~28 KiB per token for the 1.5B model) and loads them back before the
call, so llama.cpp evaluates only what follows.

Why not llama-cpp-python's `LlamaRAMCache` / `LlamaDiskCache`: their `save_state` copies the whole
context state plus the n_batch x n_vocab score matrix (about 300 MiB for Qwen2.5's 152k vocabulary)
for every entry, and they save after the call, keyed by prompt + completion. `tramita bench llama`
measures both.

Correctness: a restored prefix is exactly the KV of those tokens (causal attention: cells before
position k depend only on tokens before k), so a partial match is used by truncating the restored
cells. Entries are keyed by a hash of the exact prefix tokens and of the model identity (file path,
size, mtime, KV layout, llama.cpp version and compiled CPU features), so a changed prompt file,
schema, model or build is simply a miss. Any failure to restore falls back to evaluating the tokens: a miss is never wrong, only slower.

Memory is bounded (`max_mib`, least recently used entries go first). An optional disk tier
(`disk_dir`, bounded by `disk_mib`) keeps exact prefixes across processes, which helps one-shot
commands such as `tramita ask`.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("tramita.llm")

_MAGIC = b"TRPFX1\n"


@dataclass
class CallTokens:
    """How one call's prompt tokens were paid for."""

    prompt: int = 0  # tokens in the prompt
    reused: int = 0  # prompt tokens whose KV was already there (live context or a saved state)
    restored: int = 0  # of `reused`, those loaded from a saved state
    evaluated: int = 0  # prompt tokens llama.cpp evaluates for this call
    source: str = "none"  # "live" (previous call), "ram", "disk", or "none"
    saved: bool = False  # this call stored its static prefix
    restore_s: float = 0.0  # time spent loading or saving states


@dataclass
class _Entry:
    key: str
    tokens: np.ndarray  # int32 prefix tokens
    state: Any  # ctypes uint8 array from llama_state_seq_get_data
    nbytes: int
    hits: int = 0


@dataclass
class CacheStats:
    """Counters over the cache's life (the bench and `describe()` report them)."""

    lookups: int = 0
    ram_hits: int = 0
    partial_hits: int = 0
    disk_hits: int = 0
    live_hits: int = 0
    misses: int = 0
    saves: int = 0
    evictions: int = 0
    restore_failures: int = 0
    tokens_reused: int = 0
    tokens_evaluated: int = 0
    extra: dict[str, float] = field(default_factory=dict)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two token arrays."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def model_identity(model_path: str, **layout: Any) -> str:
    """What a saved state depends on besides its tokens: the weights file and the KV layout."""
    try:
        st = os.stat(model_path)
        stamp = f"{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        stamp = "?"
    try:
        import llama_cpp

        # the build's CPU features too: another build's SIMD paths round differently
        lib_version = f"{llama_cpp.__version__}:{llama_cpp.llama_print_system_info().decode(errors='replace').strip()}"
    except ImportError:  # pragma: no cover - the cache is only built next to a llama.cpp model
        lib_version = "?"
    parts = [os.path.abspath(model_path), stamp, str(lib_version), *(f"{k}={layout[k]}" for k in sorted(layout))]
    return "|".join(parts)


class PrefixCache:
    """Per-prefix KV states for ONE `llama_cpp.Llama` (callers hold that model's lock)."""

    def __init__(self, identity: str, *, max_mib: float = 256, disk_dir: str | Path | None = None,
                 disk_mib: float = 1024) -> None:
        """`identity` from `model_identity`; `max_mib` 0 disables the RAM tier (and so saving)."""
        self.identity = identity
        self.max_bytes = int(max_mib * 1024 * 1024)
        self.disk_dir = Path(disk_dir).expanduser() if disk_dir else None
        self.disk_bytes = int(disk_mib * 1024 * 1024)
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0
        self.stats = CacheStats()

    @property
    def enabled(self) -> bool:
        """Whether states are kept at all (a 0 MiB budget turns the cache off)."""
        return self.max_bytes > 0

    @property
    def bytes_used(self) -> int:
        """Bytes of saved states held in RAM."""
        return self._bytes

    def __len__(self) -> int:
        """Number of saved prefixes in RAM."""
        return len(self._entries)

    def key(self, tokens: np.ndarray) -> str:
        """The cache key of a prefix: sha256 over the model identity and the exact token ids."""
        h = hashlib.sha256(self.identity.encode("utf-8"))
        h.update(np.ascontiguousarray(tokens, dtype=np.int32).tobytes())
        return h.hexdigest()

    def clear(self) -> None:
        """Drop every RAM entry (the disk tier stays)."""
        self._entries.clear()
        self._bytes = 0

    # ------------------------------------------------------------------ the one entry point
    def prepare(self, llama: Any, tokens: Sequence[int], boundary: int) -> CallTokens:
        """Make `llama`'s context hold the longest known prefix of `tokens` before a completion.

        `boundary`: how many leading tokens are the static prefix worth saving (0: none). On return
        `llama.n_tokens` / `llama.input_ids` describe the cells in the KV cache, so llama-cpp-python's
        own prefix match in `generate` evaluates only the rest. Returns the call's token accounting.
        """
        toks = np.asarray(tokens, dtype=np.int32)
        n = len(toks)
        out = CallTokens(prompt=n)
        if n == 0:
            return out
        self.stats.lookups += 1
        live = common_prefix(np.asarray(llama.input_ids[: llama.n_tokens], dtype=np.int32), toks)
        source = "live" if live > 0 else "none"
        boundary = max(0, min(boundary, n - 1))  # generate() must evaluate at least one token
        started = time.perf_counter()
        if self.enabled and boundary > 0:
            entry, k, where = self._best(toks, boundary)
            k = min(k, n - 1)
            if entry is not None and k > live:
                if self._restore(llama, entry, k):
                    live, source, out.restored = k, where, k
                    if where == "disk":
                        self.stats.disk_hits += 1
                    elif k < len(entry.tokens) or k < boundary:
                        self.stats.partial_hits += 1
                    else:
                        self.stats.ram_hits += 1
                else:
                    live, source = 0, "none"
            elif source == "live":
                self.stats.live_hits += 1
            if source == "none":
                self.stats.misses += 1
        out.reused = min(live, n - 1)
        out.evaluated = n - out.reused
        out.source = source
        if self.enabled and 0 < boundary and live <= boundary and self.key(toks[:boundary]) not in self._entries:
            out.saved = self._save(llama, toks, boundary, live)
        out.restore_s = time.perf_counter() - started
        self.stats.tokens_reused += out.reused
        self.stats.tokens_evaluated += out.evaluated
        return out

    # ------------------------------------------------------------------ internals
    def _best(self, toks: np.ndarray, boundary: int) -> tuple[_Entry | None, int, str]:
        """The entry sharing the longest prefix with `toks`: exact key first, then a scan, then disk."""
        exact = self._entries.get(self.key(toks[:boundary]))
        if exact is not None:
            self._entries.move_to_end(exact.key)
            return exact, boundary, "ram"
        best: _Entry | None = None
        best_k = 0
        for entry in self._entries.values():
            k = common_prefix(entry.tokens, toks)
            if k > best_k:
                best, best_k = entry, k
        if best is not None:
            self._entries.move_to_end(best.key)
        disk = self._disk_load(toks[:boundary]) if self.disk_dir is not None else None
        if disk is not None and boundary > best_k:
            self._insert(disk)
            return disk, boundary, "disk"
        return best, best_k, "ram"

    def _restore(self, llama: Any, entry: _Entry, k: int) -> bool:
        """Load `entry` into sequence 0 and keep its first `k` cells."""
        import llama_cpp

        ctx = llama._ctx
        ctx.kv_cache_seq_rm(0, 0, -1)
        llama.n_tokens = 0
        done = llama_cpp.llama_state_seq_set_data(ctx.ctx, entry.state, entry.nbytes, 0)
        if not done:
            log.warning("prefix cache: a saved state (%d tokens) did not load; evaluating instead", len(entry.tokens))
            self.stats.restore_failures += 1
            ctx.kv_cache_seq_rm(0, 0, -1)
            self._drop(entry.key)
            return False
        if k < len(entry.tokens):
            ctx.kv_cache_seq_rm(0, k, -1)
        llama.input_ids[:k] = entry.tokens[:k]
        llama.n_tokens = k
        llama._requires_eval = True  # the logits are not those of the last restored token
        entry.hits += 1
        return True

    def _save(self, llama: Any, toks: np.ndarray, boundary: int, live: int) -> bool:
        """Evaluate the static prefix (what the call would evaluate anyway) and keep its cells."""
        import llama_cpp

        ctx = llama._ctx
        llama.n_tokens = live
        if live < boundary:
            llama.eval(toks[live:boundary].tolist())  # removes cells from `live` on, then decodes
        else:
            ctx.kv_cache_seq_rm(0, boundary, -1)
        size = int(llama_cpp.llama_state_seq_get_size(ctx.ctx, 0))
        if size <= 0 or size > self.max_bytes:
            return False
        buf = (ctypes.c_uint8 * size)()
        got = int(llama_cpp.llama_state_seq_get_data(ctx.ctx, buf, size, 0))
        if got <= 0:
            return False
        entry = _Entry(key=self.key(toks[:boundary]), tokens=toks[:boundary].copy(), state=buf, nbytes=got)
        self._insert(entry)
        self.stats.saves += 1
        if self.disk_dir is not None:
            self._disk_store(entry)
        return True

    def _insert(self, entry: _Entry) -> None:
        self._drop(entry.key)
        self._entries[entry.key] = entry
        self._bytes += entry.nbytes
        while self._bytes > self.max_bytes and len(self._entries) > 1:
            oldest = next(iter(self._entries))
            self._drop(oldest)
            self.stats.evictions += 1

    def _drop(self, key: str) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.nbytes

    # ------------------------------------------------------------------ disk tier
    def _disk_path(self, key: str) -> Path:
        assert self.disk_dir is not None
        return self.disk_dir / f"{key}.kv"

    def _disk_store(self, entry: _Entry) -> None:
        path = self._disk_path(entry.key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            with tmp.open("wb") as f:
                f.write(_MAGIC)
                f.write(np.int64(len(entry.tokens)).tobytes())
                f.write(entry.tokens.astype(np.int32).tobytes())
                f.write(memoryview(entry.state)[: entry.nbytes])
            os.replace(tmp, path)
            self._disk_trim()
        except OSError as exc:
            log.info("prefix cache: could not write %s (%s)", path, exc)

    def _disk_load(self, prefix: np.ndarray) -> _Entry | None:
        key = self.key(prefix)
        path = self._disk_path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        try:
            if not data.startswith(_MAGIC):
                raise ValueError("bad magic")
            off = len(_MAGIC)
            n = int(np.frombuffer(data, dtype=np.int64, count=1, offset=off)[0])
            off += 8
            stored = np.frombuffer(data, dtype=np.int32, count=n, offset=off).copy()
            off += 4 * n
            if not np.array_equal(stored, prefix):
                raise ValueError("tokens differ from the key")
            nbytes = len(data) - off
            buf = (ctypes.c_uint8 * nbytes).from_buffer_copy(data, off)
        except (ValueError, IndexError) as exc:
            log.info("prefix cache: ignoring %s (%s)", path, exc)
            path.unlink(missing_ok=True)
            return None
        os.utime(path)  # least recently used goes first when the folder is trimmed
        return _Entry(key=key, tokens=stored, state=buf, nbytes=nbytes)

    def _disk_trim(self) -> None:
        assert self.disk_dir is not None
        files = sorted(self.disk_dir.glob("*.kv"), key=lambda p: p.stat().st_mtime)
        total = sum(p.stat().st_size for p in files)
        while files and total > self.disk_bytes:
            victim = files.pop(0)
            total -= victim.stat().st_size
            victim.unlink(missing_ok=True)

    def describe(self) -> dict[str, Any]:
        """Counters and sizes, for traces and the bench."""
        s = self.stats
        return {"entries": len(self._entries), "mib": round(self._bytes / 2**20, 1),
                "max_mib": round(self.max_bytes / 2**20, 1), "lookups": s.lookups, "ram_hits": s.ram_hits,
                "partial_hits": s.partial_hits, "disk_hits": s.disk_hits, "live_hits": s.live_hits,
                "misses": s.misses, "saves": s.saves, "evictions": s.evictions,
                "restore_failures": s.restore_failures, "tokens_reused": s.tokens_reused,
                "tokens_evaluated": s.tokens_evaluated}
