"""A run's progress by chunk, with a rate and an ETA, moving with each embedded batch.

Files come back from the per-file step (files done of files to index); their chunks are stored
a write window at a time, and while a window is embedded every batch the embedder finishes
moves the count on (`hetriever.embed.progress`). The total number of chunks is known only once
every file is processed, so until then it is estimated from the files done (their chunks per
file times the files to index). `index_progress` is logged at the first news, after each window
and every `LOG_EVERY` seconds: when no batch finishes for that long (a window's Chroma write on
a busy machine), a heartbeat thread says where the run stands, so a flow run's log never goes
quiet for longer.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from hetriever.core.logs import get_logger
from hetriever.core.models import IndexResult

# The run's events keep the logger they were always logged under.
log = get_logger("hetriever.index.indexing")

LOG_EVERY = 9.0  # seconds between two index_progress lines at most (one every 10 s or more often)
BEAT = 0.5  # how often the heartbeat looks


@dataclass(frozen=True)
class ProgressSnapshot:
    repository: str
    files_done: int
    files_total: int
    chunks_done: int  # stored (embedded and written, or reused) and embedded so far
    chunks_total: int  # every chunk of the run once all files are processed, else an estimate
    chunks_embedded: int
    elapsed_s: float
    chunks_per_s: float
    eta_s: float | None  # None until something is done

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        """One line for a person: `hugo-docs: 1,200/3,800 chunks (~), 61 files of 400, ...`."""
        eta = "" if self.eta_s is None else f", ETA {self.eta_s:.0f} s"
        about = "~" if self.files_done < self.files_total else ""
        return (
            f"{self.repository}: {self.chunks_done}/{about}{self.chunks_total} chunks, "
            f"{self.files_done}/{self.files_total} files, {self.chunks_per_s:.1f} chunks/s"
            f"{eta}, {self.elapsed_s:.0f} s"
        )


class RunProgress:
    """Counts files as they come back and chunks as they are embedded and stored; tells
    `on_file(done, total)` per file and `on_update(snapshot)` at every change."""

    def __init__(
        self,
        repository: str,
        total_files: int,
        on_file: Callable[[int, int], None] | None = None,
        on_update: Callable[[ProgressSnapshot], None] | None = None,
        log_every: float = LOG_EVERY,
    ) -> None:
        self.repository, self.total, self.on_file = repository, total_files, on_file
        self.on_update, self.log_every = on_update, log_every
        self.done = 0
        self.chunks_seen = 0  # chunks of the files processed so far
        self.chunks_stored = 0  # written or reused, by the windows written so far
        self.embedded_in_window = 0  # embedded by the window being written
        self.embedded_total = 0
        self.started = time.perf_counter()
        self._logged_at: float | None = None
        self._lock = threading.Lock()  # embedded batches are told from the writer's thread

    def snapshot(self) -> ProgressSnapshot:
        elapsed = max(time.perf_counter() - self.started, 1e-6)
        if self.done >= self.total or not self.done:
            total = self.chunks_seen
        else:
            total = round(self.chunks_seen / self.done * self.total)
        done = min(self.chunks_stored + self.embedded_in_window, max(total, 0))
        rate = done / elapsed
        eta = (max(total - done, 0) / rate) if rate > 0 else None
        return ProgressSnapshot(
            self.repository,
            self.done,
            self.total,
            done,
            total,
            self.embedded_total,
            round(elapsed, 1),
            round(rate, 1),
            None if eta is None else round(eta, 1),
        )

    def _changed(self, *, force_log: bool = False) -> None:
        snap = self.snapshot()
        now = time.perf_counter()
        if force_log or self._logged_at is None or now - self._logged_at >= self.log_every:
            self._logged_at = now
            log.info(
                "index_progress",
                repository=self.repository,
                files=f"{snap.files_done}/{snap.files_total}",
                chunks=f"{snap.chunks_done}/{snap.chunks_total}",
                chunks_embedded=snap.chunks_embedded,
                chunks_per_s=snap.chunks_per_s,
                eta_s=snap.eta_s,
            )
        if self.on_update:
            self.on_update(snap)

    def file_done(self, chunks: int = 0) -> None:
        with self._lock:
            self.done += 1
            self.chunks_seen += chunks
            if self.on_file:
                self.on_file(self.done, self.total)
            self._changed()

    def embedded(self, count: int) -> None:
        """A batch of the window being written is embedded (the writer's thread)."""
        with self._lock:
            self.embedded_in_window += count
            self.embedded_total += count
            self._changed()

    def window_written(self, files: int, result: IndexResult) -> None:
        with self._lock:
            self.chunks_stored = result.chunks_written + result.chunks_reused
            self.embedded_in_window = 0
            self._changed(force_log=True)

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(BEAT):
            with self._lock:
                if (
                    self._logged_at is not None
                    and time.perf_counter() - self._logged_at >= self.log_every
                ):
                    self._changed()

    @contextmanager
    def heartbeat(self) -> Iterator[None]:
        """While the block runs, a quiet spell of `log_every` seconds is logged anyway. The
        thread runs in a copy of this context: inside a flow run, its lines reach the run."""
        stop = threading.Event()
        context = contextvars.copy_context()
        thread = threading.Thread(
            target=context.run, args=(self._beat, stop), name="index-progress", daemon=True
        )
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)
