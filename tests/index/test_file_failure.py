"""One file's failure is that file's on the in-process engine too: the file is retried as the
flow's task is, then filed as failed; every other file is indexed, the commit is not recorded,
and the command names the file and its error (not the data directories)."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
import structlog

from hetriever.cli import main as cli_main
from hetriever.index import file_retry
from hetriever.store.knowledge_store import clear_store_cache
from tests.support.helpers import REPO_ROOT, commit_all, init_repo

BROKEN = "content/docs/templates/where.md"


@pytest.fixture
def broken_read(tmp_path, monkeypatch, minilm_model_dir):
    """The sample docs, with every read of where.md failing as an I/O error would."""
    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.startswith("HETRIEVER_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HETRIEVER_SEARCH_RESIDENT_IDLE", "0")  # no resident search process
    repo = init_repo(tmp_path / "docs" / "sample-docs")
    shutil.copytree(REPO_ROOT / "examples" / "sample-docs", repo, dirs_exist_ok=True)
    commit_all(repo, "sample")
    monkeypatch.setenv("HETRIEVER_DOCS_ROOT", str(tmp_path / "docs"))
    monkeypatch.setenv("HETRIEVER_CHROMA_PATH", str(tmp_path / "chroma"))
    monkeypatch.setenv("HETRIEVER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HETRIEVER_MODEL_DIR", str(minilm_model_dir))
    monkeypatch.setenv("HETRIEVER_FAULTS", "process_file:*/where.md:always")
    monkeypatch.setenv("HETRIEVER_FAULTS_STATE", str(tmp_path / "faults"))
    monkeypatch.setattr(file_retry, "RETRY_DELAYS", [0.01] * file_retry.RETRIES)
    clear_store_cache()
    yield tmp_path
    clear_store_cache()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=sys.__stderr__))


def test_in_process_ingest_isolates_a_failing_file(broken_read, capsys):
    code = cli_main(["ingest", "--json"])
    out, err = capsys.readouterr()
    assert code == 1, err  # documented: a repository or file failed, the rest indexed
    (outcome,) = json.loads(out)
    assert not outcome["ok"] and not outcome["completed"]
    assert outcome["files_indexed"] == 6  # every other file of the seven
    assert [f["path"] for f in outcome["failed"]] == [BROKEN]
    assert outcome["failed"][0]["reason"].startswith("failed after retries: InjectedFault")
    assert BROKEN in outcome["error"] and "injected fault" in outcome["error"]
    assert "HETRIEVER_CHROMA_PATH" not in err and "Traceback" not in err
    # tried four times, as the flow's task is (three retries)
    hits = list((broken_read / "faults").iterdir())
    assert len(hits) == 1 and hits[0].stat().st_size == file_retry.RETRIES + 1

    assert cli_main(["status", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["failures"] == 1 and row["failed_files"][0]["path"] == BROKEN
    assert row["status"] == "incomplete" and row["indexed_commit"] == ""


def test_the_table_names_the_file_in_full(broken_read, capsys):
    code = cli_main(["ingest"])
    out, _ = capsys.readouterr()
    assert code == 1
    said = " ".join(out.split())
    assert f"sample-docs: 1 file(s) could not be indexed ({BROKEN}: failed after retries" in said
    assert "the next ingest retries them" in said


def test_a_file_that_recovers_on_a_retry_is_indexed(broken_read, capsys, monkeypatch):
    monkeypatch.setenv("HETRIEVER_FAULTS", "process_file:*/where.md:2")  # two failures, then ok
    assert cli_main(["ingest", "--json"]) == 0
    (outcome,) = json.loads(capsys.readouterr().out)
    assert outcome["ok"] and outcome["files_indexed"] == 7 and outcome["failed"] == []


def test_a_flow_failure_row_keeps_its_counts_and_its_whole_error(capsys):
    """`ingest --engine prefect`: a repository's failure comes with its counts and an error
    longer than any column; the row shows the counts, the error is printed whole below."""
    from hetriever.commands.ingest import print_ingest

    error = (
        "sample-docs: 1 file(s) could not be indexed (content/docs/templates/where.md: "
        "failed after retries: InjectedFault: injected fault at process_file); every other "
        "file is indexed, the commit was not recorded, so the next ingest retries them"
    )
    print_ingest(
        [
            {
                "repository": "sample-docs",
                "ok": False,
                "error": error,
                "mode": "full",
                "new_commit": "a" * 40,
                "files_indexed": 6,
                "skipped": [],
                "files_deleted": 0,
                "chunks_written": 19,
                "chunks_reused": 0,
                "chunks_deleted": 0,
                "total_seconds": 12.5,
            },
            {"repository": "other-docs", "ok": False, "error": "unknown repository"},
        ],
        "/data/chroma",
    )
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("│ sample-docs"))
    assert "failed" in row and "12.5" in row and "│ 6 " in row and "could not" not in row
    said = " ".join(out.split())
    assert error in said  # whole, named once: the repository's name is not repeated
    assert "sample-docs: sample-docs:" not in said
    assert "other-docs: unknown repository" in said and "ingest into /data/chroma" in said


def test_an_os_error_blames_the_data_directories_only_for_their_files(tmp_path, monkeypatch):
    import argparse
    import errno

    from hetriever.cli import _os_hint

    monkeypatch.setenv("HETRIEVER_CHROMA_PATH", str(tmp_path / "chroma"))
    args = argparse.Namespace(chroma_path=None)
    content = OSError(errno.EACCES, "Permission denied", str(tmp_path / "docs" / ".gitmodules"))
    assert _os_hint(content, args) == "check that it exists and can be read"
    data = OSError(errno.EACCES, "Permission denied", str(tmp_path / "chroma" / "x.sqlite3"))
    assert "HETRIEVER_CHROMA_PATH" in _os_hint(data, args)
    state = OSError(errno.EACCES, "Permission denied", str(tmp_path / ".hetriever" / "bm25"))
    assert "HETRIEVER_STATE_DIR" in _os_hint(state, args)
