"""Start `hetriever serve` and `hetriever mcp`: settings in, a running server out."""

from __future__ import annotations

from typing import Any

from hetriever.config import Settings
from hetriever.logs import get_logger
from hetriever.serve.keys import KeyRing
from hetriever.serve.service import DocsService, Limits
from hetriever.serve.telemetry import Telemetry

log = get_logger(__name__)


def _service(settings: Settings, limits: Limits | None = None) -> DocsService:
    service = DocsService(settings, limits=limits)
    service.warm_up()  # the first request is served warm, and a broken model fails here
    return service


def serve(settings: Settings, *, host: str, port: int, limits: Limits | None = None) -> int:
    import uvicorn

    from hetriever.serve.http_api import create_app

    keys = KeyRing.from_env()  # a malformed key file stops the start, with one line
    service = _service(settings, limits)
    telemetry = Telemetry(settings.resolved_state_dir, "http")
    app = create_app(service, keys=keys, telemetry=telemetry)
    log.info("serve_started", host=host, port=port, keys=len(keys.grants),
             repositories=len(service.store.repository_names()))
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    finally:
        telemetry.close()
        service.close()
    return 0


def mcp(settings: Settings, *, transport: str, host: str, port: int) -> int:
    from hetriever.serve.mcp_server import KeyGate, create_mcp, stdio_key

    keys = KeyRing.from_env()
    fixed = stdio_key() if transport == "stdio" else None
    if fixed is not None:
        keys.levels(fixed)  # a wrong key in the assistant's config: fail now, not per call
    service = _service(settings)
    telemetry = Telemetry(settings.resolved_state_dir, "mcp")
    server = create_mcp(service, keys, fixed_key=fixed if transport == "stdio" else None,
                        telemetry=telemetry)
    try:
        if transport == "stdio":
            server.run("stdio")
        else:
            import uvicorn

            app: Any = KeyGate(server.streamable_http_app(host=host), keys)
            log.info("mcp_started", transport="http", url=f"http://{host}:{port}/mcp")
            uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    finally:
        telemetry.close()
        service.close()
    return 0
