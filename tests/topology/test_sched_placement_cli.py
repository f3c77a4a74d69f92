"""The scheduler simulator's allocation reaches training from the command line: `sched simulate --jobs --json`
lists each job's nodes, and `train estimate --placement` takes that node list."""

from __future__ import annotations

import json

from tests.conftest import ROOT, run_cli

from clustertwin import specs
from clustertwin.sched import cluster as sched_cluster
from clustertwin.sched import engine, readers
from clustertwin.topology import allocation_nodes


def test_job_nodes_from_sched_json_are_a_train_placement():
    trace = str(ROOT / "examples" / "traces" / "synthetic-small.yaml")
    r = run_cli("sched", "simulate", "--cluster", "ref-1k-h100", "--trace", trace, "--format", "synthetic",
                "--policy", "backfill", "--jobs", "--json")
    assert r.code == 0, r.stderr
    jobs = json.loads(r.stdout)["policies"][0]["jobs"]
    spread = [j for j in jobs if j["nodes"] and len({n // 32 for n in j["nodes"]}) > 1 and len(j["nodes"]) == 8]
    assert spread, "no 8-node job over two leaves in the trace"
    job = spread[0]
    # the same nodes as the library call on the same simulation
    cl = sched_cluster.from_spec(specs.load(specs.ClusterSpec, "ref-1k-h100", kind="cluster"), None)
    tr = readers.read_trace(trace, "synthetic", cluster_gpus=cl.total_gpus)
    res = engine.simulate(cl, tr.jobs, "backfill", record_allocations=True)
    assert allocation_nodes(res, job["id"]) == job["nodes"]
    est = {}
    for pl in ("contiguous", ",".join(map(str, job["nodes"]))):
        out = run_cli("train", "estimate", "--cluster", "ref-1k-h100", "--model", "llama3-8b", "--gpus", "64",
                      "--global-batch", "512", "--tp", "8", "--pp", "1", "--placement", pl, "--json")
        assert out.code == 0, out.stderr
        est[pl == "contiguous"] = json.loads(out.stdout)
    assert est[False]["net_hops"]["dp"] > est[True]["net_hops"]["dp"]  # the ring crosses the spine
    assert est[False]["breakdown"]["dp_comm"] >= est[True]["breakdown"]["dp_comm"]
    no_jobs = json.loads(run_cli("sched", "simulate", "--cluster", "ref-1k-h100", "--trace", trace, "--format",
                                 "synthetic", "--policy", "backfill", "--json").stdout)
    assert "jobs" not in no_jobs["policies"][0]
