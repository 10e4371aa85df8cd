"""Run the benchmarks one after another (`make bench`), or the ones named: `run_all.py ingest bm25`.

Each bench prints its own table; figures are medians or ratios from one run, since machines
are shared and noisy. Benches that need ../shared/corpora skip what is absent.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Cheap first; the store/quality/flow/load benches index whole corpora and take minutes.
ORDER = ["ingest", "bm25", "embed", "side_by_side", "precision", "filter", "store", "quality",
         "misses", "weak", "flow", "load", "access", "serve", "first_query", "cli_search",
         "cluster", "follow", "small_change", "facets"]


def main(argv: list[str]) -> int:
    names = argv or [n for n in ORDER if (HERE / f"bench_{n}.py").exists()]
    failed = []
    for name in names:
        script = HERE / f"bench_{name}.py"
        if not script.exists():
            print(f"== {name}: no such bench ({script.name})", flush=True)
            failed.append(name)
            continue
        print(f"\n== bench {name}", flush=True)
        started = time.perf_counter()
        code = subprocess.call([sys.executable, str(script)], cwd=HERE.parent)
        print(f"== {name}: exit {code} in {time.perf_counter() - started:.0f} s", flush=True)
        if code:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
