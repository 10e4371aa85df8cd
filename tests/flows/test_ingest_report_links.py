"""The parent ingest run's summary links each repository's own run, where that repository's
page (`ingest-<name>`) is: a real ingest flow in the Prefect harness over a real git repo."""

from __future__ import annotations

import asyncio
import re

import pytest

from hetriever.store.knowledge_store import clear_store_cache
from tests.support.helpers import build_sample_parent

pytestmark = pytest.mark.prefect


@pytest.fixture
def sample(tmp_path, monkeypatch, minilm_model_dir, prefect_harness):
    parent, _ = build_sample_parent(tmp_path)
    for key, value in {
        "HETRIEVER_DOCS_ROOT": parent,
        "HETRIEVER_CHROMA_PATH": tmp_path / "chroma",
        "HETRIEVER_STATE_DIR": tmp_path / "state",
        "HETRIEVER_MODEL_DIR": minilm_model_dir,
    }.items():
        monkeypatch.setenv(key, str(value))
    clear_store_cache()
    yield
    clear_store_cache()


def test_the_summary_links_the_repository_run_that_holds_its_page(sample):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        ArtifactFilterKey,
    )
    from prefect.settings import PREFECT_UI_URL

    from flows.ingest import ingest

    state = asyncio.run(ingest(return_state=True))
    assert state.is_completed(), state.message
    parent_id = state.state_details.flow_run_id

    async def artifacts(run_id, key):
        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(
                    key=ArtifactFilterKey(any_=[key]),
                    flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]),
                )
            )

    (summary,) = asyncio.run(artifacts(parent_id, "ingest-summary"))
    (row,) = [line for line in summary.data.splitlines() if line.startswith("| sample-docs |")]
    ui = PREFECT_UI_URL.value()
    assert ui, "the harness server has a UI address"
    found = re.search(
        r"\[index-sample-docs\]\((?P<url>[^)]+)/runs/flow-run/(?P<id>[0-9a-f-]+)\)"
        r", artifact `ingest-sample-docs`",
        row,
    )
    assert found and found["url"] == ui.rstrip("/"), row

    # the linked run is the repository's, and its page is there
    async def child():
        async with get_client() as client:
            return await client.read_flow_run(found["id"])

    run = asyncio.run(child())
    assert run.name == "index-sample-docs" and run.parent_task_run_id is not None
    (page,) = asyncio.run(artifacts(run.id, "ingest-sample-docs"))
    assert page.data.startswith("# Ingest of sample-docs: ok")
