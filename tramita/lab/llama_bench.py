"""`tramita bench --sections llama`: how fast the local model can be on this machine, and how fast it is in tramita.

Three measurements, each in its own child process (a fresh context, its own memory, no interference):

1. **library speed** (`speed_probe`): llama.cpp's own prompt-evaluation and generation speed for the
   shipped GGUF, read from llama.cpp's performance counters (`llama_perf_context`), the way
   llama-bench measures pp<N> / tg<N>: prompt sizes 256, 1024 and 2048 evaluated in `n_batch` chunks,
   then 64 single-token decodes at a 256-token context. One context per configuration: threads
   (1, 2), `n_batch` (64, 256, 512), flash attention off/on, mmap / mlock / no mmap. `grid="factors"`
   varies one factor at a time from the profile's settings; `grid="full"` crosses threads x batch x
   flash attention. The build's CPU features are compared with the CPU's.
2. **tramita's effective speed** (`tramita_probe`): real `structured_call` (planner) and `text_call`
   (synthesis) calls through the provider factory, alternating as in a question turn; effective
   prompt tokens/s = tokens evaluated / time to first token, generation tokens/s after it.
3. **prefix caching strategies** on that same alternating sequence: none (llama.cpp's reuse of the
   previous call only), tramita's per-prefix KV cache (`tools.prefix_cache`), and llama-cpp-python's
   `LlamaRAMCache` / `LlamaDiskCache`.

The section then says whether tramita runs slower than the library can, and which settings were
fastest here (the backend spec in policies/llm_profiles.yaml carries them).
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tools.llama_build import cpu_flags
from tramita.base.paths import SAMPLE_DIR
from tramita.base.settings import Settings

PROMPT_SIZES = (256, 1024, 2048)
GEN_TOKENS = 64
GEN_CONTEXT = 256
CPU_FEATURES = {  # /proc/cpuinfo flag -> llama_print_system_info name
    "avx": "AVX", "avx2": "AVX2", "fma": "FMA", "f16c": "F16C", "avx512f": "AVX512", "avx512_vnni": "AVX512_VNNI",
    "avx512_bf16": "AVX512_BF16", "avx_vnni": "AVX_VNNI", "amx_int8": "AMX_INT8",
}
QUESTIONS = ["Quantas despesas estão pendentes de aprovação neste momento?",
             "Who is the secondary on call for auth-service next week?",
             "Qual o limite de reembolso por pedido para refeições?"]
CONTEXT = ("[doc-pol-expense] Refeições: o limite de reembolso é de 80 dólares por pedido; acima disso a despesa "
           "precisa de justificativa e aprovação do gestor.\n[SQL] rows: [{\"n\": 44}]\n"
           "[graph] rows: [{\"primary\": \"Rafael Lima\", \"secondary\": \"Bianca Souza\", \"week\": \"2026-W21\"}]")


def _rss_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _label(opts: dict[str, Any]) -> str:
    mem = "mlock" if opts.get("use_mlock") else ("mmap" if opts.get("use_mmap", True) else "no-mmap")
    return (f"t{opts['n_threads']} b{opts['n_batch']} ub{opts['n_ubatch']} fa={'on' if opts['flash_attn'] else 'off'} "
            f"{mem}")


def profile_options(backend: str) -> tuple[str, dict[str, Any]]:
    """(GGUF path, context options) of a llama.cpp backend of policies/llm_profiles.yaml."""
    from tools.llm import profiles
    from tools.model_assets import gguf_path

    spec = profiles().backends[backend]
    if spec.provider != "llamacpp":
        raise ValueError(f"backend {backend!r} is {spec.provider}, not a local llama.cpp model")
    opts = {"n_ctx": max(spec.n_ctx, max(PROMPT_SIZES) + GEN_TOKENS + 64), "n_threads": spec.n_threads,
            "n_threads_batch": spec.n_threads_batch, "n_batch": spec.n_batch, "n_ubatch": spec.n_ubatch,
            "flash_attn": spec.flash_attn, "use_mmap": spec.use_mmap, "use_mlock": spec.use_mlock}
    return str(gguf_path(spec.model)), opts


def configurations(base: dict[str, Any], grid: str, quick: bool) -> list[dict[str, Any]]:
    """The contexts to measure: the profile's own first, then the variations."""

    def variant(**kw: Any) -> dict[str, Any]:
        v = {**base, **kw}
        v["n_ubatch"] = min(v["n_ubatch"], v["n_batch"])
        v["n_threads_batch"] = v["n_threads"] if "n_threads" in kw else v.get("n_threads_batch")
        return v

    out = [dict(base)]
    if quick:
        out += [variant(flash_attn=not base["flash_attn"]), variant(n_threads=1)]
    elif grid == "full":
        for threads, batch, fa in itertools.product((1, 2), (64, 256, 512), (False, True)):
            out.append(variant(n_threads=threads, n_batch=batch, n_ubatch=batch, flash_attn=fa))
        out += [variant(use_mmap=False), variant(use_mlock=True)]
    else:
        out += [variant(n_threads=t) for t in (1, 2)]
        out += [variant(n_batch=b, n_ubatch=b) for b in (64, 256, 512)]
        out += [variant(flash_attn=fa) for fa in (False, True)]
        out += [variant(use_mmap=False), variant(use_mlock=True)]
    seen: set[str] = set()
    unique = []
    for o in out:
        key = json.dumps(o, sort_keys=True)
        if key not in seen:
            seen.add(key)
            unique.append(o)
    return unique


def build_features() -> dict[str, Any]:
    """llama.cpp's compiled CPU features next to the CPU's, and what the build leaves unused."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    flags = cpu_flags()
    cpu = sorted(name for flag, name in CPU_FEATURES.items() if flag in flags)
    built = sorted(name for name in CPU_FEATURES.values() if f"{name} = 1" in info)
    return {"system_info": info.strip(), "cpu": cpu, "build": built, "unused_by_build": sorted(set(cpu) - set(built)),
            "llama_cpp_python": getattr(llama_cpp, "__version__", "?")}


# ----------------------------------------------------------------------------- child: library speed
def _sample_tokens(llama: Any, n: int) -> list[int]:
    text = "\n\n".join(p.read_text(encoding="utf-8") for p in sorted((SAMPLE_DIR / "docs").glob("*.md")))
    toks: list[int] = llama.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    while len(toks) < n:
        toks = toks + toks
    return toks[:n]


def speed_probe(spec: dict[str, Any]) -> dict[str, Any]:
    """One context: pp<N> for each prompt size (best of `reps`) and tg<GEN_TOKENS>, from llama.cpp's counters."""
    import llama_cpp

    from tools.llamacpp_chat import LlamaOptions, LoadedLlama

    opts = spec["opts"]
    started = time.perf_counter()
    loaded = LoadedLlama(spec["model_path"], LlamaOptions(**opts))
    out: dict[str, Any] = {"config": _label(opts), "opts": opts, "load_s": round(time.perf_counter() - started, 2),
                           "rss_after_load_mib": _rss_mib(), "pp": {}, "tg": {}}
    llama = loaded.llama
    ctx = llama._ctx.ctx
    reps = int(spec.get("reps", 2))
    gen = int(spec.get("gen", GEN_TOKENS))
    toks = _sample_tokens(llama, max(spec["sizes"]) + gen + GEN_CONTEXT + 8)

    def fresh() -> None:
        llama.reset()
        llama._ctx.kv_cache_seq_rm(-1, 0, -1)
        llama_cpp.llama_perf_context_reset(ctx)

    for n in spec["sizes"]:
        runs = []
        for r in range(reps):
            fresh()
            t0 = time.perf_counter()
            llama.eval(toks[r: r + n])
            llama_cpp.llama_synchronize(ctx)  # llama.cpp books its timings when the context synchronises
            wall = time.perf_counter() - t0
            perf = llama_cpp.llama_perf_context(ctx)
            tps = perf.n_p_eval / (perf.t_p_eval_ms / 1000) if perf.t_p_eval_ms else None
            runs.append({"tokens_per_s": tps, "wall_tokens_per_s": n / wall if wall else None, "seconds": wall})
        best = max(runs, key=lambda x: x["tokens_per_s"] or 0)
        out["pp"][str(n)] = {k: round(v, 2) if isinstance(v, float) else v for k, v in best.items()}
    runs = []
    for _ in range(reps):
        fresh()
        llama.eval(toks[:GEN_CONTEXT])
        llama_cpp.llama_synchronize(ctx)
        llama_cpp.llama_perf_context_reset(ctx)
        t0 = time.perf_counter()
        for i in range(gen):
            llama.eval([toks[GEN_CONTEXT + i]])
            llama_cpp.llama_synchronize(ctx)
        wall = time.perf_counter() - t0
        perf = llama_cpp.llama_perf_context(ctx)
        runs.append({"tokens_per_s": perf.n_eval / (perf.t_eval_ms / 1000) if perf.t_eval_ms else None,
                     "wall_tokens_per_s": gen / wall if wall else None})
    best = max(runs, key=lambda x: x["tokens_per_s"] or 0)
    out["tg"] = {"tokens": gen, "context": GEN_CONTEXT,
                 **{k: round(v, 2) if isinstance(v, float) else v for k, v in best.items()}}
    out["peak_rss_mib"] = _rss_mib()
    if spec.get("features"):
        out["features"] = build_features()
    return out


# ----------------------------------------------------------------------------- child: tramita
def _call_record(kind: str, usage: Any) -> dict[str, Any]:
    m = usage.last_call
    ttft = m.get("first_token_s")
    evaluated = m.get("prompt_eval_tokens")
    seconds = float(m.get("seconds") or usage.seconds)
    gen = usage.completion_tokens
    return {"call": kind, "seconds": round(usage.seconds, 3), "prompt_tokens": usage.prompt_tokens,
            "cached_tokens": usage.cached_tokens, "evaluated_tokens": evaluated, "prefix_tokens": m.get("prefix_tokens"),
            "completion_tokens": gen, "first_token_s": round(ttft, 3) if ttft is not None else None,
            "prefix_cache": m.get("prefix_cache"), "prefix_cache_s": m.get("prefix_cache_s"),
            "effective_prompt_tokens_per_s": round(evaluated / ttft, 1) if ttft and evaluated else None,
            "effective_generation_tokens_per_s": (round((gen - 1) / (seconds - ttft), 1)
                                                  if ttft is not None and gen > 1 and seconds > ttft else None)}


def tramita_probe(spec: dict[str, Any]) -> dict[str, Any]:
    """Alternating planner / synthesis calls through tools.llm, once per prefix-caching strategy."""
    from llama_cpp.llama_cache import LlamaDiskCache, LlamaRAMCache

    import tools.llm as llm
    from nodes.plan import plan_model, sources_text
    from tools.backends import BACKENDS

    backend = spec["backend"]
    keys = ", ".join(f'"use_{n}": bool' for n in BACKENDS)
    rounds = int(spec.get("rounds", 3))
    sequence = [(kind, q) for q in QUESTIONS[:rounds] for kind in ("planner", "synthesis")]

    def call(kind: str, question: str) -> dict[str, Any]:
        usage = llm.Usage()
        error = None
        try:
            if kind == "planner":
                llm.structured_call("planner", plan_model(), "plan", backend=backend, usage=usage, question=question,
                                    sources=sources_text(), keys=keys)
            else:
                llm.text_call("synthesis", "synthesize", backend=backend, usage=usage, language="Portuguese (Brazil)",
                              context=CONTEXT, question=question)
        except llm.LLMError as exc:  # timing still counts; the reply's quality is not this probe's business
            error = str(exc)[:200]
        return _call_record(kind, usage) | ({"error": error} if error else {})

    out: dict[str, Any] = {"backend": backend, "sequence": [k for k, _ in sequence], "strategies": {}}
    for strategy in spec["strategies"]:
        os.environ["TRAMITA_PREFIX_CACHE_MIB"] = str(spec["cache_mib"] if strategy == "prefix_cache" else 0)
        llm._build.cache_clear()  # the factory reads the setting again
        model = llm.chat_model("planner", backend)
        if not hasattr(model, "loaded"):
            return {"skipped": f"backend {backend!r} is not a local llama.cpp model"}
        if spec.get("max_tokens"):  # --quick: a short synthesis (the planner's JSON needs its own limit)
            llm.chat_model("synthesis", backend).max_tokens = int(spec["max_tokens"])  # type: ignore[attr-defined]
        loaded = model.loaded()
        llama = loaded.llama
        llama.set_cache(None)
        loaded.cache.clear()
        if strategy == "llama_ram_cache":
            llama.set_cache(LlamaRAMCache(capacity_bytes=int(spec.get("library_cache_mib", 2048)) << 20))
        elif strategy == "llama_disk_cache":
            llama.set_cache(LlamaDiskCache(cache_dir=str(Path(spec["workdir"]) / "llama-disk-cache"),
                                           capacity_bytes=int(spec.get("library_cache_mib", 2048)) << 20))
        llama.reset()  # every strategy starts cold
        started = time.perf_counter()
        calls = [call(kind, q) for kind, q in sequence]
        wall = time.perf_counter() - started
        lib_cache = getattr(llama, "cache", None)
        out["strategies"][strategy] = {
            "calls": calls, "wall_s": round(wall, 2),
            "prompt_tokens": sum(c["prompt_tokens"] for c in calls),
            "evaluated_tokens": sum(c["evaluated_tokens"] or 0 for c in calls),
            "first_token_s_p50": round(statistics.median(c["first_token_s"] or 0 for c in calls), 3),
            "prefix_cache": loaded.cache.describe() if strategy == "prefix_cache" else None,
            "library_cache_mib": round(lib_cache.cache_size / 2**20, 1) if lib_cache is not None else None,
            "rss_mib": _rss_mib()}
        llama.set_cache(None)
        print(f"[llama] {strategy}: {wall:.1f} s", file=sys.stderr, flush=True)
    out["peak_rss_mib"] = _rss_mib()
    return out


# ----------------------------------------------------------------------------- parent
def _child(kind: str, spec: dict[str, Any], env: dict[str, str], timeout: float) -> dict[str, Any]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tramita.lab.llama_bench", kind, json.dumps(spec)],
                          stdout=subprocess.PIPE, text=True, timeout=timeout, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": f"{kind} exited {proc.returncode} after {time.perf_counter() - started:.0f} s "
                         "(its error is printed above)"}
    result: dict[str, Any] = json.loads(lines[-1])
    result["subprocess_wall_s"] = round(time.perf_counter() - started, 1)
    return result


def _nearest_pp(speed: dict[str, Any], tokens: int) -> float | None:
    pp = speed.get("pp") or {}
    if not pp:
        return None
    size = min(pp, key=lambda s: abs(int(s) - tokens))
    return pp[size].get("tokens_per_s")


def bench_llama(settings: Settings, workdir: Path, *, quick: bool, backend: str, grid: str = "factors",
                progress: bool = True) -> dict[str, Any]:
    """The llama section: library speed per configuration, tramita's effective speed, caching strategies."""
    from tools.llm import prefix_cache_settings, profiles
    from tramita.lab.procenv import child_env

    model_path, base = profile_options(backend)
    # an empty prefix folder, so no strategy starts from an earlier run's saved prefixes
    env = child_env(settings.with_profile(backend), {"TRAMITA_PREFIX_CACHE_DIR": str(workdir / "prefix-cold")})
    sizes = [PROMPT_SIZES[0]] if quick else list(PROMPT_SIZES)
    configs = configurations(base, grid, quick)
    speeds = []
    for i, opts in enumerate(configs):
        if progress:
            print(f"[llama] {i + 1}/{len(configs)} {_label(opts)}", file=sys.stderr, flush=True)
        speeds.append(_child("--speed-probe", {"model_path": model_path, "opts": opts, "sizes": sizes,
                                               "reps": 1 if quick else 2, "features": i == 0}, env, 1800))
    ok = [s for s in speeds if "error" not in s]
    profile_speed = speeds[0]
    strategies = ["none", "prefix_cache"] if quick else ["none", "prefix_cache", "llama_ram_cache", "llama_disk_cache"]
    cache_mib, _ = prefix_cache_settings(profiles().backends[backend])
    tramita = _child("--tramita-probe", {"backend": backend, "rounds": 1 if quick else 3, "strategies": strategies,
                                         "cache_mib": cache_mib or 256, "workdir": str(workdir),
                                         "max_tokens": 24 if quick else None}, env, 3600)
    out: dict[str, Any] = {"model_file": Path(model_path).name, "grid": "quick" if quick else grid,
                           "profile_config": _label(base), "speed": speeds, "tramita": tramita}
    if "features" in profile_speed:
        out["build"] = profile_speed.pop("features")
    out["findings"] = _findings(profile_speed, ok, tramita, out.get("build"))
    return out


def _findings(profile: dict[str, Any], ok: list[dict[str, Any]], tramita: dict[str, Any],
              build: dict[str, Any] | None) -> dict[str, Any]:
    """Whether tramita runs slower than the library, and the fastest settings measured."""
    f: dict[str, Any] = {}
    if build is not None:
        f["build_unused_cpu_features"] = build.get("unused_by_build")
    if ok:
        big = max(ok[0]["pp"], key=int) if ok[0].get("pp") else None
        if big is not None:
            best_pp = max(ok, key=lambda s: (s["pp"].get(big) or {}).get("tokens_per_s") or 0)
            f["fastest_prompt_config"] = {"config": best_pp["config"], "pp_tokens": int(big),
                                          "tokens_per_s": best_pp["pp"][big]["tokens_per_s"],
                                          "profile_tokens_per_s": (profile.get("pp", {}).get(big) or {}).get("tokens_per_s")}
        best_tg = max(ok, key=lambda s: s["tg"].get("tokens_per_s") or 0)
        f["fastest_generation_config"] = {"config": best_tg["config"], "tokens_per_s": best_tg["tg"]["tokens_per_s"],
                                          "profile_tokens_per_s": (profile.get("tg") or {}).get("tokens_per_s")}
    none = (tramita.get("strategies") or {}).get("none")
    if none and "pp" in profile:
        ratios = []
        for c in none["calls"]:
            lib = _nearest_pp(profile, int(c["evaluated_tokens"] or 0))
            if lib and c["effective_prompt_tokens_per_s"]:
                ratios.append({"call": c["call"], "evaluated_tokens": c["evaluated_tokens"],
                               "effective_prompt_tokens_per_s": c["effective_prompt_tokens_per_s"],
                               "library_prompt_tokens_per_s": lib,
                               "ratio": round(c["effective_prompt_tokens_per_s"] / lib, 2),
                               "effective_generation_tokens_per_s": c["effective_generation_tokens_per_s"],
                               "library_generation_tokens_per_s": (profile.get("tg") or {}).get("tokens_per_s")})
        f["tramita_vs_library"] = ratios
    strategies = tramita.get("strategies") or {}
    f["strategies_wall_s"] = {k: v["wall_s"] for k, v in strategies.items()}
    f["strategies_evaluated_tokens"] = {k: v["evaluated_tokens"] for k, v in strategies.items()}
    return f


def render_markdown(sec: dict[str, Any]) -> list[str]:
    """The llama section of bench.md."""
    lines = ["## llama.cpp: library speed vs tramita", "",
             f"{sec.get('model_file')} · profile settings: {sec.get('profile_config')} · grid: {sec.get('grid')}", ""]
    b = sec.get("build") or {}
    if b:
        lines += [f"Build CPU features: {', '.join(b.get('build', []))}; CPU: {', '.join(b.get('cpu', []))}; "
                  f"unused by the build: {', '.join(b.get('unused_by_build', [])) or 'none'}.", ""]
    sizes = sorted({int(s) for sp in sec.get("speed", []) for s in (sp.get("pp") or {})})
    lines += ["| config | " + " | ".join(f"pp{s} tok/s" for s in sizes) + f" | tg{GEN_TOKENS} tok/s | load s | RSS MiB |",
              "|---|" + "---|" * (len(sizes) + 3)]
    for sp in sec.get("speed", []):
        if "error" in sp:
            lines.append(f"| error: {sp['error']} |" + " |" * (len(sizes) + 3))
            continue
        pp = " | ".join(str((sp["pp"].get(str(s)) or {}).get("tokens_per_s", "–")) for s in sizes)
        lines.append(f"| {sp['config']} | {pp} | {sp['tg'].get('tokens_per_s')} | {sp['load_s']} | {sp['peak_rss_mib']} |")
    t = sec.get("tramita") or {}
    if "error" in t or "skipped" in t:
        lines += ["", f"tramita probe: {t.get('error') or t.get('skipped')}", ""]
        return lines
    lines += ["", "Alternating planner / synthesis calls (" + " → ".join(t.get("sequence", [])) + "):", "",
              "| strategy | wall s | prompt tokens | evaluated | first token p50 s | cache |", "|---|---|---|---|---|---|"]
    for name, s in (t.get("strategies") or {}).items():
        cache = s.get("prefix_cache") or ({"library_mib": s.get("library_cache_mib")} if s.get("library_cache_mib") else "")
        lines.append(f"| {name} | {s['wall_s']} | {s['prompt_tokens']} | {s['evaluated_tokens']} | "
                     f"{s['first_token_s_p50']} | {cache} |")
    f = sec.get("findings") or {}
    lines += ["", "Findings: " + json.dumps(f, ensure_ascii=False), ""]
    return lines


def _main(argv: list[str]) -> int:
    """`python -m tramita.lab.llama_bench --speed-probe|--tramita-probe JSON` (the child half)."""
    if len(argv) == 2 and argv[0] in ("--speed-probe", "--tramita-probe"):
        spec = json.loads(argv[1])
        result = speed_probe(spec) if argv[0] == "--speed-probe" else tramita_probe(spec)
        print(json.dumps(result, ensure_ascii=False, default=str), flush=True)
        return 0
    print("usage: tramita bench --sections llama (this module's CLI is only its child probes)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
