"""A Prefect server for one command, in a process of its own.

Without PREFECT_API_URL, Prefect starts a temporary server for a flow run itself: the same
uvicorn app in a subprocess, but launched from a class in `prefect.server.api.server`, whose
import brings FastAPI, SQLAlchemy and the server's models into the process that runs the
flow (+74 MB before anything runs; a full hugo-docs ingest through the flow peaked at 454 MB
with it, 382 MB against a server outside the process: bench/README.md). This starts that
same app, with Prefect's own flags for a temporary server (no UI, only the services such a
server runs), from the command line instead, and also gives it hetriever's server settings
(task-run events recorded in batches) and a lower priority, as every server hetriever starts.
`hetriever ingest --engine prefect` uses it when no API URL is configured.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from deployments.server_settings import niced, with_server_settings
from hetriever.core.errors import HetrieverError

# What Prefect's own temporary server sets (prefect.server.api.server.SubprocessASGIServer).
TEMPORARY_SERVER_ENV = {
    "PREFECT_UI_ENABLED": "0",
    "PREFECT__SERVER_EPHEMERAL": "1",
    "PREFECT__SERVER_FINAL": "1",
}
STOP_GRACE_SECONDS = 10.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclass(frozen=True)
class RunningServer:
    api_url: str  # http://127.0.0.1:PORT/api
    pid: int


def api_answers(api_url: str, timeout: float = 2.0) -> bool:
    """True when the Prefect API at `api_url` reports itself healthy."""
    try:
        with urllib.request.urlopen(api_url.rstrip("/") + "/health", timeout=timeout) as reply:
            return reply.status == 200
    except OSError:
        return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_command(port: int) -> list[str]:
    import prefect

    return [
        sys.executable,
        "-m",
        "uvicorn",
        "--app-dir",
        str(Path(prefect.__file__).parents[1]),
        "--factory",
        "prefect.server.api.server:create_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "error",
        "--lifespan",
        "on",
    ]


def make_prefect_home(home: str | Path | None = None) -> None:
    """Create Prefect's home, parents included: `home`, else PREFECT_HOME if the environment
    names one (before Prefect is imported: the import makes only the last level and, failing
    that, warns). Where it cannot, Prefect's warning or the server's error says why."""
    home = home or os.environ.get("PREFECT_HOME")
    if home:
        try:
            Path(home).expanduser().mkdir(parents=True, exist_ok=True)
        except OSError:
            pass


def server_env() -> dict[str, str]:
    """This process's environment and Prefect settings (a profile's database, home...), plus
    hetriever's server settings where unset, plus Prefect's flags for a temporary server.
    PREFECT_HOME is created if missing."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    make_prefect_home(settings.home)  # where its database goes by default
    env = with_server_settings(os.environ)
    env.update(settings.to_environment_variables(exclude_unset=True))
    env.update(TEMPORARY_SERVER_ENV)
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # there may be no network
    return env


@contextmanager
def temporary_server(timeout: float = 120.0) -> Iterator[RunningServer]:
    """Start the server, yield it once its API answers, stop it on the way out.
    A server that exits or does not answer within `timeout` seconds is a HetrieverError
    carrying the end of its output."""
    port = free_port()
    with tempfile.TemporaryFile("w+") as output:
        process = subprocess.Popen(
            server_command(port),
            env=server_env(),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_prepare_child if os.name == "posix" else None,
        )
        try:
            api_url = f"http://127.0.0.1:{port}/api"
            _wait_until_it_answers(process, api_url, timeout, output)
            try:
                yield RunningServer(api_url, process.pid)
            finally:
                send_what_is_queued()
        finally:
            stop(process)


def _prepare_child() -> None:
    """In the server's process before it execs: a lower priority, and (Linux) SIGTERM when
    the command that started it dies, even by SIGKILL, so no server outlives its command.
    Its own session keeps a terminal's Ctrl-C from reaching it before the flow has reported
    how it ended."""
    niced()
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):
            pass


def send_what_is_queued() -> None:
    """Let this process's Prefect log and event workers send what they hold, as Prefect's test
    harness does before it stops its server (else: "Error logging to API" at exit)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=5)
    EventsWorker.drain_all(timeout=5)


def _wait_until_it_answers(process: subprocess.Popen, api_url: str, timeout: float, output) -> None:
    deadline = time.monotonic() + timeout
    while not api_answers(api_url, timeout=1.0):
        if process.poll() is not None or time.monotonic() >= deadline:
            output.seek(0)
            tail = "\n".join(last_messages(output.read()))
            what = (
                f"exited with code {process.returncode}"
                if process.poll() is not None
                else f"did not answer within {timeout:.0f} s"
            )
            raise HetrieverError(
                f"the temporary Prefect server {what}" + (f":\n{tail}" if tail else ""),
                hint="set PREFECT_API_URL to a running server (`make prefect-up`), raise "
                "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, or use --engine local",
            )
        time.sleep(0.2)


def last_messages(output: str, count: int = 3) -> list[str]:
    """The last `count` lines of a server's output that are messages, not traceback frames
    (the exception's own line, uvicorn's "Application startup failed")."""
    lines = [
        line.strip()
        for line in output.splitlines()
        if line.strip()
        and not line[0].isspace()
        and not line.startswith(("Traceback", "The above exception", "During handling"))
    ]
    return lines[-count:]


def stop(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after a grace period; the process is reaped either way."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
