"""Every git command hetriever runs goes through here: one environment, one deadline rule,
one way of failing.

git never asks for credentials on a terminal (nobody would answer a scheduled run: a remote
that needs them fails at once) and speaks the C locale, so its words are the same everywhere.
A command with a `timeout` is killed after it, with every process it started (the transport
helper, ssh), and raises `subprocess.TimeoutExpired`; what that means (a remote that stopped
answering) the caller says. git's own words in an error are redacted: they may name a remote
with its credentials.

`run_git` answers whatever git exits with; `git_output` is for a command that must succeed
(its stdout, else a SourceError); `start_git` starts a long-lived process talking over pipes
(`git cat-file --batch`). A place is a discovered repository (its own problem raised first,
as `repositories.check_usable` does) or a plain directory (the parent repository, a fresh
demo). Repositories run git through here, so this module names them only by their shape.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hetriever.core.errors import SourceError
from hetriever.core.redact import redact_text

__all__ = ["GitRun", "git_output", "is_work_tree_top", "run_git", "start_git"]

GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANGUAGE": "C"}


class _Repository(Protocol):
    """What git needs of a `Repository`."""

    @property
    def name(self) -> str: ...

    @property
    def path(self) -> Path: ...

    @property
    def problem(self) -> str: ...


Place = _Repository | Path


@dataclass(frozen=True)
class GitRun:
    """What one git command answered."""

    args: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def text(self) -> str:
        """stdout as text, without the surrounding whitespace."""
        return self.stdout.decode("utf-8", "surrogateescape").strip()

    @property
    def said(self) -> str:
        """git's complaint on one line, redacted."""
        return redact_text(
            " ".join(line.strip() for line in self.stderr.splitlines() if line.strip())
        )


def _where(place: Place) -> tuple[Path, str]:
    """The directory git runs in and the name errors give it."""
    if isinstance(place, Path):
        cwd, label, name = place, str(place), str(place)
    else:
        if place.problem:  # an unusable submodule: its own problem, never git's
            raise SourceError(place.problem)
        cwd, label, name = place.path, f"{place.name} ({place.path})", place.name
    if not Path(cwd).is_dir():
        raise SourceError(
            f"repository {name} is missing at {cwd}", hint="run discovery again or check docs_root"
        )
    return Path(cwd), label


def _env(extra: Mapping[str, str] | None) -> dict[str, str]:
    return {**os.environ, **GIT_ENV, **(extra or {})}


def run_git(
    place: Place, *args: str, timeout: float | None = None, env: Mapping[str, str] | None = None
) -> GitRun:
    """`git <args>` in `place`, whatever it exits with; TimeoutExpired after `timeout`."""
    cwd, _ = _where(place)
    try:
        proc = subprocess.Popen(
            ["git", *args],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(env),
            start_new_session=True,
        )
    except FileNotFoundError:
        raise SourceError("git is not installed (or not on PATH)", hint="install git") from None
    with proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
            raise
    return GitRun(tuple(args), proc.returncode, out, err.decode("utf-8", "replace"))


def git_output(place: Place, *args: str, env: Mapping[str, str] | None = None) -> bytes:
    """The stdout of a git command that must succeed; a SourceError with git's words else."""
    done = run_git(place, *args, env=env)
    if not done.ok:
        _, label = _where(place)
        raise SourceError(
            f"git {args[0]} failed in {label}: {done.said or done.returncode}",
            hint="check that the repository is intact (`git fsck`)",
        )
    return done.stdout


def is_work_tree_top(path: Path) -> bool:
    """Whether `path` is the top of a git working tree (a repository's own, or a checked-out
    submodule's), not a plain folder, nor one inside another repository."""
    if not path.is_dir():
        return False
    done = run_git(path, "rev-parse", "--show-toplevel")
    return done.ok and Path(done.text).resolve() == path.resolve()


def start_git(place: Place, *args: str) -> subprocess.Popen:
    """A git process reading requests on stdin and answering on stdout (its stderr dropped);
    the caller ends it."""
    cwd, _ = _where(place)
    return subprocess.Popen(
        ["git", *args],
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_env(None),
    )
