"""What changed: a repository's checked-out commit, its content files, and the change set
between the last indexed commit and that one.

Finding the repositories lives in `hetriever.discover.repositories`, reading git objects in
`hetriever.discover.git_objects`, running git in `hetriever.discover.git_runner`.
Everything is read from git objects at a given commit, never from the working tree, so what
gets indexed is exactly what was committed; uncommitted edits are only reported (`is_dirty`).
Listing and diffing use one `git ls-tree` / `git diff-tree` call per repository, and reading
many files uses one `git cat-file --batch` process, so a ~1000-file site takes milliseconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from hetriever.core.errors import SourceError
from hetriever.core.logs import get_logger
from hetriever.core.models import ChangeKind, ChangeSet, FileChange, SkippedFile
from hetriever.discover.git_objects import SkipFile, pathspec, read_content_file, tree_entries
from hetriever.discover.git_runner import git_output, is_work_tree_top, run_git
from hetriever.discover.repositories import Repository, check_usable
from hetriever.discover.site import Site, load_site

__all__ = [
    "check_content_dir_present",
    "compute_change_set",
    "head_commit",
    "is_content_file",
    "is_dirty",
    "list_content_files",
    "site_at",
    "undecodable_files",
]

log = get_logger(__name__)

CONTENT_SUFFIXES = (".md", ".markdown")
_GITLINK_MODE = "160000"


# --- commits and change sets --------------------------------------------------------------


def _resolve_commit(repo: Repository, rev: str) -> str | None:
    """Full sha of `rev` as a commit in `repo`, or None when the repository does not have it."""
    done = run_git(
        repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"
    )
    return (done.text or None) if done.ok else None


def head_commit(repo: Repository) -> str:
    """The full sha checked out in the repository's working tree (detached HEAD is fine);
    for a version, the commit its ref names (resolved before the run, else now)."""
    check_usable(repo)
    if repo.version is not None:
        from hetriever.discover.versions import ref_commit

        return repo.commit or ref_commit(repo)
    if not is_work_tree_top(Path(repo.path)):
        raise SourceError(
            f"{repo.path} is not a git repository",
            hint="check docs_root, or run `git submodule update --init`",
        )
    done = run_git(repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if not done.ok:  # HEAD points at a branch with no commits yet
        raise SourceError(
            f"repository {repo.name} has no commits", hint="commit the documentation first"
        )
    return done.text


def is_content_file(path: str, content_dir: str) -> bool:
    """A Markdown file (.md / .markdown, any case) under `content_dir`."""
    if content_dir not in ("", ".") and not path.startswith(content_dir.rstrip("/") + "/"):
        return False
    return path.lower().endswith(CONTENT_SUFFIXES)


def utf8_name(path: str) -> bool:
    """Whether a path (decoded with surrogateescape) is valid UTF-8: only such names can be
    stored (SQLite, Chroma and JSON all need UTF-8)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable_name(path: str) -> str:
    """A path with its undecodable bytes shown as \\xNN escapes."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def list_content_files(repo: Repository, commit: str) -> list[str]:
    """Sorted repo-relative paths of the content files in the tree at `commit` (names that
    are not valid UTF-8 are left out; `undecodable_files` lists them)."""
    sha = _resolve_commit(repo, commit)
    if sha is None:
        raise SourceError(
            f"commit {commit} is not in repository {repo.name}",
            hint="fetch the repository or pass a commit it has",
        )
    return sorted(
        path
        for path, (_, kind, _) in tree_entries(repo, sha).items()
        if kind == "blob" and is_content_file(path, repo.content_dir) and utf8_name(path)
    )


def undecodable_files(repo: Repository, sha: str) -> list[SkippedFile]:
    """Content files at `sha` whose names are not valid UTF-8, as skips with a reason."""
    return [
        SkippedFile(printable_name(path), "file name is not valid UTF-8")
        for path, (_, kind, _) in sorted(tree_entries(repo, sha).items())
        if kind == "blob" and is_content_file(path, repo.content_dir) and not utf8_name(path)
    ]


def check_content_dir_present(repo: Repository, sha: str) -> None:
    """A content directory missing at the commit is an error, never "every file deleted"."""
    if repo.content_dir in ("", "."):
        return
    try:
        kind = git_output(repo, "cat-file", "-t", f"{sha}:{repo.content_dir}").strip()
    except SourceError:
        kind = b""
    if kind != b"tree":
        raise SourceError(
            f"content directory {repo.content_dir!r} does not exist at commit {sha[:12]} of "
            f"{repo.name}; nothing was changed",
            hint="check content_dir (HETRIEVER_CONTENT_DIR) for a typo, or that the commit "
            "is the one meant",
        )


def is_dirty(repo: Repository) -> bool:
    """Whether content files have uncommitted changes (staged, unstaged or untracked)."""
    raw = git_output(
        repo,
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--ignore-submodules=all",
        *pathspec(repo),
    )
    # Records are "XY path"; a rename or copy is followed by a bare record with the old path.
    records = iter(raw.split(b"\0"))
    for record in records:
        if len(record) < 4:
            continue
        paths = [record[3:]]
        if b"R" in record[:2] or b"C" in record[:2]:
            paths.append(next(records, b""))
        if any(
            is_content_file(p.decode("utf-8", "surrogateescape"), repo.content_dir) for p in paths
        ):
            return True
    return False


def compute_change_set(
    repo: Repository,
    last_commit: str | None,
    *,
    force_full: bool = False,
    new_commit: str | None = None,
) -> ChangeSet:
    """What to do to bring the repository's index from `last_commit` to `new_commit` (HEAD)."""
    new = _resolve_commit(repo, new_commit) if new_commit else head_commit(repo)
    if new is None:
        raise SourceError(
            f"commit {new_commit} is not in repository {repo.name}",
            hint="fetch the repository or pass a commit it has",
        )
    old = _resolve_commit(repo, last_commit) if last_commit else None
    if last_commit and old is None and not force_full:
        log.warning(
            "last_commit_unknown",
            repository=repo.name,
            last_commit=last_commit,
            action="full reindex",
            why="history rewritten or repository replaced",
        )

    # A version is read at its ref: the working tree's edits are the base's, not its own.
    dirty = is_dirty(repo) if repo.version is None else False
    if dirty:
        log.warning(
            "uncommitted_changes_ignored",
            repository=repo.name,
            path=str(repo.path),
            content_dir=repo.content_dir,
        )

    mode: Literal["full", "incremental", "noop"]
    if old is not None and old == new and not force_full:
        mode, changes = "noop", []
    elif old is None or force_full:
        mode = "full"
        changes = [FileChange(ChangeKind.ADDED, p) for p in list_content_files(repo, new)]
    else:
        mode, changes = "incremental", _diff(repo, old, new)

    if mode != "noop":
        check_content_dir_present(repo, new)
    change_set = ChangeSet(
        repository=repo.name,
        old_commit=old or last_commit,
        new_commit=new,
        mode=mode,
        changes=changes,
        dirty=dirty,
        skipped=undecodable_files(repo, new) if mode != "noop" else [],
    )
    for skipped in change_set.skipped:
        log.warning("file_skipped", repository=repo.name, path=skipped.path, reason=skipped.reason)
    log.info(
        "change_set",
        repository=repo.name,
        mode=mode,
        old_commit=last_commit,
        new_commit=new,
        dirty=dirty,
        **change_set.counts(),
    )
    return change_set


def _diff(repo: Repository, old: str, new: str) -> list[FileChange]:
    """`git diff --name-status -M old new -- content_dir`, as content-file changes.

    diff-tree is the plumbing form of that diff (not affected by user diff config). Above git's
    rename limit it reports renames as delete + add, which indexes to the same result.
    """
    raw = git_output(
        repo, "diff-tree", "-r", "-z", "--raw", "-M", "--no-ext-diff", old, new, *pathspec(repo)
    )
    fields = raw.split(b"\0")
    changes: list[FileChange] = []

    def is_content(path: str) -> bool:
        return is_content_file(path, repo.content_dir) and utf8_name(path)

    i = 0
    while i < len(fields):
        meta = fields[i].decode()
        if not meta.startswith(":"):
            i += 1
            continue
        old_mode, new_mode, _, _, status = meta[1:].split(" ")
        letter = status[0]
        if letter in "RC":
            src = fields[i + 1].decode("utf-8", "surrogateescape")
            dst = fields[i + 2].decode("utf-8", "surrogateescape")
            i += 3
        else:
            src = dst = fields[i + 1].decode("utf-8", "surrogateescape")
            i += 2
        # Submodules (gitlinks) are never content files, whatever their name.
        src_ok = is_content(src) and old_mode != _GITLINK_MODE
        dst_ok = is_content(dst) and new_mode != _GITLINK_MODE
        if letter == "A" and dst_ok:
            changes.append(FileChange(ChangeKind.ADDED, dst))
        elif letter in "MT":
            if src_ok and dst_ok:
                changes.append(FileChange(ChangeKind.MODIFIED, dst))
            elif dst_ok:  # e.g. a submodule replaced by a file
                changes.append(FileChange(ChangeKind.ADDED, dst))
            elif src_ok:
                changes.append(FileChange(ChangeKind.DELETED, src))
        elif letter == "D" and src_ok:
            changes.append(FileChange(ChangeKind.DELETED, src))
        elif letter == "R":
            if src_ok and dst_ok:
                changes.append(FileChange(ChangeKind.RENAMED, dst, old_path=src))
            elif src_ok:
                changes.append(FileChange(ChangeKind.DELETED, src))
            elif dst_ok:
                changes.append(FileChange(ChangeKind.ADDED, dst))
        elif letter == "C" and dst_ok:
            changes.append(FileChange(ChangeKind.ADDED, dst))
    return changes


# Hugo merges config/_default, then the environment's directory: `hugo` builds the published
# site as "production" (`hugo server` runs as "development", which nobody publishes).
SITE_CONFIG_DIRS = ("config/_default", "config/production")
SITE_CONFIG_MAX_BYTES = 1_000_000


def site_at(repo: Repository, commit: str) -> Site:
    """The site configuration at `commit` (hetriever.discover.site): languages, content roots, URL
    prefixes. A repository without one gets today's single-language defaults."""
    sha = _resolve_commit(repo, commit)
    if sha is None:
        raise SourceError(
            f"commit {commit} is not in repository {repo.name}",
            hint="fetch the repository or pass a commit it has",
        )

    def kind(path: str) -> bytes:
        try:
            return git_output(repo, "cat-file", "-t", f"{sha}:{path}").strip()
        except SourceError:
            return b""

    def read(path: str) -> str | None:
        if kind(path) != b"blob":
            return None
        try:
            return read_content_file(repo, path, sha, max_bytes=SITE_CONFIG_MAX_BYTES)
        except SkipFile:
            return None

    listed: list[str] = []
    for config_dir in SITE_CONFIG_DIRS:
        if kind(config_dir) == b"tree":
            out = git_output(repo, "ls-tree", "--name-only", sha, config_dir + "/")
            listed += [p for p in out.decode("utf-8", "replace").splitlines() if p]
    site = load_site(read, listed, lambda path: kind(path) == b"tree", content_dir=repo.content_dir)
    if not site.configured:
        log.warning(
            "site_config_absent",
            repository=repo.name,
            assumed=f"one language ({site.default_lang}), content in {repo.content_dir}",
            hint="add the site's hugo.toml/yaml/json (or config/_default/) to the "
            "repository for its languages and URLs",
        )
    return site
