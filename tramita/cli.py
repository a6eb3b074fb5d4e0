"""tramita's command line: ingest, demo, chat, ask, tools, doctor, eval, bench."""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console

console = Console(highlight=False)


def _apply_globals(args: argparse.Namespace) -> None:
    """Global flags become environment defaults so every layer (Context, Settings) sees them."""
    if getattr(args, "data_dir", None):
        os.environ["TRAMITA_DATA_DIR"] = str(Path(args.data_dir).expanduser().resolve())
    if getattr(args, "today", None):
        os.environ["TRAMITA_TODAY"] = args.today
    if getattr(args, "profile", None):
        os.environ["TRAMITA_LLM"] = args.profile
    if getattr(args, "user", None):
        os.environ["TRAMITA_USER"] = args.user


def _context(args: argparse.Namespace) -> Any:
    from graph.context import Context

    return Context()


def cmd_ingest(args: argparse.Namespace) -> int:
    from ingest.run import ingest_all
    from tramita.settings import Settings

    settings = Settings.from_env()
    console.print(f"data directory: {settings.data_dir}")
    report = ingest_all(settings, reset=args.reset, models=not args.no_models, say=console.print)
    for name, seconds in report.seconds.items():
        console.print(f"  {name:<20} {seconds:>7.1f} s  {_short(report.steps[name])}")
    return 0


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) < 100 else text[:97] + "…"


def print_turn(user: str, result: Any, show_trace: bool = True) -> None:
    console.print(f"[bold cyan]você ›[/] {user}")
    console.print(f"[bold green]tramita ›[/] {result.answer}")
    if show_trace:
        t = result.trace
        path = " → ".join(t.get("nodes", []))
        extra = f" | executed: {t.get('executed_tool')}" if t.get("executed_tool") else ""
        refused = f" | refused: {t.get('refusal')}" if t.get("refused") else ""
        console.print(f"[dim]  path: {path} | status: {result.status} | LLM calls: {t.get('llm_calls', 0)} "
                      f"({t.get('prompt_tokens', 0)}+{t.get('completion_tokens', 0)} tokens) | "
                      f"{result.seconds:.1f} s{extra}{refused}[/]")


def cmd_ask(args: argparse.Namespace) -> int:
    from tramita.session import open_session

    with open_session(_context(args)) as session:
        result = session.turn(args.thread or f"ask-{uuid.uuid4().hex[:8]}", " ".join(args.question))
        print_turn(" ".join(args.question), result, show_trace=not args.quiet)
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from tramita.session import open_session

    thread = args.thread or f"chat-{uuid.uuid4().hex[:8]}"
    ctx = _context(args)
    console.print(f"tramita chat — user {ctx.user_id}, thread {thread}, today {ctx.today}, LLM {ctx.llm_backend}. "
                  "Empty line or Ctrl-D to quit.")
    with open_session(ctx) as session:
        while True:
            try:
                text = console.input("[bold cyan]você › [/]")
            except (EOFError, KeyboardInterrupt):
                console.print()
                return 0
            if not text.strip():
                return 0
            try:
                result = session.turn(thread, text)
            except Exception as exc:  # noqa: BLE001 - a failed turn must not end the chat
                console.print(f"[red]erro: {exc}[/]")
                continue
            console.print(f"[bold green]tramita ›[/] {result.answer}")
            t = result.trace
            console.print(f"[dim]  {' → '.join(t.get('nodes', []))} | {result.status} | "
                          f"LLM {t.get('llm_calls', 0)} | {result.seconds:.1f} s[/]")


def cmd_demo(args: argparse.Namespace) -> int:
    from tramita.demo import run_demo

    return run_demo(console, user=args.user or "E006")


def cmd_tools(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from tools.registry_models import RegistryError
    from tramita.runtime import services

    def out(line: str) -> None:
        # catalog data is printed verbatim: "[finance]" is not rich markup, and YAML must not wrap
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    reg = services().registry
    try:
        if args.tools_cmd == "list":
            rows = reg.list(args.filter or "", user_id=args.user or os.environ.get("TRAMITA_USER", "E006"))
            for spec, permitted in rows:
                out(f"{'●' if spec.enabled else '○'} {spec.name:<24} {'✓' if permitted else '✗'} "
                    f"{spec.short_description:<36} [{spec.group}] v{spec.version}{'' if spec.standard else ' (custom)'}")
            console.print("[dim]● enabled ○ disabled; ✓/✗ permitted for the user[/]")
        elif args.tools_cmd == "show":
            import yaml

            spec = reg.get(args.name)
            out(yaml.safe_dump(spec.model_dump(), allow_unicode=True, sort_keys=False, width=1_000_000).rstrip())
        elif args.tools_cmd in ("enable", "disable"):
            reg.set_enabled(args.name, args.tools_cmd == "enable")
            out(f"{args.name}: {args.tools_cmd}d")
        elif args.tools_cmd in ("grant", "revoke"):
            fn = reg.grant if args.tools_cmd == "grant" else reg.revoke
            fn(args.name, user=args.grant_user, group=args.group)
            out(f"{args.name}: {args.tools_cmd} {args.grant_user or args.group}")
        elif args.tools_cmd == "add":
            out(f"added: {', '.join(reg.add(Path(args.file)))}")
        elif args.tools_cmd == "sync":
            r = reg.sync(Path(args.file) if args.file else None)
            out(f"added {r.added} updated {r.updated} unchanged {len(r.unchanged)} kept custom {r.kept_custom} "
                f"re-embedded {r.embedded}")
            if r.stale_yaml:
                out(f"stale (the file's version is lower than the stored one; ignored): {r.stale_yaml}")
    except RegistryError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        return 2
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from tramita.doctor import run_doctor

    return run_doctor(console)


def cmd_serve(args: argparse.Namespace) -> int:
    from tramita.server import serve

    return serve(args.host, args.port, name=args.name, max_concurrent=args.max_concurrent)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tramita", description=__doc__)
    p.add_argument("--data-dir", help="data directory (env TRAMITA_DATA_DIR)")
    p.add_argument("--today", help="ISO date used as today (env TRAMITA_TODAY)")
    p.add_argument("--profile", help="LLM backend: local, local-small, openai, scripted (env TRAMITA_LLM)")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("ingest", help="load the sample data into every store (idempotent)")
    s.add_argument("--reset", action="store_true", help="reload from scratch")
    s.add_argument("--no-models", action="store_true", help="skip model assembly/conversion")
    s.set_defaults(fn=cmd_ingest)
    s = sub.add_parser("demo", help="scripted conversation across all backends and a confirmed write")
    s.add_argument("--user")
    s.set_defaults(fn=cmd_demo)
    s = sub.add_parser("chat", help="interactive chat")
    s.add_argument("--user")
    s.add_argument("--thread", help="resume a thread id")
    s.set_defaults(fn=cmd_chat)
    s = sub.add_parser("ask", help="one message, one answer")
    s.add_argument("question", nargs="+")
    s.add_argument("--user")
    s.add_argument("--thread")
    s.add_argument("--quiet", action="store_true")
    s.set_defaults(fn=cmd_ask)
    t = sub.add_parser("tools", help="tool registry catalog")
    t.add_argument("--user", help="user for the permission mark")
    tsub = t.add_subparsers(dest="tools_cmd", required=True)
    x = tsub.add_parser("list")
    x.add_argument("filter", nargs="?")
    x = tsub.add_parser("show")
    x.add_argument("name")
    for verb in ("enable", "disable"):
        x = tsub.add_parser(verb)
        x.add_argument("name")
    for verb in ("grant", "revoke"):
        x = tsub.add_parser(verb)
        x.add_argument("name")
        g = x.add_mutually_exclusive_group(required=True)
        g.add_argument("--user", dest="grant_user")
        g.add_argument("--group")
    x = tsub.add_parser("add")
    x.add_argument("file")
    x = tsub.add_parser("sync")
    x.add_argument("file", nargs="?")
    t.set_defaults(fn=cmd_tools)
    s = sub.add_parser("doctor", help="health of every component, with how to fix it")
    s.set_defaults(fn=cmd_doctor)
    s = sub.add_parser("serve", help="HTTP server: one request per turn; run several on one PostgreSQL")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8123)
    s.add_argument("--name", default="", help="server id reported in every reply (default host:port)")
    s.add_argument("--max-concurrent", type=int, default=8, help="turns run at once in this process")
    s.set_defaults(fn=cmd_serve)
    try:
        from tramita.reliability import add_reliability_command

        add_reliability_command(sub)
    except ImportError:
        pass
    try:
        from tramita.evalcli import add_eval_commands

        add_eval_commands(sub)
    except ImportError:
        pass
    return p


def _setup_logging() -> None:
    """CLI runs log to `<data_dir>/tramita.log` (masked), keeping the terminal for the conversation."""
    import logging

    from tramita.logmask import get_logger, mask_handler
    from tramita.paths import data_dir

    log = get_logger()
    if any(isinstance(h, logging.FileHandler) for h in log.handlers):
        return
    handler = mask_handler(logging.FileHandler(data_dir() / "tramita.log", encoding="utf-8"))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _apply_globals(args)
    _setup_logging()
    try:
        return int(args.fn(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("TRAMITA_DEBUG"):
            raise
        console.print(f"[red]error:[/] {type(exc).__name__}: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
