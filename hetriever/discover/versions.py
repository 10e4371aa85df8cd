"""The versions a repository follows (the `versions` setting), as repositories of their own.

Each is a `Repository` named `<base>--<slug>` over the base's checkout, with `version` set,
read at its ref's commit from git objects (never from the working tree, which is the
base's). Which versions there are is found with the repositories; which commit each is at
is resolved just before it is indexed (`resolve_version`), after the run's fetch of the base,
so a branch that moved is indexed at its new head. A version that cannot be (its name taken
by a discovered repository, its ref resolving to no commit) fails alone.
"""

from __future__ import annotations

import dataclasses

from hetriever.core.errors import SourceError
from hetriever.core.logs import get_logger
from hetriever.core.version_settings import VersionSpec
from hetriever.core.versions import VersionOf
from hetriever.discover.git_runner import run_git
from hetriever.discover.repositories import Repository

log = get_logger(__name__)


def followed_labels(repo: Repository, spec: VersionSpec) -> list[str]:
    """The refs `spec` names for `repo`: its `refs`, then the last `last` tags matching
    `tags` (newest first by git's version-aware sort), each once."""
    labels = list(spec.refs)
    if spec.tags:
        done = run_git(repo, "tag", "--list", "--sort=-v:refname", "--", spec.tags)
        if not done.ok:
            raise SourceError(f"{repo.name}: cannot list its tags: {done.said}")
        tags = [t for t in done.text.splitlines() if t.strip()][: spec.last]
        if not tags:
            log.warning("versions_no_tags", repository=repo.name, tags=spec.tags)
        labels += [t for t in tags if t not in labels]
    return labels


def with_versions(repos: list[Repository], specs: dict[str, VersionSpec]) -> list[Repository]:
    """`repos` and, after each, the versions the settings follow for it, sorted by name.

    A version whose name a discovered repository (or another version) has is kept with
    that problem, so it fails alone; a repository that cannot be read gets no versions (it
    fails itself)."""
    taken = {r.name for r in repos}
    for name in sorted(set(specs) - taken):
        log.warning(
            "versions_repository_unknown",
            repository=name,
            reason="the versions setting names a repository the docs root does not have",
        )
    out = list(repos)
    for base in repos:
        spec = specs.get(base.name)
        if spec is None or base.problem:
            continue
        for label in followed_labels(base, spec):
            version = VersionOf(base.name, label, label)
            problem = ""
            if version.name in taken:
                problem = (
                    f"version {label!r} of {base.name} would be named {version.name!r}, "
                    "which another repository (or version) already has"
                )
                log.error("version_name_taken", repository=version.name, error=problem)
            taken.add(version.name)
            out.append(
                Repository(
                    name=version.name,
                    path=base.path,
                    url=base.url,
                    content_dir=base.content_dir,
                    problem=problem,
                    version=version,
                )
            )
    return sorted(out, key=lambda r: r.name)


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
