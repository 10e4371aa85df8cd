"""Test helpers: real git repositories built in tmp_path, a site from in-memory files, and the
shared corpora."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hetriever.discover.repositories import Repository, discover_repositories
from hetriever.discover.site import Site, load_site

REPO_ROOT = Path(__file__).resolve().parents[2]
CORPORA = Path(os.environ.get("HETRIEVER_CORPORA", REPO_ROOT.parent / "shared" / "corpora"))

GIT_ENV = {
    "GIT_AUTHOR_NAME": "hetriever tests",
    "GIT_AUTHOR_EMAIL": "tests@example.invalid",
    "GIT_COMMITTER_NAME": "hetriever tests",
    "GIT_COMMITTER_EMAIL": "tests@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    # Submodules from local paths need this since git 2.38.
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "protocol.file.allow",
    "GIT_CONFIG_VALUE_0": "always",
}


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    out = subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


def stop_process(proc: subprocess.Popen, timeout: float = 15) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds; reaped either way."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


def corpus_version(name: str, version: str) -> Path:
    """`../shared/corpora/<name>/<version>`, or skip the test cleanly where absent."""
    path = CORPORA / name / version
    if not path.is_dir():
        pytest.skip(f"corpus {name}/{version} not present at {path}")
    return path


def init_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    return path


def write_files(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")


def commit_all(repo: Path, message: str = "commit") -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def replace_tree(repo: Path, source: Path) -> None:
    """Make the working tree (all but .git) a copy of `source`."""
    for child in repo.iterdir():
        if child.name == ".git":
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    # Plain copy, not copy2: keeping the source's mtimes lets two same-size versions of a file
    # look stat-identical to git, which then skips re-hashing and commits the old blob.
    shutil.copytree(source, repo, dirs_exist_ok=True, symlinks=True, copy_function=shutil.copy)


def make_parent_with_submodule(tmp: Path, doc_repo: Path, name: str) -> Path:
    """A parent repo at tmp/parent with `doc_repo` added as submodule `docs/<name>`."""
    parent = init_repo(tmp / "parent")
    commit_all(parent, "init parent")
    add_submodule(parent, doc_repo, f"docs/{name}")
    return parent


def add_submodule(parent: Path, doc_repo: Path, path: str) -> None:
    """`doc_repo` added to `parent` as a submodule at `path`, and committed."""
    git(parent, "submodule", "add", "-q", str(doc_repo), path)
    commit_all(parent, f"add {path}")


def update_submodule(parent: Path, name: str, commit: str) -> None:
    """Check out `commit` in the parent's submodule docs/<name> and record it in the parent."""
    sub = parent / "docs" / name
    git(sub, "fetch", "-q", "origin")
    git(sub, "checkout", "-q", commit)
    commit_all(parent, f"bump {name}")


SAMPLE_DOCS = REPO_ROOT / "examples" / "sample-docs"


def build_sample_parent(tmp: Path) -> tuple[Path, Path]:
    """A parent repo at tmp/parent with the bundled sample docs as submodule docs/sample-docs.

    Returns (parent, source): commit to `source` and `update_submodule` to move the parent on.
    """
    source = init_repo(tmp / "sample-source")
    shutil.copytree(SAMPLE_DOCS, source, dirs_exist_ok=True)
    commit_all(source, "sample docs")
    return make_parent_with_submodule(tmp, source, "sample-docs"), source


def break_the_cleaner_on_where(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the per-file step's cleaner raise for the sample docs' `where` page (a cleaner bug)."""
    import hetriever.index.process as process

    real = process.clean_page

    def fragile(body, **kwargs):
        if body.lstrip().startswith("The `where` function"):
            raise ValueError("cleaner bug")
        return real(body, **kwargs)

    monkeypatch.setattr(process, "clean_page", fragile)


def build_corpus_parent(tmp: Path, corpus: str) -> tuple[Path, str, str]:
    """A parent repo at tmp/parent with corpus `<corpus>` (v1 then v2) as submodule docs/<corpus>.

    Returns (parent, v1_sha, v2_sha). The submodule is left checked out at v1, so callers can
    index v1 and then bump it with `update_submodule(parent, corpus, v2_sha)`. Skips cleanly
    when the shared corpora are absent.
    """
    v1, v2 = corpus_version(corpus, "v1"), corpus_version(corpus, "v2")
    source = init_repo(tmp / f"{corpus}-source")
    replace_tree(source, v1)
    v1_sha = commit_all(source, f"{corpus} v1")
    replace_tree(source, v2)
    v2_sha = commit_all(source, f"{corpus} v2")
    parent = make_parent_with_submodule(tmp, source, corpus)
    update_submodule(parent, corpus, v1_sha)
    return parent, v1_sha, v2_sha


# A remote that never answers (test_fetch.py, test_flows.py).
SLEEP = "47.25"  # no other process here sleeps this long: how survivors are found (and
# the bound on a test that would otherwise hang)


def hanging_remote(repo: Path, marker: Path) -> None:
    """`origin` is a remote that records git's prompt setting, then never answers (git's
    `ext::` transport runs the command as the remote's end of the connection)."""
    git(repo, "config", "protocol.ext.allow", "always")
    command = f"sh -c echo% $GIT_TERMINAL_PROMPT% >{marker};exec% sleep% {SLEEP}"
    git(repo, "remote", "add", "origin", f"ext::{command}")


def survivors() -> list[str]:
    """Processes still sleeping for SLEEP seconds (the hanging remote's end)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if f"sleep {SLEEP}" in cmdline:
            found.append(f"{pid}: {cmdline}")
    return found


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def repo_of(parent: Path, name: str = "sample-docs") -> Repository:
    """The repository `name` among those discovered under `parent`."""
    (repo,) = [r for r in discover_repositories(parent) if r.name == name]
    return repo


def site_of(files: dict[str, str], dirs: set[str] | None = None, **kw) -> Site:
    """A site from in-memory files; directories exist when a file is under them."""
    present = set(dirs or ())
    for path in files:
        parts = path.split("/")
        present.update("/".join(parts[:i]) for i in range(1, len(parts)))
    listed = [p for p in files if p.startswith("config/_default/")]
    return load_site(files.get, listed, lambda d: d in present, **kw)


def break_remote(repo: Path, nowhere: Path) -> None:
    """Point the clone's `origin` at a directory that does not exist: every fetch fails."""
    git(repo, "remote", "set-url", "origin", str(nowhere))


def move_branch_back(source: Path, commit: str) -> None:
    """What `git push --force` of an older commit leaves on the remote: its branch there."""
    git(source, "reset", "--hard", "--quiet", commit)
