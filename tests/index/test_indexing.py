"""The incremental indexing algorithm against real git repositories and a real embedded Chroma."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hetriever.core.errors import SourceError
from hetriever.core.faults import InjectedFault
from hetriever.index.indexing import index_repository
from hetriever.index.process import is_snippet_path
from hetriever.index.run_record import STATUS_COMPLETE, STATUS_INDEXING
from tests.support.chroma_fixtures import chroma_or_memory_store
from tests.support.flow_support import fresh_full_pass, stored
from tests.support.helpers import (
    break_the_cleaner_on_where,
    build_sample_parent,
    commit_all,
    git,
    init_repo,
    repo_of,
    update_submodule,
    write_files,
)


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def docs(tmp_path: Path):
    return build_sample_parent(tmp_path)


@pytest.fixture(params=["chroma", "memory"])
def store(request, tmp_path: Path):
    """The algorithm over real Chroma and MiniLM, and over the fast tier's in-memory stand-ins."""
    yield from chroma_or_memory_store(request, tmp_path)


def test_full_then_noop_then_incremental(docs, store):
    parent, source = docs
    settings = store.settings
    repo = repo_of(parent)

    first = run(index_repository(repo, store, settings))
    assert first.mode == "full" and first.completed
    assert first.files_indexed == 7  # docs/_index.md: front matter only
    reasons = {s.path.rsplit("/", 1)[-1]: s.reason for s in first.skipped}
    assert reasons == {"prerequisites-note.md": "snippet (not a page)", "roadmap.md": "draft"}
    chunks = stored(store, "sample-docs")
    assert len(chunks) == first.chunks_written > 0
    meta = run(store.get_collection_metadata("sample-docs"))
    assert meta["commit_hash"] == first.new_commit
    (recorded,) = store.catalog.runs("sample-docs")  # the run history shows its duration
    assert 0 < recorded["counts"]["total_seconds"] <= first.total_seconds
    assert meta["index_status"] == STATUS_COMPLETE
    assert meta["total_chunks"] == len(chunks) and meta["total_documents"] == 7

    # the included snippet's text is part of the page that includes it
    install = [t for p, t in chunks.values() if p.endswith("install/_index.md")]
    assert any("PowerShell" in t for t in install)

    again = run(index_repository(repo, store, settings))
    assert again.mode == "noop" and again.chunks_written == 0
    assert stored(store, "sample-docs") == chunks

    # edit one paragraph, delete a page, rename another, add one; commit; bump the submodule
    where = source / "content/docs/templates/where.md"
    where.write_text(where.read_text().replace("Use dot notation", "Use dotted notation"))
    (source / "content/blog/release-1.md").unlink()
    git(source, "mv", "content/docs/content/page-bundles", "content/docs/content/bundles")
    write_files(
        source,
        {
            "content/docs/faq.md": "---\ntitle: FAQ\n---\n\nQuestions and answers "
            "about Sample, its templates and its output.\n"
        },
    )
    new_commit = commit_all(source, "edit")
    update_submodule(parent, "sample-docs", new_commit)
    repo = repo_of(parent)

    inc = run(index_repository(repo, store, settings))
    assert inc.mode == "incremental" and inc.completed
    assert (inc.files_added, inc.files_modified, inc.files_deleted, inc.files_renamed) == (
        1,
        1,
        1,
        1,
    )
    assert inc.files_indexed == 3
    after = stored(store, "sample-docs")
    paths = {p for p, _ in after.values()}
    assert "content/blog/release-1.md" not in paths
    assert "content/docs/content/page-bundles/index.md" not in paths
    assert {"content/docs/content/bundles/index.md", "content/docs/faq.md"} <= paths
    # only the edited where.md chunk was re-embedded there; its other chunks were reused
    where_before = {i for i, (p, _) in chunks.items() if p.endswith("where.md")}
    where_after = {i for i, (p, _) in after.items() if p.endswith("where.md")}
    assert len(where_before - where_after) == 1 and len(where_after - where_before) == 1
    assert inc.chunks_reused >= len(where_before) - 1
    # a renamed file's chunks change id (the path is part of it) but keep their text
    renamed = sorted(t for p, t in after.values() if p.endswith("bundles/index.md"))
    original = sorted(t for p, t in chunks.values() if p.endswith("page-bundles/index.md"))
    assert renamed == original
    meta = run(store.get_collection_metadata("sample-docs"))
    assert meta["commit_hash"] == new_commit
    # the totals are what Chroma holds (the file count is read from BM25's metadata)
    assert meta["total_documents"] == len(paths) == 7 and meta["total_chunks"] == len(after)
    assert after == fresh_full_pass(repo, new_commit, settings)
    # Writes, deletes and counts read BM25's file: a process that only ingests never loads
    # its in-memory index (bench/HISTORY.md: opentelemetry-io's peak ~25 MB lower).
    assert store.bm25("sample-docs")._state is None


def test_changed_snippet_reindexes_the_pages_that_include_it(docs, store):
    parent, source = docs
    run(index_repository(repo_of(parent), store, store.settings))
    note = source / "content/_common/prerequisites-note.md"
    note.write_text(note.read_text().replace("PowerShell", "Windows Terminal"))
    update_submodule(parent, "sample-docs", commit_all(source, "snippet"))

    result = run(index_repository(repo_of(parent), store, store.settings))
    assert result.mode == "incremental" and result.files_modified == 1  # the snippet
    assert result.files_include_dependent == 1  # the page that includes it
    texts = " ".join(t for p, t in stored(store, "sample-docs").values())
    assert "Windows Terminal" in texts and "PowerShell" not in texts


def test_param_takes_a_section_cascade_and_follows_its_changes(docs, store):
    parent, source = docs
    write_files(
        source,
        {
            "content/docs/_index.md": "---\ntitle: Documentation\ncascade:\n  vers:\n"
            "    sample: 1.2.3\n    tool: 9.9.9\n---\n",
            "content/docs/install/upgrade.md": (
                "---\ntitle: Upgrade\nvers:\n  tool: 4.0.0\n---\n\nUpgrade to Sample "
                '{{% param vers.sample %}} with the tool {{% param "vers.tool" %}}.\n'
            ),
        },
    )
    update_submodule(parent, "sample-docs", commit_all(source, "cascade"))
    run(index_repository(repo_of(parent), store, store.settings))
    # The nearest ancestor section's cascade, the page's own front matter over it.
    upgrade = [
        t for (path, t) in stored(store, "sample-docs").values() if path.endswith("upgrade.md")
    ]
    assert any("Upgrade to Sample 1.2.3 with the tool 4.0.0." in t for t in upgrade)

    index = source / "content/docs/_index.md"
    index.write_text(index.read_text().replace("1.2.3", "2.0.0"))
    update_submodule(parent, "sample-docs", commit_all(source, "new version"))
    result = run(index_repository(repo_of(parent), store, store.settings))
    assert result.mode == "incremental" and result.files_modified == 1  # the section page
    # The pages below it that call param (upgrade.md, and where.md through a code example).
    assert result.files_include_dependent == 2
    texts = " ".join(t for _, t in stored(store, "sample-docs").values())
    assert "Upgrade to Sample 2.0.0" in texts and "1.2.3" not in texts


def test_interrupted_run_is_not_recorded_and_the_next_run_repairs(
    docs, store, tmp_path, monkeypatch
):
    parent, source = docs
    first = run(index_repository(repo_of(parent), store, store.settings))
    where = source / "content/docs/templates/where.md"
    where.write_text(where.read_text() + "\n## Performance\n\nThe where function is fast.\n")
    (source / "content/docs/install/_index.md").write_text(
        "---\ntitle: Install\n---\n\nInstall Sample with the installer for your platform.\n"
    )
    update_submodule(parent, "sample-docs", commit_all(source, "two edits"))

    monkeypatch.setenv("HETRIEVER_FAULTS", "write_file:*:always")
    monkeypatch.setenv("HETRIEVER_FAULTS_STATE", str(tmp_path / "faults"))
    with pytest.raises(InjectedFault):
        run(index_repository(repo_of(parent), store, store.settings))
    meta = run(store.get_collection_metadata("sample-docs"))
    assert meta["commit_hash"] == first.new_commit  # never advanced before the data was complete
    assert meta["index_status"] == STATUS_INDEXING

    monkeypatch.delenv("HETRIEVER_FAULTS")
    repaired = run(index_repository(repo_of(parent), store, store.settings))
    assert repaired.mode == "full" and repaired.completed  # reconciled with a full pass
    assert run(store.get_collection_metadata("sample-docs"))["index_status"] == STATUS_COMPLETE
    texts = " ".join(t for _, t in stored(store, "sample-docs").values())
    assert "The where function is fast." in texts and "installer for your platform" in texts


@pytest.mark.slow
def test_a_second_run_of_the_same_repository_waits_then_exits_clearly(docs, store):
    from hetriever.core.errors import WriterLockedError
    from hetriever.index.indexing import run_lock

    parent, _ = docs
    with run_lock(store.settings, "sample-docs"):
        # a different process would block on the flock; threads of one process on the lock
        with pytest.raises(WriterLockedError, match="ingest run of 'sample-docs'"):
            run(index_repository(repo_of(parent), store, store.settings, force_full=True))


def test_a_file_that_breaks_the_cleaner_is_skipped_not_fatal(docs, store, monkeypatch):
    parent, _ = docs
    repo = repo_of(parent)
    break_the_cleaner_on_where(monkeypatch)
    result = run(index_repository(repo, store, store.settings))
    assert result.completed
    failed = [s for s in result.skipped if s.reason.startswith("error: ValueError")]
    assert [s.path for s in failed] == ["content/docs/templates/where.md"]
    assert result.files_indexed == 6


def test_snippet_paths():
    assert is_snippet_path("content/_common/a.md", "content")
    assert is_snippet_path("content/en/docs/_includes/x.md", "content")
    assert not is_snippet_path("content/docs/_index.md", "content")
    assert not is_snippet_path("content/_index.md", "content")


def test_include_candidates_missing_from_the_tree_are_not_read(tmp_path, monkeypatch):
    # Most lookup candidates (`_includes/` at every level, every root) do not exist; the
    # commit's tree answers for them, and git still resolves paths below a symlink.
    import os

    from hetriever.core.config import Settings
    from hetriever.discover import git_objects
    from hetriever.discover.repositories import Repository
    from hetriever.index import process

    source = init_repo(tmp_path / "site")
    write_files(
        source,
        {
            "content/docs/deep/_includes/note.md": "A note.\n",
            "shared/tip.md": "A tip.\n",
            "content/docs/deep/page.md": "---\ntitle: P\n---\nText.\n",
        },
    )
    os.symlink("../shared", source / "content/linked")
    commit = commit_all(source, "site")
    reads: list[str] = []
    real = git_objects.FileReader.read
    processes: list[str] = []
    real_start = git_objects._BlobReader.__init__

    def counted(self, path, **kw):
        reads.append(path)
        return real(self, path, **kw)

    def started(self, repo, commit):
        processes.append(commit)
        real_start(self, repo, commit)

    monkeypatch.setattr(git_objects.FileReader, "read", counted)
    monkeypatch.setattr(git_objects._BlobReader, "__init__", started)
    resolver = process.IncludeResolver(Repository(name="site", path=source), commit, Settings())
    page = "content/docs/deep/page.md"
    assert resolver.resolve("note", page) == "A note.\n"
    assert reads == ["content/docs/deep/_includes/note.md"]
    assert resolver.resolve("missing", page) is None
    assert resolver.resolve("/missing", page) is None
    assert len(reads) == 1
    assert resolver.resolve("/linked/tip", page) == "A tip.\n"  # below a symlink: git reads it
    assert reads[-1] == "content/linked/tip.md"
    assert resolver.resolve("/linked/gone", page) is None  # git says missing; the stream goes on
    assert resolver.resolve("tip", "content/linked/page.md") == "A tip.\n"  # cached
    assert len(processes) == 1  # every read through one git process
    resolver.close()
    assert resolver.resolve("/docs/deep/page", page) == "Text.\n"  # a new one after close
    assert len(processes) == 2
    # git dying mid-run fails that read clearly; the next read starts another process
    resolver._files._reader.proc.kill()
    resolver._files._reader.proc.wait()
    with pytest.raises(SourceError, match="cat-file stopped"):
        resolver.resolve("/linked/other", page)
    assert resolver.resolve("/linked/other", page) is None  # git answers again: "missing"
    assert len(processes) == 3


def test_one_resolver_shared_by_concurrent_tasks_reads_each_file_once(tmp_path, monkeypatch):
    # The flow's per-file tasks run on several threads and share the run's resolver: eight
    # pages including the same snippet at once cost one git read, not one per thread.
    import threading
    import time

    from hetriever.core.config import Settings
    from hetriever.discover import git_objects
    from hetriever.discover.repositories import Repository
    from hetriever.index import process

    source = init_repo(tmp_path / "site")
    write_files(
        source,
        {
            "content/_includes/note.md": "A note.\n",
            **{f"content/docs/p{i}.md": f"---\ntitle: P{i}\n---\nText.\n" for i in range(8)},
        },
    )
    commit = commit_all(source, "site")
    reads: list[str] = []
    real = git_objects.FileReader.read

    def slow_read(self, path, **kw):  # a read long enough for the threads to meet
        reads.append(path)
        time.sleep(0.05)
        return real(self, path, **kw)

    monkeypatch.setattr(git_objects.FileReader, "read", slow_read)
    resolver = process.IncludeResolver(Repository(name="site", path=source), commit, Settings())
    start = threading.Barrier(8)
    found: list[str | None] = []

    def include(i: int) -> None:
        start.wait()
        found.append(resolver.resolve("note", f"content/docs/p{i}.md"))

    threads = [threading.Thread(target=include, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert found == ["A note.\n"] * 8
    assert reads == ["content/_includes/note.md"]
    # A Dask task runner pickles the resolver to its workers: the copy resolves on its own.
    import pickle

    copy = pickle.loads(pickle.dumps(resolver))
    assert copy.resolve("note", "content/docs/p0.md") == "A note.\n"


def test_the_per_file_step_is_pluggable_and_a_step_that_gives_up_fails_the_run(docs, store):
    """A mapper other than the in-process one (the flow passes a task-per-file mapper): its
    outcomes are written as usual; a file it gives up on is filed under `failed`, keeps no new
    chunks, and the run is closed as failed with the commit unrecorded."""
    from hetriever.index.indexing import map_in_process
    from hetriever.index.process import FileOutcome
    from hetriever.store.catalog_records import FAILED

    parent, _ = docs
    seen: list[str] = []

    async def flaky_mapper(files, work):
        async for outcome in map_in_process(files, work):
            seen.append(outcome.path)
            if outcome.path.endswith("where.md"):
                yield FileOutcome(outcome.path, failed="failed after retries: OSError: gone")
            else:
                yield outcome

    ticks: list[tuple[int, int]] = []
    result = run(
        index_repository(
            repo_of(parent),
            store,
            store.settings,
            map_files=flaky_mapper,
            progress=lambda done, total: ticks.append((done, total)),
        )
    )
    assert not result.completed
    assert [f.path for f in result.failed] == ["content/docs/templates/where.md"]
    assert result.failed[0].reason == "failed after retries: OSError: gone"
    assert all(s.path != "content/docs/templates/where.md" for s in result.skipped)
    assert ticks[-1] == (len(seen), len(seen))  # progress per file, from any mapper
    paths = {p for p, _ in stored(store, "sample-docs").values()}
    assert "content/docs/templates/where.md" not in paths and len(paths) == 6
    physical = store.physical_name("sample-docs")
    assert [f.path for f in store.catalog.files(physical, FAILED)] == [
        "content/docs/templates/where.md"
    ]
    (last,) = store.catalog.runs("sample-docs", limit=1)
    assert last["outcome"] == "failed" and last["counts"]["files_failed"] == 1
    assert not run(store.get_collection_metadata("sample-docs")).get("commit_hash")

    again = run(index_repository(repo_of(parent), store, store.settings))  # in-process repairs
    assert again.completed and again.mode == "full"
    assert len({p for p, _ in stored(store, "sample-docs").values()}) == 7


def test_an_exception_during_a_run_closes_the_catalog_run_as_failed(docs, store, monkeypatch):
    import hetriever.index.indexing as indexing

    async def broken(*args, **kwargs):
        raise RuntimeError("disk vanished")

    monkeypatch.setattr(indexing, "finish_run", broken)
    parent, _ = docs
    with pytest.raises(RuntimeError, match="disk vanished"):
        run(index_repository(repo_of(parent), store, store.settings))
    (last,) = store.catalog.runs("sample-docs", limit=1)
    assert last["outcome"] == "failed" and "disk vanished" in last["error"]
