"""The webhook service as its tests run it: a config whose Prefect API is given, the app under
uvicorn in a thread, GitHub push payloads and signed deliveries (tests/webhooks/, and the runs
that start from a push elsewhere)."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn

from webhooks.service import WebhookConfig, create_app, parse_repo_routes, signature_for

SECRET = "s3cret-for-tests-0123456789"
REPOS = "gohugoio/hugoDocs=hugo-docs,open-telemetry/opentelemetry.io=opentelemetry-io@release"
SHA = "0123456789abcdef0123456789abcdef01234567"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on exit: nothing listens there


def webhook_config(state_dir: Path, api_url: str, **changes) -> WebhookConfig:
    base = dict(
        secret=SECRET,
        prefect_api_url=api_url,
        repos=parse_repo_routes(REPOS),
        state_dir=state_dir,
        max_body=64 * 1024,
        prefect_timeout=20.0,
    )
    return WebhookConfig(**{**base, **changes})


@contextmanager
def running(config: WebhookConfig) -> Iterator[str]:
    """The app under uvicorn in a thread, on a socket bound here (no port race)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(config), log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("webhook server thread died on start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def push_payload(
    full_name: str = "gohugoio/hugoDocs",
    branch: str = "master",
    default_branch: str = "master",
    after: str = SHA,
) -> dict:
    return {
        "ref": f"refs/heads/{branch}",
        "before": "f" * 40,
        "after": after,
        "deleted": False,
        "repository": {
            "full_name": full_name,
            "clone_url": f"https://github.com/{full_name}.git",
            "default_branch": default_branch,
        },
        "head_commit": {"id": after, "message": "docs: edit"},
    }


def send(
    base: str,
    payload: object = None,
    *,
    event: str = "push",
    delivery: str | None = None,
    secret: str | None = SECRET,
    raw: bytes | None = None,
    signature: str | None = None,
    content_type: str = "application/json",
    headers: dict | None = None,
) -> httpx.Response:
    body = raw if raw is not None else json.dumps(payload).encode()
    hdrs = {
        "Content-Type": content_type,
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
    }
    if signature is not None:
        hdrs["X-Hub-Signature-256"] = signature
    elif secret is not None:
        hdrs["X-Hub-Signature-256"] = signature_for(secret, body)
    hdrs.update(headers or {})
    return httpx.post(f"{base}/webhook", content=body, headers=hdrs, timeout=30)


def read_flow_run(flow_run_id: str):
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(uuid.UUID(flow_run_id))
