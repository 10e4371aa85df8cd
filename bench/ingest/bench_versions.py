"""What following versions costs: chunks embedded per version against borrowed, and peak memory.

    python -m bench.ingest.bench_versions [--corpus hugo-docs] [--json]

One git repository holds the corpus's v1 and v2 as two commits, tagged v1 and v2, checked out
at v1 (a parent repository with it as a submodule, as tests/support/helpers.py builds it).
Two measurements, each in a fresh child process with fresh directories, real MiniLM:

- `one`: the repository alone (one version, v1), no versions configured;
- `versions`: the same with versions v1 and v2 configured: the checkout, then
  `<corpus>--v1` (all of it held by the checkout: nothing embedded), then `<corpus>--v2`,
  which embeds only the chunks no other version holds.

Reported per repository: chunks written, embedded and borrowed; per process: peak RSS
(`own_peak_rss_mb`) and wall time. The target: v2 beyond v1 embeds at most v2's change set
(the v1 -> v2 incremental figure), and peak RSS within 10% of one version's.
Corpora are looked up at $HETRIEVER_CORPORA, else ../shared/corpora beside the repository.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]

from bench.common import CORPORA, print_table  # noqa: E402


def build_docs(root: Path, corpus: str) -> Path:
    """The parent repository; its submodule checked out at v1, tags v1 and v2 in it."""
    from tests.support.helpers import build_corpus_parent, git

    parent, v1, v2 = build_corpus_parent(root, corpus)
    sub = parent / "docs" / corpus
    git(sub, "tag", "v1", v1)
    git(sub, "tag", "v2", v2)
    return parent


def child(mode: str, parent: Path, work: Path, corpus: str) -> dict[str, Any]:
    """One measurement in this process: index, then report counts and peak RSS."""
    from hetriever.core.config import load_settings
    from hetriever.core.logs import configure_logging
    from hetriever.core.peak_memory import own_peak_rss_mb
    from hetriever.discover.repositories import configured_repositories
    from hetriever.index.ingest import ingest_repositories
    from hetriever.store.knowledge_store import get_knowledge_store

    configure_logging("ERROR")
    versions = {corpus: {"refs": ["v1", "v2"]}} if mode == "versions" else {}
    settings = load_settings(
        env={},
        config_file=None,
        docs_root=parent,
        chroma_path=work / "chroma",
        state_dir=work / "state",
        versions=versions,
    )
    store = get_knowledge_store(settings)
    began = time.perf_counter()
    outcomes = asyncio.run(ingest_repositories(configured_repositories(settings), store, settings))
    seconds = time.perf_counter() - began
    rows = []
    for o in outcomes:
        r = o.result
        assert o.ok and r is not None, o.to_dict()
        rows.append(
            {
                "repository": o.repository,
                "written": r.chunks_written,
                "embedded": r.chunks_written - r.chunks_borrowed,
                "borrowed": r.chunks_borrowed,
                "seconds": round(r.total_seconds, 1),
            }
        )
    store.close_sync()
    return {
        "mode": mode,
        "repositories": rows,
        "seconds": round(seconds, 1),
        "peak_rss_mb": round(own_peak_rss_mb(), 1),
    }


def measure(mode: str, parent: Path, root: Path, corpus: str) -> dict[str, Any]:
    work = root / mode
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.ingest.bench_versions",
            "--child",
            mode,
            "--parent",
            str(parent),
            "--work",
            str(work),
            "--corpus",
            corpus,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="hugo-docs")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", choices=["one", "versions"], help=argparse.SUPPRESS)
    parser.add_argument("--parent", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.parent, args.work, args.corpus)))
        return
    if not (CORPORA / args.corpus / "v2").is_dir():
        print(f"skipped: no {args.corpus} corpus under {CORPORA}")
        return
    with tempfile.TemporaryDirectory(prefix="bench-versions-") as tmp:
        root = Path(tmp)
        parent = build_docs(root, args.corpus)
        one = measure("one", parent, root, args.corpus)
        both = measure("versions", parent, root, args.corpus)
    ratio = both["peak_rss_mb"] / one["peak_rss_mb"]
    if args.json:
        print(json.dumps({"one": one, "versions": both, "peak_rss_ratio": round(ratio, 3)}))
        return
    rows = [
        [
            run["mode"],
            r["repository"],
            f"{r['written']:,}",
            f"{r['embedded']:,}",
            f"{r['borrowed']:,}",
            f"{r['seconds']} s",
        ]
        for run in (one, both)
        for r in run["repositories"]
    ]
    print_table(["run", "repository", "written", "embedded", "borrowed", "run time"], rows)
    print_table(
        ["run", "peak RSS", "wall time"],
        [[run["mode"], f"{run['peak_rss_mb']} MB", f"{run['seconds']} s"] for run in (one, both)]
        + [["versions / one", f"{ratio:.3f}", ""]],
    )


if __name__ == "__main__":
    main()
