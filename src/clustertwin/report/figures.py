"""Plotly figures of the report, built from model results (pure functions: results in, figure JSON out).

Every figure uses SVG traces (``go.Scatter``/``go.Bar``, never WebGL), so it draws without a GPU and
prints as vectors. Figures are returned as JSON text (plotly's encoder) for the template to embed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clustertwin.errors import SpecError

PALETTE = ("#1f4e79", "#c55a11", "#548235", "#7f6000", "#7030a0", "#2e75b6", "#a50021", "#595959")
"""Colour-blind-safe-ish, print-friendly trace colours."""
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"


def _go():
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise SpecError("the HTML report needs plotly: pip install 'clustertwin[report]'") from None
    return go


def _layout(title: str, x_title: str, y_title: str, **kw: Any) -> dict[str, Any]:
    """Common layout. The title is not drawn by plotly: the report shows it as the figure's HTML caption, above
    the plot, so it can never run under plotly's toolbar (kept in ``meta.caption`` for other renderers). Axis
    titles use ``automargin`` so long labels push the margin instead of being clipped; the legend sits below
    the x-axis title."""
    return {"meta": {"caption": title}, "template": "plotly_white",
            "font": {"family": FONT, "size": 12}, "margin": {"l": 60, "r": 20, "t": 36, "b": 40},
            "height": 380, "colorway": list(PALETTE),
            "legend": {"orientation": "h", "x": 0.0, "y": -0.22, "yanchor": "top"},
            "xaxis": {"title": {"text": x_title}, "automargin": True},
            "yaxis": {"title": {"text": y_title}, "automargin": True}, **kw}


def nice_axis(top: float, ticks: int = 5) -> tuple[float, float]:
    """``(range_max, dtick)`` of an axis from 0 that shows ``top`` with ``ticks`` round steps (1, 2, 2.5, 5 x 10^k),
    so a second y-axis gets ticks like 0, 200, 400 ... instead of 170, 356, 543 ..."""
    if not np.isfinite(top) or top <= 0:
        return 1.0, 1.0 / ticks
    raw = top / ticks
    mag = 10.0 ** np.floor(np.log10(raw))
    step = next(m * mag for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * mag >= raw * (1 - 1e-12))
    return float(step * ticks), float(step)


def to_json(fig: Any) -> str:
    """The figure as JSON text (plotly's encoder: numpy arrays become lists)."""
    return str(fig.to_json(validate=False))


def scaling_figure(gpus: list[int], efficiency: list[float | None], tokens_per_s_per_gpu: list[float | None]) -> str:
    """Scaling efficiency and per-GPU throughput against GPU count (log2 axis)."""
    go = _go()
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=gpus, y=efficiency, mode="lines+markers", name="scaling efficiency"))
    fig.add_trace(go.Scatter(x=gpus, y=tokens_per_s_per_gpu, mode="lines+markers", name="tokens/s per GPU",
                             yaxis="y2"))
    # both axes get TICKS round steps from 0, so their grid lines coincide and the right axis reads 0, 500, 1,000
    ticks = 5
    eff_top, eff_step = nice_axis(max([e for e in efficiency if e is not None] or [1.0]), ticks)
    tok_top, tok_step = nice_axis(max([t for t in tokens_per_s_per_gpu if t is not None] or [1.0]), ticks)
    fig.update_layout(**_layout("Scaling efficiency", "GPUs", "scaling efficiency",
                                yaxis2={"title": {"text": "tokens/s per GPU"}, "overlaying": "y", "side": "right",
                                        "range": [0, tok_top], "dtick": tok_step, "tick0": 0, "showgrid": False,
                                        "tickformat": ",~r", "automargin": True}))
    fig.update_xaxes(type="log", dtick=np.log10(2), tickformat=",d")
    fig.layout.yaxis.update(range=[0, eff_top], dtick=eff_step, tick0=0)
    return to_json(fig)


def losses_figure(gpus: list[int], fractions: dict[str, list[float]]) -> str:
    """Stacked bars: share of the step spent in compute, communication, bubble and imbalance per GPU count."""
    go = _go()
    fig = go.Figure()
    labels = [f"{g:,}" for g in gpus]
    for name, values in fractions.items():
        fig.add_trace(go.Bar(x=labels, y=values, name=name))
    fig.update_layout(**_layout("Where the step time goes", "GPUs", "share of step time", barmode="stack"))
    fig.update_yaxes(tickformat=".0%", range=[0, 1])
    return to_json(fig)


def breakdown_figure(title: str, terms: dict[str, float], unit: str, capacity: float | None = None) -> str:
    """Horizontal bars of a breakdown (step-time terms in s, memory terms in GiB), optional capacity line."""
    go = _go()
    names = list(terms)
    fig = go.Figure(go.Bar(x=[terms[k] for k in names], y=names, orientation="h", name=unit,
                           marker={"color": PALETTE[0]}))
    fig.update_layout(**_layout(title, unit, "", showlegend=False))
    fig.update_yaxes(autorange="reversed")
    if capacity is not None:
        fig.add_vline(x=capacity, line={"color": PALETTE[6], "dash": "dash"},
                      annotation={"text": f"HBM {capacity:.0f}", "showarrow": False})
    return to_json(fig)


def bandwidth_figure(sizes_bytes: np.ndarray, busbw: dict[str, np.ndarray], gpus: int) -> str:
    """Bus bandwidth against message size for several collectives (log-log)."""
    go = _go()
    fig = go.Figure()
    for op, bw in busbw.items():
        fig.add_trace(go.Scatter(x=np.asarray(sizes_bytes), y=np.asarray(bw), mode="lines+markers", name=op))
    fig.update_layout(**_layout(f"Collective bus bandwidth on {gpus:,} GPUs", "message size, bytes",
                                "busbw, GB/s"))
    fig.update_xaxes(type="log", exponentformat="SI")
    return to_json(fig)


def histogram_figure(wall_days: np.ndarray, ideal_days: float, expected_days: float) -> str:
    """Histogram of Monte Carlo wall times with the failure-free and expected wall times marked."""
    go = _go()
    fig = go.Figure(go.Histogram(x=np.asarray(wall_days), nbinsx=40, name="Monte Carlo trials",
                                 marker={"color": PALETTE[0]}))
    fig.update_layout(**_layout("Wall time to train, with failures", "days", "trials", showlegend=False,
                                bargap=0.02))
    fig.add_vline(x=ideal_days, line={"color": PALETTE[2], "dash": "dot"},
                  annotation={"text": "failure-free", "showarrow": False, "yanchor": "bottom"})
    fig.add_vline(x=expected_days, line={"color": PALETTE[6], "dash": "dash"},
                  annotation={"text": "expected", "showarrow": False, "yanchor": "top"})
    return to_json(fig)


def grouped_bars_figure(title: str, categories: list[str], series: dict[str, list[float]], y_title: str) -> str:
    """Grouped bars (one group per category, one bar per series), e.g. scheduler metrics by policy."""
    go = _go()
    fig = go.Figure()
    for name, values in series.items():
        fig.add_trace(go.Bar(x=categories, y=values, name=name))
    fig.update_layout(**_layout(title, "", y_title, barmode="group"))
    return to_json(fig)


def curves_figure(title: str, x_title: str, y_title: str, series: dict[str, tuple[list[float], list[float]]],
                  log_x: bool = False, log_y: bool = False) -> str:
    """One line per series (``name -> (x, y)``), e.g. decode throughput against batch per TP degree."""
    go = _go()
    fig = go.Figure()
    for name, (x, y) in series.items():
        fig.add_trace(go.Scatter(x=list(x), y=list(y), mode="lines+markers", name=name, marker={"size": 5}))
    fig.update_layout(**_layout(title, x_title, y_title))
    if log_x:
        fig.update_xaxes(type="log")
    if log_y:
        fig.update_yaxes(type="log")
    else:
        fig.update_yaxes(rangemode="tozero")
    return to_json(fig)
