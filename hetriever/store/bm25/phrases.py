"""Phrase matches in headings: a BM25 bonus for query word pairs a chunk's headings contain.

People type what they read: a page title, a FAQ heading ("How do I set the service name?"),
an error message a troubleshooting section is titled with. Okapi BM25 scores words one by one,
so a chunk that holds the phrase under its heading scores like any chunk with the same words
scattered through its body, and the words of such phrases ("set", "service", "name") are
common. Here the query's adjacent analysed terms ("set service", "service name") are matched
against the adjacent terms of the chunk's title and heading path (for a page record, its
title and description: what the page says it is about). Each pair found adds the idf of its
rarer word, times the weight, to the chunk's raw BM25 score.

Only a search's candidates are rescored, from the metadata the BM25 index already holds, so
it costs no index space. Measured in bench/README.md ("Phrases in headings").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from hetriever.store.bm25.analyzer import tokenize

PHRASE_WEIGHT = 1.5  # the setting bm25_phrase_weight's default (swept in bench/README.md)
PHRASE_CANDIDATES = 100  # BM25's best this many by words are rescored, whatever k is

Pair = tuple[str, str]

_PAIRS: dict[str, frozenset[Pair]] = {}
_PAIRS_MAX = 100_000  # distinct heading texts remembered (a site has a few thousand)


def word_pairs(terms: Sequence[str]) -> frozenset[Pair]:
    """Adjacent analysed terms: ["servic", "name", "set"] -> {(servic, name), (name, set)}."""
    return frozenset(zip(terms, terms[1:]))


def heading_text(meta: Mapping) -> str:
    """What a chunk is titled with: its page title and heading path; for a page record, the
    title and the page's description."""
    title = str(meta.get("title") or "")
    if meta.get("page_record"):
        return f"{title}\n{meta.get('description') or ''}"
    return f"{title}\n{meta.get('heading_context') or ''}"


def heading_pairs(meta: Mapping) -> frozenset[Pair]:
    """`word_pairs` of `heading_text`, cached: every chunk of a section shares its text."""
    text = heading_text(meta)
    pairs = _PAIRS.get(text)
    if pairs is None:
        pairs = word_pairs(tokenize(text))
        if len(_PAIRS) >= _PAIRS_MAX:
            _PAIRS.clear()
        _PAIRS[text] = pairs
    return pairs


def phrase_bonus(
    query_terms: Sequence[str], metas: Sequence[Mapping], idf: Callable[[str], float]
) -> list[float]:
    """Per candidate: the sum over the query's word pairs found in its headings of the idf of
    the pair's rarer word (0.0 where none is found)."""
    wanted = word_pairs(query_terms)
    if not wanted:
        return [0.0] * len(metas)
    weight = {(a, b): max(idf(a), idf(b)) for a, b in wanted}  # once per search, not per hit
    return [sum(weight[pair] for pair in wanted & heading_pairs(meta)) for meta in metas]


def with_phrases(
    hits: Sequence[tuple[str, float]],
    query_terms: Sequence[str],
    metas: Sequence[Mapping],
    weight: float,
    idf: Callable[[str], float],
) -> list[tuple[str, float]]:
    """(id, raw BM25) hits, best first, with `weight` x `phrase_bonus` added to the first
    PHRASE_CANDIDATES (metas in hit order). The bonus only adds, so those stay ahead of the
    rest, and however many hits a search asks for, the first ones rank the same."""
    head = min(len(hits), PHRASE_CANDIDATES)
    bonus = phrase_bonus(query_terms, metas[:head], idf)
    return [
        (doc_id, raw + weight * extra) for (doc_id, raw), extra in zip(hits[:head], bonus)
    ] + list(hits[head:])
