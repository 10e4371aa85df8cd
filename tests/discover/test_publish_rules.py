"""Hugo's publish rules (hetriever.discover.publish_rules) as plain functions: build options, cascades
and their targets, headless bundles, drafts, publish and expiry dates, the site's settings."""

from __future__ import annotations

import datetime as dt

import pytest

from hetriever.discover.publish_rules import (
    SiteRules,
    Target,
    cascade_entries,
    decide,
    glob_match,
    hugo_path,
    page_facts,
    parse_date,
    rules_from_json,
    rules_json,
    site_rules,
)

NOW = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC)


def facts(**front_matter):
    return page_facts(front_matter)


def verdict(page=None, ancestors=(), **kw):
    return decide(page or facts(), ancestors, **kw)


def test_a_plain_page_is_published():
    decision = verdict(facts(title="x"), path="/docs/x")
    assert decision.rendered and decision.published(NOW) and not decision.timed
    assert decision.reason(NOW) is None


@pytest.mark.parametrize(
    "build,reason",
    [
        ({"render": "never"}, "not rendered: build.render is never (page)"),
        ({"render": "link"}, "not rendered: build.render is link (a URL, but no page)"),
        ({"render": "always", "list": "never"}, None),  # rendered, only left out of lists
        ({"list": "local"}, None),
        ({"render": False}, "not rendered: build.render is never (page)"),  # older booleans
        ({"render": "sometimes"}, None),  # unknown values: Hugo's default
    ],
)
def test_build_options_of_the_page(build, reason):
    assert verdict(facts(build=build)).reason(NOW) == reason


def test_the_older_build_key_and_headless():
    assert verdict(facts(_build={"render": "never"})).reason(NOW).startswith("not rendered")
    assert verdict(facts(headless=True)).reason(NOW) == "headless bundle"
    assert verdict(facts(headless="false")).reason(NOW) is None


def test_a_render_link_page_with_a_redirect_is_a_redirect_stub():
    assert verdict(facts(build={"render": "link"}), redirect=True).reason(NOW) == "redirect stub"


def test_a_cascade_reaches_descendants_and_its_own_section():
    section = facts(cascade={"build": {"render": "never", "list": "local"}})
    term = verdict(facts(title="term"), [("/glossary", section)], path="/glossary/term")
    assert term.reason(NOW) == "not rendered: build.render is never (cascade from /glossary)"
    assert term.list == "local"
    # The section itself: its own cascade reaches it too, unless it sets the key itself.
    assert not verdict(section, path="/glossary", kind="section").rendered
    glossary = facts(build={"render": "always"}, cascade={"build": {"render": "never"}})
    assert verdict(glossary, path="/glossary", kind="section").rendered


def test_front_matter_merges_by_top_level_key():
    section = facts(cascade={"build": {"render": "never"}})
    own = verdict(facts(build={"list": "always"}), [("/g", section)], path="/g/t")
    assert own.rendered and own.render == "always"


def test_the_nearest_cascade_wins_and_the_site_cascade_comes_last():
    outer = facts(cascade={"build": {"render": "never"}})
    inner = facts(cascade={"build": {"render": "always"}})
    assert verdict(ancestors=[("/a/b", inner), ("/a", outer)], path="/a/b/p").rendered
    assert not verdict(ancestors=[("/a", outer)], path="/a/p").rendered
    site = SiteRules(cascade=cascade_entries({"build": {"render": "never"}}))
    assert not verdict(path="/p", site=site).rendered
    assert verdict(ancestors=[("/a/b", inner)], path="/a/b/p", site=site).rendered


def test_cascade_targets_by_path_kind_lang_and_environment():
    section = facts(
        cascade=[
            {"build": {"render": "never"}, "target": {"path": "{/t/x/**,/t/z}", "kind": "page"}},
            {"headless": True, "_target": {"kind": "section"}},
            {"draft": True, "target": {"lang": "fr"}},
            {"expiryDate": "2000-01-01", "target": {"environment": "development"}},
            {"build": {"render": "link"}, "target": {"sites": {"matrix": {"languages": ["d*"]}}}},
        ]
    )
    at = [("/t", section)]
    assert not verdict(ancestors=at, path="/t/x/p").rendered
    assert verdict(ancestors=at, path="/t/x/p", kind="section").headless
    assert verdict(ancestors=at, path="/t/y/p").rendered
    assert verdict(ancestors=at, path="/t/z").reason(NOW).startswith("not rendered")
    assert verdict(ancestors=at, path="/t/p", lang="fr").reason(NOW) == "draft"
    assert verdict(ancestors=at, path="/t/p").expire_at is None  # production, not development
    assert verdict(ancestors=at, path="/t/p", lang="de").render == "link"


def test_globs_as_hugo_matches_them():
    assert glob_match("/docs/*", "/docs/x") and not glob_match("/docs/*", "/docs/x/y")
    assert glob_match("/docs/**", "/docs/x/y") and not glob_match("/docs/**", "/docs")
    assert glob_match("/{a,b}/?", "/b/c") and glob_match("/[ab]*", "/Apple")
    assert glob_match("/[!a]*", "/b") and not glob_match("/[!a]*", "/a")
    assert not glob_match("/[", "/x")  # malformed: matches nothing, raises nothing
    assert Target(path="/docs/**", kind="page").matches("/docs/a", "page", "en")
    assert not Target(path="/docs/**", kind="page").matches("/docs/a", "section", "en")


def test_drafts_and_the_site_setting():
    assert verdict(facts(draft=True)).reason(NOW) == "draft"
    assert verdict(facts(draft="true")).reason(NOW) == "draft"
    assert verdict(facts(draft=True), site=SiteRules(build_drafts=True)).reason(NOW) is None


def test_a_draft_section_keeps_its_pages():
    assert verdict(ancestors=[("/docs", facts(draft=True))], path="/docs/a").published(NOW)


def test_future_and_expired_pages():
    future = verdict(facts(date=dt.date(2099, 1, 1)))
    assert future.reason(NOW) == "future: publishDate 2099-01-01T00:00:00+00:00"
    assert future.timed and future.published(dt.datetime(2099, 1, 1, tzinfo=dt.UTC))
    expired = verdict(facts(expiryDate="2026-11-18"))
    assert expired.reason(NOW) == "expired: expiryDate 2026-11-18T00:00:00+00:00"
    assert expired.published(dt.datetime(2026, 11, 17, tzinfo=dt.UTC))
    # publishDate wins over date; pubDate and published are its aliases, unpublishDate
    # expiryDate's
    assert (
        verdict(facts(publishDate="2099-01-01", date="2000-01-01")).reason(NOW).startswith("future")
    )
    assert verdict(facts(publishDate="2000-01-01", date="2099-01-01")).reason(NOW) is None
    assert verdict(facts(pubdate="2099-01-01")).reason(NOW).startswith("future")
    assert verdict(facts(unpublishdate="2001-01-01")).reason(NOW).startswith("expired")


def test_the_site_may_build_future_and_expired_pages():
    site = SiteRules(build_future=True, build_expired=True)
    decision = verdict(facts(date="2099-01-01", expiryDate="2001-01-01"), site=site)
    assert decision.published(NOW) and not decision.timed


def test_dates_of_a_section_do_not_reach_its_pages():
    assert verdict(ancestors=[("/b", facts(date="2099-01-01"))], path="/b/p").published(NOW)
    # ... unless it cascades them
    cascaded = facts(cascade={"expiryDate": "2001-01-01"})
    assert verdict(ancestors=[("/b", cascaded)], path="/b/p").reason(NOW).startswith("expired")


def test_a_page_that_is_not_rendered_has_no_window():
    assert not verdict(facts(draft=True, expiryDate="2099-01-01")).timed
    assert not verdict(facts(build={"render": "never"}, date="2099-01-01")).timed


def test_dates_in_every_form():
    utc = dt.UTC
    assert parse_date("2024-10-19T00:32:13-07:00") == dt.datetime(
        2024, 10, 19, 7, 32, 13, tzinfo=utc
    )
    assert parse_date("2024-10-19T00:32:13Z") == dt.datetime(2024, 10, 19, 0, 32, 13, tzinfo=utc)
    assert parse_date("2024-10-19 08:00") == dt.datetime(2024, 10, 19, 8, tzinfo=utc)
    assert parse_date(dt.date(2024, 1, 2)) == dt.datetime(2024, 1, 2, tzinfo=utc)
    assert parse_date("2024-01-02", "Asia/Tokyo") == dt.datetime(2024, 1, 1, 15, tzinfo=utc)
    assert parse_date("2024-01-02", "Not/AZone") == dt.datetime(2024, 1, 2, tzinfo=utc)
    for nothing in ("", "soon", None, 3, "0001-01-01T00:00:00Z"):
        assert parse_date(nothing) is None


def test_the_site_configuration():
    config = {
        "buildfuture": True,
        "builddrafts": False,
        "timezone": "Europe/Paris",
        "frontmatter": {
            "publishdate": ["released", ":default"],
            "expirydate": [":filename", "gone"],
        },
        "cascade": [
            {"build": {"render": "never"}, "target": {"path": "/x/**"}},
            {"title": "not a publish key"},
        ],
    }
    rules = site_rules(config)
    assert rules.build_future and not rules.build_drafts and rules.time_zone == "Europe/Paris"
    assert rules.publish_keys == ("released", "publishdate", "pubdate", "published", "date")
    assert rules.expiry_keys == ("gone",)
    assert len(rules.cascade) == 1
    assert rules_from_json(rules_json(rules)) == rules
    assert rules_from_json("") == SiteRules() == site_rules({})
    custom = SiteRules(expiry_keys=("gone",))
    assert custom.extra_keys == ("gone",)
    gone = page_facts({"gone": "2001-01-01"}, custom.extra_keys)
    assert verdict(gone, site=custom).reason(NOW).startswith("expired")
    assert verdict(facts(expiryDate="2001-01-01"), site=custom).reason(NOW) is None


def test_hugo_paths_and_kinds():
    assert hugo_path("_index.md") == ("/", "home")
    assert hugo_path("Docs/_index.md") == ("/docs", "section")
    assert hugo_path("docs/X.md") == ("/docs/x", "page")
    assert hugo_path("docs/b/index.md") == ("/docs/b", "page")
    assert hugo_path("index.md") == ("/index", "page")


def test_facts_keep_only_publish_keys_and_cascades_that_set_them():
    page = page_facts(
        {
            "Title": "x",
            "Draft": True,
            "ExpiryDate": dt.date(2026, 1, 2),
            "cascade": [
                {"params": {"a": 1}},
                "junk",
                {"build": {"Render": "never"}, "_target": "bad"},
            ],
        }
    )
    assert page.values == (("draft", True), ("expirydate", "2026-01-02"))
    assert len(page.cascade) == 1 and page.cascade[0].target == Target()
    assert page.cascade[0].values == (("build", {"render": "never"}),)


def test_the_site_configuration_carries_the_publish_settings():
    from tests.support.helpers import site_of

    plain = site_of({"hugo.toml": 'baseURL = "https://example.org/"\n'})
    assert plain.publish == "" and plain.rules == SiteRules()
    config = (
        'baseURL = "https://example.org/"\nbuildFuture = true\ntimeZone = "Asia/Tokyo"\n'
        '[frontmatter]\nexpiryDate = ["gone"]\n'
        '[[cascade]]\n[cascade.build]\nrender = "never"\n[cascade.target]\npath = "/x/**"\n'
    )
    site = site_of({"hugo.toml": config})
    assert site.rules.build_future and site.rules.time_zone == "Asia/Tokyo"
    assert site.rules.expiry_keys == ("gone",) and len(site.rules.cascade) == 1
    # what decides publishing is part of the site's signature: a change is a full pass
    assert site.signature() != site_of({"hugo.toml": config.replace("true", "false")}).signature()
    # ... and a site without such settings keeps the signature it had before they were read
    # (no full pass on upgrade for it)
    import dataclasses
    import hashlib
    import json

    before = {k: v for k, v in dataclasses.asdict(plain).items() if k not in ("notes", "publish")}
    text = json.dumps(before, sort_keys=True, default=sorted)
    assert plain.signature() == hashlib.sha256(text.encode()).hexdigest()[:16]
