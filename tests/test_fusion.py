"""Reciprocal rank fusion over chunks and over pages (pure functions, no store)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hetriever.fusion import fuse_pages, ordered, page_ranking, rrf_fuse


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
        "A", "B"]


def test_equal_scores_are_ordered_by_id():
    pages = fuse_pages({"dense": ["b#1"], "bm25": ["a#1"]}, {"a#1": "a", "b#1": "b"}, 60)
    assert [p.page for p in pages] == ["a", "b"]


chunk_ids = st.lists(st.sampled_from([f"{p}#{i}" for p in "ABCDE" for i in range(4)]),
                     unique=True, max_size=12)


@given(dense=chunk_ids, bm25=chunk_ids, k=st.integers(1, 100))
def test_page_fusion_is_rrf_over_page_rankings(dense, bm25, k):
    page_of = {c: c.split("#")[0] for c in dense + bm25}
    pages = fuse_pages({"dense": dense, "bm25": bm25}, page_of, k)
    expected = rrf_fuse({"dense": page_ranking(dense, page_of),
                         "bm25": page_ranking(bm25, page_of)}, k)
    assert [p.page for p in pages] == ordered(expected)
    assert sorted(c for p in pages for c in p.chunks) == sorted(set(dense + bm25))
    # A page's first chunk is its best: no other of its chunks has a higher chunk-level score.
    chunk_scores = rrf_fuse({"dense": dense, "bm25": bm25}, k)
    for p in pages:
        assert chunk_scores[p.chunks[0]] == max(chunk_scores[c] for c in p.chunks)
