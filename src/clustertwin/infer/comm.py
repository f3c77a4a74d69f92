"""Tensor- and pipeline-parallel communication of one inference replica.

Megatron-style TP needs two all-reduces of the layer's activations per transformer layer (after the
attention output projection and after the FFN down projection); messages are small in decode
(``tokens × hidden × 2`` bytes), so latency matters: they are costed by the collective model
(``clustertwin.comm.collective``). Pipeline stages hand ``tokens × hidden × 2`` bytes to the next stage,
``t = α + n / (B_link · η)`` with ``α = tp_allreduce_latency_us`` and ``η = tp_link_efficiency``
(InferParams) and ``B_link`` the per-GPU per-direction scale-up bandwidth (NVLink/Infinity Fabric/HCCS)
of the node, or PCIe x16 when it has none, inside a node, and the NIC across nodes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from clustertwin import units
from clustertwin.comm import collective
from clustertwin.infer.params import InferParams
from clustertwin.specs.calibration import Calibration
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.specs.node import NodeSpec


def link_gb_per_s(node: NodeSpec) -> float:
    """Per-GPU per-direction bandwidth between GPUs of one node, GB/s (PCIe x16 without scale-up)."""
    if node.scale_up_gb_per_s > 0 and node.scale_up.kind not in ("none", "pcie"):
        return node.scale_up_gb_per_s
    if node.scale_up.kind == "pcie" and node.scale_up_gb_per_s > 0:
        return node.scale_up_gb_per_s
    return units.pcie_x16_gb_per_s(node.gpu.pcie_gen)


def allreduce_fn(node: NodeSpec, tp: int, params: InferParams,
                 calibration: Calibration | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """A vectorised ``nbytes -> seconds`` all-reduce cost over ``tp`` GPUs of ``node`` (0 for tp=1)."""
    if tp <= 1:
        return lambda nbytes: np.zeros_like(np.asarray(nbytes, dtype=float))
    cluster = ClusterSpec(node=node, nodes=max(1, math.ceil(tp / node.gpus)))

    def via_comm(nbytes: np.ndarray) -> np.ndarray:
        res = collective(cluster, "all_reduce", np.asarray(nbytes, dtype=float), tp,
                         ranks_per_node=min(tp, node.gpus), calibration=calibration)
        return np.asarray(res.time_s, dtype=float)

    return via_comm


def p2p_fn(node: NodeSpec, tp: int, pp: int, params: InferParams) -> Callable[[np.ndarray], np.ndarray]:
    """Vectorised ``nbytes -> seconds`` for one pipeline hand-off (scale-up inside a node, NIC across)."""
    if pp <= 1:
        return lambda nbytes: np.zeros_like(np.asarray(nbytes, dtype=float))
    inside = tp * pp <= node.gpus
    if inside:
        bw = link_gb_per_s(node) * units.GB * params.tp_link_efficiency
    else:
        bw = units.gbit_to_gb_per_s(node.nics.gbit_per_s) * units.GB * params.kv_transfer_efficiency
    lat = params.tp_allreduce_latency_us * units.US

    def send(nbytes: np.ndarray) -> np.ndarray:
        return lat + np.asarray(nbytes, dtype=float) / bw

    return send
