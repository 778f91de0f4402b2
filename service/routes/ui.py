"""The dashboard (``/ui``) and the API explorer (``/v1/docs``), from files in the package.

Nothing here reads a session: the pages are static and hold no data; their scripts ask
the API for everything, with the API key the user gives once (kept in the browser's
session storage), so the dashboard is behind the same keys as the API. Every asset is
served by the service itself (no CDN): the dashboard's pages say so to the browser with
a Content-Security-Policy that allows this origin only.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from starlette.responses import FileResponse, RedirectResponse, Response

__all__ = ["DASHBOARD_PATH", "install", "session_page"]

#: Where the dashboard is served.
DASHBOARD_PATH = "/ui"
STATIC = Path(__file__).resolve().parent.parent / "static" / "ui"
#: The dashboard's pages load scripts, styles and data from this origin only.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


def session_page(session_id: str) -> str:
    """The path of a session's page in the dashboard."""
    return f"{DASHBOARD_PATH}/sessions/{session_id}"


def _page(name: str) -> Response:
    return FileResponse(STATIC / name, media_type="text/html; charset=utf-8", headers=_HEADERS)


@router.get(DASHBOARD_PATH)
async def dashboard() -> Response:
    """The sessions list."""
    return _page("index.html")


@router.get(DASHBOARD_PATH + "/")
async def dashboard_slash() -> Response:
    return RedirectResponse("../ui", status_code=308)  # relative: behind a path prefix too


@router.get(DASHBOARD_PATH + "/sessions/{session_id}")
async def session(session_id: str) -> Response:
    """One session's page (its script reads the id from the address)."""
    del session_id
    return _page("session.html")


def _swagger_assets() -> Path:
    """Swagger UI's files, as the fastapi-offline package ships them."""
    return Path(str(resources.files("fastapi_offline") / "static"))


@router.get("/v1/docs")
async def docs() -> Response:
    """The API explorer, with Swagger UI's files from the package, not a CDN."""
    return get_swagger_ui_html(
        openapi_url="/v1/openapi.json",
        title="Kameleon API",
        swagger_js_url="/v1/docs/assets/swagger-ui-bundle.js",
        swagger_css_url="/v1/docs/assets/swagger-ui.css",
        swagger_favicon_url="/v1/docs/assets/favicon.png",
        swagger_ui_parameters={"validatorUrl": None},
    )


def install(app: FastAPI) -> None:
    """Serve the dashboard, its files and the API explorer from ``app``."""
    app.include_router(router)
    app.mount(DASHBOARD_PATH + "/static", StaticFiles(directory=STATIC), name="dashboard-static")
    app.mount("/v1/docs/assets", StaticFiles(directory=_swagger_assets()), name="docs-static")
