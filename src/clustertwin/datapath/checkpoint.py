"""Checkpoint write and restart read over the data path: the same stages as training reads
(storage system, storage network, client NICs), in the write direction for a save and the read direction
for the load after a restart.

``write_gb_per_s = min(storage write, eta_net x storage ports, eta_net x nodes x node storage NICs)``
and likewise for reads with the storage read figure. A sharded checkpoint (PyTorch DCP, Megatron
distributed checkpointing) spreads its bytes over every node of the job, so all ``nodes`` clients write
in parallel. Time = bytes / bandwidth. :func:`clustertwin.reliability.checkpoint.cluster_checkpoint_cost`
uses the same node storage link (``node.storage_nics`` when the node gives them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from clustertwin.datapath.params import DEFAULT_DATA_PARAMS, DataParams
from clustertwin.datapath.path import node_storage_gb_per_s
from clustertwin.errors import SpecError
from clustertwin.specs import ClusterSpec
from clustertwin.units import BITS_PER_BYTE, GB


@dataclass(frozen=True)
class CheckpointPath:
    """Checkpoint save and restart-load over the path, with the binding stage of each direction."""

    bytes: float
    nodes: int
    write_gb_per_s: float
    read_gb_per_s: float
    write_s: float
    read_s: float
    write_bottleneck: str
    read_bottleneck: str
    write_stages: dict[str, float]
    read_stages: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "nodes": self.nodes, "write_gb_per_s": self.write_gb_per_s,
                "read_gb_per_s": self.read_gb_per_s, "write_s": self.write_s, "read_s": self.read_s,
                "write_bottleneck": self.write_bottleneck, "read_bottleneck": self.read_bottleneck,
                "write_stages_gb_per_s": self.write_stages, "read_stages_gb_per_s": self.read_stages}


def checkpoint_path(cluster: ClusterSpec, gpus: int, ckpt_bytes: float,
                    params: DataParams = DEFAULT_DATA_PARAMS) -> CheckpointPath:
    """Write and restart-read time of a ``ckpt_bytes`` checkpoint sharded over the job's nodes."""
    if not (math.isfinite(ckpt_bytes) and ckpt_bytes > 0):
        raise SpecError(f"checkpoint bytes must be a finite number > 0 (got {ckpt_bytes!r})")
    if gpus < 1 or gpus > cluster.total_gpus:
        raise SpecError(f"gpus must be 1..{cluster.total_gpus} (got {gpus})")
    nodes = math.ceil(gpus / cluster.node.gpus)
    st = cluster.storage
    common: dict[str, float] = {"client NICs": params.eta_net * nodes * node_storage_gb_per_s(cluster)}
    if st.network_gbit_per_s is not None:
        common["storage network"] = params.eta_net * st.network_gbit_per_s / BITS_PER_BYTE
    write = {"storage write": st.write_gb_per_s, **common}
    read = {"storage read": st.read_gb_per_s, **common}
    wname = min(write, key=write.__getitem__)
    rname = min(read, key=read.__getitem__)
    return CheckpointPath(bytes=ckpt_bytes, nodes=nodes, write_gb_per_s=write[wname], read_gb_per_s=read[rname],
                          write_s=ckpt_bytes / (write[wname] * GB), read_s=ckpt_bytes / (read[rname] * GB),
                          write_bottleneck=wname, read_bottleneck=rname, write_stages=write, read_stages=read)
