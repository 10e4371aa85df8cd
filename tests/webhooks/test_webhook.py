"""The webhook service over real HTTP: uvicorn on 127.0.0.1, requests with httpx.

Bad input is checked against an app whose Prefect API is a closed port (none of those paths may
reach Prefect). Starting runs uses the session's Prefect harness and a deployment of the real
ingest flow; nothing runs the flow (no worker), so its runs stay Scheduled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from hetriever.core.errors import ConfigurationError
from tests.support.helpers import REPO_ROOT
from tests.support.webhook_support import (
    REPOS,
    SECRET,
    SHA,
    closed_port,
    push_payload,
    read_flow_run,
    running,
    send,
    webhook_config,
)
from webhooks.deliveries import DeliveryStore
from webhooks.service import (
    RepoRoute,
    WebhookConfig,
    normalise_github_repo,
    parse_repo_routes,
    signature_for,
)

# --- without Prefect ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def offline_app(tmp_path_factory) -> Iterator[str]:
    """An app whose Prefect API is a closed port: every test here must stop before Prefect."""
    state = tmp_path_factory.mktemp("webhook-offline")
    with running(webhook_config(state, f"http://127.0.0.1:{closed_port()}/api")) as base:
        yield base


def test_healthz(offline_app):
    resp = httpx.get(f"{offline_app}/healthz")
    assert resp.status_code == 200 and resp.json() == {"status": "ok"}


def test_missing_signature_is_401(offline_app):
    resp = send(offline_app, push_payload(), secret=None)
    assert resp.status_code == 401
    assert "missing" in resp.json()["error"]


def test_forged_signature_is_401(offline_app):
    body = json.dumps(push_payload()).encode()
    # Signed over another body, and a malformed value: both rejected.
    other = signature_for(SECRET, body + b" ")
    assert send(offline_app, raw=body, signature=other).status_code == 401
    assert send(offline_app, raw=body, signature="sha256=nothex").status_code == 401
    assert (
        send(offline_app, raw=body, signature=other.replace("sha256=", "sha1=")).status_code == 401
    )


def test_wrong_secret_is_401(offline_app):
    resp = send(offline_app, push_payload(), secret="another-secret-of-enough-length")
    assert resp.status_code == 401
    assert "does not match" in resp.json()["error"]


def test_oversized_by_content_length_is_413(offline_app):
    # Declared too large: refused before the body is read (the server answers early).
    body = b"{}" * (40 * 1024)
    resp = send(offline_app, raw=body)
    assert resp.status_code == 413
    assert resp.json()["error"] == f"body of {len(body)} bytes is over the 65536-byte limit"


def test_oversized_by_streamed_size_is_413(offline_app):
    # No Content-Length (chunked): the limit holds on the bytes that actually arrive.
    def chunks():
        for _ in range(80):
            yield b" " * 1024

    resp = httpx.post(
        f"{offline_app}/webhook",
        content=chunks(),
        timeout=30,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": "sha256=" + "0" * 64,
        },
    )
    assert resp.status_code == 413
    assert "over the 65536-byte limit" in resp.json()["error"]


def test_wrong_content_type_is_415(offline_app):
    body = b"payload=" + json.dumps(push_payload()).encode()
    resp = send(offline_app, raw=body, content_type="application/x-www-form-urlencoded")
    assert resp.status_code == 415
    assert "application/json" in resp.json()["error"]


def test_malformed_json_is_400(offline_app):
    resp = send(offline_app, raw=b'{"ref": "refs/heads/master", ')
    assert resp.status_code == 400
    assert "not valid JSON" in resp.json()["error"]
    assert send(offline_app, raw=b"[1, 2]").status_code == 400


def test_ping_is_200(offline_app):
    resp = send(offline_app, {"zen": "Keep it logically awesome.", "hook_id": 7}, event="ping")
    assert resp.status_code == 200
    assert resp.json() == {"status": "pong", "hook_id": 7}


def test_non_push_event_is_ignored(offline_app):
    resp = send(offline_app, {"action": "opened", "repository": {}}, event="pull_request")
    assert resp.status_code == 202
    assert resp.json()["status"] == "ignored"
    assert "pull_request" in resp.json()["reason"]


def test_unknown_repository_is_ignored(offline_app):
    resp = send(offline_app, push_payload(full_name="someone/elsewhere"))
    assert resp.status_code == 202
    body = resp.json()
    assert body["status"] == "ignored" and "someone/elsewhere" in body["reason"]


def test_other_branch_is_ignored(offline_app):
    resp = send(offline_app, push_payload(branch="feature/x"))
    assert resp.status_code == 202
    assert resp.json() == {
        "status": "ignored",
        "reason": "push to branch 'feature/x', not 'master'",
    }
    # A configured branch wins over the default branch.
    resp = send(
        offline_app,
        push_payload(
            full_name="open-telemetry/opentelemetry.io", branch="main", default_branch="main"
        ),
    )
    assert resp.status_code == 202 and "not 'release'" in resp.json()["reason"]


def test_tags_and_branch_deletions_are_ignored(offline_app):
    tag = {**push_payload(), "ref": "refs/tags/v1.0"}
    assert send(offline_app, tag).json()["reason"] == "ref 'refs/tags/v1.0' is not a branch"
    deleted = {**push_payload(after="0" * 40), "deleted": True}
    assert "deleted" in send(offline_app, deleted).json()["reason"]


# --- config --------------------------------------------------------------------------------


def test_config_from_env(tmp_path):
    env = {
        "HETRIEVER_WEBHOOK_SECRET": SECRET,
        "HETRIEVER_WEBHOOK_REPOS": REPOS,
        "HETRIEVER_WEBHOOK_MAX_BODY": "2048",
        "HETRIEVER_STATE_DIR": str(tmp_path),
        "PREFECT_API_URL": "http://127.0.0.1:4200/api",
    }
    config = WebhookConfig.from_env(env)
    assert config.repos == {
        "gohugoio/hugodocs": RepoRoute("hugo-docs"),
        "open-telemetry/opentelemetry.io": RepoRoute("opentelemetry-io", branch="release"),
    }
    assert (config.max_body, config.deployment, config.state_dir) == (
        2048,
        "ingest/scheduled",
        tmp_path,
    )
    assert SECRET not in repr(config)
    assert config.catalog_timeout == 1.0
    assert (
        WebhookConfig.from_env({**env, "HETRIEVER_WEBHOOK_CATALOG_TIMEOUT": "2.5"}).catalog_timeout
        == 2.5
    )
    with pytest.raises(ConfigurationError, match="CATALOG_TIMEOUT"):  # past GitHub's 10 s
        WebhookConfig.from_env({**env, "HETRIEVER_WEBHOOK_CATALOG_TIMEOUT": "30"})


def test_config_reads_the_secret_from_a_file(tmp_path):
    (tmp_path / "secret").write_text(SECRET + "\n")
    env = {
        "HETRIEVER_WEBHOOK_SECRET_FILE": str(tmp_path / "secret"),
        "PREFECT_API_URL": "http://127.0.0.1:4200/api",
        "HETRIEVER_STATE_DIR": str(tmp_path),
    }
    assert WebhookConfig.from_env(env).secret == SECRET
    with pytest.raises(ConfigurationError, match="cannot be read"):
        WebhookConfig.from_env({**env, "HETRIEVER_WEBHOOK_SECRET_FILE": str(tmp_path / "no")})


@pytest.mark.parametrize("secret", ["", "too-short"])
def test_config_needs_a_long_secret(secret):
    env = {"HETRIEVER_WEBHOOK_SECRET": secret, "PREFECT_API_URL": "http://127.0.0.1:4200/api"}
    with pytest.raises(ConfigurationError, match="HETRIEVER_WEBHOOK_SECRET|shorter"):
        WebhookConfig.from_env(env)


@pytest.mark.parametrize(
    "raw", ["hugo-docs", "gohugoio/hugoDocs=ab", "justname=abc", "gohugoio/hugoDocs=..."]
)
def test_config_rejects_bad_repo_maps(raw):
    with pytest.raises(ConfigurationError, match="owner/name=docs-repo-name"):
        parse_repo_routes(raw)


def test_a_route_may_name_the_submodule_directory():
    routes = parse_repo_routes(
        "open-telemetry/opentelemetry.io=opentelemetry.io@main,gohugoio/hugoDocs=hugoDocs"
    )
    assert routes["open-telemetry/opentelemetry.io"].docs_name == "opentelemetry-io"
    assert routes["open-telemetry/opentelemetry.io"].branch == "main"
    assert routes["gohugoio/hugodocs"].docs_name == "hugodocs"


def test_github_repo_names_normalise():
    for form in (
        "Owner/Name",
        "https://github.com/Owner/Name.git",
        "git@github.com:owner/name",
        "ssh://git@github.com/owner/Name.git",
        "https://github.com/owner/name/",
    ):
        assert normalise_github_repo(form) == "owner/name"


def test_delivery_store_survives_reopen_and_prunes(tmp_path):
    path = tmp_path / "d.sqlite3"
    store = DeliveryStore(path)
    assert store.claim("a", "hugo-docs") and not store.claim("a", "hugo-docs")
    store.complete("a", "run-1")
    store.close()
    reopened = DeliveryStore(path)
    assert not reopened.claim("a", "hugo-docs")
    assert reopened.get("a")["flow_run_id"] == "run-1"
    reopened.release("a")
    assert reopened.claim("a", "hugo-docs")
    reopened.close()
    # With no retention left, the next claim prunes every older id.
    pruning = DeliveryStore(path, retention_seconds=-1)
    assert pruning.claim("b", "hugo-docs")
    assert pruning.get("a") is None
    pruning.close()


def test_delivery_store_knows_a_body_under_another_id(tmp_path):
    path = tmp_path / "d.sqlite3"
    store = DeliveryStore(path)
    assert store.claim("a", "hugo-docs", "digest-1")
    store.complete("a", "run-1")
    assert not store.claim("b", "hugo-docs", "digest-1")  # the same body, a new id
    assert store.get("b", "digest-1")["flow_run_id"] == "run-1"
    assert store.claim("c", "hugo-docs", "digest-2")
    store.release("a")  # a run that could not start: its body may come again
    assert store.claim("d", "hugo-docs", "digest-1")
    store.close()
    # An older table, without digests, gains the column.
    import sqlite3

    old = tmp_path / "old.sqlite3"
    with sqlite3.connect(old) as conn:
        conn.execute(
            "CREATE TABLE webhook_deliveries (delivery_id TEXT PRIMARY KEY, "
            "received_at REAL NOT NULL, repository TEXT NOT NULL, flow_run_id TEXT)"
        )
        conn.execute("INSERT INTO webhook_deliveries VALUES ('x', 1e10, 'hugo-docs', 'run-x')")
    reopened = DeliveryStore(old)
    assert not reopened.claim("x", "hugo-docs", "digest-x")
    assert reopened.claim("y", "hugo-docs", "digest-y")
    reopened.close()


# --- with Prefect ----------------------------------------------------------------------------


@pytest.mark.prefect
def test_good_push_starts_an_ingest_run_once(prefect_harness, ingest_deployment, tmp_path):
    config = webhook_config(
        tmp_path / "state", prefect_harness.api_url, deployment=ingest_deployment
    )
    delivery = str(uuid.uuid4())
    with running(config) as base:
        resp = send(base, push_payload(), delivery=delivery)
        assert resp.status_code == 202, resp.text
        body = resp.json()
        assert body["status"] == "started" and body["repository"] == "hugo-docs"

        run = read_flow_run(body["flow_run_id"])
        assert run.parameters["repositories"] == ["hugo-docs"]
        # a push is a trigger: the run indexes the branch's head, not the pushed commit
        assert run.parameters["fetch"] is True
        assert run.parameters["ref"] == "refs/heads/master"
        assert body["commit"] == SHA and body["branch"] == "master"
        assert run.state is not None and run.state.type.value in {"SCHEDULED", "PENDING"}
        assert "webhook" in run.tags

        replay = send(base, push_payload(), delivery=delivery)
        assert replay.status_code == 200
        assert replay.json()["status"] == "duplicate"
        assert replay.json()["flow_run_id"] == body["flow_run_id"]

        # The same signed body under a new delivery id (a replay): no second run.
        again = send(base, push_payload(), delivery=str(uuid.uuid4()))
        assert again.status_code == 200, again.text
        assert again.json()["status"] == "duplicate"
        assert again.json()["flow_run_id"] == body["flow_run_id"]

    # After a restart (a new app on the same state dir) the id is still known.
    with running(config) as base:
        again = send(base, push_payload(), delivery=delivery)
        assert again.json()["status"] == "duplicate"
    _assert_one_run_for(ingest_deployment, body["flow_run_id"])


def _assert_one_run_for(deployment: str, flow_run_id: str) -> None:
    """The deployment has one run started by this test's deliveries: the one answered."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        dep = client.read_deployment_by_name(deployment)
        ours = client.read_flow_run(uuid.UUID(flow_run_id)).idempotency_key
        runs = [
            r
            for r in client.read_flow_runs(limit=200)
            if r.deployment_id == dep.id and r.idempotency_key == ours
        ]
    assert [str(r.id) for r in runs] == [flow_run_id]


@pytest.mark.prefect
def test_missing_deployment_is_503_and_not_recorded(prefect_harness, tmp_path):
    config = webhook_config(tmp_path, prefect_harness.api_url, deployment="ingest/does-not-exist")
    with running(config) as base:
        resp = send(base, push_payload(), delivery="d-missing")
    assert resp.status_code == 503
    assert "does not exist" in resp.json()["error"]
    store = DeliveryStore(tmp_path / "webhook_deliveries.sqlite3")
    assert store.get("d-missing") is None
    store.close()


def _start_service(port: int, env: dict[str, str]) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hetriever.cli",
            "serve-webhook",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"webhook service exited: {proc.stdout.read()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("webhook service did not become healthy within 60 s")


@pytest.mark.prefect
def test_prefect_down_is_503_and_redelivery_works(prefect_harness, ingest_deployment, tmp_path):
    state = tmp_path / "state"
    port = closed_port()
    env = {
        **os.environ,
        "HETRIEVER_WEBHOOK_SECRET": SECRET,
        "HETRIEVER_WEBHOOK_REPOS": REPOS,
        "HETRIEVER_WEBHOOK_DEPLOYMENT": ingest_deployment,
        "HETRIEVER_STATE_DIR": str(state),
        "PREFECT_API_URL": f"http://127.0.0.1:{closed_port()}/api",
        "HETRIEVER_LOG_FORMAT": "json",
    }
    proc = _start_service(port, env)
    delivery = str(uuid.uuid4())
    after = "89abcdef" * 5
    try:
        resp = send(f"http://127.0.0.1:{port}", push_payload(after=after), delivery=delivery)
        assert resp.status_code == 503
        assert "unreachable" in resp.json()["error"]
        # Still 503, not "duplicate": the failed delivery was not recorded.
        assert (
            send(
                f"http://127.0.0.1:{port}", push_payload(after=after), delivery=delivery
            ).status_code
            == 503
        )
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=20)
    assert SECRET not in output
    assert delivery in output  # the outcome was logged, by delivery id

    # GitHub's redelivery, once Prefect is back, starts the run.
    with running(
        webhook_config(state, prefect_harness.api_url, deployment=ingest_deployment)
    ) as base:
        resp = send(base, push_payload(after=after), delivery=delivery)
    assert resp.status_code == 202, resp.text
    assert read_flow_run(resp.json()["flow_run_id"]).parameters["ref"] == "refs/heads/master"


HOLD_THE_CATALOG = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")  # the write lock, as an ingest holds it while it writes
print("locked", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""


@pytest.mark.prefect
def test_a_push_while_another_process_writes_the_catalog_is_queued_and_started_after(
    prefect_harness, ingest_deployment, tmp_path
):
    from hetriever.store.catalog import Catalog

    state = tmp_path / "state"
    Catalog.for_state_dir(state).close()  # the catalog an ingest made
    port = closed_port()
    env = {
        **os.environ,
        "HETRIEVER_WEBHOOK_SECRET": SECRET,
        "HETRIEVER_WEBHOOK_REPOS": REPOS,
        "HETRIEVER_WEBHOOK_DEPLOYMENT": ingest_deployment,
        "HETRIEVER_STATE_DIR": str(state),
        "PREFECT_API_URL": prefect_harness.api_url,
        "HETRIEVER_LOG_FORMAT": "json",
    }
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_CATALOG, str(state / "catalog.sqlite")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    proc = None
    try:
        assert holder.stdout.readline().strip() == "locked"
        proc = _start_service(port, env)  # it starts with the catalog locked
        base = f"http://127.0.0.1:{port}"
        delivery = str(uuid.uuid4())
        # Hang guard: the lock is held until the test lets go, so an answer at all comes
        # before the lock is released.
        queued = send(base, push_payload(), delivery=delivery)
        assert queued.status_code == 202, queued.text
        assert queued.json()["status"] == "queued" and queued.json()["repository"] == "hugo-docs"
        health = httpx.get(f"{base}/healthz", timeout=15)
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        again = send(base, push_payload(), delivery=delivery)  # GitHub's redeliver, still locked
        assert again.status_code == 202 and again.json()["status"] == "queued", again.text
        assert holder.poll() is None  # the lock was held throughout

        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=30) == 0
        deadline = time.monotonic() + 90  # hang guard: the queue is tried every few seconds
        answer = send(base, push_payload(), delivery=delivery)
        while not answer.json().get("flow_run_id") and time.monotonic() < deadline:
            time.sleep(0.5)
            answer = send(base, push_payload(), delivery=delivery)
        assert answer.status_code == 200 and answer.json()["status"] == "duplicate", answer.text
        run_id = answer.json()["flow_run_id"]
        assert run_id and read_flow_run(run_id).parameters["ref"] == "refs/heads/master"
    finally:
        if holder.poll() is None:
            holder.kill()
        if proc is not None:
            proc.terminate()
            output, _ = proc.communicate(timeout=20)
    _assert_one_run_for(ingest_deployment, run_id)  # queued twice, started once
    assert "Traceback" not in output and "webhook_queued" in output


def test_a_queued_push_waits_while_prefect_is_down_and_keeps_no_claim(tmp_path):
    from hetriever.store.catalog import Catalog
    from webhooks.queue import DeliveryQueue

    state = tmp_path / "state"
    Catalog.for_state_dir(state).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_CATALOG, str(state / "catalog.sqlite")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    config = webhook_config(
        state, f"http://127.0.0.1:{closed_port()}/api", prefect_timeout=2.0, queue_interval=0.2
    )
    delivery = str(uuid.uuid4())
    try:
        assert holder.stdout.readline().strip() == "locked"
        with running(config) as base:
            queued = send(base, push_payload(), delivery=delivery)
            assert queued.status_code == 202 and queued.json()["status"] == "queued"
            holder.stdin.write("\n")
            holder.stdin.flush()
            assert holder.wait(timeout=30) == 0
            # Tried against the closed port (each try ends in 2 s): the push stays queued
            # and its claim is let go, so a redelivery or a later try still starts it.
            deadline = time.monotonic() + 30
            store = DeliveryStore(state / "catalog.sqlite")
            try:
                while time.monotonic() < deadline:
                    tried = send(base, push_payload(), delivery=delivery)
                    if tried.status_code == 503:
                        break
                    time.sleep(0.3)
                assert tried.status_code == 503, tried.text  # Prefect down, not "duplicate"
                assert tried.headers["retry-after"] == "30"
                # a try of the queue may hold the claim for a moment: it is let go again
                while store.get(delivery) is not None and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert store.get(delivery) is None
            finally:
                store.close()
            assert [q.delivery for q in DeliveryQueue(state).items()] == [delivery]
    finally:
        if holder.poll() is None:
            holder.kill()
