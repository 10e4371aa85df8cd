"""A frozen `chroma run` (SIGSTOP) is detected within a bounded time by ingest, search, status.

The server is really stopped (its process gets SIGSTOP, so connections are accepted by the
kernel and never answered); every command must end with one clear line well within 30 s.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.support.chroma_fixtures import running_chroma_server
from tests.support.cli_runs import cli_env, pages_repo, run_cli

TIMEOUT = 3  # HETRIEVER_CHROMA_TIMEOUT for the commands below
BOUND = 30.0  # what the issue asks: a frozen server is detected within 30 s


@pytest.mark.server
def test_a_frozen_server_is_named_within_the_bound(tmp_path, minilm_model_dir):
    docs = pages_repo(tmp_path, n=3)
    with running_chroma_server(tmp_path / "server-data") as server:
        env = cli_env(
            tmp_path,
            minilm_model_dir,
            HETRIEVER_CHROMA_HOST=server.host,
            HETRIEVER_CHROMA_PORT=str(server.port),
            HETRIEVER_CHROMA_TIMEOUT=str(TIMEOUT),
        )
        assert run_cli(docs, env, "ingest").returncode == 0
        os.kill(server.process.pid, signal.SIGSTOP)
        try:
            for command in (("search", "alpha"), ("status",), ("ingest", "--full")):
                began = time.monotonic()
                done = run_cli(docs, env, *command)
                took = time.monotonic() - began
                assert done.returncode in (1, 2), (command, done.stderr[-2000:])
                assert "Traceback" not in done.stderr, done.stderr[-3000:]
                assert "did not answer within 3 s" in done.stderr + done.stdout, command
                assert took < BOUND, (command, took)
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
        assert run_cli(docs, env, "search", "alpha").returncode == 0  # and it recovers
