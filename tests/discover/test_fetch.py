"""Fetching a repository's remote against real git: a remote that stops answering fails the
fetch within its deadline, with every process git started gone, and never prompts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hetriever.core.errors import SourceError
from hetriever.discover import upstream as upstream_module
from hetriever.discover.fetch import FetchTimedOut, fetch_target
from hetriever.discover.git_runner import run_git
from hetriever.discover.repositories import Repository
from tests.support.helpers import commit_all, git, hanging_remote, init_repo, survivors, write_files


@pytest.fixture
def hung(tmp_path: Path) -> Repository:
    repo = init_repo(tmp_path / "hung")
    write_files(repo, {"content/a.md": "---\ntitle: A\n---\n\nA.\n"})
    commit_all(repo, "a page")
    hanging_remote(repo, tmp_path / "prompt-setting")
    return Repository(name="hung-docs", path=repo)


def test_a_remote_that_stops_answering_fails_the_fetch_at_its_deadline(
    hung: Repository, tmp_path: Path
) -> None:
    began = time.monotonic()
    with pytest.raises(FetchTimedOut, match="stopped answering") as raised:
        fetch_target(hung, None, timeout=1.5)
    took = time.monotonic() - began
    assert 1.5 <= took < 10, took
    assert isinstance(raised.value, SourceError)  # a run reports it as that repository's failure
    assert "HETRIEVER_FETCH_TIMEOUT" in (raised.value.hint or "")
    # git's transport helper and the remote's end were killed with it, not left behind
    assert survivors() == []
    # and git was told never to ask for credentials on the terminal
    assert (tmp_path / "prompt-setting").read_text().strip() == "0"


def test_status_says_the_fetch_timed_out_instead_of_waiting(
    hung: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upstream_module, "GIT_TIMEOUT", 1.0)
    began = time.monotonic()
    found = upstream_module.upstream(hung, "", fetch_first=True)
    assert time.monotonic() - began < 10
    assert "stopped answering" in found.error and found.behind is None
    assert survivors() == []


def test_run_git_returns_what_git_said(tmp_path: Path) -> None:
    repo = Repository(name="plain", path=init_repo(tmp_path / "plain"))
    done = run_git(repo, "rev-parse", "--verify", "--quiet", "no-such-ref")
    assert done.returncode != 0 and not done.ok and done.stdout == b""
    assert run_git(repo, "rev-parse", "--is-inside-work-tree").text == "true"


def test_what_git_said_is_one_line(tmp_path: Path) -> None:
    """git's message for an unreachable remote runs over several lines; a status note or a
    run's outcome shows it on one."""
    repo = init_repo(tmp_path / "gone")
    git(repo, "remote", "add", "origin", str(tmp_path / "nowhere"))
    with pytest.raises(SourceError) as raised:
        fetch_target(Repository(name="gone-docs", path=repo), None, timeout=30)
    assert "\n" not in raised.value.message
    assert "failed: fatal:" in raised.value.message
