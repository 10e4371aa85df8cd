"""Session-scoped Prefect test harness (shared by flow, deployment and webhook tests).

`prefect_harness` starts one temporary Prefect server (SQLite in a temp dir) for the whole
session: it takes seconds to start, so no test may start its own. Tests that need it carry
`@pytest.mark.prefect`. Helpers on top of it: a process work pool and a deployment of the
ingest flow, for tests that create flow runs without running them (no worker is started).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.helpers import REPO_ROOT

TEST_POOL = "hetriever-test-pool"  # not the real pool: test_deployments creates that one
INGEST_TEST_DEPLOYMENT = "webhook-test"


@dataclass(frozen=True)
class PrefectHarness:
    api_url: str  # e.g. http://127.0.0.1:PORT/api

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for a subprocess (prefect CLI, a worker, a service) using this server."""
        env = {**os.environ, "PREFECT_API_URL": self.api_url, **extra}
        env.pop("PREFECT_PROFILE", None)
        return env


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[PrefectHarness]:
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield PrefectHarness(api_url=PREFECT_API_URL.value())


@pytest.fixture(scope="session")
def prefect_work_pool(prefect_harness: PrefectHarness) -> str:
    """A process work pool on the harness server; nothing polls it, so runs stay Scheduled."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    with get_client(sync_client=True) as client:
        try:
            client.create_work_pool(WorkPoolCreate(name=TEST_POOL, type="process"))
        except ObjectAlreadyExists:
            pass
    return TEST_POOL


@pytest.fixture(scope="session")
def ingest_deployment(prefect_work_pool: str) -> str:
    """A deployment of `flows/ingest.py:ingest` on the harness; returns "ingest/<name>".

    Built from the entrypoint, as `prefect deploy` does: Prefect reads the flow's name and
    parameter schema from the file, so the deployment matches the real flow's signature.
    """
    from prefect.deployments.runner import RunnerDeployment

    cwd = os.getcwd()
    os.chdir(REPO_ROOT)  # the entrypoint is recorded relative to the working directory
    try:
        deployment = RunnerDeployment.from_entrypoint(
            "flows/ingest.py:ingest", name=INGEST_TEST_DEPLOYMENT, work_pool_name=prefect_work_pool
        )
        deployment.apply()
    finally:
        os.chdir(cwd)
    return f"{deployment.flow_name}/{INGEST_TEST_DEPLOYMENT}"
