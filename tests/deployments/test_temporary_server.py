"""`hetriever ingest --engine prefect` with no Prefect API configured: a temporary server in a
process of its own (deployments/temporary_server.py), niced, with hetriever's server settings,
stopped when the command ends; the process running the flow never imports Prefect's server.

Each case runs in a fresh Python process with no PREFECT_API_URL and its own PREFECT_HOME, so
the session's test harness (its settings live in this process) cannot stand in for it."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deployments.server_settings import SERVER_ENV, SERVER_NICENESS
from deployments.stack import _reaped
from hetriever.store.catalog import Catalog
from tests.support.cli_runs import REPO_NAME, pages_repo, signal_when
from tests.support.helpers import REPO_ROOT, build_sample_parent

pytestmark = [pytest.mark.prefect, pytest.mark.slow]

TIMEOUT = 300


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "HETRIEVER_"))}
    # Two levels that do not exist yet: Prefect itself makes only the last one.
    env.update(
        {
            "PREFECT_HOME": str(tmp_path / "prefect" / "home"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            **extra,
        }
    )
    return env


def python(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


SERVER_PROBE = """
import json, os
from deployments.temporary_server import api_answers, temporary_server
with temporary_server() as server:
    environ = dict(item.split("=", 1) for item in
                   open(f"/proc/{server.pid}/environ").read().split("\\0") if "=" in item)
    seen = {"answers": api_answers(server.api_url), "environ": environ,
            "niceness": os.getpriority(os.PRIO_PROCESS, server.pid), "ours": os.nice(0)}
seen.update(answers_after=api_answers(server.api_url),
            alive_after=os.path.exists(f"/proc/{server.pid}"))
print(json.dumps(seen))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_server_answers_niced_with_the_server_settings_and_is_gone_afterwards(tmp_path):
    done = python(SERVER_PROBE, clean_env(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["answers"] and not seen["answers_after"] and not seen["alive_after"]
    assert seen["niceness"] == min(19, seen["ours"] + SERVER_NICENESS)
    environ = seen["environ"]
    assert {key: environ.get(key) for key in SERVER_ENV} == SERVER_ENV
    assert environ["PREFECT__SERVER_EPHEMERAL"] == "1" and environ["PREFECT_UI_ENABLED"] == "0"
    assert environ["PREFECT_HOME"] == str(tmp_path / "prefect" / "home")


NO_ANSWER = """
import os
from deployments.temporary_server import temporary_server
from hetriever.core.errors import HetrieverError
try:
    with temporary_server(timeout=0.5):
        raise SystemExit("answered within half a second: the case needs a slower start")
except HetrieverError as exc:
    print("ERROR", exc, "| HINT", exc.hint)
home = os.environ["PREFECT_HOME"]
left = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        if f"PREFECT_HOME={home}".encode() in open(f"/proc/{pid}/environ", "rb").read():
            left.append(pid)
    except OSError:
        pass
print("LEFT", [pid for pid in left if int(pid) != os.getpid()])
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_server_that_does_not_answer_in_time_is_a_clear_error_and_is_stopped(tmp_path):
    done = python(NO_ANSWER, clean_env(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    error = next(line for line in done.stdout.splitlines() if line.startswith("ERROR"))
    assert "did not answer within 0 s" in error and "PREFECT_API_URL" in error
    assert "Traceback" not in done.stdout + done.stderr
    assert "LEFT []" in done.stdout


UNUSABLE_HOME = """
from deployments.temporary_server import temporary_server
from hetriever.core.errors import HetrieverError
try:
    with temporary_server(timeout=120):
        raise SystemExit("a server started on a home it cannot write")
except HetrieverError as exc:
    print("ERROR", exc)
"""


def test_a_server_that_cannot_start_says_why_in_a_few_lines(tmp_path):
    (tmp_path / "a-file").write_text("not a directory\n")
    home = tmp_path / "a-file" / "home"
    done = python(UNUSABLE_HOME, clean_env(tmp_path, PREFECT_HOME=str(home)))
    assert done.returncode == 0, done.stderr[-2000:]
    message = done.stdout[done.stdout.index("ERROR") :]
    assert "exited with code" in message and "unable to open database file" in message
    assert 'File "' not in message and len(message.splitlines()) <= 4  # no traceback frames


KILLED = """
import os, signal
from deployments.temporary_server import temporary_server
with temporary_server() as server:
    print(server.pid, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no `finally` runs: the command dies abruptly
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal")
def test_the_server_does_not_outlive_a_command_killed_outright(tmp_path):
    done = python(KILLED, clean_env(tmp_path))
    assert done.returncode == -9, done.stderr[-2000:]
    pid = int(done.stdout.split()[0])
    deadline = time.monotonic() + 30
    while not _reaped(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _reaped(pid)  # gone, or a zombie no one waits for


CLI = """
import sys
from hetriever.cli import main
code = main(sys.argv[1:])
print("SERVER MODULES IMPORTED:", "prefect.server.api.server" in sys.modules, file=sys.stderr)
raise SystemExit(code)
"""


def test_cli_prefect_engine_without_an_api_runs_the_flow_on_a_temporary_server(
    tmp_path, minilm_model_dir
):
    parent, _ = build_sample_parent(tmp_path)
    env = clean_env(
        tmp_path,
        HETRIEVER_CHROMA_PATH=str(tmp_path / "chroma"),
        HETRIEVER_STATE_DIR=str(tmp_path / "state"),
        HETRIEVER_MODEL_DIR=str(minilm_model_dir),
    )
    done = python(CLI, env, "--docs-root", str(parent), "ingest", "--engine", "prefect", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    (outcome,) = json.loads(done.stdout)
    assert outcome["ok"] and outcome["mode"] == "full" and outcome["chunks_written"] > 0
    assert "SERVER MODULES IMPORTED: False" in done.stderr
    # Everything the run logged reached the server before it stopped; no links to a UI that
    # was never served.
    assert "Error logging to API" not in done.stderr and "View at" not in done.stderr
    # PREFECT_HOME two levels deep is made before Prefect's import would warn about it.
    assert "Failed to create the Prefect home" not in done.stderr
    with sqlite3.connect(tmp_path / "prefect" / "home" / "prefect.db") as db:
        flows = db.execute(
            "SELECT f.name, r.state_type FROM flow_run r JOIN flow f ON f.id = r.flow_id"
        ).fetchall()
    assert ("ingest", "COMPLETED") in flows and ("index-repository", "COMPLETED") in flows

    again = python(
        CLI, env, "--docs-root", str(parent), "ingest", "--engine", "prefect", "--json"
    )  # a second temporary server, the same database: nothing to do
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)[0]["mode"] == "noop"


def test_cli_prefect_engine_stopped_by_sigterm_closes_its_runs_and_exits_143(
    tmp_path, minilm_embedder, minilm_model_dir
):
    # During a flow run Prefect's engine holds SIGTERM (it raises TerminationSignal); the
    # command still ends as a local run does. The signal comes during the first write window.
    docs = pages_repo(tmp_path)
    env = clean_env(
        tmp_path,
        HETRIEVER_CHROMA_PATH=str(tmp_path / "chroma"),
        HETRIEVER_STATE_DIR=str(tmp_path / "state"),
        HETRIEVER_MODEL_DIR=str(minilm_model_dir),
        HETRIEVER_LOG_FORMAT="json",
        HETRIEVER_FAULTS="window_write:*:1:slow5",
        HETRIEVER_FAULTS_STATE=str(tmp_path / "faults"),
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CLI,
            "--docs-root",
            str(docs),
            "ingest",
            "--engine",
            "prefect",
            "--json",
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    log_text = signal_when(proc, "fault_slow", signal.SIGTERM, timeout=TIMEOUT)
    assert proc.returncode == 143, log_text[-3000:]
    assert "hetriever: stopped by SIGTERM" in log_text and "Traceback" not in log_text
    catalog = Catalog.for_state_dir(tmp_path / "state")
    try:
        assert [r["outcome"] for r in catalog.runs(REPO_NAME)] == ["interrupted"]
    finally:
        catalog.close()
    with sqlite3.connect(tmp_path / "prefect" / "home" / "prefect.db") as db:
        states = {state for (state,) in db.execute("SELECT state_type FROM flow_run")}
    assert states == {"CRASHED"}  # both flow runs are closed in Prefect's record too


def test_cli_prefect_engine_on_a_docs_root_without_repositories_says_so_in_one_line(tmp_path):
    (tmp_path / "docs").mkdir()
    env = clean_env(
        tmp_path,
        HETRIEVER_CHROMA_PATH=str(tmp_path / "chroma"),
        HETRIEVER_STATE_DIR=str(tmp_path / "state"),
    )
    for extra in ([], ["--repository", "nowhere"]):
        done = python(
            CLI, env, "--docs-root", str(tmp_path / "docs"), "ingest", "--engine", "prefect", *extra
        )
        assert done.returncode != 0
        assert "no git repositories found" in done.stderr
        assert "Traceback" not in done.stderr + done.stdout
        # Found before any server started or the flow ran: no database, nothing recorded.
        assert not (tmp_path / "prefect" / "home" / "prefect.db").exists()

    parent, _ = build_sample_parent(tmp_path / "sample")
    done = python(
        CLI,
        env,
        "--docs-root",
        str(parent),
        "ingest",
        "--engine",
        "prefect",
        "--repository",
        "nowhere",
    )
    assert done.returncode != 0 and "nowhere" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not (tmp_path / "prefect" / "home" / "prefect.db").exists()
