"""One file's failure is that file's: the retry policy of the per-file step, on every engine.

The Prefect task decorator (`tasks/process.py`, through `tasks/retry.py`) and the in-process
mapper (`retry_file`) both retry a file's transient failures with the policy below, and a file
still failing after it becomes the same outcome (`failed_outcome`): filed under the run's
failures, its old chunks kept, the commit left unrecorded, every other file indexed.
"""

from __future__ import annotations

import random
import subprocess
from collections.abc import Callable

import tenacity

from hetriever.core.errors import BackendConnectionError, HetrieverError
from hetriever.core.logs import get_logger
from hetriever.core.models import SkippedFile
from hetriever.index.process import FileOutcome

log = get_logger("hetriever.index.indexing")

# I/O and git hiccups, timeouts: a retry can succeed. Deterministic errors (a ValueError from
# bad content, a configuration error, a lost backend connection) are not retried.
TRANSIENT = (OSError, TimeoutError, subprocess.SubprocessError)

RETRIES = 3  # after the first attempt
# Seconds before each retry: Prefect's exponential_backoff(backoff_factor=0.5), written out so
# the in-process mapper waits the same without importing Prefect.
RETRY_DELAYS = [0.5 * 2**n for n in range(RETRIES)]
RETRY_JITTER = 0.5  # each delay moved by up to this share, so failing files do not retry in step
FAILED_PREFIX = "failed after retries"


def is_transient(exc: BaseException | None) -> bool:
    if isinstance(exc, BackendConnectionError):
        return False  # fail fast on connection loss
    if isinstance(exc, HetrieverError):
        return False
    return isinstance(exc, TRANSIENT)


def failure_reason(exc: BaseException) -> str:
    return f"{FAILED_PREFIX}: {type(exc).__name__}: {exc}"


def failed_outcome(repository: str, path: str, exc: BaseException) -> FileOutcome:
    """A file out of retries (or failing for good): reported, the rest of the run goes on."""
    reason = failure_reason(exc)
    log.error("file_failed", repository=repository, path=path, error=reason)
    return FileOutcome(path, failed=reason)


def _wait(state: tenacity.RetryCallState) -> float:
    delay = RETRY_DELAYS[min(state.attempt_number, RETRIES) - 1]
    return delay * random.uniform(1 - RETRY_JITTER / 2, 1 + RETRY_JITTER / 2)


def _logged(repository: str, path: str) -> Callable[[tenacity.RetryCallState], None]:
    def before_sleep(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        log.warning(
            "file_retry",
            repository=repository,
            path=path,
            attempt=state.attempt_number,
            error=f"{type(error).__name__}: {error}",
        )

    return before_sleep


def retry_file(repository: str, path: str, step: Callable[[], FileOutcome]) -> FileOutcome:
    """`step()` for one file under the retry policy; its failure becomes the file's outcome."""
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(RETRIES + 1),
        wait=_wait,
        retry=tenacity.retry_if_exception(is_transient),
        before_sleep=_logged(repository, path),
        reraise=True,
    )
    try:
        return retrying(step)
    except Exception as exc:  # out of retries, or not worth one: this file's failure alone
        return failed_outcome(repository, path, exc)


def failed_files_error(failed: list[SkippedFile]) -> str:
    """A run's failed files, by name and cause: what the CLI and the flow report."""
    shown = "; ".join(f"{f.path}: {f.reason}" for f in failed[:3])
    more = f"; and {len(failed) - 3} more (`hetriever status --json`)" if len(failed) > 3 else ""
    return (
        f"{len(failed)} file(s) could not be indexed ({shown}{more}); every other file is "
        "indexed, the commit was not recorded, so the next ingest retries them"
    )
