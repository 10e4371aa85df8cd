"""The ingest flow (being built): discover -> poll commits -> per-file fan-out -> store."""

from __future__ import annotations

from prefect import flow


@flow(name="ingest", log_prints=True)
def ingest(
    repositories: list[str] | None = None,
    force_full: bool = False,
    batch_size: int | None = None,
    task_runner: str = "threads",
    fetch: bool = False,
    ref: str | None = None,
) -> dict:
    raise NotImplementedError("the ingest flow is being built")
