"""The space reserve and one JSON error, without a small disk: ENOSPC faked at the call."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import sys

import pytest

from hetriever.cli import main
from hetriever.commands import reserve
from tests.support.chroma_fixtures import store_settings


def test_a_read_that_finds_the_disk_full_runs_again_after_releasing_the_reserve(tmp_path):
    settings = store_settings(tmp_path)
    settings.resolved_state_dir.mkdir(parents=True)
    reserve.keep(settings)
    kept = settings.resolved_state_dir / reserve.RESERVE_NAME
    assert kept.stat().st_size == reserve.RESERVE_BYTES
    calls, warned = [], []

    def read():
        calls.append(1)
        if len(calls) == 1:  # as SQLite says it, opening a WAL database on a full disk
            raise sqlite3.OperationalError("database or disk is full")
        return "answer"

    assert reserve.reading(settings, read, warned.append) == "answer"
    assert len(calls) == 2 and not kept.exists()
    (warning,) = warned
    assert "is full" in warning and "released" in warning
    # No reserve left: the error stands, once.
    with pytest.raises(OSError):
        reserve.reading(
            settings,
            lambda: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")),
            warned.append,
        )
    assert len(warned) == 1
    # Other errors are not the disk's.
    with pytest.raises(ValueError):
        reserve.reading(settings, lambda: (_ for _ in ()).throw(ValueError("bug")), warned.append)


def test_keep_leaves_no_partial_reserve_when_the_disk_is_full(tmp_path, monkeypatch):
    settings = store_settings(tmp_path)
    settings.resolved_state_dir.mkdir(parents=True)
    real_open = open

    class Full:
        def __init__(self, path, mode):
            self.file = real_open(path, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(reserve, "open", Full, raising=False)
    reserve.keep(settings)
    assert not (settings.resolved_state_dir / reserve.RESERVE_NAME).exists()


def test_json_commands_say_an_error_once_as_json(tmp_path, monkeypatch, capsys):
    import structlog

    import hetriever.commands.admin as admin
    import hetriever.discover.repositories as repositories

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "state"))

    for key in [k for k in os.environ if k.startswith("HETRIEVER_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HETRIEVER_SEARCH_RESIDENT_IDLE", "0")  # no resident search process
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(admin, "status_rows", full)
    monkeypatch.setattr(repositories, "configured_repositories", lambda settings: [])
    try:
        code = main(["status", "--json"])
        out, err = capsys.readouterr()
        assert code == 1 and err == ""
        assert json.loads(out) == {
            "ok": False,
            "error": f"no space left on the device of {tmp_path}/state",
            "hint": "free some space, then re-run",
            "exit_code": 1,
        }
        code = main(["status"])
        out, err = capsys.readouterr()
        assert code == 1 and out == "" and err.count("no space left") == 1
    finally:  # the CLI pointed the log at capsys's stream, which closes after the test
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=sys.__stderr__))


def test_a_full_disk_named_below_is_not_named_again(tmp_path):
    from hetriever.core.storage import StorageError, storage_problem

    full = OSError(errno.ENOSPC, "No space left on device")
    named = storage_problem(full, [tmp_path])
    assert isinstance(named, StorageError)
    assert storage_problem(named, [tmp_path]) is named
    try:  # as the store re-raises it under its own error
        try:
            raise named
        except StorageError as exc:
            raise RuntimeError("write failed") from exc
    except RuntimeError as outer:
        again = storage_problem(outer, [tmp_path])
    assert again is named and str(again).count("no space left") == 1


def test_a_read_lent_the_reserve_takes_it_back_at_exit(tmp_path):
    # In a process of its own: the reserve comes back when the command ends (its databases
    # closed), what fits of it on the still full disk.
    import subprocess

    script = (
        "import sqlite3, sys\n"
        "from hetriever.commands import reserve\n"
        "from tests.support.chroma_fixtures import store_settings\n"
        "from pathlib import Path\n"
        "settings = store_settings(Path(sys.argv[1]))\n"
        "calls = []\n"
        "def read():\n"
        "    calls.append(1)\n"
        "    if len(calls) == 1:\n"
        "        raise sqlite3.OperationalError('database or disk is full')\n"
        "    return 'answer'\n"
        "print(reserve.reading(settings, read, lambda w: None))\n"
        "print((settings.resolved_state_dir / reserve.RESERVE_NAME).exists())\n"
    )
    settings = store_settings(tmp_path)
    settings.resolved_state_dir.mkdir(parents=True)
    reserve.keep(settings)
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.getcwd(),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["answer", "False"]  # lent while the command ran
    kept = settings.resolved_state_dir / reserve.RESERVE_NAME
    assert kept.stat().st_size == reserve.RESERVE_BYTES  # and back after it
