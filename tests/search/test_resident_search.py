"""`hetriever search` through the resident search process it starts: a real index, real CLI
subprocesses, the real resident process; the same answers as an in-process search."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from hetriever.commands import resident
from tests.support.helpers import REPO_ROOT, commit_all, init_repo, write_files

pytestmark = pytest.mark.slow  # every wait here has its deadline, every subprocess its timeout

HETRIEVER = Path(sys.executable).parent / "hetriever"
PLATYPUS = """---
title: Platypus handling
---

# Platypus handling

The platypus page is for the team only: feeding schedules of the platypus enclosure.
"""
ZEBRAFINCH = """---
title: Zebrafinch
---

# Zebrafinch

A zebrafinch sings a short song; this page arrived after the resident process started.
"""
QUERIES = [  # (arguments, what they ask)
    ["where"],
    ["range over pages", "-k", "3"],
    ["quokka", "--group", "chunk"],
    ["how do I filter pages by tag", "--mode", "dense"],
    ["platypus", "--access", "TEAM"],  # access-restricted: only a TEAM caller sees team-docs
    ["platypus"],
    ["where", "-r", "team-docs", "--access", "PUBLIC,TEAM"],
]


@pytest.fixture(scope="module")
def index(tmp_path_factory, minilm_model_dir):
    root = tmp_path_factory.mktemp("resident")
    for name in ("sample-docs", "team-docs"):
        repo = init_repo(root / "docs" / name)
        shutil.copytree(REPO_ROOT / "examples" / "sample-docs", repo, dirs_exist_ok=True)
        if name == "team-docs":
            write_files(repo, {"content/docs/platypus.md": PLATYPUS})
        commit_all(repo, "docs")
    run_dir = Path(tempfile.mkdtemp(prefix="hr-"))  # a socket's path must stay short
    env = {
        **os.environ,
        "HETRIEVER_DOCS_ROOT": str(root / "docs"),
        "HETRIEVER_CHROMA_PATH": str(root / "chroma"),
        "HETRIEVER_MODEL_DIR": str(minilm_model_dir),
        "HETRIEVER_ACCESS_LEVELS": "team-docs=TEAM",
        "HETRIEVER_LOG_LEVEL": "WARNING",
        "HETRIEVER_SEARCH_RESIDENT_IDLE": "120",
        "XDG_RUNTIME_DIR": str(run_dir),
    }
    in_process = {**env, "HETRIEVER_SEARCH_RESIDENT_IDLE": "0"}
    assert cli(in_process, "ingest").returncode == 0
    yield root, env, in_process
    stop_resident(env, root)
    shutil.rmtree(run_dir, ignore_errors=True)


def cli(env, *args):
    return subprocess.run(
        [str(HETRIEVER), *args],
        env=env,
        cwd=env["HETRIEVER_DOCS_ROOT"],
        capture_output=True,
        text=True,
        timeout=300,
    )


def search(env, args):
    out = cli(env, "search", "--json", *args)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    answer.pop("search_time_ms")
    return answer


def route(env):
    out = cli(env, "status", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)[0]["search_route"]


def warm_cli_searches(env) -> int:
    out = json.loads(cli(env, "metrics", "--json", "--source", "cli").stdout)
    return sum(row["count"] for row in out.get("by_source", []) if row["temperature"] == "warm")


def wait_for_resident(env, timeout=180.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = route(env)
        if found["route"] == "resident":
            return found
        time.sleep(1)
    raise AssertionError("the resident search process did not start")


def stop_resident(env, root):
    found = route(env)
    if found["route"] == "resident":
        os.kill(found["pid"], signal.SIGTERM)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and route(env)["route"] == "resident":
            time.sleep(0.5)


def test_resident_answers_as_in_process_and_sees_a_new_ingest(index):
    root, env, in_process = index
    assert route(in_process)["route"] == "in-process"
    expected = [search(in_process, args) for args in QUERIES]
    # The access levels are the caller's: the public search does not see team-docs.
    assert any(m["metadata"]["repository"] == "team-docs" for m in expected[4]["matches"])
    assert all(m["metadata"]["repository"] != "team-docs" for m in expected[5]["matches"])

    assert route(env)["route"] == "in-process"
    search(env, QUERIES[0])  # in-process, and starts the resident process
    found = wait_for_resident(env)
    assert found["pid"] != os.getpid()
    said = cli(env, "status").stdout
    assert f"searches: answered by the resident search process (pid {found['pid']};" in said
    assert "searches: in-process (search_resident_idle is 0)" in cli(in_process, "status").stdout
    warm_before = warm_cli_searches(env)
    got = [search(env, args) for args in QUERIES]
    assert warm_cli_searches(env) == warm_before + len(QUERIES)  # the resident answered
    for want, have in zip(expected, got):
        assert [m["doc_id"] for m in have["matches"]] == [m["doc_id"] for m in want["matches"]]
        assert have == want  # scores, links, passages and warnings too

    # The same printed page, but for the time.
    plain = [cli(e, "search", "range over pages").stdout.splitlines() for e in (in_process, env)]
    assert plain[0][1:] == plain[1][1:] and plain[0][0].split("(")[0] == plain[1][0].split("(")[0]

    # A finished ingest is seen by the next search, without a restart.
    repo = root / "docs" / "sample-docs"
    write_files(repo, {"content/docs/zebrafinch.md": ZEBRAFINCH})
    commit_all(repo, "zebrafinch")
    assert cli(in_process, "ingest").returncode == 0
    fresh = search(env, ["zebrafinch song", "-k", "1"])
    assert fresh["matches"][0]["metadata"]["title"] == "Zebrafinch"
    assert route(env)["pid"] == found["pid"]  # the same process answered it
    assert fresh == search(in_process, ["zebrafinch song", "-k", "1"])


def test_a_search_in_its_own_process_imports_only_what_a_search_needs(index):
    _root, _env, in_process = index
    # What a search never uses: the logging library while nothing is logged, Chroma's
    # embedding-function registry, httpx's command-line client, Tornado (tenacity's option).
    unused = ["structlog", "rich", "chromadb.utils.embedding_functions", "httpx._main", "tornado"]
    code = (
        "import json, sys\n"
        "from hetriever.cli import main\n"
        "code = main(['-q', 'search', '--json', 'range over pages', '-k', '3'])\n"
        f"print(json.dumps({{'code': code, 'loaded': [m for m in {unused!r} if m in sys.modules]}}), "
        "file=sys.stderr)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=in_process,
        cwd=in_process["HETRIEVER_DOCS_ROOT"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["matches"]  # a real search, answered
    assert json.loads(out.stderr.strip().splitlines()[-1]) == {"code": 0, "loaded": []}


def test_resident_answers_only_its_own_caller_and_index(index):
    root, env, in_process = index
    search(env, ["where"])
    found = wait_for_resident(env)
    path = _socket(env)
    info = path.stat()
    assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    # A request keyed for another index is refused on the socket itself.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(30)
        conn.connect(str(path))
        resident._send(conn, {"key": "0" * 64, "op": "search", "request": {"query": "where"}})
        reply = resident._receive(conn)
    assert reply["ok"] is False and "result" not in reply
    # Another index (another Chroma path) is not answered by this process: its own search
    # says that index is missing, as an in-process search does.
    other = {**env, "HETRIEVER_CHROMA_PATH": str(root / "elsewhere")}
    out = cli(other, "search", "where")
    assert out.returncode == 2 and "no index at" in out.stderr
    # Stopped, searches go in-process again, with the same answer.
    os.kill(found["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 30
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not path.exists()
    assert route(env) == {
        "route": "in-process",
        "why": "no resident search process runs; the next search starts one",
    }


def _socket(env) -> Path:
    """The socket a CLI run with `env` from the docs root asks."""
    code = (
        "from hetriever.commands import resident; "
        "print(resident.socket_path(resident.inputs_key(None, None)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=env["HETRIEVER_DOCS_ROOT"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return Path(out.stdout.strip())
