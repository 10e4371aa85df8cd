"""What an incremental run costs besides embedding, as the index grows.

    python -m bench.ingest.bench_small_change [--copies 28] [--changed 10] [--deleted 2] [--profile FILE]

One git repository holds hugo-docs v2's content `--copies` times (`content/copy-NNN/...`,
3,600 chunks a copy: 28 copies are 100,800 chunks). It is indexed in full, then a commit edits
`--changed` pages and deletes `--deleted` others, and the incremental run that follows is
timed, with its share of the store's reads. Vectors come from a feature-hashing embedder (no
model): embedding a few dozen chunks is the same at any index size, and what this measures is
everything else, i.e. what grows with the index. Embedded Chroma, fresh directories.
Corpora are looked up at $HETRIEVER_CORPORA, else ../shared/corpora beside the repository.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]

from bench.common import CORPORA, print_table  # noqa: E402


def build_repo(root: Path, copies: int) -> Path:
    from tests.support.helpers import commit_all, init_repo

    source = CORPORA / "hugo-docs" / "v2" / "content"
    repo = init_repo(root / "big-docs")
    for i in range(copies):
        shutil.copytree(source, repo / "content" / f"copy-{i:03d}", copy_function=shutil.copy)
    commit_all(repo, f"hugo-docs v2 x{copies}")
    return repo


def change(repo: Path, changed: int, deleted: int) -> list[str]:
    from tests.support.helpers import commit_all

    pages = sorted((repo / "content" / "copy-000").rglob("*.md"))
    # Pages, not section pages or snippets (`_common/`): editing those re-processes
    # every page that includes them or inherits their params, a change of another size.
    pages = [
        p
        for p in pages
        if p.stat().st_size > 2000
        and not any(part.startswith("_") for part in p.relative_to(repo).parts)
    ]
    for i, page in enumerate(pages[:changed]):
        page.write_text(
            page.read_text(encoding="utf-8") + f"\n\nAn added closing line {i}.\n", encoding="utf-8"
        )
    for page in pages[changed : changed + deleted]:
        page.unlink()
    commit_all(repo, "a small change")
    return [str(p.relative_to(repo)) for p in pages[: changed + deleted]]


@contextlib.contextmanager
def profiled(path: Path | None) -> Iterator[None]:
    """cProfile the main thread and every worker thread's work item into `path`."""
    if path is None:
        yield
        return
    import concurrent.futures.thread as pool
    import cProfile
    import pstats

    profiles = [cProfile.Profile()]
    original = pool._WorkItem.run

    def run(item: Any) -> None:
        profile = cProfile.Profile()
        profiles.append(profile)
        profile.runcall(original, item)

    pool._WorkItem.run = run  # type: ignore[method-assign]
    profiles[0].enable()
    try:
        yield
    finally:
        profiles[0].disable()
        pool._WorkItem.run = original  # type: ignore[method-assign]
        pstats.Stats(*profiles).dump_stats(str(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=28)
    parser.add_argument("--changed", type=int, default=10)
    parser.add_argument("--deleted", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--profile",
        type=Path,
        help="write a cProfile of the incremental run (every thread) to this file",
    )
    args = parser.parse_args()
    if not (CORPORA / "hugo-docs" / "v2").is_dir():
        print(f"skipped: no hugo-docs corpus under {CORPORA}")
        return

    from hetriever.core.config import Settings
    from hetriever.core.logs import configure_logging
    from hetriever.discover.repositories import Repository
    from hetriever.index.indexing import index_repository
    from hetriever.store.chroma_access import ChromaAccess
    from hetriever.store.knowledge_store import Store
    from tests.support.fakes import HashEmbedder

    configure_logging("ERROR")
    reads = {"seconds": 0.0, "calls": 0}
    original = ChromaAccess.all_records

    def counted(self, *a, **kw):  # every read of a whole collection
        began = time.perf_counter()
        try:
            return original(self, *a, **kw)
        finally:
            reads["seconds"] += time.perf_counter() - began
            reads["calls"] += 1

    ChromaAccess.all_records = counted  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(prefix="bench-small-") as tmp:
        root = Path(tmp)
        repo_dir = build_repo(root, args.copies)
        settings = Settings(chroma_path=root / "chroma", state_dir=root / "state")
        store = Store(settings, embedder=HashEmbedder())
        repo = Repository(name="big-docs", path=repo_dir)
        began = time.perf_counter()
        full = asyncio.run(index_repository(repo, store, settings))
        full_s = time.perf_counter() - began
        change(repo_dir, args.changed, args.deleted)
        reads.update(seconds=0.0, calls=0)
        with profiled(args.profile):
            began = time.perf_counter()
            inc = asyncio.run(index_repository(repo, store, settings))
            inc_s = time.perf_counter() - began
        store.close_sync()
    row = {
        "copies": args.copies,
        "chunks": full.chunks_written,
        "full_s": round(full_s, 1),
        "files_changed": args.changed,
        "files_deleted": args.deleted,
        "embedded": inc.chunks_written,
        "deleted": inc.chunks_deleted,
        "incremental_s": round(inc_s, 2),
        "whole_reads": reads["calls"],
        "whole_reads_s": round(reads["seconds"], 2),
    }
    if args.json:
        print(json.dumps(row))
        return
    print_table(
        [
            "chunks",
            "full run (hash vectors)",
            "changed / deleted files",
            "embedded / deleted chunks",
            "incremental run",
            "whole-collection reads",
        ],
        [
            [
                f"{row['chunks']:,}",
                f"{full_s:.1f} s",
                f"{args.changed} / {args.deleted}",
                f"{inc.chunks_written} / {inc.chunks_deleted}",
                f"{inc_s:.2f} s",
                f"{reads['calls']} ({reads['seconds']:.2f} s)",
            ]
        ],
    )


if __name__ == "__main__":
    main()
