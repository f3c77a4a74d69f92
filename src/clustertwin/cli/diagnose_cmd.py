"""``clustertwin diagnose LOG|DIR...``: findings from job logs, kernel logs and metrics CSVs."""

from __future__ import annotations

from pathlib import Path

import typer

from clustertwin.cli.common import JsonOpt, console, print_json
from clustertwin.cli.node_cmd import findings_table
from clustertwin.ops.diagnose import diagnose


def diagnose_command(
    paths: list[Path] = typer.Argument(..., help="Log files, metrics CSVs or directories (read recursively)."),
    json_out: bool = JsonOpt,
) -> None:
    """Rules for NCCL timeouts/errors, CUDA OOM, Xid, fallen-off GPUs, IB errors, driver mismatch and
    input-pipeline stalls; findings most severe first. Exit 0 whenever it ran, whatever it found."""
    r = diagnose(paths)
    if json_out:
        print_json(r.to_dict())
        return
    console.print(f"{r.files_read} file(s), {r.lines_read} line(s) read; {len(r.findings)} finding(s)")
    if r.findings:
        console.print(findings_table(r.findings))


def register(app: typer.Typer) -> None:
    app.command("diagnose")(diagnose_command)
