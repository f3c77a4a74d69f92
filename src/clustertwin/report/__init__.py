"""Self-contained HTML reports with interactive plots (plotly, inlined). See docs/report.md."""

from clustertwin.report.html import ReportOptions, build_report, escape_json, render_html, write_report
from clustertwin.report.sections import Figure, InferSettings, Report, Section, Table

__all__ = [
    "Figure",
    "InferSettings",
    "Report",
    "ReportOptions",
    "Section",
    "Table",
    "build_report",
    "escape_json",
    "render_html",
    "write_report",
]
