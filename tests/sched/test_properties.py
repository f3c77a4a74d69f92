"""Property tests: no node over-allocated, no job lost, backfill never delays the head's reservation."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustertwin.sched import cluster as C
from clustertwin.sched import engine, federation, metrics, partitions
from clustertwin.sched.failures import exponential_failures
from clustertwin.sched.jobs import MILLI_PER_GPU, make_jobs
from clustertwin.sched.placement import PLACEMENTS

_BASE = C.uniform(4, 4, nodes_per_leaf=2)
# CPU per node: two CPU-rich and two CPU-poor nodes, so CPU strands GPUs as in the PAI node list
CLUSTER = C.SchedCluster("prop", _BASE.gpus, _BASE.model_code, _BASE.models, _BASE.leaf,
                         cpu_milli=np.array([32000, 8000, 32000, 8000]), memory_mib=np.full(4, 65536))
GPU_CHOICES = [0.25, 0.5, 1, 2, 3, 4, 6, 8, 20]


@st.composite
def job_tables(draw, max_jobs: int = 25):
    n = draw(st.integers(1, max_jobs))
    gaps = draw(st.lists(st.integers(0, 30), min_size=n, max_size=n))
    runtime = draw(st.lists(st.integers(0, 100), min_size=n, max_size=n))
    slack = draw(st.lists(st.integers(-20, 60), min_size=n, max_size=n))
    gpus = draw(st.lists(st.sampled_from(GPU_CHOICES), min_size=n, max_size=n))
    units = [draw(st.sampled_from([0, 2])) if g in (1, 2, 4) else 0 for g in gpus]
    prio = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    users = draw(st.lists(st.sampled_from(["u1", "u2", "u3"]), min_size=n, max_size=n))
    cpu = draw(st.lists(st.sampled_from([0, 2000, 6000, 12000]), min_size=n, max_size=n))
    # some rigid multi-GPU jobs are elastic down to 1 GPU
    min_gpus = [draw(st.sampled_from([0, 1])) if u == 0 and g >= 2 else 0 for g, u in zip(gpus, units, strict=True)]
    limit = [max(r + s, 1) for r, s in zip(runtime, slack, strict=True)]
    return make_jobs([f"j{i}" for i in range(n)], np.cumsum(gaps), runtime, gpus, units=units, limit_s=limit,
                     priority=prio, users=users, cpu_milli=cpu, min_gpus=min_gpus)


def _check_no_overallocation(res: engine.SimResult) -> None:
    """Sweep every node's takes and releases of GPU milli-capacity and CPU; neither may exceed the node."""
    jobs = res.jobs
    events: dict[int, list[tuple[float, int, int, int]]] = defaultdict(list)
    for j, t0, t1, nodes, milli in res.allocations:
        if t1 == t0:  # a zero-length job holds nothing over any interval
            continue
        spread = jobs.units[j] == 0 and jobs.gpus_per_unit[j] > CLUSTER.max_gpus_per_node
        cpu = 0 if spread else int(jobs.cpu_milli[j])
        for n, m in zip(nodes.tolist(), milli.tolist(), strict=True):
            events[n].append((t0, 1, m, 0))
            events[n].append((t1, 0, -m, 0))  # at equal times releases (0) sort before takes (1)
        for n in set(nodes.tolist()):
            events[n].append((t0, 1, 0, cpu))
            events[n].append((t1, 0, 0, -cpu))
    for n, evs in events.items():
        held = cpu_held = 0
        for _, _, m, c in sorted(evs):
            held += m
            cpu_held += c
            assert 0 <= held <= CLUSTER.gpus[n] * MILLI_PER_GPU, f"node {n} over-allocated: {held}"
            assert 0 <= cpu_held <= CLUSTER.cpu_milli[n], f"node {n} CPU over-allocated: {cpu_held}"


def _check_none_lost(res: engine.SimResult) -> None:
    states = res.state
    assert set(np.unique(states)) <= {engine.COMPLETED, engine.KILLED, engine.UNSCHEDULABLE}
    unsched = states == engine.UNSCHEDULABLE
    assert np.array_equal(unsched, res.unschedulable)  # only jobs that can never fit never start
    m = metrics.compute(res)
    assert m.completed + m.killed + m.queued + m.running + m.unschedulable == m.submitted == len(res.jobs)
    done = ~unsched
    assert np.all(res.end_s[done] >= res.start_s[done])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=job_tables(), policy=st.sampled_from(list(engine.POLICIES)), placement=st.sampled_from(PLACEMENTS))
def test_no_overallocation_and_none_lost(jobs, policy, placement):
    res = engine.simulate(CLUSTER, jobs, policy, placement=placement, record_allocations=True)
    _check_no_overallocation(res)
    _check_none_lost(res)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=job_tables(), seed=st.integers(0, 1000), policy=st.sampled_from(["fifo", "backfill", "multifactor"]))
def test_failures_keep_accounting(jobs, seed, policy):
    fail = exponential_failures(CLUSTER.nodes, 2000.0, mtbf_h=0.1, mttr_h=0.01, seed=seed)
    res = engine.simulate(CLUSTER, jobs, policy, failures=fail, record_allocations=True)
    _check_no_overallocation(res)
    _check_none_lost(res)
    assert res.failure_kills == int(res.requeues.sum())


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=job_tables(max_jobs=30), placement=st.sampled_from(PLACEMENTS))
def test_backfill_never_delays_head_reservation(jobs, placement):
    res = engine.simulate(CLUSTER, jobs, "backfill", placement=placement)
    for j, reservation in res.first_reservation_s.items():
        assert res.first_start_s[j] <= reservation + 1e-9, (jobs.ids[j], res.first_start_s[j], reservation)


def _conserved(res: engine.SimResult) -> metrics.Metrics:
    m = metrics.compute(res)
    assert m.completed + m.killed + m.queued + m.running + m.unschedulable == m.submitted == len(res.jobs)
    assert set(np.unique(res.state)) <= {engine.QUEUED, engine.RUNNING, engine.COMPLETED, engine.KILLED,
                                         engine.UNSCHEDULABLE}
    return m


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=job_tables(), seed=st.integers(0, 1000), fed=st.sampled_from(federation.FEDERATION_POLICIES),
       policies=st.lists(st.sampled_from(list(engine.POLICIES)), min_size=2, max_size=2))
def test_federation_conserves_jobs_under_failures_requeues_and_preemption(jobs, seed, fed, policies):
    small = C.uniform(2, 4, name="small")
    members = [federation.Member(CLUSTER, policies[0],
                                 failures=exponential_failures(CLUSTER.nodes, 2000.0, mtbf_h=0.1, mttr_h=0.01,
                                                               seed=seed)),
               federation.Member(small, policies[1])]
    fr = federation.simulate_federation(members, jobs, fed, dataset_bytes=5e9, wan_gbps=1.0)
    m = _conserved(fr.combined)
    ran = fr.member_of_job >= 0
    assert np.array_equal(ran, ~np.isnan(fr.combined.first_start_s))
    assert sum(metrics.compute(r).submitted for r in fr.members) == len(jobs)
    assert m.requeued == sum(int(r.requeues.sum()) for r in fr.members)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=job_tables(), layout=st.sampled_from(partitions.LAYOUTS),
       policy=st.sampled_from(list(engine.POLICIES)))
def test_partitions_and_quotas_conserve_jobs(jobs, layout, policy):
    team = jobs.user % 2
    res = partitions.simulate_layout(layout, CLUSTER, jobs, team, ("a", "b"), policy=policy)
    _conserved(res)
