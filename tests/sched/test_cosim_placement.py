"""``leaf-packed`` and ``random`` placements (clustertwin.sched.placement_net) through the engine."""

from __future__ import annotations

import numpy as np
import pytest

from clustertwin.errors import SpecError
from clustertwin.sched import cluster as sched_cluster
from clustertwin.sched import engine
from clustertwin.sched.jobs import make_jobs


def _jobs():
    # a, b, c take nodes 0, 1 (leaf 0) and 2 (leaf 1); a ends at 10 s; e needs two nodes at 20 s, when the
    # free nodes 0 and 3 sit on different leaves; b ends at 500 s
    return make_jobs(["a", "b", "c", "e"], [0.0, 0.0, 0.0, 20.0], [10.0, 500.0, 2000.0, 100.0], [8, 8, 8, 8],
                     units=[1, 1, 1, 2])


def test_leaf_packed_waits_for_one_leaf_topology_does_not():
    cl = sched_cluster.uniform(4, 8, nodes_per_leaf=2)
    jobs = _jobs()
    for spread in ("first-fit", "topology"):
        res = engine.simulate(cl, jobs, "fifo", placement=spread)
        assert res.start_s[3] == 20.0 and res.multi_leaf[3]
    packed = engine.simulate(cl, jobs, "fifo", placement="leaf-packed")
    assert packed.start_s[3] == 500.0 and not packed.multi_leaf[3]  # waits until one leaf holds it


def test_random_placement_is_seeded_and_scatters():
    cl = sched_cluster.uniform(64, 8, nodes_per_leaf=8)
    n = 200
    rng = np.random.default_rng(0)
    jobs = make_jobs([str(i) for i in range(n)], np.cumsum(rng.exponential(50.0, n)), rng.uniform(100, 2000, n),
                     np.full(n, 8), units=rng.choice([1, 2, 4], n))
    a = engine.simulate(cl, jobs, "backfill", placement="random")
    b = engine.simulate(cl, jobs, "backfill", placement="random")
    topo = engine.simulate(cl, jobs, "backfill", placement="topology")
    np.testing.assert_array_equal(a.start_s, b.start_s)
    assert a.multi_leaf.sum() > 2 * topo.multi_leaf.sum()
    cfg = engine.SimConfig(policy=engine.get_policy("backfill"), placement="random", placement_seed=7)
    c = engine.Simulator(cl, jobs, cfg).run()
    assert not np.array_equal(c.multi_leaf, a.multi_leaf) or not np.array_equal(c.start_s, a.start_s)


def test_unknown_placement_names_the_choices():
    cl = sched_cluster.uniform(2, 8)
    with pytest.raises(SpecError, match="did you mean 'random'"):
        engine.simulate(cl, _jobs(), "fifo", placement="randm")
