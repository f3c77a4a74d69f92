"""Trace jobs with the mix's bodies: a real trace's arrivals and sizes replayed with contention."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from clustertwin import specs
from clustertwin.sched import cluster as sched_cluster
from clustertwin.sched import contention, cosim, failures, workload
from clustertwin.sched.bodies import Bodies
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[2]
FAT_TREE_4TO1 = ROOT / "examples" / "clusters" / "ref-1k-h100-fat-tree-4to1.yaml"
MIX = workload.WorkloadMix.model_validate({
    "jobs": 10, "arrival": {"mean_interarrival_s": 60},
    "classes": [{"name": "8b", "model": "llama3-8b", "gpus": 64, "global_batch": 512, "share": 1.0,
                 "duration": {"steps": 100}}]})


def _swf(path: Path, jobs: int = 48) -> Path:
    """SWF lines: 64-GPU jobs every 60 s running 2,400 s, and every fourth a 3-GPU job (no class has 3)."""
    lines = []
    for i in range(jobs):
        g = 3 if i % 4 == 3 else 64
        lines.append(f"{i + 1} {60 * i} 0 2400 {g} -1 -1 {g} 4800 -1 1 {1 + i % 3} 1 -1 1 1 -1 -1")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    spec = specs.load(specs.ClusterSpec, str(FAT_TREE_4TO1), kind="cluster")
    cl = sched_cluster.from_spec(spec)
    bodies = Bodies(MIX, spec, node_mtbf_h=failures.DEFAULT_NODE_MTBF_H)
    swf = _swf(tmp_path_factory.mktemp("trace") / "jobs.swf")
    return spec, cl, bodies, swf, None


def _jobs(setup):
    from clustertwin.cli.sched_common import read_jobs

    _spec, cl, _bodies, swf, _ = setup
    jobs, report = read_jobs(swf, "swf", False, cl, None, None)
    assert report.malformed == 0
    return jobs


def test_sizes_a_class_lists_get_its_body_and_the_trace_runtime(setup):
    _spec, _cl, bodies, _swf_path, _ = setup
    jobs = _jobs(setup)
    drawn = workload.assign_trace(MIX, jobs, bodies.iso_runtime_s, seed=0)
    gpus = jobs.total_gpus
    assert np.all(drawn.job_class[gpus == 64] == 0) and np.all(drawn.job_class[gpus == 3] == workload.NO_BODY)
    for j in np.flatnonzero(gpus == 64)[:3].tolist():
        alone = bodies.steps(0, 64) * drawn.scale[j] * bodies.compact(0, 64).step_s
        r = bodies.resilience(0, 64)
        assert alone * (1 + r.save_stall_s / r.checkpoint_interval_s) == pytest.approx(jobs.runtime_s[j], rel=1e-9)


def test_ideal_network_replays_the_trace_and_contention_stretches_random_placement(setup):
    _spec, cl, bodies, _swf_path, _ = setup
    jobs = _jobs(setup)
    drawn = workload.assign_trace(MIX, jobs, bodies.iso_runtime_s, seed=0)
    ideal = cosim.simulate_mix(cl, drawn, bodies, placement="first-fit", fabric=None, seed=0)
    rec = cosim.record(ideal, "backfill", "first-fit")
    assert rec["interference_gpu_hours"] == 0.0 and rec["slowdown_p95"] == pytest.approx(1.0, abs=1e-6)
    fabric = contention.fabric_of(bodies.topology, "ecmp")
    rand = cosim.record(cosim.simulate_mix(cl, drawn, bodies, placement="random", fabric=fabric, seed=0),
                        "backfill", "random")
    packed = cosim.record(cosim.simulate_mix(cl, drawn, bodies, placement="leaf-packed", fabric=fabric, seed=0),
                          "backfill", "leaf-packed")
    assert rand["interference_gpu_hours"] > packed["interference_gpu_hours"] >= 0.0
    assert rand["completed"] == len(jobs)


def test_cli_trace_with_workload(setup):
    swf = setup[3]
    r = run_cli("sched", "simulate", "-t", str(swf), "-f", "swf", "--workload",
                str(ROOT / "examples" / "workloads" / "llm-mix.yaml"), "--network", "contention",
                "--cluster", str(FAT_TREE_4TO1), "--placement", "random", "--json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["workload"]["without_body"] == 12 and doc["workload"]["jobs"] == 48
    assert doc["workload"]["classes"]["llama3-8b-pretrain"] == 36
    bad = run_cli("sched", "simulate", "-t", str(swf), "--workload", str(ROOT / "examples" / "workloads" /
                                                                         "llm-mix.yaml"))
    assert bad.code == 2 and "--trace needs --format" in bad.stderr
