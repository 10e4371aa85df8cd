"""prefect.yaml registers for real (the prefect CLI against the harness server), and
deployments/register.py does the same idempotently. Docker files: see test_docker.py."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.support.helpers import REPO_ROOT

pytestmark = pytest.mark.prefect

PREFECT = [sys.executable, "-m", "prefect"]


def _run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)


def _deployments() -> dict:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return {
            name: client.read_deployment_by_name(name)
            for name in (
                "ingest/scheduled",
                "migrate/full-reindex",
                "migrate/migrate",
                "query/query",
            )
        }


@pytest.fixture(scope="module")
def deployed(prefect_harness, tmp_path_factory):
    project_dir = str(tmp_path_factory.mktemp("project"))
    env = prefect_harness.env(
        HETRIEVER_INGEST_CRON="*/15 * * * *", HETRIEVER_PROJECT_DIR=project_dir
    )
    env.pop("PREFECT_API_KEY", None)
    pool = _run([*PREFECT, "work-pool", "create", "hetriever-pool", "--type", "process"], env)
    assert pool.returncode == 0, pool.stdout + pool.stderr
    deploy = _run([*PREFECT, "--no-prompt", "deploy", "--all"], env)
    assert deploy.returncode == 0, deploy.stdout + deploy.stderr
    return {"project_dir": project_dir, "env": env}


def test_four_deployments_on_the_pool(deployed):
    deps = _deployments()
    for name, dep in deps.items():
        assert dep.work_pool_name == "hetriever-pool", name
        assert dep.description and "hetriever" in dep.tags, name
        # The pull step puts the worker in the project checkout (resolved at deploy time here).
        assert dep.pull_steps == [
            {
                "prefect.deployments.steps.set_working_directory": {
                    "directory": deployed["project_dir"]
                }
            }
        ], name
    assert deps["ingest/scheduled"].entrypoint == "flows/ingest.py:ingest"
    assert deps["query/query"].entrypoint == "flows/query.py:query"


def test_scheduled_ingest_cron_from_env(deployed):
    dep = _deployments()["ingest/scheduled"]
    assert len(dep.schedules) == 1
    schedule = dep.schedules[0]
    assert schedule.active
    assert schedule.schedule.cron == "*/15 * * * *"
    assert schedule.schedule.timezone == "UTC"
    # The schedule is the safety net for lost webhooks: it fetches before it diffs.
    assert dep.parameters == {"fetch": True}


def test_manual_deployments(deployed):
    deps = _deployments()
    # full-reindex rebuilds (re-embeds) into a new collection; migrate only what changed
    assert deps["migrate/full-reindex"].entrypoint == "flows/migrate.py:migrate"
    assert deps["migrate/full-reindex"].schedules == []
    assert deps["migrate/full-reindex"].parameters == {"force": True}
    assert "re-embedding every chunk" in deps["migrate/full-reindex"].description
    assert deps["migrate/migrate"].parameters == {} and deps["migrate/migrate"].schedules == []
    assert "chunking settings" in deps["migrate/migrate"].description
    assert deps["query/query"].schedules == []
    # The parameter schema comes from the real flow signatures.
    props = deps["query/query"].parameter_openapi_schema["properties"]
    assert {"query", "repositories", "top_k", "filters", "hybrid"} <= set(props)
    ingest_props = deps["ingest/scheduled"].parameter_openapi_schema["properties"]
    assert {"repositories", "force_full", "fetch", "ref"} <= set(ingest_props)


def test_ingest_runs_one_at_a_time(deployed):
    deps = _deployments()
    for name in ("ingest/scheduled", "migrate/full-reindex", "migrate/migrate"):
        dep = deps[name]
        assert dep.global_concurrency_limit is not None, name
        assert dep.global_concurrency_limit.limit == 1, name
        assert dep.concurrency_options is not None
        assert dep.concurrency_options.collision_strategy.value == "ENQUEUE", name
    assert deps["query/query"].global_concurrency_limit is None


def test_the_schedule_creates_runs(deployed, prefect_harness):
    import httpx
    from prefect.client.orchestration import get_client

    # prefect 3.8.8's run scheduler fails on SQLAlchemy 2.1 ("Can't evaluate bulk DML
    # statement"): constraints.txt pins SQLAlchemy 2.0, and this guards that pin.
    dep = _deployments()["ingest/scheduled"]
    # What the server's scheduler service does every minute, on demand (plain httpx: the
    # Prefect client would retry a 503 for minutes). The server answers 503 both for a busy
    # SQLite (its event services write to the same file) and for the SQLAlchemy 2.1 failure;
    # the first passes on a retry, as the scheduler's next loop would, the second never does.
    for attempt in range(6):
        resp = httpx.post(
            f"{prefect_harness.api_url}/deployments/{dep.id}/schedule", json={}, timeout=60
        )
        if resp.status_code != 503:
            break
        time.sleep(2**attempt)
    assert resp.status_code < 300, resp.text
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    # Asked by deployment: the session's server also holds the runs of other test files on
    # this worker, more than one page of them.
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[dep.id]))
        )
    assert runs and all(r.deployment_id == dep.id and r.state.is_scheduled() for r in runs)


def test_register_helper_is_idempotent_and_defaults_the_cron(deployed):
    env = {**deployed["env"]}
    env.pop("HETRIEVER_INGEST_CRON")
    # The pool exists already: the helper keeps it and re-registers everything.
    result = _run([sys.executable, "-m", "deployments.register"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    dep = _deployments()["ingest/scheduled"]
    assert [s.schedule.cron for s in dep.schedules] == ["*/30 * * * *"]


def test_register_helper_without_api_url_says_what_to_do(deployed):
    env = {**deployed["env"], "PREFECT_API_URL": ""}
    result = _run([sys.executable, "-m", "deployments.register"], env)
    assert result.returncode == 2
    assert "PREFECT_API_URL" in result.stderr


def _unresponsive_runs_automations() -> list:
    from prefect.client.orchestration import get_client

    from deployments.register import UNRESPONSIVE_RUNS

    with get_client(sync_client=True) as client:
        return client.read_automations_by_name(UNRESPONSIVE_RUNS)


def test_register_helper_adds_the_unresponsive_runs_automation_once(deployed):
    for _ in range(2):
        result = _run([sys.executable, "-m", "deployments.register"], deployed["env"])
        assert result.returncode == 0, result.stdout + result.stderr
    (automation,) = _unresponsive_runs_automations()
    assert automation.enabled
    # three of Prefect's default heartbeats (every 180 s) may be missed, not fewer
    assert automation.trigger.within.total_seconds() == 3 * 180
    (action,) = automation.actions
    assert action.type == "change-flow-run-state" and action.state.value == "CRASHED"


PROBE_FLOW = """
import sys, time
from prefect import flow

@flow(name="ingest", flow_run_name=sys.argv[1])  # named as hetriever's ingest flow
def probe():
    time.sleep(600)

probe()
"""


def test_a_flow_run_whose_process_is_killed_is_marked_crashed(prefect_harness):
    """A worker killed mid-run leaves its flow run Running for ever (holding its deployment's
    concurrency slot): once its heartbeats stop, the automation marks it Crashed. A real flow
    run in a process killed with SIGKILL, here with a 10 s wait (the least Prefect takes)
    instead of 540 s; another flow's run whose heartbeats stop is left alone."""
    import asyncio
    import signal
    import uuid
    from datetime import timedelta

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName
    from prefect.client.schemas.objects import StateType
    from prefect.events import Event, get_events_client
    from prefect.states import Running

    from deployments.register import ensure_unresponsive_runs_crashed

    @flow(name="someone-elses-flow")
    def other() -> None:
        pass

    def state_of(run_id):
        return client.read_flow_run(run_id).state

    name = f"killed-{uuid.uuid4().hex[:8]}"
    with get_client(sync_client=True) as client:
        # replaces one that waits longer (registered by another test: 540 s), then keeps it
        assert ensure_unresponsive_runs_crashed(within=timedelta(seconds=10))
        assert not ensure_unresponsive_runs_crashed(within=timedelta(seconds=10))
        (automation,) = _unresponsive_runs_automations()
        proc = subprocess.Popen(
            [sys.executable, "-c", PROBE_FLOW, name],
            env=prefect_harness.env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            runs: list = []
            while time.monotonic() < deadline and not (runs and runs[0].state.is_running()):
                time.sleep(1)
                runs = client.read_flow_runs(
                    flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name]))
                )
            (killed,) = runs
            assert killed.state.is_running() and proc.poll() is None
            time.sleep(3)  # its first heartbeat goes out as it starts
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)

            foreign = client.create_flow_run(other, name="foreign", state=Running())

            async def heartbeat() -> None:  # as a flow run's heartbeat thread sends it
                async with get_events_client() as events:
                    await events.emit(
                        Event(
                            event="prefect.flow-run.heartbeat",
                            resource={"prefect.resource.id": f"prefect.flow-run.{foreign.id}"},
                            related=[
                                {
                                    "prefect.resource.id": f"prefect.flow.{foreign.flow_id}",
                                    "prefect.resource.role": "flow",
                                    "prefect.resource.name": other.name,
                                }
                            ],
                        )
                    )

            asyncio.run(heartbeat())
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and state_of(killed.id).type != StateType.CRASHED:
                time.sleep(2)
            state = state_of(killed.id)
            assert state.type == StateType.CRASHED, state
            assert "no heartbeat for 10 s" in (state.message or "")
            time.sleep(5)  # the foreign run's 10 s are up too
            assert state_of(foreign.id).type == StateType.RUNNING
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            client.delete_automation(automation.id)
