"""Start `hetriever serve` and `hetriever mcp`: settings in, a running server out."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any

from hetriever.core.config import Settings
from hetriever.core.logs import follow_level, get_logger
from hetriever.serve import slow_clients
from hetriever.serve.analytics_feed import AnalyticsFeed
from hetriever.serve.keys import ENV_CLIENT_KEY, ENV_KEYS, ENV_KEYS_FILE, InvalidKeyError, KeyRing
from hetriever.serve.service import DocsService, Limits
from hetriever.serve.telemetry import Telemetry
from hetriever.serve.warm import settle, warm_http, warm_mcp

log = get_logger(__name__)


def _exit_on_interrupt(*closing: Any) -> None:
    """Ctrl-C ends a stdio server at once, after closing `closing`. Left to asyncio, it
    cancels the server's tasks and waits for them, and the one reading stdin waits on a
    thread blocked in a read that only the client closing stdin ends."""

    def stop(signum: int, frame: Any) -> None:
        print("hetriever: interrupted", file=sys.stderr, flush=True)
        for resource in closing:
            resource.close()
        os._exit(130)

    signal.signal(signal.SIGINT, stop)  # asyncio keeps a handler it did not install


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Whatever writes to stdout (fd 1, from Python or a native library) goes to stderr until
    the block ends: over stdio, stdout carries the MCP protocol alone, and the SDK diverts it
    only once it serves, after the model and the index are loaded."""
    sys.stdout.flush()
    wire = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(wire, 1)
        os.close(wire)


def _service(settings: Settings, limits: Limits | None = None) -> DocsService:
    service = DocsService(settings, limits=limits)
    service.warm_up()  # the first request is served warm, and a broken model fails here
    if not service.served_names():  # a mistyped path serves nothing: say so at once
        index = (
            f"chroma {settings.chroma_host}:{settings.chroma_port}"
            if settings.chroma_host
            else str(settings.chroma_path.resolve())
        )
        log.warning(
            "nothing_indexed",
            index=index,
            state_dir=str(settings.resolved_state_dir),
            hint="run `hetriever ingest` first, or point HETRIEVER_CHROMA_PATH and "
            "HETRIEVER_STATE_DIR at an index; searches find nothing until then",
        )
    if settings.default_top_k > service.max_k:
        log.warning(
            "default_top_k_capped", default_top_k=settings.default_top_k, served=service.max_k
        )
    return service


def serve(settings: Settings, *, host: str, port: int, limits: Limits | None = None) -> int:
    from hetriever.serve.http_api import create_app

    keys = KeyRing.from_env()  # a malformed key file stops the start, with one line
    service = _service(settings, limits)
    warm_http(service, keys)  # the web stack's first-call costs, before /readyz answers
    settle()
    telemetry = Telemetry(settings.resolved_state_dir, "http")
    analytics = AnalyticsFeed(settings, "http")
    app = create_app(service, keys=keys, telemetry=telemetry, analytics=analytics)
    log.info(
        "serve_started",
        host=host,
        port=port,
        page=f"http://{host}:{port}/",
        keys=len(keys.grants),
        repositories=len(service.store.repository_names()),
        analytics=analytics.enabled,
    )
    try:
        slow_clients.run(
            app,
            host=host,
            port=port,
            timeout=settings.request_timeout,
            log_level="warning",
            access_log=False,
        )
    finally:
        analytics.close()
        telemetry.close()
        service.close()
    return 0


def mcp(settings: Settings, *, transport: str, host: str, port: int) -> int:
    from hetriever.serve.mcp_server import KeyGate, create_mcp, stdio_key

    follow_level("mcp")  # the SDK's lines (a tool failing, a session opening) at our level
    keys = KeyRing.from_env()
    fixed = stdio_key() if transport == "stdio" else None
    if fixed is not None:  # a wrong key in the assistant's config: fail now, not per call
        if not keys.grants:
            raise InvalidKeyError(
                f"{ENV_CLIENT_KEY} is set but no key file grants it",
                hint=f"set {ENV_KEYS_FILE} (or {ENV_KEYS}) in the same environment",
            )
        keys.levels(fixed)
    with _stdout_to_stderr() if transport == "stdio" else contextlib.nullcontext():
        service = _service(settings)
        warm_mcp(service, keys)  # the tools' first calls
        settle()
        telemetry = Telemetry(settings.resolved_state_dir, "mcp")
        analytics = AnalyticsFeed(settings, "mcp")
        server = create_mcp(
            service,
            keys,
            fixed_key=fixed if transport == "stdio" else None,
            telemetry=telemetry,
            analytics=analytics,
        )
    try:
        if transport == "stdio":
            import anyio

            from hetriever.serve.mcp_stdio import serve_stdio

            _exit_on_interrupt(analytics, telemetry, service)
            # answers every line, malformed and over-long ones included
            anyio.run(serve_stdio, server, settings.mcp_max_line)
        else:
            app: Any = KeyGate(server.streamable_http_app(host=host), keys)
            log.info("mcp_started", transport="http", url=f"http://{host}:{port}/mcp")
            slow_clients.run(
                app,
                host=host,
                port=port,
                timeout=settings.request_timeout,
                log_level="warning",
                access_log=False,
            )
    finally:
        analytics.close()
        telemetry.close()
        service.close()
    return 0
