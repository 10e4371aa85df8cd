"""Which failures are worth retrying, for Prefect tasks: the per-file policy of
`hetriever.index.file_retry`, which the in-process mapper follows too."""

from __future__ import annotations

from hetriever.index.file_retry import is_transient


def retry_transient(task, task_run, state) -> bool:
    """`retry_condition_fn` for Prefect tasks."""
    exc = state.data if isinstance(state.data, BaseException) else None
    if exc is None:
        try:
            state.result(raise_on_failure=True)
        except BaseException as raised:  # noqa: BLE001 - we only classify it
            exc = raised
    return is_transient(exc)
