"""Throughput of parse -> skip rules -> clean -> chunk over v2 of the shared corpora.

    python -m bench.ingest.bench_ingest [--runs 3] [--json] [--profile N]

Files are read into memory first, so the figures are the CPU cost of turning Markdown into
chunks (no git, no embedding). Each corpus runs `--runs` times; the median run is reported.
Peak memory: tracemalloc's peak over one extra (untimed) run, and the process's max RSS.
Corpora are looked up at $HETRIEVER_CORPORA, else ../shared/corpora beside the repository.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

REPO_ROOT = Path(__file__).resolve().parents[2]

from hetriever.chunk.chunker import chunk_page  # noqa: E402
from hetriever.chunk.tokenizer import load_token_counter  # noqa: E402
from hetriever.clean.cleaner import clean_page  # noqa: E402
from hetriever.core.config import Settings  # noqa: E402
from hetriever.parse.page import parse_page, skip_reason  # noqa: E402

CORPORA = Path(os.environ.get("HETRIEVER_CORPORA", REPO_ROOT.parent / "shared" / "corpora"))
NAMES = ("hugo-docs", "opentelemetry-io")
CONTENT_DIR = "content"


@dataclass
class Figures:
    corpus: str
    files: int
    lines: int
    chunked_files: int
    skipped_files: int
    chunks: int
    seconds_median: float
    seconds_runs: list[float]
    lines_per_s: float
    files_per_s: float
    tokens_mean: float
    tokens_max: int
    tracemalloc_peak_mb: float


def load_corpus(root: Path) -> dict[str, str]:
    """Repo-relative path -> text, for every .md file of one corpus version."""
    return {
        p.relative_to(root).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(root.rglob("*.md"))
    }


def include_resolver(files: dict[str, str], page_path: str) -> Callable[[str], str | None]:
    """Resolve `{{% include "name" %}}` against the in-memory corpus, as a Hugo site would:
    relative to the page's folder (and its `_includes/`), then from the content root."""
    bodies: dict[str, str | None] = {}

    def body(path: str) -> str | None:
        if path not in bodies:
            text = files.get(path)
            bodies[path] = (
                None
                if text is None
                else parse_page("bench", path, text, content_dir=CONTENT_DIR).body
            )
        return bodies[path]

    def resolve(name: str) -> str | None:
        name = name.strip().strip("\"'")
        rel = name if name.endswith(".md") else f"{name}.md"
        roots = [PurePosixPath("content/en"), PurePosixPath("content")]
        here = PurePosixPath(page_path).parent
        candidates = [here / "_includes" / rel, here / rel] + [r / rel.lstrip("/") for r in roots]
        candidates += [r / "_includes" / rel.lstrip("/") for r in roots]
        for candidate in candidates:
            found = body(candidate.as_posix())
            if found is not None:
                return found
        return None

    return resolve


def process(files: dict[str, str], counter, settings: Settings) -> tuple[int, int, list[str]]:
    """One pass over a corpus: (files with chunks, files skipped, chunk texts)."""
    chunked = skipped = 0
    texts: list[str] = []
    for path, text in files.items():
        page = parse_page("bench", path, text, content_dir=CONTENT_DIR)
        if skip_reason(page, include_drafts=settings.include_drafts):
            skipped += 1
            continue
        blocks = clean_page(page.body, include_resolver=include_resolver(files, path))
        chunks = chunk_page(
            page,
            blocks,
            counter=counter,
            max_tokens=settings.chunk_tokens,
            min_tokens=settings.min_chunk_tokens,
            extra_metadata={"access_level": "PUBLIC"},
        )
        if not chunks:
            skipped += 1
            continue
        chunked += 1
        texts.extend(c.text for c in chunks)
    return chunked, skipped, texts


def measure(name: str, files: dict[str, str], runs: int, profile: int) -> Figures:
    settings = Settings()
    counter = load_token_counter(settings.embedding_model)
    lines = sum(t.count("\n") + 1 for t in files.values())
    times: list[float] = []
    result = (0, 0, [])
    for _ in range(runs):
        start = time.perf_counter()
        result = process(files, counter, settings)
        times.append(time.perf_counter() - start)
    chunked, skipped, texts = result

    # Untimed: what the model reads per chunk (special tokens included), and tracemalloc's
    # peak in a separate pass, since tracing slows Python down several times.
    tokens = [n + counter.special_tokens for n in counter.count_batch(texts)]
    tracemalloc.start()
    process(files, counter, settings)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    if profile:
        profiler = cProfile.Profile()
        profiler.runcall(process, files, counter, settings)
        print(f"\n--- profile: {name} (top {profile} by own time) ---", file=sys.stderr)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(profile)

    median = statistics.median(times)
    return Figures(
        corpus=name,
        files=len(files),
        lines=lines,
        chunked_files=chunked,
        skipped_files=skipped,
        chunks=len(tokens),
        seconds_median=round(median, 3),
        seconds_runs=[round(t, 3) for t in times],
        lines_per_s=round(lines / median),
        files_per_s=round(len(files) / median, 1),
        tokens_mean=round(statistics.fmean(tokens), 1) if tokens else 0.0,
        tokens_max=max(tokens, default=0),
        tracemalloc_peak_mb=round(peak / 2**20, 1),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="also print the top N functions of a cProfile run to stderr",
    )
    args = parser.parse_args(argv)

    figures: list[Figures] = []
    missing: list[str] = []
    for name in NAMES:
        root = CORPORA / name / "v2"
        if not root.is_dir():
            missing.append(name)
            print(f"skipping {name}: {root} not found", file=sys.stderr)
            continue
        figures.append(measure(name, load_corpus(root), args.runs, args.profile))
    max_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux

    if args.json:
        print(
            json.dumps(
                {
                    "corpora": [asdict(f) for f in figures],
                    "skipped_corpora": missing,
                    "max_rss_mb": round(max_rss_mb, 1),
                },
                indent=2,
            )
        )
        return 0
    header = (
        "corpus",
        "files",
        "lines",
        "chunked",
        "skipped",
        "chunks",
        "median s",
        "lines/s",
        "files/s",
        "tok mean",
        "tok max",
        "tm peak MB",
    )
    rows = [
        (
            f.corpus,
            f.files,
            f.lines,
            f.chunked_files,
            f.skipped_files,
            f.chunks,
            f"{f.seconds_median:.2f}",
            f.lines_per_s,
            f.files_per_s,
            f.tokens_mean,
            f.tokens_max,
            f.tracemalloc_peak_mb,
        )
        for f in figures
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in (header, *rows):
        print("  ".join(str(x).rjust(w) for x, w in zip(row, widths)))
    print(
        f"max RSS {max_rss_mb:.0f} MB; runs per corpus: {args.runs}; "
        f"tok = word-pieces per chunk incl. [CLS]/[SEP]"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
