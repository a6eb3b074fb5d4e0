"""Two or more llama.cpp builds on this machine, interleaved: prompt and generation speed.

Why interleaved: on a shared 2-core machine the same build measures 45 or 72 prompt tokens/s an
hour apart, so builds measured one after the other compare the hours, not the builds. Each round
runs every build once, in its own process (a build is a llama-cpp-python install, chosen by
PYTHONPATH), with `tramita.lab.llama_bench.speed_probe` on the profile's context options; the
table gives each build's median over the rounds.

    .venv/bin/python benchmarks/llama_builds.py --build portable=/tmp/llama-portable/site --build native=
        [--rounds 3] [--sizes 256,1024,2048] [--flash-attn on,off] [--profile local]

`NAME=` (empty path) is the environment's own install. Install another build with
`pip install --no-deps --target DIR llama_cpp_python-….whl`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

_CHILD = """
import json, sys
from tramita.lab.llama_bench import speed_probe
spec = json.loads(sys.argv[1])
import llama_cpp
out = speed_probe(spec)
out["system_info"] = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
print("RESULT " + json.dumps(out))
"""


def main(argv: list[str] | None = None) -> int:
    """Print a markdown table of median tokens/s per build, flash-attention setting and prompt size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="append", required=True, help="NAME=SITE_DIR (empty: this environment)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="256,1024,2048")
    parser.add_argument("--flash-attn", default="on,off")
    parser.add_argument("--profile", default="local")
    parser.add_argument("--json", type=Path, help="also write every run here")
    args = parser.parse_args(argv)

    from tramita.lab.llama_bench import profile_options

    model_path, base = profile_options(args.profile)
    sizes = [int(s) for s in args.sizes.split(",")]
    builds = [tuple(b.split("=", 1)) for b in args.build]
    runs: list[dict[str, object]] = []
    for _ in range(args.rounds):
        for fa in args.flash_attn.split(","):
            for name, site in builds:
                opts = {**base, "flash_attn": fa == "on"}
                env = dict(os.environ)
                if site:
                    env["PYTHONPATH"] = os.pathsep.join([site, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
                spec = {"model_path": model_path, "opts": opts, "sizes": sizes, "reps": 2, "gen": 32}  # best of 2: the first eval warms up
                proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(spec)], env=env, capture_output=True,
                                      text=True, check=False)
                line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
                if line is None:
                    print(f"{name} fa={fa}: failed: {proc.stderr.strip()[-300:]}", file=sys.stderr)
                    continue
                out = json.loads(line.removeprefix("RESULT "))
                runs.append({"build": name, "fa": fa, "pp": out["pp"], "tg": out["tg"],
                             "system_info": out["system_info"]})
    print(f"{args.rounds} rounds, builds interleaved; median tokens/s\n")
    print("| build | flash attention | " + " | ".join(f"prompt {n}" for n in sizes) + " | generation |")
    print("|---|---|" + "---|" * (len(sizes) + 1))
    for name, _ in builds:
        for fa in args.flash_attn.split(","):
            mine = [r for r in runs if r["build"] == name and r["fa"] == fa]
            if not mine:
                continue
            pp = [statistics.median(float(r["pp"][str(n)]["tokens_per_s"]) for r in mine) for n in sizes]  # type: ignore[index]
            tg = statistics.median(float(r["tg"]["tokens_per_s"]) for r in mine)  # type: ignore[index]
            print(f"| {name} | {fa} | " + " | ".join(f"{v:.1f}" for v in pp) + f" | {tg:.1f} |")
    for name, _ in builds:
        info = next((r["system_info"] for r in runs if r["build"] == name), "?")
        print(f"\n{name}: {info}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
