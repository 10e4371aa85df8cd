"""Serving the index to people and agents: the HTTP search API and the MCP server.

`service` holds what both answer (plain Python over a warm store); `http_api` and `mcp_server`
are thin edges over it; `keys` maps API keys to access levels; `telemetry` records latency.
"""

# Import each name from the module that defines it: a package re-exports nothing.
__all__: list[str] = []
