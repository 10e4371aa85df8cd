"""Create the work pool, the automation that marks Crashed the flow runs whose process is gone,
and register every deployment of prefect.yaml (idempotent).

    python -m deployments.register [--pool hetriever-pool] [--prefect-file prefect.yaml]

The same as `prefect work-pool create hetriever-pool --type process` followed by
`prefect --no-prompt deploy --all` (plus the automation), except that an existing pool is
kept as it is and the Prefect API is checked first, with a clear message when it cannot be
reached.
PREFECT_API_URL must point at the server; HETRIEVER_INGEST_CRON sets the ingest schedule.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from hetriever.core.logs import get_logger

log = get_logger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_POOL = "hetriever-pool"


def ensure_work_pool(name: str = DEFAULT_POOL, pool_type: str = "process") -> bool:
    """Create the work pool unless it exists; True if it was created."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    with get_client(sync_client=True) as client:
        try:
            client.create_work_pool(WorkPoolCreate(name=name, type=pool_type))
        except ObjectAlreadyExists:
            return False
    return True


def crash_orphaned_runs(pool: str = DEFAULT_POOL) -> int:
    """Mark Crashed the pool's flow runs the server still shows as in flight; how many.

    Only for a pool none of whose workers or flow runs are alive (the caller knows): a run in
    flight when its stack stopped stays `Running` on the server, holding its deployment's
    concurrency slot. Its lease lived in the server's memory, so a restarted server never
    expires it, and every later run of that deployment would wait for the slot for ever.
    Leaving Running releases the slot (Prefect's own rule, through the deployment's limit
    when the lease is gone); the index is safe (the run never recorded its commit)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
        WorkPoolFilter,
        WorkPoolFilterName,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    in_flight = FlowRunFilter(
        state=FlowRunFilterState(
            type=FlowRunFilterStateType(
                any_=[StateType.PENDING, StateType.RUNNING, StateType.CANCELLING]
            )
        )
    )
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=in_flight,
            work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[pool])),
        )
        for run in runs:
            client.set_flow_run_state(
                run.id,
                Crashed(
                    message="the stack stopped while this run was in flight (marked by prefect-up)"
                ),
                force=True,
            )
    return len(runs)


UNRESPONSIVE_RUNS = "hetriever: crash flow runs that stopped sending heartbeats"
# Only hetriever's flows: a server of your own may run flows whose heartbeats come less often.
FLOW_NAMES = ("ingest", "index-repository", "migrate", "query")
HEARTBEATS_MISSED = 3  # heartbeats in a row a flow run may miss before it is marked Crashed


def ensure_unresponsive_runs_crashed(within: timedelta | None = None) -> bool:
    """The server's automation that marks Crashed a flow run whose process is gone; True if
    created now (one of this name that waits as long is kept; one that waits otherwise, made
    under another heartbeat frequency, is replaced).

    A flow run sends a heartbeat every `PREFECT_FLOWS_HEARTBEAT_FREQUENCY` seconds (180 by
    default) until it ends. A worker container stopped or killed mid-run, or a lost machine,
    leaves its run `Running` on the server for ever, holding its deployment's concurrency
    slot, so every later run of that deployment would wait. After `within` (default: three
    heartbeats) with neither a heartbeat nor an end, this automation marks the run Crashed
    (Prefect's recipe for "zombie" flow runs); the index is safe, as the run never recorded
    its commit, and the next run reconciles. `prefect-up` also marks the runs its last stop
    cut short at once (`crash_orphaned_runs`); this covers the compose stack and workers that
    die while the server runs on."""
    from prefect.automations import Automation
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification
    from prefect.settings import get_current_settings

    if within is None:
        every = get_current_settings().flows.heartbeat_frequency
        if not every:  # heartbeats turned off: nothing to wait for
            log.warning(
                "flow_run_heartbeats_off",
                automation=UNRESPONSIVE_RUNS,
                hint="set PREFECT_FLOWS_HEARTBEAT_FREQUENCY (>= 30) to have flow runs "
                "whose process is gone marked Crashed",
            )
            return False
        within = timedelta(seconds=HEARTBEATS_MISSED * every)
    with get_client(sync_client=True) as client:
        for existing in client.read_automations_by_name(UNRESPONSIVE_RUNS):
            if getattr(existing.trigger, "within", None) == within:
                return False
            client.delete_automation(existing.id)
    ends = {
        f"prefect.flow-run.{state}" for state in ("Completed", "Failed", "Cancelled", "Crashed")
    }
    Automation(
        name=UNRESPONSIVE_RUNS,
        description=f"No heartbeat and no end for {int(within.total_seconds())} s: the "
        "process running the flow is gone (deployments/register.py)",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.heartbeat", *ends},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            match_related=ResourceSpecification(
                {"prefect.resource.role": "flow", "prefect.resource.name": list(FLOW_NAMES)}
            ),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=within,
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED,
                name="Crashed",
                force=False,  # a run that has ended meanwhile keeps its end
                message=f"no heartbeat for {int(within.total_seconds())} s: the process running "
                "this flow run is gone (marked by hetriever's automation)",
            )
        ],
    ).create()
    return True


def deploy_all(prefect_file: Path = PROJECT_ROOT / "prefect.yaml", *, quiet: bool = False) -> int:
    """`prefect --no-prompt deploy --all` from the project root; returns its exit code.
    `quiet`: its output is shown only if it fails."""
    cmd = [
        sys.executable,
        "-m",
        "prefect",
        "--no-prompt",
        "deploy",
        "--all",
        "--prefect-file",
        str(prefect_file),
    ]
    done = subprocess.run(
        cmd, cwd=prefect_file.parent, env=os.environ.copy(), capture_output=quiet, text=True
    )
    if quiet and done.returncode != 0:
        print(done.stdout + done.stderr, file=sys.stderr)
    return done.returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deployments.register", description=__doc__)
    parser.add_argument("--pool", default=DEFAULT_POOL)
    parser.add_argument("--prefect-file", type=Path, default=PROJECT_ROOT / "prefect.yaml")
    args = parser.parse_args(argv)

    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        log.error(
            "prefect_api_url_missing",
            hint="export PREFECT_API_URL=http://127.0.0.1:4200/api (the server's API)",
        )
        return 2
    try:
        created = ensure_work_pool(args.pool)
    except Exception as exc:  # connection errors come in several types; all mean the same
        log.error(
            "prefect_unreachable",
            api_url=PREFECT_API_URL.value(),
            error=str(exc),
            hint="start `prefect server start` or fix PREFECT_API_URL",
        )
        return 1
    log.info("work_pool_ready", pool=args.pool, created=created)
    log.info("unresponsive_runs_automation_ready", created=ensure_unresponsive_runs_crashed())
    code = deploy_all(args.prefect_file.resolve())
    log.info("deployments_registered" if code == 0 else "deploy_failed", exit_code=code)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
