"""Hand-checked schedules: FIFO, SJF and EASY backfill give exactly the expected start times."""

from __future__ import annotations

import numpy as np
import pytest

from clustertwin.errors import SpecError
from clustertwin.sched import cluster as C
from clustertwin.sched import engine, metrics
from clustertwin.sched.failures import FailureEvents, exponential_failures
from clustertwin.sched.jobs import make_jobs

# one node with 4 GPUs. A: 2 GPUs 0-10; B: all 4 GPUs (must wait for A); C: 2 GPUs, short;
# D: 1 GPU, long; E: 1 GPU, ends exactly at B's reservation.
HAND = dict(
    ids=["A", "B", "C", "D", "E"],
    submit_s=[0, 1, 2, 3, 4],
    runtime_s=[10, 5, 3, 20, 5],
    gpus_per_unit=[2, 4, 2, 1, 1],
)


def _starts(policy: str, **kw) -> dict[str, float]:
    jobs = make_jobs(**HAND)
    res = engine.simulate(C.uniform(1, 4), jobs, policy, **kw)
    return dict(zip(jobs.ids, res.start_s.tolist(), strict=True))


def test_fifo_start_times():
    # B blocks the queue until A ends at 10; C, D and E then share the node after B (10-15)
    assert _starts("fifo") == {"A": 0, "B": 10, "C": 15, "D": 15, "E": 15}


def test_sjf_start_times():
    # at t=2 the queue is [C(3 s), B(5 s)]: C runs beside A; B heads the queue until A ends;
    # E (5 s, submitted after B) goes before D (20 s)
    assert _starts("sjf") == {"A": 0, "C": 2, "B": 10, "E": 15, "D": 15}


def test_easy_backfill_start_times():
    # B's reservation is t=10 (A's limit). C (2-5) and E (5-10) end by then and are backfilled;
    # D (limit 20) would hold a GPU B needs at 10, so it waits.
    starts = _starts("backfill")
    assert starts == {"A": 0, "C": 2, "E": 5, "B": 10, "D": 15}


def test_backfill_reservation_recorded_and_kept():
    jobs = make_jobs(**HAND)
    res = engine.simulate(C.uniform(1, 4), jobs, "backfill")
    assert res.first_reservation_s[1] == 10.0  # B
    assert res.start_s[1] == 10.0


def test_backfill_uses_time_limits_not_runtimes():
    # E's runtime is 5 s but it asks for 7 s: ending by limit at 12 > 10 would delay B, so it waits
    jobs = make_jobs(**HAND, limit_s=[10, 5, 3, 20, 7])
    res = engine.simulate(C.uniform(1, 4), jobs, "backfill")
    assert dict(zip(jobs.ids, res.start_s.tolist(), strict=True)) == {"A": 0, "B": 10, "C": 2, "D": 15, "E": 15}


def test_timeout_kills_at_limit():
    jobs = make_jobs(["x"], [0], [100], [1], limit_s=[40])
    res = engine.simulate(C.uniform(1, 1), jobs, "fifo")
    assert res.end_s[0] == 40.0 and res.state[0] == engine.KILLED and res.killed_by_timeout == 1


def test_unschedulable_job_is_its_own_state_and_blocks_no_one():
    jobs = make_jobs(["big", "small"], [0, 1], [10, 10], [64, 1])
    res = engine.simulate(C.uniform(2, 8), jobs, "fifo")
    m = metrics.compute(res)
    assert res.start_s[1] == 1.0
    assert res.state[0] == engine.UNSCHEDULABLE
    assert (m.queued, m.unschedulable, m.completed) == (0, 1, 1)
    assert m.completed + m.killed + m.queued + m.running + m.unschedulable == m.submitted == 2


def test_gpu_type_constraint():
    cl = C.SchedCluster("mixed", np.array([4, 4]), np.array([0, 1]), ("T4", "V100"), np.array([0, 0]))
    jobs = make_jobs(["a", "b"], [0, 0], [10, 10], [4, 4], gpu_types=[frozenset({"V100"}), frozenset({"V100"})])
    res = engine.simulate(cl, jobs, "fifo")
    assert res.start_s.tolist() == [0.0, 10.0]


def test_gpu_sharing_packs_fractions_on_one_gpu():
    jobs = make_jobs(["a", "b", "c"], [0, 0, 0], [10, 10, 10], [0.5, 0.5, 0.5])
    res = engine.simulate(C.uniform(1, 1), jobs, "fifo")
    assert res.start_s.tolist() == [0.0, 0.0, 10.0]


def test_multi_unit_jobs_take_distinct_nodes_and_topology_avoids_leaf_spans():
    cl = C.uniform(4, 8, nodes_per_leaf=2)
    # a 1-node job on node 0, then a 2-node job: first-fit takes nodes 1 and 2 (two leaves),
    # topology keeps it inside leaf 1 (nodes 2, 3)
    jobs = make_jobs(["one", "two"], [0, 1], [100, 100], [8, 8], units=[0, 2])
    ff = engine.simulate(cl, jobs, "fifo", placement="first-fit")
    topo = engine.simulate(cl, jobs, "fifo", placement="topology")
    assert ff.multi_leaf.tolist() == [False, True]
    assert topo.multi_leaf.tolist() == [False, False]


def test_spread_job_larger_than_a_node():
    jobs = make_jobs(["s"], [0], [10], [12])
    res = engine.simulate(C.uniform(2, 8), jobs, "fifo", record_allocations=True)
    (_, _, _, nodes, milli) = res.allocations[0]
    assert sorted(set(nodes.tolist())) == [0, 1] and milli.sum() == 12_000


def test_preemption_requeues_low_priority_job():
    jobs = make_jobs(["low", "high"], [0, 5], [100, 10], [4, 4], priority=[0, 5])
    res = engine.simulate(C.uniform(1, 4), jobs, "priority-preempt")
    assert res.start_s[1] == 5.0 and res.preemptions == 1
    # low restarts from scratch after high ends at 15
    assert res.start_s[0] == 15.0 and res.end_s[0] == 115.0 and res.requeues[0] == 1


def test_multifactor_fairshare_prefers_light_user():
    # heavy user runs first; when the node frees, the light user's job beats heavy's second job
    jobs = make_jobs(["h1", "h2", "l1"], [0, 1, 2], [100, 100, 100], [4, 4, 4], users=["heavy", "heavy", "light"])
    res = engine.simulate(C.uniform(1, 4), jobs, "multifactor")
    assert res.start_s.tolist() == [0.0, 200.0, 100.0]


def test_node_failure_kills_and_requeues():
    jobs = make_jobs(["a", "b"], [0, 0], [100, 100], [8, 8])
    fail = FailureEvents(np.array([0]), np.array([50.0]), np.array([30.0]))
    res = engine.simulate(C.uniform(2, 8), jobs, "fifo", failures=fail)
    m = metrics.compute(res)
    # job a on node 0 dies at 50, restarts when node 0 is back at 80 (node 1 is busy until 100)
    assert res.start_s[0] == 80.0 and res.end_s[0] == 180.0 and res.first_start_s[0] == 0.0
    assert (m.completed, m.requeued, m.failure_kills) == (2, 1, 1)


def test_failure_without_requeue_kills():
    jobs = make_jobs(["a"], [0], [100], [8])
    fail = FailureEvents(np.array([0]), np.array([50.0]), np.array([30.0]))
    res = engine.simulate(C.uniform(1, 8), jobs, "fifo", failures=fail, requeue_on_failure=False)
    assert res.state[0] == engine.KILLED and res.end_s[0] == 50.0


def test_exponential_failures_are_seeded_and_do_not_overlap():
    a = exponential_failures(50, 1e7, mtbf_h=500, mttr_h=5, seed=3)
    b = exponential_failures(50, 1e7, mtbf_h=500, mttr_h=5, seed=3)
    assert np.array_equal(a.fail_s, b.fail_s) and len(a) > 50
    # mean time to failure close to the MTBF (exponential, ~ hundreds of samples)
    assert 0.6 < len(a) / (50 * 1e7 / (500 * 3600)) < 1.4
    with pytest.raises(SpecError):
        FailureEvents(np.array([0, 0]), np.array([10.0, 15.0]), np.array([10.0, 1.0]))


def test_bad_policy_and_placement():
    jobs = make_jobs(["a"], [0], [1], [1])
    with pytest.raises(SpecError, match="did you mean 'backfill'"):
        engine.simulate(C.uniform(1, 1), jobs, "backfil")
    with pytest.raises(SpecError, match="unknown placement"):
        engine.simulate(C.uniform(1, 1), jobs, "fifo", placement="worst-fit")


def test_cpu_and_memory_strand_gpus():
    # two 4-GPU nodes; node 0 has CPU for only one 10-core pod, so the second 1-GPU pod goes to node 1
    cl = C.SchedCluster("cpu", np.array([4, 4]), np.array([0, 0]), ("gpu",), np.array([0, 0]),
                        cpu_milli=np.array([16000, 64000]), memory_mib=np.array([65536, 65536]))
    jobs = make_jobs(["a", "b", "c"], [0, 0, 0], [10, 10, 10], [1, 1, 1], cpu_milli=[10000, 10000, 10000],
                     memory_mib=[1024, 1024, 60000])
    res = engine.simulate(cl, jobs, "fifo", record_allocations=True)
    nodes = {jobs.ids[j]: n.tolist() for j, _, _, n, _ in res.allocations}
    assert nodes["a"] == [0] and nodes["b"] == [1]
    # c needs 60,000 MiB: node 1 has 64,512 left after b, node 0 has 64,512 after a but no CPU
    assert nodes["c"] == [1] and res.start_s.tolist() == [0.0, 0.0, 0.0]


def test_reliability_model_node_mtbf():
    from clustertwin.sched.failures import reliability_node_mtbf_h

    mtbf = reliability_node_mtbf_h(np.array([8, 8, 2]))
    # Llama 3 calibration: 3.09 h for 2,048 nodes of 8 GPUs -> about 6,300 h per 8-GPU node
    assert 5500 < mtbf[0] < 7000 and mtbf[0] == mtbf[1] and mtbf[2] > mtbf[0]
    ev = exponential_failures(3, 1e9, mtbf_h=mtbf, mttr_h=4, seed=0)
    counts = np.bincount(ev.node, minlength=3)
    assert counts[2] < counts[0]  # the 2-GPU node fails less often


def test_elastic_head_starts_smaller_and_runs_longer():
    # 8-GPU node, 6 busy until 100: an elastic 4-GPU job (min 2) starts at once on 2 GPUs and runs 2x longer
    jobs = make_jobs(["busy", "el"], [0, 1], [100, 50], [6, 4], min_gpus=[0, 2])
    res = engine.simulate(C.uniform(1, 8), jobs, "fifo")
    assert res.start_s.tolist() == [0.0, 1.0] and res.end_s[1] == 101.0
    rigid = engine.simulate(C.uniform(1, 8), make_jobs(["busy", "r"], [0, 1], [100, 50], [6, 4]), "fifo")
    assert rigid.start_s[1] == 100.0 and rigid.end_s[1] == 150.0
    with pytest.raises(SpecError, match="elastic"):
        make_jobs(["x"], [0], [1], [2], min_gpus=[3])


def test_a_static_order_as_priorities_keeps_its_rank() -> None:
    """The base QueueOrder's priorities are minus the static rank: sorting by them reproduces the order."""
    from types import SimpleNamespace

    import numpy as np

    from clustertwin.sched.policy import ShortestJobFirst

    class Jobs(SimpleNamespace):
        def __len__(self) -> int:
            return len(self.submit_s)

    jobs = Jobs(submit_s=np.array([0.0, 0.0, 5.0, 1.0]), limit_s=np.array([50.0, 10.0, 1.0, 5.0]))
    order = ShortestJobFirst()
    _, by_rank = order.rank(jobs)
    q = np.array([2, 0, 3, 1])
    prio = order.priorities(0.0, q, SimpleNamespace(jobs=jobs))
    assert q[np.argsort(-prio, kind="stable")].tolist() == by_rank.tolist()
