"""The simulator's EASY backfill against a real Slurm: a local 4-node Slurm (one slurmd per virtual node,
8 GRES GPUs each, sched/backfill with bf_job_part_count_reserve=1 = EASY) runs 32 sleep jobs (about
1.5-2 minutes); the simulator replays them with the submit times and runtimes Slurm recorded.

Outside CI the test skips when Slurm is not installed or this is not root; with ``CI`` set it fails
instead (ci/slurm-setup.sh installs Slurm and starts munged)."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

from clustertwin.sched import crosscheck, slurm_local

NODES, GPUS_PER_NODE, JOBS = 4, 8, 32


def _need_slurm() -> None:
    why = None
    missing = slurm_local.missing_binaries()
    if missing:
        why = f"Slurm not installed (missing {', '.join(missing)})"
    elif os.geteuid() != 0:
        why = "the local Slurm cross-check needs root"
    else:
        p = subprocess.run("munge -n | unmunge", shell=True, capture_output=True)
        if p.returncode != 0:
            why = "munged is not running (run ci/slurm-setup.sh)"
    if why is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the real-Slurm cross-check: {why}")
    pytest.skip(why)


def _meets(trace, run) -> bool:
    cmp_, res = crosscheck.compare(trace, run, NODES, GPUS_PER_NODE)
    tolerances = [r["tolerance_s"] for r in crosscheck.per_job(trace, run, cmp_, res)]
    return (cmp_.order_agreement >= crosscheck.MIN_ORDER_AGREEMENT
            and cmp_.within >= crosscheck.MIN_WITHIN_FRACTION * len(trace)
            and abs(float(np.median(cmp_.diff_s))) <= float(np.median(tolerances)))


@pytest.fixture(scope="module")
def slurm_run():
    """One Slurm run of the trace; on a loaded host a sub-second launch lag now and then flips an early
    backfill decision and the schedules drift apart, so a run that misses the bar is repeated once on a
    fresh instance (the second run is the one the test judges)."""
    _need_slurm()
    trace = crosscheck.make_trace(JOBS, nodes=NODES, gpus_per_node=GPUS_PER_NODE, seed=1)
    for attempt in range(2):
        with slurm_local.start(NODES, GPUS_PER_NODE) as inst:
            nodes = inst.run("sinfo", "-h", "-N", "-o", "%N %G").split()
            run = crosscheck.run_on_slurm(inst, trace, timeout_s=240)
        if attempt == 0 and not _meets(trace, run):
            continue
        break
    return trace, run, nodes


def test_local_slurm_has_four_virtual_gpu_nodes(slurm_run):
    _, _, nodes = slurm_run
    assert nodes[0::2] == ["vn1", "vn2", "vn3", "vn4"]
    assert all(g.startswith("gpu:8") for g in nodes[1::2])


def test_simulator_matches_slurm_start_order_and_times(slurm_run):
    trace, run, _ = slurm_run
    assert len(trace) >= 30 and run.wall_s <= 180
    # Slurm really queued and backfilled: some jobs waited, and some started before an earlier-submitted job
    waited = run.start_s - run.submit_s
    assert (waited > 5).sum() >= 10
    order = np.argsort(run.submit_s, kind="stable")
    later_first = sum(run.start_s[b] < run.start_s[a] for i, a in enumerate(order) for b in order[i + 1:])
    assert later_first > 0, "no job was backfilled ahead of an earlier one"
    cmp_, res = crosscheck.compare(trace, run, NODES, GPUS_PER_NODE)
    detail = (cmp_.to_dict(), [(r["job"], r["diff_s"], r["tolerance_s"])
                               for r in crosscheck.per_job(trace, run, cmp_, res)])
    # pairs of jobs whose simulated starts are further apart than their tolerances start in the same
    # order on Slurm (measured: 100 % on an idle host, 98.8 % with the host's two cores busy)
    assert cmp_.pairs >= 200
    assert cmp_.order_agreement >= crosscheck.MIN_ORDER_AGREEMENT, detail
    # start times: the median difference within the median job's tolerance (backfill interval + resolution +
    # launch lag per link of the chain it waited on: lags add up along chains when the host is busy; measured
    # 0-1 s idle, 3 s with the test suite running on both cores); each job within its tolerance but for the
    # few where a sub-second lag flipped a backfill decision and the schedules drifted apart for a while
    # (measured 27-32 of 32; the host's load makes launch lags jitter)
    tolerances = [r["tolerance_s"] for r in crosscheck.per_job(trace, run, cmp_, res)]
    assert abs(float(np.median(cmp_.diff_s))) <= float(np.median(tolerances)), detail
    assert cmp_.within >= crosscheck.MIN_WITHIN_FRACTION * len(trace), detail
