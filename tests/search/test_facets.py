"""Facets of a search over real Chroma, real BM25 and the real embedder: candidate pages per
repository, language and section, counted beyond the top k, narrowed by the same parameters,
and never counting what the caller may not see."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hetriever.search.hybrid import hybrid_search
from hetriever.search.request import SearchRequest
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import make_chunk, store_settings
from tests.support.helpers import run

A, B, SECRET = "alpha-docs", "beta-docs", "secret-docs"
INSTALL = "Install the kestrel tool"
DOCS = [
    (A, "content/install/linux.md", f"{INSTALL} on Linux with the snap package."),
    (A, "content/install/macos.md", f"{INSTALL} on macOS with Homebrew."),
    (A, "content/guides/upgrade.md", f"{INSTALL} again to upgrade it to a new release."),
    (
        A,
        "content/fr/install/windows.md",
        f"{INSTALL} sur Windows avec le programme.",
        {"section": "install", "lang": "fr"},
    ),
    (B, "content/install/kubernetes.md", f"{INSTALL} on Kubernetes with the Helm chart."),
    (SECRET, "content/install/vault.md", f"{INSTALL} inside the private vault cluster."),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, minilm_embedder: Any) -> Iterator[Any]:
    settings = store_settings(tmp_path_factory.mktemp("facets"), access_levels={SECRET: "PRIVATE"})
    store = Store(settings, embedder=minilm_embedder)
    for repo, path, text, *extra in DOCS:
        chunk = make_chunk(
            repo,
            path,
            text,
            **(extra[0] if extra else {}),
            access_level="PRIVATE" if repo == SECRET else "PUBLIC",
        )
        run(store.upsert_file_chunks(repo, path, [chunk]))
    yield store
    store.close_sync()


def counts(result: Any, facet: str) -> dict[str, int]:
    return {v["value"]: v["count"] for v in result.facets[facet]}


def test_facets_count_candidate_pages_beyond_the_top_k(store) -> None:
    result = hybrid_search(store, SearchRequest("install the kestrel tool", 1, lang="all"))
    assert len(result.matches) == 1
    assert counts(result, "repository") == {A: 4, B: 1}
    assert counts(result, "section") == {"install": 4, "guides": 1}
    assert counts(result, "lang") == {"en": 4, "fr": 1}
    # most pages first
    assert [v["value"] for v in result.facets["repository"]] == [A, B]


def test_facets_narrow_with_the_search_parameters(store) -> None:
    by_repo = hybrid_search(
        store, SearchRequest("install the kestrel tool", 3, repositories=[B], lang="all")
    )
    assert counts(by_repo, "repository") == {B: 1}
    by_section = hybrid_search(
        store, SearchRequest("install the kestrel tool", 3, {"section": "guides"}, lang="all")
    )
    assert counts(by_section, "section") == {"guides": 1}
    assert [m.metadata["file_path"] for m in by_section.matches] == ["content/guides/upgrade.md"]


def test_facets_never_count_what_the_caller_may_not_see(store) -> None:
    public = hybrid_search(
        store, SearchRequest("install kestrel private vault cluster", 5, lang="all")
    )
    assert SECRET not in counts(public, "repository")
    private = hybrid_search(
        store,
        SearchRequest(
            "install kestrel private vault cluster",
            5,
            lang="all",
            access_levels=["PUBLIC", "PRIVATE"],
        ),
    )
    assert counts(private, "repository")[SECRET] == 1


def test_a_search_with_nothing_to_search_has_empty_facets(store) -> None:
    result = hybrid_search(store, SearchRequest("install", 3, repositories=["no-such-docs"]))
    assert result.matches == [] and result.facets == {}
