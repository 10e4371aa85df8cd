"""Links between pages (hetriever.parse.links): what a page links to, how the catalog keeps it, and
the links prior of page results for questions: pure rules, the real catalog, and real git
repositories indexed into real Chroma with the real model."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from hetriever.core.config import Settings
from hetriever.discover.repositories import Repository, discover_repositories
from hetriever.index.indexing import index_repository
from hetriever.index.process import process_text
from hetriever.parse.links import LINKS_KEY, LinkPrior, links_of, outbound_keys, page_keys
from hetriever.search.hybrid import hybrid_search
from hetriever.search.request import SearchRequest
from hetriever.search.results import is_question
from hetriever.store.catalog import Catalog
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import store_settings
from tests.support.helpers import (
    commit_all,
    init_repo,
    make_parent_with_submodule,
    update_submodule,
    write_files,
)

BODY = """See [menus](/content-management/menus/) and [URLs](../urls/#aliases).
Configure it as {{< ref "configuration/markup.md" >}} says, or [the sibling](sibling.md).
[Elsewhere](https://example.org/menus/), [mail](mailto:a@b.c), [here](#top),
[templated]({{< relref "x" >}}), ![logo](/images/logo.png)

[pagination]: /templates/pagination/
<a href="/about/">About</a>
"""


def test_a_pages_links_become_keys_of_urls_and_content_paths():
    keys = outbound_keys(
        BODY,
        "content/en/content-management/sections.md",
        "/content-management/sections/",
        "content/en",
    )
    assert "url:/content-management/menus/" in keys
    assert "url:/content-management/urls/" in keys  # relative to the page's URL
    assert "url:/templates/pagination/" in keys  # a reference definition
    assert "url:/about/" in keys  # an HTML link
    # ref and .md links: relative to the page's folder, and to the content root
    assert "path:content/en/configuration/markup" in keys
    assert "path:content/en/content-management/configuration/markup" in keys
    assert "path:content/en/content-management/sibling" in keys
    assert not [k for k in keys if "example.org" in k or "mailto" in k or "top" in k]
    assert keys == sorted(set(keys))


def test_a_page_is_known_by_its_path_and_its_url():
    assert page_keys(
        {"file_path": "content/en/content-management/menus.md", "url": "/content-management/menus/"}
    ) == ["path:content/en/content-management/menus", "url:/content-management/menus/"]
    # bundles and sections are linked by their folder
    assert page_keys({"file_path": "content/en/about/_index.md"}) == ["path:content/en/about"]
    assert page_keys({"file_path": "content/en/hosting/netlify/index.md", "url": "/hosting"}) == [
        "path:content/en/hosting/netlify",
        "url:/hosting/",
    ]


class _Links:
    def __init__(self, sources: dict[str, set[str]]) -> None:
        self.sources, self.calls = sources, 0

    def link_sources(self, collection, keys):
        self.calls += 1
        return {k: v for k, v in self.sources.items() if k in set(keys)}


def test_the_prior_counts_each_linking_page_once_and_never_the_page_itself():
    catalog = _Links(
        {
            "url:/menus/": {"content/a.md", "content/b.md", "content/menus.md"},
            "path:content/menus": {"content/a.md", "content/c.md"},
        }
    )
    prior = LinkPrior(catalog, {"docs": "docs_v1"}, 0.3)
    menus = {"file_path": "content/menus.md", "url": "/menus/"}
    other = {"file_path": "content/other.md", "url": "/other/"}
    got = prior.values({"p1": ("docs", menus), "p2": ("docs", other)})
    assert got == {"p1": math.log1p(3), "p2": 0.0}  # a, b, c; not menus.md itself
    prior.values({"p1": ("docs", menus)})
    assert catalog.calls == 1  # looked up once per page and search
    assert LinkPrior(catalog, {}, 0.3).values({"p1": ("docs", menus)}) == {"p1": 0.0}


def test_only_english_questions_get_the_prior():
    s = Settings()
    asked = "how do I add menu entries for pages that have no markdown file in the content folder"
    assert is_question(s, "", asked)
    assert not is_question(s, "", "Menus")  # a look-up by name
    assert not is_question(s, "", "add menu entries for pages without a file")  # 6 terms
    assert not is_question(s, "ja", asked)


def test_the_catalog_keeps_each_files_links_until_it_goes(tmp_path: Path):
    catalog = Catalog(tmp_path / "catalog.sqlite")
    catalog.pages.set_page("docs_v1", "a.md", metadata={LINKS_KEY: ["url:/menus/", "url:/urls/"]})
    catalog.pages.set_page("docs_v1", "b.md", metadata={LINKS_KEY: ["url:/menus/"]})
    catalog.pages.set_page("other_v1", "c.md", metadata={LINKS_KEY: ["url:/menus/"]})
    assert catalog.pages.link_sources("docs_v1", ["url:/menus/", "url:/urls/", "url:/x/"]) == {
        "url:/menus/": {"a.md", "b.md"},
        "url:/urls/": {"a.md"},
    }
    catalog.pages.set_page(
        "docs_v1", "a.md", metadata={LINKS_KEY: ["url:/urls/"]}
    )  # re-processed: replaced
    assert catalog.pages.link_sources("docs_v1", ["url:/menus/"]) == {"url:/menus/": {"b.md"}}
    catalog.mark_deleted("docs_v1", ["b.md"], "2026-01-01T00:00:00Z")
    assert catalog.pages.link_sources("docs_v1", ["url:/menus/"]) == {}
    catalog.remove_files("docs_v1", ["a.md"])
    assert catalog.pages.link_sources("docs_v1", ["url:/urls/"]) == {}
    catalog.pages.set_page("docs_v1", "d.md", metadata={LINKS_KEY: ["url:/menus/"]})
    catalog.prune("docs_v1", set(), set())  # a file the collection no longer holds
    assert catalog.pages.link_sources("docs_v1", ["url:/menus/"]) == {}
    catalog.drop_collection("other_v1")
    assert catalog.pages.link_sources("other_v1", ["url:/menus/"]) == {}
    catalog.close()


def test_a_page_s_titles_and_links_are_replaced_together(tmp_path: Path):
    catalog = Catalog(tmp_path / "catalog.sqlite")
    meta = {"title": "Sections", "file_path": "content/sections.md", LINKS_KEY: ["url:/menus/"]}
    catalog.pages.set_page("docs_v1", "content/sections.md", "id-1", meta)
    assert [h.chunk_id for h in catalog.pages.lookup_title("sections", ["docs_v1"])] == ["id-1"]
    assert catalog.pages.link_sources("docs_v1", ["url:/menus/"]) == {
        "url:/menus/": {"content/sections.md"}
    }
    catalog.pages.set_page("docs_v1", "content/sections.md")  # skipped now: both go
    assert catalog.pages.lookup_title("sections", ["docs_v1"]) == []
    assert catalog.pages.link_sources("docs_v1", ["url:/menus/"]) == {}
    catalog.close()


def test_processing_a_page_records_what_it_links_to():
    text = "---\ntitle: Sections\n---\nRead [menus](/content-management/menus/) first.\n"
    outcome = process_text(
        Repository(name="docs", path=Path(".")),
        "content/content-management/sections.md",
        text,
        Settings(),
    )
    (first,) = [c for c in outcome.chunks if not c.metadata.get("page_record")]
    assert links_of(first.metadata) == ["url:/content-management/menus/"]
    record = next(c for c in outcome.chunks if c.metadata.get("page_record"))
    assert LINKS_KEY not in record.metadata  # only the chunk that stands for the page


# Two pages answer the question about as well; the hub is linked from three others.
NARROW = """---
title: Menu entry parameters
---
To add menu entries for pages, define the menu entries in front matter or in the site
configuration. Each menu entry can set a name, a weight, a URL and parameters.
"""
HUB = """---
title: Menus
---
Define menus for pages in front matter or in the site configuration, with a name and a weight
for each entry.
"""
QUESTION = "how do I add menu entries for pages in front matter or site configuration"


def _linking(n: int) -> dict[str, str]:
    return {
        f"content/guide/step-{i}.md": f"---\ntitle: Step {i}\n---\nBuild the site with "
        f"hugo and a theme of your choice, see [menus](/menus/) later.\n"
        for i in range(n)
    }


@pytest.fixture
def site(tmp_path: Path, minilm_embedder):
    doc_repo = init_repo(tmp_path / "site")
    write_files(doc_repo, {"content/menus.md": HUB, "content/menu-entry.md": NARROW, **_linking(3)})
    commit_all(doc_repo)
    parent = make_parent_with_submodule(tmp_path, doc_repo, "site")

    def index(**overrides):
        (repo,) = discover_repositories(parent)
        store = Store(store_settings(tmp_path, **overrides), embedder=minilm_embedder)
        result = asyncio.run(index_repository(repo, store, store.settings))
        assert result.completed and not result.failed
        return store

    yield doc_repo, parent, index


def _first(store, query: str) -> str:
    got = hybrid_search(store, SearchRequest(query, 3, exact=False))
    return got.matches[0].metadata["file_path"]


def test_a_question_prefers_the_page_other_pages_link_to(site):
    doc_repo, parent, index = site
    store = index(link_prior_weight=0.0)
    assert _first(store, QUESTION) == "content/menu-entry.md"  # its words match best
    store.close_sync()
    store = index()  # the default weight
    assert _first(store, QUESTION) == "content/menus.md"
    # Only fused pages get the prior: one retriever alone ranks by its own scores, and no
    # links are looked up for it.
    calls = []
    real = store.catalog.pages.link_sources
    store.catalog.pages.link_sources = (  # type: ignore[method-assign]
        lambda *a: calls.append(a) or real(*a)
    )
    hybrid_search(store, SearchRequest(QUESTION, 3, exact=False, hybrid=False))
    assert calls == []
    hybrid_search(store, SearchRequest(QUESTION, 3, exact=False))
    assert len(calls) == 1
    # A look-up by name gets no prior: the narrow page's own title still comes first.
    assert _first(store, "Menu entry parameters") == "content/menu-entry.md"
    store.close_sync()

    # The links go away in the next commit: an incremental run forgets them.
    write_files(
        doc_repo,
        {
            path: text.replace("see [menus](/menus/) later", "see menus later")
            for path, text in _linking(3).items()
        },
    )
    update_submodule(parent, "site", commit_all(doc_repo, "unlink"))
    store = index()
    assert store.catalog.pages.link_sources(store.physical_name("site"), ["url:/menus/"]) == {}
    assert _first(store, QUESTION) == "content/menu-entry.md"
    store.close_sync()
