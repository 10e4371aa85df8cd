"""parse -> clean -> chunk as Prefect tasks: one task run per file, or per group of files in a
run of more than MAX_TASK_RUNS files."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import math
from collections.abc import AsyncIterator, Callable, Iterable
from functools import partial
from typing import Any

from prefect import task
from prefect.cache_policies import NONE
from prefect.context import FlowRunContext, SyncClientContext
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import quote

from hetriever.core.config import Settings
from hetriever.discover.git_objects import SkipFile
from hetriever.discover.repositories import Repository
from hetriever.index.file_retry import (
    RETRIES,
    RETRY_DELAYS,
    RETRY_JITTER,
    failed_outcome,
    retry_file,
)
from hetriever.index.indexing import FileWork
from hetriever.index.process import FileOutcome, IncludeResolver, process_file
from tasks.retry import retry_transient

# Task runs of one repository's run, at most (about): past it, files go in groups, one task
# run each. Each task run costs ~3 ms in the flow's process and ~6 ms of the Prefect server's
# CPU (its three state events), on the cores the embedder uses: one per file took a full
# hugo-docs ingest (992 files) to 1.10x the in-process run, in groups of 10 to 1.01x
# (bench/README.md, "bench_flow"). A run of at most this many files (a webhook's push, most
# scheduled runs) keeps a task run per file.
MAX_TASK_RUNS = 100


def group_size(files: int) -> int:
    """Files per task run for a run of `files` files."""
    return max(1, math.ceil(files / MAX_TASK_RUNS))


def run_label(paths: list[str]) -> str:
    """A task run's name after `process-`: its file, or its first file and how many more."""
    return paths[0] if len(paths) == 1 else f"{paths[0]} (+{len(paths) - 1} more)"


@task(
    name="process-file",
    task_run_name="process-{label}",
    cache_policy=NONE,
    retries=RETRIES,
    retry_delay_seconds=RETRY_DELAYS,
    retry_jitter_factor=RETRY_JITTER,
    retry_condition_fn=retry_transient,
)
def process_files_task(
    repo: Repository,
    files: list[tuple[str, str | SkipFile | None]],
    commit: str,
    settings: Settings,
    label: str,
    resolver: IncludeResolver | None = None,
) -> list[FileOutcome]:
    """`files`: (path, text) pairs, each text read by the run in one batch (None: the task
    reads the file itself); `resolver`: one include cache for the run. A file's transient
    error fails the task run, which is retried whole: a file's work costs a millisecond or
    two, the task run's own bookkeeping more."""
    return [
        process_file(repo, path, commit, settings, text=text, resolver=resolver)
        for path, text in files
    ]


def _hand_over(loop: asyncio.AbstractEventLoop, finished: asyncio.Queue, done: Any) -> None:
    """A finished task run's future, from the runner's thread to the flow's event loop."""
    loop.call_soon_threadsafe(finished.put_nowait, done)


async def _returned(future: Any) -> list[FileOutcome]:
    """A finished task run's return value (or its exception), read on the flow's event loop.
    `future.result()` would look the result up through Prefect's loop thread and block this
    loop until it answers (~2 ms a file in `bench/bench_flow.py --fan-out-only`)."""
    future.wait()  # finished already: records its final state without blocking
    return await future.state.aresult()


async def map_with_tasks(
    files: Iterable[tuple[str, str | SkipFile]], work: FileWork
) -> AsyncIterator[FileOutcome]:
    """The per-file step of `index_repository` as Prefect task runs (visible in the UI,
    retried on transient errors): one per file, or per `group_size` files in a large run.
    A task run out of retries: its one file is a failed outcome; a group's files are done
    again here, each under the per-file policy, so only the file that fails is reported.

    Outcomes are awaited, never waited for: a blocking wait (`as_completed`, `.result()` on a
    pending future) would stall the flow's event loop while the writer and Prefect's own
    callbacks need it.

    The task runs are submitted from a context holding one entered Prefect sync client, which
    the runner's threads share. The flow is async, so its context holds none, and without one
    every task run built two sync clients of its own (each a new TLS context: ~60 ms of CPU
    per task run, most of the flow's overhead over the in-process run).
    """
    loop = asyncio.get_running_loop()
    finished: asyncio.Queue = asyncio.Queue()
    # quote(): Prefect would otherwise walk (and rebuild) every dataclass argument of every
    # task run looking for futures; these hold none. Only for in-process thread runners: a
    # quote pickled to a Dask worker arrives as a plain tuple.
    runner = getattr(FlowRunContext.get(), "task_runner", None)
    wrap: Callable[[Any], Any] = (
        quote if isinstance(runner, ThreadPoolTaskRunner) else (lambda value: value)
    )
    repo, settings, resolver = wrap(work.repo), wrap(work.settings), wrap(work.resolver)
    size = group_size(work.files)
    # A context of its own: the client context is set there, not in the caller's (an async
    # generator may be closed from another task, where resetting a context variable fails).
    submitting = contextvars.copy_context()
    client = submitting.run(SyncClientContext.get_or_create)
    submitting.run(client.__enter__)
    try:
        groups = {}
        pairs = iter(files)
        while group := list(itertools.islice(pairs, size)):
            future = submitting.run(
                process_files_task.submit,
                repo,
                wrap(group),
                work.commit,
                settings,
                run_label([path for path, _ in group]),
                resolver=resolver,
            )
            groups[future] = group
            future.add_done_callback(partial(_hand_over, loop, finished))
        for _ in range(len(groups)):
            future = await finished.get()
            group = groups.pop(future)  # its future holds the outcomes: not kept past here
            try:
                outcomes = await _returned(future)
            except Exception as exc:  # retries exhausted: report the file, index the rest
                if len(group) == 1:
                    outcomes = [failed_outcome(work.repo.name, group[0][0], exc)]
                else:
                    outcomes = await asyncio.to_thread(_one_by_one, group, work)
            for outcome in outcomes:
                yield outcome
    finally:
        submitting.run(client.__exit__, None, None, None)


def _one_by_one(group: list[tuple[str, str | SkipFile]], work: FileWork) -> list[FileOutcome]:
    """The files of a group whose task run ran out of retries, each under the per-file
    policy (`retry_file`), here: the others are indexed, the failing one reported alone."""
    return [
        retry_file(work.repo.name, path, partial(work.process, path, text)) for path, text in group
    ]
