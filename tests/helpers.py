"""Test helpers: real git repositories built in tmp_path, and the shared corpora."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
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
    out = subprocess.run(["git", *args], cwd=cwd, env=env, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


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
    shutil.copytree(source, repo, dirs_exist_ok=True, symlinks=True)


def make_parent_with_submodule(tmp: Path, doc_repo: Path, name: str) -> Path:
    """A parent repo at tmp/parent with `doc_repo` added as submodule `docs/<name>`."""
    parent = init_repo(tmp / "parent")
    commit_all(parent, "init parent")
    git(parent, "submodule", "add", "-q", str(doc_repo), f"docs/{name}")
    commit_all(parent, f"add {name}")
    return parent


def update_submodule(parent: Path, name: str, commit: str) -> None:
    """Check out `commit` in the parent's submodule docs/<name> and record it in the parent."""
    sub = parent / "docs" / name
    git(sub, "fetch", "-q", "origin")
    git(sub, "checkout", "-q", commit)
    commit_all(parent, f"bump {name}")
