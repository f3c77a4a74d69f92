"""The cluster plan: bill of materials, peak compute, memory, network, storage, facility and cost.

:func:`plan` is a pure function of a :class:`~clustertwin.specs.ClusterSpec`; it builds the topology
(:func:`clustertwin.topology.build`), takes the network's countable parts from it and runs the facility
model (:func:`clustertwin.facility.assess`). Formulas:

* peak compute per precision: ``total PFLOP/s = gpus x per-GPU dense peak TFLOP/s / 1000`` (datasheet
  dense peaks, sparsity excluded);
* HBM: ``total TB = gpus x hbm_gb / 1000``; ``total TB/s = gpus x hbm_gb_per_s / 1000``;
* injection bandwidth per GPU: ``node NIC ports x port GB/s / gpus per node`` (port rate from the
  topology);
* storage per GPU: ``aggregate GB/s / gpus``, compared with the 1 GB/s-per-GPU guidance (DDN).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clustertwin import facility, topology
from clustertwin.facility import FacilityReport, NetworkInventory
from clustertwin.facility.assumptions import STORAGE_GB_PER_S_PER_GPU_GUIDANCE
from clustertwin.specs import PRECISIONS, ClusterSpec, SwitchSpec
from clustertwin.topology import Topology
from clustertwin.topology.common import choose_switch
from clustertwin.units import BITS_PER_BYTE

UNNAMED = "cluster"
"""Plan name of a cluster spec without ``name`` or ``id``."""
GB_PER_TB = 1000.0
TFLOPS_PER_PFLOPS = 1000.0
GB_PER_S_PER_TB_PER_S = 1000.0


@dataclass(frozen=True)
class PrecisionPeak:
    """Dense peak of one precision (None where the GPU has no such datatype)."""

    precision: str
    per_gpu_tflops: float | None
    total_pflops: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"per_gpu_tflops": self.per_gpu_tflops, "total_pflops": self.total_pflops}


@dataclass(frozen=True)
class ComputeSection:
    gpu_id: str
    gpu_name: str
    gpus: int
    nodes: int
    gpus_per_node: int
    node_id: str
    peaks: tuple[PrecisionPeak, ...]
    cpu_cores: int | None
    """Host CPU cores in the whole cluster (None when the node names no CPU)."""

    def peak(self, precision: str) -> PrecisionPeak:
        for p in self.peaks:
            if p.precision == precision:
                return p
        raise KeyError(precision)

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu_id,
            "gpu_name": self.gpu_name,
            "node": self.node_id,
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "gpus": self.gpus,
            "cpu_cores": self.cpu_cores,
            "peak": {p.precision: p.to_dict() for p in self.peaks},
        }


@dataclass(frozen=True)
class MemorySection:
    hbm_gb_per_gpu: float
    hbm_total_tb: float
    hbm_tb_per_s_per_gpu: float
    hbm_total_tb_per_s: float
    host_dram_gb_per_node: float
    host_dram_total_tb: float
    local_nvme_total_tb: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class NetworkSection:
    fabric: str
    fabric_kind: str
    port_gbit_per_s: float
    topology: str
    switch: str | None
    switches: dict[str, int]
    switch_count: int
    links: dict[str, int]
    cables: int
    transceivers: int
    bisection_tb_per_s: float
    diameter_hops: int
    avg_hops: float
    oversubscription: float
    injection_gb_per_s_per_gpu: float
    injection_gb_per_s_per_node: float
    scale_up_kind: str
    scale_up_domain_gpus: int
    scale_up_gb_per_s_per_gpu: float
    nodes_per_leaf: int | None
    nodes_per_pod: int | None

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["switches"] = dict(self.switches)
        d["links"] = dict(self.links)
        return d


@dataclass(frozen=True)
class StorageSection:
    kind: str
    read_gb_per_s: float
    write_gb_per_s: float
    read_gb_per_s_per_gpu: float
    write_gb_per_s_per_gpu: float
    capacity_pb: float
    meets_per_gpu_guidance: bool
    """Read and write are both >= STORAGE_GB_PER_S_PER_GPU_GUIDANCE per GPU."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Plan:
    """Everything ``clustertwin plan`` shows about one cluster."""

    name: str
    compute: ComputeSection
    memory: MemorySection
    network: NetworkSection
    storage: StorageSection
    facility: FacilityReport
    breakdown: dict[str, Any] = field(default_factory=dict)
    spec_warnings: tuple[str, ...] = ()
    """Warnings about the cluster spec itself (port rates, GPU-NIC affinity)."""

    @property
    def warnings(self) -> tuple[str, ...]:
        out = list(self.facility.warnings) + list(self.spec_warnings)
        if not self.storage.meets_per_gpu_guidance:
            out.append(
                f"storage gives {self.storage.read_gb_per_s_per_gpu:.2f} GB/s read and "
                f"{self.storage.write_gb_per_s_per_gpu:.2f} GB/s write per GPU, below the "
                f"{STORAGE_GB_PER_S_PER_GPU_GUIDANCE:g} GB/s-per-GPU guidance"
            )
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        fac = self.facility.to_dict()
        return {
            "name": self.name,
            "compute": self.compute.to_dict(),
            "memory": self.memory.to_dict(),
            "network": self.network.to_dict(),
            "storage": self.storage.to_dict(),
            "facility": {
                "power": fac["power"],
                "racks": fac["racks"],
                "cooling": fac["cooling"],
                "energy": fac["energy"],
            },
            "cost": {"capex": fac["capex"], "tco": fac["tco"]},
            "warnings": list(self.warnings),
            "breakdown": dict(self.breakdown),
        }


def switch_spec(cluster: ClusterSpec) -> SwitchSpec:
    """The network's switch, chosen as the topology builder does (``network.switch``, else the fabric's
    default switch, else a generic one; :func:`clustertwin.topology.common.choose_switch`)."""
    return choose_switch(cluster).spec


def inventory(cluster: ClusterSpec, topo: Topology) -> NetworkInventory:
    """The network's countable parts from a topology (see :class:`NetworkInventory`).

    Node-side transceivers (powered inside the node): with switches, node links are the ``endpoints``
    cables and switch-switch links the rest, ``cables - endpoints``, each optical at both ends; so the
    optical node links number ``transceivers / 2 - (cables - endpoints)``, one module of each at the
    node (clamped to ``[0, transceivers]``). Without switches (direct torus) every module is in a node."""
    switches = {str(k): int(v) for k, v in topo.switches.items() if int(v) > 0}
    transceivers, cables = int(topo.transceivers), int(topo.cables)
    if switches:
        optical_node_links = transceivers // 2 - (cables - int(topo.endpoints))
        node_xcvr = min(transceivers, max(0, optical_node_links))
    else:
        node_xcvr = transceivers
    return NetworkInventory(
        switches=switches,
        switch=switch_spec(cluster) if switches else None,
        cables=cables,
        transceivers=transceivers,
        node_transceivers=node_xcvr,
        port_gbit_per_s=float(topo.port_gb_per_s) * BITS_PER_BYTE,
    )


def _compute(cluster: ClusterSpec) -> ComputeSection:
    gpu, node = cluster.node.gpu, cluster.node
    n = cluster.total_gpus
    peaks = []
    for p in PRECISIONS:
        per_gpu = gpu.peak_tflops(p)
        peaks.append(PrecisionPeak(p, per_gpu, None if per_gpu is None else n * per_gpu / TFLOPS_PER_PFLOPS))
    cores = cluster.nodes * node.cpus * node.cpu.cores if node.cpu is not None else None
    return ComputeSection(
        gpu_id=gpu.id or gpu.name or "gpu",
        gpu_name=gpu.name or gpu.id or "gpu",
        gpus=n,
        nodes=cluster.nodes,
        gpus_per_node=node.gpus,
        node_id=node.id or node.name or "inline",
        peaks=tuple(peaks),
        cpu_cores=cores,
    )


def _memory(cluster: ClusterSpec) -> MemorySection:
    gpu, node, n = cluster.node.gpu, cluster.node, cluster.total_gpus
    return MemorySection(
        hbm_gb_per_gpu=gpu.hbm_gb,
        hbm_total_tb=n * gpu.hbm_gb / GB_PER_TB,
        hbm_tb_per_s_per_gpu=gpu.hbm_gb_per_s / GB_PER_S_PER_TB_PER_S,
        hbm_total_tb_per_s=n * gpu.hbm_gb_per_s / GB_PER_S_PER_TB_PER_S,
        host_dram_gb_per_node=node.memory_gb,
        host_dram_total_tb=cluster.nodes * node.memory_gb / GB_PER_TB,
        local_nvme_total_tb=cluster.nodes * node.local_nvme_tb,
    )


def _network(cluster: ClusterSpec, topo: Topology, net: NetworkInventory) -> NetworkSection:
    node = cluster.node
    per_node = float(topo.injection_gb_per_s)
    fab = cluster.fabric
    return NetworkSection(
        fabric=fab.id or fab.name or fab.kind,
        fabric_kind=fab.kind,
        port_gbit_per_s=net.port_gbit_per_s,
        topology=str(topo.kind),
        switch=(net.switch.id or net.switch.name) if net.switch is not None else None,
        switches=dict(net.switches),
        switch_count=net.switch_count,
        links={str(k): int(v) for k, v in topo.links.items()},
        cables=net.cables,
        transceivers=net.transceivers,
        bisection_tb_per_s=float(topo.bisection_gb_per_s) / GB_PER_S_PER_TB_PER_S,
        diameter_hops=int(topo.diameter_hops),
        avg_hops=float(topo.avg_hops),
        oversubscription=float(topo.oversubscription),
        injection_gb_per_s_per_gpu=per_node / node.gpus,
        injection_gb_per_s_per_node=per_node,
        scale_up_kind=node.scale_up.kind,
        scale_up_domain_gpus=int(topo.scale_up_domain_gpus),
        scale_up_gb_per_s_per_gpu=node.scale_up_gb_per_s,
        nodes_per_leaf=None if topo.nodes_per_leaf is None else int(topo.nodes_per_leaf),
        nodes_per_pod=None if topo.nodes_per_pod is None else int(topo.nodes_per_pod),
    )


def _storage(cluster: ClusterSpec) -> StorageSection:
    st, n = cluster.storage, cluster.total_gpus
    read, write = st.read_gb_per_s / n, st.write_gb_per_s / n
    return StorageSection(
        kind=st.kind,
        read_gb_per_s=st.read_gb_per_s,
        write_gb_per_s=st.write_gb_per_s,
        read_gb_per_s_per_gpu=read,
        write_gb_per_s_per_gpu=write,
        capacity_pb=st.capacity_pb,
        meets_per_gpu_guidance=min(read, write) >= STORAGE_GB_PER_S_PER_GPU_GUIDANCE,
    )


def plan(cluster: ClusterSpec) -> Plan:
    """The plan of ``cluster``: compute, memory, network, storage, facility and cost sections."""
    topo = topology.build(cluster)
    net = inventory(cluster, topo)
    report = facility.assess(cluster, net)
    return Plan(
        name=cluster.name or cluster.id or UNNAMED,
        compute=_compute(cluster),
        memory=_memory(cluster),
        network=_network(cluster, topo, net),
        storage=_storage(cluster),
        facility=report,
        breakdown={"it_power": dict(report.power.breakdown), "racks": dict(report.racks.breakdown)},
        spec_warnings=_spec_warnings(cluster),
    )


def _spec_warnings(cluster: ClusterSpec) -> tuple[str, ...]:
    """Port-rate mismatches and misaligned GPU-NIC mappings (:mod:`clustertwin.topology.affinity`)."""
    from clustertwin.topology.affinity import affinity_warnings

    return (*cluster.warnings, *affinity_warnings(cluster.node))
