"""discover stage as a Prefect task: find the repositories (planning is part of
`hetriever.index.indexing.index_repository`, which the ingest flow calls)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from hetriever.core.config import Settings
from hetriever.discover.repositories import Repository, configured_repositories
from hetriever.index.file_retry import RETRIES, RETRY_DELAYS, RETRY_JITTER
from tasks.retry import retry_transient


@task(
    name="discover-repositories",
    cache_policy=NONE,
    retries=RETRIES,
    retry_delay_seconds=RETRY_DELAYS,
    retry_jitter_factor=RETRY_JITTER,
    retry_condition_fn=retry_transient,
)
def discover_task(settings: Settings) -> list[Repository]:
    return configured_repositories(settings)
