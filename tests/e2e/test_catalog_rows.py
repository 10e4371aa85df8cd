"""The catalog after a full pass, and after a run killed once its commit was recorded, equals
a clean build table by table and column by column (`tests/support/catalog_snapshot.py`); `status`,
which reads it, says what a clean build says.

Real git repositories, MiniLM, Chroma and BM25; the runs are `hetriever` subprocesses.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.catalog_snapshot import catalog_rows
from tests.support.cli_runs import REPO_NAME, cli_env, run_cli
from tests.support.helpers import commit_all, git, init_repo, write_files

BINARY = "content/docs/binary.md"
BROKEN = "content/docs/broken.md"


def _page(title: str, body: str) -> str:
    return f"---\ntitle: {title}\n---\n\n{body}\n"


def _status(docs: Path, env: dict[str, str]) -> dict:
    done = run_cli(docs, env, "status", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(done.stdout)
    return row


def _ingest(docs: Path, env: dict[str, str], *args: str) -> list[dict]:
    done = run_cli(docs, env, "ingest", "--json", *args)
    return json.loads(done.stdout)


def test_a_full_pass_drops_the_rows_of_skipped_and_failed_files_deleted_from_the_tree(
    tmp_path, minilm_model_dir
):
    docs = init_repo(tmp_path / REPO_NAME)
    write_files(
        docs,
        {
            "content/docs/kept.md": _page("Kept", "A page that stays."),
            BINARY: b"\x00\x01 binary",
            BROKEN: _page("Broken", "A page git will not read."),
        },
    )
    commit_all(docs, "v1")
    blob = git(docs, "rev-parse", f"HEAD:{BROKEN}")
    loose = docs / ".git" / "objects" / blob[:2] / blob[2:]
    data = loose.read_bytes()
    loose.unlink()
    env = cli_env(tmp_path / "case", minilm_model_dir)
    (first,) = _ingest(docs, env)
    assert [f["path"] for f in first["failed"]] == [BROKEN]
    row = _status(docs, env)
    assert row["skipped"] == 1 and [f["path"] for f in row["failed_files"]] == [BROKEN]

    loose.write_bytes(data)  # git needs it to delete the file in the next commit
    (docs / BINARY).unlink()
    (docs / BROKEN).unlink()
    commit_all(docs, "v2: the skipped and the failed file deleted")
    (second,) = _ingest(docs, env, "--full")
    assert second["ok"] and second["completed"], second

    clean_env = cli_env(tmp_path / "clean", minilm_model_dir)
    (clean,) = _ingest(docs, clean_env)
    assert clean["ok"]
    got, want = _status(docs, env), _status(docs, clean_env)
    assert got["skipped"] == want["skipped"] == 0
    assert got["failed_files"] == want["failed_files"] == []
    assert got["failures"] == want["failures"] == 0
    served = f"{REPO_NAME}_v1"
    got_rows = catalog_rows(tmp_path / "case" / "state" / "catalog.sqlite", served)
    want_rows = catalog_rows(tmp_path / "clean" / "state" / "catalog.sqlite", served)
    assert got_rows["files"] == want_rows["files"]
