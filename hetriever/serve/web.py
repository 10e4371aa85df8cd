"""The search page at `/`, the widget script a docs site loads, and who may call from a
browser (CORS).

`/` is a page with a search box over `/search` (results as one types, facets, keyboard
first); `/widget.js` is its script, which on a docs site puts a "Search docs" button opening
that search in a dialog: `hetriever/serve/static/text.js`, `search.js` and `mount.js`, joined
inside one function so that nothing of them leaks into the docs site's page. Every file is the
package's own (`hetriever/serve/static/`): no CDN, nothing fetched from another host, so the
page works offline. The page sends the visitor's key (entered on the page, kept in the
tab's session storage) or the `page_api_key` setting, exactly as any API client does.

A docs site on another origin calls `/search` from its readers' browsers: the origins listed
in the `cors_origins` setting get CORS headers, no other (none by default).
"""

from __future__ import annotations

import html
from functools import cache
from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response
from starlette.middleware.cors import CORSMiddleware

FILES = {"search.css": "text/css; charset=utf-8", "page.css": "text/css; charset=utf-8"}
PATHS = ("/", "/widget.js", *(f"/web/{name}" for name in FILES))
# The page runs only its own script and talks only to its own server.
PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
CACHE = {"Cache-Control": "public, max-age=300"}
CORS_HEADERS = ["Authorization", "X-API-Key", "Content-Type"]


# A packaged file read once (no process cache: it cannot change while the process runs).
@cache
def asset(name: str) -> str:
    return files("hetriever.serve").joinpath("static", name).read_text(encoding="utf-8")


SCRIPT_PARTS = ("text.js", "search.js", "mount.js")


@cache
def widget_script() -> str:
    """The search box's script: its parts in order, as one strict-mode function."""
    parts = "\n".join(asset(name) for name in SCRIPT_PARTS)
    return f'(function () {{\n"use strict";\n\n{parts}}})();\n'


def add_web(app: FastAPI, *, page_api_key: str = "") -> None:
    """`/`, `/widget.js` and the stylesheets on `app`."""
    page = asset("index.html").replace("{api_key}", html.escape(page_api_key, quote=True))

    @app.get("/", include_in_schema=False)
    async def search_page() -> HTMLResponse:
        return HTMLResponse(
            page,
            headers={
                "Content-Security-Policy": PAGE_POLICY,
                "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer",
                "Cache-Control": "no-cache",
            },
        )

    @app.get("/widget.js", include_in_schema=False)
    async def widget() -> Response:
        return Response(
            widget_script(),
            media_type="text/javascript; charset=utf-8",
            headers={**CACHE, "X-Content-Type-Options": "nosniff"},
        )

    for name, media in FILES.items():

        def stylesheet(name: str = name, media: str = media) -> Response:
            return Response(
                asset(name),
                media_type=media,
                headers={**CACHE, "X-Content-Type-Options": "nosniff"},
            )

        app.add_api_route(f"/web/{name}", stylesheet, methods=["GET"], include_in_schema=False)


def add_cors(app: FastAPI, origins: list[str]) -> None:
    """CORS headers for `origins` only (added last: outermost, so a 401 or 413 from the
    key middleware reaches an allowed page as the answer it is, not as a network error)."""
    if origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(origins),
            allow_methods=["GET", "POST"],
            allow_headers=CORS_HEADERS,
            allow_credentials=False,
            max_age=600,
        )
