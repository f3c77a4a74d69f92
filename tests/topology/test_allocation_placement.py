"""A placement taken from the scheduler simulator's allocation reaches the training estimate."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from clustertwin import catalog, specs, train
from clustertwin.errors import SpecError
from clustertwin.sched import cluster as sched_cluster
from clustertwin.sched import readers
from clustertwin.sched.engine import simulate
from clustertwin.topology import build
from clustertwin.topology.allocation import allocation_nodes

TRACE = Path(__file__).resolve().parents[2] / "examples" / "traces" / "synthetic-small.yaml"


@pytest.fixture(scope="module")
def run():
    c = catalog.get("cluster", "ref-1k-h100")
    scl = sched_cluster.from_spec(c)
    jobs = readers.read_trace(TRACE, "synthetic", cluster_gpus=scl.total_gpus, max_jobs=2000).jobs
    jobs = replace(jobs, submit_s=jobs.submit_s / 3)  # 3x the offered load: first-fit fragments the nodes
    return c, simulate(scl, jobs, "backfill", placement="first-fit", record_allocations=True)


def test_a_fragmented_allocation_costs_what_its_leaves_cost(run):
    c, res = run
    topo = build(c)
    spread = None
    for j, *_rest in res.allocations:
        nodes = allocation_nodes(res, j)
        if len(nodes) == 4 and len(set(topo.node_address(np.array(nodes))["leaf"].tolist())) > 1:
            spread = nodes
            break
    assert spread is not None, "no 4-node job spread over leaves in the trace"
    m = catalog.get("model", "llama3-8b")
    par = specs.ParallelismSpec(tp=8, pp=1, dp=4, global_batch=64)
    placed = train.estimate(m, c, par, placement=spread)
    packed = train.estimate(m, c, par)
    assert placed.placement == "nodes"
    assert (packed.net_hops["dp"], placed.net_hops["dp"]) == (1, 3)  # one leaf vs over the spine
    assert placed.breakdown["dp_comm"] > packed.breakdown["dp_comm"]


def test_allocation_errors(run):
    _, res = run
    with pytest.raises(SpecError, match="no job 'syn-99999'"):
        allocation_nodes(res, "syn-99999")
    with pytest.raises(SpecError, match="out of range"):
        allocation_nodes(res, "syn-0016", which=5)
    bare = replace(res, allocations=[])
    with pytest.raises(SpecError, match="record_allocations=True"):
        allocation_nodes(bare, "syn-0016")
