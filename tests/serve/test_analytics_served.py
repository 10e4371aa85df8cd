"""Search analytics through a real `hetriever serve` over a real small index (tests/support/serve_fixtures.py):
a search that finds nothing is listed by `hetriever analytics` and `/stats`, an open sent as
the page sends it shows up as opened, purge empties it, and with analytics off nothing is
written."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from hetriever.search.analytics import ANALYTICS_FILE
from tests.support.serve_fixtures import HETRIEVER, PRIVATE_KEY, TEAM_KEY, running

pytestmark = pytest.mark.slow  # a real `hetriever serve` process

TIMEOUT = 60
HOSTILE = "<script>alert('x')</script> [/name] kestrel"
NOTHING = json.dumps({"section": "no-such-section"})  # a filter no page matches
ON = {"HETRIEVER_ANALYTICS": "true", "HETRIEVER_ANALYTICS_RETENTION_DAYS": "7"}


def analytics_file(workspace):
    return workspace.root / "state" / ANALYTICS_FILE


def report(workspace, *args, on=True):
    out = workspace.cli("analytics", "--json", *args, **(ON if on else {}))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def eventually(check, timeout=20.0):
    """`check()`'s value once it is truthy (the server writes rows from a background thread)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def test_with_analytics_off_nothing_is_written(served_docs):
    analytics_file(served_docs).unlink(missing_ok=True)
    with running(served_docs, "serve") as api:
        answer = httpx.get(
            api.url + "/search", params={"q": "where function"}, timeout=TIMEOUT
        ).json()
        assert answer["results"] and "query_id" not in answer
        opened = httpx.post(
            api.url + "/analytics/open",
            timeout=TIMEOUT,
            json={"query_id": "x", "rank": 1, "url": "/docs/"},
        )
        assert opened.status_code == 404 and "off" in opened.json()["error"]
        page = httpx.get(api.url + "/stats", headers={"X-API-Key": PRIVATE_KEY}, timeout=TIMEOUT)
        assert page.status_code == 200 and 'id="analytics-off"' in page.text
    assert served_docs.cli("search", "where function").returncode == 0
    off = report(served_docs, on=False)
    assert off["queries"] == 0 and off["enabled"] is False
    assert not analytics_file(served_docs).exists()


@pytest.fixture(scope="module")
def api(served_docs):
    assert served_docs.cli("analytics", "--purge").returncode == 0
    with running(served_docs, "serve", **ON) as served:
        yield served


def test_a_search_that_finds_nothing_is_listed_and_an_open_is_recorded(served_docs, api):
    empty = httpx.get(
        api.url + "/search", params={"q": HOSTILE, "filter": NOTHING}, timeout=TIMEOUT
    ).json()
    assert empty["results"] == [] and isinstance(empty["query_id"], str)
    found = httpx.post(
        api.url + "/search", json={"q": "where function comparison"}, timeout=TIMEOUT
    ).json()
    top = found["results"][0]
    # as the page's sendBeacon sends it: a string body, so text/plain
    beacon = httpx.post(
        api.url + "/analytics/open",
        timeout=TIMEOUT,
        content=json.dumps({"query_id": found["query_id"], "rank": 1, "url": top["url"]}),
        headers={"Content-Type": "text/plain;charset=UTF-8"},
    )
    assert beacon.status_code == 204, beacon.text

    listed = eventually(lambda: (r := report(served_docs, "--days", "1"))["opens"] and r)
    assert [(q["query"], q["scope"]) for q in listed["no_result"]] == [(HOSTILE, ["all"])]
    assert listed["opens"] == [
        {"query": "where function comparison", "rank": 1, "url": top["url"], "count": 1}
    ]
    assert listed["opened"] == 1 and listed["retention_days"] == 7
    assert {(r["source"], r["temperature"]) for r in listed["latency"]} == {("http", "warm")}

    text = served_docs.cli("analytics", **ON).stdout  # tables print the query as written
    assert HOSTILE in text and "found nothing" in text and "results readers opened" in text

    page = httpx.get(
        api.url + "/stats", headers={"Authorization": f"Bearer {PRIVATE_KEY}"}, timeout=TIMEOUT
    )
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert '<svg class="chart" id="chart-per-day"' in html
    assert 'id="chart-no-result"' in html and 'id="chart-latency-warm"' in html
    assert "<script>" not in html and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "where function comparison" in html.split('id="opens"')[1]
    assert "script-src" not in page.headers["content-security-policy"]


def test_stats_charts_render_in_a_browser_and_the_hostile_query_stays_text(
    served_docs, api, tmp_path
):
    """/stats in a real headless Chromium: every chart is drawn with visible bars, the hostile
    query is shown as its own text, and nothing on the page runs a script."""
    from tests.support.browser_fixtures import chromium

    httpx.get(api.url + "/search", params={"q": HOSTILE, "filter": NOTHING}, timeout=TIMEOUT)
    eventually(lambda: report(served_docs)["no_result"])
    driver = chromium(tmp_path / "profile")
    try:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd(
            "Network.setExtraHTTPHeaders", {"headers": {"X-API-Key": PRIVATE_KEY}}
        )
        driver.get(api.url + "/stats")
        charts = driver.execute_script("""
            return Array.from(document.querySelectorAll('svg.chart')).map(svg => {
              const box = svg.getBoundingClientRect();
              const bars = Array.from(svg.querySelectorAll('rect.bar'))
                .filter(r => r.getBoundingClientRect().width > 0
                             && r.getBoundingClientRect().height > 0);
              return [svg.id, box.width, box.height, bars.length];
            });""")
        drawn = {name: (w, h, bars) for name, w, h, bars in charts}
        assert {
            "chart-per-day",
            "chart-top-queries",
            "chart-no-result",
            "chart-latency-warm",
        } <= set(drawn), drawn
        for name in ("chart-per-day", "chart-top-queries", "chart-no-result", "chart-latency-warm"):
            width, height, bars = drawn[name]
            assert width > 50 and height > 20 and bars >= 1, (name, drawn[name])
        shown = driver.execute_script("return document.body.innerText")
        assert HOSTILE in shown  # the query as typed, as text
        assert driver.execute_script("return document.querySelectorAll('script').length") == 0
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        driver.set_window_size(1200, 1600)
        driver.save_screenshot(str(tmp_path / "stats.png"))
        assert (tmp_path / "stats.png").stat().st_size > 10_000
    finally:
        driver.quit()


def test_opens_are_validated_and_capped(api):
    found = httpx.get(api.url + "/search", params={"q": "where", "k": 2}, timeout=TIMEOUT).json()
    query_id, url = found["query_id"], found["results"][0]["url"]

    def send(body, kind="application/json"):
        return httpx.post(
            api.url + "/analytics/open",
            timeout=TIMEOUT,
            content=body if isinstance(body, (bytes, str)) else json.dumps(body),
            headers={"Content-Type": kind},
        )

    assert send({"query_id": query_id, "rank": 1, "url": url}).status_code == 204
    assert send({"query_id": query_id, "rank": 1, "url": url}).status_code == 204  # idempotent
    assert send({"query_id": "guessed-id-0001", "rank": 1, "url": url}).status_code == 404
    assert send({"query_id": query_id, "rank": 9, "url": url}).status_code == 400
    assert send({"query_id": query_id, "rank": 1, "url": "/elsewhere/"}).status_code == 400
    assert send({"query_id": query_id, "rank": 1}).status_code == 400
    assert send("not json", "text/plain").status_code == 400
    assert send({"query_id": query_id, "rank": 1, "url": url}, "application/xml").status_code == 415
    too_big = send({"query_id": query_id, "rank": 1, "url": url, "pad": "x" * 4000})
    assert too_big.status_code == 413


def test_a_locked_analytics_file_fails_no_search(served_docs, api):
    import sqlite3

    eventually(lambda: analytics_file(served_docs).exists())
    holder = sqlite3.connect(analytics_file(served_docs), timeout=0)
    holder.execute("BEGIN EXCLUSIVE")  # another process holds the file
    try:
        for _ in range(3):
            answer = httpx.get(api.url + "/search", params={"q": "while locked"}, timeout=TIMEOUT)
            assert answer.status_code == 200 and answer.json()["query_id"]
        cli = served_docs.cli("search", "while locked", **ON)
        assert cli.returncode == 0 and "results" in cli.stdout
    finally:
        holder.rollback()
        holder.close()
    assert httpx.get(api.url + "/healthz", timeout=TIMEOUT).status_code == 200


def test_stats_needs_a_private_key_when_keys_are_configured(api):
    assert httpx.get(api.url + "/stats", timeout=TIMEOUT).status_code == 401
    team = httpx.get(api.url + "/stats", headers={"X-API-Key": TEAM_KEY}, timeout=TIMEOUT)
    assert team.status_code == 403 and "PRIVATE" in team.json()["error"]
    bad = httpx.get(api.url + "/stats", headers={"X-API-Key": "htr_wrong"}, timeout=TIMEOUT)
    assert bad.status_code == 401
    private = {"X-API-Key": PRIVATE_KEY}
    assert (
        httpx.get(
            api.url + "/stats", params={"days": "0"}, headers=private, timeout=TIMEOUT
        ).status_code
        == 400
    )
    week = httpx.get(api.url + "/stats", params={"days": "7"}, headers=private, timeout=TIMEOUT)
    assert week.status_code == 200 and "over the last 7 days" in week.text


def test_an_mcp_search_is_recorded(served_docs, api):
    import anyio
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters

    server = StdioServerParameters(
        command=str(HETRIEVER),
        args=["mcp"],
        env={**served_docs.env, **ON},
        cwd=str(served_docs.root),
    )

    async def go():
        with anyio.fail_after(240):
            async with Client(server) as client:
                return await client.call_tool("search_docs", {"query": "mcp asks: where"})

    assert not anyio.run(go).is_error
    listed = report(served_docs)  # the stdio server closed: its rows are written
    (asked,) = [q for q in listed["top_queries"] if q["query"] == "mcp asks: where"]
    assert asked["count"] == 1 and asked["no_result"] == 0
    assert ("mcp", "warm") in {(r["source"], r["temperature"]) for r in listed["latency"]}


def test_a_cli_search_is_recorded_cold_and_purge_empties_it(served_docs, api):
    assert served_docs.cli("search", "kestrel on-call", **ON).returncode == 0
    rows = report(served_docs)["latency"]
    assert ("cli", "cold") in {(r["source"], r["temperature"]) for r in rows}
    purged = json.loads(served_docs.cli("analytics", "--purge", "--json").stdout)
    assert purged["purged"] >= 1
    after = report(served_docs)
    assert after["queries"] == 0 and after["opens"] == [] and after["no_result"] == []
    page = httpx.get(api.url + "/stats", headers={"X-API-Key": PRIVATE_KEY}, timeout=TIMEOUT)
    assert 'id="summary">0 queries' in page.text


def test_a_bad_window_is_one_clear_line(served_docs):
    for days in ("0", "abc", "inf"):
        out = served_docs.cli("analytics", "--days", days)
        assert out.returncode == 2 and "--days" in out.stderr and "Traceback" not in out.stderr
