"""The exact-match fast path: title / linkTitle / alias / function-name / description / section
heading queries return that page first, from the catalog, merged with the semantic results (real repo, Chroma, BM25, model)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hetriever.discover.repositories import discover_repositories
from hetriever.index.indexing import index_repository
from hetriever.search.hybrid import hybrid_search
from hetriever.search.request import SearchRequest
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import store_settings
from tests.support.helpers import commit_all, init_repo, write_files

PAGES = {
    "content/functions/collections/Where.md": "---\ntitle: collections.Where\naliases: [/functions/where]\n---\n\n"
    "Returns a slice filtered by a key, an operator and a value.\n\n"
    "## Examples\n\nUse it in range loops over pages of a section.\n",
    "content/functions/go-template/range.md": "---\ntitle: range\naliases: [/functions/range]\n---\n\nIterates over a collection; "
    "use else for an empty one, and continue or break inside the loop.\n",
    "content/functions/collections/First.md": "---\ntitle: collections.First\n---\n\nReturns the first N elements of a slice, "
    "much like where returns the matching ones.\n\n## Related collection functions\n\n"
    "Last returns the final N elements instead.\n",
    "content/methods/site/Params.md": "---\ntitle: Params\n---\n\nReturns a map of custom parameters from the project "
    "configuration.\n",
    "content/methods/page/Params.md": "---\ntitle: Params\n---\n\nReturns a map of custom parameters from the page's front "
    "matter.\n",
    "content/getting-started/quick-start.md": "---\ntitle: Quick start\nlinkTitle: Start here\n---\n\nCreate a site, add content "
    "and publish it in minutes; how to begin.\n",
    "content/methods/menu-entry/Title.md": "---\ntitle: Title\ndescription: Returns the `title` property of the given menu entry."
    "\n---\n\nReturns the title property, falling back to the page's title.\n",
    "content/troubleshooting/faq.md": "---\ntitle: Frequently asked questions\n---\n\nAnswers to the questions people ask "
    "most.\n\n## How do I list pages by `date`?\n\nRange over the ByDate method of a page "
    "collection, newest last, or over its Reverse method to show the newest pages at the top "
    "of a list.\n\n## Why is my page missing?\n\nDrafts and pages dated in the future are "
    "not built unless you ask for them with the buildDrafts and buildFuture options, and "
    "an expired page is left out too.\n\n## Related collection functions\n\nSort and GroupBy order a "
    "collection by any key, and First and Last keep a number of its pages.\n",
    "content/tutorials/two-sites.md": "---\ntitle: Two sites from one repository\n---\n\nBuild a blog and a documentation "
    "site from the same repository, each with its own content folder and templates.\n\n"
    "## Blog\n\nThe blog keeps its posts by date and lists the newest first on its home "
    "page, with a summary of each post and a link to read the rest of it.\n\n"
    "### Example\n\nPosts live under content/posts and the list template of that "
    "section ranges over them newest first, ten to a page, with a pager at the bottom.\n\n"
    "## Docs\n\nThe documentation keeps its pages by weight and shows them in a side "
    "menu, grouped by section, with the current page marked in the menu.\n\n"
    "### Example\n\nManuals live under content/docs and the menu template orders them by "
    "weight, lightest first, each section folding open when one of its pages is shown.\n",
    "content/configuration/markup.md": "---\ntitle: Markup\n---\n\nHow each markup language renders.\n\n"
    "## AsciiDoc\n\n### Settings {#settings-asciidoc}\n\nThe asciidoctor backend, its "
    "safe mode and the extensions to load, each named as its gem names it, with the working "
    "folder set to the page's own.\n\n"
    "## reStructuredText\n\n### Settings {#settings-rst .wide}\n\nThe rst2html command "
    "and its arguments, with the stylesheet left out so the theme's own styles apply to "
    "every rendered page.\n",
    "content/about/_index.md": "---\ntitle: About\ndescription: How to begin\n---\n\nWho writes these pages and how "
    "the project is run.\n",
}


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def store(tmp_path: Path, minilm_embedder):
    repo_dir = init_repo(tmp_path / "repos" / "func-docs")
    write_files(repo_dir, PAGES)
    commit_all(repo_dir, "pages")
    store = Store(store_settings(tmp_path), embedder=minilm_embedder)
    (repo,) = discover_repositories(repo_dir.parent)
    run(index_repository(repo, store, store.settings))
    store.repo_dir = repo_dir
    yield store
    store.close_sync()


def first_file(store, query: str, **kwargs) -> tuple[str, str]:
    result = hybrid_search(store, SearchRequest(query, top_k=5, **kwargs))
    top = result.matches[0]
    return top.metadata["file_path"], top.source


@pytest.mark.parametrize(
    "query,path",
    [
        ("where", "content/functions/collections/Where.md"),  # function name
        ("  COLLECTIONS.WHERE ", "content/functions/collections/Where.md"),  # title, any case
        ("functions/where", "content/functions/collections/Where.md"),  # alias path
        (".Site.Params", "content/methods/site/Params.md"),  # method name
        (".Page.Params", "content/methods/page/Params.md"),
        ("start here", "content/getting-started/quick-start.md"),  # linkTitle
        ("Quick Start", "content/getting-started/quick-start.md"),
        # the description, as the page shows it (no backticks, with or without the period)
        (
            "returns the title property of the given menu entry",
            "content/methods/menu-entry/Title.md",
        ),
        (
            "Returns the `title` property of the given menu entry.",
            "content/methods/menu-entry/Title.md",
        ),
        # a section heading one page has, as its table of contents shows it (the first is
        # folded into the short introduction's chunk: `merged_headings`)
        ("How do I list pages by date?", "content/troubleshooting/faq.md"),
        ("why is my page missing", "content/troubleshooting/faq.md"),
        # an address as people paste it: the page's URL with or without host, query or
        # fragment, or an alias (an old URL) with its slashes
        (
            "https://example.org/functions/collections/where/#examples",
            "content/functions/collections/Where.md",
        ),
        (
            "example.org/getting-started/quick-start/?utm_source=x",
            "content/getting-started/quick-start.md",
        ),
        ("http://localhost:1313/methods/page/params/", "content/methods/page/Params.md"),
        ("/troubleshooting/faq/index.html", "content/troubleshooting/faq.md"),
        ("https://example.org/functions/where/", "content/functions/collections/Where.md"),
    ],
)
def test_exact_queries_rank_the_page_first(store, query, path) -> None:
    assert first_file(store, query) == (path, "exact")


def test_exact_hit_is_merged_without_duplicates(store) -> None:
    result = hybrid_search(store, SearchRequest("where", top_k=5))
    ids = [m.doc_id for m in result.matches]
    assert len(ids) == len(set(ids)) and len(ids) == 5
    assert [m.source for m in result.matches].count("exact") == 1
    assert result.matches[0].score == 1.0
    # semantic results follow, in their own order
    assert all(m.source in {"dense", "bm25", "hybrid"} for m in result.matches[1:])
    assert ids == [m.doc_id for m in hybrid_search(store, SearchRequest("where", top_k=5)).matches]


def test_non_title_queries_take_the_semantic_path(store) -> None:
    result = hybrid_search(store, SearchRequest("filter a slice by key and value", top_k=5))
    assert all(m.source != "exact" for m in result.matches)
    # an address no page has (the home page's among them) is searched like any text
    for query in ("https://example.org/functions/collections/nowhere/", "https://example.org/"):
        assert all(
            m.source != "exact" for m in hybrid_search(store, SearchRequest(query, top_k=5)).matches
        )
    # a description of one search term is a label, not a key ("About" is not found by it)
    result = hybrid_search(store, SearchRequest("how to begin", top_k=5))
    assert all(m.source != "exact" for m in result.matches)
    assert (
        hybrid_search(store, SearchRequest("where", top_k=5, exact=False)).matches[0].source
        != "exact"
    )


def test_a_heading_hit_shows_its_section(store) -> None:
    top = hybrid_search(store, SearchRequest("Why is my page missing?", top_k=5)).matches[0]
    assert top.source == "exact" and "Drafts and pages dated in the future" in top.content
    # a heading two pages share names neither of them; one term is a label, two a topic
    for query in ("Related collection functions", "Examples", "Related functions"):
        assert all(
            m.source != "exact" for m in hybrid_search(store, SearchRequest(query, top_k=5)).matches
        )
    # ... unless the search's own scope keeps one of them
    top = hybrid_search(
        store,
        SearchRequest(
            "Related collection functions", top_k=5, filters={"section": "troubleshooting"}
        ),
    ).matches[0]
    assert (top.source, top.metadata["file_path"]) == ("exact", "content/troubleshooting/faq.md")


def test_a_pasted_url_shows_the_section_its_fragment_names(store) -> None:
    def top(query: str):
        match = hybrid_search(store, SearchRequest(query, top_k=5)).matches[0]
        assert match.source == "exact"
        return match.metadata["file_path"], match.content

    path, content = top("https://example.org/troubleshooting/faq/#why-is-my-page-missing")
    assert path == "content/troubleshooting/faq.md" and "Drafts and pages dated" in content
    # a heading the chunker folded into its neighbour (merged_headings), via an alias too
    path, content = top("https://example.org/functions/where/#examples")
    assert path == "content/functions/collections/Where.md" and "range loops" in content
    # a repeated heading: Hugo anchors the second one `example-1`
    for fragment, words in (
        ("#example", "ten to a page"),
        ("#example-1", "lightest first"),
        ("#docs", "side menu"),
    ):
        path, content = top(f"/tutorials/two-sites/{fragment}")
        assert path == "content/tutorials/two-sites.md" and words in content, (fragment, content)
    # an id the author gave a heading (`### Settings {#settings-rst}`), in any case
    for fragment, words in (
        ("#settings-asciidoc", "asciidoctor backend"),
        ("#SETTINGS-RST", "rst2html command"),
        ("#settings", "asciidoctor"),
    ):
        path, content = top(f"/configuration/markup/{fragment}")
        assert path == "content/configuration/markup.md" and words in content, (fragment, content)
    # an anchor no heading has (an old link) shows the page as without one
    for fragment in ("", "#no-such-heading"):
        assert top(f"/troubleshooting/faq/{fragment}") == top("Frequently asked questions")


def test_exact_hits_respect_filters_access_and_deletion(store, tmp_path, minilm_embedder) -> None:
    # a filter that excludes the page excludes its exact hit too
    result = hybrid_search(store, SearchRequest("where", top_k=5, filters={"section": "methods"}))
    assert all(m.source != "exact" for m in result.matches)
    # a caller without the repository's level gets nothing, exact or not
    settings = store_settings(tmp_path, access_levels={"func-docs": "PRIVATE"})
    private = Store(settings, embedder=minilm_embedder, client=store.chroma.client)
    try:
        assert hybrid_search(private, SearchRequest("where", top_k=5)).matches == []
        # its chunks still say PUBLIC until re-indexed: a caller needs both levels meanwhile
        assert (
            hybrid_search(
                private, SearchRequest("where", top_k=5, access_levels=["PRIVATE"])
            ).matches
            == []
        )
        assert (
            hybrid_search(
                private, SearchRequest("where", top_k=5, access_levels=["PRIVATE", "PUBLIC"])
            )
            .matches[0]
            .source
            == "exact"
        )
    finally:
        private.close_sync()
    # a deleted page is no longer an exact hit
    (store.repo_dir / "content/functions/collections/Where.md").unlink()
    commit_all(store.repo_dir, "drop where")
    (repo,) = discover_repositories(store.repo_dir.parent)
    run(index_repository(repo, store, store.settings))
    result = hybrid_search(store, SearchRequest("where", top_k=5))
    assert all(m.source != "exact" for m in result.matches)
    assert "content/functions/collections/Where.md" not in {
        m.metadata["file_path"] for m in result.matches
    }


@pytest.mark.parametrize("query", ["where function", "where .Pages"])
def test_a_function_named_by_a_stopword_is_found_by_its_name_and_more(store, query) -> None:
    """`where` is a search term (analyzer.TEMPLATE_NAMES), so a query that names the function
    with other words finds its page first by the words too (the exact path left out)."""
    result = hybrid_search(store, SearchRequest(query, top_k=5, exact=False))
    top = result.matches[0]
    assert (top.metadata["file_path"], top.source) == (
        "content/functions/collections/Where.md",
        "hybrid",
    )


@pytest.mark.parametrize(
    ("query", "path"),
    [
        ("where function", "content/functions/collections/Where.md"),
        ("Function WHERE", "content/functions/collections/Where.md"),
        ("first func", "content/functions/collections/First.md"),
        ("collections.First function", "content/functions/collections/First.md"),
        (".Site.Params method", "content/methods/site/Params.md"),
        ("range function", "content/functions/go-template/range.md"),  # its title is a word too
    ],
)
def test_a_function_named_with_the_word_function_is_an_exact_hit(store, query, path) -> None:
    """ "<name> function": the name is an exact key, the word says what it names."""
    top = hybrid_search(store, SearchRequest(query, top_k=5)).matches[0]
    assert (top.metadata["file_path"], top.source) == (path, "exact")


@pytest.mark.parametrize(
    "query",
    [
        "markup function",  # a page's title, not a function's name
        "quick start function",  # more than one word before "function": not a name
        "where functions",  # only the singular word names one function
        "/functions/where function",  # an address is no name
        "params method",  # two methods are called Params: neither is named
    ],
)
def test_other_queries_with_the_word_function_take_the_semantic_path(store, query) -> None:
    assert all(
        m.source != "exact" for m in hybrid_search(store, SearchRequest(query, top_k=5)).matches
    )
