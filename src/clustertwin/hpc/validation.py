"""``hpl`` validation cases (format: validation/README.md): a TOP500/Green500 system given by accelerator,
counts, host CPU and interconnect.

Case keys: ``gpu`` (catalog id or inline GPU spec), ``gpus``, ``nodes``, ``fabric`` (catalog id), optional
``cpu`` (catalog id) with ``cpus_per_node`` (default one socket per four GPUs), optional
``nic_gbit_per_s`` (default the fabric's rate), ``topology`` (default dragonfly+ for Slingshot, else
fat-tree), ``hpl`` (an :class:`~clustertwin.hpc.workloads.HPLSpec`: N, NB, P, Q). Each node gets one NIC per
GPU. Predicted keys: ``rpeak_pflops``, ``rmax_pflops``, ``power_kw``, ``gflops_per_w`` and the run's N,
grid, DGEMM rate and what limits it.
"""

from __future__ import annotations

from typing import Any

from clustertwin import specs
from clustertwin.errors import SpecError, did_you_mean
from clustertwin.hpc.hpl import hpl
from clustertwin.hpc.workloads import HPLSpec
from clustertwin.inputs import CASE_METADATA_KEYS

CASE_KEYS = CASE_METADATA_KEYS | frozenset({"system", "list", "gpu", "gpus", "nodes", "fabric", "cpu",
                                            "cpus_per_node", "nic_gbit_per_s", "topology", "hpl"})
GPUS_PER_SOCKET = 4
"""Default host sockets: one per four GPUs (Frontier, Perlmutter: 1 per 4; DGX-class: 2 per 8)."""


def _scale_up_kind(gpu: specs.GPUSpec, gpus_per_node: int) -> str:
    if gpus_per_node == 1 or gpu.scale_up_gb_per_s == 0:
        return "pcie" if gpus_per_node > 1 else "none"
    if gpu.vendor == "amd":
        return "infinity-fabric"
    if gpu.vendor == "nvidia" and gpus_per_node >= 8:
        return "nvswitch"
    return "nvlink-mesh"


def case_cluster(case: dict[str, Any]) -> tuple[specs.ClusterSpec, int]:
    """The cluster an ``hpl`` case describes and the GPUs that ran HPL."""
    for key in ("gpu", "gpus", "nodes", "fabric"):
        if key not in case:
            raise SpecError("required field missing", path=(key,))
    try:
        gpu = specs.load(specs.GPUSpec, case["gpu"], kind="gpu")
    except SpecError as e:
        raise e.with_context(prefix=("gpu",)) from None
    gpus, nodes = int(case["gpus"]), int(case["nodes"])
    if gpus < 1 or nodes < 1 or nodes > gpus:
        raise SpecError(f"expected 1 <= nodes <= gpus (got nodes={nodes}, gpus={gpus})", path=("nodes",))
    per_node = -(-gpus // nodes)
    fabric = specs.load(specs.FabricSpec, case["fabric"], kind="fabric")
    node: dict[str, Any] = {
        "gpu": gpu.model_dump(exclude_none=True), "gpus": per_node,
        "scale_up": {"kind": _scale_up_kind(gpu, per_node)},
        "nics": {"count": per_node, "gbit_per_s": float(case.get("nic_gbit_per_s") or fabric.gbit_per_s)},
        "cpus": 0,
    }
    if case.get("cpu") is not None:
        node["cpu"] = case["cpu"]
        node["cpus"] = int(case.get("cpus_per_node") or max(1, round(per_node / GPUS_PER_SOCKET)))
    topology = case.get("topology") or ("dragonfly+" if "slingshot" in str(fabric.id) else "fat-tree")
    data = {"name": str(case.get("system") or case.get("id") or "hpl-system"), "node": node, "nodes": nodes,
            "network": {"fabric": fabric.model_dump(exclude_none=True), "topology": topology}}
    return specs.build(specs.ClusterSpec, data), gpus


def evaluate(case: dict[str, Any]) -> dict[str, Any]:
    """Predict Rpeak, Rmax, power and GF/W of one TOP500/Green500 system."""
    unknown = sorted(set(case) - CASE_KEYS)
    if unknown:
        raise SpecError(f"unknown key '{unknown[0]}'{did_you_mean(unknown[0], CASE_KEYS)}", path=(unknown[0],))
    cluster, gpus = case_cluster(case)
    spec = specs.build(HPLSpec, {**(case.get("hpl") or {}), "gpus": gpus}, prefix=("hpl",))
    res = hpl(cluster, spec)
    return {
        "rpeak_pflops": round(res.rpeak_pflops, 3),
        "rmax_pflops": round(res.rmax_pflops, 3),
        "power_kw": round(res.power_kw, 1),
        "gflops_per_w": round(res.gflops_per_w, 2),
        "rmax_over_rpeak": round(res.efficiency, 3),
        "n": res.n, "nb": res.nb, "grid": f"{res.p}x{res.q}",
        "dgemm_tflops_per_gpu": round(res.device.dgemm_tflops, 2),
        "limited_by": res.device.limited_by,
    }
