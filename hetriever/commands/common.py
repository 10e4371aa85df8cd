"""What every command shares: exit codes, settings from the command line, output."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from hetriever.core.index_location import CHROMA_FILE

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143  # 128 + the signal: SIGINT (Ctrl-C), SIGTERM


def make_console(stderr: bool = False):
    """Readable results go to stdout (so `| head` works); progress bars to stderr."""
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal:  # piped or captured: do not squeeze tables into 80 columns
        console = Console(stderr=stderr, width=140)
    return console


# Commands whose informational log lines tell what they do (an ingest's repositories, a
# server's requests). The others print their answer; their log shows warnings and errors
# unless asked with -v.
TELLING = {"ingest", "migrate", "serve", "mcp", "serve-webhook", "prepare-model"}


def log_level(args: argparse.Namespace, configured: str) -> str:
    """The CLI's log level: -q warnings and errors only; -v the configured level, INFO at
    least; else the configured level for a TELLING command, WARNING at least for the others."""
    import logging

    level = logging.getLevelName(configured.upper())
    level = level if isinstance(level, int) else logging.INFO
    if getattr(args, "quiet", False):
        chosen = logging.WARNING
    elif getattr(args, "verbose", False):
        chosen = min(level, logging.INFO)
    elif getattr(args, "command", None) in TELLING:
        chosen = level
    else:
        chosen = max(level, logging.WARNING)
    return logging.getLevelName(chosen)


def cli_settings(args: argparse.Namespace, **extra: Any):
    """Settings with the global options (--docs-root, --chroma-path) and `extra` on top;
    logging configured (`log_level`: -q, -v and the command)."""
    from hetriever.core.config import load_settings
    from hetriever.core.logs import configure_logging

    overrides = {k: v for k, v in extra.items() if v is not None}
    if getattr(args, "docs_root", None):
        overrides["docs_root"] = args.docs_root
    if getattr(args, "chroma_path", None):
        overrides["chroma_path"] = args.chroma_path
    settings = load_settings(**overrides)
    configure_logging(log_level(args, settings.log_level), settings.log_format)
    return settings


def index_location(settings) -> str:
    """Where these settings' index is, absolute: what every command shows."""
    state = settings.resolved_state_dir.absolute()
    if settings.server_mode:
        return f"Chroma server {settings.chroma_host}:{settings.chroma_port}, state {state}"
    chroma = settings.chroma_path.absolute()
    beside = settings.state_dir is None  # the default: .hetriever beside the Chroma data
    return str(chroma) + ("" if beside else f", state {state}")


def note_location(settings) -> None:
    """On stderr, when the index in use is the old `./chroma_data` default: how to keep
    finding it from another directory."""
    print_note(location_note(settings))


def location_note(settings) -> str:
    from hetriever.core.index_location import legacy_note

    return "" if settings.server_mode else legacy_note(settings.chroma_path, settings.docs_root)


def print_note(note: str) -> None:
    import sys

    if note:
        print(f"hetriever: note: {note}", file=sys.stderr)


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def _absent(path: Path) -> bool:
    """Not there, under a directory that is (a path under a file is another error, told by
    the store: it names the file in the way)."""
    if path.exists():
        return False
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return parent.is_dir()


def _blocked(directory: Path) -> bool:
    """A file where the directory, or one of its parents, should be."""
    node = directory
    while not node.exists() and node != node.parent:
        node = node.parent
    return not node.is_dir()


def require_index(settings) -> None:
    """Searching, purging or forgetting in a path or state directory that no ingest wrote is
    a mistake (a typo, another working directory), not 0 results; opening the store there
    would also create an empty index. Only `ingest` (and `serve`, waiting for one) create
    them."""
    from hetriever.core.errors import ConfigurationError
    from hetriever.store.catalog_schema import CATALOG_FILE

    if settings.follow:
        return  # a follower's catalog is made by following the server's manifest

    dirs = [settings.resolved_state_dir] + ([] if settings.server_mode else [settings.chroma_path])
    if any(_blocked(d) for d in dirs):
        return  # a file in the way: the store names it, with what to do
    if not settings.server_mode and _absent(settings.chroma_path / CHROMA_FILE):
        # An existing directory that holds no index (an unrelated one) is as wrong as a
        # missing one, and opening the store would write an empty index into it.
        raise ConfigurationError(
            f"no index at {settings.chroma_path}: "
            + (
                "the Chroma directory does not exist"
                if _absent(settings.chroma_path)
                else "the directory holds no Chroma index"
            ),
            hint="check HETRIEVER_CHROMA_PATH / --chroma-path, or run `hetriever ingest` first",
        )
    catalog = settings.resolved_state_dir / CATALOG_FILE
    if _absent(catalog):
        raise ConfigurationError(
            f"no catalog at {catalog}: the state directory holds no index",
            hint="set HETRIEVER_STATE_DIR to the one `hetriever ingest` "
            "used (server mode defaults to ./.hetriever), or ingest "
            "first",
        )


def index_problem(settings) -> str:
    """Why these settings name no index an ingest wrote ("" when they do; `require_index`)."""
    from hetriever.core.errors import ConfigurationError

    try:
        require_index(settings)
    except ConfigurationError as exc:
        return str(exc)
    return ""
