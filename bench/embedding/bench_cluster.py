"""Embedding throughput in the flow process vs on 1 and 2 Dask worker processes.

The texts are real chunks of hugo-docs v2 (`../shared/corpora`; the bundled sample docs
repeated when absent), embedded in write windows of `write_window` chunks, as the store sends
them. Configurations:
- `in-process`: the flow process's own model (what the threads runner does), default threads;
- `1 worker x N threads`, `2 workers x 1 thread`: `hetriever.embed.cluster.ClusterEmbedder` against
  a `dask scheduler` and `dask worker` processes started here.
Each row: chunks/s, the median of `--repeat` timed passes after one warm-up window (which
loads the model on every worker).

With `--warm-runs N`, the ingest flow instead, through one cluster that stays up (a
scheduler and two 1-thread workers started here, the flow given its address, as an existing
cluster is): N full ingests of `--site` into fresh directories (each worker's RSS after
each), then `--changed` pages edited and committed and indexed, in turn: through the
cluster, the thread runner, "dask" (a local cluster the run starts itself), the cluster, the
thread runner.

    python -m bench.embedding.bench_cluster [--chunks 3000] [--repeat 3] [--json]
    python -m bench.embedding.bench_cluster --warm-runs 5 [--site sample|hugo-docs] [--changed 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
# Prefect's temporary server would otherwise send telemetry (there may be no network) and log
# a locked-database traceback from that service at start.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from bench.common import (  # noqa: E402
    CORPORA,
    RESULTS_DIR,
    SAMPLE_DOCS,
    bench_settings,
    load_corpus_chunks,
    load_sample_chunks,
)
from deployments.temporary_server import free_port  # noqa: E402
from hetriever.core.logs import configure_logging  # noqa: E402


@contextmanager
def dask_cluster(workers: int, threads: int) -> Iterator[str]:
    from distributed import Client

    dask = str(Path(sys.executable).parent / "dask")
    address = f"tcp://127.0.0.1:{free_port()}"
    procs = [
        subprocess.Popen(
            [
                dask,
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                address.rsplit(":", 1)[1],
                "--no-dashboard",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    procs += [
        subprocess.Popen(
            [
                dask,
                "worker",
                address,
                "--nworkers",
                "1",
                "--nthreads",
                str(threads),
                "--no-dashboard",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
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
    return [texts[i : i + size] for i in range(0, len(texts), size)]


def measure(embedder, texts: list[str], window: int, repeat: int) -> float:
    embedder.embed(texts[:window])  # warm-up: loads the model (on every worker)
    rates = []
    for _ in range(repeat):
        began = time.perf_counter()
        for part in windows(texts, window):
            embedder.embed(part)
        rates.append(len(texts) / (time.perf_counter() - began))
    return statistics.median(rates)


# --- warm workers: repeated ingest flow runs through one cluster ---------------------------


def worker_rss(address: str) -> dict[str, float]:
    """Each worker process's resident set (MB), read inside it."""
    from distributed import Client

    def rss() -> float:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    with Client(address, timeout=60) as client:
        return {str(k): round(v, 1) for k, v in client.run(rss).items()}


def site_root(scratch: Path, site: str) -> tuple[Path, Path]:
    """A docs root (a folder of git repos) holding one site; returns (root, its repository)."""
    from tests.support.helpers import commit_all, init_repo

    source = SAMPLE_DOCS if site == "sample" else CORPORA / site / "v2"
    repo = init_repo(scratch / "docs" / site)
    shutil.copytree(source, repo, dirs_exist_ok=True)
    commit_all(repo, f"{site}")
    return scratch / "docs", repo


def change_files(repo: Path, count: int, round_: int) -> None:
    """Edit `count` pages (a line added to each) and commit: a small change."""
    from tests.support.helpers import commit_all

    pages = sorted(
        p
        for p in (repo / "content").rglob("*.md")
        if not any(part.startswith("_") for part in p.relative_to(repo).parts)
    )
    for page in pages[:count]:
        page.write_text(
            page.read_text(encoding="utf-8") + f"\n\nChanged in round {round_}.\n", encoding="utf-8"
        )
    commit_all(repo, f"change {round_}")


def flow_run(root: Path, workdir: Path, runner: str) -> dict[str, Any]:
    """One ingest flow run over `root` into `workdir`: its wall time and repository outcome."""
    from flows.ingest import ingest
    from hetriever.store.knowledge_store import clear_store_cache

    clear_store_cache()
    os.environ.update(
        {
            "HETRIEVER_DOCS_ROOT": str(root),
            "HETRIEVER_CHROMA_PATH": str(workdir / "chroma"),
            "HETRIEVER_STATE_DIR": str(workdir / "state"),
        }
    )
    began = time.perf_counter()
    state = asyncio.run(ingest(task_runner=runner, return_state=True))
    wall = time.perf_counter() - began
    summary = state.result(raise_on_failure=False)
    if not state.is_completed():
        raise SystemExit(f"the ingest flow did not complete: {state.message}: {summary}")
    (outcome,) = summary["repositories"]
    return {
        "wall_s": round(wall, 2),
        "inner_s": round(outcome["total_seconds"], 2),
        "mode": outcome["mode"],
        "chunks_written": outcome["chunks_written"],
        "embedding_s": round(outcome.get("embedding_seconds", 0.0), 2),
    }


def warm(runs: int, site: str, changed: int, say) -> dict[str, Any]:
    """`runs` full ingests into fresh directories through the same two worker processes
    (their RSS after each), then `changed`-file changes through the cluster, the thread
    runner and a local cluster of the run's own."""
    from prefect.testing.utilities import prefect_test_harness

    out: dict[str, Any] = {"site": site, "full_runs": [], "small_change": []}
    with (
        tempfile.TemporaryDirectory(prefix="bench-warm-") as tmp,
        dask_cluster(2, 1) as address,
        prefect_test_harness(server_startup_timeout=120),
    ):
        scratch = Path(tmp)
        root, repo = site_root(scratch, site)
        runner = f"dask:{address}"
        out["workers_rss_mb_idle"] = worker_rss(address)
        for i in range(runs):
            row = {
                "run": i + 1,
                **flow_run(root, scratch / f"full-{i}", runner),
                "workers_rss_mb": worker_rss(address),
            }
            out["full_runs"].append(row)
            say(row)
        # "dask": a local cluster the run starts itself (its workers cold), for comparison
        for round_, lane in enumerate((runner, "threads", "dask", runner, "threads")):
            change_files(repo, changed, round_)
            row = {
                "runner": "dask (existing cluster)" if lane == runner else lane,
                **flow_run(root, scratch / f"full-{runs - 1}", lane),
            }
            out["small_change"].append(row)
            say(row)
    return out


def zeros_on_worker(texts: list[str], settings: Any) -> Any:
    """The texts' round trip without the model: zero vectors of the model's size."""
    import numpy

    return numpy.zeros((len(texts), 384), dtype=numpy.float32)


def measure_transfer(embedder, texts: list[str], window: int, repeat: int) -> float:
    """chunks/s of `embedder`'s windows when the workers only send back zero vectors: what
    sending texts out, scheduling and receiving vectors cost per chunk, without the model."""
    from hetriever.embed import cluster

    real = cluster.embed_on_worker
    cluster.embed_on_worker = zeros_on_worker
    try:
        return measure(embedder, texts, window, repeat)
    finally:
        cluster.embed_on_worker = real


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--warm-runs",
        type=int,
        default=0,
        help="ingest flow runs through one cluster that stays up (0: the throughput table instead)",
    )
    parser.add_argument("--site", default="sample", choices=("sample", "hugo-docs"))
    parser.add_argument("--changed", type=int, default=3)
    args = parser.parse_args(argv)
    configure_logging("ERROR")
    if args.warm_runs:
        os.environ.setdefault("HETRIEVER_LOG_LEVEL", "ERROR")
        result = warm(
            args.warm_runs,
            args.site,
            args.changed,
            (lambda _: None) if args.json else (lambda row: print(row, flush=True)),
        )
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        (RESULTS_DIR / "bench_cluster-warm-latest.json").write_text(json.dumps(result, indent=2))
        print(json.dumps(result, indent=2))
        return 0
    settings = bench_settings(RESULTS_DIR / "unused")
    corpus = load_corpus_chunks("hugo-docs", settings=settings) or load_sample_chunks(
        40, settings=settings
    )
    texts = [c.text for c in corpus.chunks][: args.chunks]
    window = settings.write_window
    rows = []

    from hetriever.embed.cluster import ClusterEmbedder
    from hetriever.embed.embedder import get_embedder

    local = get_embedder(settings)
    rows.append(
        {
            "setup": f"in-process ({getattr(local, 'threads', '?')} threads)",
            "chunks_per_s": round(measure(local, texts, window, args.repeat), 1),
        }
    )
    for workers, threads in ((1, 1), (1, 2), (2, 1)):
        with dask_cluster(workers, threads) as address:
            embedder = ClusterEmbedder(address, settings)
            try:
                rate = measure(embedder, texts, window, args.repeat)
                if workers == 2:
                    transfer = measure_transfer(embedder, texts, window, args.repeat)
            finally:
                embedder.close()
        rows.append(
            {"setup": f"{workers} worker(s) x {threads} thread(s)", "chunks_per_s": round(rate, 1)}
        )
        if not args.json:
            print(rows[-1], flush=True)
    rows.append(
        {"setup": "2 workers, transfer only (no model)", "chunks_per_s": round(transfer, 1)}
    )
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
