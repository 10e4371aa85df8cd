"""Fetching a repository's remote: the commit a fetching run indexes, and checking it out.

A scheduled run follows a branch (the submodule's `branch` in .gitmodules, else the remote's
default branch); a webhook names the branch that was pushed, never a commit to go to: the
branch's head is fetched now, and a commit that is an ancestor of the indexed one is refused
(`moves_back`), so a replayed old push cannot take the index back. `upstream.py` reads the
same followed branch for `status`, and fetches it with `fetch_remote`.

Every fetch has a deadline (`Settings.fetch_timeout` for a run): a remote that stops answering
fails its repository with that reason, and the run goes on to the others, instead of holding
the run. git never asks for credentials on a terminal here (nobody would answer a scheduled
run); a remote that needs them fails at once.
"""

from __future__ import annotations

import subprocess
import time

from hetriever.core.errors import SourceError
from hetriever.core.redact import redact_text
from hetriever.discover.git_runner import GitRun, run_git
from hetriever.discover.repositories import Repository

FETCH_TIMEOUT = 600.0  # seconds, for a whole fetch (Settings.fetch_timeout)


class FetchTimedOut(SourceError):
    """The remote did not finish answering a fetch before its deadline."""


def _run(repo: Repository, args: list[str], deadline: float | None) -> GitRun:
    timeout = None if deadline is None else max(0.1, deadline - time.monotonic())
    try:
        return run_git(repo, *args, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise FetchTimedOut(
            f"{repo.name}: git {' '.join(args[:2])} did not finish in time: "
            f"the remote `origin` stopped answering",
            hint="check that the remote is reachable; a very large first "
            "fetch may need a longer HETRIEVER_FETCH_TIMEOUT",
        ) from None


def _git(repo: Repository, *args: str, deadline: float | None = None) -> str:
    done = _run(repo, list(args), deadline)
    if not done.ok:
        raise SourceError(
            f"{repo.name}: git {' '.join(args)} failed: {done.said or done.returncode}",
            hint="check the repository's remote `origin` and that it is reachable",
        )
    return done.text


def _resolves(repo: Repository, rev: str) -> bool:
    return run_git(repo, "rev-parse", "--verify", "--quiet", rev).returncode == 0


def followed_branch(repo: Repository) -> str:
    """The remote branch fetching runs check out: the submodule's `branch` in .gitmodules,
    else the remote's default branch."""
    return f"origin/{repo.branch}" if repo.branch else "origin/HEAD"


def update_checkout(repo: Repository, ref: str | None, *, timeout: float = FETCH_TIMEOUT) -> str:
    """Fetch `origin` and check out `ref`, by default the followed branch; the sha."""
    sha = fetch_target(repo, ref, timeout=timeout)
    check_out(repo, sha)
    return sha


def fetch_remote(repo: Repository, *, timeout: float = FETCH_TIMEOUT) -> float:
    """`git fetch --prune origin`, and the followed branch by name; origin/HEAD set where a clone
    lacks it. Returns the deadline (monotonic time) the steps after it share."""
    deadline = time.monotonic() + timeout
    # --prune: a branch deleted upstream leaves origin/<branch> too, so a version that
    # follows it is dropped (remote-tracking refs only; tags and local branches stay)
    _git(repo, "fetch", "--quiet", "--prune", "origin", deadline=deadline)
    if repo.branch:
        _fetch_branch(repo, deadline=deadline)
    elif not _resolves(repo, "origin/HEAD"):
        _git(
            repo,
            "remote",
            "set-head",
            "origin",
            "--auto",  # clones made without it
            deadline=deadline,
        )
    return deadline


def fetch_target(repo: Repository, ref: str | None, *, timeout: float = FETCH_TIMEOUT) -> str:
    """Fetch `origin`; the commit `ref` names there, checking nothing out. `ref`: None for
    the followed branch's head, `refs/heads/<branch>` for that branch's head as fetched now
    (what a webhook names: a push is a trigger, and its branch may have moved on since), or
    a commit. All of it within `timeout` seconds, else a SourceError."""
    deadline = fetch_remote(repo, timeout=timeout)
    target = ref or followed_branch(repo)
    if ref and ref.startswith("refs/heads/"):
        branch = ref.removeprefix("refs/heads/")
        _fetch_branch(repo, branch, followed=False, deadline=deadline)
        target = f"origin/{branch}"
    return _git(repo, "rev-parse", "--verify", "--quiet", f"{target}^{{commit}}")


def check_out(repo: Repository, sha: str) -> None:
    _git(repo, "checkout", "--quiet", "--detach", sha)


def _fetch_branch(
    repo: Repository,
    branch: str | None = None,
    *,
    followed: bool = True,
    deadline: float | None = None,
) -> None:
    """A branch by name, the followed one by default: a shallow or single-branch clone's
    fetch brings only the branch it was cloned with, and a branch deleted on the remote would
    otherwise be followed at its last fetched commit for ever. The remote answered the fetch
    before this one, so a failure here is the branch's."""
    branch = branch or repo.branch
    done = _run(
        repo,
        ["fetch", "--quiet", "origin", f"+refs/heads/{branch}:refs/remotes/origin/{branch}"],
        deadline,
    )
    if done.returncode != 0:
        said = redact_text((done.stderr.strip().splitlines() or [""])[-1])
        if not followed:
            raise SourceError(
                f"{repo.name}: branch {branch!r} is not a branch of the remote `origin` ({said})",
                hint="check the webhook route's branch",
            )
        raise SourceError(
            f"{repo.name}: the followed branch {branch!r} (the submodule's "
            f"`branch` in .gitmodules; `.` there is the parent's branch) is not "
            f"a branch of the remote `origin` ({said})",
            hint="fix the submodule's `branch` in .gitmodules, or remove it to "
            "follow the remote's default branch",
        )


def moves_back(repo: Repository, sha: str, indexed: str | None) -> bool:
    """Whether indexing `sha` would take the index back: `sha` is a strict ancestor of the
    commit indexed now. A commit on another line of history (a force push) is not; neither
    is one when the indexed commit is unknown here."""
    if not indexed or sha == indexed or not _resolves(repo, f"{indexed}^{{commit}}"):
        return False
    return run_git(repo, "merge-base", "--is-ancestor", sha, indexed).returncode == 0


def accept_moved_back(repo: Repository, sha: str) -> str:
    """The commands that index `sha` although it moves the index back (a force-pushed revert
    of the followed branch): a run that does not fetch indexes what is checked out."""
    return (
        f"if the branch was moved back on purpose, check its commit out and index it: "
        f"`git -C {repo.path} checkout --detach {sha} && hetriever ingest -r {repo.name} "
        f"--full`"
    )


def on_followed_branch(repo: Repository, sha: str) -> bool:
    """Whether `sha` is in the followed branch's history (where the next scheduled run goes)."""
    return run_git(repo, "merge-base", "--is-ancestor", sha, followed_branch(repo)).returncode == 0
