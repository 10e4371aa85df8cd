"""Run the benchmarks one after another (`make bench`), or the ones named:
`python -m bench.run_all ingest bm25`.

Each bench prints its own table; figures are medians or ratios from one run, since machines
are shared and noisy. Benches that need ../shared/corpora skip what is absent.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
# Cheap first; the store/quality/flow/load benches index whole corpora and take minutes.
ORDER = [
    "ingest",
    "bm25",
    "embed",
    "side_by_side",
    "precision",
    "filter",
    "store",
    "quality",
    "misses",
    "weak",
    "flow",
    "load",
    "access",
    "serve",
    "first_query",
    "cli_search",
    "cluster",
    "follow",
    "small_change",
    "versions",
    "facets",
]


def bench_modules() -> dict[str, str]:
    """Every bench by its short name (`bench_<name>.py` in a concern's folder) -> its module."""
    return {
        script.stem.removeprefix("bench_"): f"bench.{script.parent.name}.{script.stem}"
        for script in sorted(HERE.glob("*/bench_*.py"))
    }


def main(argv: list[str]) -> int:
    modules = bench_modules()
    names = argv or [n for n in ORDER if n in modules]
    failed = []
    for name in names:
        module = modules.get(name)
        if module is None:
            print(f"== {name}: no such bench (bench/*/bench_{name}.py)", flush=True)
            failed.append(name)
            continue
        print(f"\n== bench {name} ({module})", flush=True)
        started = time.perf_counter()
        code = subprocess.call([sys.executable, "-m", module], cwd=REPO_ROOT)
        print(f"== {name}: exit {code} in {time.perf_counter() - started:.0f} s", flush=True)
        if code:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
