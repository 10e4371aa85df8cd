"""Documentation repositories, their commits, change sets, and file contents at a commit.

Everything is read from git objects at a given commit, never from the working tree, so what
gets indexed is exactly what was committed; uncommitted edits are only reported (`is_dirty`).
Listing and diffing use one `git ls-tree` / `git diff-tree` call per repository, and reading
many files uses one `git cat-file --batch` process, so a ~1000-file site takes milliseconds.
"""

from __future__ import annotations

import posixpath
import re
import subprocess
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import Literal

import git

from hetriever.errors import (
    InvalidRepositoryNameError,
    RepositoryNotFoundError,
    SourceError,
    SourceSettingError,
)
from hetriever.logs import get_logger
from hetriever.site import Site, load_site
from hetriever.models import ChangeKind, ChangeSet, FileChange, Repository, SkippedFile

__all__ = [
    "SkipFile", "check_path", "compute_change_set", "decode_blob", "discover_repositories",
    "head_commit", "is_content_file", "is_dirty", "list_content_files", "read_content_file",
    "select_repositories",
    "read_content_files", "validate_repository_name",
]

log = get_logger(__name__)

NAME_RE = re.compile(r"^[a-z0-9-]+$")
NAME_MIN, NAME_MAX = 3, 63
CONTENT_SUFFIXES = (".md", ".markdown")
BINARY_SNIFF_BYTES = 8192
UTF8_BOM = b"\xef\xbb\xbf"
_GITLINK_MODE = "160000"
_REGULAR_MODES = ("100644", "100755")
_BLOB_MAP_MIN_PATHS = 32
_SHA_HEADER = re.compile(rb"^([0-9a-f]{40,64}) (\w+) (\d+)$")
# Headers `git cat-file --batch --follow-symlinks` prints instead of an object; each is
# followed by <size> bytes (the object name or the link target) and a newline.
_SYMLINK_FAILURES = {
    b"symlink": "symlink points outside the repository",
    b"dangling": "dangling symlink",
    b"loop": "symlink loop (or too many hops)",
    b"notdir": "symlink path runs through a non-directory",
}


class SkipFile(Exception):
    """A content file that cannot be indexed; `reason` says why (it ends up in the run report)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


# --- names and discovery -------------------------------------------------------------


def validate_repository_name(name: str, path: str | Path) -> str:
    """Return `name` if it fits `^[a-z0-9-]+$` and 3..63 characters, else raise."""
    if not (NAME_MIN <= len(name) <= NAME_MAX) or not NAME_RE.match(name):
        raise InvalidRepositoryNameError(
            f"repository name {name!r} (from {path}) is invalid: it must match ^[a-z0-9-]+$ "
            f"and be {NAME_MIN}..{NAME_MAX} characters long (it is {len(name)})",
            hint="rename the submodule/directory to lower-case letters, digits and dashes",
        )
    return name


def discover_repositories(
    docs_root: Path,
    *,
    content_dir: str = "content",
    urls: dict[str, str] | None = None,
) -> list[Repository]:
    """The documentation repositories under `docs_root`, sorted by name.

    Layouts, tried in order: `docs_root` is a parent repo with `.gitmodules` (its submodules);
    `docs_root` is itself a git repo (just that one); `docs_root` is a plain directory whose
    immediate children are git repos.
    """
    docs_root = Path(docs_root)
    urls = urls or {}
    _check_content_dir(content_dir)
    if not docs_root.is_dir():
        raise SourceSettingError(
            f"documentation root {docs_root} does not exist or is not a directory",
            hint="set docs_root (HETRIEVER_DOCS_ROOT) to a parent repo with .gitmodules, "
            "a git repo, or a directory of git repos",
        )
    root = docs_root.resolve()
    if (root / ".gitmodules").is_file():
        found = _from_gitmodules(root)
    elif (root / ".git").exists():
        found = [(root.name, root, _origin_url(root), "")]
    else:
        found = [
            (child.name, child.resolve(), _origin_url(child), "")
            for child in sorted(root.iterdir())
            if child.is_dir() and not child.name.startswith(".") and (child / ".git").exists()
        ]
        if not found:
            raise SourceSettingError(
                f"no git repositories found in {root}",
                hint="point docs_root at a parent repo with .gitmodules, a git repo, "
                "or a directory whose subdirectories are git repos",
            )

    repos: dict[str, Repository] = {}
    for name, path, url, problem in found:
        validate_repository_name(name, path)
        if name in repos:
            raise SourceSettingError(
                f"two repositories are both named {name!r}: {repos[name].path} and {path}",
                hint="repository names come from the last path component; make them unique",
            )
        repos[name] = Repository(
            name=name, path=path, url=urls.get(name, url), content_dir=content_dir,
            problem=problem,
        )
    return [repos[name] for name in sorted(repos)]


def require_known(names: list[str] | None, known: list[str]) -> None:
    """An unknown repository name is a clear error that lists the known ones."""
    unknown = sorted(set(names or []) - set(known))
    if unknown:
        raise RepositoryNotFoundError(
            f"unknown repositories: {', '.join(unknown)}",
            hint=f"known: {', '.join(sorted(known)) or 'none (run `hetriever ingest` first)'}")


def select_repositories(repos: list[Repository], names: list[str] | None) -> list[Repository]:
    """The named repositories (all when `names` is empty); an unknown name is a clear error."""
    if not names:
        return repos
    require_known(names, [r.name for r in repos])
    return [r for r in repos if r.name in names]


def _from_gitmodules(parent: Path) -> list[tuple[str, Path, str, str]]:
    """(name, checked-out path, url, problem) for each submodule in `parent/.gitmodules`.

    A submodule that cannot be used (a path leading out, not checked out) is kept with its
    problem, so it fails alone and the others are indexed; its path is a placeholder that
    does not exist, so nothing can read through it."""
    try:
        raw = git.Git(parent).execute(
            ["git", "config", "--file", ".gitmodules", "-z", "--get-regexp",
             r"^submodule\..*\.(path|url)$"],
            stdout_as_string=False, strip_newline_in_stdout=False,
        )
    except git.GitCommandError as exc:
        if exc.status == 1:  # no matching keys
            raw = b""
        else:
            raise SourceError(f"cannot read {parent / '.gitmodules'}: {exc.stderr.strip()}",
                              hint="fix the file's syntax (git config format)") from exc
    entries: dict[str, dict[str, str]] = {}
    for record in raw.decode("utf-8", "surrogateescape").split("\0"):
        if not record:
            continue
        key, _, value = record.partition("\n")
        # key is submodule.<name>.path; the name itself may contain dots.
        sub_name, _, field = key[len("submodule."):].rpartition(".")
        entries.setdefault(sub_name, {})[field] = value
    if not any("path" in e for e in entries.values()):
        raise SourceError(f"{parent / '.gitmodules'} lists no submodule paths",
                          hint="add documentation repos with `git submodule add <url> docs/<name>`")

    found = []
    for sub_name, entry in sorted(entries.items()):
        if "path" not in entry:
            log.warning("submodule_without_path", submodule=sub_name, parent=str(parent))
            continue
        name = PurePosixPath(entry["path"]).name or sub_name
        try:
            found.append((name, _submodule_dir(parent, sub_name, entry["path"]),
                          entry.get("url", ""), ""))
        except SourceError as exc:
            log.error("submodule_unusable", submodule=sub_name, error=str(exc))
            found.append((name, parent / ".git" / "unusable-submodule" / name,
                          entry.get("url", ""), str(exc)))
    return found


def check_usable(repo: Repository) -> None:
    """Raise the repository's own problem, if discovery found one."""
    if repo.problem:
        raise SourceError(repo.problem)


def _submodule_dir(parent: Path, sub_name: str, rel: str) -> Path:
    """The submodule's working tree, checked to lie inside `parent` and to be checked out."""
    pure = PurePosixPath(rel)
    target = (parent / rel).resolve()
    inside = target != parent and target.is_relative_to(parent)
    if not rel or pure.is_absolute() or ".." in pure.parts or not inside:
        raise SourceError(
            f"submodule {sub_name!r} has path {rel!r}, which resolves outside the parent "
            f"repository {parent}",
            hint="submodule paths must be relative, without '..' or symlinks leading out",
        )
    try:
        with git.Repo(target) as handle:
            top = Path(handle.working_tree_dir or "").resolve()
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        top = None
    if top != target:
        raise SourceError(
            f"submodule {sub_name!r} at {rel} is not initialised or not checked out",
            hint=f"run `git submodule update --init {rel}` in {parent}",
        )
    return target


def _origin_url(path: Path) -> str:
    try:
        return git.Git(path).execute(["git", "config", "--get", "remote.origin.url"])
    except git.GitCommandError:
        return ""


def _check_content_dir(content_dir: str) -> None:
    if content_dir in ("", "."):
        return
    if content_dir.startswith("/") or posixpath.normpath(content_dir) != content_dir \
            or content_dir.split("/")[0] == "..":
        raise SourceSettingError(
            f"content_dir {content_dir!r} must be a normalised path inside the repository",
            hint='use e.g. "content" or "content/en"',
        )


# --- commits and change sets --------------------------------------------------------------


def _git(repo: Repository, *args: str) -> bytes:
    check_usable(repo)
    try:
        return git.Git(repo.path).execute(
            ["git", *args], stdout_as_string=False, strip_newline_in_stdout=False
        )
    except git.GitCommandError as exc:
        stderr = exc.stderr.strip() if isinstance(exc.stderr, str) else exc.stderr
        raise SourceError(f"git {args[0]} failed in {repo.name} ({repo.path}): {stderr}",
                          hint="check that the repository is intact (`git fsck`)") from exc
    except git.NoSuchPathError as exc:
        raise SourceError(f"repository {repo.name} is missing at {repo.path}",
                          hint="run discovery again or check docs_root") from exc


def _resolve_commit(repo: Repository, rev: str) -> str | None:
    """Full sha of `rev` as a commit in `repo`, or None when the repository does not have it."""
    try:
        out = git.Git(repo.path).execute(
            ["git", "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"]
        )
    except git.GitCommandError:
        return None
    return out.strip() or None


def head_commit(repo: Repository) -> str:
    """The full sha checked out in the repository's working tree (detached HEAD is fine)."""
    check_usable(repo)
    try:
        with git.Repo(repo.path) as handle:
            return handle.head.commit.hexsha
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
        raise SourceError(f"{repo.path} is not a git repository",
                          hint="check docs_root, or run `git submodule update --init`") from exc
    except ValueError as exc:  # HEAD points at a branch with no commits yet
        raise SourceError(f"repository {repo.name} has no commits",
                          hint="commit the documentation first") from exc


def is_content_file(path: str, content_dir: str) -> bool:
    """A Markdown file (.md / .markdown, any case) under `content_dir`."""
    if content_dir not in ("", ".") and not path.startswith(content_dir.rstrip("/") + "/"):
        return False
    return path.lower().endswith(CONTENT_SUFFIXES)


def _pathspec(repo: Repository) -> list[str]:
    return [] if repo.content_dir in ("", ".") else ["--", repo.content_dir]


def _tree_entries(repo: Repository, sha: str) -> dict[str, tuple[str, str, str]]:
    """path -> (mode, type, object sha) for everything under content_dir at commit `sha`."""
    raw = _git(repo, "ls-tree", "-r", "-z", "--full-tree", sha, *_pathspec(repo))
    entries = {}
    for record in raw.split(b"\0"):
        if record:
            meta, _, path_b = record.partition(b"\t")
            mode, kind, obj = meta.decode().split(" ")
            entries[path_b.decode("utf-8", "surrogateescape")] = (mode, kind, obj)
    return entries


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
        raise SourceError(f"commit {commit} is not in repository {repo.name}",
                          hint="fetch the repository or pass a commit it has")
    return sorted(path for path, (_, kind, _) in _tree_entries(repo, sha).items()
                  if kind == "blob" and is_content_file(path, repo.content_dir)
                  and utf8_name(path))


def undecodable_files(repo: Repository, sha: str) -> list[SkippedFile]:
    """Content files at `sha` whose names are not valid UTF-8, as skips with a reason."""
    return [SkippedFile(printable_name(path), "file name is not valid UTF-8")
            for path, (_, kind, _) in sorted(_tree_entries(repo, sha).items())
            if kind == "blob" and is_content_file(path, repo.content_dir)
            and not utf8_name(path)]


def check_content_dir_present(repo: Repository, sha: str) -> None:
    """A content directory missing at the commit is an error, never "every file deleted"."""
    if repo.content_dir in ("", "."):
        return
    try:
        kind = _git(repo, "cat-file", "-t", f"{sha}:{repo.content_dir}").strip()
    except SourceError:
        kind = b""
    if kind != b"tree":
        raise SourceError(
            f"content directory {repo.content_dir!r} does not exist at commit {sha[:12]} of "
            f"{repo.name}; nothing was changed",
            hint="check content_dir (HETRIEVER_CONTENT_DIR) for a typo, or that the commit "
                 "is the one meant")


def is_dirty(repo: Repository) -> bool:
    """Whether content files have uncommitted changes (staged, unstaged or untracked)."""
    raw = _git(repo, "status", "--porcelain=v1", "-z", "--untracked-files=all",
               "--ignore-submodules=all", *_pathspec(repo))
    # Records are "XY path"; a rename or copy is followed by a bare record with the old path.
    records = iter(raw.split(b"\0"))
    for record in records:
        if len(record) < 4:
            continue
        paths = [record[3:]]
        if b"R" in record[:2] or b"C" in record[:2]:
            paths.append(next(records, b""))
        if any(is_content_file(p.decode("utf-8", "surrogateescape"), repo.content_dir)
               for p in paths):
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
        raise SourceError(f"commit {new_commit} is not in repository {repo.name}",
                          hint="fetch the repository or pass a commit it has")
    old = _resolve_commit(repo, last_commit) if last_commit else None
    if last_commit and old is None and not force_full:
        log.warning("last_commit_unknown", repository=repo.name, last_commit=last_commit,
                    action="full reindex", why="history rewritten or repository replaced")

    dirty = is_dirty(repo)
    if dirty:
        log.warning("uncommitted_changes_ignored", repository=repo.name, path=str(repo.path),
                    content_dir=repo.content_dir)

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
    change_set = ChangeSet(repository=repo.name, old_commit=old or last_commit, new_commit=new,
                           mode=mode, changes=changes, dirty=dirty,
                           skipped=undecodable_files(repo, new) if mode != "noop" else [])
    for skipped in change_set.skipped:
        log.warning("file_skipped", repository=repo.name, path=skipped.path,
                    reason=skipped.reason)
    log.info("change_set", repository=repo.name, mode=mode, old_commit=last_commit,
             new_commit=new, dirty=dirty, **change_set.counts())
    return change_set


def _diff(repo: Repository, old: str, new: str) -> list[FileChange]:
    """`git diff --name-status -M old new -- content_dir`, as content-file changes.

    diff-tree is the plumbing form of that diff (not affected by user diff config). Above git's
    rename limit it reports renames as delete + add, which indexes to the same result.
    """
    raw = _git(repo, "diff-tree", "-r", "-z", "--raw", "-M", "--no-ext-diff", old, new,
               *_pathspec(repo))
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


# --- reading content at a commit --------------------------------------------------------------


def check_path(path: str) -> None:
    """Raise SkipFile unless `path` is a normalised repo-relative POSIX path inside the repo."""
    if not path or "\0" in path or "\n" in path:
        raise SkipFile("path is empty or contains a NUL/newline character")
    if path.startswith("/"):
        raise SkipFile("path is absolute")
    if path.split("/")[0] == "..":
        raise SkipFile("path escapes the repository")
    if posixpath.normpath(path) != path:
        raise SkipFile("path is not normalised (., .., // or trailing /)")


def decode_blob(data: bytes) -> str:
    """Blob bytes -> text with LF line endings and no BOM, or SkipFile (binary / not UTF-8)."""
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        raise SkipFile("binary file (NUL byte in the first 8 KiB)")
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM):]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkipFile(f"not valid UTF-8 (byte {exc.start})") from exc
    return text.replace("\r\n", "\n").replace("\r", "\n")


class _BlobReader:
    """One `git cat-file --batch --follow-symlinks` process reading many paths at one commit.

    Requests are written by a thread while responses are read here, so the pipe never waits on
    a round trip per file. git follows in-repository symlinks itself (relative to the link, at
    the same commit, with a bounded number of hops) and reports links that leave the tree
    instead of following them.
    """

    def __init__(self, repo: Repository, commit: str) -> None:
        self.repo = repo
        if not commit or "\n" in commit:
            raise SourceError(f"invalid commit {commit!r} for repository {repo.name}",
                              hint="pass a commit sha")
        self.proc = subprocess.Popen(
            ["git", "cat-file", "--batch", "--follow-symlinks"],
            cwd=repo.path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.writer: threading.Thread | None = None
        # Resolve the commit first, in the same process, so every path is read at one sha.
        self._send(f"{commit}^{{commit}}\n".encode("utf-8", "surrogateescape"))
        try:
            header = self._header()
        except SourceError:
            self.close()
            raise
        match = _SHA_HEADER.match(header)
        if match is None or match.group(2) != b"commit":
            self.close()
            raise SourceError(f"commit {commit} is not in repository {repo.name}",
                              hint="fetch the repository or pass a commit it has")
        self._discard(int(match.group(3)) + 1)
        self.sha = match.group(1).decode()

    def _send(self, data: bytes) -> None:
        assert self.proc.stdin
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):  # git exited, or the reader was closed early
            pass

    def request(self, paths: list[str], blobs: dict[str, str] | None = None) -> None:
        """Queue `paths` (already checked) and close git's input when all are written.

        `blobs` maps paths known to be regular files to their blob ids: asking for a blob id
        skips git's tree walk per path, about three times faster than `<commit>:<path>`.
        Symlinks and unknown paths still go by path, so git resolves (or rejects) them.
        """
        blobs = blobs or {}
        payload = b"".join(
            (blobs[p] + "\n").encode() if p in blobs
            else f"{self.sha}:{p}\n".encode("utf-8", "surrogateescape")
            for p in paths
        )

        def feed() -> None:
            self._send(payload)
            try:
                self.proc.stdin.close()  # type: ignore[union-attr]
            except (BrokenPipeError, ValueError):
                pass

        self.writer = threading.Thread(target=feed, name="cat-file-feed", daemon=True)
        self.writer.start()

    def _header(self) -> bytes:
        assert self.proc.stdout
        header = self.proc.stdout.readline().rstrip(b"\n")
        if not header:
            raise SourceError(f"git cat-file stopped while reading {self.repo.name}",
                              hint="check that the repository is intact (`git fsck`)")
        return header

    def next_text(self, max_bytes: int) -> str:
        """The next queued path's text, or SkipFile."""
        assert self.proc.stdout
        header = self._header()
        match = _SHA_HEADER.match(header)
        if match is None:
            word, _, rest = header.partition(b" ")
            if word in _SYMLINK_FAILURES and rest.isdigit():
                detail = self.proc.stdout.read(int(rest) + 1)[:-1].decode("utf-8", "replace")
                raise SkipFile(f"{_SYMLINK_FAILURES[word]}: {detail}")
            raise SkipFile(f"missing at commit {self.sha[:12]}")
        kind, size = match.group(2).decode(), int(match.group(3))
        if kind != "blob" or size > max_bytes:
            self._discard(size + 1)  # keep the stream in step without holding the bytes
            if kind != "blob":
                raise SkipFile(f"not a file (a {kind})")
            raise SkipFile(f"too large ({size} bytes > max {max_bytes})")
        data = self.proc.stdout.read(size)
        self.proc.stdout.read(1)  # the newline after the contents
        return decode_blob(data)

    def _discard(self, n: int) -> None:
        assert self.proc.stdout
        while n > 0:
            piece = self.proc.stdout.read(min(n, 1 << 20))
            if not piece:
                break
            n -= len(piece)

    def close(self) -> None:
        # Closing stdout first makes git stop even when the caller left responses unread.
        for pipe in (self.proc.stdout, self.proc.stdin):
            try:
                if pipe:
                    pipe.close()
            except (BrokenPipeError, ValueError):
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.writer is not None:
            self.writer.join()


def _path_problem(path: str) -> SkipFile | None:
    try:
        check_path(path)
    except SkipFile as skip:
        return skip
    return None


def read_content_files(
    repo: Repository, paths: Iterable[str], commit: str, max_bytes: int
) -> Iterator[tuple[str, str | SkipFile]]:
    """(path, text or SkipFile) for each path, in order, read at `commit` through one process."""
    paths = list(paths)
    problems = [_path_problem(p) for p in paths]
    reader = _BlobReader(repo, commit)
    try:
        blobs: dict[str, str] = {}
        if len(paths) >= _BLOB_MAP_MIN_PATHS:  # one ls-tree pays off only for many reads
            blobs = {path: obj for path, (mode, kind, obj) in _tree_entries(repo, reader.sha).items()
                     if kind == "blob" and mode in _REGULAR_MODES}
        reader.request([p for p, problem in zip(paths, problems) if problem is None], blobs)
        for path, problem in zip(paths, problems):
            if problem is not None:
                yield path, problem
                continue
            try:
                yield path, reader.next_text(max_bytes)
            except SkipFile as skip:
                yield path, skip
    finally:
        reader.close()


def read_content_file(repo: Repository, path: str, commit: str, *, max_bytes: int) -> str:
    """The text of `path` at `commit` (LF line endings, no BOM), or raise SkipFile."""
    check_path(path)
    for _, result in read_content_files(repo, [path], commit, max_bytes):
        if isinstance(result, SkipFile):
            raise result
        return result
    raise AssertionError("unreachable")


SITE_CONFIG_DIR = "config/_default"
SITE_CONFIG_MAX_BYTES = 1_000_000


def site_at(repo: Repository, commit: str) -> Site:
    """The site configuration at `commit` (hetriever.site): languages, content roots, URL
    prefixes. A repository without one gets today's single-language defaults."""
    sha = _resolve_commit(repo, commit)
    if sha is None:
        raise SourceError(f"commit {commit} is not in repository {repo.name}",
                          hint="fetch the repository or pass a commit it has")

    def kind(path: str) -> bytes:
        try:
            return _git(repo, "cat-file", "-t", f"{sha}:{path}").strip()
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
    if kind(SITE_CONFIG_DIR) == b"tree":
        out = _git(repo, "ls-tree", "--name-only", sha, SITE_CONFIG_DIR + "/")
        listed = [p for p in out.decode("utf-8", "replace").splitlines() if p]
    site = load_site(read, listed, lambda path: kind(path) == b"tree",
                     content_dir=repo.content_dir)
    if not site.configured:
        log.warning("site_config_absent", repository=repo.name,
                    assumed=f"one language ({site.default_lang}), content in {repo.content_dir}",
                    hint="add the site's hugo.toml/yaml/json (or config/_default/) to the "
                         "repository for its languages and URLs")
    return site
