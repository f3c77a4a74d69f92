"""The engine's fast paths give the schedules of straightforward references on random traces.

- Reference reservation walk: when the head's reservation is (re)computed, the running jobs are walked
  in a freshly sorted list by limit end (not the lazily compacted heap), no idle backfill pass is
  skipped, and every window entry is tested in full (not through the per-shape open list).
- Reference placement and projection: every job asks for 1 milli-core of CPU on nodes with practically
  unlimited CPU, which sends placement (first-fit, best-fit) and the reservation's projection through the
  general, per-node contribution paths instead of the whole-GPU bit-mask and one-node fast paths.
- Reference fragmentation: the general numpy measure instead of the whole-GPU histogram.
"""

from __future__ import annotations

import numpy as np
import pytest

from clustertwin.sched import backfill, engine
from clustertwin.sched import cluster as C
from clustertwin.sched.failures import exponential_failures
from clustertwin.sched.jobs import make_jobs
from clustertwin.sched.placement import Placer
from clustertwin.sched.projection import Projection, row_contribution
from clustertwin.sched.state import ClusterState, Request

CLUSTER = C.uniform(10, 8, nodes_per_leaf=4)
BIG_CPU = C.SchedCluster("cpu", CLUSTER.gpus, CLUSTER.model_code, CLUSTER.models, CLUSTER.leaf,
                         cpu_milli=np.full(10, 10**12))


def _trace(seed: int, n: int = 400, cpu: int = 0):
    rng = np.random.default_rng(seed)
    g = rng.choice([1, 1, 1, 2, 4, 8, 3, 16, 24], n)
    units = np.where(np.isin(g, [1, 2, 4, 8]) & (rng.random(n) < 0.15), 2, 0)
    run = rng.integers(1, 600, n)
    return make_jobs([f"j{i}" for i in range(n)], np.cumsum(rng.integers(0, 25, n)), run, g, units=units,
                     limit_s=run + rng.integers(0, 900, n), priority=rng.integers(0, 3, n),
                     users=[f"u{k}" for k in rng.integers(0, 4, n)], cpu_milli=np.full(n, cpu))


class ReferenceReservation(engine.Simulator):
    """EASY backfill whose reservation walks a sorted list of the running jobs, every pass run."""

    def _reserve(self, head: int, t: float):
        if self._res is None or self._res[0] != head:
            proj = Projection(self.state, self.requests[head])
            rel = []
            for key in sorted(self.run_key.values()):
                proj.release(self.alloc[key[2]])
                rel.append(key)
                if proj.fits:
                    break
            self._res = [head, proj, rel]
        proj, rel = self._res[1], self._res[2]
        if not proj.fits:
            return np.inf, proj
        return (max(rel[-1][0], t) if rel else t), proj

    def _backfill(self, t: float, h: int = 0) -> None:
        self._bf_idle = (-1, -1, -1)  # never skip a pass
        super()._backfill(t, h)


def _outcome(res: engine.SimResult) -> tuple:
    return (res.state.tolist(), res.first_start_s.tolist(), res.start_s.tolist(), res.end_s.tolist(),
            res.timeline_alloc_gpus.tolist(), res.timeline_queued.tolist(), res.preemptions, res.failure_kills)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("policy", ["backfill", "sjf-backfill", "multifactor", "priority-preempt"])
def test_reservation_heap_and_idle_skip_match_sorted_walk(seed, policy, monkeypatch):
    jobs = _trace(seed)
    fails = exponential_failures(CLUSTER.nodes, float(jobs.submit_s.max()) + 3000, mtbf_h=3.0, mttr_h=0.2,
                                 seed=seed) if seed % 2 else None
    cfg = engine.SimConfig(policy=engine.get_policy(policy), placement="best-fit" if seed == 2 else "first-fit")
    fast = engine.Simulator(CLUSTER, jobs, cfg, fails).run()
    monkeypatch.setattr(backfill, "_FEW_SHAPES", 0)  # the reference tests every window entry in full
    ref = ReferenceReservation(CLUSTER, jobs, cfg, fails).run()
    assert _outcome(fast) == _outcome(ref)
    assert fast.first_reservation_s == ref.first_reservation_s


class GeneralFragmentation(engine.Simulator):
    """The general numpy fragmentation measure, never the whole-GPU histogram."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._frag_fast = False


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("placement", ["first-fit", "best-fit"])
def test_whole_gpu_fast_paths_match_general_paths(seed, placement):
    cfg = engine.SimConfig(policy=engine.get_policy("backfill"), placement=placement)
    fast = engine.Simulator(CLUSTER, _trace(seed), cfg).run()
    general = GeneralFragmentation(BIG_CPU, _trace(seed, cpu=1), cfg).run()
    assert _outcome(fast) == _outcome(general)
    assert fast.first_reservation_s == general.first_reservation_s
    assert np.array_equal(fast.timeline_fragmented_gpus, general.timeline_fragmented_gpus)


def test_bitmask_placement_and_projection_against_numpy_reference():
    rng = np.random.default_rng(7)
    st = ClusterState(CLUSTER)
    ff, bf = Placer("first-fit"), Placer("best-fit")
    held = []
    for _ in range(400):
        g, units = int(rng.choice([1, 2, 3, 4, 8])), int(rng.choice([1, 1, 2, 3]))
        req = Request("whole", g, 0, units, np.ones(CLUSTER.nodes, dtype=bool))
        ok = np.flatnonzero(st.whole >= g)
        want_ff = ok[:units] if len(ok) >= units else None
        want_bf = ok[np.argsort(st.whole[ok], kind="stable")[:units]] if len(ok) >= units else None
        a, b = ff.place(st, req), bf.place(st, req)
        assert (a is None) == (want_ff is None) and (b is None) == (want_bf is None)
        if a is not None:
            assert list(a.node_list) == want_ff.tolist() and list(b.node_list) == want_bf.tolist()
            # projection: the fast totals equal a from-scratch count over the projected rows
            head = Request("whole", int(rng.choice([2, 4, 8])), 0, 1, req.eligible)
            proj = Projection(st, head)
            for victim in held[-5:]:
                proj.release(victim)
            proj.take_if_still_fits(a)
            rows = [proj.rows.get(n, st.rows[n]) for n in range(CLUSTER.nodes)]
            assert proj.total == sum(row_contribution(head, n, rows[n]) for n in range(CLUSTER.nodes))
            st.apply(a, -1)
            held.append(a)
        if held and rng.random() < 0.45:
            st.apply(held.pop(int(rng.integers(len(held)))), +1)
        assert st.free_total == int(st.tot.sum()) and st.whole_max() == int(st.whole.max())
        assert [r for r in st.rows] == st.free.tolist()
        for g in range(CLUSTER.max_gpus_per_node + 2):
            assert st.nodes_with_whole(g) == sum(1 << int(n) for n in np.flatnonzero(st.whole >= g))
