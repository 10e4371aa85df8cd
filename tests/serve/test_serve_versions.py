"""`version` through a real `hetriever serve` (GET and POST /search, /pages, /diff) and a real
`hetriever mcp` session (search_docs, get_page), over an index holding a repository's tree and
its version `v1.0.0` (`tests.support.versions`)."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from hetriever.core.versions import version_name
from tests.support.serve_fixtures import HETRIEVER
from tests.support.versions import BASE, LABEL

pytestmark = pytest.mark.slow  # a real `hetriever serve` / `hetriever mcp` process

TIMEOUT = 60.0
VERSION = version_name(BASE, LABEL)


def get(api, path: str, **params: Any) -> httpx.Response:
    return httpx.get(api.url + path, params=params, timeout=TIMEOUT)


def test_search_passes_the_version_through(versioned_api):
    plain = get(versioned_api, "/search", q="install the package", k=3).json()["results"]
    assert plain[0]["repository"] == BASE and plain[0]["version"] == ""
    assert "wombat" in plain[0]["passage"]
    old = get(versioned_api, "/search", q="install the package", k=3, version=LABEL).json()[
        "results"
    ]
    assert {r["repository"] for r in old} == {VERSION}
    assert old[0]["version"] == LABEL and "quokka" in old[0]["passage"]
    assert old[0]["url"] == "/docs/install/"
    posted = httpx.post(
        versioned_api.url + "/search",
        json={"q": "install the package", "k": 3, "repository": BASE, "version": LABEL},
        timeout=TIMEOUT,
    ).json()["results"]
    assert [r["chunk_id"] for r in posted] == [r["chunk_id"] for r in old]
    every = get(versioned_api, "/search", q="install the package", k=5, version="all").json()[
        "results"
    ]
    install = [r for r in every if r["file_path"] == "content/docs/install.md"]
    assert len(install) == 1
    assert sorted(v["version"] for v in install[0]["versions"]) == ["current", LABEL]
    assert all(
        v["differs"] for v in install[0]["versions"] if v["repository"] != install[0]["repository"]
    )


def test_an_unknown_version_is_a_400_naming_the_known_ones(versioned_api):
    resp = get(versioned_api, "/search", q="install", version="v9.9.9")
    assert resp.status_code == 400
    assert "v9.9.9" in resp.json()["error"] and LABEL in resp.json()["error"]
    posted = httpx.post(
        versioned_api.url + "/search", json={"q": "install", "version": 9}, timeout=TIMEOUT
    )
    assert posted.status_code == 400


def test_a_page_by_url_is_the_trees_unless_a_version_is_asked(versioned_api):
    tree = get(versioned_api, "/pages//docs/install/").json()
    assert tree["repository"] == BASE and tree["version"] == ""
    assert "wombat" in tree["chunks"][-1]["text"]
    old = get(versioned_api, "/pages//docs/install/", version=LABEL).json()
    assert old["repository"] == VERSION and old["version"] == LABEL
    assert "quokka" in old["chunks"][-1]["text"]
    assert get(versioned_api, "/pages//docs/gopher/").status_code == 404
    assert (
        get(versioned_api, "/pages//docs/gopher/", version=LABEL).json()["title"]
        == "Gopher exporter"
    )


def test_diff_over_http(versioned_api):
    answer = get(versioned_api, "/diff", repository=BASE, **{"from": LABEL, "to": "current"}).json()
    assert answer["counts"] == {"A": 1, "M": 1, "D": 1, "R": 1}
    kinds = {c["path"]: (c["kind"], c["old_path"]) for c in answer["changes"]}
    assert kinds == {
        "content/docs/added.md": ("A", ""),
        "content/docs/install.md": ("M", ""),
        "content/docs/gopher.md": ("D", ""),
        "content/docs/new-name.md": ("R", "content/docs/old-name.md"),
    }
    missing = get(versioned_api, "/diff", repository=BASE, **{"from": "v0.0.1", "to": "current"})
    assert missing.status_code == 400 and LABEL in missing.json()["error"]
    assert (
        get(
            versioned_api, "/diff", repository="no-such-docs", **{"from": LABEL, "to": "current"}
        ).status_code
        == 404
    )


def text_of(result: Any) -> str:
    return "\n".join(part.text for part in result.content)


def test_mcp_tools_pass_the_version_through(versioned):
    server = StdioServerParameters(
        command=str(HETRIEVER), args=["mcp"], env=versioned.env, cwd=str(versioned.root)
    )

    async def steps(client):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert "version" in tools["search_docs"].input_schema["properties"]
        old = text_of(
            await client.call_tool(
                "search_docs", {"query": "install the package", "version": LABEL}
            )
        )
        tree = text_of(await client.call_tool("search_docs", {"query": "install the package"}))
        page = text_of(
            await client.call_tool("get_page", {"url_or_id": "/docs/install/", "version": LABEL})
        )
        unknown = await client.call_tool("search_docs", {"query": "install", "version": "v9"})
        return old, tree, page, unknown

    async def go():
        with anyio.fail_after(240):
            async with Client(server) as client:
                return await steps(client)

    old, tree, page, unknown = anyio.run(go)
    assert "quokka" in old and f"version: {LABEL}" in old and "wombat" not in old
    assert "wombat" in tree and "version:" not in tree
    assert "quokka" in page and f"repository: {VERSION}" in page
    assert unknown.is_error and LABEL in text_of(unknown)
