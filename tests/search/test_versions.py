"""Searching a version of the docs, every version, or (by default) the checked-out tree
alone; and the diff of two versions' published pages. Real git, real Chroma, the real model.

One git repository (`tests.support.versions.two_versions`): `v1.0.0` tagged, then a commit
that rewrites the install page, deletes the gopher page, renames a page, adds one and adds a
draft. The tree is indexed as `docs-site`, the tag as its version, beside an unrelated site.
"""

from __future__ import annotations

import pytest

from hetriever.core.errors import UnknownVersionError
from hetriever.core.versions import version_name
from hetriever.search.hybrid import hybrid_search
from hetriever.search.request import SearchRequest
from hetriever.search.version_diff import version_diff
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import store_settings
from tests.support.helpers import commit_all, git, init_repo, write_files
from tests.support.versions import BASE, LABEL, index_tree, index_version, page, two_versions

OTHER, V1 = "other-site", LABEL
V1_NAME = version_name(BASE, V1)
QUERIES = ("install the package", "gopher exporter", "configure the site", "theme colours")
OTHER_PAGES = {
    "content/_index.md": page("Other", "Another site's documentation."),
    "content/guide.md": page("Guide", "Install the collector and configure its receivers."),
}


@pytest.fixture(scope="module")
def docs(tmp_path_factory, minilm_embedder):
    tmp = tmp_path_factory.mktemp("versions")
    root = tmp / "docs"
    source = root / BASE
    old_commit, new_commit = two_versions(source)
    other = init_repo(root / OTHER)
    write_files(other, OTHER_PAGES)
    commit_all(other, "other")

    store = Store(store_settings(tmp, docs_root=root), embedder=minilm_embedder)
    index_tree(store, source, BASE)
    index_tree(store, other, OTHER)
    before = {q: _found(store, SearchRequest(q, 5)) for q in QUERIES}
    index_version(store, source, BASE, V1, tmp / "versions")
    yield store, source, before, (old_commit, new_commit)
    store.close_sync()


def _found(store, request: SearchRequest) -> list[tuple[str, str]]:
    return [(m.doc_id, m.metadata["repository"]) for m in hybrid_search(store, request).matches]


def _pages(store, query: str, **kw) -> list:
    return hybrid_search(store, SearchRequest(query, 5, **kw)).matches


def test_a_default_search_is_the_search_without_versions(docs):
    store, _, before, _ = docs
    assert V1_NAME in store.repository_names()
    for query, found in before.items():
        assert found, query
        assert _found(store, SearchRequest(query, 5)) == found
        assert _found(store, SearchRequest(query, 5, version="current")) == found


def test_the_older_version_has_its_own_text_and_the_newer_its(docs):
    store = docs[0]
    old = _pages(store, "install the package", repositories=[BASE], version=V1)
    assert old[0].metadata["repository"] == V1_NAME
    assert old[0].version == V1
    assert "quokka" in old[0].content and old[0].metadata["url"] == "/docs/install/"
    assert all(m.metadata["repository"] == V1_NAME for m in old)
    new = _pages(store, "install the package", repositories=[BASE])
    assert new[0].metadata["repository"] == BASE and new[0].version == ""
    assert "wombat" in new[0].content and new[0].metadata["url"] == "/docs/install/"


def test_a_version_by_its_slug_and_without_naming_a_repository(docs):
    store = docs[0]
    for label in (V1, "v1-0-0", "V1.0.0"):
        found = _pages(store, "install the package", version=label)
        assert {m.metadata["repository"] for m in found} == {V1_NAME}, label


def test_a_page_deleted_in_the_newer_version_is_in_the_older_only(docs):
    store = docs[0]
    old = _pages(store, "gopher exporter", repositories=[BASE], version=V1)
    assert old[0].metadata["file_path"] == "content/docs/gopher.md"
    new = _pages(store, "gopher exporter", repositories=[BASE])
    assert "content/docs/gopher.md" not in {m.metadata["file_path"] for m in new}


def test_every_version_is_one_result_per_page_listing_its_versions(docs):
    store = docs[0]
    found = _pages(store, "install the package", repositories=[BASE], version="all")
    paths = [m.metadata["file_path"] for m in found]
    assert len(paths) == len(set(paths))  # one result a page
    install = found[paths.index("content/docs/install.md")]
    assert {v["version"]: v["differs"] for v in install.versions} == {
        "current": install.version == V1,
        V1: install.version == "",
    }
    assert install.versions[0]["version"] == "current"
    gopher = _pages(store, "gopher exporter", repositories=[BASE], version="all")
    gopher = [m for m in gopher if m.metadata["file_path"] == "content/docs/gopher.md"]
    assert [v["version"] for v in gopher[0].versions] == [V1]
    themes = [
        m
        for m in _pages(store, "theme colours", repositories=[BASE], version="all")
        if m.metadata["file_path"] == "content/docs/themes.md"
    ]
    assert [(v["version"], v["differs"]) for v in themes[0].versions] == [
        ("current", False),
        (V1, False),
    ]


def test_chunk_results_of_every_version_each_say_their_version(docs):
    store = docs[0]
    found = _pages(
        store, "install the package", repositories=[BASE], version="all", group_by="chunk"
    )
    assert {(m.metadata["repository"], m.version) for m in found} >= {(BASE, ""), (V1_NAME, V1)}


def test_an_unknown_version_is_an_error_naming_the_known_ones(docs):
    store = docs[0]
    with pytest.raises(UnknownVersionError, match="v9.9.9") as err:
        _pages(store, "install", version="v9.9.9")
    assert V1 in str(err.value)
    with pytest.raises(UnknownVersionError, match=f"{OTHER} has no version"):
        _pages(store, "install", repositories=[BASE, OTHER], version=V1)


def test_a_version_named_as_a_repository_is_searched_as_itself(docs):
    store = docs[0]
    found = _pages(store, "install the package", repositories=[V1_NAME])
    assert {m.metadata["repository"] for m in found} == {V1_NAME}
    assert {m.version for m in found} == {V1}


def _git_changes(source, old: str, new: str) -> set[tuple[str, ...]]:
    raw = git(source, "diff-tree", "-r", "-M", "--name-status", old, new, "--", "content")
    out = set()
    for line in raw.splitlines():
        status, *paths = line.split("\t")
        out.add((status[0], *reversed(paths)) if status[0] == "R" else (status[0], paths[0]))
    return out


def test_the_diff_is_gits_for_the_published_pages(docs):
    store, source, _, (old_commit, new_commit) = docs
    got = version_diff(store, BASE, V1, "current")
    assert (got.from_commit, got.to_commit) == (old_commit, new_commit)
    drafts = {("A", "content/docs/draft.md")}
    assert drafts <= _git_changes(source, old_commit, new_commit)
    assert {
        (c.kind, c.path, c.old_path) if c.old_path else (c.kind, c.path) for c in got.changes
    } == _git_changes(source, old_commit, new_commit) - drafts
    by_path = {c.path: c for c in got.changes}
    assert by_path["content/docs/new-name.md"].old_path == "content/docs/old-name.md"
    assert by_path["content/docs/new-name.md"].old_url == "/docs/old-name/"
    assert by_path["content/docs/new-name.md"].url == "/docs/new-name/"
    assert by_path["content/docs/gopher.md"].title == "Gopher exporter"
    assert by_path["content/docs/install.md"].kind == "M"
    back = version_diff(store, BASE, "current", V1)
    assert {c.kind for c in back.changes if c.path == "content/docs/gopher.md"} == {"A"}
    assert got.counts == {"A": 1, "M": 1, "D": 1, "R": 1}


def test_a_diff_of_a_version_not_indexed_names_the_known_ones(docs):
    store = docs[0]
    with pytest.raises(UnknownVersionError, match="v1.0.0"):
        version_diff(store, BASE, "v0.1", "current")
    with pytest.raises(UnknownVersionError, match=f"is a version of {BASE}"):
        version_diff(store, V1_NAME, "current", "current")


def test_a_version_is_hidden_where_its_repository_is(docs):
    store = docs[0]
    assert store.catalog.repository(V1_NAME).access_level == "PUBLIC"
    store.catalog.upsert_repository(BASE, access_level="TEAM")
    try:
        assert _pages(store, "install the package", version=V1) == []
        found = _pages(store, "install the package", version="all")
        assert found and {m.metadata["repository"] for m in found} == {OTHER}
        team = _pages(store, "install the package", version=V1, access_levels=["TEAM"])
        assert team == []  # the version's own level, PUBLIC, is not the caller's
        both = _pages(store, "install the package", version=V1, access_levels="PUBLIC,TEAM")
        assert both[0].metadata["repository"] == V1_NAME
        with pytest.raises(UnknownVersionError):
            version_diff(store, BASE, V1, "current")
    finally:
        store.catalog.upsert_repository(BASE, access_level="PUBLIC")
