"""Hardware specs: GPU, CPU, fabric (NIC + link technology), switch, storage system, NVMe SSD."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import model_validator

from clustertwin.specs.base import Fraction, NonNegFloat, PositiveFloat, PositiveInt, Sourced

Precision = Literal["fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8"]
PRECISIONS: tuple[str, ...] = ("fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8")

PriceConfidence = Literal["list", "street", "cloud", "estimate"]
"""How a catalog price is known: ``list`` (vendor list/launch price), ``street`` (published market price),
``cloud`` (derived from a published cloud rental rate), ``estimate`` (documented method, no direct quote)."""


#: FP8 GEMM efficiency relative to 16-bit GEMMs of the same shape, one hardware fact for training and
#: inference (``TrainParams`` and ``InferParams.fp8_gemm_efficiency_ratio`` read it): large cuBLAS GEMMs on H100
#: SXM reach ~1,400 of 1,979 FP8 TFLOP/s against ~730 of 989 BF16 TFLOP/s (power-limited clocks in both):
#: (1,400 / 1,979) / (730 / 989) = 0.96.
FP8_GEMM_EFFICIENCY_RATIO = 0.96

class GPUSpec(Sourced):
    """One accelerator (GPU/NPU). Tensor peaks are dense (2:4 sparsity excluded), per device."""

    vendor: str = "nvidia"
    """Vendor: nvidia, amd, huawei."""
    arch: str = ""
    """Architecture family (Ampere, Hopper, Blackwell, CDNA3, DaVinci ...)."""
    release_year: int | None = None
    """Year of first availability."""
    fp64_tflops: NonNegFloat | None = None
    """Peak FP64 vector TFLOP/s."""
    fp64_tensor_tflops: NonNegFloat | None = None
    """Peak FP64 tensor/matrix TFLOP/s (null where there is no FP64 matrix unit)."""
    fp32_tflops: NonNegFloat | None = None
    """Peak FP32 vector TFLOP/s."""
    tf32_tflops: NonNegFloat | None = None
    """Peak dense TF32 tensor TFLOP/s."""
    bf16_tflops: NonNegFloat | None = None
    """Peak dense BF16 tensor TFLOP/s."""
    fp16_tflops: NonNegFloat | None = None
    """Peak dense FP16 tensor TFLOP/s (defaults to the BF16 figure where both exist)."""
    fp8_tflops: NonNegFloat | None = None
    """Peak dense FP8 tensor TFLOP/s."""
    fp4_tflops: NonNegFloat | None = None
    """Peak dense FP4 tensor TFLOP/s."""
    int8_tops: NonNegFloat | None = None
    """Peak dense INT8 tensor TOP/s."""
    hbm_gb: PositiveFloat
    """Device memory, GB as marketed (1e9 bytes)."""
    hbm_gb_per_s: PositiveFloat
    """Peak device-memory bandwidth, GB/s."""
    memory_type: str = "HBM"
    """HBM2, HBM2e, HBM3, HBM3e, GDDR6 ..."""
    tdp_w: PositiveFloat
    """Board/module power limit, W."""
    scale_up: str = "none"
    """Scale-up link technology (NVLink4, Infinity Fabric, HCCS, none)."""
    scale_up_gb_per_s: NonNegFloat = 0.0
    """Scale-up bandwidth per GPU per direction, GB/s (H100: 450; vendors print 900 bidirectional)."""
    nvls: bool = False
    """NVLink SHARP (in-switch reduction, NCCL NVLS algorithm) available with an NVSwitch."""
    pcie_gen: PositiveInt = 4
    """Host link PCIe generation (x16)."""
    price_usd: PositiveFloat | None = None
    """Street price estimate per device, USD (estimate; see source)."""
    price_confidence: PriceConfidence | None = None
    """How ``price_usd`` is known: list, street, cloud or estimate (method in ``source``/``notes``)."""
    fp32_matrix_tflops: NonNegFloat | None = None
    """Peak FP32 matrix/packed TFLOP/s where it exceeds the vector rate (AMD CDNA matrix cores)."""
    fp64_rpeak_tflops: NonNegFloat | None = None
    """FP64 peak per device as TOP500 submissions rate it (Rpeak), where that differs from the datasheet
    figure HPL runs on (e.g. rated at base clock; for a superchip/APU the on-package CPU cores included);
    defaults to ``fp64_tensor_tflops`` or else ``fp64_tflops`` (see :meth:`fp64_rpeak`)."""
    process_nm: PositiveFloat | None = None
    """Compute-die process node class, nm (TSMC N4/4N = 4, N5 = 5, N6 = 6, N7 = 7 ...)."""
    sm_count: PositiveInt | None = None
    """Streaming multiprocessors (NVIDIA) or compute units (AMD) per device: a GEMM runs its output tiles in
    waves of one tile per SM/CU (:mod:`clustertwin.train.gemm`); null: no wave quantisation."""
    gemm_efficiency_ratio: Fraction = 1.0
    """Large-GEMM rate this device's vendor BLAS sustains relative to the training model's
    ``gemm_efficiency`` reference (cuBLAS on NVIDIA parts, 1.0): below 1 where measured kernels run further
    below the datasheet peak (clocks under load below the peak engine clock the peak is quoted at, library
    maturity); the source says where the figure comes from."""

    @model_validator(mode="after")
    def _fp16_default(self) -> GPUSpec:
        if self.fp16_tflops is None and self.bf16_tflops is not None:
            object.__setattr__(self, "fp16_tflops", self.bf16_tflops)
        return self

    def peak_tflops(self, precision: str) -> float | None:
        """Dense peak for a precision name (``bf16``, ``fp8``, ``fp64`` ...); None if unsupported."""
        p = precision.lower()
        if p == "int8":
            return self.int8_tops
        if p in ("fp16", "half"):
            return self.fp16_tflops
        return getattr(self, f"{p}_tflops", None)

    def gemm_peak_tflops(self, precision: str) -> float | None:
        """Dense GEMM peak for a precision: FP32 = max(vector, matrix/packed FP32); FP64 = tensor/matrix
        FP64 where the part has one, else vector; other precisions as :meth:`peak_tflops`. None if the part
        cannot run that precision (no TF32 before Ampere/CDNA3, no BF16 on Volta)."""
        p = precision.lower()
        if p == "fp32":
            vals = [v for v in (self.fp32_tflops, self.fp32_matrix_tflops) if v is not None]
            return max(vals) if vals else None
        if p == "fp64":
            return self.fp64_tensor_tflops if self.fp64_tensor_tflops is not None else self.fp64_tflops
        return self.peak_tflops(p)

    def fp64_rpeak(self) -> float | None:
        """FP64 TFLOP/s per device that a TOP500 Rpeak counts: ``fp64_rpeak_tflops`` when the catalog gives
        the rated figure, else the FP64 GEMM peak (tensor where present, else vector)."""
        return self.fp64_rpeak_tflops if self.fp64_rpeak_tflops is not None else self.gemm_peak_tflops("fp64")

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_gb * 1e9


class CPUSpec(Sourced):
    """A server CPU (one socket)."""

    vendor: str = ""
    """amd, intel, nvidia, huawei."""
    family: str = ""
    """Product family (EPYC 9004 Genoa ...)."""
    release_year: int | None = None
    """Year of first availability."""
    cores: PositiveInt
    """Cores per socket."""
    base_ghz: PositiveFloat | None = None
    """Base clock, GHz."""
    memory_channels: PositiveInt | None = None
    """DDR channels per socket."""
    memory_mts: PositiveFloat | None = None
    """DDR transfer rate, MT/s."""
    memory_gb_per_s: PositiveFloat | None = None
    """Peak memory bandwidth per socket, GB/s (channels x MT/s x 8 B)."""
    tdp_w: PositiveFloat | None = None
    """Socket power, W."""
    pcie_lanes: PositiveInt | None = None
    """PCIe lanes per socket."""
    pcie_gen: PositiveInt | None = None
    """PCIe generation."""
    fp64_tflops: NonNegFloat | None = None
    """Peak FP64 TFLOP/s per socket (cores x GHz x FLOP/cycle)."""


FabricKind = Literal["infiniband", "roce", "ethernet", "omnipath"]


class FabricSpec(Sourced):
    """A scale-out fabric: NIC port speed and link technology, with what NCCL achieves over it."""

    kind: FabricKind
    """infiniband, roce (RoCEv2), ethernet (TCP/IP sockets), omnipath."""
    gbit_per_s: PositiveFloat
    """Port line rate, Gbit/s."""
    nic: str | None = None
    """Typical NIC model (ConnectX-7 ...)."""
    achievable_fraction: Fraction = 0.92
    """Fraction of line rate a NIC reaches in NCCL busbw at large messages (NCCL maintainers' per-NIC
    ceilings: NDR 46-48 of 50 GB/s, HDR ~20 of 25, 100G 12.2 of 12.5)."""
    hop_latency_us: NonNegFloat = 5.0
    """One-way network latency per collective step, µs (NCCL tuning model's per-hop network latency)."""
    switch_latency_ns: NonNegFloat = 150.0
    """Port-to-port switch latency, ns."""
    sharp: bool = False
    """In-network reduction (IB SHARP / CollNet) available on this fabric's switches."""
    lossless: str = "credit"
    """How the fabric avoids loss: credit (IB link-level), pfc+ecn (RoCEv2 DCQCN), none (TCP)."""
    congestion_penalty: NonNegFloat = 0.0
    """Extra fractional slowdown of traffic that crosses the spine under load (ECMP collisions,
    PFC/DCQCN back-pressure); 0 for IB adaptive routing."""
    default_switch: str | None = None
    """Catalog id of the switch used to build this fabric."""
    transceiver_usd: NonNegFloat | None = None
    """Price per optical transceiver, USD (estimate)."""
    nic_usd: NonNegFloat | None = None
    """Price per NIC port, USD (estimate)."""
    nic_power_w: NonNegFloat = 25.0
    """NIC power per port, W."""

    @property
    def gb_per_s(self) -> float:
        """Line rate per port in GB/s (Gbit/s / 8)."""
        return self.gbit_per_s / 8.0


class SwitchSpec(Sourced):
    """A network switch (one box)."""

    vendor: str = ""
    """Vendor."""
    ports: PositiveInt
    """Number of ports at ``port_gbit_per_s``."""
    port_gbit_per_s: PositiveFloat
    """Per-port rate, Gbit/s."""
    capacity_tbit_per_s: PositiveFloat | None = None
    """Switching capacity, Tbit/s (defaults to ports x rate)."""
    latency_ns: NonNegFloat | None = None
    """Port-to-port latency, ns."""
    power_w: NonNegFloat = 1000.0
    """Typical power, W."""
    rack_units: PositiveInt = 1
    """Height, U."""
    sharp: bool = False
    """In-network reduction (SHARP) support."""
    price_usd: NonNegFloat | None = None
    """Price estimate, USD."""


StorageClient = Literal["lustre", "gpfs", "nfs", "nvme-of", "rdma", "fuse", "object", "local"]
"""How a compute node reads the storage: a parallel-file-system client (lustre: Lustre/EXAScaler/
ClusterStor; gpfs: IBM Storage Scale), nfs (NFSv3/v4.x incl. nconnect), nvme-of (NVMe over TCP/RDMA
block volumes), rdma (vendor RDMA clients: WEKA, YRCloudFile, VAST over RDMA), fuse (FUSE clients:
JuiceFS, s3fs), object (S3 GET), local (node-local NVMe)."""

_CLIENT_OF_KIND: dict[str, str] = {
    "lustre": "lustre", "exascaler": "lustre", "clusterstor": "lustre", "gpfs": "gpfs",
    "storage-scale": "gpfs", "nfs": "nfs", "vast": "nfs", "weka": "rdma", "minio": "object",
    "s3": "object", "object": "object", "nvme-of": "nvme-of", "local": "local", "juicefs": "fuse",
}

APPLIANCE_SCALED = ("read_gb_per_s", "write_gb_per_s", "read_iops", "write_iops", "metadata_ops_per_s",
                    "capacity_pb", "network_gbit_per_s")
"""Figures of a storage building block that add up over ``appliances`` of them."""


class StorageSpec(Sourced):
    """A shared storage system (parallel file system or object store) serving the cluster.

    Figures are for the whole system as declared. An entry describing one appliance or building block
    (``appliances: 1`` in the catalog) is scaled by ``{preset: id, appliances: N}``: every figure in
    ``APPLIANCE_SCALED`` is multiplied by ``N`` (appliances are independent servers behind one namespace;
    DDN, WEKA and VAST publish linear scaling per appliance/box). A mapping without any read bandwidth is
    an error, never a silent default."""

    kind: str = "lustre"
    """lustre, gpfs, weka, vast, minio, nfs, local ..."""
    client: StorageClient | None = None
    """Client protocol on the compute nodes; defaults from ``kind`` (lustre, gpfs, nfs, rdma ...)."""
    read_gb_per_s: PositiveFloat = 100.0
    """Aggregate sequential read bandwidth, GB/s."""
    write_gb_per_s: PositiveFloat = 50.0
    """Aggregate sequential write bandwidth, GB/s (defaults to half the read figure when only read is given)."""
    capacity_pb: PositiveFloat = 1.0
    """Usable capacity, PB."""
    read_iops: PositiveFloat | None = None
    """Aggregate 4 KiB random-read IOPS (None: not published; the model then assumes bandwidth-bound reads)."""
    write_iops: PositiveFloat | None = None
    """Aggregate 4 KiB random-write IOPS."""
    metadata_ops_per_s: PositiveFloat | None = None
    """File opens (create/stat/open-close) per second the metadata servers sustain (mdtest class)."""
    read_latency_us: PositiveFloat | None = None
    """Latency of one small read seen by a client, µs."""
    network_gbit_per_s: PositiveFloat | None = None
    """Aggregate line rate of the storage servers' client-facing ports, Gbit/s (None: not a limit)."""
    appliances: PositiveInt = 1
    """Building blocks: with ``appliances: N`` the figures given are per appliance and are multiplied by
    ``N`` once (``read_gb_per_s_per_server`` keeps the per-appliance read; re-validating a scaled spec
    does not scale again). To give system totals, leave ``appliances`` out."""
    read_gb_per_s_per_server: PositiveFloat | None = None
    """Read bandwidth of one storage server/appliance, GB/s (for sizing)."""
    power_kw_per_pb: NonNegFloat = 5.0
    """Power per usable PB, kW."""
    usd_per_pb: NonNegFloat | None = None
    """Capex per usable PB, USD (estimate)."""
    rack_units_per_pb: NonNegFloat = 4.0
    """Rack space per usable PB, U."""

    @model_validator(mode="before")
    @classmethod
    def _bandwidth_and_scale(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not data:
            return data  # StorageSpec() = the documented default system
        if "read_gb_per_s" not in data:
            raise ValueError(
                "storage needs read_gb_per_s (aggregate read GB/s), or a preset such as "
                "{preset: ddn-ai400x2t, appliances: 4}; see `clustertwin catalog storage`"
            )
        data = dict(data)
        if "write_gb_per_s" not in data and isinstance(data["read_gb_per_s"], int | float):
            data["write_gb_per_s"] = 0.5 * float(data["read_gb_per_s"])
        n = data.get("appliances", 1)
        read = data["read_gb_per_s"]
        if isinstance(n, int) and n > 1 and isinstance(read, int | float):
            per = data.get("read_gb_per_s_per_server")
            per = float(read) if not isinstance(per, int | float) else float(per)
            if abs(float(read) - n * per) > 1e-9 * float(read):  # figures are per appliance: scale once
                for key in APPLIANCE_SCALED:
                    if isinstance(data.get(key), int | float):
                        data[key] = float(data[key]) * n
                data["read_gb_per_s_per_server"] = float(read)
        return data

    @property
    def client_kind(self) -> str:
        """The client protocol: ``client`` or the default of ``kind`` (``lustre`` for unknown kinds)."""
        return self.client or _CLIENT_OF_KIND.get(self.kind.lower(), "lustre")


class SSDSpec(Sourced):
    """An NVMe SSD."""

    interface: str = "PCIe Gen4 x4"
    """Host interface."""
    capacity_tb: PositiveFloat | None = None
    """Capacity, TB."""
    seq_read_gb_per_s: PositiveFloat
    """Sequential read, GB/s."""
    seq_write_gb_per_s: PositiveFloat
    """Sequential write, GB/s."""
    rand_read_iops: PositiveFloat | None = None
    """4 KiB random-read IOPS."""
    rand_write_iops: PositiveFloat | None = None
    """4 KiB random-write IOPS."""
