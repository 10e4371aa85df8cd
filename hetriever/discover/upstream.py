"""What waits upstream: the remote's head of the branch a fetching run follows, against the
commit the index holds.

Read from the remote-tracking ref the last fetch left (`origin/<branch>`, else `origin/HEAD`),
or fetched first on request (`status --fetch`). Fetching only updates `refs/remotes/origin/*`:
the checkout, and so the next run's commit, stays as it is. `upstream_advice` is what a
person is told of it: the note of a moved-back branch, or how many commits wait and the
command that brings them in by hand.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetriever.core.errors import SourceError
from hetriever.core.redact import redact_text
from hetriever.discover.fetch import accept_moved_back, fetch_remote, followed_branch
from hetriever.discover.git_runner import GitRun, run_git
from hetriever.discover.repositories import Repository

GIT_TIMEOUT = 60.0  # a fetch from a remote that does not answer must not hang `status`


@dataclass(frozen=True)
class Upstream:
    ref: str = ""  # e.g. origin/main; "" when the repository follows no remote
    commit: str = ""  # the remote's head at the last fetch
    behind: int | None = None  # commits on `ref` the index does not hold (None: unknown)
    error: str = ""  # why the head or the count is unknown (a fetch that failed...)
    # commits the index holds that `ref` no longer has: the branch was moved back (behind 0)
    # or rewritten (diverged); a fetching run refuses a head that moves the index back
    ahead: int | None = None
    note: str = ""  # what the move means and what to do, when `ahead` is set

    def to_dict(self) -> dict:
        return {
            "upstream_ref": self.ref,
            "upstream_commit": self.commit,
            "behind_upstream": self.behind,
            "upstream_error": self.error,
            "ahead_of_upstream": self.ahead,
            "upstream_note": self.note,
        }


def _git(repo: Repository, *args: str) -> GitRun:
    return run_git(repo, *args, timeout=GIT_TIMEOUT)


def fetch(repo: Repository) -> str:
    """The fetch a run makes (`fetch_remote`), within GIT_TIMEOUT; "" or what went wrong
    (git's own words name the remote: without its credentials)."""
    try:
        fetch_remote(repo, timeout=GIT_TIMEOUT)
    except SourceError as exc:
        return redact_text(exc.message.removeprefix(f"{repo.name}: "))
    return ""


def _rev(repo: Repository, rev: str) -> str:
    done = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    return done.text if done.ok else ""


def upstream(repo: Repository, indexed: str, *, fetch_first: bool = False) -> Upstream:
    """The followed remote branch's head and how many of its commits `indexed` lacks; what
    cannot be read is said in `error`, never raised (a report must not fail a run)."""
    if repo.version is not None:  # a version follows its ref, not the base's branch
        return Upstream()
    try:
        return _upstream(repo, indexed, fetch_first)
    except (OSError, subprocess.SubprocessError, ValueError, SourceError) as exc:
        return Upstream(followed_branch(repo), "", None, f"cannot read the remote: {exc}")


def _upstream(repo: Repository, indexed: str, fetch_first: bool) -> Upstream:
    if not _git(repo, "remote", "get-url", "origin").ok:
        return Upstream()  # no remote: nothing can be waiting upstream
    ref = followed_branch(repo)
    error = fetch(repo) if fetch_first else ""
    head = _rev(repo, ref)
    if not head:
        return Upstream(
            ref,
            "",
            None,
            error
            or f"{ref} is unknown: run `hetriever status --fetch` (or `git fetch origin`) once",
        )
    if not indexed:
        return Upstream(ref, head, None, error or "nothing indexed yet")
    if _rev(repo, indexed) == "":
        return Upstream(
            ref, head, None, error or f"the indexed commit {indexed[:12]} is not in this clone"
        )
    behind, ahead = _count(repo, f"{indexed}..{head}"), _count(repo, f"{head}..{indexed}")
    if not ahead:
        return Upstream(ref, head, behind, error, ahead)
    if behind == 0:  # a force-pushed revert: the remote's head is an ancestor of the index
        note = (
            f"{ref} moved back to {head[:12]}, {ahead} commit(s) before the indexed "
            f"{indexed[:12]}: fetching runs refuse it (the index only moves forward); "
            + accept_moved_back(repo, head)
        )
    else:
        note = (
            f"{ref} and the index have diverged ({behind} new upstream, {ahead} indexed "
            "commit(s) no longer on it, a force push): the next fetching run indexes "
            f"{head[:12]}"
        )
    return Upstream(ref, head, behind, error, ahead, note)


def _count(repo: Repository, revs: str) -> int | None:
    done = _git(repo, "rev-list", "--count", revs)
    return int(done.text) if done.ok else None


def update_command(docs_root: Path, repo: Any) -> str:
    """The by-hand update of `repo`: `git submodule update --remote` for a submodule of the
    docs root (the README's line), else a fast-forward pull of the clone; then an ingest.

    git 2.38 and later refuse a local-path remote in submodule commands unless the
    submodule's own config allows it (the README's recipe sets it): where it does not, the
    line sets it first, so it works as printed."""
    root, path = Path(docs_root).absolute(), Path(repo.path).absolute()
    if (root / ".gitmodules").is_file() and path.is_relative_to(root) and path != root:
        allow = (
            ""
            if not _local(repo.url) or _file_allowed(repo)
            else f"git -C {path} config protocol.file.allow always && "
        )
        return (
            f"{allow}git -C {root} submodule update --remote {path.relative_to(root)} "
            "&& hetriever ingest"
        )
    return f"git -C {path} pull --ff-only && hetriever ingest"


def _local(url: str) -> bool:
    """A remote that is a path (`/src/site-a`, `../site-a`, `file://...`), not a host's."""
    if url.startswith("file://"):
        return True
    return bool(url) and "://" not in url and ":" not in url.split("/", 1)[0]


def _file_allowed(repo: Any) -> bool:
    done = run_git(repo, "config", "--get", "protocol.file.allow", timeout=10)
    return done.ok and done.text == "always"


def waiting_text(row: dict[str, Any]) -> str:
    """ "origin/main has 2 more commits", from a row's upstream fields; "" when none wait."""
    behind = row.get("behind_upstream") or 0
    if behind <= 0:
        return ""
    return f"{row['upstream_ref']} has {behind} more commit{'s' if behind != 1 else ''}"


def upstream_advice(docs_root: Path, repo: Any, row: dict[str, Any], checked_out: bool) -> str:
    """What to tell a person of a repository's upstream, from a row's upstream fields
    (`Upstream.to_dict`): a branch moved back or rewritten has its own note (the command that
    accepts it); else, when commits the index lacks wait there (as of the last fetch), that
    it is behind and the by-hand update; "" when neither. `checked_out`: the index holds the
    checkout, so it is the checkout that is behind."""
    if row.get("ahead_of_upstream"):
        return str(row.get("upstream_note") or "")
    waiting = waiting_text(row)
    if not waiting:
        return ""
    what = "checkout is behind its upstream" if checked_out else "commits wait upstream"
    return f"{what} ({waiting}); run `{update_command(docs_root, repo)}`"
