"""Two small real sites in one store rank as one: a search naming no repository ranks a
question as the search in its own site does.

A handful of real pages of the Hugo and OpenTelemetry documentation (the shared corpora, v2),
each set its own git repository, indexed by the real pipeline into one embedded Chroma + BM25
store (embedded, and over `chroma run`) with the real MiniLM. Before routing (hetriever.search.routing) and corpus-wide idf,
OpenTelemetry's "Submitting content" page, a keyword match for "weight" and "order", stood
above Hugo's menu pages for a menu question, as the best BM25 match of its own collection.
"""

from __future__ import annotations

import asyncio
import shutil

import numpy as np
import pytest

from hetriever.discover.repositories import Repository
from hetriever.index.indexing import index_repository
from hetriever.search.hybrid import hybrid_search
from hetriever.search.request import SearchRequest
from hetriever.store.bm25.bm25_index import CorpusStats
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import server_database_client, store_settings
from tests.support.helpers import commit_all, corpus_version, init_repo

PAGES = {
    "hugo-docs": [
        "content/en/content-management/menus.md",
        "content/en/content-management/multilingual.md",
        "content/en/content-management/urls.md",
        "content/en/methods/menu/ByWeight.md",
        "content/en/templates/menu.md",
    ],
    "opentelemetry-io": [
        "content/en/docs/contributing/pull-requests.md",
        "content/en/docs/concepts/resources/index.md",
        "content/en/docs/concepts/signals/metrics.md",
        "content/en/docs/concepts/instrumentation/zero-code/index.md",
    ],
}
QUESTIONS = {  # question -> the site it is about
    "how do I make a menu ordered by weight": "hugo-docs",
    "how can I translate my site into another language": "hugo-docs",
    "how to set the service name": "opentelemetry-io",
    "how do I open a pull request to change the docs": "opentelemetry-io",
}


@pytest.fixture(
    scope="module", params=["embedded", pytest.param("server", marks=pytest.mark.server)]
)
def store(request, tmp_path_factory, minilm_embedder):
    tmp = tmp_path_factory.mktemp("sites")
    server = request.getfixturevalue("chroma_server") if request.param == "server" else None
    client = server_database_client(server, "sites-together") if server else None
    store = Store(store_settings(tmp, server), embedder=minilm_embedder, client=client)
    for name, pages in PAGES.items():
        source = corpus_version(name, "v2")  # skips where the corpora are absent
        repo = init_repo(tmp / name)
        for page in pages:
            (repo / page).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source / page, repo / page)
        commit_all(repo, name)
        result = asyncio.run(
            index_repository(Repository(name=name, path=repo), store, store.settings)
        )
        assert result.completed and not result.failed
    yield store
    store.close_sync()


def _pages(store, query: str, namespaces=None) -> list[tuple[str, str]]:
    got = hybrid_search(store, SearchRequest(query, 5, repositories=namespaces))
    return [(m.metadata["repository"], m.metadata["file_path"]) for m in got.matches]


@pytest.mark.parametrize("question", sorted(QUESTIONS))
def test_no_repository_named_ranks_as_its_own_site(store, question):
    site = QUESTIONS[question]
    together = _pages(store, question)
    alone = _pages(store, question, [site])
    assert together[0][0] == site  # the first result is the site's the question is about
    # and its pages come in the order its own search gives them, none of the other's between
    assert [p for p in together if p[0] == site][:3] == alone[:3]
    assert all(r == site for r, _ in together[:3])


def test_the_facets_name_the_sites_routing_set_aside(store):
    # Routed to one site, a search still says how many candidate pages each site had, so a
    # caller can narrow to the other one.
    got = hybrid_search(store, SearchRequest("how do I make a menu ordered by weight", 5))
    assert {r.metadata["repository"] for r in got.matches[:3]} == {"hugo-docs"}
    counts = {f["value"]: f["count"] for f in got.facets["repository"]}
    assert set(counts) == {"hugo-docs", "opentelemetry-io"}, counts
    assert all(n >= 1 for n in counts.values())
    alone = hybrid_search(
        store,
        SearchRequest(
            "how do I make a menu ordered by weight", 5, repositories=["opentelemetry-io"]
        ),
    )
    assert alone.matches and {r.metadata["repository"] for r in alone.matches} == {
        "opentelemetry-io"
    }


def test_every_site_is_searched_when_the_routing_margin_is_one(store):
    wide = store.settings
    store.settings = wide.model_copy(update={"route_margin": 1.0})
    try:
        sites = {r for r, _ in _pages(store, "how do I make a menu ordered by weight")}
    finally:
        store.settings = wide
    assert sites == set(PAGES)  # without routing, the other site's keyword matches come in


def test_idf_over_several_sites_is_one_scale(store):
    query = "menu weight"
    hugo, otel = store.search_bm25("hugo-docs"), store.search_bm25("opentelemetry-io")
    both = CorpusStats.of([hugo, otel], query)
    n_hugo, df_hugo = hugo.term_counts(query)
    n_otel, df_otel = otel.term_counts(query)
    assert both.documents == n_hugo + n_otel
    assert both.frequencies["menu"] == df_hugo.get("menu", 0) + df_otel.get("menu", 0)
    # One scale: the same term has the same idf in both sites' scores.
    assert both.idf("menu") == pytest.approx(
        CorpusStats(n_hugo + n_otel, {"menu": df_hugo["menu"] + df_otel.get("menu", 0)}).idf("menu")
    )
    alone = dict(otel.search(query, 5))
    shared = dict(otel.search(query, 5, corpus=both))
    assert alone and shared and set(shared) <= set(otel.ids())
    # "menu" is common in the Hugo site: over both sites it weighs less in OpenTelemetry's
    assert max(shared.values()) < max(alone.values())


def test_each_site_has_a_unit_mean_vector(store):
    from hetriever.search.routing import centroid

    for name in PAGES:
        mean = centroid(store, name)
        assert mean is not None and mean.shape == (384,)
        assert abs(float(np.linalg.norm(mean)) - 1.0) < 1e-4
    assert centroid(store, "hugo-docs") is centroid(store, "hugo-docs")  # read once


def test_routing_keeps_the_sites_within_the_margin():
    from hetriever.search.candidates import _Hit
    from hetriever.search.routing import relevance, routed

    hits = {f"a{i}": _Hit(f"a{i}", "site-a", dense_score=0.8 - i / 100) for i in range(6)}
    hits.update({f"b{i}": _Hit(f"b{i}", "site-b", dense_score=0.79 - i / 100) for i in range(6)})
    ids = sorted(hits, key=lambda d: -(hits[d].dense_score or 0))
    scores = relevance(hits, ids, top=5)
    assert scores["site-a"] == pytest.approx(0.78) and scores["site-b"] == pytest.approx(0.77)
    names = ["site-a", "site-b", "site-c"]  # site-c: no dense candidate at all
    assert routed(None, names, hits, ids, None, 0.0) == ["site-a"]
    assert routed(None, names, hits, ids, None, 0.02) == ["site-a", "site-b"]
    assert routed(None, names, hits, ids, None, 1.0) == names  # 1: every site
    assert routed(None, names, hits, [], None, 0.0) == names  # no dense evidence: all


def test_the_other_site_fills_up_a_search_its_own_site_cannot(store):
    got = hybrid_search(store, SearchRequest("how do I make a menu ordered by weight", 20))
    sites = [m.metadata["repository"] for m in got.matches]
    assert sites[: len(PAGES["hugo-docs"])] == ["hugo-docs"] * len(PAGES["hugo-docs"])
    assert "opentelemetry-io" in sites  # after every Hugo page, not instead of none
    pages = [(m.metadata["repository"], m.metadata["file_path"]) for m in got.matches]
    assert len(pages) == len(set(pages))


def test_a_near_site_with_far_more_of_the_words_takes_the_lead():
    from hetriever.search.routing import keyword_veto

    scores = {"hugo-docs": 0.70, "opentelemetry-io": 0.74}
    # dense's lead is within the gap, and the leader has under half the rival's best BM25
    assert (
        max(
            keyword_veto(scores, {"hugo-docs": 45.0, "opentelemetry-io": 10.0}).items(),
            key=lambda kv: kv[1],
        )[0]
        == "hugo-docs"
    )
    # the same words: dense decides
    assert keyword_veto(scores, {"hugo-docs": 20.0, "opentelemetry-io": 18.0}) == scores
    # too far behind by dense: no veto, whatever the words
    far = {"hugo-docs": 0.60, "opentelemetry-io": 0.74}
    assert keyword_veto(far, {"hugo-docs": 45.0, "opentelemetry-io": 10.0}) == far
    assert keyword_veto(scores, {}) == scores
