"""hetriever indexes exactly the pages Hugo publishes, checked against the Hugo binary.

Small sites built in tmp_path cover each publish rule (build options, cascades with targets,
headless bundles, drafts, future and expired dates, the site's settings, two languages); the
URLs hetriever would index must equal the pages Hugo renders (`tests/support/hugo_oracle.py`).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from tests.support.chroma_fixtures import store_settings
from tests.support.helpers import commit_all, init_repo, write_files
from tests.support.hugo_oracle import hetriever_pages, hugo_binary, hugo_list, hugo_pages
from tests.support.publish_site import CONFIG, FILES

pytestmark = pytest.mark.slow  # runs the Hugo binary


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
    for path in (
        "content/glossary/bundle.md",
        "content/opts/link.md",
        "content/hb/index.md",
        "content/blog/expired.md",
        "content/blog/future.md",
        "content/hidden/p.md",
    ):
        assert path not in hugo and path in ours.skipped
    assert ours.skipped["content/glossary/kind.md"] == (
        "not rendered: build.render is never (cascade from /glossary); its text is shown on "
        "/docs/glossary/"
    )
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
    files = {
        **FILES,
        "hugo.toml": CONFIG.replace(
            'title = "Rules"',
            'title = "Rules"\nbuildDrafts = true\nbuildFuture = true\n'
            'buildExpired = true\ntimeZone = "Asia/Tokyo"',
        ),
    }
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
