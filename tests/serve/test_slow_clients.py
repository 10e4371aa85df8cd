"""Clients that connect and stall: `hetriever serve` and `hetriever serve-webhook` (real
processes) drop a request whose headers or body do not arrive within `request_timeout`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.chroma_fixtures import free_port, wait_until_answering
from tests.support.helpers import REPO_ROOT, stop_process
from tests.support.serve_fixtures import running

pytestmark = pytest.mark.slow  # real server processes

TIMEOUT = 2  # HETRIEVER_REQUEST_TIMEOUT for these servers
GRACE = 30  # the socket gives up (the test fails) this long after the deadline


def stalled(url: str, request: bytes) -> bytes:
    """Send `request` and nothing more; everything the server sends until it closes. A
    server that keeps the connection open past the deadline fails the test."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=TIMEOUT + GRACE) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):  # socket.timeout: still open long after the deadline
            received += chunk
    return received


BODY_NEVER_SENT = (
    b"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b'Content-Length: 500\r\n\r\n{{"query": '
)
HEADERS_NEVER_ENDED = b"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Len"


def check_both_deadlines(url: str, path: str) -> None:
    body = stalled(url, BODY_NEVER_SENT.replace(b"{path}", path.encode()).replace(b"{{", b"{"))
    assert body.startswith(b"HTTP/1.1 408 "), body[:200]
    assert b"did not arrive in time" in body
    assert stalled(url, HEADERS_NEVER_ENDED.replace(b"{path}", path.encode())) == b""


def test_serve_drops_a_stalled_body_and_stalled_headers(served_docs):
    with running(served_docs, "serve", HETRIEVER_REQUEST_TIMEOUT=str(TIMEOUT)) as served:
        check_both_deadlines(served.url, "/search")
        assert httpx.get(served.url + "/readyz", timeout=30).status_code == 200
    log = served.log.read_text()
    assert "request_body_timeout" in log and "request_headers_timeout" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_the_webhook_drops_a_stalled_body_and_stalled_headers(tmp_path):
    port = free_port()
    log = tmp_path / "webhook.log"
    env = {
        **os.environ,
        "HETRIEVER_WEBHOOK_SECRET": "s3cret-for-tests-0123456789",
        "HETRIEVER_WEBHOOK_REPOS": "gohugoio/hugoDocs=hugo-docs",
        "HETRIEVER_STATE_DIR": str(tmp_path / "state"),
        "PREFECT_API_URL": f"http://127.0.0.1:{free_port()}/api",
        "HETRIEVER_REQUEST_TIMEOUT": str(TIMEOUT),
    }
    with log.open("wb") as out:
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
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_answering(
            proc,
            url + "/healthz",
            what="serve-webhook",
            log=log,
            timeout=60,
            ready=lambda status: status == 200,
        )
        check_both_deadlines(url, "/webhook")
    finally:
        stop_process(proc)
    text = log.read_text()
    assert "request_body_timeout" in text and "request_headers_timeout" in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
