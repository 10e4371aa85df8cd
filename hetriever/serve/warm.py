"""Warming `hetriever serve` (and `hetriever mcp`) through their own stacks before they answer.

`DocsService.warm_up` pays what a search costs the first time (the model's first runs, each
collection's vector index, the BM25 copies); what is left of a first request's extra cost is
the web stack's: the middleware, routing, validation, JSON encoding, the hop to a worker
thread, each run for the first time in the process. One search and one page read sent
through a copy of the app, in this process, before the server listens, pay that too; `mcp`
calls its tools once through a copy of its server connected in process. Their telemetry goes
nowhere: /metrics and the metrics store count callers' requests only.

Then `settle` collects garbage once and freezes what is left (`gc.freeze`): the model, the
BM25 copies and the rest of the warm state, ~90k objects at 3.8k chunks, are no longer walked
by the collector. Without it the first request after start, due a full collection, paid one:
300-700 ms on a loaded machine (its counters stood at the threshold after the warm-up), and
every later full collection walked them again.
"""

from __future__ import annotations

import gc
from typing import Any

import anyio
import httpx

from hetriever.core.logs import get_logger
from hetriever.core.models import RetrievalResult
from hetriever.serve.keys import KeyRing
from hetriever.serve.service import WARM_UP_QUERIES, DocsService
from hetriever.serve.telemetry import Telemetry

log = get_logger(__name__)


class _Unrecorded(Telemetry):
    """Telemetry whose searches are counted in a registry of their own, never stored."""

    def search(
        self, result: RetrievalResult, returned: int, seconds: float, repositories: list[str] | None
    ) -> None:
        self.results.inc(returned)


def warm_http(service: DocsService, keys: KeyRing) -> None:
    """A few requests through a copy of the app (`http_api.create_app`), in process."""
    from hetriever.serve.http_api import create_app

    telemetry = _Unrecorded(service.settings.resolved_state_dir, "warm-up")
    app = create_app(service, keys=keys, telemetry=telemetry)

    async def requests() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://warm-up") as client:
            for query in WARM_UP_QUERIES:
                answer: Any = (await client.get("/search", params={"q": query})).json()
                for result in answer.get("results", [])[:1]:
                    await client.get(f"/pages/{result['page_id']}")
            await client.get("/readyz")

    try:
        anyio.run(requests)
    except Exception as exc:  # a warm-up that fails costs the first caller time, no more
        log.warning("warm_up_failed", error=f"{type(exc).__name__}: {exc}")
    finally:
        telemetry.close()


def warm_mcp(service: DocsService, keys: KeyRing) -> None:
    """The MCP tools' first calls, through a copy of the MCP server connected in process
    (no telemetry: nothing is recorded)."""
    from mcp.client import Client

    from hetriever.serve.mcp_server import create_mcp

    server = create_mcp(service, keys)

    async def calls() -> None:
        async with Client(server) as client:
            await client.list_tools()
            await client.call_tool("list_repositories", {})
            for query in WARM_UP_QUERIES:
                await client.call_tool("search_docs", {"query": query})

    try:
        anyio.run(calls)
    except Exception as exc:  # a warm-up that fails costs the first caller time, no more
        log.warning("warm_up_failed", error=f"{type(exc).__name__}: {exc}")


def settle() -> None:
    """One full collection now, and the survivors (the warm state) kept out of later ones."""
    gc.collect()
    gc.freeze()
