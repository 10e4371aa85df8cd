"""Change sets of the real corpora (v1 -> v2), discovered through a parent repo's submodule."""

from __future__ import annotations

import pytest

from hetriever.core.models import ChangeKind, FileChange
from hetriever.discover.changes import compute_change_set, head_commit, list_content_files
from hetriever.discover.git_objects import read_content_files
from hetriever.discover.repositories import discover_repositories
from tests.support.helpers import CORPORA, build_corpus_parent, git, update_submodule

pytestmark = pytest.mark.corpus

# Published in each corpus README: `git diff --name-status -M v1 v2 -- content`, Markdown only.
EXPECTED = {
    "hugo-docs": {
        "counts": {"added": 21, "modified": 513, "deleted": 40, "renamed": 1},
        "rename": (
            "content/en/contribute/documentation.md",
            "content/en/contribute/documentation/index.md",
        ),
        "files": (1011, 992),
    },
    "opentelemetry-io": {
        "counts": {"added": 52, "modified": 151, "deleted": 3, "renamed": 1},
        "rename": ("content/en/docs/zero-code/php.md", "content/en/docs/zero-code/php/auto.md"),
        "files": (719, 768),
    },
}


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def corpus_parent(request, tmp_path_factory):
    """(corpus, parent, v1, v2), built once per corpus for the whole module."""
    corpus = request.param
    parent, v1, v2 = build_corpus_parent(tmp_path_factory.mktemp(corpus), corpus)
    return corpus, parent, v1, v2


def independent_diff(sub, v1: str, v2: str) -> list[FileChange]:
    """The same change set from a plain `git diff` call, parsed here on its own."""
    out = git(
        sub, "-c", "core.quotePath=false", "diff", "--name-status", "-M", v1, v2, "--", "content"
    )
    kinds = {"A": ChangeKind.ADDED, "M": ChangeKind.MODIFIED, "D": ChangeKind.DELETED}
    changes = []
    for line in out.splitlines():
        status, *paths = line.split("\t")
        if not paths[-1].endswith(".md"):
            continue
        if status.startswith("R"):
            changes.append(FileChange(ChangeKind.RENAMED, paths[1], old_path=paths[0]))
        else:
            changes.append(FileChange(kinds[status[0]], paths[0]))
    return changes


def key(change: FileChange) -> tuple:
    return (change.path, change.kind.value, change.old_path or "")


def test_corpus_change_set_through_parent(corpus_parent):
    corpus, parent, v1, v2 = corpus_parent
    [repo] = discover_repositories(parent)
    assert repo.name == corpus

    # the parent pins v1: an index of v1 is a full run of every v1 file
    update_submodule(parent, corpus, v1)
    assert head_commit(repo) == v1
    first = compute_change_set(repo, None)
    assert first.mode == "full" and len(first.changes) == EXPECTED[corpus]["files"][0]
    assert compute_change_set(repo, v1).mode == "noop"

    update_submodule(parent, corpus, v2)
    assert head_commit(repo) == v2
    cs = compute_change_set(repo, v1)

    assert cs.mode == "incremental" and not cs.dirty
    assert (cs.old_commit, cs.new_commit) == (v1, v2)
    assert sorted(cs.changes, key=key) == sorted(independent_diff(repo.path, v1, v2), key=key)
    assert cs.counts() == EXPECTED[corpus]["counts"]
    old, new = EXPECTED[corpus]["rename"]
    assert [c for c in cs.changes if c.kind is ChangeKind.RENAMED] == [
        FileChange(ChangeKind.RENAMED, new, old_path=old)
    ]

    # applying the change set to v1's file list gives exactly v2's file list
    files = set(list_content_files(repo, v1))
    files -= set(cs.paths_to_delete())
    files |= set(cs.paths_to_index())
    assert sorted(files) == list_content_files(repo, v2)
    assert len(files) == EXPECTED[corpus]["files"][1]


def test_corpus_blobs_match_the_files_on_disk(corpus_parent):
    corpus, parent, _, v2 = corpus_parent
    [repo] = discover_repositories(parent)
    paths = list_content_files(repo, v2)
    read = dict(read_content_files(repo, paths, v2, max_bytes=2_000_000))
    assert len(read) == len(paths)
    for path, text in read.items():
        # the corpora are all UTF-8 with LF endings and no BOM: text equals the file on disk
        assert text == (CORPORA / corpus / "v2" / path).read_text(encoding="utf-8"), path
