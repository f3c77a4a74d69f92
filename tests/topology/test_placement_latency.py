"""Placement costs switch latency as well as bandwidth: the hops where the placement puts each group
reach the collective model's network step (``hops x switch_latency_ns``)."""

from __future__ import annotations

import numpy as np
import pytest

from clustertwin import catalog, comm, specs, train
from clustertwin.train.collectives import collective_time
from clustertwin.train.layout import Layouts
from clustertwin.train.topology_comm import net_fractions, net_hops

PP8 = specs.ParallelismSpec(tp=8, pp=8, dp=1, global_batch=64)


@pytest.fixture(scope="module")
def ref():
    return catalog.get("cluster", "ref-1k-h100")


def test_scattered_stages_cross_the_spine(ref):
    lay = Layouts.from_spec(PP8)
    contiguous, scattered = net_hops(ref, lay, 8), net_hops(ref, lay, 8, "scattered")
    assert contiguous["pp"] == 1 and scattered["pp"] == 3  # same leaf vs leaf-spine-leaf
    assert contiguous["tp"] == scattered["tp"] == 0  # inside a node
    # on the non-blocking fabric the bandwidth is the same: only the latency differs
    assert net_fractions(ref, lay, 8) == net_fractions(ref, lay, 8, "scattered")


def test_hops_add_switch_latency_per_network_step(ref):
    small = [collective_time(ref, "send_recv", 4096, 2, 1, None, 1.0, h) for h in (1, 3, 5)]
    assert small[0] < small[1] < small[2]
    ns = ref.fabric.switch_latency_ns
    # one network step of a send/recv: two extra switch traversals per two hops
    assert small[1] - small[0] == pytest.approx(2 * ns * 1e-9, rel=0.05)
    big = [collective_time(ref, "send_recv", 1e9, 2, 1, None, 1.0, h) for h in (1, 5)]
    assert big[1] / big[0] - 1 < 1e-4  # bandwidth-bound messages barely notice
    # the scalar and vectorised paths agree
    vec = collective_time(ref, "send_recv", np.array([4096.0] * 3), 2, 1, None, 1.0, np.array([1, 3, 5]))
    assert vec == pytest.approx(small)
    # the comm model itself takes the hops
    one = comm.collective(ref, "send_recv", 4096, 2, ranks_per_node=1).time_s
    assert comm.collective(ref, "send_recv", 4096, 2, ranks_per_node=1, net_hops=3).time_s == pytest.approx(
        small[1])
    assert one == pytest.approx(small[0])


def test_scattered_placement_slows_small_pipeline_messages_on_a_nonblocking_fabric():
    m = catalog.get("model", "llama3-8b")
    c = catalog.get("cluster", "a100-512-1gbe")  # 12.3 us store-and-forward per 1 GbE switch
    con = train.estimate(m, c, PP8, placement="contiguous")
    sca = train.estimate(m, c, PP8, placement="scattered")
    assert con.net_fractions == sca.net_fractions
    assert (con.net_hops["pp"], sca.net_hops["pp"]) == (1, 3) and sca.to_dict()["net_hops"]["tp"] == 0
    assert sca.breakdown["pp_comm"] > con.breakdown["pp_comm"]
    assert sca.breakdown["tp_comm"] == con.breakdown["tp_comm"]
    assert sca.step_time_s > con.step_time_s


def test_negative_hops_is_an_error(ref):
    from clustertwin.errors import SpecError

    with pytest.raises(SpecError, match="net_hops must be >= 0"):
        comm.collective(ref, "all_reduce", 1e6, 16, net_hops=-1)
