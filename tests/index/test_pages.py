"""Pages as people look for them: page records, front-matter-only pages, `param` shortcodes,
and one search result per page, against real git repositories, real Chroma and the real model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hetriever.chunk.page_records import page_record, page_summary_lines
from hetriever.core.config import Settings
from hetriever.discover.repositories import Repository, discover_repositories
from hetriever.index.indexing import index_repository
from hetriever.index.process import process_text, token_counter
from hetriever.parse.page import page_params, parse_page
from hetriever.search.hybrid import hybrid_search
from hetriever.search.request import SearchRequest
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import store_settings
from tests.support.helpers import commit_all, init_repo, make_parent_with_submodule, write_files

REPO = Repository(name="docs", path=Path("."))

SECTION = """---
title: Content management
linkTitle: Content
description: Organize your pages into sections, bundles and taxonomies.
keywords: [sections, bundles]
---
"""

FUNCTION = """---
title: collections.Where
description: Returns the given collection, removing elements that do not satisfy the condition.
---
Use it like this:

```go-html-template
{{ range where .Pages "Section" "posts" }}{{ end }}
```
"""

PARAMS = """---
title: Exporters
description: Send telemetry to the OpenTelemetry Collector.
params:
  vers: 1.42.0
---
The page says {{% param "description" %}} and pins version {{% param vers %}}.
"""

LONG_PAGE = "---\ntitle: Release notes\n---\n" + "\n\n".join(
    f"## Release {i}\n\nThis release improves the where function and the collections "
    f"package, fixing issue {i} in templates."
    for i in range(12)
)


def test_page_record_text_and_metadata():
    page = parse_page(
        "docs", "content/en/content-management/_index.md", SECTION, content_dir="content"
    )
    assert page_summary_lines(page) == [
        "Content",
        "Organize your pages into sections, bundles and taxonomies.",
        "sections, bundles",
    ]
    record = page_record(page, counter=token_counter(Settings()))
    assert record is not None
    assert record.text.startswith("Content management\nContent\nOrganize your pages")
    assert record.metadata["page_record"] is True and record.metadata["chunk_index"] == -1
    assert record.metadata["url"] == "/content-management/"


def test_a_page_record_fits_the_token_budget():
    long = SECTION.replace("Organize your pages", "word " * 600 + "Organize")
    page = parse_page("docs", "content/en/a/_index.md", long, content_dir="content")
    counter = token_counter(Settings())
    record = page_record(page, counter=counter, max_tokens=64)
    assert record is not None and 56 <= counter.count(record.text) <= 64


def test_front_matter_only_pages_are_indexed_from_their_record():
    outcome = process_text(REPO, "content/en/content-management/_index.md", SECTION, Settings())
    assert outcome.skipped is None and len(outcome.chunks) == 1
    assert outcome.chunks[0].metadata["page_record"] is True
    # Without a title or description of its own, an empty page is still skipped.
    bare = process_text(REPO, "content/en/empty/_index.md", "---\nweight: 3\n---\n", Settings())
    assert bare.skipped is not None and bare.skipped.reason == "empty body"
    # Drafts stay out with their reason, record or not.
    draft = process_text(
        REPO, "content/en/d.md", SECTION.replace("---\n", "---\ndraft: true\n", 1), Settings()
    )
    assert draft.skipped is not None and draft.skipped.reason == "draft"


@pytest.mark.parametrize("mode, record_chunks", [("chunk", 1), ("prefix", 0), ("off", 0)])
def test_page_record_modes(mode, record_chunks):
    outcome = process_text(
        REPO, "content/en/functions/where.md", FUNCTION, Settings(page_record=mode)
    )
    records = [c for c in outcome.chunks if c.metadata.get("page_record")]
    assert len(records) == record_chunks
    body = [c for c in outcome.chunks if not c.metadata.get("page_record")]
    described = "removing elements that do not satisfy" in body[0].text
    assert described is (mode == "prefix")


def test_param_shortcodes_read_the_pages_front_matter():
    assert page_params({"Title": "T", "params": {"vers": {"otel": "1.2"}}, "n": 3}) == {
        "title": "T",
        "params.vers.otel": "1.2",
        "n": "3",
        "vers.otel": "1.2",
    }
    outcome = process_text(REPO, "content/en/exporters.md", PARAMS, Settings())
    body = [c for c in outcome.chunks if not c.metadata.get("page_record")]
    assert (
        "The page says Send telemetry to the OpenTelemetry Collector. and pins version 1.42.0."
    ) in body[0].text


@pytest.fixture
def indexed(tmp_path: Path, minilm_embedder):
    doc_repo = init_repo(tmp_path / "site")
    write_files(
        doc_repo,
        {
            "content/content-management/_index.md": SECTION,
            "content/functions/where.md": FUNCTION,
            "content/release-notes.md": LONG_PAGE,
            "content/hosting/netlify.md": "---\ntitle: Host on Netlify\n---\nDeploy the site to "
            "Netlify from a git repository with a build command.\n",
        },
    )
    commit_all(doc_repo)
    parent = make_parent_with_submodule(tmp_path, doc_repo, "site")
    (repo,) = discover_repositories(parent)
    store = Store(store_settings(tmp_path), embedder=minilm_embedder)
    result = asyncio.run(index_repository(repo, store, store.settings))
    assert result.completed and not result.failed
    yield store
    store.close_sync()


def test_a_section_page_is_found_by_its_description(indexed):
    got = hybrid_search(
        indexed, SearchRequest("how do I organize pages into sections and bundles", 3)
    )
    assert got.matches[0].metadata["file_path"] == "content/content-management/_index.md"
    assert got.matches[0].metadata["page_record"] is True


def test_page_results_are_distinct_pages_with_passages(indexed):
    got = hybrid_search(indexed, SearchRequest("where function collections templates", 10))
    paths = [m.metadata["file_path"] for m in got.matches]
    assert len(paths) == len(set(paths))
    # The long page takes one place, its next best chunks ride along as passages.
    (notes,) = [m for m in got.matches if m.metadata["file_path"] == "content/release-notes.md"]
    assert 1 <= len(notes.passages) <= 2
    assert all(p["content"] and p["doc_id"] != notes.doc_id for p in notes.passages)
    # Chunk results are still there for callers that want passages.
    chunks = hybrid_search(
        indexed, SearchRequest("where function collections templates", 10, group_by="chunk")
    )
    chunk_paths = [m.metadata["file_path"] for m in chunks.matches]
    assert chunk_paths.count("content/release-notes.md") > 1
    assert all(not m.passages for m in chunks.matches)


def test_group_by_is_validated(indexed):
    from hetriever.core.errors import InvalidLimitError

    with pytest.raises(InvalidLimitError):
        hybrid_search(indexed, SearchRequest("where", 3, group_by="site"))


def test_an_identifier_query_finds_its_page(indexed):
    got = hybrid_search(indexed, SearchRequest("collections where", 3, hybrid=True, exact=False))
    assert got.matches[0].metadata["file_path"] == "content/functions/where.md"


def test_a_bm25_row_chroma_lacks_is_never_served(indexed):
    """A delete that crashed between Chroma and BM25 leaves a row only BM25 has: the page
    results fetch what they show from Chroma, so that row is dropped, and its page is shown
    from a chunk Chroma still has, or not at all."""
    col = indexed.collection("site")
    got = col.get(where={"file_path": "content/hosting/netlify.md"}, include=["metadatas"])
    record = [i for i, m in zip(got["ids"], got["metadatas"]) if m.get("page_record")]
    col.delete(ids=record)  # Chroma only: BM25 still lists it
    assert indexed.bm25("site").get(record[0]) is not None
    for hybrid in (True, False):
        result = hybrid_search(
            indexed, SearchRequest("Host on Netlify", 5, hybrid=hybrid, exact=False)
        )
        shown = [m.doc_id for m in result.matches] + [
            p["doc_id"] for m in result.matches for p in m.passages
        ]
        assert record[0] not in shown
        assert set(shown) <= set(col.get(ids=shown)["ids"])
        netlify = [
            m for m in result.matches if m.metadata["file_path"] == "content/hosting/netlify.md"
        ]
        assert netlify and not netlify[0].metadata.get("page_record")


def test_a_chunk_bm25_lacks_is_still_found_and_shown_from_chroma(indexed):
    """A write that crashed between Chroma and BM25 leaves chunks only Chroma has: a hybrid
    page search reads dense candidates without their metadata and learns pages from BM25's
    copy, so those are fetched from Chroma at once instead of being lost to the page ranking."""
    col = indexed.collection("site")
    got = col.get(where={"file_path": "content/hosting/netlify.md"}, include=["documents"])
    index = indexed.bm25("site")
    with index.transaction():
        assert index.delete(got["ids"]) == len(got["ids"])  # BM25 only: Chroma keeps them
    result = hybrid_search(
        indexed, SearchRequest("deploy my site to Netlify with a build command", 3, exact=False)
    )
    top = result.matches[0]
    assert top.metadata["file_path"] == "content/hosting/netlify.md"
    assert top.source == "dense" and top.doc_id in got["ids"]
    assert top.content == got["documents"][got["ids"].index(top.doc_id)]


def test_a_hybrid_page_search_reads_metadata_only_for_what_it_shows(indexed, monkeypatch):
    """Chroma reads a row's metadata at ~0.1 ms: the dense kNN of a hybrid page search asks
    for ids and distances only; the text and metadata of what is shown come from one fetch."""
    col = indexed.collection("site")
    asked: list[tuple[str, list[str], int]] = []

    class Recording:
        def __init__(self, inner):
            self._inner = inner

        def __getattr__(self, name):
            return getattr(self._inner, name)

        def query(self, **kw):
            got = self._inner.query(**kw)
            asked.append(("query", list(kw["include"]), len(got["ids"][0])))
            return got

        def get(self, **kw):
            got = self._inner.get(**kw)
            asked.append(("get", list(kw.get("include") or []), len(got["ids"])))
            return got

    monkeypatch.setattr(indexed, "collection", lambda name: Recording(col))
    result = hybrid_search(
        indexed, SearchRequest("where function collections templates", 2, exact=False)
    )
    queries = [a for a in asked if a[0] == "query"]
    assert queries and all(include == ["distances"] for _, include, _ in queries)
    fetched = sum(n for kind, _, n in asked if kind == "get")
    shown = len(result.matches) + sum(len(m.passages) for m in result.matches)
    assert shown <= fetched < queries[0][2]  # fewer rows read than the kNN's candidates
    for match in result.matches:  # what is shown is Chroma's, text and metadata
        (row_meta,) = col.get(ids=[match.doc_id], include=["metadatas"])["metadatas"]
        assert match.metadata["file_path"] == row_meta["file_path"] and match.content
    # a dense-only or chunk search still reads rows with the kNN (nothing to label them)
    asked.clear()
    hybrid_search(
        indexed, SearchRequest("where function collections templates", 2, exact=False, hybrid=False)
    )
    assert all("metadatas" in include for kind, include, _ in asked if kind == "query")
