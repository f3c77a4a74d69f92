"""GPU-NIC affinity: DGX H100 preset aligned by default; a reversed mapping crosses sockets and costs
bandwidth and latency; plan warns."""

from __future__ import annotations

import pytest

from clustertwin import catalog
from clustertwin.errors import SpecError
from clustertwin.plan import plan
from clustertwin.specs import ClusterSpec
from clustertwin.specs.loading import build
from clustertwin.topology.affinity import affinity, aligned_mapping


def test_dgx_h100_default_mapping_is_aligned():
    n = catalog.get("node", "dgx-h100")
    assert aligned_mapping(n) == list(range(8))
    a = affinity(n)
    assert a.bandwidth_factor == 1.0 and a.extra_latency_us == 0.0 and not a.misaligned_gpus


def test_reversed_mapping_crosses_the_socket_link():
    n = catalog.get("node", "dgx-h100")
    a = affinity(n, [7, 6, 5, 4, 3, 2, 1, 0])
    assert set(a.relations) == {"SYS"}
    assert a.per_nic_gb_per_s[0] == pytest.approx(64 / 4)  # 4 flows each way share the 64 GB/s UPI
    assert a.bandwidth_factor == pytest.approx(16 / 50)
    same_socket = affinity(n, [2, 3, 0, 1, 6, 7, 4, 5])
    assert set(same_socket.relations) == {"PHB"} and same_socket.bandwidth_factor == 1.0
    assert 0 < same_socket.extra_latency_us < a.extra_latency_us
    with pytest.raises(SpecError, match="gpu_to_nic"):
        affinity(n, [0, 1])


def test_plan_warns_on_misaligned_mapping():
    c = build(ClusterSpec, {"node": {"preset": "dgx-h100", "gpu_to_nic": [7, 6, 5, 4, 3, 2, 1, 0]}, "nodes": 4,
                            "network": {"fabric": "ib-ndr", "topology": "rail-optimized"}})
    assert any("no GPUDirect RDMA" in w for w in plan(c).warnings)
    assert not any("GPUDirect" in w for w in plan(catalog.get("cluster", "ref-1k-h100")).warnings)


def test_pcie_layout_checks():
    with pytest.raises(SpecError, match="twice"):
        build(ClusterSpec, {"node": {"preset": "dgx-h100", "pcie": [{"gpus": [0, 0], "nics": [0]}]}, "nodes": 1})
    four = build(ClusterSpec, {"node": {"preset": "dgx-h100", "gpus": 4}, "nodes": 1}).node
    assert sorted(g for grp in four.pcie for g in grp.gpus) == [0, 1, 2, 3]
    assert build(ClusterSpec, {"node": {"preset": "dgx-h100", "gpus": 72}, "nodes": 1}).node.pcie is None
