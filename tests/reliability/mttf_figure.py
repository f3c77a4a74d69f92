"""The job-MTTF-vs-GPUs figure of docs/reliability.md (``python -m tests.reliability.mttf_figure`` rewrites
docs/reliability_mttf.svg; test_reliability_field checks that the file is current).

Log-log axes: for A100 (Ampere) and H100 (Hopper) the fleet model's median job MTTF and its 10th–90th
percentile band over the measured sites, the ``1 / N`` line of independent nodes (Hopper median), and the
published job MTTFs as points."""

from __future__ import annotations

import math
from pathlib import Path

from clustertwin.reliability.sites import job_mttf_curve, rate_range

SVG = Path(__file__).resolve().parents[2] / "docs" / "reliability_mttf.svg"
GPUS = [8 * 2 ** k for k in range(15)]  # 8 ... 131,072
#: published job MTTFs (hours): label, GPUs, MTTF, generation
POINTS = (
    ("RSC-1 8-GPU jobs (arXiv 2410.21680)", 8, 47.7 * 24, "ampere"),
    ("RSC-1 1,024-GPU jobs (arXiv 2410.21680)", 1024, 7.9, "ampere"),
    ("OPT-175B, 40 restarts in 16 days", 1024, 16 * 24 / 40, "ampere"),
    ("Llama 3 405B, 419 in 54 days", 16384, 54 * 24 / 419, "hopper"),
)
COLORS = {"ampere": "#1f77b4", "hopper": "#d62728"}
W, H, L, R, T, B = 820, 460, 70, 300, 20, 50
X0, X1, Y0, Y1 = math.log10(4), math.log10(2.6e5), math.log10(0.01), math.log10(1e6)


def _x(g: float) -> float:
    return L + (math.log10(g) - X0) / (X1 - X0) * (W - L - R)


def _y(h: float) -> float:
    return H - B - (math.log10(h) - Y0) / (Y1 - Y0) * (H - T - B)


def _path(pts: list[tuple[float, float]]) -> str:
    return " ".join(f"{'M' if i == 0 else 'L'}{_x(g):.1f},{_y(h):.1f}" for i, (g, h) in enumerate(pts))


def render() -> str:
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
           'font-size="11">', f'<rect width="{W}" height="{H}" fill="white"/>']
    for e in range(-2, 7):
        y = _y(10.0 ** e)
        out.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W - R}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">1e{e}</text>')
    for g in (8, 64, 512, 4096, 32768, 131072):
        x = _x(g)
        out.append(f'<line x1="{x:.1f}" y1="{T}" x2="{x:.1f}" y2="{H - B}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{H - B + 16}" text-anchor="middle">{g:,}</text>')
    out.append(f'<text x="{(L + W - R) / 2:.0f}" y="{H - 10}" text-anchor="middle">GPUs in the job</text>')
    out.append(f'<text x="16" y="{(T + H - B) / 2:.0f}" transform="rotate(-90 16 {(T + H - B) / 2:.0f})" '
               'text-anchor="middle">job MTTF (hours)</text>')
    legend = []
    for gen, arch in (("ampere", "Ampere"), ("hopper", "Hopper")):
        rows = job_mttf_curve(GPUS, 8, 8, rate_range(arch))
        c = COLORS[gen]
        band = [(r["gpus"], r["mttf_h_p10"]) for r in rows] + [(r["gpus"], r["mttf_h_p90"]) for r in rows[::-1]]
        out.append(f'<path d="{_path(band)} Z" fill="{c}" fill-opacity="0.12" stroke="none"/>')
        out.append(f'<path d="{_path([(r["gpus"], r["mttf_h"]) for r in rows])}" fill="none" stroke="{c}" '
                   'stroke-width="2"/>')
        legend.append((f"{arch} median, p10-p90 band", c, "line"))
        if gen == "hopper":
            out.append(f'<path d="{_path([(r["gpus"], r["independent_nodes_h"]) for r in rows])}" fill="none" '
                       f'stroke="{c}" stroke-dasharray="4 3"/>')
            legend.append(("Hopper, independent nodes (1/N)", c, "dash"))
    for label, g, h, gen in POINTS:
        out.append(f'<circle cx="{_x(g):.1f}" cy="{_y(h):.1f}" r="4" fill="{COLORS[gen]}" stroke="black"/>')
        legend.append((label, COLORS[gen], "point"))
    for i, (label, c, kind) in enumerate(legend):
        y = T + 14 + 18 * i
        x = W - R + 12
        if kind == "point":
            out.append(f'<circle cx="{x + 10}" cy="{y - 4}" r="4" fill="{c}" stroke="black"/>')
        else:
            dash = ' stroke-dasharray="4 3"' if kind == "dash" else ' stroke-width="2"'
            out.append(f'<line x1="{x}" y1="{y - 4}" x2="{x + 20}" y2="{y - 4}" stroke="{c}"{dash}/>')
        out.append(f'<text x="{x + 26}" y="{y}">{label}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    SVG.write_text(render(), encoding="utf-8")
