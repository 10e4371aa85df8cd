"""Followed versions indexed: each tag at its own commit in a collection of its own, the
checked-out tree as it was without them, each chunk's text embedded once across versions,
a version's failure or a crash while adding one leaving the rest as they were. Real git,
real embedded Chroma, real MiniLM."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hetriever.core import faults
from hetriever.core.config import load_settings
from hetriever.core.versions import VersionOf, version_from_settings
from hetriever.discover.repositories import configured_repositories
from hetriever.index.ingest import ingest_repositories
from hetriever.index.status import repository_status
from hetriever.search.hybrid import plan_collections
from hetriever.store.chunk_records import ChunkCollection
from hetriever.store.knowledge_store import Store
from tests.support.catalog_snapshot import catalog_rows
from tests.support.cli_runs import cli_env, run_cli
from tests.support.flow_support import stored
from tests.support.helpers import commit_all, git, run, write_files
from tests.support.versions_support import (
    NAME,
    V1,
    V2,
    CountingEmbedder,
    ledger_hashes,
    page,
    versioned_docs,
)

TAGS = {NAME: {"tags": "v*", "last": 2}}


def settings_for(docs: Path, where: Path, versions: dict) -> Any:
    return load_settings(
        env={},
        config_file=None,
        docs_root=docs,
        chroma_path=where / "chroma",
        state_dir=where / "state",
        run_lock_timeout=1.0,
        versions=versions,
    )


def open_store(settings: Any, embedder: Any) -> Store:
    return Store(settings, embedder=embedder, lock_timeout=2.0)


def texts_by_path(store: Store, name: str) -> dict[str, str]:
    """file -> its chunks' texts joined (in id order), as the collection holds them."""
    out: dict[str, list[str]] = {}
    for doc_id, (path, text) in sorted(stored(store, name).items()):
        out.setdefault(path, []).append(text)
    return {path: " ".join(texts) for path, texts in out.items()}


def vectors_by_text(store: Store, name: str) -> dict[str, Any]:
    col = ChunkCollection(store.chroma.client.get_collection(store.physical_name(name)))
    got = col.get(include=["embeddings", "documents"])
    return dict(zip(got["documents"], got["embeddings"]))


def ingest(
    store: Store, settings: Any, names: list[str] | None = None, *, fetch: bool = False
) -> dict[str, Any]:
    repos = configured_repositories(settings, names)
    return {o.repository: o for o in run(ingest_repositories(repos, store, settings, fetch=fetch))}


@pytest.fixture
def docs(tmp_path: Path):
    return versioned_docs(tmp_path)


@pytest.fixture
def indexed(docs, tmp_path: Path, minilm_embedder):
    """(docs root, settings following the last two tags, a store with all of them indexed)."""
    root, _ = docs
    settings = settings_for(root, tmp_path, TAGS)
    store = open_store(settings, minilm_embedder)
    try:
        assert all(o.ok for o in ingest(store, settings).values())
        yield root, settings, store
    finally:
        store.close_sync()


def test_each_tag_is_indexed_at_its_commit_and_the_checkout_is_as_without_versions(
    docs, tmp_path: Path, minilm_embedder
):
    root, commits = docs
    settings = settings_for(root, tmp_path / "with", TAGS)
    store = open_store(settings, minilm_embedder)
    try:
        outcomes = ingest(store, settings)
        assert sorted(outcomes) == [NAME, V1, V2]
        assert all(o.ok and o.mode == "full" for o in outcomes.values()), outcomes
        v1, v2 = texts_by_path(store, V1), texts_by_path(store, V2)
        assert "version one" in v1["content/guide.md"]
        assert "version two" in v2["content/guide.md"]
        # removed in v2.0.0: only the earlier version holds it; added in it: only the later
        assert "content/legacy.md" in v1 and "content/legacy.md" not in v2
        assert "content/new.md" in v2 and "content/new.md" not in v1
        for name, tag in ((V1, "v1.0.0"), (V2, "v2.0.0")):
            record = store.catalog.repository(name)
            assert record is not None and record.last_commit == commits[tag]
            assert version_from_settings(record.settings) == VersionOf(NAME, tag, tag)
            shown = repository_status(store.catalog, name, store.physical_name(name), "PUBLIC")
            assert (shown.version, shown.ref, shown.version_of) == (tag, tag, NAME)
            assert shown.served()["version_of"] == NAME
        base = store.catalog.repository(NAME)
        assert base is not None and base.last_commit == commits["main"]
        assert version_from_settings(base.settings) is None
        with_versions = stored(store, NAME)
    finally:
        store.close_sync()

    plain = settings_for(root, tmp_path / "without", {})
    alone = open_store(plain, minilm_embedder)
    try:
        assert sorted(ingest(alone, plain)) == [NAME]
        assert stored(alone, NAME) == with_versions
    finally:
        alone.close_sync()


def test_a_later_version_embeds_only_the_chunks_no_other_version_holds(
    docs, tmp_path: Path, minilm_embedder
):
    root, _ = docs
    settings = settings_for(root, tmp_path, TAGS)
    embedder = CountingEmbedder(minilm_embedder)
    store = open_store(settings, embedder)
    try:
        embedded: dict[str, list[str]] = {}
        results = {}
        for repo in configured_repositories(settings):  # one at a time, counted apart
            before = len(embedder.texts)
            (outcome,) = run(ingest_repositories([repo], store, settings))
            results[repo.name], embedded[repo.name] = outcome.result, embedder.texts[before:]
        chunks = {name: stored(store, name) for name in (NAME, V1, V2)}
        earlier = {t for name in (NAME, V1) for _, t in chunks[name].values()}
        new_in_v2 = {t for _, t in chunks[V2].values()} - earlier
        assert new_in_v2 and sorted(embedded[V2]) == sorted(new_in_v2)
        # exactly the changed page's new chunks: the unchanged and the base's pages borrowed
        assert {p for p, t in chunks[V2].values() if t in new_in_v2} == {"content/guide.md"}
        v2 = results[V2]
        assert v2.chunks_written == len(chunks[V2])
        assert v2.chunks_borrowed == v2.chunks_written - len(embedded[V2]) > 0
        assert results[NAME].chunks_borrowed == 0  # the first one has no donor
        # the borrowed vectors are the donor's own: the same text, the same vector
        donor, got = (vectors_by_text(store, name) for name in (NAME, V2))
        about = {t for p, t in chunks[V2].values() if p == "content/about.md"}
        assert about and all(np.array_equal(got[t], donor[t]) for t in about)
    finally:
        store.close_sync()


def test_a_ref_that_names_no_commit_fails_alone_and_a_moved_branch_is_indexed_by_its_diff(
    docs, tmp_path: Path, minilm_embedder
):
    root, commits = docs
    git(root / NAME, "branch", "release", commits["v1.0.0"])
    settings = settings_for(root, tmp_path, {NAME: {"refs": ["release", "nowhere"]}})
    store = open_store(settings, minilm_embedder)
    try:
        outcomes = ingest(store, settings)
        missing = outcomes[f"{NAME}--nowhere"]
        assert (
            not missing.ok and "'nowhere'" in missing.error and "names no commit" in missing.error
        )
        assert outcomes[NAME].ok and outcomes[f"{NAME}--release"].ok
        assert store.physical_name(f"{NAME}--nowhere") is None  # nothing made for it

        git(root / NAME, "branch", "-f", "release", commits["v2.0.0"])
        again = ingest(store, settings)[f"{NAME}--release"].result
        assert again is not None and again.mode == "incremental"
        assert (again.files_added, again.files_modified, again.files_deleted) == (1, 1, 1)
        assert again.new_commit == commits["v2.0.0"]
        release = texts_by_path(store, f"{NAME}--release")
        assert "content/legacy.md" not in release and "version two" in release["content/guide.md"]
        assert ingest(store, settings)[NAME].mode == "noop"  # the checkout never moved
    finally:
        store.close_sync()


def snapshot(where: Path, embedder: Any, names=(NAME, V1, V2)) -> dict[str, Any]:
    """What each repository's collection and catalog rows hold, as a search reads them, and
    whether its index is complete."""
    settings = settings_for(where, where, {})
    store = open_store(settings, embedder)
    try:
        out = {}
        for name in names:
            physical = store.physical_name(name)
            assert physical is not None
            rows = catalog_rows(store.catalog.path, physical)
            # the repositories table is every repository's: its own row only
            rows["repositories"] = [r for r in rows["repositories"] if r[0] == name]
            out[name] = {
                "chunks": stored(store, name),
                "catalog": rows,
                "complete": store.catalog.complete(name),
            }
        out["recorded"] = {r.name: r.last_commit for r in store.catalog.repositories()}
        return out
    finally:
        store.close_sync()


def versions_cli(root: Path, where: Path, model_dir: Path, **extra: str):
    env = cli_env(where, model_dir, HETRIEVER_VERSIONS=json.dumps(TAGS), **extra)
    return run_cli(root, env, "ingest", "--json")


@pytest.fixture(scope="module")
def clean_versions(tmp_path_factory, minilm_embedder, minilm_model_dir):
    """One docs root with its versions, and what a clean build of it holds."""
    base = tmp_path_factory.mktemp("versions-clean")
    root, _ = versioned_docs(base)
    assert versions_cli(root, base / "clean", minilm_model_dir).returncode == 0
    return root, snapshot(base / "clean", minilm_embedder)


# The write steps a version's first build meets (CRASH_POINTS, docs/reliability.md): a first
# build removes and replaces nothing.
FIRST_BUILD_POINTS = [p for p in faults.CRASH_POINTS if not p.startswith(("removed_", "replaced_"))]


@pytest.mark.slow
@pytest.mark.parametrize("point", FIRST_BUILD_POINTS)
def test_a_crash_while_adding_a_version_leaves_the_others_and_the_rerun_equals_a_clean_build(
    clean_versions, tmp_path: Path, minilm_embedder, minilm_model_dir, point
):
    root, want = clean_versions
    crashed = tmp_path / "crashed"
    # killed at this write step of v2.0.0's first build, after the base and v1.0.0
    done = versions_cli(root, crashed, minilm_model_dir, HETRIEVER_FAULTS=f"{point}:{V2}:1:crash")
    assert done.returncode != 0, done.stdout[-1000:]
    mid = snapshot(crashed, minilm_embedder, (NAME, V1))
    assert mid[NAME] == want[NAME] and mid[V1] == want[V1]  # searchable, untouched
    # nothing recorded as complete that was not (after commit_recorded, the collection's
    # commit is; the run is settled by the next one)
    assert not mid["recorded"][V2]

    again = versions_cli(root, crashed, minilm_model_dir)
    assert again.returncode == 0, again.stderr[-2000:]
    outcomes = {o["repository"]: o for o in json.loads(again.stdout)}
    assert outcomes[NAME]["mode"] == outcomes[V1]["mode"] == "noop"
    # the unfinished run reconciled with a full pass; a recorded one settled
    assert outcomes[V2]["mode"] == ("noop" if point == "commit_recorded" else "full")
    assert snapshot(crashed, minilm_embedder) == want


def test_a_version_has_its_repositorys_access_level_unless_named_itself(
    docs, tmp_path: Path, minilm_embedder
):
    root, _ = docs
    settings = settings_for(root, tmp_path, {NAME: {"refs": ["v1.0.0", "v2.0.0"]}}).replace(
        access_levels={NAME: "TEAM", V2: "PRIVATE"}
    )
    store = open_store(settings, minilm_embedder)
    try:
        assert all(o.ok for o in ingest(store, settings).values())
        for name, level in ((NAME, "TEAM"), (V1, "TEAM"), (V2, "PRIVATE")):
            record = store.catalog.repository(name)
            assert record is not None and record.access_level == level
            col = ChunkCollection(store.chroma.client.get_collection(store.physical_name(name)))
            levels = {m["access_level"] for m in col.get(include=["metadatas"])["metadatas"]}
            assert levels == {level}
    finally:
        store.close_sync()
    # the repository made PRIVATE in the configuration: its versions are hidden at once too
    private = settings.replace(access_levels={NAME: "PRIVATE"})
    searcher = open_store(private, minilm_embedder)
    try:
        plans = plan_collections(searcher, [NAME, V1, V2])
        assert {name: plan.declared for name, plan in plans.items()} == {
            NAME: "PRIVATE",
            V1: "PRIVATE",
            V2: "PRIVATE",
        }
    finally:
        searcher.close_sync()


def test_a_tag_the_runs_fetch_brings_in_is_indexed_in_that_run(tmp_path: Path, minilm_embedder):
    upstream, commits = versioned_docs(tmp_path / "upstream")
    root = tmp_path / "docs"
    git(tmp_path, "clone", "-q", str(upstream / NAME), str(root / NAME))
    settings = settings_for(root, tmp_path / "index", {NAME: {"tags": "v*", "last": 3}})
    repos = configured_repositories(settings)  # found before the fetch: v1 and v2 alone
    assert [r.name for r in repos] == [NAME, V1, V2]
    origin = upstream / NAME
    write_files(origin, {"content/v3.md": page("Three", "What version three brought.")})
    v3_commit = commit_all(origin, "v3.0.0")
    git(origin, "tag", "v3.0.0")
    store = open_store(settings, minilm_embedder)
    try:
        outcomes = {
            o.repository: o for o in run(ingest_repositories(repos, store, settings, fetch=True))
        }
        v3 = f"{NAME}--v3-0-0"
        assert sorted(outcomes) == [NAME, V1, V2, v3]
        assert all(o.ok for o in outcomes.values()), {n: o.error for n, o in outcomes.items()}
        assert store.catalog.repository(v3).last_commit == v3_commit
        assert "content/v3.md" in texts_by_path(store, v3)
        assert "content/v3.md" not in texts_by_path(store, V2)
    finally:
        store.close_sync()


def test_a_version_whose_tag_is_deleted_is_dropped_by_the_rules_deletes_follow(indexed):
    root, settings, store = indexed
    kept = stored(store, V1)
    git(root / NAME, "tag", "-d", "v1.0.0")  # `tags` no longer finds it; its ref is gone

    # the mass-delete guard holds: a whole version is not wiped unless allowed
    refused = ingest(store, settings)
    assert not refused[V1].ok and "would delete" in refused[V1].error
    assert refused[NAME].ok and refused[V2].ok
    assert stored(store, V1) == kept

    # with a retention: hidden from every search now, erased by `purge` later
    keeping = settings.replace(allow_mass_delete=True, retention_days=30)
    dropped = ingest(store, keeping)
    assert dropped[V1].ok and dropped[V1].mode == "dropped"
    assert store.reads.file_chunk_counts(V1) == {}  # no live chunk left
    assert set(store.reads.file_chunk_counts(V1, include_deleted=True)) == {
        path for path, _ in kept.values()
    }
    stamps = {f.deleted_at for f in store.catalog.files(store.physical_name(V1))}
    again = ingest(store, keeping)  # a later run does not stamp them again
    assert again[V1].ok and again[V1].result.files_deleted == 0
    assert {f.deleted_at for f in store.catalog.files(store.physical_name(V1))} == stamps

    # without one: erased at once, the version's index and catalog rows gone
    ingest(store, settings.replace(allow_mass_delete=True))
    assert store.physical_name(V1) is None and store.catalog.repository(V1) is None
    assert stored(store, V2) and stored(store, NAME)


def test_forgetting_a_repository_erases_its_versions_and_a_file_from_each(indexed):
    from hetriever.index.lifecycle import forget_file_sync, forget_repository_sync

    _, _, store = indexed
    about = "content/about.md"  # the same text at every version
    assert all(about in store.reads.file_chunk_counts(n) for n in (NAME, V1, V2))

    one = forget_file_sync(store, NAME, about)
    assert one.versions == [V1, V2] and one.chunks > 0
    assert not any(about in store.reads.file_chunk_counts(n) for n in (NAME, V1, V2))
    assert "content/guide.md" in store.reads.file_chunk_counts(V1)

    whole = forget_repository_sync(store, NAME)
    assert whole.versions == [V1, V2]
    for name in (NAME, V1, V2):
        assert store.physical_name(name) is None and store.catalog.repository(name) is None
    assert store.chroma.collection_names() == []


def test_a_release_branch_deleted_upstream_is_dropped_by_the_next_fetching_run(
    tmp_path: Path, minilm_embedder
):
    upstream, _ = versioned_docs(tmp_path / "upstream")
    origin = upstream / NAME
    git(origin, "branch", "release-1", "v1.0.0")
    root = tmp_path / "docs"
    git(tmp_path, "clone", "-q", str(origin), str(root / NAME))  # origin/release-1 only
    settings = settings_for(root, tmp_path / "index", {NAME: {"refs": ["release-1"]}})
    settings = settings.replace(allow_mass_delete=True)
    branch = f"{NAME}--release-1"
    store = open_store(settings, minilm_embedder)
    try:
        first = ingest(store, settings, fetch=True)
        assert first[branch].ok and "content/legacy.md" in texts_by_path(store, branch)
        git(origin, "branch", "-D", "release-1")
        # the fetch prunes origin/release-1, so the version's ref names no commit any more
        second = ingest(store, settings, fetch=True)
        assert second[branch].ok and second[branch].mode == "dropped", second[branch].error
        assert store.physical_name(branch) is None and second[NAME].ok
    finally:
        store.close_sync()


def test_a_run_prunes_its_familys_ledger_to_what_its_collections_hold_once_grown(
    indexed, monkeypatch
):
    import hetriever.store.donors as donors

    root, settings, store = indexed

    def held_in_ledger() -> set[str]:
        return ledger_hashes(settings.resolved_state_dir, NAME)

    def held_in_collections() -> set[str]:
        out = set()
        for name in (NAME, V1, V2):
            col = ChunkCollection(store.chroma.client.get_collection(store.physical_name(name)))
            out |= {m["content_hash"] for m in col.get(include=["metadatas"])["metadatas"]}
        return out

    repo = root / NAME
    write_files(
        repo, {"content/guide.md": page("Guide", "An edit of the guide, soon edited away.")}
    )
    commit_all(repo, "an edit")
    assert ingest(store, settings, [NAME])[NAME].ok
    write_files(repo, {"content/guide.md": page("Guide", "The guide as it reads in the end.")})
    commit_all(repo, "another")
    assert ingest(store, settings, [NAME])[NAME].ok
    # below twice what the family holds (plus slack): the edited-away text stays
    assert held_in_ledger() > held_in_collections()

    monkeypatch.setattr(donors, "PRUNE_SLACK", 0)
    monkeypatch.setattr(donors, "PRUNE_PAST", 0)  # any ledger counts as grown
    write_files(repo, {"content/about.md": page("About", "About this site, once more.")})
    commit_all(repo, "about")
    assert ingest(store, settings, [NAME])[NAME].ok
    assert held_in_ledger() == held_in_collections()
