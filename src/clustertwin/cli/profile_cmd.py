"""``clustertwin profile TRACE...``: measured steps from PyTorch profiler (Kineto) traces and Nsight Systems
SQLite exports, per rank and per step, in the twin's terms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from clustertwin.cli.common import ClusterOpt, JsonOpt, console, print_json, table
from clustertwin.cli.layout_options import (
    LayoutOpts,
    PrecOpt,
    SeqOpt,
    StackOpt,
    layout_options,
)
from clustertwin.profile.classify import COMM_KINDS, COMPUTE_KEYS
from clustertwin.profile.kineto import streaming_available

MS = 1e3


def _ms(v: float | None) -> float | None:
    return None if v is None else v * MS


def _step_rows(rep: Any) -> list[list[Any]]:
    rows = []
    for r in rep.ranks:
        for s in r.steps:
            rows.append([r.label(), s["step"], _ms(s["wall_s"]), _ms(s["gpu_busy_s"]), _ms(s["compute_s"]),
                         _ms(s["comm_s"]), _ms(s["exposed_comm_s"]), _ms(s["idle_s"]), _ms(s["memcpy_s"]),
                         s["partial"] or ""])
    return rows


def _idle_rows(rep: Any) -> tuple[list[str], list[list[Any]]]:
    kinds = [k for k in COMM_KINDS if any(k in s["exposed_comm_by_kind_s"] for r in rep.ranks for s in r.steps)]
    cols = ["rank", "step", "host-bound", "data wait", "rank wait", *(f"exposed {k}" for k in kinds)]
    rows = []
    for r in rep.ranks:
        for s in r.steps:
            rows.append([r.label(), s["step"], _ms(s["host_bound_s"]), _ms(s["data_wait_s"]), _ms(s["rank_wait_s"]),
                         *(_ms(s["exposed_comm_by_kind_s"].get(k, 0.0)) for k in kinds)])
    return cols, rows


def _mean(steps: list[dict[str, Any]], get: Any) -> float:
    full = [s for s in steps if not s["partial"]] or steps
    return sum(get(s) for s in full) / len(full) if full else 0.0


CLASS_LABEL = {"norm_elementwise": "norm/elem"}


def _class_rows(rep: Any) -> tuple[list[str], list[list[Any]]]:
    cols = ["rank", *(CLASS_LABEL.get(k, k) for k in COMPUTE_KEYS)]
    rows = []
    for r in rep.ranks:
        rows.append([r.label(), *(_ms(_mean(r.steps, lambda s, k=k: s["compute_by_class_s"][k]))
                                  for k in COMPUTE_KEYS)])
    return cols, rows


def _coll_rows(rep: Any) -> list[list[Any]]:
    rows = []
    for r in rep.ranks:
        kinds = sorted({k for s in r.steps for k in s["collectives"]})
        for k in kinds:
            calls = [s["collectives"].get(k, {"count": 0, "bytes": 0}) for s in r.steps]
            rows.append([r.label(), k, "/".join(str(c["count"]) for c in calls),
                         "/".join(str(c["bytes"]) for c in calls)])
    return rows


def _print(rep: Any) -> None:
    console.print(table("per rank and step, ms", ["rank", "step", "wall", "busy", "compute", "comm", "exposed",
                                                 "idle", "memcpy", "note"], _step_rows(rep)))
    cols, rows = _idle_rows(rep)
    console.print(table("idle split and exposed comm by group, ms", cols, rows))
    cols, rows = _class_rows(rep)
    console.print(table("compute by kernel class, ms (mean of the complete steps)", cols, rows))
    coll = _coll_rows(rep)
    if coll:
        console.print(table("collectives per step (calls, bytes; one value per step)",
                            ["rank", "group", "calls", "bytes"], coll))
    if rep.skew:
        console.print(table("skew between ranks, ms", ["step", "ranks", "wall spread", "compute spread",
                                                        "end spread", "slowest rank"],
                            [[s["step"], s["ranks"], _ms(s["wall_spread_s"]), _ms(s["compute_spread_s"]),
                              _ms(s["end_spread_s"]), s["slowest_rank"]] for s in rep.skew]))
    for r in rep.ranks:
        if r.hta:
            h = r.hta
            ov = "-" if h["comm_comp_overlap"] is None else f"{100 * h['comm_comp_overlap']:.2f}%"
            console.print(f"{r.label()}: HTA temporal breakdown compute {100 * h['compute_share']:.2f}%, "
                          f"non-compute {100 * h['non_compute_share']:.2f}%, idle {100 * h['idle_share']:.2f}%; "
                          f"comm-comp overlap {ov}")
    modes = {r.label() for r in rep.ranks if r.cpu_mode}
    if modes:
        console.print(f"{len(modes)} CPU-only trace(s): the host threads' operators stand for the device")
    events = sum(r.events for r in rep.ranks)
    skipped = sum(rep.damage.values())
    line = f"{len(rep.ranks)} file(s), {events:,} events read"
    if skipped:
        line += "; skipped or damaged: " + "; ".join(f"{c} x{n}" for c, n in sorted(rep.damage.items()))
    console.print(line)
    if not streaming_available():
        console.print("ijson not installed: each file was read whole with json (pip install 'clustertwin[profile]' "
                      "to stream large traces)")


def _compare(rep: Any, reference: dict[str, float], against: str, gpus: int | None, json_out: bool) -> None:
    """Print measured against ``reference`` (the twin's prediction or a baseline trace's terms) per step
    term, and the sentence naming the largest gap."""
    from clustertwin.profile.compare import compare_terms, measured_breakdown

    rows, sentence = compare_terms(measured_breakdown(rep), reference, reference_name=against)
    if json_out:
        print_json({"against": against, "gpus": gpus, "rows": [vars(r) for r in rows], "largest_gap": sentence})
        return
    console.print(table(f"measured vs {against} per step term, ms", ["term", "measured", against, "gap", "gap %"],
                        [[r.term, _ms(r.measured_s), _ms(r.predicted_s), _ms(r.gap_s), 100 * r.gap_share]
                         for r in rows]))
    console.print(sentence)


@layout_options()
def profile_command(
    traces: list[Path] = typer.Argument(..., help="Kineto .json/.json.gz files (one per rank), Nsight Systems "
                                        ".sqlite exports, or folders of them."),
    step_range: str = typer.Option(None, "--step-range",
                                   help="Use annotations / NVTX ranges whose name starts with NAME as the steps "
                                        "(default: ProfilerStep#N)."),
    json_out: bool = JsonOpt,
    compare: bool = typer.Option(False, "--compare", help="Print measured against the twin's predicted step per "
                                 "term (needs --model and --global-batch), or against --baseline's traces."),
    baseline: list[Path] = typer.Option(None, "--baseline", help="With --compare: traces of a reference run "
                                        "(the same job before a change) to compare against instead of the twin."),
    cluster: str = ClusterOpt,
    model: str = typer.Option(None, "--model", "-m", help="Model catalog id or YAML/JSON file (--compare)."),
    global_batch: int = typer.Option(None, "--global-batch", "-b", help="Sequences per optimizer step (--compare)."),
    seq_len: int | None = SeqOpt,
    precision: str = PrecOpt,
    layout: dict[str, Any] = LayoutOpts,
    stack: str = StackOpt,
    calibration: str = typer.Option(None, "--calibration", help="Calibration file (train: overrides of "
                                    "TrainParams) for the prediction."),
    dataset: str = typer.Option("none", "--dataset", help="What the predicted job reads (a dataset of train "
                                "estimate's --dataset; default none: no data-loading term)."),
) -> None:
    """Per rank and per step: wall, GPU busy, compute by kernel class, communication by process-group kind
    (exposed and overlapped), idle (host-bound, data wait, rank wait), memcpy; skew between ranks; HTA's
    temporal breakdown and comm-comp overlap. Damaged files and unknown events are counted, never fatal.
    With --compare: measured against predicted (or a baseline run) per term, the largest gap named."""
    from clustertwin.profile.report import profile

    rep = profile(traces, step_range=step_range)
    if not compare:
        if json_out:
            print_json(rep.to_dict())
        else:
            _print(rep)
        return
    if baseline:
        from clustertwin.profile.compare import measured_breakdown

        _compare(rep, measured_breakdown(profile(baseline, step_range=step_range)), "baseline", None, json_out)
        return
    from clustertwin.cli.traced_job import traced_job

    job = traced_job(rep, cluster=cluster, model=model, global_batch=global_batch, seq_len=seq_len,
                     calibration=calibration, dataset=dataset, what="profile --compare (or --baseline TRACE)",
                     layout=layout, precision=precision, stack=stack)
    _compare(rep, job.estimate().breakdown, "predicted", job.gpus, json_out)


def register(app: typer.Typer) -> None:
    app.command("profile")(profile_command)
