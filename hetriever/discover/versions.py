"""The commit a followed version is at (the `versions` setting, `docs/versions.md`).

Which versions there are is found with the repositories
(`hetriever.discover.repositories.with_versions`); which commit each is at is resolved here,
just before it is indexed, after the run's fetch of its base, so a branch that moved is
indexed at its new head. A ref that names no commit fails that version alone.
"""

from __future__ import annotations

import dataclasses

from hetriever.core.errors import SourceError
from hetriever.discover.git_runner import run_git
from hetriever.discover.repositories import Repository


def ref_commit(repo: Repository) -> str:
    """The commit a version's ref names: the local branch or tag, else `origin/<ref>` (a
    branch only the remote has); a SourceError when neither resolves."""
    assert repo.version is not None
    ref = repo.version.ref
    for rev in (ref, f"origin/{ref}"):
        done = run_git(
            repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"
        )
        if done.ok and done.text:
            return done.text
    raise SourceError(
        f"{repo.name}: ref {ref!r} of {repo.version.base} names no commit (neither a local "
        f"branch or tag nor origin/{ref})",
        hint=f"check the versions setting for {repo.version.base}, or fetch the repository",
    )


def resolve_version(repo: Repository) -> Repository:
    """A version with the commit its ref names now; any other repository as it is."""
    if repo.version is None:
        return repo
    return dataclasses.replace(repo, commit=ref_commit(repo))
