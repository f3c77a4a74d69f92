"""Clusters the collective tests share (catalog presets and inline specs)."""

from __future__ import annotations

import pytest

from clustertwin import specs


def build_cluster(node: object, nodes: int, fabric: str | dict = "ib-ndr", **network: object) -> specs.ClusterSpec:
    """A cluster of ``nodes`` x ``node`` (preset id or inline dict) on ``fabric``."""
    net = {"fabric": fabric, "topology": "rail-optimized", **network}
    return specs.build(specs.ClusterSpec, {"node": node, "nodes": nodes, "network": net})


@pytest.fixture(scope="session")
def ref_cluster() -> specs.ClusterSpec:
    return specs.load(specs.ClusterSpec, "ref-1k-h100", kind="cluster")


@pytest.fixture(scope="session")
def make_cluster():
    """``make_cluster(node, nodes, fabric="ib-ndr", **network)``: a cluster from a node preset or inline spec."""
    return build_cluster
