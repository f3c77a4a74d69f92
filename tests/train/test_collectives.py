"""The training model's collective costs equal the comm layer's (sampled once, interpolated)."""

from __future__ import annotations

import numpy as np
import pytest

from clustertwin import catalog
from clustertwin.comm import collective
from clustertwin.train.collectives import collective_time


@pytest.mark.parametrize(("op", "gpus", "rpn"), [("all_reduce", 8, 8), ("all_reduce", 64, 1),
                                                 ("all_gather", 32, 8), ("reduce_scatter", 128, 2),
                                                 ("all_to_all", 16, 8), ("send_recv", 2, 1)])
def test_interpolated_times_match_the_comm_model(op, gpus, rpn):
    c = catalog.get("cluster", "ref-1k-h100")
    sizes = np.array([3e3, 7.7e5, 2.9e7, 1.3e9, 6.1e10])
    direct = np.asarray(collective(c, op, sizes, gpus, ranks_per_node=rpn).time_s)
    ours = collective_time(c, op, sizes, gpus, rpn)
    assert np.allclose(ours, direct, rtol=0.02)
    assert collective_time(c, op, float(sizes[2]), gpus, rpn) == pytest.approx(float(ours[2]))


def test_single_rank_groups_are_free_and_arrays_mix_groups():
    c = catalog.get("cluster", "ref-1k-h100")
    t = collective_time(c, "all_reduce", np.array([1e8, 1e8, 1e8]), np.array([1, 8, 64]), np.array([1, 8, 8]))
    assert t[0] == 0 and 0 < t[1] < t[2]
    assert collective_time(c, "all_reduce", 1e8, 1, 1) == 0.0


def test_grid_cache_is_keyed_by_value():
    from clustertwin import specs
    from clustertwin.train import collectives

    a = specs.load(specs.ClusterSpec, {"node": "dgx-h100", "nodes": 4})
    b = specs.load(specs.ClusterSpec, {"node": "dgx-h100", "nodes": 4})
    slow = specs.load(specs.ClusterSpec, {"node": "dgx-h100", "nodes": 4, "network": {"fabric": "ib-hdr"}})
    assert a is not b
    t_a = collectives._grid_times(a, "all_reduce", 16, 8, None)
    assert collectives._grid_times(b, "all_reduce", 16, 8, None) is t_a  # equal specs share the entry
    assert collectives._grid_times(slow, "all_reduce", 16, 8, None)[-1] > t_a[-1]
