"""The spread-job and whole-GPU-group fast paths give the schedules of the general paths.

Fast paths checked (issue 31, speed on real load): spread jobs (GPUs over any nodes) placed from the count
of wholly free GPUs and the per-count node bit masks instead of the per-node contribution array; the
reservation's projection for a spread head counting wholly free GPUs slot by slot instead of per node
contribution; allocations of whole GPUs taken and released node by node (``Allocation.groups``) instead of
entry by entry. The reference simulator routes spread requests through the general placement, builds its
projections on the general per-node path and strips ``groups`` from every allocation.
"""

from __future__ import annotations

import numpy as np
import pytest

from clustertwin.sched import backfill, engine
from clustertwin.sched import cluster as C
from clustertwin.sched.failures import exponential_failures
from clustertwin.sched.jobs import make_jobs
from clustertwin.sched.placement import Placer
from clustertwin.sched.projection import Projection
from clustertwin.sched.state import Allocation, ClusterState, Request

CLUSTER = C.uniform(12, 8, nodes_per_leaf=4)


def _trace(seed: int, n: int = 400):
    """A heavy-tailed mix in the shape of the benchmark's SWF mix: many spread jobs of 12-64 GPUs."""
    rng = np.random.default_rng(seed)
    g = rng.choice([1, 1, 1, 2, 4, 8, 8, 12, 16, 24, 32, 64], n)
    run = np.maximum(np.rint(rng.lognormal(5.0, 1.5, n)), 1)
    return make_jobs([f"j{i}" for i in range(n)], np.cumsum(rng.exponential(20.0, n)).round(), run, g,
                     limit_s=np.ceil(run * rng.uniform(1, 3, n)), priority=rng.integers(0, 3, n),
                     users=[f"u{k}" for k in rng.integers(0, 4, n)])


def _plain(alloc: Allocation | None) -> Allocation | None:
    if alloc is None:
        return None
    return Allocation(alloc.entries, alloc.node_list, alloc.total_milli, alloc.cpu, alloc.mem)


class GeneralPlacer(Placer):
    """Spread requests through the per-node contribution path; allocations without ``groups``."""

    def place(self, state, req):
        if req.kind == "spread":
            contrib = state.contribution(req)
            if int(contrib.sum()) < req.need:
                return None
            return _plain(self._spread(state, req, contrib))
        return _plain(super().place(state, req))


class GeneralProjection(Projection):
    """A spread head's projection on the general per-node contribution path."""

    def __init__(self, state, req) -> None:
        super().__init__(state, req)
        if self._spread:
            self._spread = False
            self.total = int(state.contribution(req).sum())


class GeneralSim(engine.Simulator):
    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.placer = GeneralPlacer(self.cfg.placement)


def _outcome(res: engine.SimResult) -> tuple:
    return (res.state.tolist(), res.first_start_s.tolist(), res.start_s.tolist(), res.end_s.tolist(),
            res.timeline_alloc_gpus.tolist(), res.timeline_queued.tolist(),
            res.timeline_fragmented_gpus.tolist(), res.multi_leaf.tolist(), res.preemptions, res.failure_kills,
            [(j, t0, t1, n.tolist(), m.tolist()) for j, t0, t1, n, m in res.allocations])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("policy", ["backfill", "fifo", "priority-preempt"])
@pytest.mark.parametrize("placement", ["first-fit", "best-fit"])
def test_spread_fast_paths_match_general_paths(seed, policy, placement, monkeypatch):
    jobs = _trace(seed)
    fails = exponential_failures(CLUSTER.nodes, float(jobs.submit_s.max()) + 3000, mtbf_h=2.0, mttr_h=0.2,
                                 seed=seed) if seed % 2 else None
    cfg = engine.SimConfig(policy=engine.get_policy(policy), placement=placement, record_allocations=True)
    fast = engine.Simulator(CLUSTER, jobs, cfg, fails).run()
    monkeypatch.setattr(backfill, "Projection", GeneralProjection)
    ref = GeneralSim(CLUSTER, jobs, cfg, fails).run()
    assert _outcome(fast) == _outcome(ref)
    assert fast.first_reservation_s == ref.first_reservation_s
    assert (ref.state == engine.COMPLETED).sum() > len(jobs) // 2  # (the trace ran, not a vacuous match)


def test_grouped_take_and_release_match_entry_by_entry():
    rng = np.random.default_rng(7)
    a, b = ClusterState(CLUSTER), ClusterState(CLUSTER)
    placer = Placer("first-fit")
    held: list[tuple[Allocation, Allocation]] = []
    for _ in range(400):
        if held and rng.random() < 0.45:
            ga, pa = held.pop(int(rng.integers(len(held))))
            a.apply(ga, +1)
            b.apply(pa, +1)
        else:
            g = int(rng.choice([1, 2, 3, 8, 12, 20]))
            req = Request("whole" if g <= 8 else "spread", g, 0, 1, np.ones(CLUSTER.nodes, dtype=bool))
            ga = placer.place(a, req)
            if ga is None:
                continue
            assert ga.groups is not None
            pa = _plain(ga)
            a.apply(ga, -1)
            b.apply(pa, -1)
            held.append((ga, pa))
        assert a.rows == b.rows and a.whole_l == b.whole_l and a.whole_eq == b.whole_eq
        assert a.whole_ge == b.whole_ge and a.whole_count == b.whole_count
        assert a.whole_sum == b.whole_sum == int(np.asarray(a.whole).sum()) and a.free_total == b.free_total
