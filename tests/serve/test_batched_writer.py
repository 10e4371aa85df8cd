"""The background writer behind served metrics and analytics: batches, a failed write costs
its rows and reopens the file, flush waits, close stops the thread."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from hetriever.serve.batched_writer import FLUSH_EVERY, BatchedWriter


class _Rows:
    """A real SQLite file the writer appends to; `fail_next` makes the next write raise."""

    opened = 0

    def __init__(self, path: Path, fail_next: threading.Event) -> None:
        type(self).opened += 1
        self.db = sqlite3.connect(path, check_same_thread=False)
        self.db.execute("CREATE TABLE IF NOT EXISTS rows (n INTEGER, batch INTEGER)")
        self.fail_next = fail_next

    def write(self, rows: list[int]) -> None:
        if self.fail_next.is_set():
            self.fail_next.clear()
            raise sqlite3.OperationalError("database or disk is full")
        batch = self.db.execute("SELECT COALESCE(MAX(batch), 0) + 1 FROM rows").fetchone()[0]
        self.db.executemany("INSERT INTO rows VALUES (?, ?)", [(n, batch) for n in rows])
        self.db.commit()

    def close(self) -> None:
        self.db.close()


def _written(path: Path) -> list[tuple[int, int]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT n, batch FROM rows ORDER BY n").fetchall()


def test_rows_are_written_in_batches_and_flush_waits_for_them(tmp_path):
    path, fail = tmp_path / "rows.sqlite3", threading.Event()
    writer: BatchedWriter[int, _Rows] = BatchedWriter(
        "rows", lambda: _Rows(path, fail), lambda sink, rows: sink.write(rows)
    )
    for n in range(3 * FLUSH_EVERY):
        writer.put(n)
    writer.flush()
    rows = _written(path)
    assert [n for n, _ in rows] == list(range(3 * FLUSH_EVERY))
    batches: dict[int, int] = {}
    for _, batch in rows:
        batches[batch] = batches.get(batch, 0) + 1
    assert max(batches.values()) <= FLUSH_EVERY
    writer.close()
    assert not writer._thread.is_alive()


def test_a_failed_write_costs_its_rows_and_the_file_is_opened_afresh(tmp_path):
    path, fail = tmp_path / "rows.sqlite3", threading.Event()
    _Rows.opened = 0
    writer: BatchedWriter[int, _Rows] = BatchedWriter(
        "rows", lambda: _Rows(path, fail), lambda sink, rows: sink.write(rows)
    )
    writer.put(1)
    writer.flush()
    fail.set()
    writer.put(2)
    writer.flush()
    writer.put(3)
    writer.flush()
    writer.close()
    assert [n for n, _ in _written(path)] == [1, 3]
    assert _Rows.opened == 2
