"""``clustertwin sched simulate|fill``: replay a job trace under scheduling policies; fill a cluster with a
trace's task mix to compare placements' unallocated GPUs."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import typer

from clustertwin.cli.common import DEFAULT_CLUSTER, JsonOpt, load_cluster, print_json, table
from clustertwin.cli.progress import LazyProgress
from clustertwin.cli.sched_common import check_finite, checked_names, output_console, read_jobs, split_list
from clustertwin.errors import SpecError
from clustertwin.sched import cluster as sched_cluster
from clustertwin.sched import engine, failures, fill, metrics, readers
from clustertwin.sched.placement import PLACEMENTS
from clustertwin.sched.placement_net import ALL_PLACEMENTS
from clustertwin.units import HOUR_S

sched_app = typer.Typer(help="Cluster scheduler simulator: replay GPU job traces under policies.",
                        no_args_is_help=True)

_METRIC_COLUMNS = [
    ("util", "gpu_utilization"), ("avg queue s", "avg_queue_s"), ("p50 queue s", "median_queue_s"),
    ("p99 queue s", "p99_queue_s"), ("avg JCT s", "avg_jct_s"), ("bsld", "bounded_slowdown"),
    ("frag GPUs", "fragmented_gpus"), ("multi-leaf", "multi_leaf_jobs"), ("done", "completed"),
    ("killed", "killed"), ("queued", "queued"), ("requeued", "requeued"),
]


def _cluster(cluster: str, node_list: Path | None, nodes_per_leaf: int | None) -> sched_cluster.SchedCluster:
    if node_list is not None:
        return sched_cluster.from_node_list(
            node_list,
            nodes_per_leaf=sched_cluster.DEFAULT_NODES_PER_LEAF if nodes_per_leaf is None else nodes_per_leaf)
    return sched_cluster.from_spec(load_cluster(cluster), nodes_per_leaf)


def simulate_command(
    trace: Path | None = typer.Option(None, "--trace", "-t", help="Trace file (or synthetic parameters YAML)."),
    fmt: str | None = typer.Option(None, "--format", "-f", help=f"Trace format: {', '.join(readers.FORMATS)}."),
    workload: Path | None = typer.Option(None, "--workload", "-w", help="Workload mix YAML (jobs with a body: "
                                         "model, GPUs, batch, duration); replaces --trace."),
    network: str = typer.Option("ideal", "--network", help="With --workload: ideal, or contention (jobs share "
                                "the fabric's links, max-min fair)."),
    routing: str = typer.Option("ecmp", "--routing", help="With --network contention: ecmp (hash collisions) "
                                "or adaptive."),
    cluster: str = typer.Option(DEFAULT_CLUSTER, "--cluster", "-c", help="Cluster catalog id or YAML/JSON file."),
    node_list: Path | None = typer.Option(None, "--node-list", help="Build the cluster from a trace node list "
                                                                     "(PAI 2023 openb_node_list_*.csv)."),
    policy: str = typer.Option("fifo,backfill", "--policy", "-p",
                               help=f"Comma-separated policies: {', '.join(engine.POLICIES)}."),
    placement: str = typer.Option("first-fit", "--placement",
                                  help=f"Comma-separated placements: {', '.join(ALL_PLACEMENTS)}."),
    backfill_window: int = typer.Option(engine.DEFAULT_BACKFILL_WINDOW, "--backfill-window",
                                        help="Queued jobs backfill considers per pass."),
    nodes_per_leaf: int | None = typer.Option(None, "--nodes-per-leaf", help="Nodes per leaf switch "
                                              "(default: from the topology, else 32)."),
    mtbf_h: float | None = typer.Option(None, "--node-mtbf-h", help="Inject node failures with this per-node "
                                        "MTBF (hours, exponential)."),
    mttr_h: float = typer.Option(failures.DEFAULT_NODE_MTTR_H, "--node-mttr-h", help="Mean repair time (h)."),
    reliability_failures: bool = typer.Option(False, "--failures-from-reliability",
                                              help="Inject node failures at the reliability model's "
                                                   "per-node rate (Llama 3 calibration)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the failure generator (with --workload also of the "
                             "job draw and the random placement)."),
    max_jobs: int | None = typer.Option(None, "--max-jobs", help="Replay only the first N jobs (a synthetic "
                                        "spec above the job cap generates only N <= the cap)."),
    max_requeues: int = typer.Option(engine.MAX_REQUEUES_DEFAULT, "--max-requeues",
                                     help="Stop with a message after this many requeue events."),
    max_failure_events: int = typer.Option(failures.MAX_FAILURE_EVENTS, "--max-failure-events",
                                           help="Refuse to generate more node failures than this."),
    compress: float = typer.Option(1.0, "--compress", help="Divide submit times by this factor (runtimes "
                                   "unchanged): the same jobs at F times the offered load."),
    timeline: Path | None = typer.Option(None, "--timeline", help="Write utilisation over time to this CSV."),
    show_jobs: bool = typer.Option(False, "--jobs", help="Include per-job records (with their nodes) in the JSON "
                                   "output."),
    sensor: Path | None = typer.Option(None, "--sensor", help="PAI 2020 sensor table: each task's own GPU "
                                       "utilisation for work utilisation."),
    strict: bool = typer.Option(False, "--strict", help="Malformed trace lines are fatal."),
    json_out: bool = JsonOpt,
) -> None:
    """Replay a job trace under one or more policies and placements, side by side."""
    pols = [engine.get_policy(p) for p in checked_names(policy, engine.POLICIES, "policy")]
    places = checked_names(placement, ALL_PLACEMENTS, "placement")
    check_finite(mtbf_h, "--node-mtbf-h")
    check_finite(mttr_h, "--node-mttr-h")
    if workload is not None:
        from clustertwin.cli.sched_cosim_cmd import run_workload

        if node_list is not None:
            raise SpecError("--workload runs on --cluster's nodes: give --cluster, not --node-list")
        if trace is not None and fmt is None:
            raise SpecError("--trace needs --format")
        run_workload(workload, cluster, [p.name for p in pols], places, network, routing, seed, max_jobs, mtbf_h,
                     mttr_h, reliability_failures, max_failure_events, json_out,
                     trace=(trace, fmt, strict) if trace is not None else None)
        return
    if trace is None or fmt is None:
        raise SpecError("sched simulate needs --trace and --format, or --workload")
    if network != "ideal":
        raise SpecError("--network contention needs --workload (a trace's jobs get their bodies from the mix: "
                        "--trace T --format F --workload MIX)")
    if max_requeues < 0:
        raise SpecError("--max-requeues must be >= 0")
    check_finite(compress, "--compress")
    cl = _cluster(cluster, node_list, nodes_per_leaf)
    jobs, report = read_jobs(trace, fmt, strict, cl, max_jobs, sensor)
    if len(jobs) == 0:
        raise SpecError(f"no jobs to replay in {trace} ({report.malformed} malformed lines, "
                        f"excluded: {dict(report.excluded)})")
    if compress != 1.0:
        from dataclasses import replace

        jobs = replace(jobs, submit_s=jobs.submit_s / compress)
    fail = None
    mtbf_desc = None
    if mtbf_h is not None and reliability_failures:
        raise SpecError("give --node-mtbf-h or --failures-from-reliability, not both")
    if mtbf_h is not None or reliability_failures:
        horizon = float(jobs.submit_s[-1] + jobs.limit_s.max())
        mtbf = failures.reliability_node_mtbf_h(cl.gpus) if reliability_failures else mtbf_h
        mtbf_desc = "reliability model" if reliability_failures else f"{mtbf_h:g} h"
        fail = failures.exponential_failures(cl.nodes, horizon, mtbf_h=mtbf, mttr_h=mttr_h, seed=seed,
                                             max_events=max_failure_events)
    runs = [(p, pl) for p in pols for pl in places]
    results = []
    with LazyProgress() as bar:  # stderr, once a replay takes over a second (cli/progress.py)
        for p, pl in runs:
            results.append(engine.simulate(cl, jobs, p, placement=pl, failures=fail,
                                           backfill_window=backfill_window, max_requeues=max_requeues,
                                           progress=bar.task(f"{p.name} / {pl}", len(jobs)),
                                           record_allocations=show_jobs))
    out = []
    for res in results:
        m = metrics.compute(res, skipped_lines=report.malformed)
        entry = {"policy": res.policy, "placement": res.placement, "metrics": m.to_dict()}
        if show_jobs:
            entry["jobs"] = metrics.job_records(res)
        out.append(entry)
    if timeline is not None:
        _write_timeline(timeline, results)
    doc = {"cluster": cl.to_dict(), "trace": report.to_dict(),
           "failures": None if fail is None else {"events": len(fail), "mtbf": mtbf_desc, "mttr_h": mttr_h},
           "policies": out}
    if json_out:
        print_json(doc)
        return
    out_console = output_console()
    out_console.print(f"{cl.summary()}; "
                  f"trace {report.format}: {len(jobs):,} jobs, {report.malformed} malformed lines skipped, "
                  f"excluded {dict(report.excluded) or 'none'}")
    for ex in report.malformed_examples:
        out_console.print(f"  skipped {ex}")
    if report.utilisation is not None:
        u = report.utilisation
        out_console.print(f"GPU utilisation from {u['path']}: {u['lines']:,} worker rows, {u['tasks_measured']:,} "
                          f"tasks measured, {u['jobs_with_util']:,} of {len(jobs):,} jobs joined, "
                          f"{u['skipped_lines']} malformed rows skipped, excluded {u['excluded'] or 'none'}")
    rows = [[e["policy"], e["placement"], *[e["metrics"][k] for _, k in _METRIC_COLUMNS]] for e in out]
    out_console.print(table("scheduling policies", ["policy", "placement", *[h for h, _ in _METRIC_COLUMNS]], rows))
    for e in out:
        causes = e["metrics"]["unschedulable_by_cause"]
        if causes:
            out_console.print(f"{e['policy']} / {e['placement']}: unschedulable jobs by cause: {causes}")
            break
    if fail is not None:
        out_console.print(f"node failures injected: {len(fail)} (MTBF {mtbf_desc}, MTTR {mttr_h:g} h); "
                      f"span {float(jobs.submit_s[-1]) / HOUR_S:,.1f} h of submissions")


def _write_timeline(path: Path, results: list[engine.SimResult]) -> None:
    try:
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["policy", "placement", "time_s", "allocated_gpus", "utilization", "running_jobs",
                        "queued_jobs", "fragmented_gpus"])
            for res in results:
                for row in metrics.timeline_rows(res):
                    w.writerow([res.policy, res.placement, *[f"{v:.6g}" if isinstance(v, float) else v
                                                             for v in row]])
    except OSError as e:
        raise SpecError(f"cannot write timeline: {e.strerror}", file=str(path)) from None


def fill_command(
    trace: Path = typer.Option(..., "--trace", "-t", help="Trace file."),
    fmt: str = typer.Option(..., "--format", "-f", help=f"Trace format: {', '.join(readers.FORMATS)}."),
    cluster: str = typer.Option(DEFAULT_CLUSTER, "--cluster", "-c", help="Cluster catalog id or YAML/JSON file."),
    node_list: Path | None = typer.Option(None, "--node-list", help="Cluster from a trace node list."),
    placement: str = typer.Option("first-fit,best-fit,fgd", "--placement",
                                  help=f"Comma-separated placements: {', '.join(PLACEMENTS)}."),
    loads: str = typer.Option(",".join(f"{x:g}" for x in fill.DEFAULT_LOADS), "--loads",
                              help="Arrived GPU demand as fractions of capacity to report at."),
    seed: int = typer.Option(0, "--seed", help="Seed of the arrival sample."),
    nodes_per_leaf: int | None = typer.Option(None, "--nodes-per-leaf", help="Nodes per leaf switch."),
    strict: bool = typer.Option(False, "--strict", help="Malformed trace lines are fatal."),
    json_out: bool = JsonOpt,
) -> None:
    """Fill the cluster with tasks sampled from the trace (no departures) and report unallocated GPUs."""
    import math

    places = checked_names(placement, PLACEMENTS, "placement")
    try:
        load_list = [float(x) for x in split_list(loads)]
    except ValueError:
        raise SpecError(f"--loads '{loads}' must be comma-separated numbers") from None
    if not load_list or any(not math.isfinite(x) or not 0 < x <= fill.MAX_LOAD for x in load_list):
        raise SpecError(f"--loads '{loads}' must be comma-separated fractions of capacity in (0, {fill.MAX_LOAD:g}]")
    cl = _cluster(cluster, node_list, nodes_per_leaf)
    jobs, report = read_jobs(trace, fmt, strict, cl, None)
    results = []
    with LazyProgress() as bar:
        for pl in places:
            results.append(fill.fill(cl, jobs, pl, loads=load_list, seed=seed,
                                     progress=bar.task(f"fill / {pl}", None)))
    if json_out:
        print_json({"cluster": cl.to_dict(), "trace": report.to_dict(), "seed": seed,
                    "placements": [r.to_dict() for r in results]})
        return
    cols = [f"{x:.0%} load" for x in results[0].loads]
    rows = [[r.placement, *r.unallocated_gpus] for r in results]
    output_console().print(table(f"unallocated GPUs of {cl.total_gpus:,} after filling with {report.format} tasks "
                        f"(seed {seed}){cl.skipped_note()}", ["placement", *cols], rows))


def crosscheck_command(
    jobs: int = typer.Option(32, "--jobs", help="Sleep jobs in the trace (>= 30 for the CI check)."),
    nodes: int = typer.Option(4, "--nodes", help="Virtual Slurm nodes."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GRES GPUs per virtual node."),
    seed: int = typer.Option(1, "--seed", help="Seed of the trace."),
    mixed: bool = typer.Option(False, "--mixed-sizes", help="Quarter/half-node jobs too (placement matters)."),
    placement: str = typer.Option("best-fit", "--placement", help=f"Simulator placement: {', '.join(PLACEMENTS)}."),
    show_jobs: bool = typer.Option(False, "--jobs-table", help="Print every job's Slurm and simulated start."),
    json_out: bool = JsonOpt,
) -> None:
    """Run a short sleep-job trace on a local multi-node Slurm and compare with the simulator's EASY backfill."""
    from clustertwin.sched import crosscheck, slurm_local

    if placement not in PLACEMENTS:
        raise SpecError(f"unknown placement '{placement}'; choose from {', '.join(PLACEMENTS)}")
    if not 1 <= jobs <= crosscheck.MAX_JOBS or not 1 <= nodes <= crosscheck.MAX_NODES or gpus_per_node < 1:
        raise SpecError(f"--jobs must be 1-{crosscheck.MAX_JOBS}, --nodes 1-{crosscheck.MAX_NODES}, "
                        "--gpus-per-node >= 1")
    tr = crosscheck.make_trace(jobs, nodes=nodes, gpus_per_node=gpus_per_node, seed=seed, whole_nodes=not mixed)
    with slurm_local.start(nodes, gpus_per_node) as inst:
        run = crosscheck.run_on_slurm(inst, tr)
    cmp_, res = crosscheck.compare(tr, run, nodes, gpus_per_node, placement=placement)
    doc = cmp_.to_dict()
    if json_out:
        doc["per_job"] = crosscheck.per_job(tr, run, cmp_, res)
        print_json(doc)
        return
    out = output_console()
    d = doc["start_diff_s"]
    out.print(f"local Slurm: {nodes} virtual nodes x {gpus_per_node} GRES GPUs, {jobs} sleep jobs, "
              f"{doc['slurm_wall_s']:.0f} s; simulator: backfill (FIFO + EASY), {placement}")
    out.print(f"start time Slurm - simulator: mean {d['mean']:+.1f} s, mean |diff| {d['mean_abs']:.1f} s, "
              f"max |diff| {d['max_abs']:.0f} s; within tolerance {doc['within_tolerance']}/{jobs}")
    out.print(f"start order: {doc['order_pairs_agree']}/{doc['order_pairs']} job pairs in the same order "
              f"({doc['order_agreement']:.1%})")
    if show_jobs:
        rows = [[r["job"], r["gpus"], r["nodes"], r["limit_min"], r["runtime_s"], r["submit_s"],
                 r["slurm_start_s"], r["sim_start_s"], r["diff_s"], r["tolerance_s"]]
                for r in crosscheck.per_job(tr, run, cmp_, res)]
        out.print(table("per job (s from the first submission)", ["job", "GPUs/node", "nodes", "limit min",
                        "run s", "submit", "Slurm start", "sim start", "diff", "tol"], rows))


def _layout_row(name: str, res: engine.SimResult, team_of_job, teams: int) -> dict:
    from clustertwin.sched import partitions

    m = metrics.compute(res)
    shares = partitions.team_utilization(res, team_of_job, teams)
    return {"layout": name, "metrics": m.to_dict(), "team_gpu_time_share": [round(float(x), 4) for x in shares]}


def partitions_command(
    trace: Path = typer.Option(..., "--trace", "-t", help="Trace file (or synthetic parameters YAML)."),
    fmt: str = typer.Option(..., "--format", "-f", help=f"Trace format: {', '.join(readers.FORMATS)}."),
    cluster: str = typer.Option(DEFAULT_CLUSTER, "--cluster", "-c", help="Cluster catalog id or YAML/JSON file."),
    node_list: Path | None = typer.Option(None, "--node-list", help="Cluster from a trace node list."),
    layouts: str = typer.Option("team-partitions,cohort,shared-pool", "--layouts",
                                help="Comma-separated: team-partitions, team-quotas, cohort, shared-pool."),
    policy: str = typer.Option("backfill", "--policy", "-p", help="Scheduling policy inside every layout."),
    placement: str = typer.Option("first-fit", "--placement", help="Placement inside every layout."),
    shares: str | None = typer.Option(None, "--shares", help="Teams' GPU shares, comma-separated "
                                      "(default equal), in team-name order."),
    borrowing_limit: float | None = typer.Option(None, "--borrowing-limit-gpus",
                                                 help="Cohort: most GPUs a team may borrow (default unlimited)."),
    max_jobs: int | None = typer.Option(None, "--max-jobs", help="Replay only the first N jobs."),
    json_out: bool = JsonOpt,
) -> None:
    """Same trace under team partitions, Kueue-style quotas/cohorts and one shared pool: utilisation gap."""
    from clustertwin.sched import partitions, synthetic

    lays = checked_names(layouts, partitions.LAYOUTS, "layout")
    engine.get_policy(policy)
    if placement not in PLACEMENTS:
        raise SpecError(f"unknown placement '{placement}'; choose from {', '.join(PLACEMENTS)}")
    check_finite(borrowing_limit, "--borrowing-limit-gpus", positive=False)
    cl = _cluster(cluster, node_list, None)
    jobs, report = read_jobs(trace, fmt, False, cl, max_jobs)
    if len(jobs) == 0:
        raise SpecError(f"no jobs to replay in {trace}")
    names, team = synthetic.team_of_jobs(jobs)
    w = None
    if shares is not None:
        try:
            w = [float(x) for x in split_list(shares)]
        except ValueError:
            raise SpecError(f"--shares '{shares}' must be comma-separated numbers") from None
    rows = []
    for lay in lays:
        res = partitions.simulate_layout(lay, cl, jobs, team, names, policy=policy, placement=placement,
                                         shares=w, borrowing_limit_gpus=borrowing_limit)
        rows.append(_layout_row(lay, res, team, len(names)))
    offered = float((jobs.total_gpus * np.minimum(jobs.runtime_s, jobs.limit_s)).sum())
    span = float(jobs.submit_s[-1] - jobs.submit_s[0]) or 1.0
    doc = {"cluster": cl.to_dict(), "trace": report.to_dict(), "teams": list(names), "policy": policy,
           "offered_load": offered / span / cl.total_gpus, "layouts": rows}
    if json_out:
        print_json(doc)
        return
    out = output_console()
    out.print(f"cluster {cl.name}: {cl.total_gpus:,} GPUs{cl.skipped_note()}; {len(jobs):,} jobs of {len(names)} teams, offered load "
              f"{doc['offered_load']:.2f} of the GPUs over the submission window; policy {policy}")
    cols = ["layout", "alloc util", "work util", "avg queue s", "p99 queue s", "done", "queued", "running",
            "unsched", "GPU-time share of busiest team"]
    body = [[r["layout"], r["metrics"]["gpu_utilization"], r["metrics"]["work_utilization"],
             r["metrics"]["avg_queue_s"], r["metrics"]["p99_queue_s"], r["metrics"]["completed"],
             r["metrics"]["queued"], r["metrics"]["running"], r["metrics"]["unschedulable"],
             max(r["team_gpu_time_share"])] for r in rows]
    out.print(table("team partitions vs shared pool", cols, body))


def register(app: typer.Typer) -> None:
    from clustertwin.cli.sched_federate_cmd import federate_command

    sched_app.command("simulate")(simulate_command)
    sched_app.command("fill")(fill_command)
    sched_app.command("crosscheck")(crosscheck_command)
    sched_app.command("partitions")(partitions_command)
    sched_app.command("federate")(federate_command)
    app.add_typer(sched_app, name="sched")
