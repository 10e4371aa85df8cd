"""parse -> clean -> chunk for one file, as a Prefect task (fanned out one run per file)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from hetriever.config import Settings
from hetriever.discover import SkipFile
from hetriever.indexing import FileOutcome, IncludeResolver, process_file
from hetriever.models import Repository
from tasks.retry import RETRIES, RETRY_DELAYS, RETRY_JITTER, retry_transient


@task(name="process-file", task_run_name="process-{path}", cache_policy=NONE,
      retries=RETRIES, retry_delay_seconds=RETRY_DELAYS, retry_jitter_factor=RETRY_JITTER,
      retry_condition_fn=retry_transient)
def process_file_task(repo: Repository, path: str, commit: str, settings: Settings,
                      processed_at: str, text: str | SkipFile | None = None,
                      resolver: IncludeResolver | None = None) -> FileOutcome:
    """`text` (read by the flow in one batch) and `resolver` (one include cache for the run)
    are optional: without them the task reads the file itself."""
    return process_file(repo, path, commit, settings, processed_at=processed_at, text=text,
                        resolver=resolver)
