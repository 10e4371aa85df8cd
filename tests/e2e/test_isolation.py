"""One bad repository never blocks the others; a typo never wipes an index.

Real `hetriever` CLI subprocesses over real git repositories: a repository with no commits, one
with a file name that is not valid UTF-8, submodules that lead out of the parent or were never
checked out, a mistyped content directory, a commit that deletes most pages.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support.cli_runs import cli_env, page_text, run_cli
from tests.support.helpers import commit_all, git, init_repo, write_files

pytestmark = pytest.mark.slow  # CLI subprocesses

UNDECODABLE = b"content/docs/caf\xe9.md"  # Latin-1, not UTF-8
UNDECODABLE_SHOWN = "content/docs/caf\\xe9.md"


def pages(repo: Path, n: int, version: int = 1, start: int = 0) -> None:
    write_files(
        repo,
        {f"content/docs/page-{i:03d}.md": page_text(i, version) for i in range(start, start + n)},
    )


def json_run(docs: Path, env: dict, *args: str) -> tuple[int, list[dict], str]:
    done = run_cli(docs, env, *args, "--json")
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout or "[]"), done.stderr


def by_repo(rows: list[dict]) -> dict[str, dict]:
    return {r["repository"]: r for r in rows}


def test_a_repository_without_commits_or_with_an_undecodable_name_fails_alone(
    tmp_path, minilm_model_dir
):
    docs = tmp_path / "docs"
    pages(init_repo(docs / "alpha-docs"), 3)
    commit_all(docs / "alpha-docs", "alpha")
    init_repo(docs / "bravo-docs")  # no commits at all
    names = init_repo(docs / "names-docs")
    pages(names, 2)
    (names / "content" / "docs").mkdir(parents=True, exist_ok=True)
    with open(os.fsencode(names) + b"/" + UNDECODABLE, "wb") as f:
        f.write(page_text(50, 1).encode())
    commit_all(names, "names")
    env = cli_env(tmp_path, minilm_model_dir)

    code, outcomes, _ = json_run(docs, env, "ingest")
    got = by_repo(outcomes)
    assert code == 1  # one repository failed ...
    assert got["alpha-docs"]["ok"] and got["alpha-docs"]["files_indexed"] == 3  # ... alone
    assert not got["bravo-docs"]["ok"] and "has no commits" in got["bravo-docs"]["error"]
    assert got["names-docs"]["ok"] and got["names-docs"]["files_indexed"] == 2
    assert {"path": UNDECODABLE_SHOWN, "reason": "file name is not valid UTF-8"} in got[
        "names-docs"
    ]["skipped"]

    code, rows, _ = json_run(docs, env, "status")
    status = by_repo(rows)
    assert code == 0
    assert "has no commits" in status["bravo-docs"]["error"]
    assert status["alpha-docs"]["up_to_date"] and status["alpha-docs"]["error"] == ""
    assert status["names-docs"]["up_to_date"] and status["names-docs"]["status"] == "complete"

    # the next commit of the repository with the bad name is indexed as usual
    pages(names, 1, start=10)
    commit_all(names, "one more page")
    code, outcomes, _ = json_run(docs, env, "ingest", "-r", "names-docs")
    (outcome,) = outcomes
    assert code == 0 and outcome["mode"] == "incremental" and outcome["files_indexed"] == 1


def test_bad_submodules_fail_alone_and_never_stop_the_good_one(tmp_path, minilm_model_dir):
    good = init_repo(tmp_path / "src" / "good-docs")
    pages(good, 2)
    commit_all(good, "good")
    parent = init_repo(tmp_path / "parent")
    commit_all(parent, "init")
    git(
        parent,
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "add",
        "-q",
        str(good),
        "docs/good-docs",
    )
    with open(parent / ".gitmodules", "a") as f:
        f.write(
            '[submodule "evil"]\n\tpath = ../../etc\n\turl = https://x.invalid/etc\n'
            '[submodule "lazy"]\n\tpath = docs/lazy-docs\n\turl = https://x.invalid/lazy\n'
        )
    commit_all(parent, "submodules")
    env = cli_env(tmp_path, minilm_model_dir)

    code, outcomes, _ = json_run(parent, env, "ingest")
    got = by_repo(outcomes)
    assert code == 1
    assert got["good-docs"]["ok"] and got["good-docs"]["files_indexed"] == 2
    assert "outside the parent repository" in got["../../etc"]["error"] and "etc" not in got
    assert "not initialised" in got["lazy-docs"]["error"]

    code, outcomes, _ = json_run(parent, env, "ingest", "-r", "good-docs")
    assert code == 0 and [o["repository"] for o in outcomes] == ["good-docs"]
    code, rows, _ = json_run(parent, env, "status")
    assert code == 0 and by_repo(rows)["good-docs"]["up_to_date"]
    assert "outside the parent" in by_repo(rows)["../../etc"]["error"]


def test_a_mistyped_content_dir_or_a_mass_delete_changes_nothing(tmp_path, minilm_model_dir):
    repo = init_repo(tmp_path / "load-docs")
    pages(repo, 8)
    commit_all(repo, "v1")
    env = cli_env(tmp_path, minilm_model_dir)
    code, _, _ = json_run(repo, env, "ingest")
    assert code == 0

    for args in (("--full",), ()):  # a changed content_dir is a full pass: no silent no-op
        code, outcomes, _ = json_run(
            repo, {**env, "HETRIEVER_CONTENT_DIR": "contnet"}, "ingest", *args
        )
        assert code == 1 and "'contnet' does not exist at commit" in outcomes[0]["error"], args
    code, rows, _ = json_run(repo, env, "status")
    assert rows[0]["chunks"] == 8 and rows[0]["status"] == "complete"

    for i in range(6):
        (repo / f"content/docs/page-{i:03d}.md").unlink()
    commit_all(repo, "delete most pages")
    for args in ((), ("--full",)):
        code, outcomes, _ = json_run(repo, env, "ingest", *args)
        assert code == 1 and "would delete 6 of 8 chunks" in outcomes[0]["error"], args
    code, rows, _ = json_run(repo, env, "status")
    assert rows[0]["chunks"] == 8 and rows[0]["status"] == "complete"

    done = run_cli(repo, env, "ingest", "--allow-mass-delete")
    assert done.returncode == 2 and "--allow-mass-delete needs --full" in done.stderr
    code, outcomes, _ = json_run(repo, env, "ingest", "--full", "--allow-mass-delete")
    assert code == 0 and outcomes[0]["chunks_deleted"] == 6
    code, rows, _ = json_run(repo, env, "status")
    assert rows[0]["chunks"] == 2 and rows[0]["up_to_date"]


def test_searching_a_path_or_state_dir_no_ingest_wrote_is_an_error(tmp_path, minilm_model_dir):
    repo = init_repo(tmp_path / "load-docs")
    pages(repo, 2)
    commit_all(repo, "v1")
    env = cli_env(tmp_path, minilm_model_dir)
    assert run_cli(repo, env, "ingest").returncode == 0
    mistyped = tmp_path / "chroam"
    typo = {**env, "HETRIEVER_CHROMA_PATH": str(mistyped)}
    for argv in (
        ("search", "alpha"),
        ("purge", "--older-than", "0"),
        ("forget", "-r", "load-docs"),
    ):
        done = run_cli(repo, typo, *argv)
        assert done.returncode == 2 and "the Chroma directory does not exist" in done.stderr, argv
    code, rows, err = json_run(repo, typo, "status")  # nothing indexed there, and it says so
    assert code == 0 and rows[0]["status"] == "never indexed" and rows[0]["chunks"] == 0
    assert "note: no index at" in err and str(mistyped) in err
    assert not mistyped.exists()  # reading never creates a store
    unrelated = tmp_path / "unrelated"  # a directory that exists, holding no index
    unrelated.mkdir()
    for argv in (("search", "alpha"), ("purge", "--older-than", "0"), ("status",)):
        done = run_cli(repo, {**env, "HETRIEVER_CHROMA_PATH": str(unrelated)}, *argv)
        assert "the directory holds no Chroma index" in done.stderr, argv
    assert list(unrelated.iterdir()) == []
    code, rows, _ = json_run(repo, env, "status")  # the real index was not touched
    assert rows[0]["chunks"] > 0 and rows[0]["up_to_date"]
    done = run_cli(
        repo, {**env, "HETRIEVER_STATE_DIR": str(tmp_path / "elsewhere")}, "search", "alpha"
    )
    assert done.returncode == 2 and "the state directory holds no index" in done.stderr
    assert run_cli(repo, env, "search", "alpha").returncode == 0


def test_two_indexes_beside_each_other_do_not_share_a_state_directory(tmp_path, minilm_model_dir):
    # The state directory defaults to the Chroma directory's parent: `chroma_data` and
    # `chroma_test` in one folder would share it, and the second index would look up to
    # date while empty (its runs recorded as the first's).
    repo = init_repo(tmp_path / "load-docs")
    pages(repo, 2)
    commit_all(repo, "v1")
    env = cli_env(tmp_path, minilm_model_dir)
    del env["HETRIEVER_STATE_DIR"]
    first = {**env, "HETRIEVER_CHROMA_PATH": str(tmp_path / "data" / "chroma_data")}
    second = {**env, "HETRIEVER_CHROMA_PATH": str(tmp_path / "data" / "chroma_test")}
    assert json_run(repo, first, "ingest")[0] == 0

    for args in (("ingest",), ("status",), ("search", "page")):
        refused = run_cli(repo, second, *args)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, args
        assert (
            "belongs to the index at" in refused.stderr and "HETRIEVER_STATE_DIR" in refused.stderr
        )
    own = {**second, "HETRIEVER_STATE_DIR": str(tmp_path / "data" / "test-state")}
    code, outcomes, _ = json_run(repo, own, "ingest")
    assert code == 0 and outcomes[0]["mode"] == "full" and outcomes[0]["chunks_written"] > 0

    # A copy of an index with its state directory (a backup restored elsewhere) is that index.
    shutil.copytree(tmp_path / "data", tmp_path / "copy")
    copied = {**env, "HETRIEVER_CHROMA_PATH": str(tmp_path / "copy" / "chroma_data")}
    code, rows, _ = json_run(repo, copied, "status")
    assert code == 0 and rows[0]["status"] == "complete"
    # A Chroma directory moved elsewhere takes its state directory's record with it.
    (tmp_path / "data" / "chroma_data").rename(tmp_path / "data" / "chroma_moved")
    moved = {**env, "HETRIEVER_CHROMA_PATH": str(tmp_path / "data" / "chroma_moved")}
    code, rows, _ = json_run(repo, moved, "status")
    assert code == 0 and rows[0]["status"] == "complete"


def test_a_badly_named_repository_fails_alone(tmp_path, minilm_model_dir):
    docs = tmp_path / "docs"
    for name in ("good-docs", "B_"):  # no valid name in it (Bad_Docs would be bad-docs)
        pages(init_repo(docs / name), 2)
        commit_all(docs / name, name)
    env = cli_env(tmp_path, minilm_model_dir)

    code, outcomes, _ = json_run(docs, env, "ingest")
    got = by_repo(outcomes)
    assert code == 1 and got["good-docs"]["ok"] and got["good-docs"]["files_indexed"] == 2
    assert not got["B_"]["ok"] and "'B_'" in got["B_"]["error"]
    assert "3..63 characters" in got["B_"]["error"]

    code, rows, _ = json_run(docs, env, "status")
    status = by_repo(rows)
    assert code == 0 and status["good-docs"]["status"] == "complete"
    assert status["B_"]["status"] == "unusable" and "invalid" in status["B_"]["error"]
    code, outcomes, _ = json_run(docs, env, "ingest", "-r", "good-docs")
    assert code == 0 and outcomes[0]["mode"] == "noop"
    assert run_cli(docs, env, "search", "page").returncode == 0
