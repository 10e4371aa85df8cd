"""Shared pieces of the store and quality benchmarks.

- `load_corpus_chunks()`: the real chunks of one shared corpus version, produced by the real
  pipeline (git blobs -> `safe_process_text` with the real include resolver), exactly as a
  full index pass would write them. The corpus folder is committed into a throw-away git repo
  with fixed author/committer dates, so its commit id depends on the content only and can key
  caches.
- `bench_settings()` / `make_store()`: an embedded store whose data lives in one directory.
- `chroma_server()`: a `chroma run` on loopback for `--server` runs.
- `embedding_bench_args()` / `settings_embedder()`: the embedding benches' command line, chunk
  sample and embedder.
- small statistics and table helpers.

Corpora are looked up at $HETRIEVER_CORPORA, else ../shared/corpora beside the repository.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]

from hetriever.core.config import Settings  # noqa: E402
from hetriever.core.models import Chunk  # noqa: E402
from hetriever.discover.changes import list_content_files, site_at  # noqa: E402
from hetriever.discover.git_objects import read_content_files  # noqa: E402
from hetriever.discover.repositories import Repository  # noqa: E402
from hetriever.index.process import IncludeResolver, safe_process_text  # noqa: E402

CORPORA = Path(os.environ.get("HETRIEVER_CORPORA", REPO_ROOT.parent / "shared" / "corpora"))
SAMPLE_DOCS = REPO_ROOT / "examples" / "sample-docs"
# git-ignored; HETRIEVER_BENCH_RESULTS keeps the caches of, e.g., an int8 run apart
RESULTS_DIR = Path(
    os.environ.get("HETRIEVER_BENCH_RESULTS", Path(__file__).resolve().parent / "results")
)

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


@dataclass
class CorpusChunks:
    name: str  # the repository (collection) name the chunks carry
    source: str  # e.g. "hugo-docs/v2", or "sample-docs x40" for the fallback
    commit: str  # the throw-away repo's commit: a content key for caches
    files: dict[str, list[Chunk]] = field(default_factory=dict)  # path -> chunks (non-empty)
    skipped: int = 0

    @property
    def chunks(self) -> list[Chunk]:
        return [c for chunks in self.files.values() for c in chunks]


def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **_GIT_ENV},
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def _commit_tree(repo_dir: Path) -> str:
    _git(repo_dir, "init", "-q", "-b", "main")
    _git(repo_dir, "add", "-A")
    _git(repo_dir, "commit", "-q", "-m", "corpus")
    return _git(repo_dir, "rev-parse", "HEAD")


def corpus_dir(name: str, version: str = "v2") -> Path | None:
    path = CORPORA / name / version
    return path if path.is_dir() else None


def process_repo(repo: Repository, commit: str, settings: Settings, source: str) -> CorpusChunks:
    """What a full pass of `commit` would write, computed by the core alone (no store)."""
    repo = dataclasses.replace(repo, site=site_at(repo, commit))  # as index_repository does
    resolver = IncludeResolver(repo, commit, settings)
    out = CorpusChunks(name=repo.name, source=source, commit=commit)
    for path, text in read_content_files(
        repo, list_content_files(repo, commit), commit, max_bytes=settings.max_file_bytes
    ):
        if isinstance(text, Exception):
            out.skipped += 1
            continue
        outcome = safe_process_text(repo, path, text, settings, resolver=resolver)
        if outcome.chunks:
            out.files[path] = outcome.chunks
        else:
            out.skipped += 1
    return out


def load_corpus_chunks(
    name: str,
    version: str = "v2",
    *,
    settings: Settings | None = None,
    repo_name: str | None = None,
) -> CorpusChunks | None:
    """The real chunks of `<corpora>/<name>/<version>`, or None when the corpus is absent."""
    source = corpus_dir(name, version)
    if source is None:
        return None
    settings = settings or Settings()
    with tempfile.TemporaryDirectory(prefix="bench-corpus-") as tmp:
        work = Path(tmp) / name
        shutil.copytree(source, work, copy_function=shutil.copy)
        commit = _commit_tree(work)
        repo = Repository(name=repo_name or name, path=work)
        return process_repo(repo, commit, settings, f"{name}/{version}")


def sample_chunk_texts(count: int, seed: int, name: str = "hugo-docs") -> list[str] | None:
    """A seeded sample of `count` chunk texts of a v2 corpus (None when it is absent, after
    saying so on stderr)."""
    corpus = load_corpus_chunks(name)
    if corpus is None:
        print(f"{name} v2 not found (set HETRIEVER_CORPORA)", file=sys.stderr)
        return None
    texts = [c.text for c in corpus.chunks]
    return random.Random(seed).sample(texts, min(count, len(texts)))


def embedding_bench_args(
    description: str, chunks: int
) -> tuple[argparse.Namespace, list[str]] | None:
    """The command line of the embedding benches (`--chunks`, `--repeat`, `--seed`, `--json`),
    logging quieted, and their seeded sample of hugo-docs v2 chunk texts (None when absent)."""
    from hetriever.core.logs import configure_logging

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--chunks", type=int, default=chunks)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    configure_logging("ERROR")
    texts = sample_chunk_texts(args.chunks, args.seed)
    return None if texts is None else (args, texts)


def settings_embedder(**options: Any):
    """The offline MiniLM embedder with the settings' model directory and batch bounds, as an
    ingest makes it; `options` are the embedder's own (precision, side_by_side)."""
    from hetriever.embed.embedder import MiniLMEmbedder

    settings = Settings()
    return MiniLMEmbedder(
        settings.resolved_model_dir,
        batch_size=settings.embed_batch_size,
        batch_tokens=settings.embed_batch_tokens,
        **options,
    )


def load_sample_chunks(
    copies: int, *, settings: Settings | None = None, repo_name: str = "sample-docs"
) -> CorpusChunks:
    """The bundled examples/sample-docs, its content folder repeated `copies` times."""
    settings = settings or Settings()
    with tempfile.TemporaryDirectory(prefix="bench-sample-") as tmp:
        work = Path(tmp) / repo_name
        for i in range(copies):
            shutil.copytree(
                SAMPLE_DOCS / "content",
                work / "content" / f"copy-{i:03d}",
                copy_function=shutil.copy,
            )
        commit = _commit_tree(work)
        repo = Repository(name=repo_name, path=work)
        return process_repo(repo, commit, settings, f"sample-docs x{copies}")


def write_windows(files: dict[str, list], size: int) -> list[dict[str, list]]:
    """Files grouped as `outcomes.OutcomeWriter` groups them: a window closes at >= size chunks."""
    windows: list[dict[str, list]] = [{}]
    count = 0
    for path, chunks in files.items():
        windows[-1][path] = chunks
        count += len(chunks)
        if count >= size:
            windows.append({})
            count = 0
    return [w for w in windows if w]


def write_corpus(store: Any, corpus: CorpusChunks) -> tuple[int, int]:
    """Index `corpus` into `store` as its repository, in write windows as an index run writes
    them, stale files deleted and the exact-title catalog filled (as `outcomes.apply_outcomes`
    fills it). Returns (chunks embedded, chunks reused)."""
    from hetriever.chunk.page_records import display_chunk

    async def write() -> tuple[int, int]:
        written = reused = 0
        for window in write_windows(corpus.files, store.settings.write_window):
            got = await store.upsert_files(corpus.name, window)
            written, reused = written + got.written, reused + got.reused
        for path in set(await store.list_files(corpus.name)) - set(corpus.files):
            await store.delete_file(corpus.name, path)
        physical = store.physical_name(corpus.name)
        for path, chunks in corpus.files.items():
            first = display_chunk(chunks)
            store.catalog.pages.set_page(
                physical, path, first.id, first.metadata, [(c.id, c.metadata) for c in chunks]
            )
        return written, reused

    return asyncio.run(write())


def bench_settings(root: Path, **overrides: Any) -> Settings:
    """Settings for an embedded store with its Chroma data and state (BM25, locks) under root.

    HETRIEVER_EMBEDDING_PRECISION=int8 (with HETRIEVER_BENCH_RESULTS elsewhere) runs a bench
    on the int8 model."""
    precision = os.environ.get("HETRIEVER_EMBEDDING_PRECISION", "fp32")
    return Settings(
        chroma_path=root / "chroma", state_dir=root / "state", embedding_precision=precision
    ).replace(**overrides)


def make_embedder(settings: Settings) -> Any:
    """The real offline MiniLM at the configured model dir (built there on first use)."""
    from hetriever.embed.embedder import get_embedder

    return get_embedder(settings)


def make_store(root: Path, embedder: Any, **overrides: Any) -> Any:
    from hetriever.store.knowledge_store import Store

    return Store(bench_settings(root, **overrides), embedder=embedder)


def bm25_only(
    store: Any,
    query: str,
    top_k: int,
    filters: dict | None = None,
    namespaces: list[str] | None = None,
) -> list:
    """search.py's BM25 path on its own: retrieve, fetch documents, integrity check.

    `hybrid_search` has no BM25-only switch (BM25 runs alone only when dense fails), so this
    runs its private steps in the same order. Returns its hits (`doc_id`, `metadata`, ...).
    """
    from hetriever.core.access import caller_levels
    from hetriever.search.candidates import _fill_documents, _trusted
    from hetriever.search.gathering import CANDIDATE_FACTOR, _bm25
    from hetriever.search.planning import _scope, plan_collections
    from hetriever.store.filters import and_filters, validate_filter

    levels = caller_levels(None)  # hybrid_search's default caller: PUBLIC only
    plans = plan_collections(store, _scope(store, namespaces).names)
    plans = {name: p for name, p in plans.items() if p.visible(levels)}
    user_filter = validate_filter(filters)
    wheres = {name: and_filters(p.where(levels), user_filter) for name, p in plans.items()}
    hits: dict[str, Any] = {}
    ranked = _bm25(store, list(plans), query, top_k * CANDIDATE_FACTOR, wheres, hits)
    candidates = [hits[d] for d in ranked]
    _fill_documents(store, candidates)
    return [h for h in candidates if _trusted(h, plans, levels)][:top_k]


def page_of(meta: dict[str, Any]) -> str:
    """The page a chunk belongs to (its file; several chunks of one page share it)."""
    return f"{meta.get('repository', '')}:{meta.get('file_path', '')}"


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else 0.0


def print_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(x) for x in header]] + [[str(x) for x in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for row in cells:
        print(
            "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
        )


@contextlib.contextmanager
def chroma_server(path: Path) -> Iterator[int]:
    """`chroma run` (beside this Python) on a free port of 127.0.0.1 until the block ends."""
    import httpx

    from deployments.temporary_server import free_port

    port = free_port()
    path.mkdir(parents=True)
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "chroma"),
            "run",
            "--path",
            str(path),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/api/v2/heartbeat").status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"chroma run did not start (exit code {proc.poll()})")
            time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
