"""Embedding throughput in the flow process vs on 1 and 2 Dask worker processes.

The texts are real chunks of hugo-docs v2 (`../shared/corpora`; the bundled sample docs
repeated when absent), embedded in write windows of `write_window` chunks, as the store sends
them. Configurations:
- `in-process`: the flow process's own model (what the threads runner does), default threads;
- `1 worker x N threads`, `2 workers x 1 thread`: `hetriever.embed.cluster.ClusterEmbedder` against
  a `dask scheduler` and `dask worker` processes started here.
Each row: chunks/s, the median of `--repeat` timed passes after one warm-up window (which
loads the model on every worker).

    python bench/bench_cluster.py [--chunks 3000] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.common import RESULTS_DIR, bench_settings, load_corpus_chunks, load_sample_chunks  # noqa: E402
from deployments.temporary_server import free_port  # noqa: E402
from hetriever.core.logs import configure_logging  # noqa: E402


@contextmanager
def dask_cluster(workers: int, threads: int) -> Iterator[str]:
    from distributed import Client

    dask = str(Path(sys.executable).parent / "dask")
    address = f"tcp://127.0.0.1:{free_port()}"
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port",
                               address.rsplit(":", 1)[1], "--no-dashboard"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    procs += [subprocess.Popen([dask, "worker", address, "--nworkers", "1", "--nthreads",
                                str(threads), "--no-dashboard"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
              for _ in range(workers)]
    try:
        with Client(address, timeout=60) as client:
            client.wait_for_workers(workers, timeout=120)
        yield address
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


def windows(texts: list[str], size: int) -> list[list[str]]:
    return [texts[i:i + size] for i in range(0, len(texts), size)]


def measure(embedder, texts: list[str], window: int, repeat: int) -> float:
    embedder.embed(texts[:window])  # warm-up: loads the model (on every worker)
    rates = []
    for _ in range(repeat):
        began = time.perf_counter()
        for part in windows(texts, window):
            embedder.embed(part)
        rates.append(len(texts) / (time.perf_counter() - began))
    return statistics.median(rates)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    configure_logging("ERROR")
    settings = bench_settings(RESULTS_DIR / "unused")
    corpus = load_corpus_chunks("hugo-docs", settings=settings) or load_sample_chunks(
        40, settings=settings)
    texts = [c.text for c in corpus.chunks][:args.chunks]
    window = settings.write_window
    rows = []

    from hetriever.embed.cluster import ClusterEmbedder
    from hetriever.embed.embedder import get_embedder

    local = get_embedder(settings)
    rows.append({"setup": f"in-process ({getattr(local, 'threads', '?')} threads)",
                 "chunks_per_s": round(measure(local, texts, window, args.repeat), 1)})
    for workers, threads in ((1, 1), (1, 2), (2, 1)):
        with dask_cluster(workers, threads) as address:
            embedder = ClusterEmbedder(address, settings)
            try:
                rate = measure(embedder, texts, window, args.repeat)
            finally:
                embedder.close()
        rows.append({"setup": f"{workers} worker(s) x {threads} thread(s)",
                     "chunks_per_s": round(rate, 1)})
        if not args.json:
            print(rows[-1], flush=True)
    base = next(r for r in rows if r["setup"].startswith("1 worker(s) x 1"))["chunks_per_s"]
    for r in rows:
        r["vs_1_worker"] = round(r["chunks_per_s"] / base, 2)
    out = {"corpus": corpus.source, "chunks": len(texts), "window": window, "rows": rows}
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "bench_cluster-latest.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
