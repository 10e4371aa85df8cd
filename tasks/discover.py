"""discover stage as Prefect tasks: find repositories, poll commits, plan change sets."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from hetriever.config import Settings
from hetriever.discover import discover_repositories
from hetriever.indexing import plan
from hetriever.models import ChangeSet, Repository
from tasks.retry import RETRIES, RETRY_DELAYS, RETRY_JITTER, retry_transient


@task(name="discover-repositories", cache_policy=NONE, retries=RETRIES,
      retry_delay_seconds=RETRY_DELAYS, retry_jitter_factor=RETRY_JITTER,
      retry_condition_fn=retry_transient)
def discover_task(settings: Settings) -> list[Repository]:
    return discover_repositories(settings.docs_root, content_dir=settings.content_dir,
                                 urls=settings.repository_urls)


@task(name="plan-changes", task_run_name="plan-{repo.name}", cache_policy=NONE,
      retries=RETRIES, retry_delay_seconds=RETRY_DELAYS, retry_jitter_factor=RETRY_JITTER,
      retry_condition_fn=retry_transient)
def plan_task(repo: Repository, last_commit: str | None, last_status: str | None,
              force_full: bool) -> ChangeSet:
    return plan(repo, last_commit, last_status, force_full=force_full)
