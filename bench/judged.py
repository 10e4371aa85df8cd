"""Questions counted as readers count them: labels plus pooled judgments.

A question's label is the page one reply linked; neighbouring pages often answer it too. The
judging pool (`make_pool.py`: the first pages of the default search, dense alone and BM25
alone that are not labels) was judged by reading the pages, one line per pair in
bench/queries/judgments/*.jsonl: {"qid", "path", "judgment": "answers" | "related" |
"not_relevant", "why"} (rules in bench/queries/judgments/RULES.md). With judgments, a
question's acceptable pages are its labels plus every page judged "answers".

`success@1`, `success@3`: share of questions with an acceptable page first / in the first 3;
`mrr@10`: mean reciprocal rank of the first acceptable page in the first 10.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

JUDGMENTS = Path(__file__).resolve().parent / "queries" / "judgments"
ANSWERS = "answers"


def judged_answers(folder: Path = JUDGMENTS) -> dict[str, set[str]]:
    """{qid: pages judged to answer it}, over every judgments file (later lines win)."""
    verdicts: dict[tuple[str, str], str] = {}
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else ():
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                verdicts[(str(row["qid"]), str(row["path"]))] = str(row["judgment"])
            except (ValueError, KeyError, TypeError):
                continue  # a malformed line is skipped, not guessed at
    out: dict[str, set[str]] = {}
    for (qid, page), verdict in verdicts.items():
        if verdict == ANSWERS:
            out.setdefault(qid, set()).add(page)
    return out


def judged_pairs(folder: Path = JUDGMENTS) -> int:
    return sum(
        1
        for path in sorted(folder.glob("*.jsonl"))
        if folder.is_dir()
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    )


def done(folder: Path = JUDGMENTS) -> bool:
    return (folder / "DONE").exists()


def acceptable(items: Sequence[dict], judged: dict[str, set[str]] | None) -> list[set[str]]:
    """Each item's acceptable pages: its labels, plus its judged answers when `judged`."""
    return [set(item["answers"]) | (judged or {}).get(item["id"], set()) for item in items]


def success(ranked: Sequence[Sequence[str]], relevant: Sequence[set[str]]) -> dict[str, float]:
    n = max(1, len(relevant))
    first = [
        next((i for i, p in enumerate(got[:10]) if p in rel), None)
        for got, rel in zip(ranked, relevant)
    ]
    return {
        "success@1": round(sum(r == 0 for r in first) / n, 3),
        "success@3": round(sum(r is not None and r < 3 for r in first) / n, 3),
        "mrr@10": round(sum(1.0 / (r + 1) for r in first if r is not None) / n, 3),
    }
