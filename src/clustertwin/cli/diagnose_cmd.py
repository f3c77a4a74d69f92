"""``clustertwin diagnose LOG|DIR...``: findings from job logs, kernel logs and metrics CSVs; with the job's
model, cluster and layout, CUDA OOM advice from the training memory model."""

from __future__ import annotations

from pathlib import Path

import typer

from clustertwin.cli.common import JsonOpt, console, load_cluster, load_model, print_json
from clustertwin.cli.node_cmd import findings_table
from clustertwin.errors import SpecError
from clustertwin.ops.diagnosis.diagnose import diagnose
from clustertwin.ops.diagnosis.oom_advice import JobContext
from clustertwin.ops.findings import Finding, sort_findings


def job_context(model: str | None, cluster: str | None, layout: str | None, global_batch: int | None,
                seq_len: int | None) -> JobContext | None:
    """The job description from the flags: None when none of them is given; SpecError when only some are."""
    given = {"--model": model, "--cluster": cluster, "--layout": layout, "--global-batch": global_batch}
    if all(v is None for v in given.values()) and seq_len is None:
        return None
    if model is None or cluster is None or layout is None or global_batch is None:
        missing = [k for k, v in given.items() if v is None]
        raise SpecError(f"model-based OOM advice needs --model, --cluster, --layout and --global-batch; "
                        f"missing {', '.join(missing)}")
    return JobContext.build(load_model(model), load_cluster(cluster), layout, global_batch, seq_len)


def diagnose_command(
    paths: list[Path] = typer.Argument(..., help="Log files, metrics CSVs or directories (read recursively)."),
    model: str = typer.Option(None, "--model", "-m", help="OOM advice: the job's model (catalog id or file)."),
    cluster: str = typer.Option(None, "--cluster", "-c", help="OOM advice: the job's cluster (catalog id or file)."),
    layout: str = typer.Option(None, "--layout",
                               help="OOM advice: the job's layout, e.g. "
                                    "'tp=8,pp=4,dp=32,micro_batch=2,recompute=none,zero=1'."),
    global_batch: int = typer.Option(None, "--global-batch", "-b", help="OOM advice: sequences per step."),
    seq_len: int = typer.Option(None, "--seq-len", "-s", help="OOM advice: sequence length (default: the model's)."),
    counters: tuple[Path, Path] | None = typer.Option(
        None, "--counters", help="BEFORE AFTER: two saved 'ethtool -S IFACE' or 'perfquery -x' outputs of one port; "
        "NCCL network symptoms are joined with that port's counter rates."),
    port: str = typer.Option(None, "--port", help="Name of the port the counters belong to (default: from the "
                             "perfquery header or the AFTER file's name)."),
    interval_s: float = typer.Option(60.0, "--interval-s", help="Seconds between the BEFORE and AFTER samples."),
    json_out: bool = JsonOpt,
) -> None:
    """Rules for NCCL timeouts/errors, CUDA OOM, Xid, fallen-off GPUs, IB errors, driver mismatch and
    input-pipeline stalls; findings most severe first. With --model, --cluster, --layout and --global-batch
    a CUDA OOM gets the memory model's prediction and the layout changes that fit. With --counters BEFORE
    AFTER, NCCL's network errors are joined with the port's counter rates ("packet loss / congestion on
    port X"). Exit 0 whenever it ran, whatever it found."""
    job = job_context(model, cluster, layout, global_batch, seq_len)
    r = diagnose(paths, job)
    if counters is not None:
        from clustertwin.ops.health.netloss import network_diagnosis

        extra, bad = network_diagnosis(paths, counters[0], counters[1], port, interval_s)
        if bad:
            extra.append(Finding("info", "MALFORMED_LINES", f"{bad} malformed counter line(s) skipped", (),
                                 "check the counter files for truncated lines"))
        r.findings = sort_findings(extra + r.findings)
    elif port is not None:
        raise SpecError("--port names the port of --counters BEFORE AFTER; give --counters too")
    if json_out:
        print_json(r.to_dict())
        return
    skipped = f", {r.files_skipped} file(s) not read" if r.files_skipped else ""  # counted, never silent
    console.print(f"{r.files_read} file(s), {r.lines_read} line(s) read{skipped}; {len(r.findings)} finding(s)")
    if r.findings:
        console.print(findings_table(r.findings))


def register(app: typer.Typer) -> None:
    app.command("diagnose")(diagnose_command)
