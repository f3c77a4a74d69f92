"""Topology build + metrics at 1k, 16k and 100k GPUs (target: 16k GPUs well under 5 s on one core).

Run with ``pytest benchmarks`` (pytest-benchmark). Each round builds the topology from the spec and
evaluates the metrics consumers use: every GPU's address (vectorised) and the span of the whole
cluster.
"""

from __future__ import annotations

import numpy as np
import pytest

from clustertwin import catalog, specs
from clustertwin.topology import build

SPLIT_800G_SWITCH = {"name": "51.2T switch as 128 x 400G", "ports": 64, "port_gbit_per_s": 800}
"""64 x 800G ports split to 128 x 400G: the radix a 100k-GPU 3-tier fat-tree needs."""

CLUSTERS = {
    "1k-rail-2tier": lambda: catalog.get("cluster", "ref-1k-h100"),
    "16k-fat-tree-3tier": lambda: specs.load(
        specs.ClusterSpec,
        {
            "node": "dgx-h100",
            "nodes": 2048,
            "network": {"fabric": "ib-ndr", "topology": "fat-tree", "tiers": 3},
        },
    ),
    "100k-fat-tree-3tier": lambda: specs.load(
        specs.ClusterSpec,
        {
            "node": "dgx-h100",
            "nodes": 12_500,
            "network": {"fabric": "ib-ndr", "topology": "fat-tree", "tiers": 3, "switch": SPLIT_800G_SWITCH},
        },
    ),
    "100k-rail-3tier": lambda: specs.load(
        specs.ClusterSpec,
        {
            "node": "dgx-h100",
            "nodes": 12_500,
            "network": {"fabric": "ib-ndr", "topology": "rail-optimized", "switch": SPLIT_800G_SWITCH},
        },
    ),
}


def build_and_measure(cluster: specs.ClusterSpec) -> float:
    topo = build(cluster)
    addr = topo.gpu_address(np.arange(topo.gpus))
    span = topo.span(topo.nodes)
    return topo.bisection_gb_per_s + topo.avg_hops + float(addr["leaf"][-1]) + span.a2a_bw_fraction


@pytest.mark.parametrize("name", list(CLUSTERS))
def test_build_and_metrics(benchmark, name: str) -> None:
    cluster = CLUSTERS[name]()
    result = benchmark(build_and_measure, cluster)
    assert result > 0
