"""The catalog: unit behaviour of the SQLite tables, and what indexing and `status` record in it
(real git repositories, real embedded Chroma, real model)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from hetriever.chunk.sections import heading_anchor
from hetriever.cli import main
from hetriever.discover.repositories import discover_repositories
from hetriever.index.indexing import index_repository
from hetriever.store.catalog import Catalog
from hetriever.store.catalog_records import (
    DELETED,
    DISCOVERED,
    FAILED,
    INDEXED,
    SKIPPED,
    address_fragment,
    address_host,
    address_key,
    drop_shared,
    heading_keys,
    normalise_title,
    split_physical,
    title_keys,
)
from hetriever.store.knowledge_store import Store
from tests.support.chroma_fixtures import store_settings
from tests.support.helpers import (
    break_the_cleaner_on_where,
    build_sample_parent,
    commit_all,
    update_submodule,
)


def run(coro):
    return asyncio.run(coro)


# --- the tables ----------------------------------------------------------------------


def test_allocate_switch_and_epoch(tmp_path: Path) -> None:
    cat = Catalog.for_state_dir(tmp_path)
    assert cat.active("alpha-docs") is None
    first = cat.ensure_active("alpha-docs", "s1:m:254:24")
    assert first == "alpha-docs_v1" and cat.active("alpha-docs") == first
    assert cat.ensure_active("alpha-docs", "s1:m:254:24") == first  # idempotent
    epoch = cat.alias_epoch()
    second = cat.allocate("alpha-docs", "s1:m:128:24", activate=False)
    assert second == "alpha-docs_v2" and cat.active("alpha-docs") == first  # not yet visible
    assert cat.collection(second).state == "building"
    assert cat.switch("alpha-docs", second) == first
    assert cat.active("alpha-docs") == second and cat.alias_epoch() > epoch
    cat.drop_collection(first)
    assert cat.collection(first) is None
    # generations are never reused, even after a drop
    assert cat.allocate("alpha-docs", "x", activate=False) == "alpha-docs_v3"
    assert split_physical("alpha-docs_v12") == ("alpha-docs", 12)
    assert split_physical("alpha-docs") is None
    cat.close()


def test_file_states_and_levels(tmp_path: Path) -> None:
    cat = Catalog.for_state_dir(tmp_path)
    col = cat.ensure_active("alpha-docs", "fp")
    cat.set_files(
        col, "alpha-docs", ["a.md", "b.md"], DISCOVERED, commit="c1", blobs={"a.md": "blob-a"}
    )
    cat.set_files(col, "alpha-docs", ["a.md"], INDEXED, chunk_counts={"a.md": 3})
    cat.set_files(col, "alpha-docs", ["b.md"], SKIPPED, reason="draft")
    (a, b) = cat.files(col)
    # later states keep the blob and commit recorded at discovery
    assert (a.state, a.blob, a.last_commit, a.chunk_count) == (INDEXED, "blob-a", "c1", 3)
    assert (b.state, b.reason) == (SKIPPED, "draft")
    cat.mark_deleted(col, ["a.md"], "2026-01-01T00:00:00+00:00")
    assert cat.has_deleted(col) and cat.files(col, DELETED)[0].deleted_at.startswith("2026")
    assert cat.file_counts(col)[DELETED] == 1
    with pytest.raises(ValueError):
        cat.set_files(col, "alpha-docs", ["c.md"], "GONE")
    cat.note_levels(col, ["public"])
    cat.note_levels(col, ["PRIVATE", "PUBLIC"])
    assert cat.collection(col).levels == ["PRIVATE", "PUBLIC"]
    cat.close()


def test_title_keys_and_lookup(tmp_path: Path) -> None:
    where = {
        "title": "collections.Where",
        "aliases": ["/functions/where"],
        "file_path": "content/en/functions/collections/Where.md",
    }
    keys = title_keys(where)
    assert ("title", "collections.where") in keys and ("function", "where") in keys
    assert ("alias", "/functions/where") in keys
    assert ("url", "/functions/collections/where") in title_keys(
        {**where, "url": "/functions/collections/where/"}
    )
    params = {"title": "Params", "file_path": "content/en/methods/site/Params.md"}
    assert ("function", "site.params") in title_keys(params)
    assert normalise_title("  .Site.Params ") == "site.params"
    assert normalise_title("`Where`") == "where"
    assert normalise_title("What is Hugo?") == normalise_title("what is hugo") == "what is hugo"
    # a description is a key from two search terms on, backticks and the final period aside
    menu = {
        "title": "Title",
        "description": "Returns the `title` property of a menu entry.",
        "file_path": "content/en/methods/menu-entry/Title.md",
    }
    assert ("description", "returns the title property of a menu entry") in title_keys(menu)
    assert (
        normalise_title("Returns the title property of a menu entry")
        == "returns the title property of a menu entry"
    )

    def described(text: str) -> list:
        return [k for k in title_keys({"title": "A", "description": text}) if k[0] == "description"]

    assert described("A recording of an event.") == [("description", "a recording of an event")]
    assert described("The overview") == [] and described("About us") == []  # one term: a label
    assert described("OpenTelemetry の認定資格とコース")  # CJK: character pairs are terms

    cat = Catalog.for_state_dir(tmp_path)
    col = cat.ensure_active("hugo-docs", "fp")
    cat.pages.set_page(col, where["file_path"], "id-where", where)
    cat.pages.set_page(col, "content/en/where-guide.md", "id-guide", {"title": "where"})
    # a page titled exactly "where" outranks the page whose function name is where
    hits = cat.pages.lookup_title(" WHERE ", [col])
    assert [h.chunk_id for h in hits] == ["id-guide", "id-where"]
    assert cat.pages.lookup_title("where", ["other_v1"]) == []
    cat.pages.set_page(col, "content/en/where-guide.md")  # replaced: gone
    assert [h.chunk_id for h in cat.pages.lookup_title("where", [col])] == ["id-where"]
    # a description one page has finds it; one several pages share names none of them
    cat.pages.set_page(col, menu["file_path"], "id-title", menu)
    assert [
        h.chunk_id
        for h in cat.pages.lookup_title("returns the title property of a menu entry", [col])
    ] == ["id-title"]
    for lang in ("go", "js"):
        cat.pages.set_page(
            col,
            f"content/en/{lang}/start.md",
            f"id-{lang}",
            {"title": lang, "description": "Get started in five minutes"},
        )
    assert len(cat.pages.lookup_title("Get started in five minutes.", [col])) == 2
    assert drop_shared(cat.pages.lookup_title("Get started in five minutes.", [col])) == []
    # an address finds the page by its URL or its alias, however it is pasted
    cat.pages.set_page(
        col, where["file_path"], "id-where", {**where, "url": "/functions/collections/where/"}
    )
    for address in (
        "https://gohugo.io/functions/collections/where/#examples",
        "gohugo.io/functions/collections/WHERE",
        "/functions/where/",
    ):
        assert [(h.chunk_id, h.kind) for h in cat.pages.lookup_title(address, [col])] == [
            ("id-where", "alias" if "collections" not in address.lower() else "url")
        ]
    # an address is not a name: the page at /guide/ is not the page titled "Guide"; a page
    # served at an address beats another page's stale alias for it
    cat.pages.set_page(
        col, "content/en/guide.md", "id-guide-page", {"title": "A guide", "url": "/guide/"}
    )
    cat.pages.set_page(
        col,
        "content/en/other.md",
        "id-other",
        {"title": "Guide", "url": "/other/", "aliases": ["/guide/"]},
    )
    assert [h.chunk_id for h in cat.pages.lookup_title("Guide", [col])] == ["id-other"]
    assert [h.chunk_id for h in cat.pages.lookup_title("https://gohugo.io/guide/", [col])] == [
        "id-guide-page",
        "id-other",
    ]
    # alias paths a catalog wrote before addresses had their leading slash still answer
    with cat.db.transaction() as conn:
        conn.execute(
            "INSERT INTO titles(collection, key, kind, priority, path, chunk_id) "
            "VALUES (?, 'old/place', 'alias', 3, 'content/en/old.md', 'id-old')",
            (col,),
        )
    assert [h.chunk_id for h in cat.pages.lookup_title("/old/place/", [col])] == ["id-old"]
    assert cat.pages.lookup_title("old/place", [col])[0].chunk_id == "id-old"
    cat.close()


def test_address_key() -> None:
    """A URL, a URL without its scheme and a URL path meet in one key; other text has none."""
    for text in (
        "https://gohugo.io/functions/where/#ex",
        "http://localhost:1313/functions/where/",
        "gohugo.io/functions/where?x=1",
        "/functions/where/",
        "functions/where",
        "/functions/where/index.html",
    ):
        assert address_key(text) == "/functions/where", text
    assert address_key("https://opentelemetry.io/ja/docs/%E6%A6%82%E8%A6%81/") == "/ja/docs/概要"
    assert address_fragment("https://gohugo.io/functions/where/#Examples") == "examples"
    assert address_fragment("/functions/where/") == address_fragment("Examples #1") == ""
    # the host a pasted address names (which language of a multihost site), if any
    assert address_host("https://FR.example.org:8443/docs/") == "fr.example.org:8443"
    assert address_host("fr.example.org/docs/page/") == "fr.example.org"
    for text in ("/docs/page/", "docs/page", "https://fr.example.org/", "what is /docs/"):
        assert address_host(text) == "", text
    # Hugo's own anchors ("github" style): "Why is my `page` missing?" -> why-is-my-page-missing
    assert heading_anchor("Why is my `page` missing?") == "why-is-my-page-missing"
    assert heading_anchor("Front matter & .Params (v0.140)") == "front-matter--params-v0140"
    assert heading_anchor("Über_uns 日本") == "über_uns-日本"
    for text in (
        "collections.Where",
        "what is /functions/where/",
        "mailto:a@example.org",
        "C:/docs/where",
        "https://gohugo.io/",
        "/",
        "",
        "http://[::1/where/",
    ):
        assert address_key(text) == "", text


def test_heading_keys_and_lookup(tmp_path: Path) -> None:
    sections = [
        ("c0", {"heading_context": ""}),  # the page record: no heading
        ("c1", {"heading_context": "Install `hugo` on Linux"}),
        ("c2", {"heading_context": "Install `hugo` on Linux > Install the snap package"}),
        ("c3", {"heading_context": "Install `hugo` on Linux > Install the snap package"}),
        ("c4", {"heading_context": "Examples"}),  # one term: a label
        ("c5", {"heading_context": "Snap channels"}),  # two: a topic's name
        (
            "c6",
            {
                "heading_context": "How do I build the site?",  # a question: two do
                "merged_headings": ["Build for production sites", "Deploy"],
            },
        ),
    ]
    # every level of the heading path and the short sections folded into a chunk, under the
    # first chunk that holds them
    assert heading_keys(sections) == [
        ("install hugo on linux", "c1"),
        ("install the snap package", "c2"),
        ("how do i build the site", "c6"),
        ("build for production sites", "c6"),
    ]
    cat = Catalog.for_state_dir(tmp_path)
    col = cat.ensure_active("docs", "fp")
    page = {"title": "Installation", "file_path": "content/install.md"}
    cat.pages.set_page(col, "content/install.md", "c0", page, sections)
    hits = cat.pages.lookup_title("How do I build the site", [col])
    assert [(h.kind, h.path, h.chunk_id) for h in hits] == [("heading", "content/install.md", "c6")]
    # a title beats a heading; a heading two pages share names neither
    cat.pages.set_page(
        col,
        "content/snap.md",
        "s0",
        {"title": "Install the snap package"},
        [("s1", {"heading_context": "How do I build the site?"})],
    )
    assert [
        (h.kind, h.path) for h in cat.pages.lookup_title("install the snap package", [col])
    ] == [("title", "content/snap.md"), ("heading", "content/install.md")]
    assert drop_shared(cat.pages.lookup_title("How do I build the site?", [col])) == []
    # without a chunk (skipped, deleted) the file's headings go with its other keys
    cat.pages.set_page(col, "content/snap.md")
    assert [h.path for h in cat.pages.lookup_title("how do i build the site!", [col])] == [
        "content/install.md"
    ]
    cat.close()


def test_replacing_a_files_titles_looks_it_up_by_path_not_by_scanning(tmp_path: Path) -> None:
    # Every stored file replaces its title rows; a scan of them all grows with the index.
    cat = Catalog.for_state_dir(tmp_path)
    with cat.db.transaction() as conn:
        plan = " ".join(
            str(row[-1])
            for row in conn.execute(
                "EXPLAIN QUERY PLAN DELETE FROM titles WHERE collection = ? AND path = ?",
                ("docs_v1", "content/a.md"),
            )
        )
    assert "USING INDEX titles_by_path" in plan, plan
    cat.close()


# --- what indexing records -------------------------------------------------------------


@pytest.fixture
def docs(tmp_path: Path):
    return build_sample_parent(tmp_path)


@pytest.fixture
def store(tmp_path: Path, minilm_embedder):
    store = Store(store_settings(tmp_path), embedder=minilm_embedder)
    yield store
    store.close_sync()


def repo_of(parent: Path):
    (repo,) = discover_repositories(parent)
    return repo


def test_indexing_records_file_states_runs_and_titles(docs, store) -> None:
    parent, source = docs
    first = run(index_repository(repo_of(parent), store, store.settings))
    cat, col = store.catalog, store.physical_name("sample-docs")
    assert col == "sample-docs_v1"
    files = {f.path: f for f in cat.files(col)}
    indexed = {p for p, f in files.items() if f.state == INDEXED}
    assert len(indexed) == first.files_indexed == 7
    assert sum(files[p].chunk_count for p in indexed) == first.chunks_written
    assert all(files[p].blob and files[p].last_commit == first.new_commit for p in indexed)
    skipped = {p.rsplit("/", 1)[-1]: f.reason for p, f in files.items() if f.state == SKIPPED}
    assert skipped == {"prerequisites-note.md": "snippet (not a page)", "roadmap.md": "draft"}
    record = cat.repository("sample-docs")
    assert record.last_commit == first.new_commit and record.last_run_outcome == "ok"
    (run_row,) = cat.runs("sample-docs")
    assert run_row["mode"] == "full" and run_row["counts"]["files_indexed"] == 7
    assert cat.pages.lookup_title("where", [col])  # the title index was filled

    # delete a page: with retention 0 its catalog row and titles go at once
    (source / "content/docs/templates/where.md").unlink()
    update_submodule(parent, "sample-docs", commit_all(source, "drop where"))
    run(index_repository(repo_of(parent), store, store.settings))
    assert "content/docs/templates/where.md" not in {f.path for f in cat.files(col)}
    assert cat.pages.lookup_title("where", [col]) == []
    assert [r["outcome"] for r in cat.runs("sample-docs")] == ["ok", "ok"]


def test_a_failed_file_is_recorded(docs, store, monkeypatch) -> None:
    parent, _ = docs
    break_the_cleaner_on_where(monkeypatch)
    run(index_repository(repo_of(parent), store, store.settings))
    (failed,) = store.catalog.files(store.physical_name("sample-docs"), FAILED)
    assert failed.path.endswith("where.md") and "cleaner bug" in failed.reason


def test_status_command_reads_the_catalog(
    docs, tmp_path, minilm_model_dir, monkeypatch, capsys
) -> None:
    parent, _ = docs
    monkeypatch.setenv("HETRIEVER_DOCS_ROOT", str(parent))
    monkeypatch.setenv("HETRIEVER_CHROMA_PATH", str(tmp_path / "cli-chroma"))
    monkeypatch.setenv("HETRIEVER_STATE_DIR", str(tmp_path / "cli-state"))
    monkeypatch.setenv("HETRIEVER_MODEL_DIR", str(minilm_model_dir))
    from hetriever.store.knowledge_store import clear_store_cache

    clear_store_cache()
    try:
        assert main(["-q", "status", "--json"]) == 0
        (before,) = json.loads(capsys.readouterr().out)
        assert before["status"] == "never indexed" and before["files"] == 0
        assert main(["-q", "ingest", "--json"]) == 0
        capsys.readouterr()
        assert main(["-q", "status", "--json"]) == 0
        (row,) = json.loads(capsys.readouterr().out)
    finally:
        clear_store_cache()
        # main() pointed structlog at capsys' stderr, which closes with this test.
        import contextlib
        import sys

        from hetriever.core.logs import configure_logging

        with contextlib.redirect_stderr(sys.__stderr__):
            configure_logging()
    assert row["up_to_date"] and row["files"] == 7 and row["chunks"] > 0
    assert row["failures"] == 0 and row["skipped"] == 2
    assert row["skipped_reasons"] == {"draft": 1, "snippet (not a page)": 1}
    assert row["last_run_outcome"] == "ok" and row["last_run"]
    assert row["collection"] == "sample-docs_v1" and row["access_level"] == "PUBLIC"
    assert row["needs_migration"] is False


def test_a_version_1_catalog_gains_the_index_state_column(tmp_path):
    import sqlite3

    path = tmp_path / "catalog.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('version', '1');
        CREATE TABLE collections (name TEXT PRIMARY KEY, repository TEXT NOT NULL,
            generation INTEGER NOT NULL, fingerprint TEXT NOT NULL, state TEXT NOT NULL,
            levels TEXT NOT NULL DEFAULT '[]', created_at TEXT NOT NULL);
        INSERT INTO collections VALUES ('docs_v1', 'docs', 1, 'fp', 'active', '[]', 'then');
    """)
    conn.commit()
    conn.close()
    catalog = Catalog(path)
    assert catalog.index_state("docs_v1") == {}
    catalog.set_index_state("docs_v1", commit_hash="abc", index_status="complete")
    assert catalog.collection("docs_v1").index_state == {
        "commit_hash": "abc",
        "index_status": "complete",
    }
    assert catalog.noted("version") == "2"
    with pytest.raises(ValueError, match="not index state"):
        catalog.set_index_state("docs_v1", embedding_model="x")
    catalog.close()
