"""Which failures are worth retrying: transient ones only."""

from __future__ import annotations

import subprocess

from prefect.tasks import exponential_backoff

# I/O and git hiccups, timeouts: a retry can succeed. Deterministic errors (a ValueError from
# bad content, a configuration error, a lost backend connection) are not retried.
TRANSIENT = (OSError, TimeoutError, subprocess.SubprocessError)

RETRIES = 3
RETRY_DELAYS = exponential_backoff(backoff_factor=0.5)
RETRY_JITTER = 0.5


def is_transient(exc: BaseException | None) -> bool:
    from hetriever.core.errors import BackendConnectionError, HetrieverError

    if isinstance(exc, BackendConnectionError):
        return False  # fail fast on connection loss
    if isinstance(exc, HetrieverError):
        return False
    return isinstance(exc, TRANSIENT)


def retry_transient(task, task_run, state) -> bool:
    """`retry_condition_fn` for Prefect tasks."""
    exc = state.data if isinstance(state.data, BaseException) else None
    if exc is None:
        try:
            state.result(raise_on_failure=True)
        except BaseException as raised:  # noqa: BLE001 - we only classify it
            exc = raised
    return is_transient(exc)
