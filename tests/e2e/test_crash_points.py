"""A process killed at every write step of a run, then recovered, equals a clean index id by id.

One repository at v1 is indexed once; v2 edits some pages (their chunks are replaced), deletes
some (their chunks are removed) and adds some. For each crash point of `hetriever.core.faults`, a copy
of the v1 store is brought to v2 by a `hetriever ingest` subprocess that dies there (exit 137,
as if SIGKILLed), then by a normal run. Every recovered store must equal a clean store indexed at
v2 in every field: Chroma ids, documents and metadata, BM25 ids, texts and metadata, the
catalog's file rows, titles and links, commit and status. Some v2 pages change only their front
matter, so their chunks keep their ids and only their metadata is rewritten. Both an
incremental run and an `--full` run are killed.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hetriever.core import faults
from hetriever.index.indexing import index_repository
from hetriever.index.run_record import STATUS_COMPLETE, STATUS_INDEXING
from hetriever.search.hybrid import retrieve
from hetriever.search.request import SearchRequest
from hetriever.store.catalog_records import BUILDING, INDEXED
from hetriever.store.chunk_records import ChunkCollection
from hetriever.store.knowledge_store import Store
from tests.support.catalog_snapshot import catalog_rows, collection_metadata
from tests.support.chroma_fixtures import store_settings
from tests.support.cli_runs import (
    REPO_NAME,
    cli_command,
    cli_env,
    page_text,
    run_cli,
    signal_when,
    the_repo,
)
from tests.support.helpers import commit_all, init_repo, run, write_files

PAGES = 24
WINDOW = 8  # several write windows per run
EDITED = range(0, 10)  # new text: new chunk ids, the old ones are deleted as replaced
REMOVED = range(20, 24)
ADDED = range(100, 103)
RETAGGED = range(10, 16)  # same body, new front matter: same chunk ids, new metadata


def retagged_text(i: int) -> str:
    """Page i at v1 with other front matter only (weight, aliases): its chunk is reused."""
    return page_text(i, 1).replace(
        f"weight: {i}\n", f"weight: {i + 500}\naliases: [/old/page-{i}/]\n"
    )


def _settings(root: Path, model_dir: Path):
    return store_settings(root, model_dir=model_dir, write_window=WINDOW)


def _open(root: Path, embedder: Any, model_dir: Path) -> Store:
    return Store(_settings(root, model_dir), embedder=embedder)


def _index(root: Path, docs: Path, embedder: Any, model_dir: Path, **kw: Any) -> None:
    store = _open(root, embedder, model_dir)
    try:
        result = run(index_repository(the_repo(docs), store, store.settings, **kw))
        assert result.completed, result.failed
    finally:
        store.close_sync()


def snapshot(root: Path, embedder: Any, model_dir: Path) -> dict[str, Any]:
    """Everything a search can read, without the physical collection name."""
    store = _open(root, embedder, model_dir)
    try:
        physical = store.physical_name(REPO_NAME)
        got = ChunkCollection(store.chroma.client.get_collection(physical)).get(
            include=["documents", "metadatas"]
        )
        bm25 = store.bm25(REPO_NAME)

        def rows(table: str, *columns: str) -> list[tuple]:
            return sorted(
                tuple(r)
                for r in store.catalog.db.rows(
                    f"SELECT {', '.join(columns)} FROM {table} WHERE collection = ?", (physical,)
                )
            )

        meta = run(store.get_collection_metadata(REPO_NAME))
        return {
            "chroma": {
                i: (doc, dict(m or {}))
                for i, doc, m in zip(got["ids"], got["documents"], got["metadatas"])
            },
            "bm25": {i: bm25.get(i) for i in sorted(bm25.ids())},
            "titles": rows("titles", "key", "kind", "priority", "path", "chunk_id"),
            "links": rows("links", "path", "key"),
            # Every column but when a row was written: its time and `last_commit`, the run's
            # commit (an incremental run leaves an unchanged file at the older one).
            "files": rows(
                "files",
                "repository",
                "path",
                "blob",
                "state",
                "reason",
                "chunk_count",
                "deleted_at",
            ),
            "indexed_files": sorted(f.path for f in store.catalog.files(physical, INDEXED)),
            "commit": meta["commit_hash"],
            "status": meta["index_status"],
            # every table and column of the catalog (`status` and `/repositories` read the
            # repositories row), and the collection's whole metadata, less what
            # tests/support/catalog_snapshot.py names
            "catalog": catalog_rows(store.catalog.path, physical),
            "collection_metadata": collection_metadata(meta),
        }
    finally:
        store.close_sync()


@pytest.fixture(scope="module")
def versions(tmp_path_factory, minilm_embedder, minilm_model_dir):
    """(docs root, v1 store, clean v2 snapshot): built once for every crash point."""
    top = tmp_path_factory.mktemp("crash-points")
    docs = init_repo(top / REPO_NAME)
    write_files(docs, {f"content/docs/page-{i:03d}.md": page_text(i, 1) for i in range(PAGES)})
    commit_all(docs, "v1")
    _index(top / "v1", docs, minilm_embedder, minilm_model_dir)
    for i in REMOVED:
        (docs / f"content/docs/page-{i:03d}.md").unlink()
    write_files(docs, {f"content/docs/page-{i:03d}.md": page_text(i, 2) for i in [*EDITED, *ADDED]})
    write_files(docs, {f"content/docs/page-{i:03d}.md": retagged_text(i) for i in RETAGGED})
    commit_all(docs, "v2")
    _index(top / "clean", docs, minilm_embedder, minilm_model_dir)
    clean = snapshot(top / "clean", minilm_embedder, minilm_model_dir)
    assert clean["status"] == STATUS_COMPLETE
    assert len(clean["chroma"]) == PAGES - len(REMOVED) + len(ADDED)
    before = snapshot(top / "v1", minilm_embedder, minilm_model_dir)["chroma"]
    retagged = [i for i in clean["chroma"] if i in before and before[i] != clean["chroma"][i]]
    assert len(retagged) == len(RETAGGED)  # kept ids, new metadata: what a crash can strand
    return docs, top / "v1", clean


def crash_copy(
    versions, tmp_path: Path, model_dir: Path, rule: str, *args: str, command: str = "ingest"
) -> Path:
    """A copy of the v1 store after an ingest (or another `command`) at v2 that died at
    `rule`."""
    docs, v1, _ = versions
    root = tmp_path / "case"
    shutil.copytree(v1, root)
    env = cli_env(root, model_dir, HETRIEVER_FAULTS=rule, HETRIEVER_WRITE_WINDOW=str(WINDOW))
    done = run_cli(docs, env, command, "--json", *args)
    assert done.returncode == 137, (rule, done.stdout[-1000:], done.stderr[-2000:])
    return root


CASES = [(point, 0) for point in faults.CRASH_POINTS] + [
    ("window_chroma_written", 1),
    ("replaced_chunks_deleted", 1),
]


@pytest.mark.slow
@pytest.mark.parametrize("full", [False, True], ids=["incremental", "full"])
@pytest.mark.parametrize(("point", "skip"), CASES, ids=[f"{p}-{s + 1}" for p, s in CASES])
def test_killed_at_each_write_step_the_next_run_equals_a_clean_index(
    versions, tmp_path, minilm_embedder, minilm_model_dir, point, skip, full
):
    docs, _, clean = versions
    args = ("--full",) if full else ()
    root = crash_copy(versions, tmp_path, minilm_model_dir, f"{point}:*:1:crash:{skip}", *args)
    died = snapshot(root, minilm_embedder, minilm_model_dir)
    if point != "commit_recorded":
        assert died["status"] == STATUS_INDEXING and died["commit"] != clean["commit"]
    _index(root, docs, minilm_embedder, minilm_model_dir)
    assert_same(snapshot(root, minilm_embedder, minilm_model_dir), clean)


def _fields_differing(got: Any, want: Any) -> Any:
    """Of two (text, metadata) rows, the text if it differs and each metadata field that does."""
    if got is None or want is None:
        return {"got": got, "want": want}
    out = {
        k: (got[1].get(k), want[1].get(k))
        for k in set(got[1]) | set(want[1])
        if got[1].get(k) != want[1].get(k)
    }
    if got[0] != want[0]:
        out["text"] = (got[0][:80], want[0][:80])
    return out


def _rows_differing(got: Any, want: Any) -> Any:
    """Of two tables (lists of rows), the rows only one has; else both values."""
    if isinstance(got, list) and isinstance(want, list):
        return {
            "extra": [r for r in got if r not in want],
            "missing": [r for r in want if r not in got],
        }
    return {"got": got, "want": want}


def assert_same(got: dict[str, Any], clean: dict[str, Any]) -> None:
    """Equal in every field; a difference is shown as the rows that differ."""
    for key, want in clean.items():
        if key in ("catalog", "collection_metadata"):
            differ = {
                k: _rows_differing(got[key].get(k), want.get(k))
                for k in set(got[key]) | set(want)
                if got[key].get(k) != want.get(k)
            }
        elif isinstance(want, dict):
            differ = {
                i: _fields_differing(got[key].get(i), want.get(i))
                for i in set(got[key]) | set(want)
                if got[key].get(i) != want.get(i)
            }
        elif isinstance(want, list):
            differ = {
                "extra": sorted(set(got[key]) - set(want)),
                "missing": sorted(set(want) - set(got[key])),
            }
        else:
            differ = {"got": got[key], "want": want}
        assert got[key] == want, (key, differ)


def test_a_chunk_gone_from_chroma_is_never_served_from_bm25_or_the_title_index(
    versions, tmp_path, minilm_embedder, minilm_model_dir
):
    # Dies after the removed page's chunks left Chroma: BM25 and the catalog still have them.
    root = crash_copy(versions, tmp_path, minilm_model_dir, "removed_file_chroma_deleted:*:1:crash")
    died = snapshot(root, minilm_embedder, minilm_model_dir)
    stale = set(died["bm25"]) - set(died["chroma"])
    assert stale, "the crash left no stale BM25 row: the test no longer tests anything"
    removed = f"content/docs/page-{REMOVED[0]:03d}.md"
    assert any(path == removed for *_, path, _ in died["titles"])
    store = _open(root, minilm_embedder, minilm_model_dir)
    try:
        for query in (f"Page {REMOVED[0]}", f"page{REMOVED[0]} version1"):
            result = run(retrieve(store, SearchRequest(query, top_k=10, repositories=[REPO_NAME])))
            served = {m.doc_id for m in result.matches}
            assert not served & stale, query
            assert all(m.metadata["file_path"] != removed for m in result.matches), query
    finally:
        store.close_sync()


def test_a_full_run_repairs_derived_state_even_after_a_completed_run(
    versions, tmp_path, minilm_embedder, minilm_model_dir
):
    # The damage of a crash recorded as complete by an older version: only `--full` can see it.
    docs, _, clean = versions
    root = crash_copy(versions, tmp_path, minilm_model_dir, "removed_file_chroma_deleted:*:1:crash")
    store = _open(root, minilm_embedder, minilm_model_dir)
    try:
        run(
            store.update_collection_metadata(
                REPO_NAME, index_status=STATUS_COMPLETE, commit_hash=clean["commit"]
            )
        )
    finally:
        store.close_sync()
    _index(root, docs, minilm_embedder, minilm_model_dir, force_full=True)
    assert_same(snapshot(root, minilm_embedder, minilm_model_dir), clean)


def generations(root: Path, embedder: Any, model_dir: Path) -> dict[str, Any]:
    """The repository's generations: the active one, those left building, those superseded
    (marked active, not the active one), and where each building one still has data (Chroma
    collection, BM25 file, catalog file rows)."""
    store = _open(root, embedder, model_dir)
    try:
        active = store.physical_name(REPO_NAME)
        records = store.catalog.collections(REPO_NAME)
        building = [c.name for c in records if c.state == BUILDING]
        return {
            "active": active,
            "building": building,
            "superseded": [c.name for c in records if c.state != BUILDING and c.name != active],
            "chroma": store.chroma.collection_names(),
            "bm25": [b for b in building if store.views.bm25_file(b).exists()],
            "catalog_files": [b for b in building if store.catalog.files(b)],
            "runs_left_running": [
                r["collection"] for r in store.catalog.runs(REPO_NAME) if r["outcome"] == "running"
            ],
        }
    finally:
        store.close_sync()


def dropped_generations(done: subprocess.CompletedProcess) -> list[tuple[str, str]]:
    """(collection, log level) of each `abandoned_build_dropped` line a run logged."""
    lines = [line for line in done.stderr.splitlines() if '"abandoned_build_dropped"' in line]
    return [(d["collection"], d["level"]) for d in map(json.loads, lines)]


def first_hit(root: Path, embedder: Any, model_dir: Path, query: str) -> str:
    store = _open(root, embedder, model_dir)
    try:
        result = run(retrieve(store, SearchRequest(query, top_k=5, repositories=[REPO_NAME])))
        return result.matches[0].metadata["file_path"]
    finally:
        store.close_sync()


@pytest.mark.slow
@pytest.mark.parametrize("next_run", ["migrate", "ingest"])
def test_a_build_a_killed_migration_left_is_dropped_by_the_next_run(
    versions, tmp_path, minilm_embedder, minilm_model_dir, next_run
):
    # A full rebuild (`migrate --force`, the full-reindex deployment) dies in its second write
    # window: its generation holds chunks in Chroma and BM25 and is never switched to.
    docs, _, clean = versions
    root = crash_copy(
        versions,
        tmp_path,
        minilm_model_dir,
        "window_chroma_written:*:1:crash:1",
        "--force",
        command="migrate",
    )
    left = generations(root, minilm_embedder, minilm_model_dir)
    (abandoned,) = left["building"]
    active = left["active"]
    assert abandoned != active and abandoned in left["chroma"]
    assert left["bm25"] == left["catalog_files"] == [abandoned]
    served = snapshot(root, minilm_embedder, minilm_model_dir)

    # The next migration (nothing to rebuild: the settings are the active generation's) or
    # ingest (the checked-out commit, into the active generation) drops it and says so.
    env = cli_env(root, minilm_model_dir, HETRIEVER_WRITE_WINDOW=str(WINDOW))
    done = run_cli(docs, env, next_run, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout)[0]
    assert answer["reason"] == "up to date" if next_run == "migrate" else answer["ok"], answer
    assert dropped_generations(done) == [(abandoned, "warning")]
    after = generations(root, minilm_embedder, minilm_model_dir)
    assert after == {
        "active": active,
        "building": [],
        "superseded": [],
        "chroma": [active],
        "bm25": [],
        "catalog_files": [],
        "runs_left_running": [],
    }
    if next_run == "migrate":  # the active generation as it was, searchable
        assert snapshot(root, minilm_embedder, minilm_model_dir) == served
        assert (
            first_hit(root, minilm_embedder, minilm_model_dir, "page3 version1")
            == "content/docs/page-003.md"
        )
    else:  # brought to the checked-out commit, as a clean index of it
        assert_same(snapshot(root, minilm_embedder, minilm_model_dir), clean)

    # A rebuild that completes leaves one generation, equal to a clean index.
    done = run_cli(docs, env, "migrate", "--force", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    final = generations(root, minilm_embedder, minilm_model_dir)
    assert final["chroma"] == [final["active"]] and final["building"] == []
    assert_same(snapshot(root, minilm_embedder, minilm_model_dir), clean)


@pytest.mark.slow
@pytest.mark.parametrize("next_run", ["migrate", "ingest"])
def test_a_generation_a_killed_migration_switched_away_from_is_dropped_by_the_next_run(
    versions, tmp_path, minilm_embedder, minilm_model_dir, next_run
):
    # A rebuild that completes and switches, then dies before it drops the old generation.
    docs, _, clean = versions
    root = crash_copy(
        versions,
        tmp_path,
        minilm_model_dir,
        "migration_switched:*:1:crash",
        "--force",
        command="migrate",
    )
    left = generations(root, minilm_embedder, minilm_model_dir)
    (old,) = left["superseded"]
    active = left["active"]
    assert left["building"] == [] and sorted(left["chroma"]) == sorted([old, active])
    store = _open(root, minilm_embedder, minilm_model_dir)
    try:
        assert store.views.bm25_file(old).exists() and store.catalog.files(old)
    finally:
        store.close_sync()
    assert_same(snapshot(root, minilm_embedder, minilm_model_dir), clean)  # the new one is served

    env = cli_env(root, minilm_model_dir, HETRIEVER_WRITE_WINDOW=str(WINDOW))
    done = run_cli(docs, env, next_run, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert dropped_generations(done) == [(old, "warning")]
    store = _open(root, minilm_embedder, minilm_model_dir)
    try:
        assert not store.views.bm25_file(old).exists() and not store.catalog.files(old)
    finally:
        store.close_sync()
    after = generations(root, minilm_embedder, minilm_model_dir)
    assert after == {
        "active": active,
        "building": [],
        "superseded": [],
        "chroma": [active],
        "bm25": [],
        "catalog_files": [],
        "runs_left_running": [],
    }
    assert_same(snapshot(root, minilm_embedder, minilm_model_dir), clean)


@pytest.mark.slow
def test_a_migration_stopped_by_sigterm_drops_its_build_and_exits_143(
    versions, tmp_path, minilm_embedder, minilm_model_dir
):
    docs, v1, _ = versions
    root = tmp_path / "case"
    shutil.copytree(v1, root)
    served = snapshot(root, minilm_embedder, minilm_model_dir)
    env = cli_env(
        root,
        minilm_model_dir,
        HETRIEVER_WRITE_WINDOW=str(WINDOW),
        HETRIEVER_FAULTS="window_write:*:1:slow5",
    )
    proc = subprocess.Popen(
        cli_command(docs, "migrate", "--force", "--json"),
        env=env,
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    log_text = signal_when(proc, "fault_slow", signal.SIGTERM)
    assert proc.returncode == 143, log_text[-3000:]
    assert "hetriever: stopped by SIGTERM" in log_text and "Traceback" not in log_text
    left = generations(root, minilm_embedder, minilm_model_dir)
    assert left["building"] == [] and left["chroma"] == [left["active"]]
    assert left["runs_left_running"] == []
    assert snapshot(root, minilm_embedder, minilm_model_dir) == served
