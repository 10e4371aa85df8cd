"""The local Prefect stack as the README runs it: `python -m deployments.stack up` (what
`make prefect-up` calls) starts a real server, pool, deployments and worker; a run of the
`scheduled` deployment, executed by that worker in its own process, picks up an upstream commit
that no webhook announced; `down` stops everything with one command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.chroma_fixtures import free_port
from tests.support.helpers import REPO_ROOT, build_sample_parent, commit_all, write_files

pytestmark = pytest.mark.prefect

STACK_TIMEOUT = 300
RUN_TIMEOUT = 420


def stack(action: str, env: dict[str, str], directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "deployments.stack", action, "--dir", str(directory)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=STACK_TIMEOUT,
    )


def stack_env(tmp_path: Path, parent: Path, port: int) -> dict[str, str]:
    """The caller's environment without Prefect's settings, and a stack over `parent`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        {
            "HETRIEVER_PREFECT_PORT": str(port),
            "HETRIEVER_DOCS_ROOT": str(parent),
            "HETRIEVER_CHROMA_PATH": str(tmp_path / "chroma"),
            "HETRIEVER_STATE_DIR": str(tmp_path / "state"),
            "PREFECT_WORKER_QUERY_SECONDS": "2",  # the worker picks runs up sooner than its 10 s
            # Not every 30 minutes: a run of the schedule's own, started at :00 or :30 during a
            # test, takes the deployment's one slot and the runs the test makes wait behind it.
            "HETRIEVER_INGEST_CRON": "0 0 1 1 *",
        }
    )
    return env


def create_run(client: httpx.Client, name: str) -> dict:
    """A new run of deployment `name`, as the server recorded it."""
    deployment = client.get(f"/deployments/name/{name}").raise_for_status().json()
    # The server answers 503 while its SQLite is busy (its event services write to the
    # same file); on a loaded machine that passes on a retry, as Prefect's client would.
    for attempt in range(6):
        response = client.post(f"/deployments/{deployment['id']}/create_flow_run", json={})
        if response.status_code != 503:
            break
        time.sleep(2**attempt)
    return response.raise_for_status().json()


def run_deployment(api: str, name: str) -> dict:
    """Create a run of deployment `name` and wait for the worker to finish it."""
    with httpx.Client(base_url=api, timeout=30) as client:
        run = create_run(client, name)
        deadline = time.monotonic() + RUN_TIMEOUT
        while time.monotonic() < deadline:
            try:
                run = client.get(f"/flow_runs/{run['id']}").raise_for_status().json()
            except httpx.TimeoutException:  # the niced server behind a busy machine's work:
                continue  # asked again, as Prefect's own client retries, until the deadline
            if run["state"]["type"] in {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}:
                return run
            time.sleep(2)
    raise AssertionError(f"run of {name} not finished after {RUN_TIMEOUT} s: {run['state']}")


def test_stack_up_runs_the_schedule_that_catches_a_missed_push_and_down_stops_it(tmp_path):
    parent, source = build_sample_parent(tmp_path)
    directory = tmp_path / "stack"
    port = free_port()
    env = stack_env(tmp_path, parent, port)
    api = f"http://127.0.0.1:{port}/api"
    try:
        up = stack("up", env, directory)
        assert up.returncode == 0, up.stdout + up.stderr
        assert (
            "deploy    ingest/scheduled" in up.stdout
            and "worker    started" in up.stdout
            and f"PREFECT_API_URL={api}" in up.stdout
        )
        # The server's bookkeeping yields the cores to the flows the worker runs.
        from deployments.server_settings import SERVER_NICENESS

        ours = os.getpriority(os.PRIO_PROCESS, 0)
        server_pid = int((directory / "server.pid").read_text())
        worker_pid = int((directory / "worker.pid").read_text())
        assert os.getpriority(os.PRIO_PROCESS, server_pid) == min(19, ours + SERVER_NICENESS)
        assert os.getpriority(os.PRIO_PROCESS, worker_pid) == ours
        # A run whose worker dies while the server runs on is marked Crashed in time.
        from prefect.client.orchestration import get_client
        from prefect.settings import PREFECT_API_URL, temporary_settings

        from deployments.register import UNRESPONSIVE_RUNS

        with temporary_settings({PREFECT_API_URL: api}), get_client(sync_client=True) as client:
            assert len(client.read_automations_by_name(UNRESPONSIVE_RUNS)) == 1
        again = stack("up", env, directory)  # idempotent: nothing new is started
        assert again.returncode == 0 and "worker    already running" in again.stdout
        # Another port while this stack runs would register the deployments elsewhere.
        elsewhere = stack("up", {**env, "HETRIEVER_PREFECT_PORT": str(free_port())}, directory)
        assert elsewhere.returncode == 1 and f"runs on port {port}" in elsewhere.stderr
        unset = stack(
            "status", {k: v for k, v in env.items() if k != "HETRIEVER_PREFECT_PORT"}, directory
        )
        assert unset.returncode == 0 and f"{api} answers" in unset.stdout

        first = run_deployment(api, "ingest/scheduled")
        assert first["state"]["type"] == "COMPLETED", first["state"]

        write_files(
            source,
            {
                "content/docs/missed.md": "---\ntitle: Missed push\n---\n\nThe quokka configuration page.\n"
            },
        )
        pushed = commit_all(source, "pushed, webhook lost")
        second = run_deployment(api, "ingest/scheduled")
        assert second["state"]["type"] == "COMPLETED", second["state"]

        search = subprocess.run(
            [sys.executable, "-m", "hetriever.cli", "search", "--json", "quokka configuration"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert search.returncode == 0, search.stderr
        paths = [m["metadata"]["file_path"] for m in json.loads(search.stdout)["matches"]]
        assert "content/docs/missed.md" in paths
        status = subprocess.run(
            [sys.executable, "-m", "hetriever.cli", "status", "--json"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert pushed in status.stdout

        # `--watch` shows the query run's top results as they are logged (the stack's server
        # streams run logs out)
        watched = subprocess.run(
            [
                str(Path(sys.executable).parent / "prefect"),
                "deployment",
                "run",
                "query/query",
                "-p",
                "query=quokka configuration",
                "-p",
                "top_k=2",
                "--watch",
                "--watch-timeout",
                str(RUN_TIMEOUT),
            ],
            cwd=tmp_path,
            env={**env, "PREFECT_API_URL": api, "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT + 60,
        )
        assert watched.returncode == 0, watched.stdout + watched.stderr
        assert "1. Missed push" in watched.stdout and "docs/missed/" in watched.stdout, (
            watched.stdout
        )
    finally:
        down = stack("down", env, directory)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "worker    stopped" in down.stdout and "server    stopped" in down.stdout
    assert not list(directory.glob("*.pid"))
    with pytest.raises(httpx.HTTPError):
        httpx.get(api + "/health", timeout=2)


def test_a_pid_file_naming_another_process_is_neither_trusted_nor_signalled(tmp_path):
    # After a reboot the pid in server.pid can belong to anything.
    directory = tmp_path / "stack"
    directory.mkdir()
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        for name in ("server", "worker"):
            (directory / f"{name}.pid").write_text(str(other.pid))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env["HETRIEVER_PREFECT_PORT"] = str(free_port())
        status = stack("status", env, directory)
        assert status.returncode == 3 and "server    not running" in status.stdout
        down = stack("down", env, directory)
        assert down.returncode == 0 and "server    not running" in down.stdout
        assert other.poll() is None  # still running: not ours to stop
    finally:
        other.kill()
        other.wait(timeout=10)


def test_down_stops_flow_runs_a_dead_worker_left_behind(tmp_path):
    # Flow runs start in sessions of their own: with the worker gone, nothing else stops them,
    # and one still writing holds the repository's run lock.
    directory = tmp_path / "stack"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["HETRIEVER_PREFECT_PORT"] = str(free_port())
    orphan = subprocess.Popen(  # a flow run's command line, under the stack's Prefect home
        [sys.executable, "-c", "import time; time.sleep(120)", "prefect.engine"],
        env={**env, "PREFECT_HOME": str(directory / "home")},
        start_new_session=True,
    )
    stranger = subprocess.Popen(  # the same command under another Prefect home: not ours
        [sys.executable, "-c", "import time; time.sleep(120)", "prefect.engine"],
        env={**env, "PREFECT_HOME": str(tmp_path / "other-home")},
        start_new_session=True,
    )
    try:
        down = stack("down", env, directory)
        assert down.returncode == 0 and "flow runs 1 left behind" in down.stdout, down.stdout
        assert orphan.wait(timeout=30) is not None
        assert stranger.poll() is None
    finally:
        for process in (orphan, stranger):
            process.kill()
            process.wait(timeout=10)


def test_up_frees_the_slot_of_a_run_the_last_stop_cut_short(tmp_path):
    # A run in flight when the stack stops stays Running on the server and holds its
    # deployment's one concurrency slot; the restarted server lost the lease that would have
    # expired it, so every later run of that deployment would wait for ever.
    parent, _ = build_sample_parent(tmp_path)
    directory = tmp_path / "stack"
    port = free_port()
    env = {**stack_env(tmp_path, parent, port), "HETRIEVER_FAULTS_STATE": str(tmp_path / "faults")}
    api = f"http://127.0.0.1:{port}/api"
    try:
        up = stack("up", {**env, "HETRIEVER_FAULTS": "window_write:*:1:slow300"}, directory)
        assert up.returncode == 0, up.stdout + up.stderr
        with httpx.Client(base_url=api, timeout=30) as client:
            cut = create_run(client, "ingest/scheduled")
            deadline = time.monotonic() + RUN_TIMEOUT
            while (
                client.get(f"/flow_runs/{cut['id']}").json()["state"]["type"] != "RUNNING"
                and time.monotonic() < deadline
            ):
                time.sleep(1)
        assert stack("down", env, directory).returncode == 0  # the run is in flight

        up = stack("up", env, directory)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "flow runs 1 in flight when the stack last stopped" in up.stdout, up.stdout
        with httpx.Client(base_url=api, timeout=30) as client:
            assert client.get(f"/flow_runs/{cut['id']}").json()["state"]["type"] == "CRASHED"
        after = run_deployment(api, "ingest/scheduled")  # not left AwaitingConcurrencySlot
        assert after["state"]["type"] == "COMPLETED", after["state"]
        assert "flow runs" not in stack("up", env, directory).stdout  # nothing more to mark
    finally:
        assert stack("down", env, directory).returncode == 0
