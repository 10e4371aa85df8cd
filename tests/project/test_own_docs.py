"""README's "Use it on your own docs", as a new user follows it: the parent repo built from two
existing repositories with the recipe's git commands, an ingest, and `status` from another
folder finding the same index (under the user's data directory, not the current one); a push
upstream shows as "behind" before any run; an old `./chroma_data` index is still found."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import structlog

from hetriever.cli import main as cli_main
from hetriever.store.knowledge_store import clear_store_cache
from tests.support.helpers import REPO_ROOT, commit_all, git, init_repo, write_files

PAGE = "---\ntitle: {title}\n---\n\n# {title}\n\nThe {title} page tells how {word} works.\n"


def site(path, word: str):
    repo = init_repo(path)
    write_files(
        repo,
        {
            "content/_index.md": PAGE.format(title=f"{word} home", word=word),
            f"content/{word}.md": PAGE.format(title=word.title(), word=word),
        },
    )
    commit_all(repo, f"{word} site")
    return repo


def recipe_git(cwd, *args: str) -> None:
    """A git command as the README writes it: no test-wide git configuration (the local path
    submodule works by the recipe's own `-c protocol.file.allow=always`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        HOME=str(cwd),
        GIT_AUTHOR_NAME="a",
        GIT_AUTHOR_EMAIL="a@example.invalid",
        GIT_COMMITTER_NAME="a",
        GIT_COMMITTER_EMAIL="a@example.invalid",
    )
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, timeout=60)


@pytest.fixture
def newcomer(tmp_path, monkeypatch, minilm_model_dir):
    """A user with two Hugo site repos, no hetriever settings but the docs root."""
    for key in [k for k in os.environ if k.startswith("HETRIEVER_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HETRIEVER_SEARCH_RESIDENT_IDLE", "0")  # no resident search process
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HETRIEVER_MODEL_DIR", str(minilm_model_dir))
    monkeypatch.setenv("HETRIEVER_LOG_LEVEL", "WARNING")
    clear_store_cache()
    yield tmp_path
    clear_store_cache()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=sys.__stderr__))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    clear_store_cache()
    code = cli_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def build_parent(tmp_path):
    """The README recipe's git steps, in tmp_path."""
    site_a, site_b = (
        site(tmp_path / "src" / "site-a", "quokka"),
        site(tmp_path / "src" / "site-b", "wombat"),
    )
    parent = tmp_path / "docs-parent"
    parent.mkdir()
    recipe_git(parent, "init", "-q")
    recipe_git(
        parent, "-c", "protocol.file.allow=always", "submodule", "add", str(site_a), "site-a"
    )
    recipe_git(
        parent, "-c", "protocol.file.allow=always", "submodule", "add", str(site_b), "site-b"
    )
    recipe_git(parent, "commit", "-qm", "the documentation sites")
    return parent, site_a


def test_the_readme_recipe_builds_the_parent_and_says_so():
    readme = (REPO_ROOT / "README.md").read_text()
    assert "## Use it on your own docs" in readme
    assert "git -c protocol.file.allow=always submodule add ~/src/site-a site-a" in readme
    assert "export HETRIEVER_DOCS_ROOT=~/docs-parent" in readme
    assert "HETRIEVER_CORPORA" in readme  # how to run the corpus tests


def test_status_from_another_folder_finds_the_index(newcomer, capsys, monkeypatch):
    parent, _ = build_parent(newcomer)
    monkeypatch.setenv("HETRIEVER_DOCS_ROOT", str(parent))
    monkeypatch.chdir(parent)
    code, out, err = run(capsys, "ingest", "--json")
    assert code == 0, err
    assert sorted(o["repository"] for o in json.loads(out)) == ["site-a", "site-b"]
    assert not (parent / "chroma_data").exists()  # nothing in the current directory

    elsewhere = newcomer / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = run(capsys, "status", "--json")
    assert code == 0 and "never indexed" not in out
    rows = json.loads(out)
    assert [r["up_to_date"] for r in rows] == [True, True]
    assert all(r["files"] == 2 for r in rows)
    index = rows[0]["index"]
    assert index.startswith(str(newcomer / "data" / "hetriever" / "docs-parent-"))
    assert index.endswith("/chroma")

    code, out, _ = run(capsys, "status")
    assert "status of" in out and "docs-parent-" in "".join(out.split())

    code, out, _ = run(capsys, "search", "wombat", "-k", "1")
    assert code == 0 and "Wombat" in out and "index:" in out


def test_a_push_upstream_shows_as_behind_before_the_next_run(newcomer, capsys, monkeypatch):
    parent, site_a = build_parent(newcomer)
    monkeypatch.setenv("HETRIEVER_DOCS_ROOT", str(parent))
    monkeypatch.chdir(newcomer)
    assert run(capsys, "ingest", "--json")[0] == 0
    code, out, _ = run(capsys, "status", "--json")
    rows = {r["repository"]: r for r in json.loads(out)}
    assert rows["site-a"]["behind_upstream"] == 0
    assert rows["site-a"]["upstream_ref"] == "origin/HEAD"

    write_files(site_a, {"content/platypus.md": PAGE.format(title="Platypus", word="platypus")})
    pushed = commit_all(site_a, "a new page")
    write_files(site_a, {"content/echidna.md": PAGE.format(title="Echidna", word="echidna")})
    pushed = commit_all(site_a, "another")

    # As of the last fetch (none since the push): nothing is known to wait yet.
    rows = {r["repository"]: r for r in json.loads(run(capsys, "status", "--json")[1])}
    assert rows["site-a"]["behind_upstream"] == 0
    # Fetched on request: two commits wait; the checkout (and the index) stay where they were.
    rows = {r["repository"]: r for r in json.loads(run(capsys, "status", "--fetch", "--json")[1])}
    assert rows["site-a"]["behind_upstream"] == 2
    assert rows["site-a"]["upstream_commit"] == pushed
    assert rows["site-a"]["up_to_date"] and rows["site-b"]["behind_upstream"] == 0
    code, out, err = run(capsys, "status")
    assert "behind by 2" in out and "commits wait upstream" in err

    # the HTTP API's listing says the same
    from hetriever.core.config import load_settings
    from hetriever.serve.service import DocsService

    service = DocsService(load_settings())
    try:
        listed = {r["repository"]: r for r in service.repositories()}
    finally:
        service.close()
    assert listed["site-a"]["behind_upstream"] == 2
    assert listed["site-a"]["upstream_commit"] == pushed

    # a fetching run takes it in: behind by none
    git(parent / "site-a", "checkout", "-q", "--detach", "origin/HEAD")
    assert run(capsys, "ingest", "--json")[0] == 0
    rows = {r["repository"]: r for r in json.loads(run(capsys, "status", "--json")[1])}
    assert rows["site-a"]["behind_upstream"] == 0 and rows["site-a"]["indexed_commit"] == pushed


def test_an_old_chroma_data_index_is_still_found(newcomer, capsys, monkeypatch):
    parent, _ = build_parent(newcomer)
    monkeypatch.setenv("HETRIEVER_DOCS_ROOT", str(parent))
    monkeypatch.chdir(newcomer)
    # made as before: ./chroma_data in the current directory, .hetriever beside it
    assert run(capsys, "--chroma-path", "chroma_data", "ingest", "--json")[0] == 0
    code, out, err = run(capsys, "status", "--json")
    assert [r["up_to_date"] for r in json.loads(out)] == [True, True]
    assert "using the index in ./chroma_data" in err
    assert f"HETRIEVER_CHROMA_PATH={newcomer / 'chroma_data'}" in err

    monkeypatch.chdir(parent)  # elsewhere: not found, and status says where it looked
    code, out, err = run(capsys, "status", "--json")
    assert [r["status"] for r in json.loads(out)] == ["never indexed"] * 2
    assert "no index at " + str(newcomer / "data" / "hetriever") in err


def test_a_json_command_reports_a_usage_error_as_json(newcomer, capsys, monkeypatch):
    parent, _ = build_parent(newcomer)
    monkeypatch.setenv("HETRIEVER_DOCS_ROOT", str(parent))
    code, out, err = run(capsys, "ingest", "-r", "nope-docs", "--json")
    assert code == 2
    said = json.loads(out)
    assert said["ok"] is False and "unknown repositories: nope-docs" in said["error"]
    assert "hetriever: error:" not in err  # said once, where the outcome would be
