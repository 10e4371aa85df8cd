"""The local Prefect stack in one command each way: server, work pool, deployments, worker.

    python -m deployments.stack up       # or `make prefect-up`
    python -m deployments.stack status
    python -m deployments.stack down     # or `make prefect-down`

`up` starts `prefect server start` on 127.0.0.1 (port HETRIEVER_PREFECT_PORT, default 4200)
with its own PREFECT_HOME under `.hetriever/prefect-stack/` (its SQLite database and logs stay
there, not in ~/.prefect), waits until the API answers, creates the work pool and registers
every deployment of prefect.yaml, then starts a process worker. Every process gets the same
environment: PREFECT_API_URL pointing at that server (so no command quietly starts a temporary
server of its own), HETRIEVER_PROJECT_DIR set to this checkout (the worker's pull step runs flows
from there), and the caller's HETRIEVER_* settings (docs root, Chroma path...). Running `up`
again on a running stack changes nothing. `down` stops the worker, then the server: SIGTERM to
each process group, SIGKILL after a grace period, so one command is always enough.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from deployments.register import DEFAULT_POOL, PROJECT_ROOT, deploy_all
from deployments.server_settings import niced, with_server_settings
from deployments.temporary_server import api_answers

STOP_GRACE_SECONDS = 15.0
START_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class Stack:
    directory: Path
    port: int
    pool: str = DEFAULT_POOL

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def pid_file(self, name: str) -> Path:
        return self.directory / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.directory / f"{name}.log"

    def env(self) -> dict[str, str]:
        env = with_server_settings(os.environ)  # the task run recorder's batches
        env.update(
            {
                "PREFECT_HOME": str(self.directory / "home"),
                "PREFECT_API_URL": self.api_url,
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                "PREFECT_UI_URL": f"http://127.0.0.1:{self.port}",
                "HETRIEVER_PROJECT_DIR": str(PROJECT_ROOT),
                # SQLite's wait for the write lock. Prefect's 10 s default is too short on a busy
                # small machine, where the server's event services and the API queue for it and
                # log "database is locked" tracebacks; PostgreSQL (docker/) has no such lock.
                "PREFECT_SERVER_DATABASE_TIMEOUT": os.environ.get(
                    "PREFECT_SERVER_DATABASE_TIMEOUT", "60"
                ),
            }
        )
        env.pop("PREFECT_API_KEY", None)
        return env


def stack_from_env(directory: Path | None = None) -> Stack:
    port = int(os.environ.get("HETRIEVER_PREFECT_PORT", "4200"))
    where = directory or Path(
        os.environ.get("HETRIEVER_STACK_DIR", PROJECT_ROOT / ".hetriever" / "prefect-stack")
    )
    return Stack(where.resolve(), port)


def running_pid(stack: Stack, name: str) -> int | None:
    try:
        pid = int(stack.pid_file(name).read_text().strip())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None
    except PermissionError:  # alive, someone else's: not ours to manage
        return None
    return pid if _is_ours(pid, name) else None


def _is_ours(pid: int, name: str) -> bool:
    """Whether `pid` still runs this stack's `prefect server|worker start`: after a reboot a
    pid file can name an unrelated process, which must be neither trusted nor signalled."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return True  # no /proc here: trust the pid file
    return "prefect" in words and name in words


def recorded_port(stack: Stack) -> int | None:
    """The port this stack's server was started on (HETRIEVER_PREFECT_PORT may differ now)."""
    try:
        return int((stack.directory / "port").read_text().strip())
    except (OSError, ValueError):
        return None


def running_stack(stack: Stack) -> Stack:
    """`stack` with the port its running server listens on."""
    port = recorded_port(stack)
    if port is None or port == stack.port or running_pid(stack, "server") is None:
        return stack
    return replace(stack, port=port)


def api_ready(stack: Stack) -> bool:
    return api_answers(stack.api_url)


def start(stack: Stack, name: str, args: list[str], *, low_priority: bool = False) -> int:
    """Start `prefect <args>` detached in its own session, logging to <name>.log
    (`low_priority`: at SERVER_NICENESS, for the server; never for the worker that runs flows)."""
    lower = niced if low_priority and os.name == "posix" else None
    with open(stack.log_file(name), "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "prefect", *args],
            cwd=PROJECT_ROOT,
            env=stack.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=lower,
        )
    stack.pid_file(name).write_text(str(process.pid))
    return process.pid


def wait_for(check, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise SystemExit(f"prefect-up: {what} not ready after {timeout:.0f} s; see {log}")


def up(stack: Stack) -> int:
    stack.directory.mkdir(parents=True, exist_ok=True)
    (stack.directory / "home").mkdir(exist_ok=True)
    if running_stack(stack).port != stack.port:  # registering would go to another server
        print(
            f"prefect-up: this stack's server runs on port {recorded_port(stack)}, not "
            f"{stack.port}: set HETRIEVER_PREFECT_PORT={recorded_port(stack)}, or run "
            "`make prefect-down` first",
            file=sys.stderr,
        )
        return 1
    if running_pid(stack, "server") is None:
        if api_ready(stack):
            print(
                f"prefect-up: port {stack.port} already has a Prefect API that this stack did "
                "not start; set HETRIEVER_PREFECT_PORT to another port",
                file=sys.stderr,
            )
            return 1
        start(
            stack,
            "server",
            ["server", "start", "--host", "127.0.0.1", "--port", str(stack.port)],
            low_priority=True,
        )
        (stack.directory / "port").write_text(str(stack.port))
        print(f"server    starting on {stack.api_url} (log {stack.log_file('server')})")
    wait_for(
        lambda: api_ready(stack),
        START_TIMEOUT_SECONDS,
        "the Prefect server",
        stack.log_file("server"),
    )
    print("server    ready")
    env = stack.env()
    saved = dict(os.environ)
    os.environ.update(env)  # the register helpers read the Prefect settings from here
    try:
        from prefect.settings import PREFECT_API_URL, temporary_settings

        from deployments.register import (
            crash_orphaned_runs,
            ensure_unresponsive_runs_crashed,
            ensure_work_pool,
        )

        with temporary_settings({PREFECT_API_URL: stack.api_url}):
            created = ensure_work_pool(stack.pool)
            ensure_unresponsive_runs_crashed()
            # Nothing of this stack runs flows yet: a run the server shows in flight is one
            # the stack's last stop cut short, and it holds its deployment's slot.
            idle = running_pid(stack, "worker") is None and not _flow_run_processes(stack)
            crashed = crash_orphaned_runs(stack.pool) if idle else 0
        print(f"pool      {stack.pool} {'created' if created else 'exists'}")
        if crashed:
            print(
                f"flow runs {crashed} in flight when the stack last stopped: marked Crashed, "
                "their concurrency slots freed"
            )
        code = deploy_all(quiet=True)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    if code != 0:
        print("prefect-up: registering the deployments failed (output above)", file=sys.stderr)
        return code
    print("deploy    ingest/scheduled, migrate/full-reindex, migrate/migrate, query/query")
    if running_pid(stack, "worker") is None:
        start(stack, "worker", ["worker", "start", "--pool", stack.pool])
        print(f"worker    started on {stack.pool} (log {stack.log_file('worker')})")
    else:
        print("worker    already running")
    print(
        f"\nPrefect UI: http://127.0.0.1:{stack.port}\n"
        f"To run deployments from this shell:  export PREFECT_API_URL={stack.api_url}"
    )
    return 0


def stop(stack: Stack, name: str) -> bool:
    pid = running_pid(stack, name)
    if pid is None:
        stack.pid_file(name).unlink(missing_ok=True)
        return False
    _terminate([pid], os.killpg)  # the process and its children (flow runs, uvicorn workers)
    stack.pid_file(name).unlink(missing_ok=True)
    return True


def _terminate(pids: list[int], send: Callable[[int, int], None]) -> None:
    """SIGTERM through `send` (os.kill, or os.killpg for a process group), SIGKILL after the
    grace period, until every pid has exited (a zombie is as good as gone)."""
    for sig, wait in ((signal.SIGTERM, STOP_GRACE_SECONDS), (signal.SIGKILL, 5.0)):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                send(pid, sig)
        deadline = time.monotonic() + wait
        pids = [pid for pid in pids if _alive(pid)]
        while pids and time.monotonic() < deadline:
            time.sleep(0.2)
            pids = [pid for pid in pids if _alive(pid)]
        if not pids:
            return


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return not _reaped(pid)


def _reaped(pid: int) -> bool:
    """True once `pid` is a zombie (exited, parent not waiting): as good as gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def down(stack: Stack) -> int:
    for name in ("worker", "server"):  # the worker first: it reports to the server as it stops
        print(f"{name:<9} {'stopped' if stop(stack, name) else 'not running'}")
    left = _stop_leftovers(stack)
    if left:
        print(f"flow runs {left} left behind by a worker that is gone: stopped")
    return 0


def _flow_run_processes(stack: Stack) -> list[int]:
    """This stack's flow-run processes (`python -m prefect.engine` under its PREFECT_HOME)
    that still run: they start in sessions of their own, so a worker that died or was killed
    leaves them behind, and signalling its process group does not reach them."""
    marker = f"PREFECT_HOME={stack.directory / 'home'}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if b"prefect.engine" in (entry / "cmdline").read_bytes().split(b"\0") and marker in (
                entry / "environ"
            ).read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except (OSError, ValueError):  # gone meanwhile, or not ours to read
            continue
    return [pid for pid in found if not _reaped(pid)]


def _stop_leftovers(stack: Stack) -> int:
    """Stop the flow runs a gone worker left; how many there were."""
    pids = _flow_run_processes(stack)
    _terminate(pids, os.kill)
    return len(pids)


def status(stack: Stack) -> int:
    stack = running_stack(stack)
    for name in ("server", "worker"):
        pid = running_pid(stack, name)
        print(f"{name:<9} {'running, pid ' + str(pid) if pid else 'not running'}")
    answers = api_ready(stack)
    print(f"api       {stack.api_url} {'answers' if answers else 'does not answer'}")
    return 0 if answers and running_pid(stack, "server") and running_pid(stack, "worker") else 3


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deployments.stack", description=__doc__.splitlines()[0]
    )
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument(
        "--dir",
        type=Path,
        help="stack directory (default .hetriever/prefect-stack, or HETRIEVER_STACK_DIR)",
    )
    args = parser.parse_args(argv)
    stack = stack_from_env(args.dir)
    return {"up": up, "down": down, "status": status}[args.action](stack)


if __name__ == "__main__":
    raise SystemExit(main())
