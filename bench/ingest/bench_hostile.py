"""What one hostile page costs the per-file step, by nesting depth and by page size.

    python -m bench.ingest.bench_hostile [--json] [--quick]

Each case is one page committed to a throw-away git repository and put through the real
per-file step (`process_file`: git read, parse, publish rules, clean, chunk), in a fresh child
process, which reports the step's seconds and its own peak RSS (`VmHWM`, hetriever/core/peak_memory.py). A child given
an empty page gives the baseline RSS (interpreter, tokenizer). Embedding is left out: a page's
chunks are bounded (`max_file_chunks`, 8,000 characters each), so what grows with the page is
this step. Ratios compare each row with the one before it (the input doubles or triples).

Shapes: nested `<div>` (unclosed, 5 bytes a level, as the issue measured), `[` repeated,
unclosed `**` openers, tiny sections (`# sN` + one word), one word with no space.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

from bench.common import _git  # noqa: E402

FILE = "content/docs/page.md"
DEPTHS = [1_000, 3_000, 10_000, 30_000, 100_000, 300_000]
SIZES = [237_500, 475_000, 950_000, 1_900_000]  # up to the 2 MB file limit
SHAPES = {
    "nested div": lambda n: "<div>" * (n // 5) + "deep text",
    "[ repeated": lambda n: "[" * n,
    "** openers": lambda n: "**a " * (n // 4),
    "tiny sections": lambda n: "".join(f"# s{i}\n\nw\n\n" for i in range(n // 10))[:n],
    "one word": lambda n: "x" * n,
}

_CHILD = """
import json, sys, time
from hetriever.core.peak_memory import own_peak_rss_mb
from hetriever.core.config import load_settings
from hetriever.discover.repositories import discover_repositories
from hetriever.index.process import process_file
root, commit, path = sys.argv[1:4]
(repo,) = discover_repositories(root)
settings = load_settings(env={}, config_file=None)
start = time.perf_counter()
outcome = process_file(repo, path, commit, settings)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds,
                  "rss_mb": own_peak_rss_mb(),
                  "chunks": len(outcome.chunks),
                  "longest_chunk": max((len(c.text) for c in outcome.chunks), default=0),
                  "skipped": outcome.skipped.reason if outcome.skipped else "",
                  "failed": outcome.failed or ""}))
"""


def measure(work: Path, body: str) -> dict:
    repo = work / "hostile-docs"
    if not (repo / ".git").exists():
        repo.mkdir(parents=True)
        _git(repo, "init", "-q")
    page = repo / FILE
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(f"---\ntitle: Hostile\n---\n\n{body}\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "page")
    commit = _git(repo, "rev-parse", "HEAD")
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(repo), commit, FILE],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return {"bytes": page.stat().st_size, **json.loads(done.stdout.strip().splitlines()[-1])}


def table(title: str, key: str, rows: list[dict], base_mb: float) -> None:
    print(f"\n{title}")
    print(
        f"| {key} | bytes | seconds | peak RSS MB | over baseline MB | time ratio | "
        "chunks | longest chunk | skip or failure |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    before = None
    for row in rows:
        ratio = f"{row['seconds'] / before['seconds']:.1f}x" if before else ""
        said = row["skipped"] or row["failed"]
        print(
            f"| {row[key]:,} | {row['bytes']:,} | {row['seconds']:.2f} | "
            f"{row['rss_mb']:.0f} | {row['rss_mb'] - base_mb:.0f} | {ratio} | "
            f"{row['chunks']} | {row['longest_chunk']:,} | {said[:60]} |"
        )
        before = row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="the two smallest of each")
    args = parser.parse_args()
    depths, sizes = (DEPTHS[:2], SIZES[:2]) if args.quick else (DEPTHS, SIZES)
    report: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base = measure(work, "")
        report["baseline_rss_mb"] = base["rss_mb"]
        print(f"baseline (an empty page): {base['rss_mb']:.0f} MB peak RSS")
        rows = []
        for depth in depths:
            row = measure(work, SHAPES["nested div"](depth * 5))
            rows.append({"depth": depth, **row})
        report["depth"] = rows
        table("nested <div> by depth", "depth", rows, base["rss_mb"])
        for shape, make in SHAPES.items():
            rows = [{"size": n, **measure(work, make(n))} for n in sizes]
            report[shape] = rows
            table(f"{shape} by page size", "size", rows, base["rss_mb"])
    if args.json:
        out = REPO_ROOT / "bench" / "results" / "hostile.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2))
        print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
