"""Faults of the sources themselves, through the CLI: repositories whose names collide, and an
upstream that moved back (a force-pushed revert).

Real git repositories in tmp_path, real MiniLM, Chroma and BM25; `hetriever` subprocesses.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli_runs import cli_env, run_cli
from tests.support.helpers import commit_all, init_repo, write_files


def _page(title: str, body: str) -> str:
    return f"---\\ntitle: {title}\\n---\\n\\n{body}\\n"


def _docs_repo(path: Path, word: str) -> Path:
    repo = init_repo(path)
    write_files(repo, {"content/docs/page.md": _page(word.title(), f"All about {word}.")})
    commit_all(repo, "v1")
    return repo


# --- item 9: two directories whose names normalise alike ----------------------------------


def test_two_directories_named_alike_fail_alone_and_the_others_go_on(tmp_path, minilm_model_dir):
    root = tmp_path / "docs"
    _docs_repo(root / "team-docs", "teams")
    _docs_repo(root / "Team_Docs", "captains")
    _docs_repo(root / "other-docs", "others")
    env = cli_env(tmp_path, minilm_model_dir)

    one = run_cli(root, env, "ingest", "-r", "other-docs", "--json")
    assert one.returncode == 0, one.stderr[-2000:]
    (outcome,) = json.loads(one.stdout)
    assert outcome["repository"] == "other-docs" and outcome["ok"] and outcome["completed"]

    every = run_cli(root, env, "ingest", "--json")
    assert every.returncode == 1, every.stderr[-2000:]  # one repository failed, as documented
    outcomes = {o["repository"]: o for o in json.loads(every.stdout)}
    assert set(outcomes) == {"other-docs", "team-docs"}
    assert outcomes["other-docs"]["ok"]
    error = outcomes["team-docs"]["error"]
    assert not outcomes["team-docs"]["ok"]
    assert "all named 'team-docs'" in error
    assert str(root / "team-docs") in error and str(root / "Team_Docs") in error
    assert "Traceback" not in every.stderr

    status = run_cli(root, env, "status", "--json")
    assert status.returncode == 0, status.stderr[-2000:]
    rows = {r["repository"]: r for r in json.loads(status.stdout)}
    assert rows["other-docs"]["status"] == "complete"
    assert "team-docs" in rows
