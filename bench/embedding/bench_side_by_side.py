"""Embedding real chunks with the cores busy elsewhere: batches side by side, one core each
(the default), against one batch at a time across every core.

    python -m bench.embedding.bench_side_by_side [--chunks 1200] [--repeat 3] [--json]

An ingest never has the cores to itself: parse/clean/chunk (Python, holding the GIL), the
Chroma and BM25 writes, and through the flow the per-file task runs and the Prefect server
run while it embeds. Each row embeds the same seeded sample of hugo-docs v2's chunks (as
`index_repository` makes them) with:

- idle: nothing else running;
- a Python thread: a thread of this process busy in pure Python (it holds the GIL, as the
  per-file work does), for the whole pass;
- another process: a process busy on one core for the whole pass (the Prefect server's
  bookkeeping, a neighbour on a shared runner).

The two ways alternate within each repeat; each cell is the median of `--repeat` passes.
"""

from __future__ import annotations

import json
import multiprocessing
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

import numpy as np  # noqa: E402

from bench.common import embedding_bench_args, print_table, settings_embedder  # noqa: E402
from hetriever.embed.embedder import default_threads  # noqa: E402


def _spin(stop: Callable[[], bool]) -> None:
    while not stop():
        sum(i * i for i in range(2000))


def _spin_until(stop) -> None:  # a process target: stop is a multiprocessing Event
    _spin(stop.is_set)


@contextmanager
def idle() -> Iterator[None]:
    yield


@contextmanager
def python_thread() -> Iterator[None]:
    stop = threading.Event()
    thread = threading.Thread(target=_spin, args=(stop.is_set,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextmanager
def another_process() -> Iterator[None]:
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    process = context.Process(target=_spin_until, args=(stop,), daemon=True)
    process.start()
    time.sleep(1.0)  # started (spawn imports this module) before the pass is timed
    try:
        yield
    finally:
        stop.set()
        process.join(timeout=10)


LOADS = {"idle": idle, "a Python thread": python_thread, "another process": another_process}


def main() -> int:
    setup = embedding_bench_args(__doc__.splitlines()[0], chunks=1200)
    if setup is None:
        return 1
    args, texts = setup
    ways = {
        name: settings_embedder(side_by_side=side)
        for name, side in (("side by side", True), ("one at a time", False))
    }
    vectors = {name: e.embed(texts) for name, e in ways.items()}  # also the warm-up
    difference = float(np.abs(vectors["side by side"] - vectors["one at a time"]).max())

    seconds: dict[str, dict[str, list[float]]] = {load: {w: [] for w in ways} for load in LOADS}
    for load, make in LOADS.items():
        for _ in range(args.repeat):
            for name, embedder in ways.items():
                with make():
                    began = time.perf_counter()
                    embedder.embed(texts)
                    seconds[load][name].append(time.perf_counter() - began)
    report = {
        "chunks": len(texts),
        "threads": default_threads(),
        "repeat": args.repeat,
        "max_vector_difference": difference,
        "seconds": {
            load: {w: round(statistics.median(s), 2) for w, s in row.items()}
            for load, row in seconds.items()
        },
        "all_seconds": {
            load: {w: [round(x, 2) for x in s] for w, s in row.items()}
            for load, row in seconds.items()
        },
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"{report['chunks']} hugo-docs v2 chunks, {report['threads']} threads, median of "
        f"{args.repeat}; vectors differ by at most {difference:.1e}"
    )
    print_table(
        ["beside the embedding", "side by side s", "one at a time s", "ratio"],
        [
            [
                load,
                row["side by side"],
                row["one at a time"],
                f"{row['one at a time'] / row['side by side']:.2f}",
            ]
            for load, row in report["seconds"].items()
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
