"""Retrying a call with exponential backoff and jitter (tenacity), one policy for the store.

The n-th retry waits `base * 2**(n-1)` seconds, at most `cap`, times a random factor in
[0.5, 1): many writers failing together do not retry in step.
"""

from __future__ import annotations

import random
from typing import Any

import tenacity

from hetriever.core.logs import get_logger

log = get_logger(__name__)

RETRY_BASE_SECONDS = 0.2
RETRY_MAX_SECONDS = 3.0


def jittered(base: float = RETRY_BASE_SECONDS, cap: float = RETRY_MAX_SECONDS):
    """A tenacity wait: exponential from `base`, capped at `cap`, with jitter."""

    def wait(state: tenacity.RetryCallState) -> float:
        return min(cap, base * 2 ** (state.attempt_number - 1)) * random.uniform(0.5, 1.0)

    return wait


def retrying(
    attempts: int, retry_on: tuple[type[BaseException], ...], event: str, **fields: Any
) -> tenacity.Retrying:
    """Up to `attempts` calls while the error is one of `retry_on`; each retry is logged as
    `event` (with `fields`, the attempt, the delay and the error). The last error is raised
    as it is, for the caller to turn into its own."""

    def logged(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        delay = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            event, **fields, attempt=state.attempt_number, delay=round(delay, 3), error=str(error)
        )

    return tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts),
        wait=jittered(),
        retry=tenacity.retry_if_exception_type(retry_on),
        before_sleep=logged,
        reraise=True,
    )
