"""Fetching a repository's remote: the commit a fetching run indexes, and checking it out.

A scheduled run follows a branch (the submodule's `branch` in .gitmodules, else the remote's
default branch); a webhook names the branch that was pushed, never a commit to go to: the
branch's head is fetched now, and a commit that is an ancestor of the indexed one is refused
(`moves_back`), so a replayed old push cannot take the index back. `upstream.py` reads the
same followed branch for `status`.
"""

from __future__ import annotations

import subprocess

from hetriever.core.errors import SourceError
from hetriever.discover.repositories import Repository


def _git(repo: Repository, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo.path, capture_output=True, text=True)
    if done.returncode != 0:
        raise SourceError(f"{repo.name}: git {' '.join(args)} failed: "
                          f"{done.stderr.strip() or done.returncode}",
                          hint="check the repository's remote `origin` and that it is reachable")
    return done.stdout.strip()


def _resolves(repo: Repository, rev: str) -> bool:
    return subprocess.run(["git", "rev-parse", "--verify", "--quiet", rev], cwd=repo.path,
                          capture_output=True).returncode == 0


def followed_branch(repo: Repository) -> str:
    """The remote branch fetching runs check out: the submodule's `branch` in .gitmodules,
    else the remote's default branch."""
    return f"origin/{repo.branch}" if repo.branch else "origin/HEAD"


def update_checkout(repo: Repository, ref: str | None) -> str:
    """Fetch `origin` and check out `ref`, by default the followed branch; the sha."""
    sha = fetch_target(repo, ref)
    check_out(repo, sha)
    return sha


def fetch_target(repo: Repository, ref: str | None) -> str:
    """Fetch `origin`; the commit `ref` names there, checking nothing out. `ref`: None for
    the followed branch's head, `refs/heads/<branch>` for that branch's head as fetched now
    (what a webhook names: a push is a trigger, and its branch may have moved on since), or
    a commit."""
    _git(repo, "fetch", "--quiet", "origin")
    if repo.branch:
        _fetch_branch(repo)
    elif not _resolves(repo, "origin/HEAD"):
        _git(repo, "remote", "set-head", "origin", "--auto")  # clones made without it
    target = ref or followed_branch(repo)
    if ref and ref.startswith("refs/heads/"):
        branch = ref.removeprefix("refs/heads/")
        _fetch_branch(repo, branch, followed=False)
        target = f"origin/{branch}"
    return _git(repo, "rev-parse", "--verify", "--quiet", f"{target}^{{commit}}")


def check_out(repo: Repository, sha: str) -> None:
    _git(repo, "checkout", "--quiet", "--detach", sha)


def _fetch_branch(repo: Repository, branch: str | None = None, *, followed: bool = True) -> None:
    """A branch by name, the followed one by default: a shallow or single-branch clone's
    fetch brings only the branch it was cloned with, and a branch deleted on the remote would
    otherwise be followed at its last fetched commit for ever. The remote answered the fetch
    before this one, so a failure here is the branch's."""
    branch = branch or repo.branch
    done = subprocess.run(["git", "fetch", "--quiet", "origin",
                           f"+refs/heads/{branch}:refs/remotes/origin/{branch}"],
                          cwd=repo.path, capture_output=True, text=True)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [""])[-1]
        if not followed:
            raise SourceError(f"{repo.name}: branch {branch!r} is not a branch of the remote "
                              f"`origin` ({said})",
                              hint="check the webhook route's branch")
        raise SourceError(f"{repo.name}: the followed branch {branch!r} (the submodule's "
                          f"`branch` in .gitmodules; `.` there is the parent's branch) is not "
                          f"a branch of the remote `origin` ({said})",
                          hint="fix the submodule's `branch` in .gitmodules, or remove it to "
                               "follow the remote's default branch")


def moves_back(repo: Repository, sha: str, indexed: str | None) -> bool:
    """Whether indexing `sha` would take the index back: `sha` is a strict ancestor of the
    commit indexed now. A commit on another line of history (a force push) is not; neither
    is one when the indexed commit is unknown here."""
    if not indexed or sha == indexed or not _resolves(repo, f"{indexed}^{{commit}}"):
        return False
    return subprocess.run(["git", "merge-base", "--is-ancestor", sha, indexed],
                          cwd=repo.path, capture_output=True).returncode == 0


def on_followed_branch(repo: Repository, sha: str) -> bool:
    """Whether `sha` is in the followed branch's history (where the next scheduled run goes)."""
    return subprocess.run(["git", "merge-base", "--is-ancestor", sha, followed_branch(repo)],
                          cwd=repo.path, capture_output=True).returncode == 0
