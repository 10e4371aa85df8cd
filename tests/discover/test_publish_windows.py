"""Publish rules through whole ingest runs: dates that pass with no commit (a run at the same
commit takes them in, with a clock the test sets), glossary terms shown on their page, and
cascades whose change reaches the pages below them."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

import pytest

from hetriever.core.clock import utc_text
from hetriever.index.indexing import index_repository
from hetriever.store.catalog import Catalog
from hetriever.store.catalog_records import SKIPPED
from hetriever.store.catalog_windows import open_at
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import chroma_or_memory_store, store_settings
from tests.support.fakes import HashEmbedder, MemoryClient
from tests.support.flow_support import stored
from tests.support.helpers import (
    build_sample_parent,
    commit_all,
    repo_of,
    update_submodule,
    write_files,
)


def at(day: str) -> dt.datetime:
    return dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC)


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(params=["chroma", "memory"])
def store(request, tmp_path: Path):
    yield from chroma_or_memory_store(request, tmp_path)


NEWS = {
    "content/docs/news/_index.md": "---\ntitle: News\n---\n\nWhat is new.\n",
    "content/docs/news/expiring.md": "---\ntitle: Sale ends\nexpiryDate: 2030-01-10\n---\n\n"
    "The winter sale of tickets ends soon.\n",
    "content/docs/news/coming.md": "---\ntitle: Release day\npublishDate: 2030-01-05\n---\n\n"
    "Version two ships with a new planner.\n",
    "content/docs/terms/_index.md": "---\ntitle: Glossary\nbuild:\n  render: always\n"
    "cascade:\n  build:\n    render: never\n    list: local\n"
    "---\n\n{{% glossary %}}\n",
    "content/docs/terms/bundle.md": "---\ntitle: bundle\n---\n\nA directory of page files.\n",
    "content/docs/terms/shortcode.md": "---\ntitle: shortcode\n---\n\nA template called "
    "from content.\n",
}


@pytest.fixture
def docs(tmp_path: Path):
    parent, source = build_sample_parent(tmp_path)
    write_files(source, NEWS)
    update_submodule(parent, "sample-docs", commit_all(source, "news and terms"))
    return parent, source


def files_of(store) -> set[str]:
    return {
        path.rsplit("/", 2)[-2] + "/" + path.rsplit("/", 1)[-1]
        for path, _ in stored(store, "sample-docs").values()
    }


def test_dates_passing_with_no_commit_are_taken_in_by_the_next_run(docs, store):
    parent, _ = docs
    repo, settings = repo_of(parent), store.settings
    first = run(index_repository(repo, store, settings, now=at("2030-01-01")))
    assert first.mode == "full"
    reasons = {s.path.rsplit("/", 1)[-1]: s.reason for s in first.skipped}
    assert reasons["coming.md"] == "future: publishDate 2030-01-05T00:00:00+00:00"
    assert "news/expiring.md" in files_of(store) and "news/coming.md" not in files_of(store)

    # Same commit, later: the release is due. Only that file is processed.
    due = run(index_repository(repo, store, settings, now=at("2030-01-06")))
    assert due.mode == "incremental" and due.files_republished == 1 and due.completed
    assert due.files_modified == due.files_added == 0 and due.new_commit == first.new_commit
    assert "news/coming.md" in files_of(store)
    assert run(index_repository(repo, store, settings, now=at("2030-01-07"))).mode == "noop"

    # The sale ends: its page leaves the index, and says why.
    gone = run(index_repository(repo, store, settings, now=at("2030-02-01")))
    assert gone.mode == "incremental" and gone.files_republished == 1
    assert gone.chunks_deleted > 0 and "news/expiring.md" not in files_of(store)
    physical = store.physical_name("sample-docs")
    skipped = {f.path.rsplit("/", 1)[-1]: f.reason for f in store.catalog.files(physical, SKIPPED)}
    assert skipped["expiring.md"] == "expired: expiryDate 2030-01-10T00:00:00+00:00"
    assert run(index_repository(repo, store, settings, now=at("2030-03-01"))).mode == "noop"


def test_a_window_crossed_in_between_changes_nothing(docs, store):
    """Published and expired again between two runs: nothing to do."""
    parent, source = docs
    write_files(
        source,
        {
            "content/docs/news/flash.md": "---\ntitle: Flash\npublishDate: "
            "2030-01-02\nexpiryDate: 2030-01-03\n---\n\nGone in a day.\n"
        },
    )
    update_submodule(parent, "sample-docs", commit_all(source, "flash"))
    repo = repo_of(parent)
    run(index_repository(repo, store, store.settings, now=at("2030-01-01")))
    later = run(index_repository(repo, store, store.settings, now=at("2030-01-04")))
    assert later.mode == "noop" and later.files_republished == 0
    assert "news/flash.md" not in files_of(store)


def test_the_glossary_page_carries_its_terms_and_follows_their_changes(docs, store):
    parent, source = docs
    repo = repo_of(parent)
    first = run(index_repository(repo, store, store.settings, now=at("2030-01-01")))
    reasons = {s.path.rsplit("/", 1)[-1]: s.reason for s in first.skipped}
    assert reasons["bundle.md"] == (
        "not rendered: build.render is never (cascade from "
        "/docs/terms); its text is shown on /docs/terms/"
    )
    texts = {path: text for path, text in stored(store, "sample-docs").values()}
    glossary = " ".join(
        t for p, t in stored(store, "sample-docs").values() if p.endswith("terms/_index.md")
    )
    assert "A directory of page files." in glossary and "A template called" in glossary
    assert not any(p.endswith("terms/bundle.md") for p in texts)

    term = source / "content/docs/terms/bundle.md"
    term.write_text(term.read_text().replace("page files", "content files"))
    update_submodule(parent, "sample-docs", commit_all(source, "term"))
    result = run(index_repository(repo, store, store.settings, now=at("2030-01-01")))
    assert result.files_include_dependent == 1  # the glossary page
    glossary = " ".join(
        t for p, t in stored(store, "sample-docs").values() if p.endswith("terms/_index.md")
    )
    assert "A directory of content files." in glossary and "page files" not in glossary


def test_a_changed_cascade_reaches_the_pages_below(docs, store):
    parent, source = docs
    repo = repo_of(parent)
    run(index_repository(repo, store, store.settings, now=at("2030-01-01")))
    assert "news/_index.md" in files_of(store)
    index = source / "content/docs/news/_index.md"
    index.write_text(
        "---\ntitle: News\ncascade:\n  - draft: true\n    target:\n"
        "      path: /docs/news/*\n---\n\nWhat is new.\n"
    )
    update_submodule(parent, "sample-docs", commit_all(source, "news are drafts"))
    result = run(index_repository(repo, store, store.settings, now=at("2030-01-06")))
    assert result.files_include_dependent == 2  # expiring.md and coming.md
    assert {f for f in files_of(store) if f.startswith("news/")} == {"news/_index.md"}


def test_the_catalog_finds_crossed_windows(tmp_path: Path):
    catalog = Catalog(tmp_path / "catalog.sqlite")
    jan = {d: utc_text(at(f"2030-01-{d:02d}")) for d in range(1, 31)}
    catalog.publish_windows.set_windows(
        "c", {"a.md": (jan[5], ""), "b.md": ("", jan[10]), "c.md": (jan[3], jan[4]), "d.md": None}
    )
    assert catalog.publish_windows.crossed("c", jan[1], jan[2]) == []
    assert catalog.publish_windows.crossed("c", jan[1], jan[6]) == [
        "a.md"
    ]  # c.md opened and closed again
    assert catalog.publish_windows.crossed("c", jan[6], jan[20]) == ["b.md"]
    assert catalog.publish_windows.crossed("c", jan[3], jan[6]) == ["a.md", "c.md"]
    catalog.publish_windows.set_windows("c", {"a.md": None})
    assert set(catalog.publish_windows.windows("c")) == {"b.md", "c.md"}
    catalog.remove_files("c", ["b.md"])
    assert set(catalog.publish_windows.windows("c")) == {"c.md"}
    assert catalog.publish_windows.windows_checked("c") == ""
    catalog.publish_windows.mark_windows_checked("c", jan[1])
    assert catalog.publish_windows.windows_checked("c") == jan[1]
    assert open_at(("", ""), jan[1]) and not open_at((jan[2], ""), jan[1])
    assert open_at(("", jan[1]), jan[1])  # Hugo: expired only once the date is past


def test_an_ingest_stores_what_the_per_file_step_decides(tmp_path: Path):
    """The Hugo comparisons (tests/discover/test_publish_hugo.py, test_publish_corpus.py) run the
    per-file step without embedding; a full ingest stores exactly those pages at those URLs."""
    from hetriever.discover.repositories import discover_repositories
    from tests.support.helpers import init_repo
    from tests.support.hugo_oracle import hetriever_pages
    from tests.support.publish_site import FILES

    site = init_repo(tmp_path / "site")
    write_files(site, FILES)
    commit_all(site, "site")
    now = at("2030-01-01")
    settings = store_settings(tmp_path, run_lock_timeout=1.0)
    store = Store(settings, embedder=HashEmbedder(), client=MemoryClient(), lock_timeout=2.0)
    try:
        (repo,) = discover_repositories(site)
        assert run(index_repository(repo, store, settings, now=now)).completed
        got = store.chroma.client.get_collection(store.physical_name(repo.name)).get(
            include=["metadatas"]
        )
        urls = {m["file_path"]: m["url"] for m in got["metadatas"]}
    finally:
        store.close_sync()
    assert urls == hetriever_pages(site, settings, now=now).pages
