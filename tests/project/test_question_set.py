"""The real-question sets of the quality bench (bench/queries/real_questions.jsonl and
questions.jsonl) are well formed: unique ids and threads, sources and answer links of the right
sites, answers that exist; and the held-out third is the same rule for old and new items."""

from __future__ import annotations

import hashlib
import json

from tests.support.helpers import REPO_ROOT, corpus_version

QUERIES = REPO_ROOT / "bench" / "queries"
FILES = (QUERIES / "real_questions.jsonl", QUERIES / "questions.jsonl")
SITES = {"hugo-docs": "gohugo.io", "opentelemetry-io": "opentelemetry.io"}
KINDS = {"issue", "forum", "blog", "qa", "docs-feedback"}


def items() -> list[dict]:
    return [
        json.loads(line)
        for path in FILES
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def held_out(item_id: str) -> bool:  # bench/quality/bench_quality.py's rule
    return int(hashlib.sha1(item_id.encode("utf-8")).hexdigest(), 16) % 3 == 0


def test_every_item_is_well_formed_and_unique():
    seen_ids, seen_sources = set(), set()
    for item in items():
        assert set(item) <= {
            "id",
            "corpus",
            "question",
            "answers",
            "source",
            "answer_link",
            "note",
            "kind",
        }
        assert item["corpus"] in SITES and item["question"].strip() and item["answers"]
        assert item["id"] not in seen_ids and item["source"] not in seen_sources, item["id"]
        seen_ids.add(item["id"])
        seen_sources.add(item["source"])
        assert item["source"].startswith("https://"), item["id"]
        assert item.get("kind", "issue") in KINDS, item["id"]
        assert all(a.startswith("content/") and a.endswith(".md") for a in item["answers"])


def test_a_third_of_each_corpus_is_held_out():
    for corpus in SITES:
        ids = [i["id"] for i in items() if i["corpus"] == corpus]
        share = sum(held_out(i) for i in ids) / len(ids)
        assert 0.2 < share < 0.45, (corpus, share)


def test_every_answer_is_a_page_of_its_corpus():
    for corpus in SITES:
        root = corpus_version(corpus, "v2")  # skips where the corpora are absent
        missing = [
            (i["id"], a)
            for i in items()
            if i["corpus"] == corpus
            for a in i["answers"]
            if not (root / a).is_file()
        ]
        assert not missing
