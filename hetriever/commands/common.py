"""What every command shares: exit codes, settings from the command line, output."""

from __future__ import annotations

import argparse
import json
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def make_console(stderr: bool = False):
    """Readable results go to stdout (so `| head` works); progress bars to stderr."""
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal:  # piped or captured: do not squeeze tables into 80 columns
        console = Console(stderr=stderr, width=140)
    return console


def cli_settings(args: argparse.Namespace, **extra: Any):
    """Settings with the global options (--docs-root, --chroma-path) and `extra` on top;
    logging configured (quiet: warnings and errors only)."""
    from hetriever.config import load_settings
    from hetriever.logs import configure_logging

    overrides = {k: v for k, v in extra.items() if v is not None}
    if getattr(args, "docs_root", None):
        overrides["docs_root"] = args.docs_root
    if getattr(args, "chroma_path", None):
        overrides["chroma_path"] = args.chroma_path
    settings = load_settings(**overrides)
    configure_logging(settings.log_level if not getattr(args, "quiet", False) else "WARNING",
                      settings.log_format)
    return settings


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))
