"""``clustertwin train estimate|search|scale``: one layout, ranked layouts, scaling curve; with
``--tokens`` also the time, GPU-hours, energy and cost to train on that many tokens."""

from __future__ import annotations

from typing import Any

import typer

from clustertwin.cli.common import (
    ClusterOpt,
    ForceCalOpt,
    JsonOpt,
    console,
    print_json,
    table,
)
from clustertwin.cli.layout_options import (
    DatasetOpt,
    GlobalBatchOpt,
    LayoutOpts,
    PlacementOpt,
    PrecOpt,
    SeqOpt,
    StackOpt,
    StrictLayoutOpt,
    command_args,
    layout_options,
)
from clustertwin.cli.train_run import (
    estimate_json,
    estimate_result,
    scale_json,
    scale_result,
    search_json,
    search_result,
    searched_note,
)
from clustertwin.errors import SpecError

train_app = typer.Typer(help="LLM training: memory, step time, layout search, scaling, time-to-train.",
                        no_args_is_help=True)

ModelOpt = typer.Option("llama3-8b", "--model", "-m", help="Model catalog id or YAML/JSON file.")
GpusOpt = typer.Option(None, "--gpus", "-g", help="GPUs to use (default: the whole cluster).")
CalOpt = typer.Option(None, "--calibration", help="Calibration file (train: overrides of TrainParams).")
TokensOpt = typer.Option(None, "--tokens", help="Token budget: adds days, GPU-hours, energy and cost.")
PriceOpt = typer.Option(0.0, "--usd-per-gpu-hour", help="GPU rental price for the cost estimate.")


def _short_layout(layout: dict[str, Any]) -> str:
    """``tp8 pp16 dp8 vpp2 mbs1 sel z1 sp`` (degrees of 1 and ep/cp/vpp of 1 left out)."""
    parts = [f"tp{layout['tp']}", f"pp{layout['pp']}", f"dp{layout['dp']}"]
    parts += [f"{k}{layout[k]}" for k in ("cp", "ep", "vpp") if layout[k] != 1]
    if layout["ep"] != 1 and layout.get("etp", layout["tp"]) != layout["tp"]:
        parts.append(f"etp{layout['etp']}")  # expert TP folded differently from TP (MoE)
    parts += [f"mbs{layout['micro_batch']}", {"none": "no-rc", "selective": "sel-rc", "full": "full-rc"}[
        layout["recompute"]], f"z{layout['zero']}"]
    if layout["sequence_parallel"]:
        parts.append("sp")
    if layout.get("moe_overlap", "auto") != "auto":
        parts.append(f"overlap:{layout['moe_overlap']}")
    if layout.get("recompute_modules"):
        parts.append("rc:" + "+".join(layout["recompute_modules"]))
    if layout.get("first_stage_layers") or layout.get("last_stage_layers"):
        parts.append(f"first{layout.get('first_stage_layers') or '-'}/last{layout.get('last_stage_layers') or '-'}")
    split = [n for n, k in (("emb", "embedding_in_split"), ("loss", "loss_in_split")) if layout.get(k)]
    if split:
        parts.append("+".join(split) + "-in-split")
    return " ".join(parts)


def _ttt_rows(ttt) -> list[list[Any]]:
    """Time-to-train rows; the cost rows say what they price (energy only unless a GPU-hour price is given)."""
    from clustertwin.facility.cost import time_to_train_cost_rows

    ramp = [["batch ramp: extra steady-step tokens", ttt.ramp_extra_tokens]] if ttt.ramp_extra_tokens else []
    return [["tokens", ttt.tokens], *ramp, ["days", ttt.days], ["GPU-hours", ttt.gpu_hours],
            [f"energy (MWh, PUE {ttt.pue:.2f})", ttt.energy_mwh],
            *time_to_train_cost_rows(ttt.energy_cost_usd, ttt.cost_usd, ttt.gpu_hours)]


def _print_estimate(e, title: str) -> None:
    plan = e.stage_plan
    rows = [["layout", " ".join(f"{k}={v}" for k, v in e.layout.items() if v is not None)],
            ["software stack", e.software_stack],
            ["stage plan (layers per stage)", f"{plan['layers_per_stage']} over {plan['stages']} stages x "
                                              f"{plan['chunks_per_stage']} chunks"],
            ["GPUs", e.gpus], ["step time (s)", e.step_time_s], ["tokens/s", e.tokens_per_s],
            ["tokens/s per GPU", e.tokens_per_s_per_gpu], ["MFU", e.mfu], ["HFU", e.hfu],
            ["model TFLOP/s per GPU", e.model_tflops_per_gpu], ["hardware TFLOP/s per GPU", e.hardware_tflops_per_gpu],
            ["memory (GiB per GPU)", e.memory_gib_per_gpu], ["fits", e.fits]]
    if not e.fits:
        rows.append(["why", e.memory.reason])
    rows.append(["placement", e.placement])
    if e.data_path is not None:
        d = e.data_path
        rows.append(["data path (GB/s delivered | needed)",
                     f"{d['delivered_gb_per_s']:.3g} | {d['demand_gb_per_s']:.3g} ({d['bottleneck']} slowest)"])
    if e.data_bottleneck:
        rows.append(["data path binds", f"{e.data_bottleneck}: GPUs wait {e.breakdown['data_stall']:.3g} s per step"])
    console.print(table(title, ["quantity", "value"], rows))
    st = e.step_time_s
    console.print(table("step time breakdown", ["term", "seconds", "share"],
                        [[k, v, f"{v / st:.1%}"] for k, v in e.breakdown.items() if v > 0]))
    mem = e.memory.breakdown
    console.print(table("memory per GPU (busiest stage)", ["term", "GiB"],
                        [[k, v] for k, v in mem.items()] + [["total", e.memory_gib_per_gpu],
                                                            ["HBM", e.memory.capacity_gib]]))


@train_app.command("estimate")
@layout_options()
def estimate_command(
    cluster: str = ClusterOpt,
    model: str = ModelOpt,
    gpus: int = GpusOpt,
    global_batch: int = GlobalBatchOpt,
    seq_len: int = SeqOpt,
    layout: dict[str, Any] = LayoutOpts,
    precision: str = PrecOpt,
    tokens: float = TokensOpt,
    usd_per_gpu_hour: float = PriceOpt,
    calibration: str = CalOpt,
    force: bool = ForceCalOpt,
    stack: str = StackOpt,
    placement: str = PlacementOpt,
    dataset: str = DatasetOpt,
    with_failures: bool = typer.Option(False, "--with-failures",
                                       help="Add failures, checkpoints and restarts to time-to-train (needs --tokens)."),
    batch_ramp: str = typer.Option(None, "--batch-ramp",
                                   help="With --tokens: the global batch rises linearly from START sequences over "
                                        "the first TOKENS tokens (START,TOKENS, e.g. 3072,469e9); time-to-train "
                                        "adds the slower small-batch steps."),
    async_checkpoint: bool = typer.Option(False, "--async-checkpoint", help="With failures: asynchronous saves."),
    hot_spares: int = typer.Option(None, "--hot-spares", help="With failures: hot-spare nodes (policy spares)."),
    trials: int = typer.Option(1000, "--trials", help="With failures: Monte Carlo trials (0 = analytical only)."),
    seed: int = typer.Option(0, "--seed", help="With failures: random seed."),
    timeline: str = typer.Option(None, "--timeline",
                                 help="Write the predicted step as a Chrome-trace/Perfetto JSON to this file."),
    strict_layout: bool = StrictLayoutOpt,
    trace_out: str = typer.Option(None, "--trace-out", help="Write three predicted steps as PyTorch-profiler "
                                  "(Kineto) traces into this folder, one rank{N}.json.gz per representative "
                                  "rank, which clustertwin profile (and HTA) read."),
    json_out: bool = JsonOpt,
) -> None:
    """Step time, MFU, throughput and memory of one layout, with breakdowns."""
    args = command_args(locals(), "json_out", "timeline", "trace_out")
    e, ttt, rel, m, c = estimate_result(**args)
    notes = []
    if timeline:
        from clustertwin.cli.train_run import write_timeline

        notes.append(write_timeline(e, m, timeline))
    if trace_out:
        from clustertwin.cli.common import load_calibration
        from clustertwin.cli.train_run import path_inputs, write_traces
        from clustertwin.profile.synth import estimate_attention_s

        attention_s = estimate_attention_s(e, m, c, load_calibration(calibration, c, force),
                                           **path_inputs(placement, dataset, c.nodes))
        notes.append(write_traces(e, m, trace_out, attention_s))
    if json_out:
        print_json(estimate_json(e, ttt, rel))
        return
    if e.searched_fields:
        console.print(searched_note(e.searched_fields), markup=False, highlight=False)
    _print_estimate(e, f"{m.name or m.id or 'model'} on {c.name or c.id or 'cluster'}")
    for note in notes:
        console.print(note, markup=False, highlight=False)
    if ttt:
        console.print(table("time to train", ["quantity", "value"], _ttt_rows(ttt)))
    if rel:
        _print_failures(rel.to_dict())


def _print_failures(f: dict[str, Any]) -> None:
    rows = [["policy", f["policy"]], ["checkpoint interval (min)", f["checkpoint_interval_s"] / 60],
            ["expected unexpected interruptions", f["unexpected_interruptions"]],
            ["expected days with failures", f["days"]], ["ETTR", f["ettr"]],
            ["GPU-hours with failures", f["gpu_hours"]]]
    if "days_p10" in f:
        rows += [["days p10 | p50 | p90", f"{f['days_p10']:.2f} | {f['days_p50']:.2f} | {f['days_p90']:.2f}"]]
    console.print(table("time to train with failures", ["quantity", "value"], rows))


@train_app.command("search")
@layout_options(searched=True)
def search_command(
    cluster: str = ClusterOpt,
    model: str = ModelOpt,
    gpus: int = GpusOpt,
    global_batch: int = GlobalBatchOpt,
    seq_len: int = SeqOpt,
    layout: dict[str, Any] = LayoutOpts,
    precision: str = PrecOpt,
    top: int = typer.Option(10, "--top", "-k", help="Layouts to list."),
    tokens: float = TokensOpt,
    usd_per_gpu_hour: float = PriceOpt,
    calibration: str = CalOpt,
    force: bool = ForceCalOpt,
    stack: str = StackOpt,
    placement: str = PlacementOpt,
    dataset: str = DatasetOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Rank every valid layout for the GPU count and global batch by throughput among those that fit."""
    res, ttt = search_result(**command_args(locals(), "json_out"))
    if json_out:
        print_json(search_json(res, ttt))
        if res.best is None:  # same exit code as the text output
            raise SpecError("no valid layout fits; see 'rejected' in the JSON")
        return
    rows = [[i + 1, _short_layout(e.layout), e.step_time_s, e.tokens_per_s, e.mfu, e.memory_gib_per_gpu] for i, e in enumerate(res.top)]
    console.print(table(f"best layouts on {res.gpus} GPUs (global batch {res.global_batch}, {res.precision}; "
                        f"{res.evaluated:,} evaluated, {res.valid:,} valid, {res.fitting:,} fit)",
                        ["#", "layout", "step (s)", "tokens/s", "MFU", "GiB/GPU"], rows))
    if res.rejected:
        console.print(table("rejected", ["reason", "layouts"],
                            [[k, int(v)] for k, v in sorted(res.rejected.items(), key=lambda kv: -kv[1])]))
    if res.best is None:
        raise SpecError(f"no layout fits: {res.no_fit_reason}; see the rejected classes above")
    if ttt:
        console.print(table("time to train (best layout)", ["quantity", "value"], _ttt_rows(ttt)))


@train_app.command("scale")
@layout_options(searched=True)
def scale_command(
    cluster: str = ClusterOpt,
    model: str = ModelOpt,
    max_gpus: int = typer.Option(None, "--gpus", "-g", help="Largest GPU count (default: the whole cluster)."),
    start_gpus: int = typer.Option(None, "--start-gpus", help="Smallest GPU count (default: one node)."),
    global_batch: int = GlobalBatchOpt,
    seq_len: int = SeqOpt,
    layout: dict[str, Any] = LayoutOpts,
    precision: str = PrecOpt,
    tokens: float = TokensOpt,
    usd_per_gpu_hour: float = PriceOpt,
    calibration: str = CalOpt,
    placement: str = PlacementOpt,
    dataset: str = DatasetOpt,
    force: bool = ForceCalOpt,
    stack: str = StackOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Throughput and scaling efficiency from one node to N GPUs, with the loss attributed to
    communication, pipeline bubble and stragglers; with ``--tokens`` the time to train at each point. The
    layout options pin fields at every GPU count (the rest is searched, as train search does)."""
    res, ttts = scale_result(**command_args(locals(), "json_out"))
    if json_out:
        print_json(scale_json(res, ttts, tokens))
        return
    from clustertwin.train.breakdown import STEP_GROUPS

    rows = []
    extra = ["days", "GPU-h"] if tokens else []
    for p, t in zip(res.points, ttts, strict=True):
        e = p.estimate
        if e is None:
            rows.append([p.gpus, *["-"] * (4 + len(STEP_GROUPS) + len(extra)), p.note])
            continue
        f = p.fractions
        rows.append([p.gpus, e.tokens_per_s, e.tokens_per_s_per_gpu, e.mfu, p.efficiency,
                     *[f"{f[g]:.0%}" for g in STEP_GROUPS], *([t.days, t.gpu_hours] if t else []),
                     _short_layout(e.layout)])
    short = {"communication": "comm", "stragglers": "strag."}
    budget = f"; time to train {tokens:,.3g} tokens" if tokens else ""
    console.print(table(f"scaling at global batch {res.global_batch} ({res.precision}{budget})",
                        ["GPUs", "tokens/s", "per GPU", "MFU", "eff.", *(short.get(g, g) for g in STEP_GROUPS),
                         *extra, "layout"], rows))
    if tokens and any(ttts):
        last = next(t for t in reversed(ttts) if t)
        console.print(table(f"time to train at {last.gpus:,} GPUs", ["quantity", "value"], _ttt_rows(last)))


def register(app: typer.Typer) -> None:
    app.add_typer(train_app, name="train")
