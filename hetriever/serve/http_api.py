"""`hetriever serve`: the search API over HTTP (FastAPI under uvicorn).

GET /search, POST /search, GET /pages/{id}, GET /diff, GET /repositories, /healthz, /readyz, /metrics,
the search analytics (`POST /analytics/open`, the `/stats` page) and the OpenAPI docs at /docs. One ASGI middleware (plain ASGI, not BaseHTTPMiddleware, which
costs a task and a copy per request) does what every request needs first: refuse a body over
the limit (413), turn the API key into access levels or answer 401 (the same answer for every
bad key, before any repository is looked at), and time the request for /metrics.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import MutableMapping
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from hetriever.core.errors import (
    BackendConnectionError,
    ConfigurationError,
    HetrieverError,
    InvalidCollectionNameError,
    InvalidFilterError,
    InvalidLimitError,
)
from hetriever.core.logs import get_logger
from hetriever.search.request import SearchRequest
from hetriever.serve import docs_page, stats_page, web
from hetriever.serve.analytics_feed import AnalyticsFeed, OpenRefused
from hetriever.serve.keys import InvalidKeyError, KeyRing, key_from_headers
from hetriever.serve.schemas import (
    DiffAnswer,
    ErrorAnswer,
    PageAnswer,
    RepositoriesAnswer,
    SearchAnswer,
    Status,
)
from hetriever.serve.service import Busy, DocsService, NotFound, RequestError, TooLarge
from hetriever.serve.telemetry import PROMETHEUS_CONTENT_TYPE, Telemetry

log = get_logger(__name__)

OPEN_PATHS = (
    "/healthz",
    "/readyz",
    "/metrics",
    "/docs",
    "/openapi.json",
    *docs_page.PATHS,
    *web.PATHS,
)
LABELLED = ("/search", "/diff", "/repositories", "/stats", "/analytics/open")  # in /metrics
# /stats shows every caller's queries: with keys configured, only a key granting this sees it.
STATS_LEVEL = "PRIVATE"
MAX_OPEN_BODY = 1024  # bytes of a POST /analytics/open body
OPEN_TYPES = ("application/json", "text/plain")  # text/plain: what sendBeacon sends a string as
BAD_REQUEST = (
    RequestError,
    InvalidFilterError,
    InvalidLimitError,
    InvalidCollectionNameError,
    ConfigurationError,
)


def _error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


def _json(raw: str | bytes, what: str) -> Any:
    """Decoded JSON, or a 400: deep nesting overflows the decoder's recursion, and invalid
    UTF-8 fails decoding; both are the caller's mistake."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise RequestError(f"{what} is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        detail = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
        raise RequestError(f"{what} is not valid JSON: {detail}") from None


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"description": "A malformed request: one sentence says what", "model": ErrorAnswer},
    401: {"description": "An API key that matches no configured key", "model": ErrorAnswer},
    413: {"description": "A request body over the limit", "model": ErrorAnswer},
    503: {
        "description": "Busy or the index backend unavailable (see Retry-After)",
        "model": ErrorAnswer,
    },
}
# POST /search reads its body itself (to answer every malformed body with a 400), so FastAPI
# cannot derive the body's schema: it is written out for the OpenAPI document.
SEARCH_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["q"],
                "additionalProperties": False,
                "properties": {
                    "q": {"type": "string", "description": "the query"},
                    "k": {"type": "integer", "minimum": 1, "description": "results wanted"},
                    "repository": {
                        "description": "only this repository, or these",
                        "oneOf": [
                            {"type": "string"},
                            {"type": "array", "items": {"type": "string"}},
                        ],
                    },
                    "filter": {
                        "type": "object",
                        "description": 'metadata filter, e.g. {"section": "functions"}',
                    },
                    "lang": {"type": "string", "description": "content language, e.g. en, or all"},
                    "group": {"type": "string", "enum": ["page", "chunk"]},
                    "version": {
                        "type": "string",
                        "description": "a version label (e.g. v0.139.0), current or all",
                    },
                },
            }
        }
    },
}

# The answers are documented by the models of hetriever.serve.schemas; what the address
# fields mean.
ADDRESS_FIELDS = (
    "`url` is the page's site-relative path (`/docs/functions/where/`); `link` "
    "its full address (`https://example.org/docs/functions/where/`) when the "
    "site's baseURL is an absolute http(s) one, else the same path as `url`."
)
SEARCH_FIELDS = ADDRESS_FIELDS + (
    " With search analytics on (the `analytics` setting), the "
    "answer carries `query_id`, for `POST /analytics/open`."
)


def status_of(exc: HetrieverError) -> int:
    if isinstance(exc, TooLarge):
        return 413
    if isinstance(exc, BAD_REQUEST):
        return 400
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, (Busy, BackendConnectionError)):
        return 503
    return 503  # the store failed underneath a valid request: retryable, not the caller's fault


class GateMiddleware:
    """Body limit, API key -> `scope["state"]["levels"]`, request timing."""

    def __init__(self, app: Any, *, keys: KeyRing, max_body: int, telemetry: Telemetry) -> None:
        self.app, self.keys, self.max_body, self.telemetry = app, keys, max_body, telemetry

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def timed_send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            response = self._refuse(scope)
            if response is not None:
                await response(scope, receive, timed_send)
                return
            await self.app(scope, self._capped(receive), timed_send)
        finally:
            path = scope.get("route_path") or scope["path"]
            endpoint = (
                path
                if path in OPEN_PATHS or path in LABELLED
                else ("/pages" if path.startswith("/pages/") else "other")
            )
            self.telemetry.request(endpoint, status["code"], time.perf_counter() - started)

    def _refuse(self, scope: dict) -> JSONResponse | None:
        headers = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])
        }
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            return _error(413, f"the request body is over {self.max_body} bytes")
        if scope["path"] in OPEN_PATHS:
            return None
        try:
            levels = self.keys.levels(key_from_headers(headers))
        except InvalidKeyError:
            return _error(401, "invalid API key", **{"WWW-Authenticate": "Bearer"})
        scope.setdefault("state", {})["levels"] = levels
        return None

    def _capped(self, receive: Any) -> Any:
        """A body sent without Content-Length (chunked) is cut off at the limit too."""
        seen = {"bytes": 0}
        limit = self.max_body

        async def capped() -> dict:
            message = await receive()
            if message["type"] == "http.request":
                seen["bytes"] += len(message.get("body", b""))
                if seen["bytes"] > limit:
                    raise TooLarge(f"the request body is over {limit} bytes")
            return message

        return capped


def create_app(
    service: DocsService,
    *,
    keys: KeyRing | None = None,
    telemetry: Telemetry | None = None,
    analytics: AnalyticsFeed | None = None,
) -> FastAPI:
    """`analytics`: where searches and opens are recorded (none when not given)."""
    telemetry = telemetry or Telemetry(service.settings.resolved_state_dir, "http")
    analytics = analytics or AnalyticsFeed(service.settings, "http", enabled=False)
    keys = keys or KeyRing({}, {})
    app = FastAPI(
        title="hetriever",
        version="0.1.0",
        description="Hybrid search over Hugo documentation kept in step with git. "
        "Send an API key as `Authorization: Bearer <key>` or "
        "`X-API-Key` for levels above PUBLIC.",
        docs_url=None,
        redoc_url=None,
    )  # /docs below, with no CDN
    docs_page.add_docs(app, "hetriever")
    web.add_web(app, page_api_key=service.settings.page_api_key.get_secret_value())
    app.state.service = service
    app.state.telemetry = telemetry
    app.state.analytics = analytics

    @app.exception_handler(HetrieverError)
    async def on_error(request: Request, exc: HetrieverError) -> JSONResponse:
        status = status_of(exc)
        if status >= 500:
            log.error("request_failed", path=request.url.path, error=str(exc))
        # The log keeps the whole sentence; the caller gets it without server paths.
        return _error(
            status, service.public_message(exc), **({"Retry-After": "1"} if status == 503 else {})
        )

    @app.exception_handler(HTTPException)
    async def on_http(request: Request, exc: HTTPException) -> JSONResponse:
        # An unknown path or a wrong method: the same {"error": ...} shape as every answer.
        return _error(exc.status_code, str(exc.detail), **(exc.headers or {}))

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("query", "body"))
        return _error(400, f"{where or 'request'}: {first.get('msg', 'invalid value')}")

    @app.exception_handler(ClientDisconnect)
    async def on_gone(request: Request, exc: ClientDisconnect) -> JSONResponse:
        # The client went (or its body did not arrive in time: slow_clients): not a bug.
        log.info("client_disconnected", path=request.url.path)
        return _error(400, "the client disconnected before its request was read")

    @app.exception_handler(Exception)
    async def on_bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("request_crashed", path=request.url.path, error=str(exc))
        return _error(500, "internal error (logged)")

    async def run_search(
        request: Request,
        q: str | None,
        k: int | None,
        repository: list[str] | None,
        filters: Any,
        lang: str | None,
        group: str | None,
        version: str | None = None,
    ) -> JSONResponse:
        started = time.perf_counter()
        answer = await service.call(
            service.search,
            SearchRequest(
                q or "",
                k,
                filters,
                repositories=repository or None,
                lang=lang,
                group_by=group,
                access_levels=request.state.levels,
                version=version,
            ),
        )
        result = answer.pop("_result")
        seconds = time.perf_counter() - started
        telemetry.search(result, len(answer["results"]), seconds, repository)
        query_id = analytics.search(result, answer, seconds, repository)
        if query_id is not None:  # for POST /analytics/open when the reader opens a result
            answer["query_id"] = query_id
        return JSONResponse(answer)

    @app.get(
        "/search",
        summary="Search the docs: pages (or chunks) with passages",
        description=SEARCH_FIELDS,
        responses=ERROR_RESPONSES,
        response_model=SearchAnswer,
    )
    async def search_get(
        request: Request,
        q: str | None = Query(None, description="the query"),
        k: int | None = Query(None, description="results wanted"),
        repository: list[str] | None = Query(None, description="only these (repeatable)"),
        filter: str | None = Query(
            None, description='metadata filter as JSON, e.g. {"section": "functions"}'
        ),
        lang: str | None = Query(None, description="content language, e.g. en"),
        group: str | None = Query(
            None,
            description="page (one result per page) or chunk; the group_by setting when not given",
        ),
        version: str | None = Query(
            None,
            description="a version label (e.g. v0.139.0): that version of each repository; "
            "all: every version, a page once with the versions holding it; default: the "
            "checked-out tree",
        ),
    ) -> JSONResponse:
        filters = _json(filter, "filter") if filter else None
        return await run_search(request, q, k, repository, filters, lang, group or None, version)

    @app.post(
        "/search",
        summary="Search with a JSON body: {q, k, repository, filter, lang, group, version}",
        description=SEARCH_FIELDS,
        responses=ERROR_RESPONSES,
        response_model=SearchAnswer,
        openapi_extra={"requestBody": SEARCH_BODY},
    )
    async def search_post(request: Request) -> JSONResponse:
        body = _json(await request.body() or b"null", "the body")
        if not isinstance(body, dict):
            raise RequestError('the body must be a JSON object, e.g. {"q": "where"}')
        unknown = sorted(set(body) - {"q", "k", "repository", "filter", "lang", "group", "version"})
        if unknown:
            raise RequestError(f"unknown field(s): {', '.join(unknown)}")
        repos = body.get("repository")
        if isinstance(repos, str):
            repos = [repos]
        if repos is not None and not (
            isinstance(repos, list) and all(isinstance(r, str) for r in repos)
        ):
            raise RequestError("repository must be a name or a list of names")
        for field in ("q", "lang", "group", "version"):
            if body.get(field) is not None and not isinstance(body[field], str):
                raise RequestError(f"{field} must be a string")
        return await run_search(
            request,
            body.get("q"),
            body.get("k"),
            repos,
            body.get("filter"),
            body.get("lang"),
            body.get("group") or None,
            body.get("version"),
        )

    @app.get(
        "/pages/{ref:path}",
        summary="A page's chunks in order (page id, chunk id or URL)",
        description=ADDRESS_FIELDS,
        response_model=PageAnswer,
        responses={
            **ERROR_RESPONSES,
            404: {"description": "No such page for this caller", "model": ErrorAnswer},
        },
    )
    async def page(
        request: Request,
        ref: str,
        version: str | None = Query(
            None, description="a URL's page in this version (a label); default: the tree's"
        ),
    ) -> JSONResponse:
        return JSONResponse(
            await service.call(service.page, ref, levels=request.state.levels, version=version)
        )

    @app.get(
        "/diff",
        summary="Pages added, removed, changed and renamed between two indexed versions",
        description="`from` and `to` are version labels, or `current` (the checked-out "
        "tree); only pages the site publishes count (drafts never do).",
        response_model=DiffAnswer,
        responses={
            **ERROR_RESPONSES,
            404: {"description": "No such repository for this caller", "model": ErrorAnswer},
        },
    )
    async def diff(
        request: Request,
        repository: str = Query(..., description="the repository"),
        old: str = Query(..., alias="from", description="a version label, or current"),
        new: str = Query(..., alias="to", description="a version label, or current"),
    ) -> JSONResponse:
        return JSONResponse(
            await service.call(service.diff, repository, old, new, levels=request.state.levels)
        )

    @app.get(
        "/repositories",
        summary="Visible repositories: indexed vs checked-out commit",
        response_model=RepositoriesAnswer,
        responses=ERROR_RESPONSES,
    )
    async def repositories(request: Request) -> JSONResponse:
        rows = await service.call(service.repositories, levels=request.state.levels)
        return JSONResponse({"repositories": rows})

    @app.post(
        "/analytics/open",
        status_code=204,
        responses={
            **ERROR_RESPONSES,
            404: {
                "description": "Analytics off, or no recent search has this query_id",
                "model": ErrorAnswer,
            },
            415: {"description": "A body that is not JSON or text/plain", "model": ErrorAnswer},
        },
        summary="Record that the reader opened a search result: {query_id, rank, url}",
        description="With analytics on, a /search answer carries `query_id`; the page sends "
        "this (as sendBeacon does: `text/plain` is read as JSON too) when its "
        "reader opens result `rank` (1 for the first) at `url` (its url or "
        "link). One open per result is kept; a body over "
        f"{MAX_OPEN_BODY} bytes is a 413.",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "required": ["query_id", "rank", "url"],
                            "additionalProperties": False,
                            "properties": {
                                "query_id": {"type": "string"},
                                "rank": {"type": "integer"},
                                "url": {"type": "string"},
                            },
                        }
                    }
                },
            }
        },
    )
    async def analytics_open(request: Request) -> Response:
        if not analytics.enabled:
            return _error(404, "search analytics is off (the analytics setting)")
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind not in OPEN_TYPES:
            return _error(415, "the body must be JSON (application/json or text/plain)")
        raw = b""
        async for piece in request.stream():
            raw += piece
            if len(raw) > MAX_OPEN_BODY:
                raise TooLarge(f"the request body is over {MAX_OPEN_BODY} bytes")
        body = _json(raw or b"null", "the body")
        if not isinstance(body, dict) or set(body) != {"query_id", "rank", "url"}:
            raise RequestError("the body must be a JSON object with query_id, rank and url")
        try:
            analytics.open(body["query_id"], body["rank"], body["url"])
        except OpenRefused as exc:
            return _error(404 if exc.unknown else 400, str(exc))
        return Response(status_code=204)

    @app.get("/stats", include_in_schema=False)
    async def stats(request: Request, days: float | None = Query(None, gt=0, le=3650)) -> Response:
        if keys.grants and STATS_LEVEL not in request.state.levels:
            sent = "authorization" in request.headers or "x-api-key" in request.headers
            return _error(
                403 if sent else 401,
                f"/stats needs an API key granting {STATS_LEVEL}",
                **({} if sent else {"WWW-Authenticate": "Bearer"}),
            )
        from hetriever.search.analytics_report import analytics_report

        try:
            report = await anyio.to_thread.run_sync(
                lambda: analytics_report(service.settings, days=days)
            )
        except sqlite3.Error as exc:  # locked past its timeout, damaged: say so, briefly
            log.warning("analytics_read_failed", error=str(exc))
            return _error(503, "the analytics file cannot be read now", **{"Retry-After": "5"})
        return HTMLResponse(stats_page.render(report), headers=stats_page.HEADERS)

    @app.get("/healthz", summary="The process is up", response_model=Status)
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @app.get(
        "/readyz",
        summary="The index backend answers",
        response_model=Status,
        responses={503: {"description": "The index backend does not answer", "model": Status}},
    )
    async def readyz() -> JSONResponse:
        # Not behind the search queue: a busy server is still a ready one.
        ok = await anyio.to_thread.run_sync(service.ready)
        return JSONResponse(
            {"status": "ready" if ok else "unavailable"}, status_code=200 if ok else 503
        )

    @app.get("/metrics", summary="Prometheus metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(telemetry.exposition(), media_type=PROMETHEUS_CONTENT_TYPE)

    max_body = service.limits.max_body_bytes
    app.add_middleware(GateMiddleware, keys=keys, max_body=max_body, telemetry=telemetry)
    web.add_cors(app, service.settings.cors_origins)
    return app
