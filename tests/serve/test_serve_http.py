"""`hetriever serve` as a user runs it: a real uvicorn process over a real index, asked with httpx."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.support.helpers import commit_all, git, init_repo, write_files
from tests.support.serve_fixtures import PRIVATE_KEY, TEAM_KEY, running

pytestmark = pytest.mark.slow  # a real `hetriever serve` / `hetriever mcp` process

TIMEOUT = 60


@pytest.fixture(scope="module")
def api(served_docs):
    with running(served_docs, "serve") as served:
        yield served


def get(api, path, key=None, **params):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.get(api.url + path, params=params, headers=headers, timeout=TIMEOUT)


def search(api, key=None, **params):
    resp = get(api, "/search", key, **params)
    assert resp.status_code == 200, resp.text
    return resp.json()


def repositories_of(answer):
    return {r["repository"] for r in answer["results"]}


def test_search_returns_pages_with_passages_urls_titles_and_scores(api):
    answer = search(api, q="where function comparison condition", k=3)
    top = answer["results"][0]
    assert top["url"] == "/docs/templates/where/" and top["title"] == "where"
    assert top["page_id"] == "sample-docs/content/docs/templates/where.md"
    assert top["passage"].startswith("The `where` function") or "where" in top["passage"]
    assert not top["passage"].startswith("where\n")  # the title line is not repeated
    assert 0.0 < top["score"] <= 1.0 and top["source"] in {"hybrid", "dense", "bm25", "exact"}
    assert answer["mode"] == "hybrid" and len(answer["results"]) <= 3


def test_page_grouping_gives_one_result_per_page_and_chunk_grouping_does_not(api):
    pages = search(api, q="where function usage examples operators", k=10)["results"]
    paths = [r["page_id"] for r in pages]
    assert len(paths) == len(set(paths))
    chunks = search(api, q="where function usage examples operators", k=10, group="chunk")[
        "results"
    ]
    chunk_paths = [r["page_id"] for r in chunks]
    assert len(chunk_paths) > len(set(chunk_paths))  # where.md has several chunks
    assert [r["chunk_id"] for r in chunks] != [r["chunk_id"] for r in pages]


def test_filters_repository_and_language(api):
    blog = search(api, q="where", k=10, filter=json.dumps({"section": "blog"}))["results"]
    assert blog and {r["section"] for r in blog} == {"blog"}
    french = search(api, q="la fonction where", k=10, lang="fr")["results"]
    assert [r["page_id"] for r in french] == ["sample-docs/content/fr/docs/where.md"]
    english = search(api, q="la fonction where", k=10, lang="en")["results"]
    assert english and all(r["lang"] == "en" for r in english)
    # Told no language: French words keep to the French pages, and the answer says so.
    told_none = search(api, q="la fonction where", k=10)
    assert told_none["query_language"] == "fr"
    assert [r["page_id"] for r in told_none["results"]] == ["sample-docs/content/fr/docs/where.md"]
    assert "query_language" not in search(api, q="where function", k=3)
    only = search(api, TEAM_KEY, q="kestrel", k=10, repository="team-notes")
    assert repositories_of(only) == {"team-notes"}
    # a name that is not the repository's is refused, with the name it might have meant
    refused = get(api, "/search", TEAM_KEY, q="kestrel", repository="Team.Notes")
    assert refused.status_code == 400 and "did you mean 'team-notes'" in refused.json()["error"]
    missing = search(api, q="where", repository="no-such-docs")
    assert missing["results"] == []


def test_post_search_takes_a_json_body(api):
    resp = httpx.post(
        api.url + "/search", json={"q": "install sample", "k": 2, "group": "chunk"}, timeout=TIMEOUT
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["group"] == "chunk" and len(resp.json()["results"]) <= 2


def test_page_by_id_url_and_chunk_id_in_order(api):
    by_id = get(api, "/pages/sample-docs/content/docs/templates/where.md").json()
    assert by_id["title"] == "where" and by_id["url"] == "/docs/templates/where/"
    indexes = [c["index"] for c in by_id["chunks"]]
    assert indexes == sorted(indexes) and len(indexes) >= 2
    assert "Usage" in [c["heading"] for c in by_id["chunks"]]
    by_url = get(api, "/pages/https://docs.example.com/docs/templates/where").json()
    assert by_url["chunks"] == by_id["chunks"]
    # an old link (the page's alias) and another spelling of its URL name it too
    for ref in ("https://docs.example.com/functions/where/", "/Docs/Templates/Where/"):
        assert get(api, "/pages/" + ref).json()["chunks"] == by_id["chunks"], ref
    assert get(api, "/pages/http://[::1/docs/").status_code == 404  # no page, no traceback
    by_chunk = get(api, "/pages/" + by_id["chunks"][-1]["chunk_id"]).json()
    assert by_chunk["page_id"] == by_id["page_id"]


def test_repositories_show_indexed_and_checked_out_commits(api):
    public = get(api, "/repositories").json()["repositories"]
    assert [r["repository"] for r in public] == ["sample-docs"]
    row = public[0]
    assert row["indexed_commit"] and row["checked_out_commit"] == row["indexed_commit"]
    assert row["up_to_date"] is True and row["files"] >= 6 and row["chunks"] > row["files"]
    team = get(api, "/repositories", TEAM_KEY).json()["repositories"]
    assert [r["repository"] for r in team] == ["sample-docs", "team-notes"]


def test_access_levels_follow_the_key(api):
    assert repositories_of(search(api, q="kestrel rotation payroll", k=10)) <= {"sample-docs"}
    team = search(api, TEAM_KEY, q="kestrel rotation payroll", k=10)
    assert "team-notes" in repositories_of(team) and "private-ops" not in repositories_of(team)
    private = search(api, PRIVATE_KEY, q="kestrel rotation payroll", k=10)
    assert "private-ops" in repositories_of(private)
    assert "team-notes" not in repositories_of(private)  # levels are a set, not a ladder
    # a page the caller may not see answers exactly like a page that does not exist
    hidden = get(api, "/pages/team-notes/content/oncall.md")
    absent = get(api, "/pages/team-notes/content/nothing.md")
    assert hidden.status_code == absent.status_code == 404
    assert get(api, "/pages/team-notes/content/oncall.md", TEAM_KEY).status_code == 200
    # a repository named but not searchable is said to be so, hidden and missing alike
    hidden, missing = (
        search(api, q="kestrel", repository=name) for name in ("team-notes", "no-such-docs")
    )
    assert hidden["results"] == missing["results"] == []
    assert hidden["unknown_repositories"] == ["team-notes"]
    assert missing["unknown_repositories"] == ["no-such-docs"]
    both = search(api, TEAM_KEY, q="kestrel", repository=["team-notes", "sample-docs"])
    assert "unknown_repositories" not in both


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer not-a-key"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"X-API-Key": "not-a-key"},
        {"Authorization": "Bearer " + "x" * 5000},
    ],
)
@pytest.mark.parametrize(
    "path", ["/search?q=kestrel", "/repositories", "/pages/team-notes/content/oncall.md"]
)
def test_bad_keys_get_401_and_learn_nothing(api, headers, path):
    resp = httpx.get(api.url + path, headers=headers, timeout=TIMEOUT)
    assert resp.status_code == 401
    assert resp.json() == {"error": "invalid API key"}
    assert resp.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    "params,message",
    [
        ({"q": ""}, "empty"),
        ({"k": "3"}, "empty"),
        ({"q": "x" * 1001}, "above the limit"),
        ({"q": "where", "k": "0"}, "k must be"),
        ({"q": "where", "k": "51"}, "k must be"),
        ({"q": "where", "k": "lots"}, "k:"),
        ({"q": "where", "group": "site"}, "group must be"),
        ({"q": "where", "filter": "{not json"}, "not valid JSON"),
        ({"q": "where", "filter": '{"a": {"$regex": "."}}'}, "$regex"),
        ({"q": "where", "filter": "[1, 2]"}, "JSON object"),
        ({"q": "where", "repository": "B!"}, "repository"),  # no valid name in it
    ],
)
def test_bad_input_gets_a_400_with_a_clear_message(api, params, message):
    resp = get(api, "/search", **params)
    assert resp.status_code == 400, resp.text
    assert message.lower() in resp.json()["error"].lower()


def test_bad_bodies_get_4xx_never_500(api):
    big = httpx.post(
        api.url + "/search",
        content=b"{" + b" " * 20_000 + b"}",
        headers={"Content-Type": "application/json"},
        timeout=TIMEOUT,
    )
    assert big.status_code == 413

    def chunked():
        for _ in range(40):
            yield b" " * 1024

    streamed = httpx.post(api.url + "/search", content=chunked(), timeout=TIMEOUT)
    assert streamed.status_code == 413
    for body in (
        b"not json",
        b"[1]",
        b'{"q": "x", "top": 3}',
        b'{"q": 5}',
        b'{"q": "x", "repository": [1]}',
        b'{"q": "x", "k": "many"}',
    ):
        resp = httpx.post(api.url + "/search", content=body, timeout=TIMEOUT)
        assert resp.status_code == 400, (body, resp.text)
        assert resp.json()["error"]


def test_malformed_text_and_json_get_a_400_and_every_error_one_shape(api):
    deep = "[" * 3000 + "]" * 3000  # a small body that overflows the JSON decoder's recursion
    for body, message in (
        (b'{"q": "\\ud83d cut in half"}', "surrogate"),  # a client cut an emoji in two
        (b'{"q": "where", "filter": {"section": "\\udc00"}}', "surrogate"),
        (('{"q": "where", "filter": ' + deep + "}").encode(), "nested too deeply"),
        (b'{"q": "\xff"}', "not valid JSON"),
    ):
        resp = httpx.post(api.url + "/search", content=body, timeout=TIMEOUT)
        assert resp.status_code == 400, (body[:40], resp.text)
        assert message in resp.json()["error"]
    assert "nested too deeply" in get(api, "/search", q="where", filter=deep).json()["error"]
    missing = get(api, "/no/such/path")
    assert missing.status_code == 404 and missing.json() == {"error": "Not Found"}
    wrong = httpx.put(api.url + "/search", timeout=TIMEOUT)
    assert wrong.status_code == 405 and wrong.json() == {"error": "Method Not Allowed"}
    assert "GET" in wrong.headers["allow"]


def test_default_k_and_grouping_follow_the_settings(served_docs):
    # A default_top_k above what a server answers gets the server's limit, not an error for
    # every search that gives no k; group_by applies when a request names no group.
    with running(
        served_docs, "serve", HETRIEVER_DEFAULT_TOP_K="80", HETRIEVER_GROUP_BY="chunk"
    ) as served:
        answer = search(served, q="where function")
        posted = httpx.post(served.url + "/search", json={"q": "where function"}, timeout=TIMEOUT)
        log = served.log.read_text()
    assert (answer["k"], answer["group"]) == (50, "chunk")
    assert posted.status_code == 200 and posted.json()["group"] == "chunk"
    assert "default_top_k_capped" in log


def test_a_server_with_no_index_says_so_at_start(served_docs, tmp_path):
    with running(
        served_docs,
        "serve",
        HETRIEVER_CHROMA_PATH=str(tmp_path / "typo" / "chroma"),
        HETRIEVER_STATE_DIR=str(tmp_path / "typo" / "state"),
    ) as served:
        assert search(served, q="where")["results"] == []
        log = served.log.read_text()
    assert "nothing_indexed" in log and "hetriever ingest" in log


def test_health_readiness_openapi_and_metrics(api, served_docs):
    assert get(api, "/healthz").json() == {"status": "ok"}
    assert get(api, "/readyz").json() == {"status": "ready"}
    paths = get(api, "/openapi.json").json()["paths"]
    assert {"/search", "/pages/{ref}", "/repositories"} <= set(paths)
    body = paths["/search"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["q"] and {"q", "k", "filter"} <= set(body["properties"])
    assert "400" in paths["/search"]["get"]["responses"]
    assert get(api, "/docs").status_code == 200
    search(api, q="install sample on linux")
    text = get(api, "/metrics").text
    assert 'hetriever_request_seconds_count{endpoint="/search",status="200"}' in text
    # the searches this process served reach `hetriever metrics`, apart from CLI searches
    deadline = time.monotonic() + 30
    while True:
        out = served_docs.cli("metrics", "--source", "http", "--json")
        summary = json.loads(out.stdout)
        if summary["count"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert summary["count"] >= 1 and summary["p50_ms"] > 0
    assert set(summary["by_mode"]) <= {"http:hybrid", "http:dense", "http:bm25"}


def test_a_reindex_is_served_without_a_restart(api, served_docs):
    before = get(api, "/repositories").json()["repositories"][0]["indexed_commit"]
    assert search(api, q="quokka habitat survey")["results"][0]["title"] != "Quokka survey"
    write_files(
        served_docs.sample,
        {
            "content/docs/quokka.md": "---\ntitle: Quokka survey\n---\n\nThe quokka habitat "
            "survey runs every spring on the island.\n"
        },
    )
    commit = commit_all(served_docs.sample, "add quokka page")
    out = served_docs.cli("ingest", "--json")  # another process writes the index
    assert out.returncode == 0, out.stderr
    found = search(api, q="quokka habitat survey")["results"]
    assert found[0]["title"] == "Quokka survey"
    row = get(api, "/repositories").json()["repositories"][0]
    assert row["indexed_commit"] == commit != before and row["up_to_date"]
    # and a removed page disappears without a restart too
    git(served_docs.sample, "rm", "-q", "content/docs/quokka.md")
    commit_all(served_docs.sample, "remove quokka page")
    assert served_docs.cli("ingest", "--json").returncode == 0
    titles = [r["title"] for r in search(api, q="quokka habitat survey", k=10)["results"]]
    assert "Quokka survey" not in titles
    assert get(api, "/pages/sample-docs/content/docs/quokka.md").status_code == 404


def test_a_first_ingest_that_did_not_complete_is_not_served(api, served_docs):
    late = init_repo(served_docs.root / "docs" / "late-docs")
    write_files(
        late,
        {
            f"content/{name}.md": f"---\ntitle: Wombat {name}\n---\n\nThe wombat "
            f"burrow guide, part {name}.\n"
            for name in ("a", "b", "c")
        },
    )
    commit_all(late, "late docs")
    # one file per write, and the process dies (as if killed) before the second is written
    crashed = served_docs.cli(
        "ingest",
        "-r",
        "late-docs",
        "--json",
        HETRIEVER_WRITE_WINDOW="1",
        HETRIEVER_FAULTS="write_file:*/b.md:1:crash",
        HETRIEVER_FAULTS_STATE=str(served_docs.root / "faults"),
    )
    assert crashed.returncode != 0
    direct = served_docs.cli("search", "wombat burrow guide", "-r", "late-docs", "--json")
    assert json.loads(direct.stdout)["matches"]  # its first file is in Chroma ...
    # ... which the CLI searches, saying the results are partial
    assert "late-docs: its first ingest has not completed" in direct.stderr
    assert "first ingest has not completed" in json.loads(direct.stdout)["warnings"][0]
    assert "late-docs" not in repositories_of(search(api, q="wombat burrow guide", k=10))
    assert search(api, q="wombat burrow guide", repository="late-docs")["results"] == []
    assert "late-docs" not in {
        r["repository"] for r in get(api, "/repositories").json()["repositories"]
    }
    assert get(api, "/pages/late-docs/content/a.md").status_code == 404
    # the next complete run is served at once, without a restart
    assert served_docs.cli("ingest", "-r", "late-docs", "--json").returncode == 0
    found = search(api, q="wombat burrow guide", k=10, repository="late-docs")["results"]
    assert {r["title"] for r in found} == {"Wombat a", "Wombat b", "Wombat c"}


def test_docs_page_works_offline_from_the_apps_own_files(api):
    """Swagger UI's page names no other host: its script, stylesheet and icon are served here,
    and Swagger UI's online validator is off."""
    import re

    page = get(api, "/docs")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    html = page.text
    assert "http://" not in html and "https://" not in html and "//cdn" not in html
    refs = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
    assert refs and all(r.startswith("/") and not r.startswith("//") for r in refs), refs
    assert "validatorUrl" in html and "null" in html
    for ref in refs:
        asset = get(api, ref)
        assert asset.status_code == 200 and len(asset.content) > 100, ref
    assert "SwaggerUIBundle" in get(api, "/docs/assets/swagger-ui-bundle.js").text
    assert get(api, "/docs/assets/LICENSE").status_code == 200
    assert get(api, "/docs/assets/swagger-editor.js").status_code == 404  # only what /docs needs
    assert get(api, "/redoc").status_code == 404  # its script comes from a CDN: not served
    assert get(api, "/openapi.json").json()["info"]["title"] == "hetriever"


def test_the_warm_up_before_ready_is_not_counted_as_requests(served_docs):
    """`serve` sends searches through its own app before it listens: none is a caller's."""
    with running(served_docs, "serve") as served:
        text = get(served, "/metrics").text
        assert 'endpoint="/search"' not in text and "hetriever_search_results_total 0.0" in text
        search(served, q="where function")
        text = get(served, "/metrics").text
        assert 'hetriever_request_seconds_count{endpoint="/search",status="200"} 1.0' in text
