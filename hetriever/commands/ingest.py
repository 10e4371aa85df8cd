"""`hetriever ingest`: in-process, or as the Prefect ingest flow."""

from __future__ import annotations

import argparse
import asyncio
from contextlib import ExitStack, contextmanager

from hetriever.commands import reserve
from hetriever.commands.common import (
    EXIT_FAILED,
    EXIT_OK,
    cli_settings,
    index_location,
    make_console,
    note_location,
    print_json,
)
from hetriever.core.errors import HetrieverError, UserError


def progress_bar(show: bool, console=None):
    """A rich Progress by chunk (done of total, the total estimated until every file is
    processed), with the rate, the ETA and the files; on stderr."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[chunks]} chunks"),
        TextColumn("{task.fields[rate]}"),
        TextColumn("{task.fields[eta]}"),
        TextColumn("{task.fields[files]}"),
        TimeElapsedColumn(),
        console=console or make_console(stderr=True),
        disable=not show,
        transient=True,
    )


def show_snapshot(progress, task, snap) -> None:
    about = "~" if snap.files_done < snap.files_total else ""
    progress.update(
        task,
        completed=snap.chunks_done,
        total=max(snap.chunks_total, 1),
        chunks=f"{snap.chunks_done}/{about}{snap.chunks_total}",
        rate=f"{snap.chunks_per_s:.1f}/s",
        eta="" if snap.eta_s is None else f"ETA {snap.eta_s:.0f} s",
        files=f"{snap.files_done}/{snap.files_total} files",
    )


PROGRESS_EVENT = "index_progress"  # hetriever.index.progress


def _drop_progress(_logger, _name, event_dict):
    """The live bar shows what an index_progress line would say."""
    import structlog

    if event_dict.get("event") == PROGRESS_EVENT:
        raise structlog.DropEvent
    return event_dict


@contextmanager
def logs_through(progress, show: bool):
    """While the bar is up, log lines go through its console (above the bar, which stays
    whole): rich redirects sys.stderr then, and the log's printer is pointed at it. On a
    terminal the bar replaces the index_progress lines; elsewhere (a pipe, CI) rich draws no
    bar and the lines stay."""
    import sys

    from hetriever.core.logs import logging_restored

    if not show:
        yield
        return
    with logging_restored() as structlog:
        processors = structlog.get_config()["processors"]
        live = progress.console.is_terminal
        structlog.configure(
            logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
            processors=[_drop_progress, *processors] if live else processors,
        )
        yield


async def ingest_local(settings, repos, force_full: bool, show_progress: bool) -> list[dict]:
    """The ingest in this process (`hetriever.index.ingest`), with the progress bar; a full or
    read-only disk stops it and is raised, said once, as the command's error."""
    from hetriever.index.ingest import ingest_repositories
    from hetriever.store.knowledge_store import get_knowledge_store

    store = get_knowledge_store(settings)
    store.catalog  # a state directory made for another index is refused before any repository
    with progress_bar(show_progress) as progress, logs_through(progress, show_progress):

        def progress_for(repo):
            task = progress.add_task(
                f"indexing {repo.name}", total=None, chunks="", rate="", eta="", files=""
            )
            return lambda snap: show_snapshot(progress, task, snap)

        outcomes = await ingest_repositories(
            repos, store, settings, force_full=force_full, progress_for=progress_for
        )
    stopped = next((o.storage for o in outcomes if o.storage is not None), None)
    if stopped is not None:
        raise stopped
    return [o.to_dict() for o in outcomes]


def print_ingest(outcomes: list[dict], where: str = "") -> None:
    """One row per repository; a failed one shows what it did get done (the flow's failure
    carries its counts) and its whole error below the table, never cut into a column. Names,
    paths and errors as written (`hetriever.commands.output`)."""
    from rich.table import Table

    from hetriever.commands.output import plain

    table = Table(title=plain("ingest" + (f" into {where}" if where else "")))
    for col in (
        "repository",
        "mode",
        "commit",
        "indexed",
        "skipped",
        "deleted",
        "chunks +",
        "reused",
        "chunks -",
        "seconds",
    ):
        table.add_column(col)
    for o in outcomes:
        mode = plain(o.get("mode", "")) if o["ok"] else plain("failed", "red")
        has_counts = "files_indexed" in o
        table.add_row(
            plain(o["repository"]),
            mode,
            o.get("new_commit", "")[:12],
            *(
                [
                    str(o["files_indexed"]),
                    str(len(o["skipped"])),
                    str(o["files_deleted"]),
                    str(o["chunks_written"])
                    # of them, with vectors another version held (embedded once across them)
                    + (f" ({o['chunks_borrowed']} borrowed)" if o.get("chunks_borrowed") else ""),
                    str(o["chunks_reused"]),
                    str(o["chunks_deleted"]),
                    f"{o['total_seconds']:.1f}",
                ]
                if has_counts
                else [""] * 7
            ),
        )
    console = make_console()
    console.print(table)
    for o in outcomes:
        if not o["ok"]:
            error = str(o.get("error", ""))
            error = error.removeprefix(f"{o['repository']}: ")  # the flow's names it already
            console.print(plain(f"{o['repository']}: {error}", "red"))


def run_ingest_flow(args: argparse.Namespace, settings) -> list[dict]:
    """The ingest flow in this process; one outcome per repository. Against PREFECT_API_URL
    when one is configured, else against a temporary server of its own
    (deployments.temporary_server: outside this process, with hetriever's server settings,
    stopped at the end)."""
    import os
    import signal

    import httpx

    from deployments.temporary_server import make_prefect_home, temporary_server

    make_prefect_home()
    from prefect.client.schemas.objects import State
    from prefect.exceptions import TerminationSignal
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_UI_URL,
        get_current_settings,
        temporary_settings,
    )

    with ExitStack() as stack:
        if not get_current_settings().api.url:
            timeout = float(
                os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
            )
            server = stack.enter_context(temporary_server(timeout))
            # No "View at" links: the server has no UI and stops with this command.
            stack.enter_context(
                temporary_settings({PREFECT_API_URL: server.api_url, PREFECT_UI_URL: ""})
            )
        from flows.ingest import ingest

        try:
            # A flow called with return_state=True returns a coroutine of its State.
            # This command's settings, whole: the flow reads nothing again.
            run = ingest(
                repositories=args.repository or None,
                force_full=args.full,
                task_runner=args.task_runner,
                settings=settings,
                return_state=True,
            )
            try:
                state: State = asyncio.run(run)  # type: ignore[arg-type]
            except TerminationSignal as exc:
                # Prefect's engine holds SIGTERM while a flow runs and raises this instead; the
                # runs it stopped are closed by now. The handler it stood in for takes over.
                signal.raise_signal(exc.signal)
                raise
            summary = state.result(raise_on_failure=False)
        except (RuntimeError, httpx.HTTPError) as exc:  # the Prefect API cannot be reached,
            # or stopped answering during the run: the runs' record is incomplete, so say so
            raise HetrieverError(
                f"Prefect is not available: {exc or type(exc).__name__}",
                hint="set PREFECT_API_URL to a running server, or use "
                "--engine local; `hetriever status` shows what the "
                "index holds",
            ) from None
    if not isinstance(summary, dict):  # the flow failed before any repository ran
        raise (
            summary
            if isinstance(summary, HetrieverError)
            else HetrieverError(f"the ingest flow failed: {state.message or summary}")
        )
    return summary["repositories"]


def note_behind(settings, repos, outcomes: list[dict]) -> None:
    """On stderr, per repository whose followed branch has commits this run did not index
    (as of the last fetch): that it is behind, and the by-hand update."""
    import sys

    from hetriever.core.terminal import terminal_safe
    from hetriever.discover.upstream import upstream_advice

    waiting = {o["repository"]: o for o in outcomes if o["ok"] and o.get("behind_upstream")}
    for repo in repos:
        outcome = waiting.get(repo.name)
        if outcome is None:
            continue
        # a completed run indexed the checkout: it is the checkout that is behind
        note = upstream_advice(
            settings.docs_root, repo, outcome, checked_out=outcome.get("mode") != "refused"
        )
        if note:
            print(terminal_safe(f"hetriever: note: {repo.name}: {note}"), file=sys.stderr)


def cmd_ingest(args: argparse.Namespace) -> int:
    from hetriever.discover.repositories import configured_repositories

    if args.allow_mass_delete and not args.full:
        raise UserError(
            "--allow-mass-delete needs --full",
            hint="a run that deletes most of an index must be a full pass",
        )
    settings = cli_settings(
        args, batch_size=args.batch_size, allow_mass_delete=True if args.allow_mass_delete else None
    )
    if args.task_runner and args.engine != "prefect":
        raise UserError(
            "--task-runner needs --engine prefect",
            hint="the task runner is the Prefect flow's; the local engine runs in this process",
        )
    note_location(settings)
    # Discovered once: a docs root without repositories or an unknown name is the user's
    # mistake, said in one line before any server starts.
    repos = configured_repositories(settings, args.repository or None)
    reserve.keep(settings)  # space for reads, should this run fill the disk
    if args.engine == "prefect":
        outcomes = run_ingest_flow(args, settings)
    else:
        outcomes = asyncio.run(
            ingest_local(settings, repos, args.full, show_progress=not args.json)
        )
    reserve.keep(settings)  # the first run made the directories
    if args.json:
        print_json(outcomes)
    else:
        print_ingest(outcomes, index_location(settings))
        note_behind(settings, repos, outcomes)
    return EXIT_OK if all(o["ok"] for o in outcomes) else EXIT_FAILED
