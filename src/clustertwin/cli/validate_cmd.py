"""``clustertwin validate [CASE...]``: predictions vs measured cases (default: the shipped validation/ folder)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import Progress

from clustertwin import validate as validation
from clustertwin.cli.common import JsonOpt, console, print_json, table


def validate_command(
    paths: list[Path] = typer.Argument(None, help="Case files or directories of *.yaml case files "
                                                  "(default: the shipped validation/ folder)."),
    kind: list[str] = typer.Option([], "--kind", "-k", help="Only cases of this kind (repeatable)."),
    show_cases: bool = typer.Option(False, "--cases", help="List every case, not only the summary."),
    json_out: bool = JsonOpt,
) -> None:
    """Evaluate measured cases (collective, train, train_run, infer, reliability) and report errors."""
    kinds = set(kind) or None
    paths = list(paths or validation.default_paths())
    if json_out or not console.is_terminal:
        out = validation.run(paths, kinds)
    else:
        with Progress(transient=True, console=console) as prog:
            task = prog.add_task("evaluating cases", total=None)
            out = validation.run(paths, kinds, progress=lambda n: prog.update(task, completed=n))
    results = out.pop("_results")
    if json_out:
        print_json(validate_json(out))
        return
    if show_cases or len(results) <= 40:
        rows = []
        for r in results:
            if r.error:
                rows.append([r.id, r.kind, "-", "-", "-", f"error: {r.error}"])
                continue
            for k, m in r.measured.items():
                rows.append([r.id, r.kind, k, m, r.predicted.get(k), f"{r.rel_error[k]:+.1%}"])
        console.print(table("cases", ["id", "kind", "key", "measured", "predicted", "error"], rows))
    s = out["summary"]
    if len(s.get("by_file", {})) > 1:
        rows = [[f, v["count"], v["failed"], _pct(v["median_abs_rel_error"]), _pct(v["mean_abs_rel_error"]),
                 _pct(v["max_abs_rel_error"])] for f, v in s["by_file"].items()]
        console.print(table("by file (|relative error|)", ["file", "cases", "failed", "median", "mean", "max"], rows))
    rows = [[k, v["count"], v["failed"], _pct(v["median_abs_rel_error"]), _pct(v["mean_abs_rel_error"]),
             _pct(v["max_abs_rel_error"])] for k, v in s["by_kind"].items()]
    rows.append(["all", s["count"], s["failed"], _pct(s["median_abs_rel_error"]), _pct(s["mean_abs_rel_error"]),
                 _pct(s["max_abs_rel_error"])])
    console.print(table("summary (|relative error|)", ["kind", "cases", "failed", "median", "mean", "max"], rows))
    if s["skipped"]:  # cases left out by --kind: counted, never dropped silently
        by_kind = ", ".join(f"{k} {n}" for k, n in s["skipped_by_kind"].items())
        console.print(f"skipped {s['skipped']} case(s) of other kinds (--kind {','.join(sorted(kinds or ()))}): "
                      f"{by_kind}", markup=False, highlight=False)


def validate_json(out: dict) -> dict:
    """``clustertwin validate --json`` of :func:`clustertwin.validate.run`'s result (``_results`` taken out):
    the summary and the cases (shared with the web API)."""
    return {k: v for k, v in out.items() if k != "_results"}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def register(app: typer.Typer) -> None:
    app.command("validate")(validate_command)
