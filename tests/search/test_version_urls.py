"""Where a version's pages are published: its repository's address unless it has its own."""

from __future__ import annotations

from hetriever.core.versions import VersionOf
from hetriever.search.published import recorded_base_urls
from hetriever.store.catalog import Catalog


def test_a_version_is_published_where_its_repository_is_unless_it_has_its_own(tmp_path):
    catalog = Catalog.for_state_dir(tmp_path)
    old, older = VersionOf("docs-site", "v1.0", "v1.0"), VersionOf("docs-site", "v0.9", "v0.9")
    catalog.upsert_repository("docs-site", settings={"base_urls": {"": "/"}})
    for version in (old, older):
        catalog.upsert_repository(
            version.name, settings={"base_urls": {"": "/"}, **version.to_settings()}
        )
    catalog.upsert_repository("other-site", settings={"base_urls": {"": "/"}})
    site_urls = {"docs-site": "https://docs.example.org/", older.name: "https://v0-9.example.org/"}

    assert recorded_base_urls(catalog, old.name, site_urls)[""] == "https://docs.example.org/"
    assert recorded_base_urls(catalog, older.name, site_urls)[""] == "https://v0-9.example.org/"
    assert recorded_base_urls(catalog, "other-site", site_urls) == {"": "/"}
    catalog.close()
