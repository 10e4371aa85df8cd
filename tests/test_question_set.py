"""The real-question set of the quality bench (bench/queries/real_questions.jsonl) is well formed:
unique ids and threads, sources and answer links of the right sites, answers that exist."""

from __future__ import annotations

import json

from tests.helpers import REPO_ROOT, corpus_version

QUESTIONS = REPO_ROOT / "bench" / "queries" / "real_questions.jsonl"
SITES = {"hugo-docs": "gohugo.io", "opentelemetry-io": "opentelemetry.io"}


def items() -> list[dict]:
    return [json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines()]


def test_every_item_is_well_formed_and_unique():
    seen_ids, seen_sources = set(), set()
    for item in items():
        assert set(item) <= {"id", "corpus", "question", "answers", "source", "answer_link", "note"}
        assert item["corpus"] in SITES and item["question"].strip() and item["answers"]
        assert item["id"] not in seen_ids and item["source"] not in seen_sources, item["id"]
        seen_ids.add(item["id"])
        seen_sources.add(item["source"])
        assert item["source"].startswith("https://"), item["id"]
        assert all(a.startswith("content/") and a.endswith(".md") for a in item["answers"])


def test_every_answer_is_a_page_of_its_corpus():
    for corpus in SITES:
        root = corpus_version(corpus, "v2")  # skips where the corpora are absent
        missing = [(i["id"], a) for i in items() if i["corpus"] == corpus
                   for a in i["answers"] if not (root / a).is_file()]
        assert not missing
