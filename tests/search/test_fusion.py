"""Rank fusion and score fusion over chunks and over pages (pure functions, no store)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetriever.search.fusion import (
    best_per_page,
    fuse_pages,
    ordered,
    page_ranking,
    rrf_fuse,
    score_fuse,
    standardised,
)


def _filler(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def test_a_page_first_in_both_lists_through_different_chunks_wins():
    # Page P is first for dense through one chunk and first for BM25 through another; page Q
    # has one chunk, 7th for dense and 9th for BM25. Every other chunk is a page of its own.
    dense = ["P#intro", *_filler("d", 5), "Q#only"]
    bm25 = ["P#usage", *_filler("b", 7), "Q#only"]
    page_of = {c: c.split("#")[0] for c in dense + bm25}
    chunk_level = rrf_fuse({"dense": dense, "bm25": bm25}, 60)
    assert ordered(chunk_level)[0] == "Q#only"  # fused per chunk, Q wins: the old behaviour
    pages = fuse_pages({"dense": dense, "bm25": bm25}, page_of, 60)
    assert [p.page for p in pages][:2] == ["P", "Q"]
    assert pages[0].fused == 2 / 61
    assert set(pages[0].chunks) == {"P#intro", "P#usage"}


def test_a_long_page_takes_one_place_and_keeps_its_chunks_in_order():
    dense = ["L#1", "L#2", "L#3", "S#1", "L#4"]
    bm25 = ["L#2", "S#1", "L#1"]
    page_of = {c: c.split("#")[0] for c in dense + bm25}
    pages = fuse_pages({"dense": dense, "bm25": bm25}, page_of, 60)
    assert [p.page for p in pages] == ["L", "S"]
    # L#2 (2nd and 1st) beats L#1 (1st and 3rd); then the dense-only L#3 and L#4.
    assert pages[0].chunks == ("L#2", "L#1", "L#3", "L#4")


def test_chunks_without_a_page_are_passed_over():
    dense = ["gone", "A#1"]
    pages = fuse_pages({"dense": dense, "bm25": []}, {"A#1": "A"}, 60)
    assert [(p.page, p.fused) for p in pages] == [("A", 1 / 61)]
    assert page_ranking(["x", "A#1", "A#2", "B#1"], {"A#1": "A", "A#2": "A", "B#1": "B"}) == [
        "A",
        "B",
    ]


def test_equal_scores_are_ordered_by_id():
    pages = fuse_pages({"dense": ["b#1"], "bm25": ["a#1"]}, {"a#1": "a", "b#1": "b"}, 60)
    assert [p.page for p in pages] == ["a", "b"]


chunk_ids = st.lists(
    st.sampled_from([f"{p}#{i}" for p in "ABCDE" for i in range(4)]), unique=True, max_size=12
)


@given(dense=chunk_ids, bm25=chunk_ids, k=st.integers(1, 100))
def test_page_fusion_is_rrf_over_page_rankings(dense, bm25, k):
    page_of = {c: c.split("#")[0] for c in dense + bm25}
    pages = fuse_pages({"dense": dense, "bm25": bm25}, page_of, k)
    expected = rrf_fuse(
        {"dense": page_ranking(dense, page_of), "bm25": page_ranking(bm25, page_of)}, k
    )
    assert [p.page for p in pages] == ordered(expected)
    assert sorted(c for p in pages for c in p.chunks) == sorted(set(dense + bm25))
    # A page's first chunk is its best: no other of its chunks has a higher chunk-level score.
    chunk_scores = rrf_fuse({"dense": dense, "bm25": bm25}, k)
    for p in pages:
        assert chunk_scores[p.chunks[0]] == max(chunk_scores[c] for c in p.chunks)


def test_standardised_scores_have_mean_zero_and_unit_spread():
    z = standardised({"a": 3.0, "b": 1.0, "c": 2.0})
    assert z["a"] == pytest.approx(1.2247, abs=1e-4) and z["c"] == 0.0
    assert sum(z.values()) == pytest.approx(0.0)
    assert standardised({"a": 2.0, "b": 2.0}) == {"a": 0.0, "b": 0.0}
    assert standardised({}) == {}


def test_score_fusion_keeps_how_far_ahead_a_retriever_is():
    # BM25 finds page T far ahead of the rest (an exact match); dense puts T 3rd, close behind
    # two near-ties. RRF sees ranks only and lets dense's first page win; score fusion sees
    # that BM25 is sure and dense is not.
    dense = {"U#1": 0.71, "V#1": 0.70, "T#1": 0.69, "W#1": 0.40}
    bm25 = {"T#2": 30.0, "U#1": 5.0, "W#1": 4.0, "V#1": 3.9}
    page_of = {c: c.split("#")[0] for c in [*dense, *bm25]}
    rankings = {"dense": ordered(dense), "bm25": ordered(bm25)}
    by_rank = fuse_pages(rankings, page_of, 5)
    assert by_rank[0].page == "U"
    by_score = fuse_pages(
        rankings, page_of, 5, {"dense": 0.6, "bm25": 0.4}, scores={"dense": dense, "bm25": bm25}
    )
    assert by_score[0].page == "T"
    assert set(by_score[0].chunks) == {"T#1", "T#2"}


def test_a_page_one_retriever_missed_takes_that_retrievers_lowest_score():
    fused = score_fuse({"dense": {"a": 1.0, "b": 0.0}, "bm25": {"a": 2.0, "c": 0.0}})
    # a: z 1 + 1; b: dense z -1, BM25 floor -1; c: dense floor -1, BM25 z -1.
    assert fused == {"a": pytest.approx(2.0), "b": pytest.approx(-2.0), "c": pytest.approx(-2.0)}
    assert score_fuse({"dense": {"a": 0.5}, "bm25": {}}) == {"a": 0.0}


def test_a_page_scores_its_best_chunk():
    assert best_per_page(
        {"A#1": 0.2, "A#2": 0.9, "B#1": 0.5, "x": 1.0}, {"A#1": "A", "A#2": "A", "B#1": "B"}
    ) == {"A": 0.9, "B": 0.5}


scores_of = st.dictionaries(
    st.sampled_from([f"{p}#{i}" for p in "ABCDE" for i in range(4)]),
    st.floats(-5, 50, allow_nan=False).map(lambda x: round(x, 3)),
    max_size=12,
)


@given(dense=scores_of, bm25=scores_of, w=st.floats(0.05, 0.95))
def test_score_page_fusion_is_weighted_z_of_best_chunks(dense, bm25, w):
    page_of = {c: c.split("#")[0] for c in [*dense, *bm25]}
    weights = {"dense": w, "bm25": 1 - w}
    pages = fuse_pages(
        {"dense": ordered(dense), "bm25": ordered(bm25)},
        page_of,
        5,
        weights,
        scores={"dense": dense, "bm25": bm25},
    )
    expected = score_fuse(
        {"dense": best_per_page(dense, page_of), "bm25": best_per_page(bm25, page_of)}, weights
    )
    assert [p.page for p in pages] == ordered(expected)
    assert sorted(c for p in pages for c in p.chunks) == sorted({*dense, *bm25})
    # One retriever alone: its own order of pages.
    alone = fuse_pages(
        {"dense": ordered(dense), "bm25": []},
        page_of,
        5,
        weights,
        scores={"dense": dense, "bm25": {}},
    )
    best = best_per_page(dense, page_of)
    assert [best[p.page] for p in alone] == sorted(best.values(), reverse=True)


def test_dense_counts_less_in_languages_the_english_model_reads_poorly():
    from hetriever.core.config import Settings
    from hetriever.search.results import dense_weight_for

    s = Settings()
    assert dense_weight_for(s, "") == dense_weight_for(s, "en") == s.dense_weight
    assert dense_weight_for(s, "en-us") == s.dense_weight
    assert dense_weight_for(s, "ja") == dense_weight_for(s, "zh-cn") == s.dense_weight_cjk
    assert dense_weight_for(s, "es") == dense_weight_for(s, "pt-br") == s.dense_weight_other
    assert s.dense_weight_cjk < s.dense_weight_other < s.dense_weight


def test_a_short_english_query_leans_on_the_words_and_a_question_on_meaning():
    from hetriever.core.config import Settings
    from hetriever.search.results import dense_weight_for

    s = Settings()
    title = "Configure the collector"  # 2 distinct terms: a look-up by name
    question = (
        "How do I configure the collector so that it exports traces to two backends "
        "and drops the health check spans?"
    )
    assert (
        dense_weight_for(s, "", title)
        == dense_weight_for(s, "en", title)
        == s.dense_weight_short
        < s.dense_weight
    )
    assert dense_weight_for(s, "", question) == s.dense_weight
    # other languages keep their own weight whatever the query's length
    assert dense_weight_for(s, "ja", title) == s.dense_weight_cjk
    # the cut counts distinct analysed terms: stopwords and repeats do not make a query longer
    assert dense_weight_for(s, "", "the the collector collector of it") == s.dense_weight_short
    assert dense_weight_for(Settings(short_query_terms=0), "", title) == s.dense_weight
