"""`hetriever demo`: the bundled sample docs in a throwaway parent repository, indexed and
searched once."""

from __future__ import annotations

import argparse
import asyncio
import shutil
from pathlib import Path

from hetriever.commands.common import EXIT_FAILED, EXIT_OK, cli_settings, make_console
from hetriever.commands.ingest import ingest_local, print_ingest
from hetriever.commands.search import print_results, run_search
from hetriever.core.errors import HetrieverError
from hetriever.discover.repositories import configured_repositories
from hetriever.search.request import SearchRequest

DEMO_DIR = Path(".demo")
DEMO_QUERY = "how do I filter a collection with where"


def _sample_docs_source() -> Path:
    here = Path(__file__).resolve().parents[2] / "examples" / "sample-docs"
    if not here.is_dir():
        raise HetrieverError(
            "the bundled sample docs are missing",
            hint="run the demo from a checkout of the hetriever repository",
        )
    return here


_DEMO_AUTHOR = {
    "GIT_AUTHOR_NAME": "hetriever",
    "GIT_AUTHOR_EMAIL": "demo@example.invalid",
    "GIT_COMMITTER_NAME": "hetriever",
    "GIT_COMMITTER_EMAIL": "demo@example.invalid",
}


def _git(cwd: Path, *argv: str) -> None:
    from hetriever.discover.git_runner import git_output

    git_output(cwd, *argv, env=_DEMO_AUTHOR)


def _demo_docs(root: Path) -> Path:
    repo = root / "docs" / "sample-docs"
    source = _sample_docs_source()
    if repo.exists():
        shutil.rmtree(repo)
    shutil.copytree(source, repo)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "sample docs")
    return root / "docs"


def cmd_demo(args: argparse.Namespace) -> int:
    docs_root = _demo_docs(DEMO_DIR)
    args.docs_root = str(docs_root)
    args.chroma_path = str(DEMO_DIR / "chroma_data")
    from hetriever.commands.output import joined

    settings = cli_settings(args, state_dir=str(DEMO_DIR / ".hetriever"))
    console = make_console()
    console.print(
        joined(("1. ingest", "bold"), f" {docs_root}/sample-docs -> {settings.chroma_path}")
    )
    repos = configured_repositories(settings)
    outcomes = asyncio.run(ingest_local(settings, repos, False, show_progress=True))
    print_ingest(outcomes)
    if not all(o["ok"] for o in outcomes):
        return EXIT_FAILED
    query = args.query or DEMO_QUERY
    console.print()
    console.print(joined(("2. search", "bold"), f" {query!r}"))
    result = run_search(settings, SearchRequest(query, 3))
    print_results(result, settings)
    return EXIT_OK if result.matches else EXIT_FAILED
