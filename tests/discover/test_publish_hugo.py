"""hetriever indexes exactly the pages Hugo publishes, checked against the Hugo binary.

Small sites built in tmp_path cover each publish rule (build options, cascades with targets,
headless bundles, drafts, future and expired dates, the site's settings, two languages); the
URLs hetriever would index must equal the pages Hugo renders (`tests/hugo_oracle.py`).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from tests.chroma_fixtures import store_settings
from tests.helpers import commit_all, init_repo, write_files
from tests.hugo_oracle import hetriever_pages, hugo_binary, hugo_list, hugo_pages

pytestmark = pytest.mark.slow  # runs the Hugo binary


def page(title: str, front: str = "", body: str = "Some text about it.") -> str:
    return f"---\ntitle: {title}\n{front}---\n\n{body}\n"


CONFIG = """
baseURL = "https://example.org/docs/"
title = "Rules"
defaultContentLanguage = "en"
[languages.en]
weight = 1
[languages.fr]
weight = 2

[[cascade]]
[cascade.build]
render = "never"
list = "never"
[cascade.target]
path = "/hidden/**"
"""

FILES = {
    "hugo.toml": CONFIG,
    "content/_index.md": page("Home"),
    "content/_index.fr.md": page("Accueil"),
    # build options of the page itself
    "content/opts/_index.md": page("Options"),
    "content/opts/always.md": page("Always", "build:\n  render: always\n"),
    "content/opts/never.md": page("Never", "build:\n  render: never\n  list: always\n"),
    "content/opts/link.md": page("Link", "build:\n  render: link\n"),
    "content/opts/unlisted.md": page("Unlisted", "build:\n  list: never\n"),
    "content/opts/local.md": page("Local", "build:\n  list: local\n"),
    # a glossary: terms never rendered, shown on their section's page
    "content/glossary/_index.md": page(
        "Glossary", "build:\n  render: always\ncascade:\n  build:\n    render: never\n"
        "    list: local\n", "{{% glossary %}}"),
    "content/glossary/bundle.md": page("bundle", body="A directory of files."),
    "content/glossary/kind.md": page("kind", body="What sort of page it is."),
    "content/glossary/own.md": page("own", "build:\n  list: always\n", body="Rendered."),
    # a translation: the (English) section's untargeted cascade does not reach it
    "content/glossary/kind.fr.md": page("genre", body="Quelle sorte de page."),
    # cascades: nearest ancestor wins, list form, targets by path, kind and language
    "content/a/_index.md": page("A", "cascade:\n  build:\n    render: never\n"),
    "content/a/p.md": page("A page"),
    "content/a/b/_index.md": page("B", "cascade:\n  build:\n    render: always\n"),
    "content/a/b/p.md": page("B page"),
    "content/a/b/c/p.md": page("C page"),
    "content/t/_index.md": page("T", "cascade:\n"
                                "  - build:\n      render: never\n"
                                "    target:\n      path: '{/t/x/**,/t/z}'\n      kind: page\n"
                                "  - headless: true\n    _target:\n      kind: section\n"
                                "      path: /t/y\n"
                                "  - draft: true\n    target:\n      sites:\n        matrix:\n"
                                "          languages: [fr]\n"),
    "content/t/p.md": page("T page"),
    "content/t/p.fr.md": page("Page T"),
    "content/t/u.fr.md": page("Page U"),
    "content/t/_index.fr.md": page("T fr"),
    "content/a/q.fr.md": page("Page Q"),
    "content/t/z.md": page("Z"),
    "content/t/x/_index.md": page("X"),
    "content/t/x/p.md": page("X page"),
    "content/t/y/_index.md": page("Y"),
    "content/t/y/p.md": page("Y page"),
    "content/hidden/p.md": page("Hidden"),
    # headless bundles, drafts (a draft section keeps its pages)
    "content/hb/index.md": page("Headless", "headless: true\n"),
    "content/hs/_index.md": page("Headless section", "headless: true\n"),
    "content/hs/p.md": page("In a headless section"),
    "content/drafts/_index.md": page("Drafts", "draft: true\n"),
    "content/drafts/p.md": page("Published under a draft"),
    "content/drafts/d.md": page("A draft", "draft: true\n"),
    # dates
    "content/blog/_index.md": page("Blog"),
    "content/blog/future.md": page("Future", "date: 2099-01-01\n"),
    "content/blog/later.md": page("Later", "publishDate: 2099-01-01\ndate: 2000-01-01\n"),
    "content/blog/past.md": page("Past", "publishDate: 2000-01-01\ndate: 2099-01-01\n"),
    "content/blog/expired.md": page("Expired", "expiryDate: 2020-01-01\n"),
    "content/blog/expires.md": page("Expires", "expiryDate: 2099-01-01T10:00:00Z\n"),
    "content/blog/old.md": page("Old", "unpublishdate: 2001-01-01\n"),
    "content/fsec/_index.md": page("Future section", "date: 2099-01-01\n"),
    "content/fsec/p.md": page("Under a future section"),
    "content/fsec/bundle/index.md": page("A bundle"),
    "content/fr-only/p.fr.md": page("Seulement"),
}


def build(tmp_path: Path, files: dict[str, str]) -> Path:
    site = init_repo(tmp_path / "site")
    write_files(site, files)
    commit_all(site, "site")
    return site


def compare(tmp_path: Path, files: dict[str, str]):
    hugo_binary()
    site = build(tmp_path, files)
    hugo = hugo_pages(site, tmp_path / "hugo")
    ours = hetriever_pages(site, store_settings(tmp_path))
    return hugo, ours


def test_hetriever_indexes_what_hugo_renders(tmp_path: Path):
    hugo, ours = compare(tmp_path, FILES)
    assert ours.pages == hugo
    # spot checks that the fixture covers what it means to
    assert hugo["content/a/b/c/p.md"] == "/docs/a/b/c/p/"
    # An untargeted cascade reaches its own language only; one that names a language
    # reaches that language's pages from the default's section page.
    assert hugo["content/a/q.fr.md"] == "/docs/fr/a/q/"
    assert ours.skipped["content/t/p.fr.md"] == ours.skipped["content/t/u.fr.md"] == "draft"
    for path in ("content/glossary/bundle.md", "content/opts/link.md", "content/hb/index.md",
                 "content/blog/expired.md", "content/blog/future.md", "content/hidden/p.md"):
        assert path not in hugo and path in ours.skipped
    assert ours.skipped["content/glossary/kind.md"] == (
        "not rendered: build.render is never (cascade from /glossary); its text is shown on "
        "/docs/glossary/")
    assert ours.skipped["content/blog/expired.md"].startswith("expired: expiryDate 2020-01-01")
    assert ours.skipped["content/blog/later.md"].startswith("future: publishDate 2099-01-01")


def test_the_glossary_page_carries_its_terms(tmp_path: Path):
    _, ours = compare(tmp_path, FILES)
    text = ours.texts["content/glossary/_index.md"]
    assert "bundle" in text and "A directory of files." in text
    assert text.index("A directory of files.") < text.index("What sort of page it is.")
    assert "Rendered." in text  # its own page too, as Hugo's shortcode lists it
    assert "Quelle sorte" not in text and "content/glossary/kind.fr.md" in ours.pages


def test_hugo_list_published_differs_only_where_it_lists_pages_it_does_not_render(tmp_path):
    """`hugo list published` is a listing, not the rendered site: it shows `render: link`
    pages (a URL with nothing at it) and `render: never, list: always` ones (no URL), and
    leaves out `list: never` and `list: local` pages, which are rendered."""
    hugo, ours = compare(tmp_path, FILES)
    listed = hugo_list(tmp_path / "site", tmp_path / "hugo", "published")
    urls = {path: row["permalink"] for path, row in listed.items()}
    extra = set(urls) - set(hugo)
    assert extra and all(ours.skipped[p].startswith("not rendered") for p in extra)
    assert {p for p in extra if urls[p]} == {"content/opts/link.md"}  # the rest have no URL
    assert set(hugo) - set(urls) == {"content/opts/unlisted.md", "content/opts/local.md"}


def test_the_site_may_build_drafts_future_and_expired_pages(tmp_path: Path):
    files = {**FILES, "hugo.toml": CONFIG.replace(
        'title = "Rules"', 'title = "Rules"\nbuildDrafts = true\nbuildFuture = true\n'
        'buildExpired = true\ntimeZone = "Asia/Tokyo"')}
    hugo, ours = compare(tmp_path, files)
    assert "content/blog/expired.md" in hugo and "content/drafts/d.md" in hugo
    assert ours.pages == hugo


@pytest.mark.parametrize("clock", ["2099-01-01T09:00:00Z", "2099-06-01T00:00:00Z"])
def test_at_another_time_both_agree(tmp_path: Path, clock: str):
    """The same files judged at another time (Hugo's `--clock`, hetriever's run clock): what
    has expired by then is gone, what is due by then is there."""
    hugo_binary()
    site = build(tmp_path, FILES)
    now = dt.datetime.fromisoformat(clock.replace("Z", "+00:00"))
    later = hetriever_pages(site, store_settings(tmp_path), now=now)
    assert later.pages == hugo_pages(site, tmp_path / "hugo", clock=clock)
    assert "content/blog/future.md" in later.pages and "content/blog/later.md" in later.pages
    expires = "content/blog/expires.md"
    assert (expires in later.pages) == (now.month == 1)  # it expires 2099-01-01 10:00
