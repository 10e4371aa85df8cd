"""`/docs`: the API's Swagger UI, served whole by the API itself.

FastAPI's own `/docs` loads Swagger UI's script and stylesheet from a CDN, so on a machine
without internet access (where hetriever is meant to run) the page stays blank. The
`swagger-ui-py` package ships Swagger UI's built files (Apache-2.0, its LICENSE beside them);
the page here loads them from `/docs/assets/`, and Swagger UI's online validator, the one
other address it would call, is switched off. `/redoc` (a CDN too) is not served.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, Response
from starlette.exceptions import HTTPException

ASSETS = "/docs/assets"
# The files the page needs, and their content types.
FILES = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon-32x32.png": "image/png",
    "LICENSE": "text/plain",
}
PATHS = tuple(f"{ASSETS}/{name}" for name in FILES)


def assets_dir() -> Path:
    """Where swagger-ui-py keeps Swagger UI's built files (found without importing it:
    its package imports template and YAML libraries the page does not need)."""
    from importlib.util import find_spec

    spec = find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the swagger-ui-py package is not installed (`make install`)")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def add_docs(app: FastAPI, title: str) -> None:
    """`GET /docs` and its assets on `app` (made with `docs_url=None, redoc_url=None`)."""
    folder = assets_dir()

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{title} - API docs",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
            swagger_ui_parameters={"validatorUrl": None},
        )  # no call to the online validator

    @app.get(ASSETS + "/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        if name not in FILES:
            raise HTTPException(status_code=404)
        return FileResponse(
            folder / name,
            media_type=FILES[name],
            headers={"Cache-Control": "public, max-age=86400"},
        )
