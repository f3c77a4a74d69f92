"""The FastAPI application: ``/api/<command path>`` (GET with query parameters or POST with a JSON body),
``/api/download/sbatch|k8s|report`` (the files of ``deploy slurm``, ``deploy k8s`` and ``report``, taking the
options the same way), ``/api/jobs/...`` (any of them as a background job, :mod:`.jobs`), the pages, the static
files, and the safety around them.

Safety by construction: requests take catalog ids and pasted YAML only, never a path (:mod:`.params`); bodies
over :data:`MAX_BODY_BYTES` are refused before they are read whole; every response carries a
Content-Security-Policy that allows scripts, styles and requests from this server only (no network beyond it);
pages are rendered by jinja2 with autoescape on and the page script writes results with ``textContent`` only;
errors are 422 with the CLI's one-line message (:func:`.replies.error_body`), internal failures 500 with one line and
no traceback.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from pydantic import BaseModel

from clustertwin import __version__
from clustertwin.errors import ClusterTwinError, SpecError
from clustertwin.safety import one_line
from clustertwin.web.commands import COMMANDS, DOWNLOADS, params_of
from clustertwin.web.downloads import FORMATS, download
from clustertwin.web.params import MAX_YAML_BYTES, request_model
from clustertwin.web.replies import download_response, error_body, run_command

MAX_BODY_BYTES = MAX_YAML_BYTES + (64 << 10)
"""Largest request body: a pasted 1 MiB model and the options around it."""
STATIC = Path(__file__).with_name("static")
CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
"""Content-Security-Policy of every response (plotly sets inline styles on its own elements)."""
SECURITY_HEADERS = {"content-security-policy": CSP, "x-content-type-options": "nosniff",
                    "referrer-policy": "no-referrer", "x-frame-options": "DENY", "cache-control": "no-store"}


class ErrorBody(BaseModel):
    """An error: the CLI's one-line message and the option it names."""

    error: str
    field: str | None = None


class BodyLimit:
    """ASGI middleware: a body over ``limit`` bytes gets 413 (by Content-Length, or while it streams in)."""

    def __init__(self, app: Any, limit: int = MAX_BODY_BYTES) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            await error_body(f"request body over {self.limit:,} bytes", status=413)(scope, receive, send)
            return
        seen = 0

        async def limited() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise SpecError(f"request body over {self.limit:,} bytes")
            return message

        await self.app(scope, limited, send)


def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    """A request the models refuse, on one line naming the option (``cluster: '../x' is not a catalog id``)."""
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    loc = [str(x) for x in first.get("loc", ()) if x not in ("query", "body")]
    field = loc[0] if loc else None
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    if first.get("type") == "missing":
        msg = "missing option"
    elif first.get("type") == "extra_forbidden":
        msg = "no such option"
    where = ".".join(loc) or "request"
    text = msg if msg.startswith(("--", f"{where} ")) else f"{where}: {msg}"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return error_body(f"error: {text}{more}", field)


def _json_reply(path: str, options: BaseModel) -> Response:
    return JSONResponse(run_command(path, options))


def _download_reply(path: str, options: BaseModel) -> Response:
    """The file of a download, as an attachment; the CLI's warnings in ``x-clustertwin-warnings``."""
    return download_response(path, download(path, options))


def _endpoint(path: str, source: str, reply: Callable[[str, BaseModel], Response] = _json_reply) -> Any:
    model = request_model(path)

    def call(options: Any) -> Response:
        try:
            return reply(path, options)
        except ClusterTwinError as e:
            return error_body(f"error: {e}", getattr(e, "field", None))
        except Exception as e:  # an internal failure: one line, no traceback, no paths
            return error_body(f"internal error: {type(e).__name__}: {one_line(e)[:300]}", status=500)

    annotation = Annotated[model, Query()] if source == "query" else model
    call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("options", inspect.Parameter.KEYWORD_ONLY, annotation=annotation)])
    call.__name__ = f"{path.replace('/', '_')}_{source}"
    return call


def build_app() -> FastAPI:
    """The application: the API of every command in :data:`COMMANDS`, the pages and the static files."""
    from clustertwin.web import jobs, pages

    app = FastAPI(title="clustertwin", version=__version__, description="The twin's CLI `--json` as an API.",
                  docs_url=None, redoc_url=None)
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    responses: dict[int | str, dict[str, Any]] = {422: {"model": ErrorBody}, 500: {"model": ErrorBody}}
    for path, cmd in COMMANDS.items():
        app.get(f"/api/{path}", summary=cmd.summary, responses=responses, tags=["api"])(_endpoint(path, "query"))
        app.post(f"/api/{path}", summary=cmd.summary, responses=responses, tags=["api"])(_endpoint(path, "body"))
    for path, cmd in DOWNLOADS.items():
        files = {**responses, 200: {"description": f"the file (attachment), as `clustertwin {' '.join(cmd.words)}` "
                                    "writes it", "content": {FORMATS[path].media_type: {}}}}
        for method, source in ((app.get, "query"), (app.post, "body")):
            method(f"/api/{path}", summary=cmd.summary, responses=files, tags=["downloads"],
                   response_class=Response)(_endpoint(path, source, _download_reply))

    @app.middleware("http")
    async def headers(request: Request, call_next: Any) -> Response:
        response = await call_next(request)
        for k, v in SECURITY_HEADERS.items():
            response.headers.setdefault(k, v)
        return response

    @app.get("/", include_in_schema=False)
    def root() -> Response:
        return RedirectResponse("/train")

    @app.get("/api/options/{path:path}", tags=["api"], summary="The options of one command, from the CLI.")
    def options(path: str) -> Response:
        if path not in COMMANDS:
            return error_body(f"error: no command {path[:60]!r}; commands: {', '.join(COMMANDS)}", "path", 404)
        return JSONResponse([p.__dict__ for p in params_of(path)])

    @app.get("/api/spec/{kind}/{preset}", tags=["api"], summary="A catalog entry as YAML (the spec to download).")
    def spec_yaml(kind: str, preset: str) -> Response:
        import yaml

        from clustertwin.catalog import ids, kinds, raw

        if kind not in kinds():
            return error_body(f"error: kind {kind[:40]!r} is not one of {', '.join(kinds())}", "kind")
        if preset not in ids(kind):
            return error_body(f"error: {preset[:40]!r} is not a {kind} catalog id", "preset")
        text = yaml.safe_dump(raw(kind, preset), sort_keys=False, allow_unicode=True)
        return PlainTextResponse(text, media_type="application/yaml", headers={
            "content-disposition": f'attachment; filename="{preset}.yaml"'})

    @app.get("/docs", include_in_schema=False)
    def docs() -> Response:  # the OpenAPI schema as a page of this server (no CDN: the app works offline)
        return pages.api_docs(app.openapi())

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        return pages.static_file(name)

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return PlainTextResponse("", status_code=204)

    pages.register(app)
    jobs.register(app)
    app.add_middleware(BodyLimit)
    return app
