"""``clustertwin sched simulate --workload MIX.yaml``: jobs with a body on one fabric, compared by policy and
placement (:mod:`clustertwin.sched.cosim`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clustertwin.cli.common import load_cluster, print_json, table
from clustertwin.cli.progress import LazyProgress
from clustertwin.cli.sched_common import output_console
from clustertwin.errors import SpecError
from clustertwin.sched import cluster as sched_cluster
from clustertwin.sched import contention, cosim, failures, workload
from clustertwin.sched.bodies import Bodies

NETWORKS = ("ideal", "contention")
_COLUMNS = [("util", "utilization"), ("goodput GPU-h", "goodput_gpu_hours"),
            ("interference GPU-h", "interference_gpu_hours"), ("failure loss GPU-h", "failure_loss_gpu_hours"),
            ("slowdown mean", "slowdown_mean"), ("slowdown p95", "slowdown_p95"), ("queue mean s", "queue_mean_s"),
            ("done", "completed"), ("killed", "killed"), ("requeued", "requeued")]


def run_workload(path: Path, cluster: str, policies: list[str], placements: list[str], network: str, routing: str,
                 seed: int, max_jobs: int | None, mtbf_h: float | None, mttr_h: float, reliability: bool,
                 max_failure_events: int, json_out: bool, trace: tuple[Path, str, bool] | None = None) -> None:
    """Draw the mix (or, with ``trace`` = (file, format, strict), give the trace's jobs the mix's bodies:
    :func:`clustertwin.sched.workload.assign_trace`), run every policy x placement, print the table (or
    ``--json``)."""
    if network not in NETWORKS:
        raise SpecError(f"--network must be one of {', '.join(NETWORKS)} (got {network[:40]!r})")
    if routing not in contention.ROUTINGS:
        raise SpecError(f"--routing must be one of {', '.join(contention.ROUTINGS)} (got {routing[:40]!r})")
    mix = workload.load_workload(path)
    spec = load_cluster(cluster)
    cl = sched_cluster.from_spec(spec)
    node_mtbf = failures.reliability_node_mtbf_h(cl.gpus) if reliability else None
    if mtbf_h is not None and reliability:
        raise SpecError("give --node-mtbf-h or --failures-from-reliability, not both")
    rated = float(np.mean(node_mtbf)) if node_mtbf is not None else (mtbf_h or failures.DEFAULT_NODE_MTBF_H)
    bodies = Bodies(mix, spec, node_mtbf_h=rated)
    skipped = 0
    try:
        if trace is None:
            drawn = workload.draw(mix, bodies.iso_runtime_s, int(spec.node.gpus), seed=seed, max_jobs=max_jobs)
        else:
            from clustertwin.cli.sched_common import read_jobs

            tjobs, report = read_jobs(trace[0], trace[1], trace[2], cl, max_jobs, None)
            if len(tjobs) == 0:
                raise SpecError(f"no jobs to replay in {trace[0]} ({report.malformed} malformed lines)")
            skipped = report.malformed
            drawn = workload.assign_trace(mix, tjobs, bodies.iso_runtime_s, seed=seed)
    except SpecError as e:
        raise e if trace is not None else e.with_context(file=str(path)) from None
    jobs = drawn.jobs
    fail = None
    if mtbf_h is not None or reliability:
        horizon = float(jobs.submit_s[-1] + jobs.limit_s.max())
        fail = failures.exponential_failures(cl.nodes, horizon, mtbf_h=node_mtbf if reliability else mtbf_h,
                                             mttr_h=mttr_h, seed=seed, max_events=max_failure_events)
    fabric = contention.fabric_of(bodies.topology, routing) if network == "contention" else None
    rows = []
    with LazyProgress() as bar:
        for pol in policies:
            for pl in placements:
                res = cosim.simulate_mix(cl, drawn, bodies, policy=pol, placement=pl, fabric=fabric, failures=fail,
                                         seed=seed, progress=bar.task(f"{pol} / {pl}", len(jobs)))
                rows.append(cosim.record(res, pol, pl))
    topo = bodies.topology
    doc = {"cluster": cl.to_dict(), "fabric": {"kind": topo.kind, "oversubscription": topo.oversubscription,
                                               "routing": routing if fabric is not None else None,
                                               "tiers": [t[0] for t in topo.uplink_tiers()]},
           "workload": {"name": mix.name, "jobs": len(jobs), "seed": seed,
                        "classes": {c.name: int((drawn.job_class == k).sum()) for k, c in enumerate(mix.classes)},
                        **({"trace": str(trace[0]), "without_body": int((drawn.job_class == workload.NO_BODY).sum()),
                            "malformed_lines": skipped} if trace is not None else {})},
           "failures": None if fail is None else {"events": len(fail), "mttr_h": mttr_h},
           "network": network, "policies": rows}
    if json_out:
        print_json(doc)
        return
    out = output_console()
    classes = ", ".join(f"{k} {v}" for k, v in doc["workload"]["classes"].items())
    if trace is not None:
        classes += f", no body {doc['workload']['without_body']}; from {trace[0]}, {skipped} malformed lines"
    out.print(f"{cl.summary()}; fabric {topo.kind} {topo.oversubscription:g}:1, network {network}"
              f"{f' ({routing})' if fabric is not None else ''}; workload {mix.name}: {len(jobs):,} jobs ({classes}), "
              f"seed {seed}")
    if fail is not None:
        out.print(f"node failures injected: {len(fail)} (MTTR {mttr_h:g} h)")
    body = [[r["policy"], r["placement"], *[r[k] for _, k in _COLUMNS]] for r in rows]
    out.print(table("the cluster as a whole", ["policy", "placement", *[h for h, _ in _COLUMNS]], body))
