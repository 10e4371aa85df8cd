"""Raw MiniLM throughput (texts/s) by batch size, with and without length-sorted batching.

Texts are paragraphs of the hugo-docs v2 corpus (`../shared/corpora`, or $HETRIEVER_CORPORA)
when present, else synthetic paragraphs of similar length. Each cell is the median of
`--repeat` timed passes over all texts, after one untimed warm-up batch.

    python -m bench.embedding.bench_embed [--texts 2000] [--batch-sizes 16,32,64,128] [--repeat 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]

from hetriever.core.logs import configure_logging  # noqa: E402
from hetriever.embed.embedder import MiniLMEmbedder, default_threads  # noqa: E402

CORPORA = Path(os.environ.get("HETRIEVER_CORPORA", REPO_ROOT.parent / "shared" / "corpora"))


def corpus_paragraphs(root: Path, limit: int, seed: int) -> list[str]:
    """Blank-line separated blocks of Markdown bodies (front matter dropped), >= 40 chars."""
    paragraphs: list[str] = []
    for path in sorted(root.rglob("*.md")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if text.startswith("---"):
            end = text.find("\n---", 3)
            text = text[end + 4 :] if end != -1 else text
        paragraphs += [p.strip() for p in text.split("\n\n") if len(p.strip()) >= 40]
    random.Random(seed).shuffle(paragraphs)
    return paragraphs[:limit]


def synthetic_paragraphs(limit: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = (
        "hugo page template shortcode content front matter taxonomy section render "
        "collector trace span metric exporter config site build partial function"
    ).split()
    # Log-normal word counts: many short paragraphs, a long tail past the 256-token cap.
    return [
        " ".join(rng.choice(words) for _ in range(max(5, int(rng.lognormvariate(3.6, 0.8)))))
        for _ in range(limit)
    ]


def padding_efficiency(lengths: np.ndarray, batch_size: int, sort: bool) -> float:
    """Real tokens / padded tokens the model computes on."""
    ordered = np.sort(lengths, kind="stable") if sort else lengths
    padded = sum(
        int(ordered[i : i + batch_size].max()) * len(ordered[i : i + batch_size])
        for i in range(0, len(ordered), batch_size)
    )
    return float(lengths.sum()) / padded


def run(args: argparse.Namespace) -> dict:
    source = CORPORA / "hugo-docs" / "v2"
    if source.is_dir():
        texts, origin = corpus_paragraphs(source, args.texts, args.seed), "hugo-docs/v2"
    else:
        texts, origin = synthetic_paragraphs(args.texts, args.seed), "synthetic"

    model_dir = args.model_dir or Path(tempfile.mkdtemp(prefix="bench-minilm-"))
    threads = args.threads or default_threads()
    probe = MiniLMEmbedder(model_dir, threads=threads)
    lengths = np.asarray(probe.token_lengths(texts))

    embedders = {
        (b, sort): MiniLMEmbedder(model_dir, batch_size=b, threads=threads, sort_by_length=sort)
        for b in args.batch_sizes
        for sort in (True, False)
    }
    for (b, _), embedder in embedders.items():
        embedder.embed(texts[:b])  # warm-up: allocations, kernel selection
    seconds: dict[tuple[int, bool], list[float]] = {key: [] for key in embedders}
    # Passes alternate between the configurations so drifting load on a shared machine
    # hits them all alike.
    for _ in range(args.repeat):
        for key, embedder in embedders.items():
            start = time.perf_counter()
            embedder.embed(texts)
            seconds[key].append(time.perf_counter() - start)
            if not args.json:
                print(
                    f"  batch {key[0]:>4} {'sorted' if key[1] else 'unsorted':>8}: "
                    f"{len(texts) / seconds[key][-1]:7.1f} texts/s",
                    file=sys.stderr,
                )

    rows = []
    for batch_size in args.batch_sizes:
        row: dict = {"batch_size": batch_size}
        for sort, label in ((True, "sorted"), (False, "unsorted")):
            median = statistics.median(seconds[(batch_size, sort)])
            row[f"{label}_texts_per_s"] = round(len(texts) / median, 1)
            row[f"{label}_padding_efficiency"] = round(
                padding_efficiency(lengths, batch_size, sort), 3
            )
        row["sorted_speedup"] = round(row["sorted_texts_per_s"] / row["unsorted_texts_per_s"], 2)
        rows.append(row)

    return {
        "texts": len(texts),
        "source": origin,
        "threads": threads,
        "repeat": args.repeat,
        "token_length": {
            "median": float(np.median(lengths)),
            "p90": round(float(np.percentile(lengths, 90)), 1),
            "max": int(lengths.max()),
            "truncated": int((lengths >= 256).sum()),
        },
        "results": rows,
    }


def print_table(report: dict) -> None:
    t = report["token_length"]
    print(
        f"{report['texts']} texts from {report['source']}, {report['threads']} threads, "
        f"median of {report['repeat']}; word-pieces median {t['median']:.0f}, "
        f"p90 {t['p90']:.0f}, {t['truncated']} at the 256 cap"
    )
    print(
        f"{'batch':>5}  {'sorted t/s':>10}  {'unsorted t/s':>12}  {'speedup':>7}  "
        f"{'pad eff sorted':>14}  {'pad eff unsorted':>16}"
    )
    for r in report["results"]:
        print(
            f"{r['batch_size']:>5}  {r['sorted_texts_per_s']:>10.1f}  "
            f"{r['unsorted_texts_per_s']:>12.1f}  {r['sorted_speedup']:>6.2f}x  "
            f"{r['sorted_padding_efficiency']:>14.3f}  {r['unsorted_padding_efficiency']:>16.3f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument(
        "--batch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[16, 32, 64, 128]
    )
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--model-dir",
        type=Path,
        default=None,
        help="a prepared model dir (default: build one in a temp dir)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    configure_logging("ERROR")  # truncation warnings for long paragraphs are expected here
    report = run(args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
