"""Search latency and throughput under load, while an ingest rewrites the index.

    python -m bench.serve.bench_load [--clients 8] [--seconds 30] [--idle-seconds 10] [--pages 300]
                               [--model-dir DIR] [--server] [--json]

A throw-away git repository of `--pages` small pages is indexed once. Then `--clients` threads
search it (hybrid, in-process, one shared embedded store) for `--idle-seconds` with nothing
else running, and for `--seconds` while a writer keeps committing a new version of every page
and running `hetriever ingest` on it in a subprocess (so each ingest rewrites every chunk).
Reported per phase: latency p50/p95/p99, throughput, errors, results dropped as inconsistent,
and how many ingests completed. Every wait is bounded; the writer is stopped at the deadline.
With `--server`, a `chroma run` on 127.0.0.1 holds the data: the searching threads and the
ingest subprocesses both reach it over loopback HTTP (BM25 state stays in a shared directory).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from structlog.testing import capture_logs  # noqa: E402

from bench.common import chroma_server  # noqa: E402
from hetriever.core.config import load_settings  # noqa: E402
from hetriever.core.logs import configure_logging  # noqa: E402
from hetriever.core.names import content_hash  # noqa: E402
from hetriever.discover.repositories import discover_repositories  # noqa: E402
from hetriever.embed.embedder import get_embedder  # noqa: E402
from hetriever.index.indexing import index_repository  # noqa: E402
from hetriever.search.hybrid import hybrid_search  # noqa: E402
from hetriever.search.request import SearchRequest
from hetriever.store.knowledge_store import Store  # noqa: E402

REPO = "load-docs"
WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
    "november oscar papa quebec romeo sierra tango uniform victor whiskey xray"
).split()
INGEST_TIMEOUT = 600.0
DROPPED = {"result_without_content", "result_hash_mismatch", "result_out_of_scope"}


@dataclass
class Phase:
    name: str
    seconds: float
    searches: int = 0
    errors: int = 0
    results: int = 0
    dropped: int = 0  # candidates dropped by the integrity checks (logged, never returned)
    inconsistent: int = 0  # returned results failing our own checks (must stay 0)
    ingests_completed: int = 0
    p50_ms: float = 0.0
    p95_ms: float = 0.0
    p99_ms: float = 0.0
    searches_per_s: float = 0.0
    modes: dict[str, int] = field(default_factory=dict)


def git(cwd: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@example.invalid",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    }
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def write_version(repo: Path, pages: int, version: int) -> None:
    folder = repo / "content" / "docs"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(pages):
        rng = random.Random(i * 7919 + version)
        body = " ".join(rng.choice(WORDS) for _ in range(18))
        (folder / f"page-{i:03d}.md").write_text(
            f"---\ntitle: Page {i}\n---\n\n{body} page{i} version{version}.\n"
        )
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"version {version}")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


class Writer(threading.Thread):
    """Commits a new version of every page and ingests it, again and again, until stopped."""

    def __init__(self, repo: Path, pages: int, env: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.repo, self.pages, self.env = repo, pages, env
        self.stop = threading.Event()
        self.completed = 0
        self.failures: list[str] = []
        self.proc: subprocess.Popen | None = None

    def run(self) -> None:
        version = 2
        while not self.stop.is_set():
            write_version(self.repo, self.pages, version)
            version += 1
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "hetriever.cli",
                    "-q",
                    "--docs-root",
                    str(self.repo),
                    "ingest",
                    "--json",
                ],
                env=self.env,
                cwd=self.repo.parent,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                out, err = self.proc.communicate(timeout=INGEST_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()
                self.failures.append("ingest timed out")
                continue
            if self.stop.is_set() and self.proc.returncode != 0:
                break  # killed at the deadline
            if self.proc.returncode == 0 and json.loads(out)[0].get("completed"):
                self.completed += 1
            else:
                self.failures.append(err[-500:])

    def halt(self) -> None:
        self.stop.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
        self.join(timeout=60)


def measure(
    store: Store, name: str, clients: int, seconds: float, pages: int
) -> tuple[Phase, list[float]]:
    phase = Phase(name, seconds)
    latencies: list[float] = []
    modes: Counter[str] = Counter()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < deadline:
            query = " ".join(rng.sample(WORDS, 3)) + f" page{rng.randrange(pages)}"
            began = time.perf_counter()
            try:
                result = hybrid_search(store, SearchRequest(query, top_k=5, repositories=[REPO]))
            except Exception:  # noqa: BLE001 - counted, not fatal
                with lock:
                    phase.errors += 1
                continue
            ms = (time.perf_counter() - began) * 1000
            bad = sum(
                1
                for m in result.matches
                if m.metadata.get("repository") != REPO
                or content_hash(m.content) != m.metadata.get("content_hash")
            )
            with lock:
                latencies.append(ms)
                phase.results += len(result.matches)
                phase.inconsistent += bad
                modes[result.mode] += 1

    with capture_logs() as logs:
        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=seconds + 120)
    phase.dropped = sum(1 for e in logs if e["event"] in DROPPED)
    phase.searches = len(latencies)
    phase.p50_ms = round(percentile(latencies, 50), 1)
    phase.p95_ms = round(percentile(latencies, 95), 1)
    phase.p99_ms = round(percentile(latencies, 99), 1)
    phase.searches_per_s = round(phase.searches / seconds, 1)
    phase.modes = dict(modes)
    return phase, latencies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--model-dir", type=Path, help="prepared model (default: the cache)")
    parser.add_argument(
        "--server",
        action="store_true",
        help="a `chroma run` server on 127.0.0.1 instead of embedded Chroma",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)
        repo = root / REPO
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        write_version(repo, args.pages, 1)
        overrides = {"chroma_path": root / "chroma", "state_dir": root / "state"}
        if args.server:
            port = stack.enter_context(chroma_server(root / "chroma-server"))
            overrides.update(chroma_host="127.0.0.1", chroma_port=port)
        if args.model_dir:
            overrides["model_dir"] = args.model_dir
        settings = load_settings(env={}, config_file=None, log_level="WARNING", **overrides)
        configure_logging(settings.log_level)
        store = Store(settings, embedder=get_embedder(settings))
        (repository,) = discover_repositories(repo)
        began = time.perf_counter()
        first = asyncio_run(index_repository(repository, store, settings))
        index_s = time.perf_counter() - began

        env = {k: v for k, v in os.environ.items() if not k.startswith("HETRIEVER_")}
        env.update(
            HETRIEVER_CHROMA_PATH=str(settings.chroma_path),
            HETRIEVER_STATE_DIR=str(settings.resolved_state_dir),
            HETRIEVER_MODEL_DIR=str(settings.resolved_model_dir),
        )
        if args.server:
            env.update(
                HETRIEVER_CHROMA_HOST="127.0.0.1", HETRIEVER_CHROMA_PORT=str(settings.chroma_port)
            )
        phases = []
        if args.idle_seconds > 0:
            phases.append(measure(store, "idle", args.clients, args.idle_seconds, args.pages)[0])
        writer = Writer(repo, args.pages, env)
        writer.start()
        try:
            writing, _ = measure(store, "while ingesting", args.clients, args.seconds, args.pages)
        finally:
            writer.halt()
        writing.ingests_completed = writer.completed
        phases.append(writing)
        store.close_sync()

    report = {
        "backend": "chroma run on 127.0.0.1" if args.server else "embedded",
        "clients": args.clients,
        "pages": args.pages,
        "chunks": first.chunks_written,
        "initial_index_seconds": round(index_s, 1),
        "ingest_failures": writer.failures,
        "phases": [asdict(p) for p in phases],
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"{report['backend']}: {args.clients} clients, {args.pages} pages "
        f"({first.chunks_written} chunks, indexed in {index_s:.1f} s)"
    )
    print(
        f"{'phase':<17}{'searches':>9}{'per s':>8}{'p50 ms':>8}{'p95 ms':>8}{'p99 ms':>8}"
        f"{'errors':>7}{'dropped':>8}{'bad':>5}{'ingests':>8}"
    )
    for p in phases:
        print(
            f"{p.name:<17}{p.searches:>9}{p.searches_per_s:>8}{p.p50_ms:>8}{p.p95_ms:>8}"
            f"{p.p99_ms:>8}{p.errors:>7}{p.dropped:>8}{p.inconsistent:>5}"
            f"{p.ingests_completed:>8}"
        )
    if writer.failures:
        print(f"ingest failures: {len(writer.failures)}; last: {writer.failures[-1]!r}")
    return 0


def asyncio_run(coro):
    import asyncio

    return asyncio.run(coro)


if __name__ == "__main__":
    sys.exit(main())
