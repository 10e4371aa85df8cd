"""Finding the documentation repositories: the submodules of a parent repository, the
repository itself, or the git repositories in a directory; their names checked.

A submodule that cannot be used (a path leading out, not checked out) is kept with its problem
(`Repository.problem`), so it fails alone and the others are indexed. The versions the
settings follow of a repository (`with_versions`, docs/versions.md) are repositories too,
over the same checkout and read at their ref's commit (`hetriever.discover.versions`).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from hetriever.core.errors import (
    InvalidRepositoryNameError,
    SourceError,
    SourceSettingError,
)
from hetriever.core.logs import get_logger
from hetriever.core.models import _Serialisable
from hetriever.core.names import (
    NAME_MAX,
    NAME_MIN,
    as_given,
    is_valid_repository_name,
    repository_name,
    require_known,
)
from hetriever.core.redact import redact_url
from hetriever.core.version_settings import VersionSpec
from hetriever.core.versions import VersionOf
from hetriever.discover.git_runner import is_work_tree_top, run_git
from hetriever.discover.site import Site

if TYPE_CHECKING:
    from hetriever.core.config import Settings

log = get_logger(__name__)


@dataclass(frozen=True)
class Repository(_Serialisable):
    """One documentation repository (a git submodule of the parent, or a plain git repo)."""

    name: str  # validated: ^[a-z0-9-]+$, 3..63 chars; also the collection's base name
    path: Path  # the repository's working tree
    url: str = ""  # remote URL from .gitmodules ("" when unknown)
    content_dir: str = "content"  # Hugo content dir, relative to `path`
    # The branch a fetching run checks out (the submodule's `branch` in .gitmodules, as
    # `git submodule update --remote` reads it); "" = the remote's default branch.
    branch: str = ""
    # Why the repository cannot be read (a bad or uninitialised submodule): reported for it
    # alone, every git operation on it raises this; "" when it is fine.
    problem: str = ""
    # The site configuration at the commit being indexed (languages, content roots, URL
    # prefixes); None until a run reads it, and for callers that parse without one.
    site: Site | None = None
    # A followed ref of another repository (the `versions` setting), read at `commit` from
    # the base's checkout; None for a checkout's own tree (hetriever.discover.versions).
    version: VersionOf | None = None
    commit: str = ""  # a version's commit, resolved before it is indexed; "" = HEAD


def validate_repository_name(name: str, path: str | Path) -> str:
    """Return `name` if it fits `^[a-z0-9-]+$` and 3..63 characters, else raise."""
    if not is_valid_repository_name(name):
        raise InvalidRepositoryNameError(
            f"repository name {name!r} (from {path}) is invalid: it must match ^[a-z0-9-]+$ "
            f"and be {NAME_MIN}..{NAME_MAX} characters long (it is {len(name)})",
            hint="rename the submodule's directory: its name, lower-cased and with other "
            "characters as dashes, names the index",
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
        found = [(root.name, root, _origin_url(root), "", "")]
    else:
        found = [
            (child.name, child.resolve(), _origin_url(child), "", "")
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
    same: dict[str, list[Path]] = {}  # a name -> the directories that all normalise to it
    for directory, path, url, problem, branch in found:
        # A submodule path leading out keeps its path as its name, unchanged (and invalid).
        name = directory if _leads_out(directory) else repository_name(directory)
        if name != directory:
            log.info("repository_named", repository=name, directory=directory, path=str(path))
        try:
            validate_repository_name(name, path)
        except InvalidRepositoryNameError as exc:
            if len(found) == 1 and not problem:
                raise
            # One badly named repository fails alone, like one that is not checked out.
            log.error("repository_name_invalid", repository=name, error=str(exc))
            problem = problem or str(exc)
        if name in repos:
            same.setdefault(name, [repos[name].path]).append(path)
            continue
        repos[name] = Repository(
            # Stored and published without credentials: the catalog, the manifest.
            name=name,
            path=path,
            url=redact_url(urls.get(name, url)),
            content_dir=content_dir,
            problem=problem,
            branch=branch,
        )
    for name, paths in same.items():
        # They fail alone (none may pass for another); every other repository goes on. The
        # path is a placeholder that does not exist, so nothing reads through it.
        log.error("repository_names_collide", repository=name, paths=[str(p) for p in paths])
        repos[name] = Repository(
            name=name,
            path=root / ".git" / "same-name-repositories" / name,
            content_dir=content_dir,
            problem=f"{len(paths)} directories are all named {name!r}: "
            f"{', '.join(str(p) for p in paths)} (a repository's name is its "
            "directory's, lower-cased, other characters as dashes; rename all but one)",
        )
    return [repos[name] for name in sorted(repos)]


def select_repositories(repos: list[Repository], names: list[str] | None) -> list[Repository]:
    """The named repositories (all when `names` is empty); an unknown name is a clear error.
    A directory's name (`opentelemetry.io`) names the repository indexed from it."""
    if not names:
        return repos
    wanted = as_given(names) or []
    require_known(wanted, [r.name for r in repos])
    # A repository's name brings its versions along; a version's name, that version alone.
    return [r for r in repos if r.name in wanted or (r.version and r.version.base in wanted)]


def configured_repositories(settings: Settings, names: list[str] | None = None) -> list[Repository]:
    """The repositories under the settings' docs root (with their content dir and URLs) and
    the versions the settings follow of them, only the named ones if any are named; no
    repositories or an unknown name is a clear error."""
    found = discover_repositories(
        settings.docs_root, content_dir=settings.content_dir, urls=settings.repository_urls
    )
    return select_repositories(with_versions(found, settings.versions), names)


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
            out.append(version_repository(base, version, problem))
    return sorted(out, key=lambda r: r.name)


def version_repository(base: Repository, version: VersionOf, problem: str = "") -> Repository:
    """`version` of `base` as a repository: read from the base's checkout, named after it."""
    return Repository(
        name=version.name,
        path=base.path,
        url=base.url,
        content_dir=base.content_dir,
        problem=problem,
        version=version,
    )


def _from_gitmodules(parent: Path) -> list[tuple[str, Path, str, str, str]]:
    """(name, checked-out path, url, problem, branch) for each submodule in
    `parent/.gitmodules`.

    A submodule that cannot be used (a path leading out, not checked out) is kept with its
    problem, so it fails alone and the others are indexed; its path is a placeholder that
    does not exist, so nothing can read through it."""
    done = run_git(
        parent,
        "config",
        "--file",
        ".gitmodules",
        "-z",
        "--get-regexp",
        r"^submodule\..*\.(path|url|branch)$",
    )
    if done.returncode == 1:  # no matching keys
        raw = b""
    elif not done.ok:
        raise SourceError(
            f"cannot read {parent / '.gitmodules'}: {done.said}",
            hint="fix the file's syntax (git config format)",
        )
    else:
        raw = done.stdout
    entries: dict[str, dict[str, str]] = {}
    for record in raw.decode("utf-8", "surrogateescape").split("\0"):
        if not record:
            continue
        key, _, value = record.partition("\n")
        # key is submodule.<name>.path; the name itself may contain dots.
        sub_name, _, field = key[len("submodule.") :].rpartition(".")
        entries.setdefault(sub_name, {})[field] = value
    if not any("path" in e for e in entries.values()):
        raise SourceError(
            f"{parent / '.gitmodules'} lists no submodule paths",
            hint="add documentation repos with `git submodule add <url> docs/<name>`",
        )

    found = []
    parent_branch = None
    for sub_name, entry in sorted(entries.items()):
        if entry.get("branch") == ".":  # git's "the superproject's current branch"
            if parent_branch is None:
                parent_branch = _current_branch(parent)
            if not parent_branch:
                log.warning(
                    "submodule_branch_unresolved",
                    submodule=sub_name,
                    reason="branch `.` names the parent's branch, and the parent's "
                    "HEAD is detached",
                    action="following the remote's default",
                )
            entry["branch"] = parent_branch
        if "path" not in entry:
            log.warning("submodule_without_path", submodule=sub_name, parent=str(parent))
            continue
        name = PurePosixPath(entry["path"]).name or sub_name
        try:
            found.append(
                (
                    name,
                    _submodule_dir(parent, sub_name, entry["path"]),
                    entry.get("url", ""),
                    "",
                    entry.get("branch", ""),
                )
            )
        except SourceError as exc:
            log.error("submodule_unusable", submodule=sub_name, error=str(exc))
            if _leads_out(entry["path"]):
                # Named by its path as written (`../../etc`): it is no repository, and must
                # not pass for one called `etc`.
                name = entry["path"]
            found.append(
                (
                    name,
                    parent / ".git" / "unusable-submodule" / str(len(found)),
                    entry.get("url", ""),
                    str(exc),
                    entry.get("branch", ""),
                )
            )
    return found


def _leads_out(rel: str) -> bool:
    """Whether a submodule path is absolute or climbs with `..` (a directory's own name,
    never: it holds no "/")."""
    pure = PurePosixPath(rel)
    return pure.is_absolute() or ".." in pure.parts


def _current_branch(path: Path) -> str:
    """The branch checked out at `path`; "" when HEAD is detached."""
    done = run_git(path, "symbolic-ref", "--quiet", "--short", "HEAD")
    return done.text if done.ok else ""


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
    if not is_work_tree_top(target):
        raise SourceError(
            f"submodule {sub_name!r} at {rel} is not initialised or not checked out",
            hint=f"run `git submodule update --init {rel}` in {parent}",
        )
    return target


def _origin_url(path: Path) -> str:
    done = run_git(path, "config", "--get", "remote.origin.url")
    return done.text if done.ok else ""


def _check_content_dir(content_dir: str) -> None:
    if content_dir in ("", "."):
        return
    if (
        content_dir.startswith("/")
        or posixpath.normpath(content_dir) != content_dir
        or content_dir.split("/")[0] == ".."
    ):
        raise SourceSettingError(
            f"content_dir {content_dir!r} must be a normalised path inside the repository",
            hint='use e.g. "content" or "content/en"',
        )
