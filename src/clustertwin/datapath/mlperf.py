"""MLPerf Storage v1.0 (DLIO emulation): how many simulated accelerators a storage system keeps busy.

DLIO replaces each accelerator by a process that reads a batch of ``B`` records of ``r`` bytes and then
sleeps the workload's compute time ``tau`` per batch; accelerator utilisation ``AU = compute / total``
must stay at or above the workload's threshold (unet3d and resnet50 90%, cosmoflow 70%). One accelerator
therefore demands ``d = B r / tau`` bytes per second, and at the threshold it may be fed ``AU x d``. With
``T`` the path's delivered bandwidth (:func:`clustertwin.datapath.path.path_stages` over the benchmark's
client nodes, minimum over the stages):

``accelerators_supported = min(floor(T / (AU x d)), floor(n x cores / c_acc))``, ``throughput = min(T, N x d)``.

The second term is the hosts' CPU: every emulated accelerator is one DLIO process (an MPI rank with its
reader threads and framework runtime) that holds ``c_acc`` host cores whatever its bandwidth
(:data:`DLIO_CORES_PER_ACCELERATOR`), so ``n`` hosts of ``cores`` cores run at most ``n cores / c_acc``
of them. It binds for resnet50's many small-batch accelerators on fast clients (e.g. 144 A100 on one
64-core host, validation row mlps10-mangoboost-...-resnet50-a100).

Workload constants (compute time per batch, batch size, record size, file layout) are MLPerf's v1.0
configuration (validation source ``mlps_v1_repo``: DDN's copy of the workload YAMLs). The benchmark
clients are generic hosts running DLIO, not tuned training nodes: their read ceilings by client
protocol and host cores (:data:`DLIO_CLIENT_GB_PER_S_PER_CORE`), the per-sample CPU cost of DLIO's record parsing and the
cores per emulated accelerator are the only fitted parameters
(:data:`DLIO_PARAMS`), fitted once on all rows of ``validation/data_loading.yaml``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from clustertwin.datapath.dataset import DatasetSpec
from clustertwin.datapath.params import DataParams
from clustertwin.datapath.path import path_stages
from clustertwin.errors import SpecError, did_you_mean
from clustertwin.specs import ClusterSpec, StorageSpec
from clustertwin.specs.node import NICSpec, NodeSpec
from clustertwin.units import GB


@dataclass(frozen=True)
class Workload:
    """One MLPerf Storage v1.0 training workload."""

    name: str
    record_bytes: float
    batch: int
    compute_s_per_batch: dict[str, float]
    """Emulated compute time per batch by accelerator type (``a100``, ``h100``)."""
    min_au: float
    read_pattern: str
    samples_per_file: int
    parse_core_s: float
    """DLIO host CPU core-seconds per record (reader + parse); fitted (module docstring)."""

    def demand_gb_per_s(self, accelerator: str) -> float:
        """``d = B r / tau``: bytes per second one emulated accelerator consumes at 100% AU."""
        return self.batch * self.record_bytes / self.compute_s_per_batch[accelerator] / GB

    def dataset(self) -> DatasetSpec:
        return DatasetSpec(name=f"mlperf-{self.name}", sample_bytes=self.record_bytes,
                           read_pattern=self.read_pattern,  # type: ignore[arg-type]
                           file_bytes=self.record_bytes * self.samples_per_file, decode_core_s=self.parse_core_s)


WORKLOADS: dict[str, Workload] = {
    "unet3d": Workload("unet3d", 146_600_628, 7, {"h100": 0.323, "a100": 0.636}, 0.9, "random", 1, 0.0),
    "resnet50": Workload("resnet50", 114_660, 400, {"h100": 0.224, "a100": 0.435}, 0.9, "sequential", 1251,
                         1.75e-4),
    "cosmoflow": Workload("cosmoflow", 2_828_486, 1, {"h100": 0.00350, "a100": 0.00551}, 0.7, "random", 1,
                          8.0e-3),
}

DLIO_CLIENT_CEILING_GB_PER_S: dict[str, float] = {"lustre": 5.0, "gpfs": 5.0}
DLIO_CLIENT_GB_PER_S_PER_CORE: dict[str, float] = {"lustre": 0.075, "gpfs": 0.075, "nfs": 0.09, "object": 0.09}
"""Per-client read ceiling of a DLIO benchmark host, ``C = a + g x cores`` GB/s by client protocol (``a``:
:data:`DLIO_CLIENT_CEILING_GB_PER_S`, ``g`` per host core; fitted, module docstring). The Lustre and NFS
clients are kernel file systems that spend host CPU on every byte they read (RPC handling, page-cache
insertion and the copy to user space, Lustre's checksums), so a client's ceiling grows with its cores; the
v1.0 rows show it: HPE's 128-core Lustre client read 13.5-14.6 GB/s where its 32-core ones read 5.8-8.6 and
DDN's 20-core ones 5.8, Nutanix's 128-core NFS clients 11.6-12.3 GB/s where its 64-core ones read 5.5-5.9
(over 200 and 3 x 100 Gbit/s NICs). NVMe-oF block volumes, vendor RDMA and FUSE clients have no ceiling
beyond their NICs (fitted ones did not change the median). gpfs and object have no v1.0 rows and take the
lustre and nfs values. Fixed ceilings per protocol (8.1 and 5.8 GB/s) fitted 10.4% in-sample and 20% held
out by submitter; these 10.0% and 11.1% (docs/datapath.md)."""
DLIO_CORES_PER_ACCELERATOR = 0.45
"""Host cores one emulated accelerator (DLIO process) holds, fitted on ``validation/data_loading.yaml``
(median flat for 0.42-0.48; 64 cores / 0.45 = 142 processes vs the 144 A100 MangoBoost ran on one
64-core host)."""
DLIO_ETA_NET = 0.63
"""Fraction of a benchmark host's NIC line rate its reads reach (fitted)."""
DLIO_ETA_STORAGE_NET = 0.52
"""Fraction of the storage servers' port line rate delivered to many DLIO clients (fitted)."""

DLIO_PARAMS = DataParams(eta_net=DLIO_ETA_NET, eta_storage_net=DLIO_ETA_STORAGE_NET, loader_cores_fraction=1.0,
                         serial_client=True,
                         client_ceiling_gb_per_s=DLIO_CLIENT_CEILING_GB_PER_S,
                         client_gb_per_s_per_core=DLIO_CLIENT_GB_PER_S_PER_CORE)
"""DLIO runs one reader per emulated accelerator on every host core (loader fraction 1)."""


@dataclass(frozen=True)
class MLPerfPrediction:
    accelerators_supported: int
    throughput_gb_per_s: float
    delivered_gb_per_s: float
    """``T``: the path's capacity for this workload."""
    demand_gb_per_s_per_accelerator: float
    bottleneck: str
    stages: dict[str, float]
    """Capacity of every stage, GB/s."""

    def to_dict(self) -> dict[str, Any]:
        return {"accelerators_supported": self.accelerators_supported,
                "throughput_gb_per_s": self.throughput_gb_per_s, "delivered_gb_per_s": self.delivered_gb_per_s,
                "demand_gb_per_s_per_accelerator": self.demand_gb_per_s_per_accelerator,
                "bottleneck": self.bottleneck, "stages_gb_per_s": self.stages}


def _workload(name: str) -> Workload:
    if name not in WORKLOADS:
        raise SpecError(f"unknown MLPerf Storage workload '{name}'{did_you_mean(name, WORKLOADS)} "
                        f"(known: {', '.join(WORKLOADS)})", path=("workload",))
    return WORKLOADS[name]


def client_cluster(storage: StorageSpec, client_nodes: int, cores: int, nic_count: int,
                   nic_gbit_per_s: float) -> ClusterSpec:
    """The benchmark hosts as a cluster of GPU-less client nodes (one emulated device slot each)."""
    nics = NICSpec(count=nic_count, gbit_per_s=nic_gbit_per_s)
    node = NodeSpec(gpu="h100-sxm", gpus=1, nics=nics, storage_nics=nics,
                    cpu={"cores": cores, "name": "benchmark host"}, cpus=1, name="DLIO client")
    return ClusterSpec(node=node, nodes=client_nodes, storage=storage)


def mlperf_storage(workload: str, accelerator: str, client_nodes: int, storage: StorageSpec, *,
                   client_cores: int = 64, client_nics: int = 1, client_nic_gbit_per_s: float = 200.0,
                   min_accelerator_utilization: float | None = None,
                   params: DataParams = DLIO_PARAMS, cores_per_accelerator: float = DLIO_CORES_PER_ACCELERATOR,
                   parse_core_s: float | None = None) -> MLPerfPrediction:
    """Predict the MLPerf Storage v1.0 result of ``workload`` on ``client_nodes`` DLIO hosts (module
    docstring). Client defaults (64 cores, 1 x 200 Gbit/s) are a typical v1.0 benchmark host.
    ``cores_per_accelerator`` and ``parse_core_s`` (the workload's parse cost per record) override the
    fitted values (:mod:`clustertwin.datapath.holdout` refits them)."""
    w = _workload(workload)
    if parse_core_s is not None:
        w = replace(w, parse_core_s=float(parse_core_s))
    acc = accelerator.lower()
    if acc not in w.compute_s_per_batch:
        raise SpecError(f"accelerator must be one of {', '.join(w.compute_s_per_batch)} (got '{accelerator}')",
                        path=("gpu",))
    au = w.min_au if min_accelerator_utilization is None else float(min_accelerator_utilization)
    if not 0 < au <= 1:
        raise SpecError(f"min_accelerator_utilization must be in (0, 1] (got {au})")
    cluster = client_cluster(storage, client_nodes, client_cores, client_nics, client_nic_gbit_per_s)
    stages = path_stages(cluster, w.dataset(), client_nodes, params=params)
    rec = w.record_bytes
    by_name = {s.name: s.samples_per_s * rec / GB for s in stages}
    slow = min(by_name, key=by_name.__getitem__)
    t = by_name[slow]
    d = w.demand_gb_per_s(acc)
    n = max(0, math.floor(t / (au * d) + 1e-9))
    n_cpu = math.floor(client_nodes * client_cores / cores_per_accelerator + 1e-9)
    if n_cpu < n:
        n, slow = n_cpu, "client CPU"
    return MLPerfPrediction(accelerators_supported=n, throughput_gb_per_s=min(t, n * d), delivered_gb_per_s=t,
                            demand_gb_per_s_per_accelerator=d, bottleneck=slow, stages=by_name)
