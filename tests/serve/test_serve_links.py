"""Served results carry a full link when the site's baseURL is known.

Tiny Hugo sites in real git repositories, ingested for real, then asked through the service,
the HTTP API (its ASGI app) and an MCP client session with the server in process.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import httpx
import pytest
from mcp.client import Client

from hetriever.discover.repositories import discover_repositories
from hetriever.index.indexing import index_repository
from hetriever.search.hybrid import hybrid_search
from hetriever.search.request import SearchRequest
from hetriever.serve.http_api import create_app
from hetriever.serve.keys import KeyRing
from hetriever.serve.mcp_server import create_mcp
from hetriever.serve.service import DocsService
from hetriever.serve.telemetry import Telemetry
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import store_settings
from tests.support.helpers import commit_all, init_repo, write_files

TIMEOUT = 120  # seconds for an MCP session or an HTTP exchange


def page(title: str, body: str, extra: str = "") -> str:
    return f"---\ntitle: {title}\n{extra}---\n\n{body}\n"


SITES = {
    # published under a sub-path, baseURL written without its trailing slash
    "subpath-docs": {
        "hugo.toml": 'baseURL = "https://example.org/docs"\ntitle = "Sub-path docs"\n',
        "content/functions/where.md": page(
            "where", "The where function keeps the kestrel pages whose key compares true."
        ),
        "content/about.md": page(
            "About the heron", "The heron team writes these docs.", "url: /about/\n"
        ),
    },
    # baseURL without a host: only site-relative paths are known
    "rooted-docs": {
        "hugo.toml": 'baseURL = "/"\n',
        "content/guide.md": page("Ptarmigan guide", "The ptarmigan guide explains molting."),
    },
    # each language at its own host (Hugo's multihost), French by file name
    "hosted-docs": {
        "hugo.toml": 'defaultContentLanguage = "en"\n[languages.en]\nweight = 1\n'
        'baseURL = "https://en.example.net/"\n[languages.fr]\nweight = 2\n'
        'baseURL = "https://fr.example.net/"\n',
        "content/tern.md": page("Tern migration", "The tern migration route crosses the sea."),
        "content/tern.fr.md": page(
            "Migration de la sterne", "La migration de la sterne traverse la mer."
        ),
    },
    # multihost with a content directory per language: the default language's file sorts first
    "puffin-docs": {
        "hugo.toml": 'defaultContentLanguage = "en"\n[languages.en]\nweight = 1\n'
        'contentDir = "content/en"\nbaseURL = "https://example.org/"\n'
        '[languages.fr]\nweight = 2\ncontentDir = "content/fr"\n'
        'baseURL = "https://fr.example.org/"\n',
        "content/en/docs/puffin.md": page("Puffin burrows", "Puffins dig burrows on cliffs."),
        "content/fr/docs/puffin.md": page(
            "Terriers de macareux", "Les macareux creusent des terriers dans les falaises."
        ),
    },
    # one host, French under /fr/
    "gannet-docs": {
        "hugo.toml": 'baseURL = "https://gannet.example/"\ndefaultContentLanguage = "en"\n'
        '[languages.en]\nweight = 1\ncontentDir = "content/en"\n'
        '[languages.fr]\nweight = 2\ncontentDir = "content/fr"\n',
        "content/en/docs/gannet.md": page("Gannet dives", "Gannets dive for fish."),
        "content/fr/docs/gannet.md": page("Plongeons du fou", "Les fous plongent pour pêcher."),
    },
}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, minilm_embedder: Any):
    root = tmp_path_factory.mktemp("linked")
    for name, files in SITES.items():
        repo = init_repo(root / "docs" / name)
        write_files(repo, files)
        commit_all(repo, name)
    store = Store(store_settings(root), embedder=minilm_embedder)
    docs = DocsService(store.settings, store=store)
    try:
        for repo in discover_repositories(root / "docs"):
            assert asyncio.run(index_repository(repo, store, store.settings)).completed
        yield docs
    finally:
        docs.close()


def top(service: DocsService, query: str, **kw: Any) -> dict[str, Any]:
    return service.search(SearchRequest(query, 3, **kw))["results"][0]


def test_results_and_pages_carry_full_links_under_the_base_url_path(service):
    where = top(service, "where function kestrel pages")
    assert where["url"] == "/docs/functions/where/"  # unchanged: site-relative
    assert where["link"] == "https://example.org/docs/functions/where/"
    about = top(service, "heron team writes these docs")
    assert (about["url"], about["link"]) == ("/docs/about/", "https://example.org/docs/about/")
    # the link an agent was given opens the page, which carries it too
    opened = service.page(where["link"])
    assert opened["page_id"] == where["page_id"] and opened["link"] == where["link"]


def test_a_base_url_without_a_host_keeps_site_relative_links(service):
    guide = top(service, "ptarmigan guide molting")
    assert guide["url"] == guide["link"] == "/guide/"
    # unless the settings say where the site is published (no re-index needed)
    told = DocsService(
        service.settings.replace(site_urls={"rooted-docs": "https://ptarmigan.example/"}),
        store=service.store,
    )
    guide = top(told, "ptarmigan guide molting")
    assert (guide["url"], guide["link"]) == ("/guide/", "https://ptarmigan.example/guide/")
    assert told.page(guide["link"])["link"] == guide["link"]


def test_each_language_links_to_its_own_host(service):
    english = top(service, "tern migration route crosses the sea", lang="en")
    assert (english["url"], english["link"]) == ("/tern/", "https://en.example.net/tern/")
    assert english["translations"] == [
        {
            "lang": "fr",
            "url": "/tern/",
            "title": "Migration de la sterne",
            "link": "https://fr.example.net/tern/",
        }
    ]
    french = top(service, "migration de la sterne traverse la mer", lang="fr")
    assert french["link"] == "https://fr.example.net/tern/"
    # both pages are at /tern/: each link opens its own page, a bare path the first
    for result in (english, french):
        assert service.page(result["link"])["page_id"] == result["page_id"]
    assert service.page("/tern/")["lang"] == "en"


def test_a_pasted_link_names_the_page_published_at_its_host(service, tmp_path):
    # A multihost site has every language's page at one path: the link's host tells them apart,
    # with every language searched ("all") or none named, through the core and the service.
    pasted = [
        ("https://fr.example.org/docs/puffin/", "fr"),
        ("https://example.org/docs/puffin/#burrows", "en"),
        ("fr.example.org/docs/puffin/", "fr"),
        ("https://en.example.net/tern/", "en"),
        ("https://fr.example.net/tern/", "fr"),
        # one host: the path holds the language
        ("https://gannet.example/fr/docs/gannet/", "fr"),
        ("https://gannet.example/docs/gannet/", "en"),
    ]
    for link, lang in pasted:
        for asked in ("all", None):
            first = hybrid_search(service.store, SearchRequest(link, 3, lang=asked)).matches[0]
            assert (first.source, first.metadata["lang"]) == ("exact", lang), (link, asked)
            shown = top(service, link, lang=asked)
            assert (shown["source"], shown["lang"]) == ("exact", lang), (link, asked)
            assert shown["link"] == "https://" + link.split("://")[-1].split("#")[0]
    # a bare path or an unknown host: the site's default language, as a page look-up
    for path in ("/docs/puffin/", "/tern/", "https://mirror.example/tern/"):
        for asked in ("all", None):
            shown = top(service, path, lang=asked)
            assert (shown["source"], shown["lang"]) == ("exact", "en"), (path, asked)
    # a language named: its page at that path
    for asked in ("en", "fr"):
        for link in ("https://fr.example.org/docs/puffin/", "https://example.org/docs/puffin/"):
            shown = top(service, link, lang=asked)
            assert (shown["source"], shown["lang"]) == ("exact", asked), (link, asked)
    # and the HTTP API, which passes the language as given
    answers = http_get(
        service,
        tmp_path,
        [
            ("/search", {"q": link, **lang})
            for link in ("https://fr.example.org/docs/puffin/", "https://fr.example.net/tern/")
            for lang in ({"lang": "all"}, {})
        ],
    )
    for answer in answers:
        first = answer.json()["results"][0]
        assert (first["source"], first["lang"]) == ("exact", "fr"), answer.json()
        assert first["link"].startswith("https://fr.example.")


def http_get(service, tmp_path, requests: list[tuple[str, dict]]) -> list[httpx.Response]:
    """The HTTP API's answers to GET `requests` ((path, query parameters)), in order."""
    telemetry = Telemetry(tmp_path, "http")
    app = create_app(service, telemetry=telemetry)

    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            with anyio.fail_after(TIMEOUT):
                return [await client.get(path, params=params) for path, params in requests]

    try:
        return anyio.run(go)
    finally:
        telemetry.close()


def test_the_http_api_answers_url_and_link(service, tmp_path):
    found, opened, openapi = http_get(
        service,
        tmp_path,
        [
            ("/search", {"q": "where function kestrel"}),
            ("/pages/subpath-docs/content/functions/where.md", {}),
            ("/openapi.json", {}),
        ],
    )
    first = found.json()["results"][0]
    assert first["url"] == "/docs/functions/where/"
    assert first["link"] == "https://example.org/docs/functions/where/"
    assert opened.json()["link"] == first["link"]
    for path, method in (("/search", "get"), ("/search", "post"), ("/pages/{ref}", "get")):
        assert "`link`" in openapi.json()["paths"][path][method]["description"]


def test_mcp_answers_show_the_full_link(service):
    server = create_mcp(service, KeyRing({}, {}))

    async def go():
        with anyio.fail_after(TIMEOUT):
            async with Client(server) as client:
                found = await client.call_tool(
                    "search_docs", {"query": "where function kestrel", "k": 2}
                )
                link = found.content[0].text.split("URL: ", 1)[1].split()[0]
                opened = await client.call_tool("get_page", {"url_or_id": link})
                return found.content[0].text, link, opened.content[0].text

    found, link, opened = anyio.run(go)
    assert link == "https://example.org/docs/functions/where/", found
    assert "URL: https://example.org/docs/functions/where/" in opened.split("\n", 2)[1]


def test_a_site_configuration_change_is_a_full_pass_so_every_link_follows(
    tmp_path, minilm_embedder
):
    # Only hugo.toml changes: the diff names no page, yet every page's URL moves with it.
    repo = init_repo(tmp_path / "docs" / "moving-docs")
    write_files(
        repo,
        {
            "hugo.toml": 'baseURL = "https://docs.example.org/docs/"\n',
            "content/guide/install.md": page("Install the wombat", "Unpack it."),
            "content/guide/feed.md": page("Feed the wombat", "Carrots daily."),
        },
    )
    commit_all(repo, "v1")
    store = Store(store_settings(tmp_path), embedder=minilm_embedder)
    docs = DocsService(store.settings, store=store)
    try:
        (found,) = discover_repositories(tmp_path / "docs")
        assert asyncio.run(index_repository(found, store, store.settings)).mode == "full"
        write_files(repo, {"hugo.toml": 'baseURL = "https://new.example.net:8443/manual"\n'})
        commit_all(repo, "the site moves")
        moved = asyncio.run(index_repository(found, store, store.settings))
        assert moved.mode == "full" and moved.chunks_reused > 0, moved
        install = top(docs, "install the wombat")
        assert install["link"] == "https://new.example.net:8443/manual/guide/install/"

        write_files(repo, {"content/guide/feed.md": page("Feed the wombat", "Carrots, oats.")})
        commit_all(repo, "an edit")  # the configuration as recorded: incremental again
        assert asyncio.run(index_repository(found, store, store.settings)).mode == "incremental"
    finally:
        docs.close()


def test_an_address_that_is_not_http_or_site_relative_is_no_link():
    from hetriever.search.published import full_link

    bases = {"en": "https://docs.example.org/"}
    for hostile in (
        "javascript:alert(1)",
        "JavaScript://x%0Aalert(1)",
        " javascript:x",
        "data:text/html,<script>x</script>",
        "//evil.example/x",
        "vbscript:x",
    ):
        assert full_link(hostile, "en", bases) == "", hostile
    assert full_link("/docs/a/", "en", bases) == "https://docs.example.org/docs/a/"
    assert full_link("https://other.example/b/", "en", bases) == "https://other.example/b/"
    assert full_link("/docs/a/", "en", {}) == "/docs/a/"
