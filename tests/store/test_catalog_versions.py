"""The catalog's reads for versions: which repositories are versions (one read), and the
blobs of a collection's indexed files."""

from __future__ import annotations

from hetriever.core.versions import VersionOf, version_from_settings
from hetriever.store.catalog import Catalog
from hetriever.store.catalog_records import INDEXED, SKIPPED


def test_version_settings_are_those_of_the_versions_only(tmp_path):
    catalog = Catalog(tmp_path / "catalog.sqlite")
    version = VersionOf("hugo-docs", "v0.139.0", "v0.139.0")
    catalog.upsert_repository("hugo-docs", settings={"languages": ["en"]})
    catalog.upsert_repository(version.name, settings={"languages": ["en"], **version.to_settings()})
    catalog.upsert_repository("odd--name", settings={"version": "v1"})  # not a version
    found = catalog.version_settings()
    assert list(found) == [version.name]
    assert version_from_settings(found[version.name]) == version


def test_file_blobs_are_those_of_indexed_files(tmp_path):
    catalog = Catalog(tmp_path / "catalog.sqlite")
    catalog.set_files("c_v1", "c", ["a.md", "b.md"], INDEXED, blobs={"a.md": "1", "b.md": "2"})
    catalog.set_files("c_v1", "c", ["draft.md"], SKIPPED, blobs={"draft.md": "3"})
    assert catalog.file_blobs("c_v1", ["a.md", "draft.md", "none.md"]) == {"a.md": "1"}
    assert catalog.file_blobs("other_v1", ["a.md"]) == {}
