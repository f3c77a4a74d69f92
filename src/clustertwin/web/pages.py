"""The pages: one per question (Plan, Train, Infer, Explain, Validate), each a form built from its command's
parameters (:func:`clustertwin.web.commands.params_of`: the same names, defaults and help as the CLI) whose
values live in the URL's query string, so a plan is shared by sharing its address; the page script
(``static/app.js``) calls the API on every change and draws the answer with the report's plotly. The Train
page links the downloads (``/api/download/sbatch|k8s|report``) with the options of its form that each takes,
the layout options left empty filled as the estimate on screen resolved them, and draws the predicted step's
timeline (``/api/train/timeline``, a second request after each estimate, so the estimate stays fast).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response

from clustertwin import __version__
from clustertwin.cli.layout_options import LAYOUT_PARAMS
from clustertwin.safety import script_json
from clustertwin.web.commands import COMMANDS, DOWNLOADS, Param, params_of
from clustertwin.web.params import catalog_ids, choices

HERE = Path(__file__).parent
STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


@dataclass(frozen=True)
class Page:
    """A page: its form is the options of ``api`` (``hidden``: options it leaves at the CLI default)."""

    name: str
    title: str
    question: str
    api: str
    hidden: frozenset[str] = frozenset()
    initial: tuple[tuple[str, str], ...] = ()
    """Values a first visit starts from (a required option needs one to show a result)."""


PAGES: dict[str, Page] = {p.name: p for p in (
    Page("plan", "Plan", "What does this cluster cost, draw and hold? Compare up to four.", "plan"),
    Page("train", "Train", "How fast does this model train on this cluster, and in which layout?",
         "train/estimate", initial=(("gpus", "64"), ("global_batch", "256"), ("tp", "2"))),
    Page("infer", "Infer", "How many GPUs serve this traffic within the SLOs?", "infer/size",
         initial=(("request_rate", "10"), ("input_len", "512"), ("output_len", "128"), ("slo_ttft_ms", "500"),
                  ("slo_tpot_ms", "50"))),
    Page("explain", "Explain", "Where does the step time go, from storage to the scheduler?", "explain",
         initial=(("global_batch", "1024"),)),
    Page("validate", "Validate", "How close is the model to measured runs?", "validate",
         initial=(("kind", "infer"),)),
)}


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                              undefined=jinja2.StrictUndefined)


def control(p: Param) -> dict[str, Any]:
    """How the form shows parameter ``p``: ``select`` (catalog ids or choices), ``tristate`` (a flag not given
    by default), ``checkbox``, ``number`` or ``text`` (a repeatable one comma-separated)."""
    options = catalog_ids(p.catalog) if p.catalog else list(choices(p))
    if p.name == "recompute_modules":
        options = []
    if options:
        kind = "select"
    elif p.kind == "bool":
        kind = "tristate" if p.default is None else "checkbox"
    elif p.kind in ("int", "float") and not p.multiple:
        kind = "number"
    else:
        kind = "text"
    default = ",".join(str(v) for v in p.default) if p.multiple else p.default
    return {"name": p.name, "option": p.option, "help": p.help, "kind": kind, "options": options,
            "multiple": p.multiple, "default": "" if default is None else str(default).lower()
            if isinstance(default, bool) else str(default), "required": p.required, "layout": p.layout,
            "step": "1" if p.kind == "int" else "any"}


def render(page: Page, request: Request) -> str:
    """The page's HTML with its form filled from the query string (or the page's first values)."""
    query = request.query_params
    given: dict[str, list[str]] = {}
    source = list(query.multi_items()) or list(page.initial)
    for k, v in source:
        given.setdefault(k, []).append(v[:1000])
    controls = [control(p) for p in params_of(page.api) if p.name not in page.hidden]
    for c in controls:
        values = given.get(c["name"])
        c["values"] = values if values is not None else ([] if c["multiple"] and c["kind"] == "select" else None)
        if values is not None and not (c["multiple"] and c["kind"] == "select"):
            c["value"] = ",".join(values)
        else:
            c["value"] = c["default"]
        if c["multiple"] and c["kind"] == "select" and values is None:
            c["values"] = c["default"].split(",") if c["default"] else []
    config = {"page": page.name, "api": page.api, "version": __version__,
              "search_params": [p.name for p in params_of("train/search")],
              "scale_params": [p.name for p in params_of("train/scale")],
              "downloads": {path.removeprefix("download/"): [p.name for p in params_of(path)]
                            for path in DOWNLOADS} if page.name == "train" else {},
              "layout_params": list(LAYOUT_PARAMS),
              "timeline": "train/timeline" if page.name == "train" else None}
    template = _environment().get_template("page.html.j2")
    return template.render(page=page, pages=PAGES.values(), controls=controls, version=__version__,
                           model_yaml="model" in {c["name"] for c in controls}, command=COMMANDS[page.api],
                           config=script_json(_json(config)))


def _json(obj: Any) -> str:
    import json

    return json.dumps(obj, separators=(",", ":"))


@functools.cache
def _plotly() -> bytes:
    from clustertwin.report.html import plotly_js

    return str(plotly_js()).encode("utf-8")


def static_file(name: str) -> Response:
    """A file of ``static/`` by bare name (no directories), or plotly.js as the report inlines it."""
    if name == "plotly.js":
        return Response(_plotly(), media_type=STATIC_TYPES[".js"], headers={"cache-control": "max-age=3600"})
    allowed = {p.name: p for p in (HERE / "static").iterdir() if p.suffix in STATIC_TYPES}
    if name not in allowed:
        return PlainTextResponse("not found", status_code=404)
    path = allowed[name]
    return Response(path.read_bytes(), media_type=STATIC_TYPES[path.suffix])


def api_docs(schema: dict[str, Any]) -> HTMLResponse:
    """``/docs``: every endpoint of the OpenAPI schema with its parameters (the schema itself: ``/openapi.json``)."""
    endpoints = []
    for path, methods in schema.get("paths", {}).items():
        for method, op in methods.items():
            params = [{"name": q["name"], "required": q.get("required", False),
                       "type": q.get("schema", {}).get("type") or "/".join(
                           a.get("type", "") for a in q.get("schema", {}).get("anyOf", [])),
                       "description": q.get("description", "")} for q in op.get("parameters", [])]
            endpoints.append({"method": method.upper(), "path": path, "summary": op.get("summary", ""),
                              "params": params})
    template = _environment().get_template("docs.html.j2")
    return HTMLResponse(template.render(endpoints=endpoints, pages=PAGES.values(), version=__version__))


def register(app: FastAPI) -> None:
    """One route per page: ``/plan``, ``/train``, ``/infer``, ``/explain``, ``/validate``."""
    for page in PAGES.values():
        app.get(f"/{page.name}", include_in_schema=False)(_route(page))


def _route(page: Page) -> Any:
    def show(request: Request) -> HTMLResponse:
        return HTMLResponse(render(page, request))

    return show
