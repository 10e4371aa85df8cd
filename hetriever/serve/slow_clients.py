"""Deadlines for clients that connect and then stall: headers, then the body.

uvicorn bounds only the idle time between requests (`timeout_keep_alive`): a client that
sends half its headers, or declares a body and never sends it, held its connection for as
long as it liked, and the stalled body ended in a traceback when it finally went away. Every
server here (`serve`, `mcp --transport http`, `serve-webhook`; the webhook faces the
internet) runs under `run()`, which gives a client `request_timeout` seconds (setting
`HETRIEVER_REQUEST_TIMEOUT`, default 20) for its headers and as many again for its whole
body: a stalled body is answered 408 and the connection closed, stalled headers are
dropped, each with a warning line and no traceback.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import anyio
from uvicorn.protocols.http.h11_impl import H11Protocol

from hetriever.core.logs import get_logger

log = get_logger(__name__)

KEEP_ALIVE_SECONDS = 5  # uvicorn's default idle time between requests


class BodyDeadline:
    """ASGI middleware: the request's whole body within `timeout` seconds, else 408."""

    def __init__(self, app: Any, timeout: float) -> None:
        self.app, self.timeout = app, timeout

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = {"body_done": False, "timed_out": False, "started": False}
        deadline = math.inf

        async def bounded_receive() -> dict:
            nonlocal deadline
            if state["timed_out"]:
                return {"type": "http.disconnect"}
            if state["body_done"]:  # waiting for a disconnect (streaming): no deadline
                return await receive()
            if deadline == math.inf:
                deadline = anyio.current_time() + self.timeout
            with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
                message = await receive()
                if message["type"] != "http.request" or not message.get("more_body"):
                    state["body_done"] = True
                return message
            state["timed_out"] = True
            log.warning(
                "request_body_timeout",
                path=scope.get("path"),
                seconds=self.timeout,
                client=_client(scope),
            )
            if not state["started"]:
                state["started"] = True
                await send(
                    {
                        "type": "http.response.start",
                        "status": 408,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"connection", b"close"),
                        ],
                    }
                )
                await send(
                    {
                        "type": "http.response.body",
                        "body": b'{"error": "the request body did not arrive in time"}',
                    }
                )
            return {"type": "http.disconnect"}

        async def guarded_send(message: dict) -> None:
            if state["timed_out"]:
                return  # answered already: the app's own reply to the disconnect goes nowhere
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        try:
            await self.app(scope, bounded_receive, guarded_send)
        except Exception:
            if not state["timed_out"]:
                raise
            # The app failed reading a body that never came (a client disconnect to it).


def _client(scope: dict) -> str | None:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else None


def header_deadline_protocol(timeout: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing a connection whose request headers do not arrive
    within `timeout` seconds of its start (or of the first bytes of its next request)."""

    class HeaderDeadline(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def _awaiting_headers(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(timeout, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._awaiting_headers():
                self._arm()  # a next request has begun: its headers get the same time
            else:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _headers_late(self) -> None:
            self._header_timer = None
            if self._awaiting_headers() and not self.transport.is_closing():
                log.warning(
                    "request_headers_timeout",
                    seconds=timeout,
                    client=f"{self.client[0]}:{self.client[1]}" if self.client else None,
                )
                self.transport.close()

    return HeaderDeadline


def run(app: Any, *, host: str, port: int, timeout: float, **options: Any) -> None:
    """`uvicorn.run` with both deadlines."""
    import uvicorn

    uvicorn.run(
        BodyDeadline(app, timeout),
        host=host,
        port=port,
        http=header_deadline_protocol(timeout),
        timeout_keep_alive=min(KEEP_ALIVE_SECONDS, math.ceil(timeout)),
        **options,
    )
