"""parse -> clean -> chunk for one file, as a Prefect task (fanned out one run per file)."""

from __future__ import annotations

import asyncio
import contextvars
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
from hetriever.index.file_retry import RETRIES, RETRY_DELAYS, RETRY_JITTER, failed_outcome
from hetriever.index.indexing import FileWork
from hetriever.index.process import FileOutcome, IncludeResolver, process_file
from tasks.retry import retry_transient


@task(
    name="process-file",
    task_run_name="process-{path}",
    cache_policy=NONE,
    retries=RETRIES,
    retry_delay_seconds=RETRY_DELAYS,
    retry_jitter_factor=RETRY_JITTER,
    retry_condition_fn=retry_transient,
)
def process_file_task(
    repo: Repository,
    path: str,
    commit: str,
    settings: Settings,
    text: str | SkipFile | None = None,
    resolver: IncludeResolver | None = None,
) -> FileOutcome:
    """`text` (read by the run in one batch) and `resolver` (one include cache for the run)
    are optional: without them the task reads the file itself."""
    return process_file(repo, path, commit, settings, text=text, resolver=resolver)


def _hand_over(loop: asyncio.AbstractEventLoop, finished: asyncio.Queue, done: Any) -> None:
    """A finished task run's future, from the runner's thread to the flow's event loop."""
    loop.call_soon_threadsafe(finished.put_nowait, done)


async def _returned(future: Any) -> FileOutcome:
    """A finished task run's return value (or its exception), read on the flow's event loop.
    `future.result()` would look the result up through Prefect's loop thread and block this
    loop until it answers (~2 ms a file in `bench/bench_flow.py --fan-out-only`)."""
    future.wait()  # finished already: records its final state without blocking
    return await future.state.aresult()


async def map_with_tasks(
    files: Iterable[tuple[str, str | SkipFile]], work: FileWork
) -> AsyncIterator[FileOutcome]:
    """The per-file step of `index_repository` as one task run per file (visible in the UI,
    retried on transient errors); a file out of retries comes back as a failed outcome.

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
    # A context of its own: the client context is set there, not in the caller's (an async
    # generator may be closed from another task, where resetting a context variable fails).
    submitting = contextvars.copy_context()
    client = submitting.run(SyncClientContext.get_or_create)
    submitting.run(client.__enter__)
    try:
        paths = {}
        for path, text in files:
            future = submitting.run(
                process_file_task.submit,
                repo,
                path,
                work.commit,
                settings,
                text=wrap(text),
                resolver=resolver,
            )
            paths[future] = path
            future.add_done_callback(partial(_hand_over, loop, finished))
        for _ in range(len(paths)):
            future = await finished.get()
            path = paths.pop(future)  # its future holds the outcome: not kept past here
            try:
                outcome = await _returned(future)
            except Exception as exc:  # retries exhausted: report the file, index the rest
                outcome = failed_outcome(work.repo.name, path, exc)
            yield outcome
    finally:
        submitting.run(client.__exit__, None, None, None)
