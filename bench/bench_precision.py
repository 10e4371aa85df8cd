"""fp32 vs int8 all-MiniLM-L6-v2: texts/s on real chunks, and how close the vectors are.

    python bench/bench_precision.py [--chunks 600] [--repeat 3] [--json]

The chunks are a seeded sample of hugo-docs v2's real chunks (bench/common.py runs the corpus
through the real pipeline), so lengths are those an ingest embeds. Both embedders use the
settings' defaults (threads, batch rows, batch token cap); passes alternate between them so a
shared machine's drifting load hits both alike; each figure is the median pass. Retrieval
quality of the two is bench_quality.py's job (run it with HETRIEVER_EMBEDDING_PRECISION).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import embedding_bench_args, settings_embedder  # noqa: E402

from hetriever.embed.embedder import default_threads  # noqa: E402


def main() -> int:
    setup = embedding_bench_args(__doc__.splitlines()[0], chunks=600)
    if setup is None:
        return 1
    args, texts = setup
    embedders = {p: settings_embedder(precision=p) for p in ("fp32", "int8")}
    vectors = {p: e.embed(texts) for p, e in embedders.items()}  # also the warm-up
    seconds: dict[str, list[float]] = {p: [] for p in embedders}
    for _ in range(args.repeat):
        for p, e in embedders.items():
            began = time.perf_counter()
            e.embed(texts)
            seconds[p].append(time.perf_counter() - began)
    cosines = (vectors["fp32"] * vectors["int8"]).sum(axis=1)
    nearest = (vectors["fp32"] @ vectors["fp32"].T)
    nearest_q = (vectors["int8"] @ vectors["int8"].T)
    np.fill_diagonal(nearest, -1)
    np.fill_diagonal(nearest_q, -1)
    report = {
        "chunks": len(texts), "threads": default_threads(), "repeat": args.repeat,
        "texts_per_s": {p: round(len(texts) / statistics.median(s), 1)
                        for p, s in seconds.items()},
        "cosine_fp32_int8": {"min": round(float(cosines.min()), 4),
                             "median": round(float(np.median(cosines)), 4)},
        # how often a chunk's nearest other chunk is the same under both models
        "same_nearest_neighbour": round(float(np.mean(nearest.argmax(1) == nearest_q.argmax(1))),
                                        3),
    }
    report["int8_speedup"] = round(report["texts_per_s"]["int8"] / report["texts_per_s"]["fp32"],
                                   2)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{report['chunks']} hugo-docs chunks, {report['threads']} threads, "
              f"median of {report['repeat']}")
        for p, rate in report["texts_per_s"].items():
            print(f"  {p}: {rate:7.1f} chunks/s")
        print(f"  int8 speed-up {report['int8_speedup']:.2f}x; cosine to fp32 min "
              f"{report['cosine_fp32_int8']['min']}, median {report['cosine_fp32_int8']['median']}; "
              f"same nearest neighbour {report['same_nearest_neighbour']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
