"""Checkpoint size, write/load time, and the optimal checkpoint interval (Young 1974, Daly 2006).

Size: parameters × 14 bytes (16-bit weights 2 B + fp32 master weights 4 B + Adam m and v 8 B), the
BLOOM checkpoint convention (BigScience, BLOOM 176B training notes, arXiv 2211.05100). Write and load: the checkpoint is sharded over every
node of the job (distributed checkpointing), so the aggregate bandwidth is the storage system's,
capped by the nodes' own storage links: ``bw = min(storage_gb_per_s, nodes × node_gb_per_s)``.

Synchronous save (``torch.save``/DCP save): the job stalls for the device-to-host copy and the write,
``δ_sync = snapshot + write``. Asynchronous save (PyTorch DCP ``async_save``; ByteCheckpoint; Gemini):
the job stalls only for the snapshot into host memory (``δ_async = snapshot``), the write runs in the
background and the checkpoint becomes durable ``write`` seconds later. PyTorch measured a 7B model's
stall going from 148.8 s to 6.3 s this way (pytorch.org/blog/reducing-checkpointing-times).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clustertwin.errors import SpecError
from clustertwin.specs import ClusterSpec, ModelSpec
from clustertwin.train.flops import param_count
from clustertwin.units import BITS_PER_BYTE, GB, PCIE_X16_GB_PER_S

CHECKPOINT_BYTES_PER_PARAM = 14.0
"""bf16 weights 2 B + fp32 master weights 4 B + fp32 Adam m, v 8 B (BLOOM checkpoint convention)."""
D2H_EFFICIENCY = 0.8
"""Fraction of PCIe x16 line rate a pinned device-to-host copy reaches (CUDA bandwidthTest on Gen4 and
Gen5 hosts: about 25 of 31.5 and 50 of 63 GB/s)."""
STORAGE_PORTS_PER_NODE = 1
"""Storage traffic of one node is assumed to get one fabric port's line rate (DGX SuperPOD H100 puts
storage on its own ConnectX-7 ports of the same 400G class); override ``node_storage_gb_per_s``."""


def checkpoint_bytes(model: ModelSpec, bytes_per_param: float = CHECKPOINT_BYTES_PER_PARAM) -> float:
    """Full training-state checkpoint: ``param_count × bytes_per_param`` (default 14 B, BLOOM), with the
    training model's parameter count (:func:`clustertwin.train.flops.param_count`)."""
    return float(param_count(model)) * bytes_per_param


@dataclass(frozen=True)
class CheckpointCost:
    """Time to save and load one checkpoint of ``bytes`` sharded over ``gpus`` GPUs on ``nodes`` nodes."""

    bytes: float
    gpus: int
    nodes: int
    write_gb_per_s: float
    """Effective aggregate write bandwidth, ``min(storage write, nodes × node link)``."""
    read_gb_per_s: float
    """Effective aggregate read bandwidth, ``min(storage read, nodes × node link)``."""
    snapshot_s: float
    """Device-to-host copy of each GPU's shard: ``bytes / gpus / d2h_gb_per_s``."""
    write_s: float
    """``bytes / write bandwidth``."""
    load_s: float
    """``bytes / read bandwidth``."""
    host_bytes_per_node: float
    """Host memory an asynchronous snapshot needs on each node: ``bytes / nodes``."""

    @property
    def sync_blocking_s(self) -> float:
        """Stall of a synchronous save: snapshot + write."""
        return self.snapshot_s + self.write_s

    @property
    def async_blocking_s(self) -> float:
        """Stall of an asynchronous save: the snapshot only (the write runs in the background)."""
        return self.snapshot_s

    @property
    def breakdown(self) -> dict[str, object]:
        return {
            "formula": "write_s = bytes / min(storage_write, nodes x node_link); load_s likewise with read; "
                       "snapshot_s = bytes / gpus / d2h; sync stall = snapshot + write; async stall = snapshot",
            "bytes": self.bytes, "write_gb_per_s": self.write_gb_per_s, "read_gb_per_s": self.read_gb_per_s,
            "snapshot_s": self.snapshot_s, "write_s": self.write_s, "load_s": self.load_s,
        }

    def to_dict(self) -> dict[str, object]:
        return {"bytes": self.bytes, "gb": self.bytes / GB, "write_s": self.write_s, "load_s": self.load_s,
                "snapshot_s": self.snapshot_s, "sync_blocking_s": self.sync_blocking_s,
                "async_blocking_s": self.async_blocking_s, "write_gb_per_s": self.write_gb_per_s,
                "read_gb_per_s": self.read_gb_per_s, "host_bytes_per_node": self.host_bytes_per_node,
                "breakdown": self.breakdown}


def checkpoint_cost(ckpt_bytes: float, gpus: int, nodes: int, storage_write_gb_per_s: float,
                    storage_read_gb_per_s: float, node_storage_gb_per_s: float,
                    d2h_gb_per_s: float) -> CheckpointCost:
    """Save/load times of a sharded checkpoint (formulas in :class:`CheckpointCost`)."""
    for name, v in (("checkpoint bytes", ckpt_bytes), ("storage write GB/s", storage_write_gb_per_s),
                    ("storage read GB/s", storage_read_gb_per_s), ("node storage GB/s", node_storage_gb_per_s),
                    ("device-to-host GB/s", d2h_gb_per_s)):
        if not (math.isfinite(v) and v > 0):
            raise SpecError(f"{name} must be a finite number > 0 (got {v!r})")
    if gpus <= 0 or nodes <= 0:
        raise SpecError(f"gpus ({gpus}) and nodes ({nodes}) must be > 0")
    wbw = min(storage_write_gb_per_s, nodes * node_storage_gb_per_s)
    rbw = min(storage_read_gb_per_s, nodes * node_storage_gb_per_s)
    return CheckpointCost(
        bytes=ckpt_bytes, gpus=gpus, nodes=nodes, write_gb_per_s=wbw, read_gb_per_s=rbw,
        snapshot_s=ckpt_bytes / gpus / (d2h_gb_per_s * GB), write_s=ckpt_bytes / (wbw * GB),
        load_s=ckpt_bytes / (rbw * GB), host_bytes_per_node=ckpt_bytes / nodes,
    )


def cluster_checkpoint_cost(cluster: ClusterSpec, gpus: int, ckpt_bytes: float,
                            node_storage_gb_per_s: float | None = None,
                            d2h_gb_per_s: float | None = None) -> CheckpointCost:
    """:func:`checkpoint_cost` with bandwidths from a cluster spec: storage write/read GB/s, node link =
    ``STORAGE_PORTS_PER_NODE × nics.gbit_per_s / 8``, D2H = ``D2H_EFFICIENCY × PCIe x16`` of the GPU."""
    node = cluster.node
    nodes = math.ceil(gpus / node.gpus)
    if node_storage_gb_per_s is None and node.storage_nics is not None:  # the node's own storage NICs
        node_storage_gb_per_s = node.storage_nics.count * node.storage_nics.gbit_per_s / BITS_PER_BYTE
    if node_storage_gb_per_s is None:
        node_storage_gb_per_s = STORAGE_PORTS_PER_NODE * node.nics.gbit_per_s / BITS_PER_BYTE
    if d2h_gb_per_s is None:
        gen = node.gpu.pcie_gen
        if gen not in PCIE_X16_GB_PER_S:
            raise SpecError(f"no PCIe x16 bandwidth known for generation {gen} "
                            f"(known: {sorted(PCIE_X16_GB_PER_S)})", path=("node", "gpu", "pcie_gen"))
        d2h_gb_per_s = D2H_EFFICIENCY * PCIE_X16_GB_PER_S[gen]
    return checkpoint_cost(ckpt_bytes, gpus, nodes, cluster.storage.write_gb_per_s,
                           cluster.storage.read_gb_per_s, node_storage_gb_per_s, d2h_gb_per_s)


def young_interval_s(delta_s: float, mtbf_s: float) -> float:
    """Young (CACM 17(9), 1974): compute time between checkpoints ``τ = sqrt(2 δ M)``
    (δ = checkpoint stall, M = job MTBF)."""
    _check_interval_inputs(delta_s, mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s)


def daly_interval_s(delta_s: float, mtbf_s: float) -> float:
    """Daly (FGCS 22(3):303-312, 2006), higher-order optimum of the exponential-failure wall-time model
    ``T_w(τ) = M e^{R/M} (e^{(τ+δ)/M} − 1) T_s / τ``:

    ``τ = sqrt(2δM) [1 + (1/3) sqrt(δ/(2M)) + (1/9) (δ/(2M))] − δ`` for ``δ < 2M``; ``τ = M`` otherwise.
    With δ = 5 min it gives 116.7 / 56.7 / 9.1 min for M = 24 h / 6 h / 15 min (Daly's own cases)."""
    _check_interval_inputs(delta_s, mtbf_s)
    if delta_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = delta_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta_s


def _check_interval_inputs(delta_s: float, mtbf_s: float) -> None:
    if not (delta_s > 0 and math.isfinite(delta_s)):
        raise SpecError(f"checkpoint stall must be a finite number > 0 s (got {delta_s!r})")
    if not mtbf_s > 0:
        raise SpecError(f"MTBF must be > 0 s (got {mtbf_s!r})")
