"""Which CPU the installed llama.cpp was compiled for, and whether it runs on this one.

Why: a llama.cpp build for the machine's own CPU (`GGML_NATIVE=ON`) reads prompts markedly faster
than a portable one where the CPU has instructions the portable build leaves out (AVX-512, VNNI;
`tramita bench --sections llama` measures both). But a native build run on a CPU that lacks one of
those instructions dies with SIGILL inside the library, with no Python error at all. So the install
records the instruction-set flags of the CPU it compiled on (`stamp`), and the model is loaded only
after `problem()` found every one of them on this CPU; otherwise the user reads what is missing and
how to rebuild. `make install` runs `check` and rebuilds llama-cpp-python when it fails, so a
virtual environment moved to another machine is compiled again for it.

The stamp is a JSON file in the virtual environment (`sys.prefix`), written next to the package it
describes. No stamp means a build from before the stamp existed, or from outside the Makefile: it
is loaded as before (the old default build was portable), and `check` asks for a rebuild so that
the next `make install` compiles for this CPU.

Nothing here imports llama_cpp: loading its library is what a mismatch would crash.
"""

from __future__ import annotations

import json
import os
import re
import sys
from functools import lru_cache
from pathlib import Path

STAMP_NAME = "tramita-llama-build.json"
# instruction-set extensions a compiler may use under -march=native (names as /proc/cpuinfo spells them)
_ISA = re.compile(r"^(avx\w*|amx\w*|fma\w*|f16c|bmi\d|sse\w*|ssse3|pclmulqdq|vpclmulqdq|vaes|gfni|sha_ni|movbe|"
                  r"popcnt|lzcnt|abm|adx|aes)$")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """This CPU's flags (empty where /proc/cpuinfo is not readable, as on macOS)."""
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("flags"):
                return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def isa_flags(flags: frozenset[str] | set[str]) -> frozenset[str]:
    """The instruction-set extensions among `flags` (what a native build may depend on)."""
    return frozenset(f for f in flags if _ISA.match(f))


def stamp_path(prefix: str | None = None) -> Path:
    """Where the stamp of the environment at `prefix` (default: this interpreter's) lives."""
    return Path(prefix or sys.prefix) / STAMP_NAME


def native(cmake_args: str) -> bool:
    """Whether CMake arguments ask for a build for the compiling CPU (llama.cpp's default is native)."""
    found = re.findall(r"-DGGML_NATIVE=(\w+)", cmake_args)
    return not found or found[-1].upper() in {"ON", "1", "TRUE", "YES"}


def stamp(cmake_args: str, flags: frozenset[str] | None = None, path: Path | None = None) -> dict[str, object]:
    """Record the build just installed: native or portable, and the instruction sets it may use."""
    is_native = native(cmake_args)
    record: dict[str, object] = {"cmake_args": cmake_args, "native": is_native,
                                 "requires": sorted(isa_flags(cpu_flags() if flags is None else flags))
                                 if is_native else []}
    target = path or stamp_path()
    target.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return record


def problem(path: Path | None = None, flags: frozenset[str] | None = None) -> str | None:
    """Why the installed build cannot run on this CPU, or None when it can (or cannot be told).

    A stamp that cannot be read is reported: it is the only guard between the user and a crash.
    """
    target = path or stamp_path()
    if not target.exists():
        return None
    try:
        record = json.loads(target.read_text(encoding="utf-8"))
        requires = {str(f) for f in record.get("requires", [])}
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        return f"{target}: unreadable llama.cpp build stamp ({exc}); rebuild with `make install`"
    here = cpu_flags() if flags is None else flags
    if not here:  # no /proc/cpuinfo: nothing to compare with
        return None
    missing = sorted(requires - here)
    if not missing:
        return None
    return (f"the installed llama.cpp was compiled for a CPU with {', '.join(missing)}, which this CPU lacks "
            f"(running it would crash); rebuild it for this machine with `make install`")


@lru_cache(maxsize=1)
def checked() -> None:
    """Raise RuntimeError when the installed build cannot run here (once per process)."""
    reason = problem()
    if reason:
        raise RuntimeError(reason)


def main(argv: list[str] | None = None) -> int:
    """`stamp` after an install; `check`: 0 when the build fits this CPU and is stamped, else 1."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["stamp"]:
        record = stamp(os.environ.get("CMAKE_ARGS", ""))
        print(f"llama.cpp build: {'native' if record['native'] else 'portable'} ({stamp_path()})")
        return 0
    if args[:1] == ["check"]:
        if not stamp_path().exists():
            print("llama.cpp build: no stamp (built before stamps or outside make install); rebuilding for this CPU")
            return 1
        reason = problem()
        if reason:
            print(f"llama.cpp build: {reason}")
            return 1
        return 0
    print("usage: python -m tools.llama_build stamp|check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
