"""Named parameters of the data-path model, each with where its default comes from.

Two client families are distinguished. *Production* clients (a DGX node with a tuned multi-rail
Lustre/GPFS/WEKA client) reach their NICs: DDN measured 96% of 800 Gbit/s per DGX B200 in read and
write (validation source ``ddn_b200_blog``), so the production ceiling is None (NIC-bound). *Benchmark*
clients of MLPerf Storage v1.0 (DLIO on generic hosts) stop far below their NICs; their ceilings per
client protocol are fitted once on ``validation/data_loading.yaml`` (:mod:`clustertwin.datapath.mlperf`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ETA_NET = 0.9
"""Fraction of storage-network line rate a tuned production client's file reads achieve: DDN measured 96%
of 800 Gbit/s per DGX B200 (validation source ``ddn_b200_blog``); the DGX SuperPOD H100 RA targets 80 of
100 GB/s per node. The DLIO benchmark hosts reach less (:data:`clustertwin.datapath.mlperf.DLIO_PARAMS`)."""
METADATA_OPS_PER_FILE = 2.0
"""Metadata operations per file read: open (with lookup) and close (getattr), as counted by mdtest."""
LOADER_CORES_FRACTION = 0.5
"""Share of host cores given to data-loader workers (PyTorch DataLoader ``num_workers`` of ~6-8 per GPU
on a 112-core DGX H100; the rest run the training processes, NCCL proxies and the OS; estimate)."""
LOCAL_NVME_GB_PER_S_PER_TB = 52.0 / 30.72
"""Node-local NVMe read GB/s per TB of cache: the catalog's ``local-nvme-dgx`` (8 x 3.84 TB, 52 GB/s)."""
DEFAULT_HOST_CORES = 64
"""Host cores assumed when a node spec names no CPU."""


@dataclass(frozen=True)
class DataParams:
    """Parameters of :func:`clustertwin.datapath.data_stall` (defaults: module constants)."""

    eta_net: float = ETA_NET
    eta_storage_net: float | None = None
    """Efficiency of the storage servers' ports (None: ``eta_net``); many clients converging on few
    server ports lose more to incast than one client's reads."""
    metadata_ops_per_file: float = METADATA_OPS_PER_FILE
    loader_cores_fraction: float = LOADER_CORES_FRACTION
    local_nvme_gb_per_s_per_tb: float = LOCAL_NVME_GB_PER_S_PER_TB
    default_host_cores: int = DEFAULT_HOST_CORES
    serial_client: bool = False
    """True: a client's readers read and then parse each sample in turn (DLIO), so the client's rate is
    the harmonic combination ``1 / (b / min(NICs, ceiling) + decode_core_s / cores)`` (one ``client host``
    stage); False: many loader workers overlap I/O and decode, each a separate stage (PyTorch DataLoader)."""
    client_ceiling_gb_per_s: dict[str, float] = field(default_factory=dict)
    """Fixed part ``a`` of the per-client software ceiling ``C = a + g x cores`` by client protocol
    (``StorageSpec.client_kind``), GB/s; empty for production clients (NIC-bound)."""
    client_gb_per_s_per_core: dict[str, float] = field(default_factory=dict)
    """Per-core part ``g`` of that ceiling, GB/s per host core: a kernel file-system client (Lustre, NFS)
    spends host CPU on every byte it reads (RPC handling, page-cache insertion and the copy to user space,
    Lustre's checksums), so its ceiling grows with the host's cores; empty for production clients."""


DEFAULT_DATA_PARAMS = DataParams()
