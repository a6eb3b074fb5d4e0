"""`tramita eval conversations FILE` and `tramita eval questions FILE`.

Both read the JSONL formats of sample/novaops/README.md, run every item on a fresh copy of a
pristine dataset (today = 2026-05-15), and write `report.json` and `report.html` to `--out`.
Finished items are appended to `<out>/items.jsonl` as they finish: Ctrl-C, then the same command
with the same `--out`, carries on where the run stopped.
"""

from __future__ import annotations

import argparse
import contextlib
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from tramita.base.settings import Settings
from tramita.lab.evaluation.runner import (
    KINDS,
    TODAY,
    Checkpoint,
    EvalSetupError,
    Kind,
    check_run_meta,
    check_stores,
    prepare_pristine,
    read_items,
    run_items,
    unknown_expect_keys,
)

console = Console(highlight=False)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def add_eval_commands(sub: Any) -> None:
    """Add `eval conversations|questions` to the CLI's subparsers."""
    e = sub.add_parser("eval", help="run an evaluation suite (JSONL of sample/novaops/README.md) and write reports")
    esub = e.add_subparsers(dest="eval_cmd", required=True)
    helps = {"conversations": "multi-turn transaction conversations (status, tools, params, writes)",
             "questions": "questions over SQL, graph and documents (facts, execution accuracy, recall@5)"}
    for kind in KINDS:
        s = esub.add_parser(kind, help=helps[kind])
        s.add_argument("file", type=Path, help=f"a {kind} JSONL file, e.g. sample/novaops/{kind}.dev.jsonl")
        # dest differs from the root's --profile so that argparse never resets the root value
        s.add_argument("--profile", dest="eval_profile", metavar="NAME", help="LLM backend (same as the global --profile)")
        s.add_argument("--limit", type=_positive, help="run only the first N items (after --ids)")
        s.add_argument("--ids", help="comma-separated item ids to run")
        s.add_argument("--jobs", type=_positive, default=1, help="worker processes (default 1)")
        s.add_argument("--out", type=Path, help="output directory; an existing one is resumed "
                       "(default ./out/eval-<kind>-<timestamp>)")
        s.add_argument("--peers", action="store_true",
                       help="then run the field's standard chains on the same items with the same model and report "
                       "them side by side as ratios (" + ("LangGraph's ReAct agent" if kind == "conversations" else
                       "LangChain's SQL chain and KuzuQAChain") + "); peers.json / peers.md and a report section")
        s.set_defaults(fn=cmd_eval, eval_kind=kind)
    from tramita.lab.bench import add_bench_command  # `tramita bench` (tramita/bench.py)
    add_bench_command(sub)


def _profile(args: argparse.Namespace, settings: Settings) -> str:
    from tools.llm import backend_names

    name = args.eval_profile or args.profile or settings.llm_profile
    known = backend_names()
    if name not in known:
        raise EvalSetupError(f"unknown profile {name!r}; policies/llm_profiles.yaml defines {', '.join(known)}")
    return name


def cmd_eval(args: argparse.Namespace) -> int:
    """`tramita eval`: run the items not yet in `--out`'s checkpoint (so a killed run resumes), then report."""
    kind: Kind = args.eval_kind
    configured = Settings.from_env()
    profile = _profile(args, configured)
    # the run's stores and profile, handed to every item (and worker); each item runs as of TODAY
    settings = configured.with_profile(profile)
    if args.today and args.today != TODAY:
        console.print(f"[yellow]note:[/] --today {args.today} is ignored: the evaluation sets are as of {TODAY}")
    ids = [i.strip() for i in args.ids.split(",") if i.strip()] if args.ids else None
    items = read_items(args.file, kind, ids=ids, limit=args.limit)
    odd = unknown_expect_keys(items)
    if odd:
        console.print(f"[yellow]warning:[/] expect keys not in the format, not checked: {', '.join(sorted(odd))}")
    out: Path = (args.out or Path("out") / f"eval-{kind}-{datetime.now():%Y%m%d-%H%M%S}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    check_run_meta(out, {"kind": kind, "file": str(args.file.resolve()), "profile": profile,
                         "started_at": datetime.now().isoformat(timespec="seconds")})
    check_stores(settings)
    pristine = prepare_pristine(out, settings)
    if args.jobs > 1 and profile.startswith("local"):
        console.print(f"[yellow]warning:[/] --jobs {args.jobs} with profile {profile}: every worker loads its own "
                      "copy of the model (about 1.9 GB each) and they share the CPU cores")
    ckpt = Checkpoint(out / "items.jsonl").load()
    if ckpt.skipped_lines:
        console.print(f"[yellow]note:[/] {ckpt.skipped_lines} unreadable line(s) in {ckpt.path}: those items run again")
    done = ckpt.done()
    todo = [i for i in items if i["id"] not in done]
    console.print(f"eval {kind}: {len(items)} items from {args.file} · profile {profile} · out {out}"
                  + (f" · resuming, {len(items) - len(todo)} already done" if len(todo) < len(items) else ""))
    interrupted = False
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=console, disable=not todo) as bar:
        task = bar.add_task(_label(kind, ckpt, items), total=len(items), completed=len(items) - len(todo))

        def on_done(record: dict[str, Any]) -> None:
            ckpt.append(record)
            bar.update(task, advance=1, description=_label(kind, ckpt, items))

        try:
            with contextlib.ExitStack() as stack:
                if todo and (any("api" in (i.get("needs") or []) for i in todo) or _serves_sample_api(settings)):
                    # the sample API, on 127.0.0.1 for this run only: the `api` items read it, and a
                    # deployment that declares it has it up (`make run` starts it), so a question
                    # the planner sends there is answered as in use, whatever its gold needs
                    from tools.sample_api import start_sample_api

                    stack.enter_context(start_sample_api(dataset_dir=settings.dataset_dir))
                run_items(kind, todo, pristine_db=pristine, workdir=out / "work", settings=settings, jobs=args.jobs,
                          on_done=on_done)
        except KeyboardInterrupt:
            interrupted = True
    peers = None
    if args.peers and not interrupted and all(i["id"] in ckpt.records for i in items):
        peers = _run_peers(kind, items, ckpt, pristine=pristine, out=out, settings=settings)
    return _finish(kind, args.file, profile, out, items, ckpt, interrupted, peers)


def _run_peers(kind: Kind, items: list[dict[str, Any]], ckpt: Checkpoint, *, pristine: Path, out: Path,
               settings: Settings) -> dict[str, Any] | None:
    """The peers on the same items, compared with this run's records; a peer that crashes is
    reported and leaves the eval's own report intact.
    """
    from tramita.lab.evaluation.peers import compare_eval, render_comparison

    console.print("peers: the same items through the field's standard chains (same model) …")
    try:
        summary = compare_eval(kind, items, ckpt.records, pristine_db=pristine, out=out, settings=settings,
                               say=lambda m: console.print(f"  [dim]{m}[/]"))
    except Exception as exc:  # noqa: BLE001 - the peers are an extra: their failure must not lose the eval
        console.print(f"[red]peers failed:[/] {type(exc).__name__}: {exc}")
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}
    console.print(render_comparison(summary))
    return summary


def _label(kind: str, ckpt: Checkpoint, items: list[dict[str, Any]]) -> str:
    recs = [ckpt.records[i["id"]] for i in items if i["id"] in ckpt.records]
    ok = sum(1 for r in recs if r["ok"])
    return f"{kind} [green]✓{ok}[/] [red]✗{len(recs) - ok}[/]"


def _serves_sample_api(settings: Any) -> bool:
    """Whether the dataset declares an API source that the sample API serves (its URL variable)."""
    from tools.api_source import load_sources
    from tools.sample_api import BASE_URL_ENV

    try:
        return any(s.spec.base_url_env == BASE_URL_ENV for s in load_sources(settings.dataset_dir))
    except Exception:  # noqa: BLE001 - a bad source file is the api backend's to report, not the eval's
        return False


def _finish(kind: Kind, file: Path, profile: str, out: Path, items: list[dict[str, Any]], ckpt: Checkpoint,
            interrupted: bool, peers: dict[str, Any] | None = None) -> int:
    from tramita.lab.evaluation import conversations, questions
    from tramita.lab.evaluation.report import write_reports

    records = [ckpt.records[i["id"]] for i in items if i["id"] in ckpt.records]
    summary = conversations.summarize(records) if kind == "conversations" else questions.summarize(records)
    incomplete = len(records) < len(items)
    json_path, html_path = write_reports(out, kind=kind, file=str(file), profile=profile, summary=summary,
                                         records=records, incomplete=incomplete, peers=peers)
    _print_summary(kind, summary)
    console.print(f"report: {html_path}\n        {json_path}")
    if interrupted or incomplete:
        console.print(f"[yellow]interrupted[/] after {len(records)}/{len(items)} items; resume with the same command "
                      f"and --out {out}")
        return 130
    if kind == "conversations" and summary["unconfirmed_writes"]:
        console.print(f"[bold red]{summary['unconfirmed_writes']} write(s) executed without an explicit "
                      "confirmation turn[/]")
        return 3
    return 0


def _print_summary(kind: Kind, s: dict[str, Any]) -> None:
    def pct(v: Any) -> str:
        return "–" if v is None else f"{v:.0%}"

    console.print(f"[bold]{s['passed']}/{s['items']} items passed ({pct(s['success_rate'])})[/]")
    if kind == "conversations":
        color = "green" if s["unconfirmed_writes"] == 0 else "red"
        console.print(f"[bold {color}]writes without an explicit confirmation turn: {s['unconfirmed_writes']}[/]")
    else:
        for k, v in s["backends"].items():
            console.print(f"  {k:<28} {pct(v)}")
        color = "green" if s["items_that_changed_data"] == 0 else "red"
        console.print(f"  [{color}]questions that changed data: {s['items_that_changed_data']}[/]")
    rates = ", ".join(f"{k} {pct(v)}" for k, v in s["check_rates"].items())
    console.print(f"  checks: {rates}")
    lc, lat = s["llm_calls_per_turn"], s["latency_s"]
    console.print(f"  per turn: LLM calls p50 {lc['p50']} p95 {lc['p95']} · latency p50 {lat['p50']} s "
                  f"p95 {lat['p95']} s ({s['turns']} turns)")
    ftt = s.get("first_answer_token_s")
    if ftt:
        console.print(f"  first answer token (streamed, from the turn's start): p50 {ftt['p50']} s p95 {ftt['p95']} s "
                      f"({ftt['n']} answers)")
