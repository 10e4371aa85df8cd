"""The search page's version picker, as a reader uses it: a real headless Chromium against a
real `hetriever serve` over an index holding a repository's tree and its version `v1.0.0`
(`tests.support.versions`)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from hetriever.core.versions import version_name
from hetriever.serve.keys import hash_key
from tests.support.browser_fixtures import WAIT, chromium
from tests.support.serve_fixtures import TEAM_KEY, running
from tests.support.versions import BASE, LABEL

pytestmark = pytest.mark.slow  # a real `hetriever serve` process and a real browser

QUERY = "install the package"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield driver
    driver.quit()


def wait(driver: Any, condition: Any, what: str) -> Any:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(
        driver, WAIT, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)
    ).until(condition, message=what)


def css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def open_page(browser: Any, address: str) -> None:
    browser.get(address)
    browser.execute_script("sessionStorage.clear()")
    browser.refresh()
    wait(browser, lambda d: css(d, "input[type=search]"), "no search box")


def choices(browser: Any) -> list[tuple[str, str]]:
    """The version picker's (value, text) pairs once it is shown; [] while it is hidden."""
    row = css(browser, ".htr-version-row")
    if not row or not row[0].is_displayed():
        return []
    return [(o.get_attribute("value"), o.text) for o in css(browser, ".htr-version-pick option")]


def first_result_with(browser: Any, word: str) -> Any:
    """The first result once the answer shown is one whose first passage has `word`."""

    def shown(d: Any) -> Any:
        root = css(d, ".htr[data-state=results]")
        found = css(d, ".htr-result")
        if not root or root[0].get_attribute("aria-busy") or not found:
            return None
        first = found[0]
        return first if word in first.find_element("css selector", ".htr-passage").text else None

    return wait(browser, shown, f"no first result with {word!r}")


def test_picking_an_older_version_searches_it_and_the_address_keeps_it(browser, versioned_api):
    from selenium.webdriver.support.ui import Select

    open_page(browser, versioned_api.url + "/")
    assert wait(browser, choices, "no version picker") == [("", "current"), (LABEL, LABEL)]
    box = css(browser, "input[type=search]")[0]
    box.send_keys(QUERY)
    current = first_result_with(browser, "wombat")
    assert not current.find_elements("css selector", ".htr-version")  # the tree: no label

    Select(css(browser, ".htr-version-pick")[0]).select_by_value(LABEL)
    older = first_result_with(browser, "quokka")
    assert older.find_element("css selector", ".htr-version").text == LABEL
    assert "version=v1.0.0" in browser.current_url

    browser.get(browser.current_url)  # a linked search opens in the version it names
    again = first_result_with(browser, "quokka")
    assert again.find_element("css selector", ".htr-version").text == LABEL
    assert css(browser, ".htr-version-pick")[0].get_attribute("value") == LABEL

    Select(css(browser, ".htr-version-pick")[0]).select_by_value("")
    first_result_with(browser, "wombat")
    assert "version=" not in browser.current_url


def test_the_picker_lists_only_the_versions_the_key_may_see(browser, versioned, tmp_path):
    """The repository TEAM-only: without a key its version is neither listed nor offered;
    with the team's key, entered on the page, it is."""
    keys = tmp_path / "api-keys"
    keys.write_text(f"team {hash_key(TEAM_KEY)} TEAM\n", encoding="utf-8")
    with running(
        versioned,
        "serve",
        HETRIEVER_ACCESS_LEVELS=f"{BASE}=TEAM",
        HETRIEVER_API_KEYS_FILE=str(keys),
    ) as served:
        rows = httpx.get(served.url + "/repositories", timeout=60).json()["repositories"]
        assert rows == []
        team = httpx.get(
            served.url + "/repositories", headers={"X-API-Key": TEAM_KEY}, timeout=60
        ).json()["repositories"]
        assert {(r["repository"], r["version"], r["version_of"]) for r in team} == {
            (BASE, "", ""),
            (version_name(BASE, LABEL), LABEL, BASE),
        }
        open_page(browser, served.url + "/")
        css(browser, "input[type=search]")[0].send_keys(QUERY)
        wait(browser, lambda d: css(d, ".htr[data-state=empty]"), "no empty answer")
        assert choices(browser) == []
        css(browser, ".htr-key summary")[0].click()
        css(browser, ".htr-key-input")[0].send_keys(TEAM_KEY)
        css(browser, ".htr-key .htr-button")[0].click()
        assert wait(browser, choices, "no version picker with the key") == [
            ("", "current"),
            (LABEL, LABEL),
        ]
        first_result_with(browser, "wombat")


WIDGET_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>Docs of v1</title></head><body>
<div data-hetriever-search="{api}" data-version="{label}"></div>
<script src="{api}/widget.js" defer></script></body></html>"""


def test_a_docs_site_built_for_a_version_searches_it_in_the_widget(browser, versioned, tmp_path):
    """The widget on a docs site that names its version (`data-version`, the Hugo partial's
    `params.hetriever.version`) searches that version, and its picker offers the others."""
    from selenium.webdriver.support.ui import Select

    from tests.support.browser_fixtures import static_site
    from tests.support.chroma_fixtures import free_port

    site_port = free_port()
    with running(
        versioned, "serve", HETRIEVER_CORS_ORIGINS=f"http://127.0.0.1:{site_port}"
    ) as served:
        (tmp_path / "index.html").write_text(
            WIDGET_PAGE.format(api=served.url, label=LABEL), encoding="utf-8"
        )
        with static_site(tmp_path, site_port) as site:
            browser.get(site + "/")
            wait(browser, lambda d: css(d, ".htr-open"), "no widget button")[0].click()
            wait(browser, lambda d: css(d, "dialog[open] input[type=search]"), "no dialog")
            browser.switch_to.active_element.send_keys(QUERY)
            older = first_result_with(browser, "quokka")
            assert older.find_element("css selector", ".htr-version").text == LABEL
            assert wait(browser, choices, "no version picker") == [
                ("", "current"),
                (LABEL, LABEL),
            ]
            assert css(browser, ".htr-version-pick")[0].get_attribute("value") == LABEL
            Select(css(browser, ".htr-version-pick")[0]).select_by_value("")
            first_result_with(browser, "wombat")
