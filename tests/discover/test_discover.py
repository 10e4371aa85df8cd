"""discover: real git repositories (and submodules) built in tmp_path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from hetriever.core.errors import InvalidRepositoryNameError, SourceError
from hetriever.core.models import ChangeKind, FileChange
from hetriever.core.names import as_given, repository_name
from hetriever.discover.changes import (
    compute_change_set,
    head_commit,
    is_dirty,
    list_content_files,
)
from hetriever.discover.git_objects import SkipFile, read_content_file, read_content_files
from hetriever.discover.repositories import (
    Repository,
    check_usable,
    discover_repositories,
    select_repositories,
    validate_repository_name,
)
from tests.support.helpers import (
    add_submodule,
    commit_all,
    git,
    init_repo,
    make_parent_with_submodule,
    update_submodule,
    write_files,
)

A, M, D, R = ChangeKind.ADDED, ChangeKind.MODIFIED, ChangeKind.DELETED, ChangeKind.RENAMED

PAGE = "---\ntitle: {t}\n---\n\n# {t}\n\nSome text about {t}.\n"


def page(title: str) -> str:
    return PAGE.format(t=title)


def doc_repo(tmp: Path, name: str = "site-docs", files: dict | None = None) -> tuple[Path, str]:
    path = init_repo(tmp / name)
    write_files(
        path,
        files
        or {
            "content/_index.md": page("Home"),
            "content/guide/install.md": page("Install"),
            "content/guide/usage.md": page("Usage"),
            "README.md": "not content",
        },
    )
    return path, commit_all(path, "v1")


def as_repo(path: Path, content_dir: str = "content") -> Repository:
    return Repository(name=path.name, path=path, content_dir=content_dir)


# --- names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["abc", "hugo-docs", "a1-", "0-9", "x" * 63])
def test_valid_names(name):
    assert validate_repository_name(name, "docs/x") == name


@pytest.mark.parametrize(
    "name", ["ab", "x" * 64, "Hugo-docs", "hugo_docs", "hugo.docs", "hugo docs", "", "héllo"]
)
def test_invalid_names_name_the_path_and_rule(name):
    with pytest.raises(InvalidRepositoryNameError) as err:
        validate_repository_name(name, "docs/some-path")
    assert "docs/some-path" in str(err.value)
    assert "^[a-z0-9-]+$" in str(err.value) and "3..63" in str(err.value)


# --- discovery layouts ------------------------------------------------------------------------


def test_parent_with_submodules(tmp_path):
    zeta, _ = doc_repo(tmp_path / "src", "zeta-docs")
    alpha, _ = doc_repo(tmp_path / "src", "alpha-docs")
    parent = make_parent_with_submodule(tmp_path, zeta, "zeta-docs")
    add_submodule(parent, alpha, "docs/nested/alpha-docs")

    repos = discover_repositories(
        parent, content_dir="content/en", urls={"alpha-docs": "https://example.org/alpha.git"}
    )

    assert [r.name for r in repos] == ["alpha-docs", "zeta-docs"]
    alpha_repo, zeta_repo = repos
    assert alpha_repo.path == (parent / "docs/nested/alpha-docs").resolve()
    assert alpha_repo.url == "https://example.org/alpha.git"  # override wins
    assert zeta_repo.url == str(zeta)  # from .gitmodules
    assert all(r.content_dir == "content/en" for r in repos)


def test_the_branch_a_submodule_follows_comes_from_gitmodules(tmp_path):
    zeta, _ = doc_repo(tmp_path / "src", "zeta-docs")
    alpha, _ = doc_repo(tmp_path / "src", "alpha-docs")
    parent = make_parent_with_submodule(tmp_path, zeta, "zeta-docs")
    git(parent, "submodule", "add", "-q", str(alpha), "docs/alpha-docs")
    git(parent, "config", "--file", ".gitmodules", "submodule.docs/zeta-docs.branch", "release")
    assert {r.name: r.branch for r in discover_repositories(parent)} == {
        "alpha-docs": "",
        "zeta-docs": "release",
    }  # "": the remote's default branch

    # "." is git's "the parent's current branch" (`git submodule update --remote`)
    git(parent, "config", "--file", ".gitmodules", "submodule.docs/alpha-docs.branch", ".")
    git(parent, "checkout", "-q", "-b", "stable")
    assert {r.name: r.branch for r in discover_repositories(parent)}["alpha-docs"] == "stable"
    git(parent, "checkout", "-q", "--detach")  # as CI checks a commit out: no branch to name
    with capture_logs() as logs:
        assert {r.name: r.branch for r in discover_repositories(parent)}["alpha-docs"] == ""
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
        "submodule_branch_unresolved"
    ]


def test_directory_of_git_repos(tmp_path):
    root = tmp_path / "root"
    doc_repo(root, "zeta-docs")
    alpha, _ = doc_repo(root, "alpha-docs")
    git(alpha, "remote", "add", "origin", "https://example.org/alpha.git")
    (root / "notes").mkdir()  # not a git repo: ignored
    (root / "README.txt").write_text("x")

    repos = discover_repositories(root)

    assert [(r.name, r.url) for r in repos] == [
        ("alpha-docs", "https://example.org/alpha.git"),
        ("zeta-docs", ""),
    ]
    assert repos[1].path == (root / "zeta-docs").resolve()


def test_configured_repositories_follow_the_settings_and_the_names_asked_for(tmp_path):
    from hetriever.core.config import Settings
    from hetriever.core.errors import RepositoryNotFoundError
    from hetriever.discover.repositories import configured_repositories

    root = tmp_path / "root"
    doc_repo(root, "zeta-docs")
    doc_repo(root, "alpha-docs")
    settings = Settings(
        docs_root=root,
        content_dir="content/en",
        repository_urls={"zeta-docs": "https://example.org/zeta.git"},
    )

    repos = configured_repositories(settings)
    assert [(r.name, r.url, r.content_dir) for r in repos] == [
        ("alpha-docs", "", "content/en"),
        ("zeta-docs", "https://example.org/zeta.git", "content/en"),
    ]
    assert [r.name for r in configured_repositories(settings, ["zeta-docs"])] == ["zeta-docs"]
    with pytest.raises(RepositoryNotFoundError, match="unknown repositories: beta-docs"):
        configured_repositories(settings, ["beta-docs", "zeta-docs"])


def test_docs_root_is_itself_a_repo(tmp_path):
    path, _ = doc_repo(tmp_path, "single-site")
    repos = discover_repositories(path, urls={"single-site": "u"})
    assert [(r.name, r.path, r.url) for r in repos] == [("single-site", path.resolve(), "u")]


def test_missing_docs_root(tmp_path):
    with pytest.raises(SourceError) as err:
        discover_repositories(tmp_path / "nope")
    assert "nope" in str(err.value) and err.value.hint


def test_directory_without_repos(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="no git repositories"):
        discover_repositories(tmp_path / "empty")


def test_invalid_name_in_directory_layout(tmp_path):
    doc_repo(tmp_path / "root", "ab")  # too short, whatever its characters
    with pytest.raises(InvalidRepositoryNameError, match="'ab'.*3..63"):
        discover_repositories(tmp_path / "root")


def test_an_invalid_name_beside_good_repositories_is_that_repositorys_problem(tmp_path):
    doc_repo(tmp_path / "root", "ab")
    doc_repo(tmp_path / "root", "good-docs")
    bad, good = discover_repositories(tmp_path / "root")
    assert (bad.name, good.name, good.problem) == ("ab", "good-docs", "")
    with pytest.raises(SourceError, match="'ab'.*is invalid"):
        check_usable(bad)


@pytest.mark.parametrize(
    "directory,name",
    [
        ("hugoDocs", "hugodocs"),
        ("opentelemetry.io", "opentelemetry-io"),
        ("Bad_Name", "bad-name"),
        ("my docs (v2)", "my-docs-v2"),
        ("héllo-docs", "hello-docs"),
        ("..docs..", "docs"),
        ("docs.v2", "docs-v2"),
        # valid names are kept as they are: an index already named so keeps its name
        ("a1-", "a1-"),
        ("hugo-docs", "hugo-docs"),
        # names that cannot be made valid stay as written, for the error to name them
        ("a!", "a!"),
        ("日本", "日本"),
        ("Ab", "Ab"),
    ],
)
def test_a_directory_name_becomes_a_repository_name(directory, name):
    assert repository_name(directory) == name


def test_names_as_given_stand_for_the_repository_their_directory_names():
    assert as_given(["opentelemetry.io", "hugo-docs", "ab"]) == [
        "opentelemetry-io",
        "hugo-docs",
        "ab",
    ]
    assert as_given(None) is None and as_given([]) == []
    assert as_given([7, "日本"]) == [7, "日本"]  # left for the name checks to refuse


def test_submodules_in_directories_named_after_their_remotes_are_indexable(tmp_path):
    # `git submodule add <url>` names the directory after the remote: `hugoDocs`,
    # `opentelemetry.io` (the real upstream names of the two corpora).
    hugo, _ = doc_repo(tmp_path / "src", "hugoDocs")
    otel, _ = doc_repo(tmp_path / "src", "opentelemetry.io")
    parent = make_parent_with_submodule(tmp_path, hugo, "hugoDocs")
    add_submodule(parent, otel, "docs/opentelemetry.io")

    with capture_logs() as logs:
        repos = discover_repositories(parent)

    assert [(r.name, r.path.name, r.problem) for r in repos] == [
        ("hugodocs", "hugoDocs", ""),
        ("opentelemetry-io", "opentelemetry.io", ""),
    ]
    named = [e for e in logs if e["event"] == "repository_named"]
    assert {(e["directory"], e["repository"]) for e in named} == {
        ("hugoDocs", "hugodocs"),
        ("opentelemetry.io", "opentelemetry-io"),
    }
    # either name selects it
    assert [r.name for r in select_repositories(repos, ["opentelemetry.io"])] == [
        "opentelemetry-io"
    ]
    assert [r.name for r in select_repositories(repos, ["hugodocs"])] == ["hugodocs"]


def test_two_directories_with_one_name_fail_alone_naming_both(tmp_path):
    doc_repo(tmp_path / "root", "site.docs")
    doc_repo(tmp_path / "root", "site-docs")
    doc_repo(tmp_path / "root", "other-docs")
    repos = discover_repositories(tmp_path / "root")
    assert [r.name for r in repos] == ["other-docs", "site-docs"]
    other, same = repos
    assert other.problem == ""
    assert "all named 'site-docs'" in same.problem and "site.docs" in same.problem
    assert "rename all but one" in same.problem and not same.path.exists()


def test_duplicate_names_fail_alone(tmp_path):
    src, _ = doc_repo(tmp_path / "src", "same-docs")
    parent = make_parent_with_submodule(tmp_path, src, "same-docs")
    add_submodule(parent, src, "other/same-docs")
    (repo,) = discover_repositories(parent)
    assert "same-docs" in repo.problem and "other/same-docs" in repo.problem


def _parent_with_gitmodules(tmp: Path, sub_path: str) -> Path:
    parent = init_repo(tmp / "parent")
    write_files(
        parent,
        {".gitmodules": f'[submodule "evil"]\n\tpath = {sub_path}\n\turl = https://x.invalid\n'},
    )
    commit_all(parent, "hand-written .gitmodules")
    return parent


@pytest.mark.parametrize(
    "sub_path", ["../outside-docs", "docs/../../outside-docs", "/tmp/abs-docs"]
)
def test_gitmodules_path_outside_parent_is_rejected(tmp_path, sub_path):
    doc_repo(tmp_path, "outside-docs")  # a real repo really sits at ../outside-docs
    parent = _parent_with_gitmodules(tmp_path, sub_path)
    (repo,) = discover_repositories(parent)  # kept, so it fails alone
    with pytest.raises(SourceError, match="outside the parent"):
        head_commit(repo)


def test_gitmodules_path_through_symlink_is_rejected(tmp_path):
    doc_repo(tmp_path / "elsewhere", "linked-docs")
    parent = _parent_with_gitmodules(tmp_path, "docs/escape/linked-docs")
    (parent / "docs").mkdir()
    os.symlink(tmp_path / "elsewhere", parent / "docs" / "escape")
    (repo,) = discover_repositories(parent)  # kept, so it fails alone
    with pytest.raises(SourceError, match="outside the parent"):
        head_commit(repo)


def test_uninitialised_submodule(tmp_path):
    src, _ = doc_repo(tmp_path / "src", "lazy-docs")
    parent = make_parent_with_submodule(tmp_path, src, "lazy-docs")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(parent), str(clone))  # no --recurse-submodules
    (repo,) = discover_repositories(clone)
    with pytest.raises(SourceError) as err:
        head_commit(repo)
    assert "lazy-docs" in str(err.value)
    assert "git submodule update --init" in str(err.value)


# --- commits, dirtiness, listing ---------------------------------------------------------------


def test_head_commit_detached_submodule(tmp_path):
    src, c1 = doc_repo(tmp_path / "src", "sub-docs")
    write_files(src, {"content/guide/usage.md": page("Usage v2")})
    c2 = commit_all(src, "v2")
    parent = make_parent_with_submodule(tmp_path, src, "sub-docs")
    [repo] = discover_repositories(parent)
    assert head_commit(repo) == c2
    update_submodule(parent, "sub-docs", c1)  # leaves the submodule on a detached HEAD
    assert head_commit(repo) == c1
    assert len(c1) == 40


def test_head_commit_of_non_repo(tmp_path):
    with pytest.raises(SourceError):
        head_commit(Repository(name="not-a-repo", path=tmp_path))


def test_list_content_files(tmp_path):
    path, c1 = doc_repo(
        tmp_path,
        files={
            "content/b.md": "b",
            "content/a/Upper.MD": "u",
            "content/c.markdown": "c",
            "content/d.txt": "not md",
            "content/img.png": b"\x89PNG\0",
            "docs/x.md": "outside",
            "contentious/y.md": "prefix only",
            "README.md": "root",
        },
    )
    assert list_content_files(as_repo(path), c1) == [
        "content/a/Upper.MD",
        "content/b.md",
        "content/c.markdown",
    ]
    assert list_content_files(as_repo(path, content_dir="content/a"), c1) == ["content/a/Upper.MD"]


def test_is_dirty_only_for_content_files(tmp_path):
    path, _ = doc_repo(tmp_path)
    repo = as_repo(path)
    assert not is_dirty(repo)
    write_files(path, {"content/notes.txt": "x", "README.md": "changed", "other/new.md": "x"})
    assert not is_dirty(repo)  # untracked non-md, and md outside content
    write_files(path, {"content/guide/new/deep.md": "untracked"})
    assert is_dirty(repo)
    (path / "content/guide/new/deep.md").unlink()
    write_files(path, {"content/guide/usage.md": "edited"})
    assert is_dirty(repo)
    git(path, "add", "content/guide/usage.md")  # staged counts too
    assert is_dirty(repo)
    git(path, "reset", "-q", "--hard")
    git(path, "mv", "content/guide/usage.md", "content/guide/usage.txt")  # staged rename
    assert is_dirty(repo)


# --- change sets ------------------------------------------------------------------------------


def test_noop_when_commit_unchanged(tmp_path):
    path, c1 = doc_repo(tmp_path)
    cs = compute_change_set(as_repo(path), c1)
    assert (cs.mode, cs.changes, cs.old_commit, cs.new_commit) == ("noop", [], c1, c1)


def test_full_when_never_indexed_or_forced(tmp_path):
    path, c1 = doc_repo(tmp_path)
    expected = [
        FileChange(A, p)
        for p in ["content/_index.md", "content/guide/install.md", "content/guide/usage.md"]
    ]
    first = compute_change_set(as_repo(path), None)
    assert (first.mode, first.changes, first.old_commit) == ("full", expected, None)
    forced = compute_change_set(as_repo(path), c1, force_full=True)
    assert (forced.mode, forced.changes) == ("full", expected)


def test_unknown_last_commit_means_full_with_warning(tmp_path):
    path, c1 = doc_repo(tmp_path)
    with capture_logs() as logs:
        cs = compute_change_set(as_repo(path), "0123456789abcdef" * 2 + "01234567")
    assert cs.mode == "full" and len(cs.changes) == 3
    assert any(e["event"] == "last_commit_unknown" and e["log_level"] == "warning" for e in logs)


def test_rewritten_history_means_full(tmp_path):
    path, c1 = doc_repo(tmp_path)
    git(path, "commit", "-q", "--amend", "-m", "rewritten")
    git(path, "reflog", "expire", "--expire=now", "--all")
    git(path, "gc", "-q", "--prune=now")
    cs = compute_change_set(as_repo(path), c1)
    assert cs.mode == "full" and cs.new_commit != c1


def test_incremental_add_modify_delete_rename(tmp_path):
    path, c1 = doc_repo(tmp_path)
    long_page = page("Usage") + "".join(f"Line {i} of the usage guide.\n" for i in range(30))
    write_files(path, {"content/guide/usage.md": long_page})
    c2 = commit_all(path, "longer usage")
    write_files(
        path,
        {
            "content/new.md": page("New"),  # A
            "content/guide/install.md": page("Install, revised"),  # M
            "README.md": "changed, outside content",  # ignored
            "content/diagram.svg": "<svg/>",  # ignored
        },
    )
    git(path, "rm", "-q", "content/_index.md")  # D
    git(path, "mv", "content/guide/usage.md", "content/guide/using.md")  # R
    c3 = commit_all(path, "v3")

    cs = compute_change_set(as_repo(path), c2)

    assert cs.mode == "incremental" and (cs.old_commit, cs.new_commit) == (c2, c3)
    assert sorted(cs.changes, key=lambda c: c.path) == [
        FileChange(D, "content/_index.md"),
        FileChange(M, "content/guide/install.md"),
        FileChange(R, "content/guide/using.md", old_path="content/guide/usage.md"),
        FileChange(A, "content/new.md"),
    ]
    assert cs.counts() == {"added": 1, "modified": 1, "deleted": 1, "renamed": 1}
    assert sorted(cs.paths_to_delete()) == ["content/_index.md", "content/guide/usage.md"]
    # an explicit new_commit diffs to that commit, not HEAD
    back = compute_change_set(as_repo(path), c1, new_commit=c2)
    assert back.changes == [FileChange(M, "content/guide/usage.md")]


def test_renames_across_the_content_boundary(tmp_path):
    def body(word: str) -> str:  # distinct per file, so git pairs each file with itself
        return "".join(f"{word} paragraph {i}, {word * (i % 5 + 1)}.\n" for i in range(20))

    names = [
        "content/to-text.md",
        "content/from-text.txt",
        "drafts/incoming.md",
        "content/outgoing.md",
        "content/renamed.markdown",
    ]
    path, c1 = doc_repo(
        tmp_path,
        files={n: body(w) for n, w in zip(names, ["alpha", "bravo", "charlie", "delta", "echo"])},
    )
    git(path, "mv", "content/to-text.md", "content/to-text.txt")
    git(path, "mv", "content/from-text.txt", "content/from-text.md")
    git(path, "mv", "drafts/incoming.md", "content/incoming.md")
    git(path, "mv", "content/outgoing.md", "drafts/outgoing.md")
    git(path, "mv", "content/renamed.markdown", "content/Renamed.MD")
    commit_all(path, "shuffle")
    # the independent diff does see the in-content renames as renames
    raw = git(path, "diff", "--name-status", "-M", c1, "HEAD", "--", "content")
    assert "R100\tcontent/to-text.md\tcontent/to-text.txt" in raw

    cs = compute_change_set(as_repo(path), c1)

    assert sorted(cs.changes, key=lambda c: c.path) == [
        FileChange(R, "content/Renamed.MD", old_path="content/renamed.markdown"),
        FileChange(A, "content/from-text.md"),
        FileChange(A, "content/incoming.md"),
        FileChange(D, "content/outgoing.md"),
        FileChange(D, "content/to-text.md"),
    ]


def test_type_change_is_modified(tmp_path):
    path, c1 = doc_repo(tmp_path)
    (path / "content/guide/usage.md").unlink()
    os.symlink("install.md", path / "content/guide/usage.md")
    commit_all(path, "usage becomes a link")
    cs = compute_change_set(as_repo(path), c1)
    assert cs.changes == [FileChange(M, "content/guide/usage.md")]


def test_dirty_tree_is_reported_but_ignored(tmp_path):
    path, c1 = doc_repo(tmp_path)
    write_files(
        path,
        {"content/guide/install.md": "uncommitted edit", "content/untracked.md": "not committed"},
    )
    with capture_logs() as logs:
        cs = compute_change_set(as_repo(path), c1)
    assert cs.dirty and cs.mode == "noop" and cs.changes == []
    assert any(e["event"] == "uncommitted_changes_ignored" for e in logs)
    full = compute_change_set(as_repo(path), None)
    assert "content/untracked.md" not in full.paths_to_index() and full.dirty
    text = read_content_file(as_repo(path), "content/guide/install.md", c1, max_bytes=10_000)
    assert text == page("Install")


def test_unknown_new_commit_is_an_error(tmp_path):
    path, _ = doc_repo(tmp_path)
    with pytest.raises(SourceError, match="not in repository"):
        compute_change_set(as_repo(path), None, new_commit="f" * 40)


# --- reading blobs -----------------------------------------------------------------------------


@pytest.fixture
def blob_repo(tmp_path):
    outside = tmp_path / "secret.md"
    outside.write_text("outside the repository")
    path = init_repo(tmp_path / "blob-docs")
    write_files(
        path,
        {
            "content/plain.md": "plain\n",
            "content/crlf.md": b"one\r\ntwo\r\nthree\rfour\n",
            "content/bom.md": b"\xef\xbb\xbf---\ntitle: BOM\n---\nbody\r\n",
            "content/binary.md": b"text then \x00 nul",
            "content/latin1.md": "caf\u00e9 cr\u00e8me".encode("latin-1"),
            "content/big.md": "x" * 5000,
            "content/unicode.md": "Grüße, 世界\n",
            "shared/snippet.md": "shared snippet\n",
        },
    )
    links = {
        "content/link-inside.md": "plain.md",
        "content/link-up.md": "../shared/snippet.md",
        "content/link-chain.md": "link-inside.md",
        "content/link-out-relative.md": "../../secret.md",
        "content/link-out-absolute.md": str(outside),
        "content/link-dangling.md": "does-not-exist.md",
    }
    for link, target in links.items():
        os.symlink(target, path / link)
    return as_repo(path), commit_all(path, "blobs")


def read(blob_repo, path, max_bytes=100_000):
    repo, commit = blob_repo
    return read_content_file(repo, path, commit, max_bytes=max_bytes)


def skip_reason(blob_repo, path, max_bytes=100_000) -> str:
    with pytest.raises(SkipFile) as err:
        read(blob_repo, path, max_bytes)
    return err.value.reason


def test_plain_and_unicode(blob_repo):
    assert read(blob_repo, "content/plain.md") == "plain\n"
    assert read(blob_repo, "content/unicode.md") == "Grüße, 世界\n"


def test_crlf_and_cr_become_lf(blob_repo):
    assert read(blob_repo, "content/crlf.md") == "one\ntwo\nthree\nfour\n"


def test_bom_is_stripped(blob_repo):
    assert read(blob_repo, "content/bom.md") == "---\ntitle: BOM\n---\nbody\n"


def test_binary_and_non_utf8_are_skipped(blob_repo):
    assert "binary" in skip_reason(blob_repo, "content/binary.md")
    assert "UTF-8" in skip_reason(blob_repo, "content/latin1.md")


def test_size_limit(blob_repo):
    assert read(blob_repo, "content/big.md", max_bytes=5000) == "x" * 5000
    assert "too large" in skip_reason(blob_repo, "content/big.md", max_bytes=4999)


def test_symlinks_inside_are_followed(blob_repo):
    assert read(blob_repo, "content/link-inside.md") == "plain\n"
    assert read(blob_repo, "content/link-chain.md") == "plain\n"  # two hops
    assert read(blob_repo, "content/link-up.md") == "shared snippet\n"


@pytest.mark.parametrize("link", ["content/link-out-relative.md", "content/link-out-absolute.md"])
def test_symlinks_out_of_the_repository_are_skipped(blob_repo, link):
    assert "outside the repository" in skip_reason(blob_repo, link)


def test_dangling_symlink_and_missing_file(blob_repo):
    assert "dangling" in skip_reason(blob_repo, "content/link-dangling.md")
    assert "missing" in skip_reason(blob_repo, "content/nope.md")
    assert "not a file" in skip_reason(blob_repo, "content")


@pytest.mark.parametrize(
    "bad",
    [
        "../secret.md",
        "/etc/passwd",
        "content/../content/plain.md",
        "./content/plain.md",
        "content//plain.md",
        "content/plain.md/",
        "",
        "content/a\nb.md",
    ],
)
def test_unsafe_paths_are_skipped(blob_repo, bad):
    assert skip_reason(blob_repo, bad)


def test_reads_git_objects_not_the_working_tree(blob_repo):
    repo, c1 = blob_repo
    write_files(repo.path, {"content/plain.md": "edited, uncommitted\n"})
    assert read(blob_repo, "content/plain.md") == "plain\n"
    commit_all(repo.path, "edit")
    assert (
        read_content_file(repo, "content/plain.md", "HEAD", max_bytes=100)
        == "edited, uncommitted\n"
    )
    assert read(blob_repo, "content/plain.md") == "plain\n"  # still the old commit's blob


@pytest.mark.parametrize("repeat", [1, 6])  # 6x crosses the threshold for reading by blob id
def test_batch_reader_keeps_order_and_stays_in_sync(blob_repo, repeat):
    repo, commit = blob_repo
    paths = [
        "content/big.md",
        "content/plain.md",
        "../bad",
        "content/binary.md",
        "content/nope.md",
        "content/link-out-relative.md",
        "content",
        "content/bom.md",
        "content/link-chain.md",
        "content/latin1.md",
        "shared/snippet.md",
    ] * repeat
    results = list(read_content_files(repo, paths, commit, max_bytes=1000))
    assert [p for p, _ in results] == paths
    texts = {p: r for p, r in results if isinstance(r, str)}
    assert texts == {
        "content/plain.md": "plain\n",
        "content/bom.md": "---\ntitle: BOM\n---\nbody\n",
        "content/link-chain.md": "plain\n",
        "shared/snippet.md": "shared snippet\n",
    }
    reasons = {p: r.reason for p, r in results if isinstance(r, SkipFile)}
    assert set(reasons) == set(paths) - set(texts)
    for path, word in [
        ("content/big.md", "too large"),
        ("content/binary.md", "binary"),
        ("content/nope.md", "missing"),
        ("content", "not a file"),
        ("content/link-out-relative.md", "outside"),
        ("content/latin1.md", "UTF-8"),
    ]:
        assert word in reasons[path]


def test_stopping_early_releases_the_reader(blob_repo):
    repo, commit = blob_repo
    paths = ["content/big.md", "content/plain.md"] * 2000  # more than the pipes buffer
    stream = read_content_files(repo, paths, commit, max_bytes=10_000)
    assert next(stream) == ("content/big.md", "x" * 5000)
    stream.close()  # must not hang on git's unread output
    assert read(blob_repo, "content/plain.md") == "plain\n"


def test_unknown_commit_is_an_error(blob_repo):
    repo, _ = blob_repo
    with pytest.raises(SourceError):
        read_content_file(repo, "content/plain.md", "e" * 40, max_bytes=100)
