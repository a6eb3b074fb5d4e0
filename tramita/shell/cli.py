"""tramita's command line: ingest, demo, chat, ask, tools, doctor, serve, web, eval, bench."""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from tramita.shell.render import (
    cited_doc_ids,
    doc_titles,
    print_answer,
    print_trace,
    print_turn,
    sources_footer,
    styled_answer,
)

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


def quiet_libraries() -> None:
    """Silence the libraries' own noise for a terminal user (`--verbose` skips this): the
    "Loading weights" bars of transformers, Hugging Face hub bars and advisory warnings, and the
    absl log lines of sentencepiece's C++ code. Each library's own switch is used, set before it is
    imported where it reads one at import time; a value the user already exported wins. tramita's
    own ingest bars pass `disable=` explicitly, so `TQDM_DISABLE` (a default) leaves them alone.
    """
    import logging
    import warnings

    for name, value in (("HF_HUB_DISABLE_PROGRESS_BARS", "1"), ("TRANSFORMERS_VERBOSITY", "error"),
                        ("HF_HUB_VERBOSITY", "error"), ("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1"),
                        ("TQDM_DISABLE", "1"), ("TF_CPP_MIN_LOG_LEVEL", "2")):
        os.environ.setdefault(name, value)
    for name in ("sentence_transformers", "transformers", "huggingface_hub", "chromadb.telemetry"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"(transformers|huggingface_hub|sentence_transformers|langchain_huggingface)\b")
    try:
        import huggingface_hub.utils

        huggingface_hub.utils.disable_progress_bars()
    except ImportError:
        pass
    if "transformers" in sys.modules:  # already imported (an in-process caller): flip its switches
        import transformers.utils.logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    try:
        import sentencepiece

        sentencepiece.set_min_log_level(2)  # its bundled absl logging: errors only
    except (ImportError, AttributeError):
        pass


def _plain(line: Any) -> None:
    """Print a line verbatim: "[ingest]" or a path with brackets is text, not rich markup."""
    console.print(str(line), markup=False, highlight=False, soft_wrap=True)


def _context(args: argparse.Namespace) -> Any:
    """The conversation's Context over services built from this command's settings."""
    from graph.context import Context
    from tools.services import Services
    from tramita.base.settings import Settings

    return Context(services=Services(Settings.from_env()))


def cmd_ingest(args: argparse.Namespace) -> int:
    """`tramita ingest`: load the sample (or --dataset) into the embedded stores."""
    from ingest.run import ingest_all
    from tramita.base.settings import Settings

    settings = Settings.from_env()
    _plain(f"data directory: {settings.data_dir}")
    report = ingest_all(settings, reset=args.reset, models=not args.no_models, say=_plain)
    for name, seconds in report.seconds.items():
        _plain(f"  {name:<20} {seconds:>7.1f} s  {_short(report.steps[name])}")
    return 0


def cmd_warm(args: argparse.Namespace) -> int:
    """`tramita warm`: evaluate the static prompt prefixes now, so no first question pays for them."""
    from tramita.shell.warm import warm_all

    ctx = _context(args)
    _plain(f"warming the prompt prefixes of LLM profile {ctx.llm_backend or 'default'} (today {ctx.today})")
    rows = warm_all(ctx.svc, today=ctx.today, profile=ctx.llm_backend)
    for row in rows:
        _plain(f"  {row.name:<52} {row.tokens:>6} tokens  {row.seconds:>6.1f} s  {row.status}")
    failed = [r for r in rows if r.status.startswith("failed")]
    return 1 if failed else 0


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) < 100 else text[:97] + "…"


def _streaming() -> bool:
    """Stream answers on a terminal (TRAMITA_STREAM=1 forces it, =0 turns it off)."""
    forced = os.environ.get("TRAMITA_STREAM", "").strip()
    return forced == "1" or (forced != "0" and console.is_terminal)


def _streamed_turn(session: Any, thread: str, text: str, services: Any, show_trace: bool) -> Any:
    """Run a turn through `Session.stream_turn`, showing the answer's tokens as they come, then the
    answer as the turn finished it (respond may add to it or tidy it), the sources and the trace.

    The tokens are drawn in a rich `Live` region that the final answer replaces, so nothing is
    printed twice.
    """
    from rich.live import Live

    from graph.session import AnswerToken

    shown = ""
    result: Any = None
    live: Live | None = None
    try:
        for event in session.stream_turn(thread, text):
            if isinstance(event, AnswerToken):
                shown += event.text
                if live is None:
                    live = Live(console=console, refresh_per_second=12, vertical_overflow="visible")
                    live.start()
                live.update(Text.assemble(("tramita › ", "bold green"), shown))
            else:
                result = event
        if live is not None and result is not None:
            live.update(Text.assemble(("tramita › ", "bold green"), styled_answer(result.answer)))
    finally:
        if live is not None:
            live.stop()
    titles = doc_titles(services, cited_doc_ids(result.answer))
    if live is None:
        print_answer(console, result.answer, titles)
    else:
        footer = sources_footer(result.answer, titles)
        if footer is not None:
            console.print(footer, soft_wrap=True)
    if show_trace:
        print_trace(console, result)
        if result.first_token_seconds is not None:
            console.print(Text(f"  first answer token: {result.first_token_seconds:.1f} s", style="dim"))
    return result


def cmd_ask(args: argparse.Namespace) -> int:
    """`tramita ask`: one message, one answer (streamed on a terminal)."""
    from graph.session import open_session

    ctx = _context(args)
    with open_session(ctx) as session:
        thread = args.thread or f"ask-{uuid.uuid4().hex[:8]}"
        if _streaming():
            console.print(Text.assemble(("você › ", "bold cyan"), " ".join(args.question)), soft_wrap=True)
            _streamed_turn(session, thread, " ".join(args.question), ctx.svc, show_trace=not args.quiet)
            return 0
        result = session.turn(thread, " ".join(args.question))
        titles = doc_titles(ctx.svc, cited_doc_ids(result.answer))
        print_turn(console, " ".join(args.question), result, show_trace=not args.quiet, titles=titles)
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    """`tramita chat`: an interactive conversation on one thread (answers streamed on a terminal)."""
    from graph.session import open_session

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
                if _streaming():
                    _streamed_turn(session, thread, text, ctx.svc, show_trace=True)
                    continue
                result = session.turn(thread, text)
            except Exception as exc:  # noqa: BLE001 - a failed turn must not end the chat
                console.print(Text.assemble(("erro: ", "red"), str(exc)), soft_wrap=True)
                continue
            print_answer(console, result.answer, doc_titles(ctx.svc, cited_doc_ids(result.answer)))
            print_trace(console, result)


def cmd_demo(args: argparse.Namespace) -> int:
    """`tramita demo`: a short tour of questions and one confirmed transaction."""
    from tramita.shell.demo import run_demo

    return run_demo(console, user=args.user or "E006")


def cmd_tools(args: argparse.Namespace) -> int:
    """`tramita tools`: list, enable, disable or grant registry tools."""
    from rich.markup import escape

    from tools.registry_models import RegistryError
    from tools.services import Services
    from tramita.base.settings import Settings

    def out(line: str) -> None:
        # catalog data is printed verbatim: "[finance]" is not rich markup, and YAML must not wrap
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    reg = Services(Settings.from_env()).registry
    try:
        if args.tools_cmd == "list":
            rows = reg.list(args.filter or "", user_id=args.user or os.environ.get("TRAMITA_USER", ""))
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
        elif args.tools_cmd == "import-mcp":
            from tools.mcp_import import import_mcp

            m = import_mcp(Path(args.config), reg)
            out(f"added {m.added} updated {m.updated} unchanged {len(m.unchanged)} disabled {m.disabled} "
                f"re-embedded {m.embedded}; writes {m.writes} reads {m.reads}")
            for tool, why in m.skipped.items():
                out(f"skipped {tool}: {why}")
            out("imported tools start disabled with no grant: review them, then `tramita tools enable NAME` and "
                "`tramita tools grant NAME --user ID|--group G`; read-only ones still ask for confirmation until "
                "policies/tool_policies.yaml gives them {require_confirmation: false, operation_type: read}")
    except RegistryError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        return 2
    return 0


def cmd_semantic(args: argparse.Namespace) -> int:
    """`tramita semantic draft --out FILE`: a first semantic model from the configured database's
    tables, foreign keys and comments (tramita's own bookkeeping tables left out), for a person to
    curate; an existing file is kept unless --force.
    """
    from ingest.sql_loader import TRAMITA_METADATA
    from tools.database import writer_engine
    from tools.semantic_model import catalog_from_engine, draft_yaml
    from tramita.base.settings import Settings

    out = Path(args.out)
    if out.exists() and not args.force:
        console.print(f"[red]error:[/] {out} exists (use --force to replace it)")
        return 2
    settings = Settings.from_env()
    catalog = catalog_from_engine(writer_engine(settings.sql_url))
    for own in TRAMITA_METADATA.tables:
        catalog.pop(own, None)
    out.write_text(draft_yaml(catalog, args.name, source=settings.sql_url.split("@")[-1]), encoding="utf-8")
    console.print(f"drafted {len(catalog)} entities into {out}; curate it, then set TRAMITA_SEMANTIC_MODEL={out}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """`tramita doctor`: one row per component, with the fix for each failure."""
    from tramita.shell.doctor import run_doctor

    return run_doctor(console)


def cmd_serve(args: argparse.Namespace) -> int:
    """`tramita serve` (JSON API and web page) and `tramita web` (the same, announcing the page's URL)."""
    from tramita.shell.server import UnsafeBind, serve

    web = args.cmd == "web"

    def announce(url: str) -> None:
        _plain(f"tramita web chat: {url}  (Ctrl-C to stop)")
        if getattr(args, "open", False):
            import webbrowser

            webbrowser.open(url)

    try:
        from contextlib import nullcontext

        from tools.sample_api import start_sample_api

        with start_sample_api() if getattr(args, "sample_api", False) else nullcontext():  # the `api` backend's demo source
            return serve(args.host, args.port, name=args.name, max_concurrent=args.max_concurrent,
                         trusted_user_header=args.trusted_user_header or "", announce=announce if web else None)
    except UnsafeBind as exc:
        console.print(Text.assemble(("error: ", "red"), str(exc)), soft_wrap=True)
        return 2


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every `tramita` command."""
    p = argparse.ArgumentParser(prog="tramita", description=__doc__)
    p.add_argument("--data-dir", help="data directory (env TRAMITA_DATA_DIR)")
    p.add_argument("--today", help="ISO date used as today (env TRAMITA_TODAY)")
    p.add_argument("--profile", help="LLM backend: local, local-small, openai, scripted (env TRAMITA_LLM)")
    p.add_argument("--verbose", action="store_true",
                   help="keep the libraries' progress bars, warnings and log lines (hidden by default)")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("ingest", help="load the sample data into every store (idempotent)")
    s.add_argument("--reset", action="store_true", help="reload from scratch")
    s.add_argument("--no-models", action="store_true", help="skip model assembly/conversion")
    s.set_defaults(fn=cmd_ingest)
    s = sub.add_parser("warm", help="evaluate the local model's static prompt prefixes before the first question")
    s.set_defaults(fn=cmd_warm)
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
    x = tsub.add_parser("import-mcp", help="import an MCP server's tools as custom tools (disabled, no grant)")
    x.add_argument("config", help="YAML file: servers: {name: {command, args, env_passthrough, tools}}")
    t.set_defaults(fn=cmd_tools)
    s = sub.add_parser("doctor", help="health of every component, with how to fix it")
    s.set_defaults(fn=cmd_doctor)
    s = sub.add_parser("semantic", help="the semantic model of SQL questions")
    x = s.add_subparsers(dest="semantic_cmd", required=True).add_parser(
        "draft", help="draft a model from the database's tables, foreign keys and comments")
    x.add_argument("--out", required=True, help="YAML file to write")
    x.add_argument("--name", default="draft", help="the model's name")
    x.add_argument("--force", action="store_true", help="replace an existing file")
    s.set_defaults(fn=cmd_semantic)
    for name, text in (("serve", "HTTP server: JSON turns, streamed turns and the web chat; run several on one PostgreSQL"),
                       ("web", "the web chat: start the server and print the page's URL")):
        s = sub.add_parser(name, help=text)
        s.add_argument("--host", default="127.0.0.1",
                       help="address to bind; anything but loopback needs --trusted-user-header")
        s.add_argument("--port", type=int, default=8123)
        s.add_argument("--name", default="", help="server id reported in every reply (default host:port)")
        s.add_argument("--max-concurrent", type=int, default=8, help="turns run at once in this process")
        s.add_argument("--trusted-user-header", metavar="HEADER", default="",
                       help="the user is this header, set by the company's SSO proxy (e.g. X-Forwarded-User); "
                            "the page hides its user picker (docs/web.md)")
        s.add_argument("--sample-api", action="store_true",
                       help="also run the NovaOps sample API on 127.0.0.1 for the `api` backend (tools/sample_api.py)")
        if name == "web":
            s.add_argument("--open", action="store_true", help="also open the page in the default browser")
        s.set_defaults(fn=cmd_serve)
    try:
        from tramita.lab.reliability import add_reliability_command
        from tramita.shell.doctor import checks

        add_reliability_command(sub, doctor=checks)
    except ImportError:
        pass
    try:
        from tramita.lab.evalcli import add_eval_commands

        add_eval_commands(sub)
    except ImportError:
        pass
    return p


def _setup_logging() -> None:
    """CLI runs log to `<data_dir>/tramita.log` (masked), keeping the terminal for the conversation."""
    import logging

    from tramita.base.logmask import get_logger, mask_handler
    from tramita.base.paths import data_dir

    log = get_logger()
    if any(isinstance(h, logging.FileHandler) for h in log.handlers):
        return
    handler = mask_handler(logging.FileHandler(data_dir() / "tramita.log", encoding="utf-8"))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    """Parse, apply the global flags, check the LLM profile at once, then run the command."""
    from tools.llm import UnknownProfile, check_profile
    from tramita.base.settings import Settings

    args = build_parser().parse_args(argv)
    if not args.verbose:
        quiet_libraries()
    _apply_globals(args)
    try:
        check_profile(Settings.from_env().llm_profile)
    except UnknownProfile as exc:
        console.print(Text.assemble(("error: ", "red"), str(exc)), soft_wrap=True)
        return 2
    _setup_logging()
    try:
        return int(args.fn(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("TRAMITA_DEBUG"):
            raise
        console.print(Text.assemble(("error: ", "red"), f"{type(exc).__name__}: {exc}"), soft_wrap=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
