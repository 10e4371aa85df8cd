"""Hybrid search against real Chroma (embedded and server), real BM25 and the real embedder."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from structlog.testing import capture_logs

from hetriever.core.errors import (
    BackendConnectionError,
    EmbeddingError,
    InvalidFilterError,
    InvalidLimitError,
)
from hetriever.embed.embedder import MiniLMEmbedder
from hetriever.search import dense as dense_module
from hetriever.search.dense import similarity
from hetriever.search.fusion import rrf_fuse
from hetriever.search.hybrid import MAX_QUERY_CHARS, retrieve
from hetriever.search.request import SearchRequest
from hetriever.store.chunk_records import ChunkCollection
from hetriever.store.filters import matches, validate_filter
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import (
    make_chunk,
    running_chroma_server,
    server_database_client,
    stop_chroma_server,
    store_settings,
)

A, B = "alpha-docs", "beta-docs"

# (repository, file, text, extra metadata): small, with distinctive words per document.
DOCS = [
    (
        A,
        "content/functions/where.md",
        "The where function filters a collection of pages by a parameter value, like a SQL "
        "WHERE clause.",
        {"tags": ["functions", "filtering"]},
    ),
    (
        A,
        "content/functions/first.md",
        "The first function returns the first N items of a slice or a map.",
        {"tags": ["functions"]},
    ),
    (
        A,
        "content/install/linux.md",
        "Install Hugo on Linux with the snap package or download the extended binary.",
        {"tags": ["install", "linux"]},
    ),
    (
        A,
        "content/install/macos.md",
        "Install Hugo on macOS with Homebrew: brew install hugo.",
        {"tags": ["install"]},
    ),
    (
        A,
        "content/templates/partials.md",
        "Partials are small reusable template fragments called with the partial function.",
        {"tags": ["templates"]},
    ),
    (
        A,
        "content/hosting/netlify.md",
        "Deploy your site to Netlify by connecting the git repository and a build command.",
        {},
    ),
    (
        B,
        "content/collector/receivers.md",
        "The OpenTelemetry Collector receives traces, metrics and logs through receivers.",
        {"tags": ["collector"]},
    ),
    (
        B,
        "content/collector/exporters.md",
        "Exporters send telemetry from the Collector to backends such as Jaeger or Prometheus.",
        {"tags": ["collector"]},
    ),
    (
        B,
        "content/install/kubernetes.md",
        "Install the Collector on Kubernetes with the Helm chart or the operator.",
        {"tags": ["install"]},
    ),
]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def chunks_of(repo: str | None = None) -> list:
    return [make_chunk(r, f, t, **x) for r, f, t, x in DOCS if repo in (None, r)]


class BrokenEmbedder(MiniLMEmbedder):
    """The real model, with embedding failing (fault injection for the fallback path)."""

    def embed(self, texts):  # type: ignore[override]
        raise EmbeddingError("injected: the embedding model is unavailable")


def populate(store: Any) -> Any:
    for chunk in chunks_of():
        run(store.upsert_file_chunks(chunk.repository, chunk.file_path, [chunk]))
    return store


@pytest.fixture(
    scope="module", params=["embedded", pytest.param("server", marks=pytest.mark.server)]
)
def stores(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    minilm_embedder,
    minilm_model_dir,
) -> Iterator[tuple[Any, Any]]:
    """(store, broken_store) over one populated index, shared by the read-only tests of a
    module; broken_store's embedder fails. Tests that tamper with data use `make_store`."""
    server = request.getfixturevalue("chroma_server") if request.param == "server" else None
    settings = store_settings(tmp_path_factory.mktemp("search"), server)
    client = server_database_client(server, "search-tests") if server else None
    store = populate(Store(settings, embedder=minilm_embedder, client=client))
    broken = Store(settings, embedder=BrokenEmbedder(minilm_model_dir, threads=1), client=client)
    yield store, broken
    broken.close_sync()
    store.close_sync()


@pytest.fixture
def store(stores) -> Any:
    return stores[0]


@pytest.fixture
def broken_store(stores) -> Any:
    return stores[1]


def ids_for(query_filter: dict, repo: str | None = None) -> set[str]:
    normalised = validate_filter(query_filter)
    return {c.id for c in chunks_of(repo) if matches(normalised, c.metadata)}


# --- pure parts ----------------------------------------------------------------------


def test_rrf_fuse_and_similarity() -> None:
    fused = rrf_fuse({"dense": ["a", "b", "c"], "bm25": ["b", "d"]}, k=60)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["a"] == pytest.approx(1 / 61) and fused["d"] == pytest.approx(1 / 62)
    assert max(fused, key=fused.get) == "b"
    assert similarity(0.0) == 1.0 and similarity(1.0) == 0.5 and similarity(2.0) == 0.0
    assert similarity(2.5) == 0.0 and similarity(2.0, "l2") == 0.5


# --- ranking and scores ----------------------------------------------------------------


def test_distinctive_query_ranks_its_document_first(store) -> None:
    where_id = chunks_of(A)[0].id
    result = run(
        retrieve(store, SearchRequest("filter pages by parameter value like a SQL where clause"))
    )
    assert result.mode == "hybrid" and result.matches
    top = result.matches[0]
    assert top.doc_id == where_id and top.source == "hybrid"
    # Score fusion (the default): first in both lists, so the highest weighted z-sum, and
    # above an average candidate (0.5 after the logistic).
    assert top.score > 0.5 and all(top.score > m.score for m in result.matches[1:])
    assert top.score == pytest.approx(1 / (1 + math.exp(-top.rrf_score)))
    assert top.bm25_score == pytest.approx(1.0)
    assert result.total_results == len(result.matches) <= 5
    assert result.retriever_counts["dense"] >= 1 and result.retriever_counts["bm25"] >= 1
    assert result.retriever_counts["merged"] >= len(result.matches)
    assert result.search_time_ms > 0
    scores = [m.score for m in result.matches]
    assert scores == sorted(scores, reverse=True)
    for m in result.matches:
        assert 0.0 <= m.score <= 1.0
        assert m.content and m.metadata["content_hash"]
        assert (
            m.source
            == {(True, True): "hybrid", (True, False): "dense", (False, True): "bm25"}[
                (m.dense_score is not None, m.bm25_score is not None)
            ]
        )
        for s in (m.dense_score, m.bm25_score):
            assert s is None or 0.0 <= s <= 1.0
    # The same search with its defaults finds the same chunk first.
    default = run(retrieve(store, SearchRequest("SQL where clause parameter")))
    assert [m.doc_id for m in default.matches][0] == where_id


def test_rrf_fusion_when_settings_ask_for_it(store) -> None:
    rrf = Store(
        store.settings.replace(fusion="rrf"), embedder=store.embedder, client=store.chroma.client
    )
    result = run(
        retrieve(rrf, SearchRequest("filter pages by parameter value like a SQL where clause"))
    )
    top = result.matches[0]
    assert top.doc_id == chunks_of(A)[0].id
    assert top.score == pytest.approx(1.0)  # rank 1 in both lists: the maximum
    assert top.rrf_score == pytest.approx(2 / (rrf.settings.rrf_k + 1))


def test_dense_only_when_hybrid_is_off(store) -> None:
    result = run(
        retrieve(store, SearchRequest("How do I install on a Mac?", top_k=3, hybrid=False))
    )
    assert result.mode == "dense" and len(result.matches) == 3
    assert result.retriever_counts["bm25"] == 0
    for m in result.matches:
        assert m.source == "dense" and m.bm25_score is None and m.rrf_score is None
        assert m.score == m.dense_score
    assert result.matches[0].metadata["file_path"] == "content/install/macos.md"
    off = Store(
        store.settings.replace(use_hybrid_search=False),
        embedder=store.embedder,
        client=store.chroma.client,
    )
    assert off.views.search_mode() == "dense" and store.views.search_mode() == "hybrid"
    assert run(retrieve(off, SearchRequest("install hugo"))).mode == "dense"


def test_bm25_only_when_embedding_fails(broken_store) -> None:
    with capture_logs() as logs:
        result = run(retrieve(broken_store, SearchRequest("Homebrew brew install", top_k=3)))
    assert result.mode == "bm25"
    assert any(e["event"] == "dense_retrieval_failed" for e in logs)
    assert result.matches[0].metadata["file_path"] == "content/install/macos.md"
    for m in result.matches:
        assert m.source == "bm25" and m.dense_score is None
        assert m.content and m.metadata["repository"] in (A, B)  # fetched for BM25-only hits
        assert m.score == m.bm25_score
    assert run(retrieve(broken_store, SearchRequest("Homebrew", hybrid=False))).mode == "bm25"


def test_similarity_threshold_applies_to_the_final_score(store) -> None:
    strict = Store(
        store.settings.replace(similarity_threshold=0.75),
        embedder=store.embedder,
        client=store.chroma.client,
    )
    result = run(
        retrieve(strict, SearchRequest("install hugo on linux snap", top_k=10, hybrid=False))
    )
    assert result.matches and all(m.score >= 0.75 for m in result.matches)
    loose = run(
        retrieve(store, SearchRequest("install hugo on linux snap", top_k=10, hybrid=False))
    )
    assert len(loose.matches) > len(result.matches)


# --- filters -----------------------------------------------------------------------------

FILTERS = [
    {"section": "install"},
    {"section": {"$in": ["functions", "templates"]}},
    {"tags": {"$contains": "install"}},
    {"$and": [{"tags": {"$contains": "functions"}}, {"chunk_index": 0}]},
    {"$or": [{"section": "hosting"}, {"tags": {"$contains": "linux"}}]},
]


@pytest.mark.parametrize("where", FILTERS, ids=["eq", "in", "contains", "and", "or"])
def test_filters_apply_to_both_retrievers_identically(store, broken_store, where) -> None:
    expected = ids_for(where)
    assert expected
    # Dense sees every matching chunk (2 * top_k candidates > fixture size).
    dense = run(retrieve(store, SearchRequest("hugo", top_k=10, filters=where, hybrid=False)))
    assert {m.doc_id for m in dense.matches} == expected
    # BM25 sees the matching chunks that contain a query term ("the", "install", "hugo").
    words = "the install hugo collector function"
    bm25 = run(retrieve(broken_store, SearchRequest(words, top_k=10, filters=where)))
    assert bm25.mode == "bm25" and bm25.matches
    assert {m.doc_id for m in bm25.matches} <= expected
    hybrid = run(retrieve(store, SearchRequest(words, top_k=10, filters=where)))
    assert {m.doc_id for m in hybrid.matches} == expected
    assert {m.doc_id for m in bm25.matches} == {
        m.doc_id for m in hybrid.matches if m.bm25_score is not None
    }


def test_invalid_filter(store) -> None:
    for bad in ({"section": {"$regex": "x"}}, {"$or": []}, {"tags": {"$in": []}}, ["section"]):
        with pytest.raises(InvalidFilterError):
            run(retrieve(store, SearchRequest("install", filters=bad)))


# --- limits and queries -------------------------------------------------------------------


def test_limits(store) -> None:
    assert len(run(retrieve(store, SearchRequest("install", top_k=None))).matches) == 5
    assert len(run(retrieve(store, SearchRequest("install", top_k=0))).matches) == 5
    assert len(run(retrieve(store, SearchRequest("install", top_k=-3))).matches) == 5
    assert len(run(retrieve(store, SearchRequest("install", top_k=2))).matches) == 2
    assert len(run(retrieve(store, SearchRequest("install", top_k=100))).matches) == len(DOCS)
    with pytest.raises(InvalidLimitError):
        run(retrieve(store, SearchRequest("install", top_k=101)))


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_empty_query_returns_nothing(store, query: str) -> None:
    result = run(retrieve(store, SearchRequest(query)))
    assert result.matches == [] and result.total_results == 0


def test_very_long_query_is_truncated_not_rejected(store) -> None:
    query = "Homebrew macOS " + "x" * (MAX_QUERY_CHARS * 2)
    result = run(retrieve(store, SearchRequest(query, top_k=3)))
    assert result.matches and result.mode == "hybrid"


# --- namespaces and integrity ---------------------------------------------------------------


@pytest.mark.parametrize(
    "where",
    [
        None,
        {"repository": B},
        {"repository": {"$in": [A, B]}},
        {"$or": [{"repository": B}, {"section": "collector"}, {"section": "install"}]},
        {"repository": {"$ne": A}},
    ],
)
def test_namespace_scope_cannot_be_widened_by_filters(store, where) -> None:
    for hybrid in (True, False):
        result = run(
            retrieve(
                store,
                SearchRequest(
                    "OpenTelemetry Collector receivers exporters Kubernetes",
                    top_k=20,
                    filters=where,
                    repositories=[A],
                    hybrid=hybrid,
                ),
            )
        )
        assert all(m.metadata["repository"] == A for m in result.matches)
        assert not {m.doc_id for m in result.matches} & {c.id for c in chunks_of(B)}
    unscoped = run(retrieve(store, SearchRequest("OpenTelemetry Collector receivers", top_k=20)))
    assert {m.metadata["repository"] for m in unscoped.matches} == {A, B}
    assert (
        run(retrieve(store, SearchRequest("Collector", repositories=["gamma-docs"]))).matches == []
    )
    assert run(retrieve(store, SearchRequest("Collector", repositories=[]))).matches == []


def test_out_of_scope_metadata_is_dropped(make_store) -> None:
    store = populate(make_store())
    # Chroma's copy of an alpha chunk claims to be beta's (BM25 still says alpha): the
    # BM25 hit's metadata is fetched from Chroma and must fail the scope check.
    target = chunks_of(A)[3]  # macOS / Homebrew
    col = store.chroma.client.get_collection(store.physical_name(A), embedding_function=None)
    col.update(ids=[target.id], metadatas=[{"repository": B}])
    with capture_logs() as logs:
        result = run(retrieve(store, SearchRequest("Homebrew brew", top_k=10, repositories=[A])))
    assert target.id not in {m.doc_id for m in result.matches}
    assert any(e["event"] == "result_out_of_scope" for e in logs)


def test_hash_mismatch_results_are_dropped(make_store) -> None:
    store = populate(make_store())
    target = chunks_of(A)[4]  # partials
    col = ChunkCollection(
        store.chroma.client.get_collection(store.physical_name(A), embedding_function=None)
    )
    got = col.get(ids=[target.id], include=["embeddings"])
    col.update(
        ids=[target.id],
        embeddings=got["embeddings"],
        documents=["Partials are reusable template fragments. (tampered)"],
    )
    with capture_logs() as logs:
        result = run(
            retrieve(store, SearchRequest("reusable template fragments partial", top_k=10))
        )
    assert target.id not in {m.doc_id for m in result.matches}
    assert any(e["event"] == "result_hash_mismatch" and e["doc_id"] == target.id for e in logs)
    assert result.matches  # the rest still comes back


@pytest.mark.server
def test_server_going_down_degrades_to_bm25(tmp_path, minilm_embedder) -> None:
    with running_chroma_server(tmp_path / "server") as server:
        store = populate(Store(store_settings(tmp_path, server), embedder=minilm_embedder))
        assert run(store.health_check()) is True
        stop_chroma_server(server)
        assert run(store.health_check()) is False
        # BM25 lives beside us: hybrid search answers from it, with its copy of the text.
        result = run(retrieve(store, SearchRequest("Homebrew brew install", top_k=3)))
        assert result.mode == "bm25"
        assert result.matches[0].metadata["file_path"] == "content/install/macos.md"
        assert result.matches[0].content == chunks_of(A)[3].text
        # Dense-only search and writes fail fast with a clear error.
        with pytest.raises(BackendConnectionError, match="chroma run"):
            run(retrieve(store, SearchRequest("Homebrew", hybrid=False)))
        with pytest.raises(BackendConnectionError):
            run(store.upsert_file_chunks(A, "content/x.md", [make_chunk(A, "content/x.md", "x")]))


# --- filtered dense queries: the matching ids, or an unfiltered over-fetch, then `where` ---


class CountingCollection:
    """A real Chroma collection that records how it was asked: a "plain" kNN, a kNN over
    "ids", a kNN with a `where` (recorded as the filter), a "get" of vectors, or a
    ("records", n) read of n chunks' text and metadata."""

    def __init__(self, col: Any) -> None:
        self.col, self.asked = col, []

    def __getattr__(self, attr: str) -> Any:  # anything else (name, configuration): the real one
        return getattr(self.col, attr)

    def query(self, **kwargs: Any) -> Any:
        self.asked.append(kwargs.get("where") or ("ids" if kwargs.get("ids") else "plain"))
        return self.col.query(**kwargs)

    def get(self, **kwargs: Any) -> Any:
        vectors = "embeddings" in kwargs.get("include", [])
        self.asked.append("get" if vectors else ("records", len(kwargs["ids"])))
        return self.col.get(**kwargs)


@pytest.fixture
def sectioned(tmp_path):
    """1,000 random 8-d chunks in Chroma and in a BM25 index: section `big` 30%, `rare` 1%,
    the rest spread over `s0`..`s9`; `hidden` marks every other `rare` chunk."""
    import numpy as np

    from hetriever.search.dense import _dense_rows
    from hetriever.store.bm25.bm25_index import BM25Index

    store = Store(store_settings(tmp_path))
    col = store.chroma.client.create_collection(
        "sectioned", configuration={"hnsw": {"space": "l2"}}, embedding_function=None
    )
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((1000, 8)).astype(np.float32)
    ids = [f"c{i}" for i in range(1000)]
    metas = [
        {
            "section": "rare" if i % 100 == 0 else "big" if i % 10 < 3 else f"s{i % 10}",
            "hidden": i % 200 == 0,
        }
        for i in range(1000)
    ]
    texts = [f"chunk {i}" for i in range(1000)]
    col.add(ids=ids, embeddings=vectors, documents=texts, metadatas=metas)
    bm25 = BM25Index(tmp_path / "sectioned.bm25.sqlite")
    bm25.upsert(ids, texts, metas)

    def nearest(vector, n, where):
        """Exact answer by brute force, for comparison."""
        order = np.argsort(((vectors - vector) ** 2).sum(axis=1))
        return [ids[i] for i in order if matches(where, metas[i])][:n]

    def dense(vector, n, where):
        counting = CountingCollection(col)
        rows = _dense_rows(store, counting, vector, n, where, lambda: bm25)
        return [row[0] for row in rows], counting.asked

    yield SimpleNamespace(rng=rng, nearest=nearest, dense=dense, col=col, bm25=bm25)
    bm25.close()
    store.close_sync()


def test_a_filter_too_broad_to_list_is_answered_from_unfiltered_neighbours(sectioned, monkeypatch):
    # `big` is 290 of the 1,000 chunks; were that more than the index lists, an unfiltered
    # look answers, and only a miss goes to Chroma's `where`.
    monkeypatch.setattr(dense_module, "ID_FILTER_MAX", 289)
    where = validate_filter({"section": "big"})
    unfiltered = 0
    for _ in range(30):
        vector = sectioned.rng.standard_normal(8).astype("float32")
        got, asked = sectioned.dense(vector, 10, where)
        assert got == sectioned.nearest(vector, 10, where)
        assert asked in (["plain"], ["plain", where])
        unfiltered += asked == ["plain"]  # one unfiltered look was enough
    assert unfiltered >= 25  # 50 neighbours keep ~15 of 29%: anything more is rare here


@pytest.mark.parametrize(
    "where",
    [
        {"section": "rare"},
        {"section": {"$in": ["rare", "absent"]}},
        # An equality narrows, the `$ne` is checked per chunk: still only the matching ids.
        {"$and": [{"section": "rare"}, {"hidden": {"$ne": True}}]},
    ],
)
@pytest.mark.parametrize(
    "exact_max, way",
    [
        (dense_module.EXACT_IDS_MAX, ["get", ("records", 5)]),
        (0, ["ids"]),
    ],
)
def test_a_rare_filter_searches_just_the_matching_ids(
    sectioned, where, exact_max, way, monkeypatch
):
    # 10 (or 5) of 1,000 chunks. A short list is ranked here from its vectors, and only the 5
    # nearest chunks' text and metadata are read; a longer one by Chroma's kNN over the ids.
    monkeypatch.setattr(dense_module, "EXACT_IDS_MAX", exact_max)
    monkeypatch.setattr(dense_module, "EXACT_IDS_SHARE", 0.0)
    where = validate_filter(where)
    for _ in range(10):
        vector = sectioned.rng.standard_normal(8).astype("float32")
        got, asked = sectioned.dense(vector, 5, where)
        assert got == sectioned.nearest(vector, 5, where)
        assert asked == way


def test_short_id_lists_are_ranked_here_up_to_one_percent_of_a_large_collection():
    assert dense_module.exact_ids_max(10_000) == dense_module.EXACT_IDS_MAX == 200
    assert dense_module.exact_ids_max(100_000) == 1_000


@pytest.mark.parametrize("section", ["s5", "big"])  # 100 and 290 of the 1,000 chunks
def test_a_listed_filter_searches_its_ids_however_common(sectioned, monkeypatch, section):
    # No unfiltered look first: reading its neighbours' metadata to filter them costs more
    # than a kNN over the ids, and a rare filter would need a second query after it.
    monkeypatch.setattr(dense_module, "EXACT_IDS_MAX", 20)
    where = validate_filter({"section": section})
    for _ in range(5):
        vector = sectioned.rng.standard_normal(8).astype("float32")
        got, asked = sectioned.dense(vector, 10, where)
        assert got == sectioned.nearest(vector, 10, where)
        assert asked == ["ids"]


def test_a_filter_without_an_equality_falls_back_to_chromas_where(sectioned):
    # Nothing for the equality index to narrow by: Chroma evaluates the filter.
    where = validate_filter({"section": {"$nin": ["big", "s3", "s4", "s5", "s6", "s7", "s8"]}})
    vector = sectioned.rng.standard_normal(8).astype("float32")
    got, asked = sectioned.dense(vector, 60, where)
    assert got == sectioned.nearest(vector, 60, where)
    assert asked == ["plain", where]


def test_too_many_matching_ids_fall_back_to_chromas_where(sectioned, monkeypatch):
    monkeypatch.setattr(dense_module, "ID_FILTER_MAX", 9)  # `rare` has 10
    where = validate_filter({"section": "rare"})
    vector = sectioned.rng.standard_normal(8).astype("float32")
    got, asked = sectioned.dense(vector, 5, where)
    assert got == sectioned.nearest(vector, 5, where)
    assert asked == ["plain", where]


def test_an_id_list_behind_chroma_falls_back_to_chromas_where(sectioned, monkeypatch):
    # Mid-write, Chroma has already dropped a chunk that BM25 (committing last) still lists:
    # Chroma's kNN refuses an unknown id, and the answer comes from its own `where`.
    monkeypatch.setattr(dense_module, "EXACT_IDS_MAX", 0)
    monkeypatch.setattr(dense_module, "EXACT_IDS_SHARE", 0.0)
    where = validate_filter({"section": "rare"})
    sectioned.col.delete(ids=["c0"])
    vector = sectioned.rng.standard_normal(8).astype("float32")
    expected = [i for i in sectioned.nearest(vector, 6, where) if i != "c0"][:5]
    got, asked = sectioned.dense(vector, 5, where)
    assert got == expected
    assert asked == ["ids", where]
    # Once BM25 commits the same deletion, the id list answers again.
    sectioned.bm25.delete(["c0"])
    got_after, asked = sectioned.dense(vector, 5, where)
    assert got_after == expected and asked == ["ids"]


def test_a_short_id_list_behind_chroma_ranks_what_chroma_holds(sectioned):
    # Fetching vectors skips an id Chroma no longer has: the answer is Chroma's own.
    where = validate_filter({"section": "rare"})
    sectioned.col.delete(ids=["c0"])
    vector = sectioned.rng.standard_normal(8).astype("float32")
    got, asked = sectioned.dense(vector, 5, where)
    assert got == [i for i in sectioned.nearest(vector, 6, where) if i != "c0"][:5]
    assert asked == ["get", ("records", 5)]
    # Asked for more than Chroma still holds of the list, it does not answer short.
    got, asked = sectioned.dense(vector, 10, where)
    assert len(got) == 9 and asked == ["get", ("records", 9), where]


def test_metadata_changed_in_chroma_first_is_not_answered_from_the_id_list(sectioned):
    # Chroma has moved a chunk out of `rare` that BM25 still files under it.
    where = validate_filter({"section": "rare"})
    sectioned.col.update(
        ids=[f"c{i}" for i in range(0, 1000, 100)],
        metadatas=[{"section": "s0", "hidden": False}] * 10,
    )
    sectioned.col.update(ids=["c1"], metadatas=[{"section": "rare", "hidden": False}])
    vector = sectioned.rng.standard_normal(8).astype("float32")
    got, asked = sectioned.dense(vector, 5, where)
    assert got == ["c1"]
    assert asked == ["get", ("records", 5), where]


@pytest.fixture(params=["embedded", pytest.param("server", marks=pytest.mark.server)])
def paged_store(request, tmp_path, minilm_embedder) -> Iterator[Any]:
    """A real repository of 20 pages x 6 chunks, written through the store."""
    server = request.getfixturevalue("chroma_server") if request.param == "server" else None
    client = server_database_client(server, "paged-tests") if server else None
    store = Store(store_settings(tmp_path, server), embedder=minilm_embedder, client=client)
    topics = ["templates", "taxonomies", "menus", "images", "shortcodes", "modules"]
    for page in range(20):
        path = f"content/guide/page-{page}.md"
        chunks = [
            make_chunk(A, path, f"Page {page} on {topic}: how Hugo handles {topic}.", j)
            for j, topic in enumerate(topics)
        ]
        run(store.upsert_file_chunks(A, path, chunks))
    yield store
    store.close_sync()


def test_a_rare_filter_through_the_store_matches_chromas_own_where(paged_store, monkeypatch):
    from hetriever.store.bm25.bm25_index import BM25Index

    listed: list[Any] = []
    real = BM25Index.few_ids_where

    def spy(self, where, limit):  # records what the real method answered
        listed.append(real(self, where, limit))
        return listed[-1]

    monkeypatch.setattr(BM25Index, "few_ids_where", spy)
    path = "content/guide/page-7.md"  # 6 of 120 chunks: too few among 50 neighbours
    for query in ("image processing", "menus", "how taxonomies work"):
        got = run(
            retrieve(
                paged_store,
                SearchRequest(
                    query, top_k=3, filters={"file_path": path}, hybrid=False, group_by="chunk"
                ),
            )
        ).matches
        col = paged_store.collection(A)
        vector = paged_store.embedder.embed([query])[0]
        expected = col.query(query_embeddings=[vector], n_results=3, where={"file_path": path})
        assert [r.doc_id for r in got] == expected["ids"][0]
        assert all(r.metadata["file_path"] == path for r in got)
    assert len(listed) == 3 and all(ids is not None and len(ids) == 6 for ids in listed)


@pytest.mark.parametrize("space", ["cosine", "l2", "ip"])
def test_vector_distances_are_chromas(tmp_path, space):
    import chromadb
    import numpy as np

    from hetriever.search.dense import vector_distances

    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((40, 16)).astype(np.float32)
    query = rng.standard_normal(16).astype(np.float32)
    col = chromadb.PersistentClient(path=str(tmp_path)).create_collection(
        "spaces", embedding_function=None, configuration={"hnsw": {"space": space}}
    )
    col.add(ids=[f"v{i:02d}" for i in range(40)], embeddings=vectors)
    got = col.query(query_embeddings=[query], n_results=40, include=["distances"])
    chroma = dict(zip(got["ids"][0], got["distances"][0]))
    ours = vector_distances(vectors, query, space)
    assert ours == pytest.approx([chroma[f"v{i:02d}"] for i in range(40)], rel=1e-4, abs=1e-4)


def test_the_phrase_weight_setting_reaches_the_bm25_index(tmp_path):
    from hetriever.store.knowledge_store import Store
    from tests.support.chroma_fixtures import store_settings
    from tests.support.fakes import HashEmbedder, MemoryClient

    store = Store(
        store_settings(tmp_path, bm25_phrase_weight=0.0),
        embedder=HashEmbedder(),
        client=MemoryClient(),
    )
    try:
        assert store.views.bm25_physical("docs_v1").phrase_weight == 0.0
    finally:
        store.close_sync()
