"""The first search a fresh `hetriever serve` answers, against the warm median.

    python -m bench.serve.bench_first_query               # 10k chunks, 3 starts
    python -m bench.serve.bench_first_query --size 2000 --starts 5 --json

The index is bench_serve's (bench_store's latency index: real hugo-docs v2 chunks with real
embeddings, perturbed copies up to N chunks, plus a 1,000-chunk side collection). For each
start, a real `hetriever serve` subprocess is started on it; as soon as `/readyz` answers 200,
one search is asked (a different query each start), then every query of a warm set three
times. Per start: seconds to ready, that first search's latency, the same query's median once
warm, and the warm median over every query; the figure the server aims at is first / warm
median <= 2. On Linux each request's CPU time in the server process (all its threads, from
/proc/<pid>/task/*/schedstat) is measured too: on a machine shared with other work, wall time
right after start also holds the wait for a core (the process has just spent seconds warming
up, so the scheduler lets the others run first), which CPU time leaves out.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import RESULTS_DIR, bench_settings, make_embedder, percentile, print_table  # noqa: E402
from bench.latency_store import build_latency_store, embeddings_for, load_chunks, query_set  # noqa: E402
from bench.serve.bench_serve import TOP_K, start_server  # noqa: E402
from hetriever.core.logs import configure_logging  # noqa: E402

WARM_QUERIES = 20
ROUNDS = 3


def cpu_ms(pid: int) -> float | None:
    """CPU time the process's threads have run, in ms (None where /proc has no schedstat)."""
    total, found = 0, False
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            total += int(Path(path).read_text().split()[0])
            found = True
        except (OSError, ValueError, IndexError):  # a thread that just ended
            continue
    return total / 1e6 if found else None


def one_start(workdir: Path, model_dir: Path, first: str, warm: list[str]) -> dict[str, Any]:
    began = time.perf_counter()
    proc, url = start_server(workdir, model_dir)
    ready_s = time.perf_counter() - began
    try:
        with httpx.Client(timeout=120) as client:

            def ask(q: str) -> tuple[float, float | None]:
                cpu, t = cpu_ms(proc.pid), time.perf_counter()
                client.get(url + "/search", params={"q": q, "k": TOP_K}).raise_for_status()
                wall, after = (time.perf_counter() - t) * 1000.0, cpu_ms(proc.pid)
                return wall, (after - cpu if after is not None and cpu is not None else None)

            first_ms, first_cpu = ask(first)
            times = [ask(q) for _ in range(ROUNDS) for q in warm]
            same = [ask(first) for _ in range(ROUNDS)]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    warm_median = percentile([w for w, _ in times], 50)
    cpus = [c for _, c in times if c is not None]
    warm_cpu = percentile(cpus, 50) if cpus else None
    return {
        "ready_s": round(ready_s, 2),
        "first_ms": round(first_ms, 1),
        "same_query_warm_ms": round(percentile([w for w, _ in same], 50), 1),
        "warm_median_ms": round(warm_median, 1),
        "first_over_warm": round(first_ms / warm_median, 2),
        "first_cpu_ms": None if first_cpu is None else round(first_cpu, 1),
        "warm_cpu_median_ms": None if warm_cpu is None else round(warm_cpu, 1),
        "first_over_warm_cpu": None
        if first_cpu is None or not warm_cpu
        else round(first_cpu / warm_cpu, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000, help="chunks in the main collection")
    parser.add_argument("--starts", type=int, default=3, help="server starts measured")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    configure_logging("ERROR")

    corpus = load_chunks(quick=False)
    queries = [q for q, _ in query_set(corpus, args.starts + WARM_QUERIES, seed=args.size)]
    firsts, warm = queries[: args.starts], queries[args.starts :]
    with tempfile.TemporaryDirectory(prefix="bench-first-") as tmp:
        workdir = Path(tmp)
        embedder = make_embedder(bench_settings(workdir))
        store, _ = build_latency_store(
            corpus, embeddings_for(corpus, embedder), args.size, workdir, embedder
        )
        store.close_sync()
        rows = [one_start(workdir, embedder.model_dir, q, warm) for q in firsts]

    report = {
        "size": args.size,
        "side_collection": 1000,
        "corpus": corpus.source,
        "top_k": TOP_K,
        "starts": rows,
        "median_first_over_warm": percentile([r["first_over_warm"] for r in rows], 50),
        "worst_first_over_warm": max(r["first_over_warm"] for r in rows),
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "bench_first_query-latest.json").write_text(json.dumps(report, indent=2))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"first search after `hetriever serve` is ready, {args.size} chunks (+1,000 side), "
        f"k={TOP_K}, {corpus.source}"
    )
    print_table(
        [
            "start",
            "ready s",
            "first ms",
            "same query warm ms",
            "warm median ms",
            "first / warm median",
            "first CPU ms",
            "warm CPU median ms",
            "first / warm CPU",
        ],
        [
            [
                i + 1,
                r["ready_s"],
                r["first_ms"],
                r["same_query_warm_ms"],
                r["warm_median_ms"],
                r["first_over_warm"],
                r["first_cpu_ms"],
                r["warm_cpu_median_ms"],
                r["first_over_warm_cpu"],
            ]
            for i, r in enumerate(rows)
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
