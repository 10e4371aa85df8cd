"""Settings for the Prefect server that records hetriever's flow runs.

The ingest flow runs one task run per content file (~1,000 for hugo-docs). Task runs are
orchestrated client-side: each one sends three state events (Pending, Running, Completed), and
the server's task run recorder service turns them into task runs and states in its database.
By default it writes every event in a transaction of its own, which cost the server ~24 ms of
CPU per task run in `bench/ingest/bench_flow.py`, on the same cores as the embedder. In batches
of up to 100 events (at least once a second, so the UI stays current) it cost ~9 ms. The task runs,
their states and the events are recorded as before.

The server also runs at a lower scheduling priority (`SERVER_NICENESS`, a `cpu_shares` weight
in the compose file): its bookkeeping then takes the cores only when the ingest leaves them
idle, and still keeps up. Full hugo-docs ingests through the flow, the harness's server on the
same two cores: flow / in-process median 1.29 at the same priority, 1.21 niced (eight pairs
each, bench/README.md); the server's CPU within the run the same, no backlog after it, and
the flow process itself used less (less contention for the cores).

Every server hetriever starts gets these (the caller's environment wins):
`deployments/stack.py`, `docker/run-local.sh`, `docker/compose.yaml`, the temporary server of
`hetriever ingest --engine prefect` (deployments/temporary_server.py), the test harness
(tests/conftest.py) and `bench/ingest/bench_flow.py`; tests/deployments/test_docker.py holds
the shell script and the compose file to the same values.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

SERVER_ENV: dict[str, str] = {
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "100",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_READ_BATCH_SIZE": "100",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": "1",
    # `prefect deployment run ... --watch` prints a run's logs as they come only where the
    # server streams them out (Prefect's default: off, and --watch shows state events alone:
    # no query results, no ingest progress).
    "PREFECT_SERVER_LOGS_STREAM_PUBLISHING_ENABLED": "true",
    "PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED": "true",
}


# Niceness of the Prefect server process (0 = the same priority as the flows it records).
SERVER_NICENESS = 10


def lower_priority(pid: int) -> None:
    """Every thread of the running process `pid` to SERVER_NICENESS (Linux: niceness is per
    thread, and threads started later inherit their creator's). Best effort: no error where
    the platform or the permissions do not allow it."""
    try:
        threads = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        threads = [pid]
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, SERVER_NICENESS)
        except (OSError, AttributeError):
            pass


def niced() -> None:
    """For `subprocess.Popen(preexec_fn=...)`: the child starts at SERVER_NICENESS."""
    try:
        os.nice(SERVER_NICENESS)
    except (OSError, AttributeError):
        pass


def with_server_settings(env: Mapping[str, str]) -> dict[str, str]:
    """`env` plus every server setting it does not set itself."""
    return {**SERVER_ENV, **env}


def apply_server_settings(environ: MutableMapping[str, str] = os.environ) -> None:
    """Set the server settings in `environ` (default: this process's) where they are unset,
    for a server started from this process (Prefect's test harness passes on its env)."""
    for key, value in SERVER_ENV.items():
        environ.setdefault(key, value)
