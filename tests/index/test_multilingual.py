"""A multilingual Hugo site through the real pipeline: git, embedded Chroma, BM25, search."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hetriever.core.errors import InvalidLimitError
from hetriever.discover.repositories import discover_repositories
from hetriever.index.indexing import index_repository
from hetriever.search.hybrid import hybrid_search
from hetriever.search.request import SearchRequest
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import store_settings
from tests.support.helpers import (
    commit_all,
    git,
    init_repo,
    make_parent_with_submodule,
    update_submodule,
    write_files,
)

NAME = "site-docs"
CONFIG = """
defaultContentLanguage: en
languages:
  en: {weight: 1, contentDir: content/en}
  ja: {weight: 2, contentDir: content/ja}
  es: {weight: 3, contentDir: content/es}
"""
PAGES = {
    "content/en/docs/traces.md": "---\ntitle: Traces\n---\nTraces follow a request through "
    "every service it touches, span by span.\n\n## Record span events\n\n"
    "An event marks a moment within a span, such as an exception "
    "being thrown or a retry being attempted.\n",
    # a translation that kept a heading in English, as translations often do
    "content/ja/docs/traces.md": "---\ntitle: トレース\n---\nトレースは、リクエストが通過する"
    "すべてのサービスをスパンごとに追跡します。\n\n## Record span events\n\n"
    "イベントはスパンの中の一瞬を記録します。例外の発生や再試行の"
    "開始などです。\n",
    "content/en/docs/_index.md": "---\ntitle: Documentation\ndescription: Everything about "
    "collecting telemetry.\n---\n",
}


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def site(tmp_path: Path, minilm_embedder):
    source = init_repo(tmp_path / "site-source")
    write_files(source, {"hugo.yaml": CONFIG, **PAGES})
    commit_all(source, "site")
    parent = make_parent_with_submodule(tmp_path, source, NAME)
    settings = store_settings(tmp_path)
    store = Store(settings, embedder=minilm_embedder)
    yield parent, source, store
    store.close_sync()


def repo_of(parent: Path):
    (repo,) = [r for r in discover_repositories(parent) if r.name == NAME]
    return repo


def urls(result) -> list[tuple[str, str]]:
    return [(m.metadata["lang"], m.metadata["url"]) for m in result.matches]


def test_every_language_is_indexed_with_its_url_and_searched_by_language(site):
    parent, _, store = site
    result = run(index_repository(repo_of(parent), store, store.settings))
    assert result.completed and result.files_indexed == 3
    metas = store.chroma.client.get_collection(store.physical_name(NAME)).get(include=["metadatas"])
    by_path = {m["file_path"]: m for m in metas["metadatas"]}
    assert by_path["content/ja/docs/traces.md"]["url"] == "/ja/docs/traces/"
    assert by_path["content/ja/docs/traces.md"]["lang"] == "ja"
    assert by_path["content/en/docs/traces.md"]["url"] == "/docs/traces/"
    assert by_path["content/en/docs/_index.md"]["url"] == "/docs/"
    assert (
        by_path["content/ja/docs/traces.md"]["translation_key"]
        == by_path["content/en/docs/traces.md"]["translation_key"]
    )

    # No language asked: the site's default language only, each result naming its others.
    default = hybrid_search(store, SearchRequest("traces span request", 10, repositories=[NAME]))
    assert default.matches and {lang for lang, _ in urls(default)} == {"en"}
    traces = [m for m in default.matches if m.metadata["url"] == "/docs/traces/"]
    assert traces and traces[0].translations == [
        {"lang": "ja", "url": "/ja/docs/traces/", "title": "トレース"}
    ]
    # One language, by name, for dense and BM25 alike.
    ja = hybrid_search(store, SearchRequest("トレース スパン", 10, repositories=[NAME], lang="ja"))
    assert urls(ja) == [("ja", "/ja/docs/traces/")]
    dense_ja = hybrid_search(
        store, SearchRequest("traces", 10, repositories=[NAME], lang="ja", hybrid=False)
    )
    assert {lang for lang, _ in urls(dense_ja)} == {"ja"}
    # Every language.
    both = hybrid_search(store, SearchRequest("traces", 10, repositories=[NAME], lang="all"))
    assert {"en", "ja"} <= {lang for lang, _ in urls(both)}
    # A language the site does not have finds nothing; a malformed one is a clear error.
    assert (
        hybrid_search(store, SearchRequest("traces", 10, repositories=[NAME], lang="fr")).matches
        == []
    )
    with pytest.raises(InvalidLimitError, match="language code"):
        hybrid_search(store, SearchRequest("traces", 10, repositories=[NAME], lang="ja; drop"))
    # The exact-title path keeps to the language too.
    english_exact = hybrid_search(
        store, SearchRequest("トレース", 5, repositories=[NAME], lang="en")
    )
    assert english_exact.matches and all(m.metadata["lang"] == "en" for m in english_exact.matches)
    exact = hybrid_search(store, SearchRequest("トレース", 5, repositories=[NAME], lang="ja"))
    assert exact.matches[0].source == "exact" and exact.matches[0].metadata["lang"] == "ja"
    # A query written in Japanese, told no language, keeps to the site's Japanese pages
    # (its script names one of the site's languages); English letters keep the default.
    for query in ("トレース", "スパンの中の一瞬を記録"):
        told_none = hybrid_search(store, SearchRequest(query, 5, repositories=[NAME]))
        assert told_none.matches and {lang for lang, _ in urls(told_none)} == {"ja"}
    assert (
        hybrid_search(store, SearchRequest("トレース", 5, repositories=[NAME])).matches[0].source
        == "exact"
    )
    mixed = hybrid_search(store, SearchRequest("Record span events", 5, repositories=[NAME]))
    assert {lang for lang, _ in urls(mixed)} == {"en"}
    # Korean letters name no language of this site: its default.
    korean = hybrid_search(store, SearchRequest("트레이스 스팬", 5, repositories=[NAME]))
    assert {lang for lang, _ in urls(korean)} <= {"en"}
    # A heading both languages have names one page in each language's search, none in all.
    for lang, url in (("en", "/docs/traces/"), ("ja", "/ja/docs/traces/")):
        top = hybrid_search(
            store, SearchRequest("Record span events", 5, repositories=[NAME], lang=lang)
        ).matches[0]
        assert (top.source, top.metadata["url"]) == ("exact", url)
        assert "Record span events" in top.content
    both_exact = hybrid_search(
        store, SearchRequest("Record span events", 5, repositories=[NAME], lang="all")
    )
    assert all(m.source != "exact" for m in both_exact.matches)
    # A pasted URL names its page in the URL's language, unless the search names another.
    for query, url in (
        ("https://example.org/ja/docs/traces/", "/ja/docs/traces/"),
        ("/docs/traces", "/docs/traces/"),
    ):
        top = hybrid_search(store, SearchRequest(query, 5, repositories=[NAME])).matches[0]
        assert (top.source, top.metadata["url"]) == ("exact", url)
    pasted = hybrid_search(
        store,
        SearchRequest("https://example.org/ja/docs/traces/", 5, repositories=[NAME], lang="en"),
    )
    assert all(m.metadata["lang"] == "en" and m.source != "exact" for m in pasted.matches)


def test_adding_or_deleting_a_translation_touches_only_that_file(site):
    parent, source, store = site
    repo = repo_of(parent)
    run(index_repository(repo, store, store.settings))
    col = store.chroma.client.get_collection(store.physical_name(NAME))
    before = set(col.get()["ids"])

    write_files(
        source,
        {
            "content/es/docs/traces.md": "---\ntitle: Trazas\n---\nLas trazas "
            "siguen una solicitud por cada servicio.\n"
        },
    )
    update_submodule(parent, NAME, commit_all(source, "es"))
    added = run(index_repository(repo, store, store.settings))
    assert added.mode == "incremental" and added.files_indexed == 1
    after_add = set(col.get()["ids"])
    assert before < after_add
    es_ids = after_add - before
    assert {m["lang"] for m in col.get(ids=list(es_ids))["metadatas"]} == {"es"}
    found = hybrid_search(
        store, SearchRequest("trazas solicitud", 5, repositories=[NAME], lang="es")
    )
    assert urls(found)[0] == ("es", "/es/docs/traces/")
    # Told no language, Spanish words keep to the Spanish pages (they are in no English
    # page); English words keep the default.
    told_none = hybrid_search(
        store, SearchRequest("las trazas siguen una solicitud", 5, repositories=[NAME])
    )
    assert told_none.query_language == "es"
    assert urls(told_none) == [("es", "/es/docs/traces/")]
    english = hybrid_search(store, SearchRequest("traces follow a request", 5, repositories=[NAME]))
    assert english.query_language == "" and {lang for lang, _ in urls(english)} == {"en"}

    git(source, "rm", "-q", "content/ja/docs/traces.md")
    update_submodule(parent, NAME, commit_all(source, "drop ja"))
    removed = run(index_repository(repo, store, store.settings))
    assert removed.files_deleted == 1
    left = set(col.get()["ids"])
    assert left < after_add and es_ids <= left
    assert (
        hybrid_search(store, SearchRequest("トレース", 5, repositories=[NAME], lang="ja")).matches
        == []
    )
    # The query's own language has nothing now: told no language, the default's pages.
    fallback = hybrid_search(store, SearchRequest("トレース", 5, repositories=[NAME]))
    assert fallback.matches and {lang for lang, _ in urls(fallback)} == {"en"}
    assert fallback.query_language == ""
