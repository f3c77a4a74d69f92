"""``clustertwin sched federate``: several clusters, each with its own scheduler policy, behind a
federation policy (registered by :func:`clustertwin.cli.sched_cmd.register`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer

from clustertwin.cli.common import JsonOpt, load_cluster, print_json, table
from clustertwin.cli.sched_common import check_finite, checked_names, output_console, read_jobs
from clustertwin.errors import SpecError
from clustertwin.sched import cluster as sched_cluster
from clustertwin.sched import engine, metrics, readers
from clustertwin.sched.placement import PLACEMENTS


def federate_command(
    member: list[str] = typer.Option(..., "--member", "-m", help="Member cluster: CLUSTER[:POLICY[:PLACEMENT]] "
                                     "(catalog id or YAML/JSON file); repeat for each cluster."),
    trace: Path = typer.Option(..., "--trace", "-t", help="Trace file (or synthetic parameters YAML)."),
    fmt: str = typer.Option(..., "--format", "-f", help=f"Trace format: {', '.join(readers.FORMATS)}."),
    federation_policy: str = typer.Option("first-start,locality,round-robin", "--federation",
                                          help="Comma-separated: first-start, locality, round-robin."),
    dataset_gb: float = typer.Option(0.0, "--dataset-gb", help="Data each job reads (GB), moved over the WAN "
                                     "when it runs away from its home cluster (locality)."),
    wan_gbps: float = typer.Option(1.0, "--wan-gbps", help="WAN bandwidth between clusters (GB/s)."),
    max_jobs: int | None = typer.Option(None, "--max-jobs", help="Replay only the first N jobs."),
    json_out: bool = JsonOpt,
) -> None:
    """Several clusters, each with its own policy, behind a federation policy: per-cluster and global metrics."""
    from clustertwin.sched import federation

    pols = checked_names(federation_policy, federation.FEDERATION_POLICIES, "federation")
    check_finite(wan_gbps, "--wan-gbps")
    check_finite(dataset_gb, "--dataset-gb", positive=False)
    if dataset_gb < 0:
        raise SpecError("--dataset-gb must be >= 0")
    members = []
    for text in member:
        parts = text.split(":")
        if len(parts) > 3 or not parts[0]:
            raise SpecError(f"--member '{text}' must be CLUSTER[:POLICY[:PLACEMENT]]")
        pol = parts[1] if len(parts) > 1 and parts[1] else "backfill"
        engine.get_policy(pol)
        pl = parts[2] if len(parts) > 2 and parts[2] else "first-fit"
        if pl not in PLACEMENTS:
            raise SpecError(f"--member '{text}': unknown placement '{pl}'; choose from {', '.join(PLACEMENTS)}")
        members.append(federation.Member(sched_cluster.from_spec(load_cluster(parts[0])), pol, pl))
    total = sum(m.cluster.total_gpus for m in members)
    probe = members[0].cluster
    jobs, report = read_jobs(trace, fmt, False, sched_cluster.SchedCluster(
        "federation", np.array([total]), np.zeros(1, dtype=np.int64), probe.models, np.zeros(1, dtype=np.int64)),
        max_jobs)
    if len(jobs) == 0:
        raise SpecError(f"no jobs to replay in {trace}")
    rows = []
    for fp in pols:
        fr = federation.simulate_federation(members, jobs, fp, dataset_bytes=dataset_gb * federation.BYTES_PER_GB,
                                            wan_gbps=wan_gbps)
        g = metrics.compute(fr.combined)
        per = [{"cluster": m.cluster.name, "policy": m.policy, "gpus": m.cluster.total_gpus,
                "jobs_run": int((fr.member_of_job == i).sum()), "metrics": metrics.compute(r).to_dict()}
               for i, (m, r) in enumerate(zip(members, fr.members, strict=True))]
        rows.append({"federation": fp, "global": g.to_dict(), "members": per,
                     "wan_transfer_s_total": float(fr.transfer_s.sum())})
    doc = {"trace": report.to_dict(), "gpus": total, "results": rows}
    if json_out:
        print_json(doc)
        return
    out = output_console()
    out.print(f"{len(members)} clusters, {total:,} GPUs; {len(jobs):,} jobs")
    cols = ["federation", "cluster", "policy", "GPUs", "jobs run", "util", "avg queue s", "p99 queue s", "done",
            "queued", "unsched"]
    body = []
    for r in rows:
        g = r["global"]
        body.append([r["federation"], "(all)", "", total, g["completed"] + g["killed"] + g["running"],
                     g["gpu_utilization"], g["avg_queue_s"], g["p99_queue_s"], g["completed"], g["queued"],
                     g["unschedulable"]])
        for p in r["members"]:
            m = p["metrics"]
            body.append(["", p["cluster"], p["policy"], p["gpus"], p["jobs_run"], m["gpu_utilization"],
                         m["avg_queue_s"], m["p99_queue_s"], m["completed"], "", ""])
    out.print(table("federation", cols, body))
