"""Git objects at a commit: listing a tree, reading blobs (git runs through `git_runner`).

Everything is read from git objects, never from the working tree, so what gets indexed is
exactly what was committed. Reading many files uses one `git cat-file --batch` process
(`--follow-symlinks`, so a link inside the repository reads as its target), and listing uses
one `git ls-tree`.
"""

from __future__ import annotations

import posixpath
import re
import subprocess
import threading
import weakref
from collections.abc import Iterable, Iterator

from hetriever.core.errors import SourceError
from hetriever.core.logs import get_logger
from hetriever.discover.git_runner import git_output, start_git
from hetriever.discover.repositories import Repository

log = get_logger(__name__)

BINARY_SNIFF_BYTES = 8192
UTF8_BOM = b"\xef\xbb\xbf"
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


class UnreadableFile(SkipFile):
    """A file the commit's tree lists whose object git cannot read (a corrupt or missing
    object): a read error, never "the file is gone". The per-file step fails the file (its
    old chunks kept, the commit unrecorded, retried next run); it is no skip."""


def pathspec(repo: Repository) -> list[str]:
    return [] if repo.content_dir in ("", ".") else ["--", repo.content_dir]


def tree_entries(repo: Repository, sha: str) -> dict[str, tuple[str, str, str]]:
    """path -> (mode, type, object sha) for everything under content_dir at commit `sha`."""
    raw = git_output(repo, "ls-tree", "-r", "-z", "--full-tree", sha, *pathspec(repo))
    entries = {}
    for record in raw.split(b"\0"):
        if record:
            meta, _, path_b = record.partition(b"\t")
            mode, kind, obj = meta.decode().split(" ")
            entries[path_b.decode("utf-8", "surrogateescape")] = (mode, kind, obj)
    return entries


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
        data = data[len(UTF8_BOM) :]
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
            raise SourceError(
                f"invalid commit {commit!r} for repository {repo.name}", hint="pass a commit sha"
            )
        self.proc = start_git(repo, "cat-file", "--batch", "--follow-symlinks")
        self.writer: threading.Thread | None = None
        # Per queued request, in order: the path when it was asked for by blob id (the tree
        # lists it, so "missing" means git cannot read it), else None.
        self._by_blob: list[str | None] = []
        self._answered = 0
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
            raise SourceError(
                f"commit {commit} is not in repository {repo.name}",
                hint="fetch the repository or pass a commit it has",
            )
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
        self._by_blob.extend(p if p in blobs else None for p in paths)
        payload = b"".join(
            (blobs[p] + "\n").encode() if p in blobs else self._by_path(p) for p in paths
        )

        def feed() -> None:
            self._send(payload)
            try:
                self.proc.stdin.close()  # type: ignore[union-attr]
            except (BrokenPipeError, ValueError):
                pass

        self.writer = threading.Thread(target=feed, name="cat-file-feed", daemon=True)
        self.writer.start()

    def ask(self, path: str) -> None:
        """Queue one path (already checked) and keep git's input open for more."""
        self._by_blob.append(None)
        self._send(self._by_path(path))

    def _by_path(self, path: str) -> bytes:
        return f"{self.sha}:{path}\n".encode("utf-8", "surrogateescape")

    def _header(self) -> bytes:
        assert self.proc.stdout
        header = self.proc.stdout.readline().rstrip(b"\n")
        if not header:
            raise SourceError(
                f"git cat-file stopped while reading {self.repo.name}",
                hint="check that the repository is intact (`git fsck`)",
            )
        return header

    def next_text(self, max_bytes: int, path: str = "", *, look_up: bool = True) -> str:
        """The next queued path's text, or SkipFile (UnreadableFile when the tree lists the
        file but git cannot read its object)."""
        assert self.proc.stdout
        header = self._header()
        by_blob = self._by_blob[self._answered] if self._answered < len(self._by_blob) else None
        self._answered += 1
        match = _SHA_HEADER.match(header)
        if match is None:
            word, _, rest = header.partition(b" ")
            if word in _SYMLINK_FAILURES and rest.isdigit():
                detail = self.proc.stdout.read(int(rest) + 1)[:-1].decode("utf-8", "replace")
                raise SkipFile(f"{_SYMLINK_FAILURES[word]}: {detail}")
            # `look_up`: ask the tree whether `path` is there (a git process; include
            # candidates, most of which do not exist, skip it)
            listed = by_blob or (path and look_up and self._listed(path))
            if listed:
                raise UnreadableFile(
                    f"git cannot read the object of {path or by_blob} at commit "
                    f"{self.sha[:12]} (the tree lists it; run `git fsck` in "
                    f"{self.repo.path})"
                )
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

    def _listed(self, path: str) -> bool:
        """Whether the commit's tree has an entry at `path` (asked only when git answered
        "missing", which it also says of an object it cannot read)."""
        try:
            out = git_output(self.repo, "ls-tree", "-z", "--full-tree", self.sha, "--", path)
        except SourceError:
            return False
        return any(
            record.endswith(b"\t" + path.encode("utf-8", "surrogateescape"))
            for record in out.split(b"\0")
        )

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
            blobs = {
                path: obj
                for path, (mode, kind, obj) in tree_entries(repo, reader.sha).items()
                if kind == "blob" and mode in _REGULAR_MODES
            }
        reader.request([p for p, problem in zip(paths, problems) if problem is None], blobs)
        for path, problem in zip(paths, problems):
            if problem is not None:
                yield path, problem
                continue
            try:
                yield path, reader.next_text(max_bytes, path)
            except SkipFile as skip:
                yield path, skip
    finally:
        reader.close()


class FileReader:
    """Reads single files at one commit, one after another, through one `git cat-file` process
    kept open (about 3 ms of process start saved per file). Not for concurrent use: callers
    serialise their reads. The process ends with `close()`, or when the reader is collected."""

    def __init__(self, repo: Repository, commit: str) -> None:
        self.repo, self.commit = repo, commit
        self._reader: _BlobReader | None = None
        self._finalizer: weakref.finalize | None = None

    def read(self, path: str, *, max_bytes: int, look_up: bool = False) -> str:
        """The text of `path` (LF line endings, no BOM), or raise SkipFile. `look_up`: tell
        a file git cannot read (UnreadableFile) from one that is not there."""
        check_path(path)
        if self._reader is None:
            self._reader = _BlobReader(self.repo, self.commit)
            self._finalizer = weakref.finalize(self, self._reader.close)
        self._reader.ask(path)
        try:
            return self._reader.next_text(max_bytes, path, look_up=look_up)
        except SourceError:  # git stopped: the next read starts another process
            self.close()
            raise

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._reader = self._finalizer = None


def read_content_file(repo: Repository, path: str, commit: str, *, max_bytes: int) -> str:
    """The text of `path` at `commit` (LF line endings, no BOM), or raise SkipFile."""
    reader = FileReader(repo, commit)
    try:
        return reader.read(path, max_bytes=max_bytes, look_up=True)
    finally:
        reader.close()
