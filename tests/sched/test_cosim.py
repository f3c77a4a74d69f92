"""The cluster as a whole: jobs with a body on one fabric, contention, failures, placements compared."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from clustertwin import specs
from clustertwin.errors import SpecError
from clustertwin.sched import cluster as sched_cluster
from clustertwin.sched import contention, cosim, failures, workload
from clustertwin.sched.bodies import Bodies
from clustertwin.sched.job_states import COMPLETED, KILLED, UNSCHEDULABLE

ROOT = Path(__file__).resolve().parents[2]
FAT_TREE_4TO1 = ROOT / "examples" / "clusters" / "ref-1k-h100-fat-tree-4to1.yaml"


def _mix(jobs: int, gap_s: float, steps: int = 300) -> workload.WorkloadMix:
    return workload.WorkloadMix.model_validate({
        "jobs": jobs, "arrival": {"mean_interarrival_s": gap_s},
        "classes": [
            {"name": "8b", "model": "llama3-8b", "gpus": 64, "global_batch": 512, "share": 0.6,
             "duration": {"steps": steps}},
            {"name": "ft", "model": "llama2-7b", "gpus": [2, 8], "global_batch": 32, "share": 0.4,
             "duration": {"hours": 0.3}, "duration_sigma": 0.5}]})


@pytest.fixture(scope="module")
def fat_tree():
    spec = specs.load(specs.ClusterSpec, str(FAT_TREE_4TO1), kind="cluster")
    mix = _mix(160, 300.0)
    bodies = Bodies(mix, spec, node_mtbf_h=failures.DEFAULT_NODE_MTBF_H)
    return spec, mix, bodies, sched_cluster.from_spec(spec)


def _run(setup, placement: str, routing: str = "ecmp", seed: int = 0, fail=None, drawn=None):
    _spec, mix, bodies, cl = setup
    drawn = drawn or workload.draw(mix, bodies.iso_runtime_s, 8, seed=seed)
    fabric = contention.fabric_of(bodies.topology, routing)
    return cosim.simulate_mix(cl, drawn, bodies, placement=placement, fabric=fabric, failures=fail, seed=seed)


def test_leaf_packed_loses_less_to_interference_than_random_on_4to1(fat_tree):
    packed = _run(fat_tree, "leaf-packed")
    rand = _run(fat_tree, "random")
    assert fat_tree[2].topology.oversubscription == 4.0
    share_packed = packed.interference_gpu_s / packed.goodput_gpu_s
    share_random = rand.interference_gpu_s / rand.goodput_gpu_s
    assert share_random > 0.0
    assert share_packed < 0.8 * share_random  # measurably less: at least a fifth less


def test_non_blocking_adaptive_interference_below_one_percent():
    spec = specs.load(specs.ClusterSpec, "ref-1k-h100", kind="cluster")
    assert spec.network.oversubscription == 1.0
    mix = _mix(120, 300.0)
    bodies = Bodies(mix, spec, node_mtbf_h=failures.DEFAULT_NODE_MTBF_H)
    setup = (spec, mix, bodies, sched_cluster.from_spec(spec))
    for placement in ("first-fit", "random"):
        res = _run(setup, placement, routing="adaptive")
        assert res.interference_gpu_s / res.goodput_gpu_s < 0.01


def test_ecmp_collisions_cost_more_than_adaptive_routing(fat_tree):
    ecmp = _run(fat_tree, "random", "ecmp")
    adaptive = _run(fat_tree, "random", "adaptive")
    assert ecmp.interference_gpu_s > adaptive.interference_gpu_s


def test_jobs_conserved_over_200_seeded_scenarios_with_failures_and_contention(fat_tree):
    spec, _, _, cl = fat_tree
    small = _mix(12, 200.0, steps=120)
    small_bodies = Bodies(small, spec, node_mtbf_h=50.0)
    placements = ("first-fit", "leaf-packed", "topology", "random")
    for seed in range(200):
        drawn = workload.draw(small, small_bodies.iso_runtime_s, 8, seed=seed)
        horizon = float(drawn.jobs.submit_s[-1] + drawn.jobs.limit_s.max())
        fail = failures.exponential_failures(cl.nodes, horizon, mtbf_h=50.0, mttr_h=1.0, seed=seed)
        res = _run((spec, small, small_bodies, cl), placements[seed % 4], seed=seed, fail=fail, drawn=drawn)
        state = res.sim.state
        assert np.isin(state, [COMPLETED, KILLED, UNSCHEDULABLE]).all()  # each job ends in exactly one state
        done = state == COMPLETED
        assert np.all(res.sim.end_s[done] >= res.sim.start_s[done])
        t, held = res.sim.timeline_t, res.sim.timeline_alloc_gpus
        allocated_gpu_s = float(np.sum(np.diff(t) * held[:-1]))
        parts = (res.goodput_gpu_s, res.interference_gpu_s, res.failure_loss_gpu_s, res.checkpoint_gpu_s,
                 res.killed_gpu_s)
        assert min(parts) >= 0
        assert sum(parts) <= allocated_gpu_s * (1 + 1e-6) + 1e-6  # GPU time is not created
        if len(fail) and res.sim.failure_kills:
            assert res.sim.requeues.sum() == res.sim.failure_kills


def test_deterministic_by_seed(fat_tree):
    a = cosim.record(_run(fat_tree, "random", seed=3), "backfill", "random")
    b = cosim.record(_run(fat_tree, "random", seed=3), "backfill", "random")
    c = cosim.record(_run(fat_tree, "random", seed=4), "backfill", "random")
    assert a == b
    assert a != c


def test_balls_into_bins_expectation():
    assert contention.expected_max_load(0, 8) == 0.0
    assert contention.expected_max_load(1, 64) == 1.0
    assert contention.expected_max_load(2, 2) == pytest.approx(1.5, abs=0.03)  # exact: 1/2 x 1 + 1/2 x 2
    n = 64
    k = int(8 * n * math.log(n))  # heavy load: Raab & Steger's k/n + sqrt(2 (k/n) ln n)
    rs = k / n + math.sqrt(2 * (k / n) * math.log(n))
    assert contention.expected_max_load(k, n) == pytest.approx(rs, rel=0.1)
    assert contention.expected_max_load(k, n) >= math.ceil(k / n)


def test_max_min_progressive_filling():
    # bundles 0 and 1 of capacity 1; job A crosses both, B only 0, C only 1: each gets 1/2 (Bertsekas-Gallager)
    d = np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(contention.max_min_rates(d, np.array([1.0, 1.0])), [0.5, 0.5, 0.5])
    # B's bundle is wider: B keeps its leftover, capped at its demand
    x = contention.max_min_rates(np.array([[1.0, 0.0], [1.0, 1.0]]), np.array([1.0, 3.0]))
    np.testing.assert_allclose(x, [0.5, 0.5])
    x = contention.max_min_rates(np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([0.5, 3.0]))
    np.testing.assert_allclose(x, [1.0, 0.5])


def test_workload_errors_name_the_field(tmp_path):
    p = tmp_path / "mix.yaml"
    p.write_text("jobs: 10\narrival: {mean_interarrival_s: 10}\nclasses:\n"
                 "  - {name: a, model: llama3-8b, gpus: 8, global_batch: 8, share: 1, duraton: {steps: 5}}\n")
    with pytest.raises(SpecError, match="duration"):
        workload.load_workload(p)
    p.write_text("jobs: 10\narrival: {mean_interarrival_s: 10}\nclasses: []\n")
    with pytest.raises(SpecError, match="classes"):
        workload.load_workload(p)


def test_shipped_mix_loads():
    mix = workload.load_workload(ROOT / "examples" / "workloads" / "llm-mix.yaml")
    shares = dict(zip([c.name for c in mix.classes], mix.shares, strict=True))
    assert shares["llama3-8b-pretrain"] == pytest.approx(0.4)
    assert shares["llama3-70b-pretrain"] == pytest.approx(0.1)
    assert {c.name: c.gpus for c in mix.classes}["llama3-70b-pretrain"] == (512,)


def test_more_flows_per_nic_spread_ecmp_collisions(fat_tree):
    topo = fat_tree[2].topology
    one, eight = contention.fabric_of(topo, "ecmp"), contention.fabric_of(topo, "ecmp", flows_per_nic=8)
    assert eight.flow_gb_per_s == pytest.approx(one.port_gb_per_s / 8)
    nodes = np.arange(0, 64, 4, dtype=np.int64)  # one node per leaf group stride: crosses the spine
    b1, f1 = one.demand(nodes)
    b8, f8 = eight.demand(nodes)
    np.testing.assert_array_equal(b1, b8)
    np.testing.assert_array_equal(f8, 8 * f1)  # each NIC opens 8 flows, each at 1/8 of the port
    c1, c8 = one.effective_capacity(b1, f1), eight.effective_capacity(b8, f8)
    assert np.all(c8 >= c1 - 1e-9) and np.any(c8 > c1)  # finer hashing: fewer hot links
    assert np.all(c8 <= one.cap_gb_per_s[b1] + 1e-9)
    for bad in (0, 2000, True, 1.5):
        with pytest.raises(SpecError, match="flows_per_nic"):
            contention.fabric_of(topo, "ecmp", flows_per_nic=bad)


def test_a_run_does_not_depend_on_the_runs_before_it():
    spec = specs.load(specs.ClusterSpec, str(FAT_TREE_4TO1), kind="cluster")
    mix = workload.load_workload(ROOT / "examples" / "workloads" / "llm-mix.yaml")
    cl = sched_cluster.from_spec(spec)

    def runs(*settings):
        bodies = Bodies(mix, spec, node_mtbf_h=failures.DEFAULT_NODE_MTBF_H)
        drawn = workload.draw(mix, bodies.iso_runtime_s, 8, seed=0, max_jobs=150)
        out = []
        for placement, routing in settings:
            fabric = contention.fabric_of(bodies.topology, routing)
            res = cosim.simulate_mix(cl, drawn, bodies, policy="fifo", placement=placement, fabric=fabric, seed=0)
            out.append(cosim.record(res, "fifo", placement))
        return out

    (alone,) = runs(("random", "adaptive"))
    _, after = runs(("random", "ecmp"), ("random", "adaptive"))
    assert after == alone
