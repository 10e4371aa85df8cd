"""A run's progress moves by chunk with each embedded batch, not once per write window; it
carries a rate and an ETA, is logged at once and then at least every few seconds, and the CLI's
log lines go through the bar's console."""

from __future__ import annotations

import asyncio

from hetriever.core.models import IndexResult
from hetriever.discover.repositories import discover_repositories
from hetriever.embed import progress as embedding_progress
from hetriever.index import progress as run_progress
from hetriever.index.indexing import index_repository
from hetriever.index.progress import RunProgress
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import store_settings
from tests.support.helpers import build_sample_parent


def test_chunks_move_between_windows_and_the_total_is_estimated():
    seen = []
    tracker = RunProgress("docs", 4, on_update=seen.append)
    tracker.file_done(10)
    snap = seen[-1]
    assert (snap.files_done, snap.chunks_total, snap.chunks_done) == (1, 40, 0)  # 10 x 4 files
    assert snap.eta_s is None and "~40 chunks" in snap.line()
    tracker.file_done(30)
    tracker.embedded(8)  # a batch of the first window
    tracker.embedded(8)
    assert seen[-1].chunks_done == 16 and seen[-1].chunks_embedded == 16
    assert seen[-1].eta_s is not None and seen[-1].chunks_per_s > 0
    tracker.window_written(
        2,
        IndexResult(
            repository="docs",
            mode="full",
            old_commit=None,
            new_commit="a",
            chunks_written=30,
            chunks_reused=10,
        ),
    )
    assert seen[-1].chunks_done == 40
    tracker.file_done(0)
    tracker.file_done(0)  # every file processed: the total is exact
    assert seen[-1].chunks_total == 40 and "/40 chunks" in seen[-1].line()


def test_index_progress_is_logged_first_then_throttled(monkeypatch):
    lines = []
    monkeypatch.setattr(run_progress.log, "info", lambda event, **kw: lines.append(kw))
    tracker = RunProgress("docs", 100, log_every=3600)
    tracker.file_done(5)  # the first news is logged at once
    for _ in range(50):
        tracker.embedded(2)  # within the interval: not logged again
    assert len(lines) == 1 and lines[0]["files"] == "1/100"
    tracker.window_written(
        1,
        IndexResult(
            repository="docs", mode="full", old_commit=None, new_commit="a", chunks_written=5
        ),
    )
    assert len(lines) == 2  # and after each window
    every_tick = RunProgress("docs", 100, log_every=0)
    every_tick.embedded(1)
    every_tick.embedded(1)
    assert len(lines) == 4


def test_the_embedder_tells_its_batches_to_the_run_that_listens(minilm_embedder):
    heard: list[int] = []
    with embedding_progress.listening(heard.append):
        minilm_embedder.embed([f"text number {i} " * (i % 40 + 1) for i in range(100)])
    assert sum(heard) == 100 and len(heard) > 1  # per batch, not per call
    minilm_embedder.embed(["nobody listens"])
    assert sum(heard) == 100


def test_a_real_run_moves_per_embedded_batch(tmp_path, minilm_embedder):
    parent, _ = build_sample_parent(tmp_path)
    (repo,) = [r for r in discover_repositories(parent) if r.name == "sample-docs"]
    settings = store_settings(tmp_path)  # one write window holds the whole sample
    store = Store(settings, embedder=minilm_embedder)
    seen = []
    try:
        result = asyncio.run(index_repository(repo, store, settings, on_progress=seen.append))
    finally:
        store.close_sync()
    assert result.completed and result.chunks_written > 0
    during_window = [s.chunks_done for s in seen if s.files_done == s.files_total]
    # The one window's chunks counted up batch by batch before it was written.
    assert len(set(during_window)) > 2
    assert seen[-1].chunks_done == seen[-1].chunks_total == result.chunks_written


def test_the_cli_bar_takes_the_log_lines():
    """A log line during the bar is printed through the bar's console, whole, above it."""
    import io

    from rich.console import Console

    from hetriever.commands.ingest import logs_through, progress_bar
    from hetriever.core.logs import get_logger

    screen = io.StringIO()
    bar = progress_bar(True, Console(file=screen, force_terminal=True, width=100))
    with bar, logs_through(bar, True):
        task = bar.add_task(
            "indexing docs", total=10, chunks="3/10", rate="1.0/s", eta="ETA 7 s", files="1/2 files"
        )
        bar.update(task, completed=3)
        get_logger("hetriever.test").warning("a_line_in_the_middle", path="x.md")
    text = screen.getvalue()
    assert "a_line_in_the_middle" in text and "path=x.md" in text.replace("\x1b[0m", "")
    assert "ETA 7 s" in text


def test_a_quiet_spell_is_logged_by_the_heartbeat(monkeypatch):
    """No batch finishes (a long Chroma write): the run's log still says where it stands."""
    import threading

    lines = []
    said = threading.Event()

    def info(event, **kw):
        lines.append(kw)
        if len(lines) >= 2:
            said.set()

    monkeypatch.setattr(run_progress.log, "info", info)
    monkeypatch.setattr(run_progress, "BEAT", 0.01)
    tracker = RunProgress("docs", 10, log_every=0.05)
    with tracker.heartbeat():
        tracker.file_done(3)  # the first line; then nothing happens
        assert said.wait(timeout=30), lines
    assert lines[1]["files"] == "1/10"
