"""`hetriever mcp`: the docs as Model Context Protocol tools, over stdio or streamable HTTP.

Tools: `search_docs`, `get_page`, `list_repositories`. Each returns plain text an LLM can cite
(title, URL, passage) cut to a token budget, estimated at 4 characters per token so no
tokenizer is loaded for it. Access rules are those of the HTTP API: over stdio the process's
`HETRIEVER_API_KEY` (checked at start-up, so a bad key fails at once with one line); over HTTP
the caller's `Authorization: Bearer` / `X-API-Key` header, a bad key answered with 401 before
any MCP message is read.
"""

from __future__ import annotations

import os
import time
from typing import Annotated, Any

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from pydantic import Field

from hetriever.core.errors import HetrieverError
from hetriever.core.logs import get_logger
from hetriever.search.request import SearchRequest
from hetriever.serve.analytics_feed import AnalyticsFeed
from hetriever.serve.keys import ENV_CLIENT_KEY, InvalidKeyError, KeyRing, key_from_headers
from hetriever.serve.service import DocsService, Limits
from hetriever.serve.telemetry import Telemetry

log = get_logger(__name__)

CHARS_PER_TOKEN = 4
DEFAULT_TOKEN_BUDGET = 2000
MIN_TOKEN_BUDGET, MAX_TOKEN_BUDGET = 100, 8000
MAX_K = Limits().max_k
# Bounds in the tools' schemas, so an agent sees them before it calls.
MAX_TOKENS_FIELD = Field(
    ge=MIN_TOKEN_BUDGET,
    le=MAX_TOKEN_BUDGET,
    description=f"the answer's budget in tokens (default {DEFAULT_TOKEN_BUDGET})",
)
INSTRUCTIONS = (
    "Search up-to-date documentation kept in step with its git repositories. "
    "Call search_docs first, then get_page with a result's page id for the whole "
    "page. Cite the URL shown with each passage."
)


def clip(
    text: str, budget_tokens: int, more: str = "call get_page with the page id for the rest"
) -> str:
    """`text` cut to the budget at a line or word boundary, saying that it was cut."""
    limit = max(1, budget_tokens) * CHARS_PER_TOKEN
    if len(text) <= limit:
        return text
    cut = text[:limit]
    at = max(cut.rfind("\n"), cut.rfind(" "))
    cut = cut[:at] if at > limit // 2 else cut
    return cut.rstrip() + f"\n[... cut to the token budget; {more}]"


def format_results(answer: dict[str, Any], budget_tokens: int) -> str:
    results = answer["results"]
    if not results:
        unknown = answer.get("unknown_repositories")
        hint = (
            f" No repository named {', '.join(map(repr, unknown))} can be searched here; "
            "list_repositories shows those that can."
            if unknown
            else ""
        )
        return f"No documentation found for {answer['query']!r}.{hint}"
    share = max(40, budget_tokens // len(results) - 40)  # tokens per passage
    told = answer.get("query_language")
    language = f" (in {told}, the query's language; lang chooses another)" if told else ""
    lines = [f"{len(results)} result(s) for {answer['query']!r}{language}:"]
    for i, r in enumerate(results, start=1):
        title = r["title"] + (f" > {r['heading']}" if r["heading"] else "")
        version = f"  version: {r['version']}" if r.get("version") else ""
        held = ", ".join(
            v["version"] + (" (differs)" if v["differs"] else "") for v in r.get("versions", [])
        )
        lines.append(
            f"\n[{i}] {title}\nURL: {r['link']}\nrepository: {r['repository']}  "
            f"page id: {r['page_id']}  score: {r['score']:.3f}{version}\n"
            + (f"in versions: {held}\n" if held else "")
            + clip(r["passage"].strip(), share)
        )
    narrow = facets_line(answer.get("facets") or {})
    return clip("\n".join(lines + ([narrow] if narrow else [])), budget_tokens)


def facets_line(facets: dict[str, list[dict[str, Any]]]) -> str:
    """The candidate pages per repository, language and section, as the arguments that
    narrow to them."""
    parts = [
        f"{name} " + ", ".join(f"{v['value']} ({v['count']})" for v in values)
        for name, values in facets.items()
        if len(values) > 1
    ]
    return (
        "\nNarrow with repository, lang or section; candidate pages: " + "; ".join(parts)
        if parts
        else ""
    )


def format_page(page: dict[str, Any], budget_tokens: int) -> str:
    version = f"  version: {page['version']}" if page.get("version") else ""
    head = (
        f"{page['title']}\nURL: {page['link']}\nrepository: {page['repository']}  "
        f"page id: {page['page_id']}{version}\n"
    )
    body = []
    for chunk in page["chunks"]:
        heading = f"## {chunk['heading']}\n" if chunk["heading"] else ""
        body.append(heading + chunk["text"].strip())
    more = (
        "call again with a larger max_tokens for more"
        if budget_tokens < MAX_TOKEN_BUDGET
        else "the page is longer than the largest budget; search_docs with words from a "
        "later section shows that section"
    )
    return clip(head + "\n" + "\n\n".join(body), budget_tokens, more=more)


def format_repositories(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "No repositories are indexed (or none is visible with this key)."
    lines = []
    for r in rows:
        state = (
            ""
            if r["up_to_date"] is None
            else (" (up to date)" if r["up_to_date"] else " (behind the checked-out commit)")
        )
        lines.append(
            f"- {r['repository']}: {r['files']} pages, {r['chunks']} chunks, indexed "
            f"commit {r['indexed_commit'][:12] or 'none'}{state}"
            + (f", {r['url']}" if r["url"] else "")
        )
    return "\n".join(lines)


def _budget(max_tokens: int | None) -> int:
    if max_tokens is None:
        return DEFAULT_TOKEN_BUDGET
    if not MIN_TOKEN_BUDGET <= max_tokens <= MAX_TOKEN_BUDGET:
        raise ToolError(f"max_tokens must be from {MIN_TOKEN_BUDGET} to {MAX_TOKEN_BUDGET}")
    return max_tokens


NOT_INITIALIZED = (
    "Invalid Request: the session is not initialized; send `initialize` "
    "(then `notifications/initialized`) first"
)


async def not_initialized_error(ctx: Any, call_next: Any) -> Any:
    """A request before `initialize` is answered -32600 "not initialized". The SDK refuses
    it with -32602 "Invalid request parameters" (a compatibility shape it pins), which
    tells a client to fix its arguments rather than its handshake. Unknown methods stay
    -32601 and `ping` is served, as the SDK does."""
    try:
        return await call_next(ctx)
    except MCPError as exc:
        gate = (
            exc.code == types.INVALID_PARAMS
            and exc.message == "Invalid request parameters"
            and getattr(ctx.session, "client_params", True) is None
        )
        if not gate:
            raise
        log.warning("mcp_not_initialized", method=str(ctx.method)[:80])
        raise MCPError(code=types.INVALID_REQUEST, message=NOT_INITIALIZED) from None


def create_mcp(
    service: DocsService,
    keys: KeyRing,
    *,
    fixed_key: str | None = None,
    telemetry: Telemetry | None = None,
    analytics: AnalyticsFeed | None = None,
) -> MCPServer:
    """The MCP server. `fixed_key`: the stdio process's key (HTTP reads each request's);
    `analytics`: where searches are recorded (none when not given)."""
    stdio_levels = keys.levels(fixed_key) if fixed_key is not None else None
    server = MCPServer(
        name="hetriever",
        instructions=INSTRUCTIONS,
        version="0.1.0",
        middleware=[not_initialized_error],
    )

    def levels(ctx: Context) -> frozenset[str]:
        if stdio_levels is not None:
            return stdio_levels
        headers = ctx.headers if ctx is not None else None
        try:
            return keys.levels(key_from_headers({k.lower(): v for k, v in (headers or {}).items()}))
        except InvalidKeyError:
            raise ToolError("invalid API key") from None

    async def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await service.call(fn, *args, **kwargs)
        except HetrieverError as exc:  # a bad query or an unknown page: tell the model, briefly
            raise ToolError(service.public_message(exc)) from None
        except Exception as exc:  # a bug: the SDK would hand str(exc) (paths...) to the model
            log.exception("tool_crashed", error=str(exc))
            raise ToolError("internal error (logged)") from None

    @server.tool()
    async def search_docs(
        query: Annotated[
            str, Field(description="a question, words, a page's title or heading, or a docs URL")
        ],
        ctx: Context,
        repository: Annotated[
            str | None, Field(description="only this repository (see list_repositories)")
        ] = None,
        lang: Annotated[
            str | None,
            Field(
                description='a content language, e.g. "en"; '
                '"all" for every one; default: the '
                "query's own where its script "
                "names one (Japanese, Korean...), "
                "else the site's default"
            ),
        ] = None,
        k: Annotated[
            int | None,
            Field(
                ge=1,
                le=MAX_K,
                description="how many pages (default: the server's default_top_k, 5)",
            ),
        ] = None,
        section: Annotated[
            str | None,
            Field(
                description='only this Hugo section (the first folder under content, e.g. "docs")'
            ),
        ] = None,
        version: Annotated[
            str | None,
            Field(
                description='a version of the docs, e.g. "v0.139.0"; "all" for every indexed '
                "version (each page once, with the versions holding it); default: the "
                "current docs"
            ),
        ] = None,
        max_tokens: Annotated[int | None, MAX_TOKENS_FIELD] = None,
    ) -> str:
        """Search the documentation. Returns the best pages, each with its title, URL, page id
        and the passage that matched. A docs URL as the query puts its page first (a `#anchor`
        shows that section)."""
        budget = _budget(max_tokens)
        started = time.perf_counter()
        answer = await call(
            service.search,
            SearchRequest(
                query,
                k,
                {"section": section} if section else None,
                repositories=[repository] if repository else None,
                lang=lang,
                group_by="page",
                access_levels=levels(ctx),
                version=version,
            ),
        )
        result = answer.pop("_result")
        seconds, scope = time.perf_counter() - started, [repository] if repository else None
        if telemetry is not None:
            telemetry.search(result, len(answer["results"]), seconds, scope)
        if analytics is not None:  # no open can be reported: an agent reads the text
            analytics.search(result, answer, seconds, scope)
        return format_results(answer, budget)

    @server.tool()
    async def get_page(
        url_or_id: Annotated[
            str,
            Field(
                description="a page id from search_docs "
                "(<repository>/<file path>), a chunk "
                "id, or the page's URL"
            ),
        ],
        ctx: Context,
        version: Annotated[
            str | None,
            Field(description="a URL's page in this version of the docs (e.g. v0.139.0)"),
        ] = None,
        max_tokens: Annotated[int | None, MAX_TOKENS_FIELD] = None,
    ) -> str:
        """The whole page, its sections in order."""
        budget = _budget(max_tokens)
        page = await call(service.page, url_or_id, levels=levels(ctx), version=version)
        return format_page(page, budget)

    @server.tool()
    async def list_repositories(ctx: Context) -> str:
        """The documentation repositories that can be searched, with their indexed commit."""
        return format_repositories(await call(service.repositories, levels=levels(ctx)))

    return server


class KeyGate:
    """ASGI wrapper for the streamable HTTP app: a bad API key gets 401 before MCP sees it."""

    def __init__(self, app: Any, keys: KeyRing) -> None:
        self.app, self.keys = app, keys

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {
                k.decode("latin-1").lower(): v.decode("latin-1")
                for k, v in scope.get("headers", [])
            }
            try:
                self.keys.levels(key_from_headers(headers))
            except InvalidKeyError:
                from starlette.responses import JSONResponse

                response = JSONResponse(
                    {"error": "invalid API key"},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def stdio_key(env: dict[str, str] | None = None) -> str | None:
    env = dict(os.environ) if env is None else env
    key = env.get(ENV_CLIENT_KEY, "").strip()
    return key or None
