"""Warm Dask workers: one model per worker process, kept across runs whose settings differ
only where the index lives (each run's Chroma and state directories).

A real `distributed.LocalCluster` (one worker process, one thread), the real MiniLM model.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hetriever.core.config import load_settings

pytestmark = pytest.mark.slow

TIMEOUT = 120  # seconds any one call to the cluster may take


@pytest.fixture(scope="module")
def cluster_address() -> Iterator[str]:
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        worker_dashboard_address=None,
    ) as cluster:
        yield cluster.scheduler_address


def _held(address: str) -> dict[str, list[int]]:
    """Per worker process: the ids of the embedders it keeps."""
    from distributed import Client

    def held() -> list[int]:
        from hetriever.embed import cluster

        return [id(e) for e in cluster._worker_embedders.values()]

    with Client(address, timeout=TIMEOUT) as client:
        return dict(client.run(held))


def test_runs_with_other_directories_reuse_the_worker_model(cluster_address, tmp_path: Path):
    from hetriever.embed.cluster import KEPT_MODELS, ClusterEmbedder

    base = load_settings(env={})
    vectors = []
    for run in range(3):  # each run its own index directories, as fresh ingests have
        settings = base.replace(
            chroma_path=tmp_path / f"run{run}" / "chroma",
            state_dir=tmp_path / f"run{run}" / "state",
        )
        embedder = ClusterEmbedder(cluster_address, settings, timeout=TIMEOUT)
        try:
            vectors.append(embedder.embed(["range over pages", "where function"]))
        finally:
            embedder.close()
        (kept,) = _held(cluster_address).values()
        assert len(kept) == 1, f"run {run}: the worker holds {len(kept)} models"
        if run == 0:
            first = kept
        assert kept == first  # the same model object, not a reload
    assert all((v == vectors[0]).all() for v in vectors)

    # Another model configuration (here its batch size) loads a second one; past KEPT_MODELS
    # the least recently used is dropped, so the worker never holds more.
    for batch in (7, 9, 11):
        embedder = ClusterEmbedder(
            cluster_address, base.replace(embed_batch_size=batch), timeout=TIMEOUT
        )
        try:
            embedder.embed(["a page"])
        finally:
            embedder.close()
    (kept,) = _held(cluster_address).values()
    assert len(kept) == KEPT_MODELS
