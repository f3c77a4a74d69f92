"""``clustertwin report``: one self-contained HTML file (plotly.js and every figure inlined; a
Content-Security-Policy that forbids network fetches) built from the cluster plan, the training model,
the collective model, the reliability model, the inference layer and, given a trace, the scheduler.

Escaping: the template is rendered by jinja2 with autoescape on, so every user string (cluster and model
names, file names, notes) is HTML-escaped; figure JSON is embedded in ``<script type="application/json">``
with ``<``, ``>``, ``&`` and the line separators written as JSON ``\\u`` escapes, so no data can close
the script element; plotly.js is inlined verbatim after checking that it holds no ``</script``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jinja2
from markupsafe import Markup

from clustertwin import __version__
from clustertwin.errors import SpecError
from clustertwin.plan import plan
from clustertwin.report.sections import (
    InferSettings,
    Report,
    Section,
    breakdown_section,
    cluster_label,
    comm_section,
    hpc_section,
    infer_section,
    model_label,
    plan_section,
    reliability_section,
    scaling_section,
    sched_section,
)
from clustertwin.safety import one_line, script_json
from clustertwin.specs import ClusterSpec, ModelSpec, ParallelismSpec
from clustertwin.train.scale import scale

DEFAULT_POLICIES: tuple[str, ...] = ("fifo", "backfill")
"""Scheduler policies compared when a trace is given and none are named."""


@dataclass(frozen=True)
class ReportOptions:
    """What the report evaluates besides the cluster and the model."""

    global_batch: int = 1024
    """Global batch, sequences."""
    precision: str = "bf16"
    """GEMM precision."""
    tokens: float = 15e12
    """Training token budget for time-to-train."""
    trials: int = 1000
    """Monte Carlo runs of the wall-time distribution."""
    seed: int = 0
    """Seed of the Monte Carlo."""
    trace: Path | None = None
    """Job trace for the scheduler comparison."""
    trace_format: str = "swf"
    """Format of ``trace`` (the scheduler layer's reader names)."""
    policies: tuple[str, ...] = DEFAULT_POLICIES
    """Scheduler policies compared."""
    infer: InferSettings | None = field(default_factory=InferSettings)
    """Serving workload of the inference section; None leaves the section out."""
    parallelism: ParallelismSpec | None = None
    """Layout of the breakdown, path and time-to-train sections on all the cluster's GPUs (``clustertwin
    report --tp ...``); None: the best fitting layout of the scaling sweep at full size."""


def escape_json(text: str) -> Markup:
    """JSON text made safe inside a ``<script>`` element (same value once parsed)."""
    return script_json(text)


def plotly_js() -> Markup:
    """plotly.js, minified, for inlining."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise SpecError("the HTML report needs plotly: pip install 'clustertwin[report]'") from None
    js = get_plotlyjs()
    if "</script" in js.lower():
        raise RuntimeError("plotly.js contains '</script' and cannot be inlined safely")
    return Markup(js)


def _optional(module: str, names: tuple[str, ...]) -> tuple[Any | None, str | None]:
    """The named functions of an optional layer, or None and why not."""
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        return None, f"{module} is not available ({e})"
    missing = [n for n in names if not hasattr(mod, n)]
    if missing:
        return None, f"{module} lacks {', '.join(missing)}"
    return mod, None


def _sched_api() -> tuple[Any | None, str | None]:
    parts = {"clustertwin.sched.readers": ("read_trace",), "clustertwin.sched.cluster": ("from_spec",),
             "clustertwin.sched.engine": ("simulate",), "clustertwin.sched.metrics": ("compute",)}
    api: dict[str, Any] = {}
    for module, names in parts.items():
        mod, why = _optional(module, names)
        if mod is None:
            return None, why
        api.update({n: getattr(mod, n) for n in names})
    return SimpleNamespace(**api), None


def build_report(cluster: ClusterSpec, model: ModelSpec, options: ReportOptions | None = None) -> Report:
    """Compute every section of the report (pure: specs and options in, typed report out)."""
    opt = options or ReportOptions()
    if opt.trace is not None and not opt.trace.is_file():
        raise SpecError("trace file not found", file=str(opt.trace))
    sections: list[Section] = [plan_section(plan(cluster))]
    omitted: list[str] = []
    res = scale(model, cluster, global_batch=opt.global_batch, precision=opt.precision)
    sections.append(scaling_section(res))
    fitted = [p.estimate for p in res.points if p.estimate is not None]
    best = fitted[-1] if fitted else None
    if opt.parallelism is not None:
        from clustertwin.train.estimate import estimate

        best = estimate(model, cluster, opt.parallelism)
    if best is None:
        omitted.append("step-time and memory breakdowns, time to train: no layout of this model fits the cluster")
    else:
        sections.append(breakdown_section(best))
        from clustertwin.report.path_view import path_section

        sections.append(path_section(model, cluster, best))
    sections.append(comm_section(cluster, cluster.total_gpus))
    if best is not None:
        rel, why = _optional("clustertwin.reliability", ("with_failures",))
        if rel is None:
            omitted.append(f"time to train with failures: {why}")
        else:
            sections.append(reliability_section(best, cluster, opt.tokens, opt.trials, opt.seed, rel))
    if opt.infer is not None:
        api, why = _optional("clustertwin.infer", ("estimate", "size", "Deployment", "steady_state"))
        if api is None:
            omitted.append(f"inference serving: {why}")
        else:
            sections.append(infer_section(model, cluster, opt.infer, api))
    if opt.trace is not None:
        api, why = _sched_api()
        if api is None:
            omitted.append(f"scheduler comparison: {why}")
        else:
            sections.append(sched_section(cluster, opt.trace, opt.trace_format, opt.policies, api))
    try:
        sections.append(hpc_section(cluster))
    except SpecError as e:
        omitted.append(f"science computing (FP64): {e}")
    c, m = cluster_label(cluster), model_label(model)
    subtitle = (f"{m} on {cluster.total_gpus:,} GPUs ({cluster.nodes:,} x {cluster.node.id or cluster.node.name}), "
                f"global batch {opt.global_batch:,}, {opt.precision}")
    return Report(title=f"{c}: cluster and training report", subtitle=subtitle,
                  generator=f"clustertwin {__version__}", sections=tuple(sections), omitted=tuple(omitted))


def _text_on_one_line(value: Any) -> Any:
    """Every plain string the template prints is one line of text (controls and Unicode line breaks become
    spaces, :func:`clustertwin.safety.one_line`); Markup (inlined scripts, figure JSON) passes unchanged."""
    return one_line(value) if isinstance(value, str) and not isinstance(value, Markup) else value


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("clustertwin.report", "templates"),
                              autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=False,
                              finalize=_text_on_one_line)


def render_html(report: Report) -> str:
    """The report as one HTML document (autoescaped; scripts and figure data inlined)."""
    figure_json = {f.id: escape_json(f.json) for s in report.sections for f in s.figures}
    template = _environment().get_template("report.html.j2")
    return template.render(report=report, figure_json=figure_json, plotly_js=plotly_js())


def write_report(report: Report, path: str | Path) -> Path:
    """Render and write the report; returns the path written."""
    out = Path(path)
    try:
        out.write_text(render_html(report), encoding="utf-8")
    except OSError as e:
        raise SpecError(f"cannot write report: {e.strerror}", file=str(out)) from None
    return out
