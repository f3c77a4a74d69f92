"""The read path from shared storage to the GPUs' host memory, its capacity stage by stage, and the
data-loading stall it adds to a training step.

Every stage is a rate in samples per second for the job's ``n`` client nodes; the delivered rate is the
minimum (the stages run concurrently as a pipeline: storage servers, wires, client file-system code,
decode workers). With ``b`` bytes per sample, ``h`` the local-cache hit rate and ``f`` file opens per
sample:

======================  =================================================================================
stage                   samples/s
======================  =================================================================================
storage read            ``R_read / ((1-h) b)``  (``R_read``: the system's aggregate read GB/s)
storage IOPS            ``IOPS x req / ((1-h) b)`` for random reads of ``req`` bytes (4 KiB IOPS figures
                        count one request each; None = not published, no limit)
metadata                ``MD / (OPS_PER_FILE x f (1-h))`` (file opens/s of the metadata servers)
storage network         ``eta_net x L_storage / ((1-h) b)``  (servers' client-facing line rate)
client NICs             ``eta_net x n x L_node / ((1-h) b)``  (each node's storage NICs)
client software         ``n x C / ((1-h) b)``  (per-client ceiling ``C = a + g x cores`` of the file-system
                        client: kernel clients spend host CPU per byte; None for production clients = no
                        limit beyond the NICs)
local NVMe              ``n x R_local / (h b)``  (cache hits)
host decode             ``n x cores x loader_fraction / decode_core_s``
======================  =================================================================================

Stall per step (steady state): loading one step's ``S`` samples takes ``t_load = S / rate``; with
prefetch the loader works on step ``k+1`` while the GPUs compute step ``k``, so the exposed stall is
``max(0, t_load - t_step)``; without prefetch it is ``t_load``. Sources and defaults: docs/datapath.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from clustertwin.datapath.dataset import DatasetSpec, dataset
from clustertwin.datapath.params import DEFAULT_DATA_PARAMS, DataParams
from clustertwin.errors import SpecError
from clustertwin.specs import ClusterSpec
from clustertwin.units import BITS_PER_BYTE, GB

STAGES = ("storage read", "storage IOPS", "metadata", "storage network", "client NICs", "client software",
          "local NVMe", "host decode", "client host")


@dataclass(frozen=True)
class Stage:
    """One stage of the path: its capacity in samples/s and GB/s, and the formula behind it."""

    name: str
    samples_per_s: float
    gb_per_s: float
    """Capacity in bytes that cross this stage per second (remote bytes; local bytes for local NVMe)."""
    formula: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "samples_per_s": _finite(self.samples_per_s),
                "gb_per_s": _finite(self.gb_per_s), "formula": self.formula}


@dataclass(frozen=True)
class DataStall:
    """Data-loading result for one training step (seconds per step)."""

    stall_s: float
    """Exposed data stall added to the step: ``max(0, load_s - step_time_s)`` with prefetch, else ``load_s``."""
    load_s: float
    """Time the path needs to deliver one step's samples."""
    step_time_s: float
    samples_per_step: float
    bytes_per_sample: float
    nodes: int
    bottleneck: str
    """Name of the slowest stage (one of :data:`STAGES`)."""
    delivered_samples_per_s: float
    demand_samples_per_s: float
    """``samples_per_step / step_time_s``: what the GPUs consume without stalling."""
    stages: tuple[Stage, ...] = field(default_factory=tuple)

    @property
    def delivered_gb_per_s(self) -> float:
        """Delivered sample bytes per second (from storage and cache together)."""
        return self.delivered_samples_per_s * self.bytes_per_sample / GB

    @property
    def demand_gb_per_s(self) -> float:
        return self.demand_samples_per_s * self.bytes_per_sample / GB

    @property
    def binds(self) -> bool:
        """True when loading is slower than compute (the stall is non-zero)."""
        return self.stall_s > 0.0

    def stage(self, name: str) -> Stage:
        """The stage called ``name`` (one of :data:`STAGES` present for this path)."""
        for s in self.stages:
            if s.name == name:
                return s
        raise SpecError(f"no stage '{name}' on this path (stages: {', '.join(s.name for s in self.stages)})")

    def to_dict(self) -> dict[str, Any]:
        return {"stall_s": self.stall_s, "load_s": self.load_s, "step_time_s": self.step_time_s,
                "samples_per_step": self.samples_per_step, "bytes_per_sample": self.bytes_per_sample,
                "nodes": self.nodes, "bottleneck": self.bottleneck,
                "delivered_samples_per_s": self.delivered_samples_per_s,
                "demand_samples_per_s": self.demand_samples_per_s,
                "delivered_gb_per_s": self.delivered_gb_per_s, "demand_gb_per_s": self.demand_gb_per_s,
                "stages": [s.to_dict() for s in self.stages]}


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def node_storage_gb_per_s(cluster: ClusterSpec) -> float:
    """Line rate of one node's storage NICs, GB/s: ``node.storage_nics`` (count x rate), else one port of
    the compute fabric (the checkpoint model's convention)."""
    node = cluster.node
    if node.storage_nics is not None:
        return node.storage_nics.count * node.storage_nics.gbit_per_s / BITS_PER_BYTE
    return node.nics.gbit_per_s / BITS_PER_BYTE


def path_stages(cluster: ClusterSpec, ds: DatasetSpec, nodes: int, *, seq_len: int | None = None,
                params: DataParams = DEFAULT_DATA_PARAMS,
                client_ceiling_gb_per_s: float | None = None) -> tuple[Stage, ...]:
    """Capacity of every stage for ``nodes`` client nodes (formulas in the module docstring).

    ``client_ceiling_gb_per_s`` overrides the per-client software ceiling of ``params`` (the MLPerf
    Storage predictor passes the DLIO client's)."""
    if nodes < 1:
        raise SpecError(f"a job needs at least one node (got {nodes})")
    st, node = cluster.storage, cluster.node
    b = ds.bytes_per_sample(seq_len)
    h = ds.cache_hit_rate
    remote = (1.0 - h) * b
    inf = math.inf
    out: list[Stage] = []

    def add(name: str, remote_gb_per_s: float, formula: str) -> None:
        sps = remote_gb_per_s * GB / remote if remote > 0 else inf
        out.append(Stage(name, sps, remote_gb_per_s, formula))

    add("storage read", st.read_gb_per_s, f"{st.read_gb_per_s:g} GB/s aggregate read")
    if ds.read_pattern == "random" and st.read_iops is not None:
        req = ds.request_bytes(seq_len)
        reqs = math.ceil(b / req)
        add("storage IOPS", st.read_iops * b / reqs / GB,
            f"{st.read_iops:.3g} IOPS x {reqs} request(s) of {req / 1e3:.4g} KB per sample")
    md_files = ds.files_per_sample(seq_len) * (1.0 - h)
    if st.metadata_ops_per_s is not None and md_files > 0:
        sps = st.metadata_ops_per_s / (params.metadata_ops_per_file * md_files)
        out.append(Stage("metadata", sps, sps * remote / GB,
                         f"{st.metadata_ops_per_s:.3g} ops/s / ({params.metadata_ops_per_file:g} ops x "
                         f"{md_files:.3g} files per sample)"))
    if st.network_gbit_per_s is not None:
        eta_s = params.eta_net if params.eta_storage_net is None else params.eta_storage_net
        add("storage network", eta_s * st.network_gbit_per_s / BITS_PER_BYTE,
            f"{eta_s:g} x {st.network_gbit_per_s:g} Gbit/s of storage-server ports")
    node_gb = node_storage_gb_per_s(cluster)
    add("client NICs", params.eta_net * nodes * node_gb,
        f"{params.eta_net:g} x {nodes} nodes x {node_gb:g} GB/s storage NICs")
    ceiling, label = _client_ceiling(cluster, params, client_ceiling_gb_per_s)
    if ceiling is not None:
        add("client software", nodes * ceiling, f"{nodes} nodes x {label}")
    if h > 0:
        local = params.local_nvme_gb_per_s_per_tb * node.local_nvme_tb
        if local <= 0:
            raise SpecError(f"dataset '{ds.name}' has cache_hit_rate {h:g} but node "
                            f"'{node.id or node.name}' has no local NVMe (local_nvme_tb = 0)")
        sps = nodes * local * GB / (h * b)
        out.append(Stage("local NVMe", sps, nodes * local,
                         f"{nodes} nodes x {local:.3g} GB/s local NVMe for {h:.0%} cache hits"))
    if ds.decode_core_s > 0:
        cores = node.host_cores or params.default_host_cores
        workers = cores * params.loader_cores_fraction
        sps = nodes * workers / ds.decode_core_s
        out.append(Stage("host decode", sps, sps * b / GB,
                         f"{nodes} nodes x {workers:g} loader cores / {ds.decode_core_s * 1e3:.3g} ms per sample"))
    if params.serial_client:
        out = _serial_client(out, nodes)
    return tuple(out)


CLIENT_STAGES = ("client NICs", "client software", "host decode")


def _client_ceiling(cluster: ClusterSpec, params: DataParams,
                    override: float | None) -> tuple[float | None, str]:
    """Per-client software ceiling, GB/s, and its formula: ``override``, else the protocol's
    ``C = a + g x cores`` (fixed part ``a`` and per-core part ``g`` of
    :class:`~clustertwin.datapath.params.DataParams`, either may be absent); None: NIC-bound."""
    kind = cluster.storage.client_kind
    if override is not None:
        return override, f"{override:g} GB/s per {kind} client"
    fixed = params.client_ceiling_gb_per_s.get(kind)
    per_core = params.client_gb_per_s_per_core.get(kind)
    if fixed is None and per_core is None:
        return None, ""
    if per_core is None:
        return fixed, f"{fixed:g} GB/s per {kind} client"
    cores = cluster.node.host_cores or params.default_host_cores
    base = f"{fixed:g} + " if fixed else ""
    return (fixed or 0.0) + per_core * cores, f"({base}{per_core:g} x {cores} cores) GB/s per {kind} client"


def _serial_client(stages: list[Stage], nodes: int) -> list[Stage]:
    """Merge the client-side stages into one ``client host`` stage: the time per sample is the I/O time
    at the slower of NICs and client software plus the decode time (harmonic combination of rates)."""
    client = {s.name: s for s in stages if s.name in CLIENT_STAGES}
    io = min((client[n] for n in ("client NICs", "client software") if n in client), key=lambda s: s.samples_per_s)
    inv = 1.0 / io.samples_per_s + (1.0 / client["host decode"].samples_per_s if "host decode" in client else 0.0)
    sps = 1.0 / inv
    merged = Stage("client host", sps, io.gb_per_s * sps / io.samples_per_s,
                   f"1 / (1/({io.formula}) + decode) over {nodes} nodes")
    return [s for s in stages if s.name not in CLIENT_STAGES] + [merged]


def data_stall(cluster: ClusterSpec, dataset_ref: DatasetSpec | str | dict, step_time_s: float,
               samples_per_step: float, gpus: int | None = None, *, seq_len: int | None = None,
               params: DataParams = DEFAULT_DATA_PARAMS,
               client_ceiling_gb_per_s: float | None = None) -> DataStall:
    """Exposed data-loading stall of one training step, with the bottleneck named.

    ``step_time_s``: the step's time without data stall (compute + communication); ``samples_per_step``:
    the global batch in samples (sequences for LLMs); ``gpus``: GPUs of the job (default: the whole
    cluster; client nodes = ``ceil(gpus / gpus_per_node)``); ``seq_len`` for token-sized datasets.
    Formulas: module docstring."""
    ds = dataset(dataset_ref)
    if not (math.isfinite(step_time_s) and step_time_s > 0):
        raise SpecError(f"step_time_s must be a finite number > 0 (got {step_time_s!r})")
    if not (math.isfinite(samples_per_step) and samples_per_step > 0):
        raise SpecError(f"samples_per_step must be a finite number > 0 (got {samples_per_step!r})")
    g = cluster.total_gpus if gpus is None else int(gpus)
    if g < 1 or g > cluster.total_gpus:
        raise SpecError(f"gpus must be 1..{cluster.total_gpus} (got {gpus})")
    nodes = math.ceil(g / cluster.node.gpus)
    stages = path_stages(cluster, ds, nodes, seq_len=seq_len, params=params,
                         client_ceiling_gb_per_s=client_ceiling_gb_per_s)
    slow = min(stages, key=lambda s: s.samples_per_s)
    rate = slow.samples_per_s
    load_s = samples_per_step / rate
    stall = max(0.0, load_s - step_time_s) if ds.prefetch else load_s
    return DataStall(stall_s=stall, load_s=load_s, step_time_s=step_time_s, samples_per_step=samples_per_step,
                     bytes_per_sample=ds.bytes_per_sample(seq_len), nodes=nodes, bottleneck=slow.name,
                     delivered_samples_per_s=rate, demand_samples_per_s=samples_per_step / step_time_s,
                     stages=stages)


def binding_read_gb_per_s(dataset_ref: DatasetSpec | str | dict, step_time_s: float, samples_per_step: float, *,
                          seq_len: int | None = None) -> float:
    """Storage read bandwidth (GB/s) below which storage binds: the demand's remote bytes per second,
    ``samples_per_step x (1-h) b / step_time_s``."""
    ds = dataset(dataset_ref)
    return samples_per_step * (1.0 - ds.cache_hit_rate) * ds.bytes_per_sample(seq_len) / step_time_s / GB
