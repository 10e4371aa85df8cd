"""What waits upstream: the remote's head of the branch a fetching run follows, against the
commit the index holds.

Read from the remote-tracking ref the last fetch left (`origin/<branch>`, else `origin/HEAD`),
or fetched first on request (`status --fetch`). Fetching only updates `refs/remotes/origin/*`:
the checkout, and so the next run's commit, stays as it is.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from hetriever.core.errors import SourceError
from hetriever.core.redact import redact_text
from hetriever.discover.fetch import accept_moved_back, fetch_remote, followed_branch
from hetriever.discover.git_runner import GitRun, run_git
from hetriever.discover.repositories import Repository

GIT_TIMEOUT = 60.0  # a fetch from a remote that does not answer must not hang `status`


@dataclass(frozen=True)
class Upstream:
    ref: str = ""           # e.g. origin/main; "" when the repository follows no remote
    commit: str = ""        # the remote's head at the last fetch
    behind: int | None = None  # commits on `ref` the index does not hold (None: unknown)
    error: str = ""         # why the head or the count is unknown (a fetch that failed...)
    # commits the index holds that `ref` no longer has: the branch was moved back (behind 0)
    # or rewritten (diverged); a fetching run refuses a head that moves the index back
    ahead: int | None = None
    note: str = ""          # what the move means and what to do, when `ahead` is set

    def to_dict(self) -> dict:
        return {"upstream_ref": self.ref, "upstream_commit": self.commit,
                "behind_upstream": self.behind, "upstream_error": self.error,
                "ahead_of_upstream": self.ahead, "upstream_note": self.note}


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
    try:
        return _upstream(repo, indexed, fetch_first)
    except (OSError, subprocess.SubprocessError, ValueError, SourceError) as exc:
        return Upstream(followed_branch(repo), "", None, f"cannot read the remote: {exc}")


def _upstream(repo: Repository, indexed: str, fetch_first: bool) -> Upstream:
    if _git(repo, "remote", "get-url", "origin").returncode != 0:
        return Upstream()  # no remote: nothing can be waiting upstream
    ref = followed_branch(repo)
    error = fetch(repo) if fetch_first else ""
    head = _rev(repo, ref)
    if not head:
        return Upstream(ref, "", None, error or f"{ref} is unknown: run `hetriever status "
                                                "--fetch` (or `git fetch origin`) once")
    if not indexed:
        return Upstream(ref, head, None, error or "nothing indexed yet")
    if _rev(repo, indexed) == "":
        return Upstream(ref, head, None, error or f"the indexed commit {indexed[:12]} is not "
                                                  "in this clone")
    behind, ahead = _count(repo, f"{indexed}..{head}"), _count(repo, f"{head}..{indexed}")
    if not ahead:
        return Upstream(ref, head, behind, error, ahead)
    if behind == 0:  # a force-pushed revert: the remote's head is an ancestor of the index
        note = (f"{ref} moved back to {head[:12]}, {ahead} commit(s) before the indexed "
                f"{indexed[:12]}: fetching runs refuse it (the index only moves forward); "
                + accept_moved_back(repo, head))
    else:
        note = (f"{ref} and the index have diverged ({behind} new upstream, {ahead} indexed "
                "commit(s) no longer on it, a force push): the next fetching run indexes "
                f"{head[:12]}")
    return Upstream(ref, head, behind, error, ahead, note)


def _count(repo: Repository, revs: str) -> int | None:
    done = _git(repo, "rev-list", "--count", revs)
    return int(done.text) if done.ok else None
