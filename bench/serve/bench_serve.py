"""Served search: warm HTTP latency of `hetriever serve` vs the same search in-process.

    python -m bench.serve.bench_serve                  # 10k chunks, 200 queries per row
    python -m bench.serve.bench_serve --quick          # 50 queries per row
    python -m bench.serve.bench_serve --size 20000 --json

The index is bench_store's latency index: real chunks of hugo-docs v2 (examples/sample-docs
repeated without the corpus) with real embeddings, copied with small perturbations up to N
chunks, plus a 1,000-chunk side collection. A real `hetriever serve` process (uvicorn) is
started on it, warmed up, and asked the same real queries as `hybrid_search` in this process,
with the same k and chunk grouping, so the difference is what serving adds: HTTP, JSON, the
thread hop, access and limit checks, metrics. Paths, asked in turn for every query (rotating
which goes first) by 1 and then 8 client threads, so each sees the same machine load:
- in-process: `hybrid_search` on a store in this process;
- HTTP group=chunk: `GET /search?group=chunk` over a keep-alive connection, timed at the client;
- HTTP group=page: the same with page grouping (it asks search for 2k chunks: another search);
- HTTP /healthz: the bare HTTP round trip.
Columns: request latency percentiles, the server's own time for the search (`took_ms` in the
answer), and the median over queries of (this path's time - in-process time) for the same
query by the same client, the figure the < 5 ms target is about. One run on a shared machine:
compare within it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.common import RESULTS_DIR, bench_settings, make_embedder, percentile, print_table  # noqa: E402
from bench.latency_store import build_latency_store, embeddings_for, load_chunks, query_set  # noqa: E402
from deployments.temporary_server import free_port  # noqa: E402
from hetriever.core.logs import configure_logging  # noqa: E402
from hetriever.search.hybrid import hybrid_search  # noqa: E402
from hetriever.search.request import SearchRequest

TOP_K = 10
START_TIMEOUT = 300.0


def start_server(workdir: Path, model_dir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {
        **os.environ,
        "HETRIEVER_CHROMA_PATH": str(workdir / "chroma"),
        "HETRIEVER_STATE_DIR": str(workdir / "state"),
        "HETRIEVER_MODEL_DIR": str(model_dir),
        "HETRIEVER_DOCS_ROOT": str(workdir / "no-docs"),
        "HETRIEVER_LOG_LEVEL": "WARNING",
    }
    log = (workdir / "serve.log").open("wb")
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "hetriever"),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"hetriever serve exited:\n{(workdir / 'serve.log').read_text()}")
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("hetriever serve did not start")
        time.sleep(0.3)


Asker = Callable[[Any, str], "float | None"]  # (client, query) -> the server's took_ms


def interleaved(
    n_clients: int, queries: list[str], askers: dict[str, Asker], make_client: Callable[[], Any]
) -> dict[str, dict[str, Any]]:
    """`n_clients` threads split `queries`; each asks every query of its share through every
    path in turn (rotating which goes first), so all paths see the same load. Per path:
    request ms, the server's own ms, and per-query differences from the first path."""
    names = list(askers)
    out = {n: {"ms": [], "server": [], "diff": []} for n in names}
    lock = threading.Lock()

    def worker(share: list[str], offset: int) -> None:
        client = make_client()
        for i, q in enumerate(share):
            times: dict[str, float] = {}
            order = names[(i + offset) % len(names) :] + names[: (i + offset) % len(names)]
            for name in order:
                began = time.perf_counter()
                took = askers[name](client, q)
                times[name] = (time.perf_counter() - began) * 1000.0
                with lock:
                    out[name]["ms"].append(times[name])
                    if took is not None:
                        out[name]["server"].append(took)
            with lock:
                for name in names:
                    out[name]["diff"].append(times[name] - times[names[0]])

    threads = [
        threading.Thread(target=worker, args=(queries[i::n_clients], i)) for i in range(n_clients)
    ]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - began
    for name in names:
        out[name]["wall"] = wall
    return out


def row(name: str, clients: int, got: dict[str, Any]) -> dict[str, Any]:
    ms, server, diff = got["ms"], got["server"], got["diff"]
    return {
        "path": name,
        "clients": clients,
        "p50_ms": round(percentile(ms, 50), 2),
        "p95_ms": round(percentile(ms, 95), 2),
        "server_p50_ms": round(percentile(server, 50), 2) if server else None,
        "paired_overhead_p50_ms": round(percentile(diff, 50), 2),
        "queries": len(ms),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000, help="chunks in the main collection")
    parser.add_argument("--queries", type=int, default=None, help="queries per row (200)")
    parser.add_argument("--quick", action="store_true", help="50 queries per row")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    n_queries = args.queries or (50 if args.quick else 200)
    configure_logging("ERROR")

    corpus = load_chunks(quick=False)
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        workdir = Path(tmp)
        settings = bench_settings(workdir)
        embedder = make_embedder(settings)
        vectors = embeddings_for(corpus, embedder)
        store, _ = build_latency_store(corpus, vectors, args.size, workdir, embedder)
        queries = [q for q, _ in query_set(corpus, n_queries, seed=args.size)]
        warm = queries[:10]

        def local(_: Any, q: str) -> None:
            hybrid_search(store, SearchRequest(q, TOP_K))

        proc, url = start_server(workdir, embedder.model_dir)
        try:

            def http(group: str) -> Asker:
                def ask(client: httpx.Client, q: str) -> float:
                    resp = client.get(url + "/search", params={"q": q, "k": TOP_K, "group": group})
                    resp.raise_for_status()
                    return float(resp.json()["took_ms"])

                return ask

            def health(client: httpx.Client, _: str) -> None:
                client.get(url + "/healthz").raise_for_status()

            def make_client() -> httpx.Client:
                return httpx.Client(timeout=60)

            askers = {
                "in-process": local,
                "HTTP group=chunk": http("chunk"),
                "HTTP group=page": http("page"),
                "HTTP /healthz": health,
            }
            interleaved(1, warm, askers, make_client)
            rows = []
            for clients in (1, 8):
                got = interleaved(clients, queries, askers, make_client)
                rows.extend(row(name, clients, got[name]) for name in askers)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        store.close_sync()

    by = {(r["path"], r["clients"]): r for r in rows}
    overhead = {c: by[("HTTP group=chunk", c)]["paired_overhead_p50_ms"] for c in (1, 8)}
    report = {
        "size": args.size,
        "side_collection": 1000,
        "corpus": corpus.source,
        "top_k": TOP_K,
        "rows": rows,
        "http_p50_overhead_ms": overhead,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "bench_serve-latest.json").write_text(json.dumps(report, indent=2))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"served search at {args.size} chunks (+1,000 side), k={TOP_K}, {corpus.source}")
    print_table(
        [
            "path",
            "clients",
            "p50 ms",
            "p95 ms",
            "server p50 ms",
            "p50 of (this - in-process), same query",
        ],
        [
            [
                r["path"],
                r["clients"],
                r["p50_ms"],
                r["p95_ms"],
                r["server_p50_ms"] if r["server_p50_ms"] is not None else "-",
                r["paired_overhead_p50_ms"],
            ]
            for r in rows
        ],
    )
    print(
        f"serving adds (group=chunk, median paired difference): 1 client {overhead[1]} ms, "
        f"8 clients {overhead[8]} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
