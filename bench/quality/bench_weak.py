"""Where "weak" starts: the nearest result's similarity of answered, missed and unanswerable
real questions, for the `analytics_weak_similarity` cut.

    python -m bench.quality.bench_weak

Every real question (bench/queries/real_questions.jsonl and questions.jsonl, both corpora) is
searched as a server searches it (`hybrid_search`, 5 pages) twice: in its own corpus, where
it is *answered* (its answer among the first 3 pages) or *missed*, and in the other corpus,
where it has no answer (*unanswerable*: a Hugo templating question asked of the OpenTelemetry
docs, and the other way round). Each search's similarity is `analytics.nearest_similarity`,
what the analytics report calls weak below the cut. For each cut the share of each kind
flagged weak; the cut chosen on the tuning part maximises unanswerable flagged minus
answered flagged (Youden's J), and the held-out third is reported with it.
"""

from __future__ import annotations

import argparse
import json
import sys

from bench.common import RESULTS_DIR, bench_settings, load_corpus_chunks, make_embedder, print_table  # noqa: E402
from bench.quality import bench_quality as bq  # noqa: E402
from hetriever.core.config import Settings  # noqa: E402
from hetriever.core.logs import configure_logging  # noqa: E402
from hetriever.search import hybrid as search  # noqa: E402
from hetriever.search.analytics import nearest_similarity  # noqa: E402
from hetriever.search.request import SearchRequest  # noqa: E402

K, TOP = 5, 3
CUTS = [round(0.50 + 0.02 * i, 2) for i in range(21)]  # 0.50 .. 0.90


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    configure_logging("ERROR")
    embedder = make_embedder(bench_settings(RESULTS_DIR / "unused"))
    stores = {}
    for name in bq.CORPORA:
        chunks = load_corpus_chunks(name, settings=Settings())
        if chunks is None:
            print(f"skipping {name}: corpus not found", file=sys.stderr)
            continue
        stores[name], info = bq.index_corpus(chunks, embedder, "chunk")
        print(f"{name}: {info}", file=sys.stderr)
    if len(stores) < 2:
        print("needs both corpora (unanswerable = the other corpus's questions)", file=sys.stderr)
        return 1
    rows = []  # (part, kind, similarity)
    for name, store in stores.items():
        other = next(n for n in stores if n != name)
        for item in bq.question_items(name):
            part = "held-out" if bq.held_out(item["id"]) else "tuning"
            own = search.hybrid_search(
                store, SearchRequest(item["question"], K, repositories=[name])
            )
            found = bq.pages([m.metadata for m in own.matches], TOP)
            kind = "answered" if set(found) & set(item["answers"]) else "missed"
            rows.append((part, kind, nearest_similarity(own.matches)))
            away = search.hybrid_search(
                stores[other], SearchRequest(item["question"], K, repositories=[other])
            )
            rows.append((part, "unanswerable", nearest_similarity(away.matches)))

    def share(part: str, kind: str, cut: float) -> float:
        sims = [s for p, k, s in rows if p == part and k == kind]
        return sum(1 for s in sims if s is not None and s < cut) / max(1, len(sims))

    table, best = [], (None, -1.0)
    for cut in CUTS:
        line = [cut]
        for part in ("tuning", "held-out"):
            a, m, u = (share(part, k, cut) for k in ("answered", "missed", "unanswerable"))
            line += [f"{a:.2f}", f"{m:.2f}", f"{u:.2f}", f"{u - a:.2f}"]
            if part == "tuning" and u - a > best[1]:
                best = (cut, u - a)
        table.append(line)
    counts = {
        (p, k): sum(1 for r in rows if r[0] == p and r[1] == k)
        for p in ("tuning", "held-out")
        for k in ("answered", "missed", "unanswerable")
    }
    print("questions:", {f"{p} {k}": n for (p, k), n in counts.items()})
    print("share flagged weak (similarity under the cut):")
    print_table(
        [
            "cut",
            "tune answered",
            "missed",
            "unanswerable",
            "J",
            "held answered",
            "missed",
            "unanswerable",
            "J",
        ],
        table,
    )
    print(f"best cut on the tuning part: {best[0]} (J {best[1]:.2f})")
    out = RESULTS_DIR / "bench_weak-latest.json"
    out.write_text(
        json.dumps(
            {
                "counts": {f"{p} {k}": n for (p, k), n in counts.items()},
                "table": table,
                "best": best[0],
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
