"""``node bench``: micro-benchmarks of a real node, each compared with its catalog expectation.

- GEMM: ``torch.matmul`` of two n x n matrices; TFLOP/s = 2 n^3 / t (one multiply-add = 2 FLOP).
- Memory bandwidth: STREAM-style copy, bytes moved = 2 x array bytes (read + write) / t; numpy on the
  host, torch on the device.
- Collectives: all_reduce / all_gather / reduce_scatter over message sizes with torch.distributed across
  local processes (NCCL on GPUs, gloo on CPU), reported as nccl-tests does: ``size`` is the whole buffer
  (all_gather: the gathered output; reduce_scatter: the input), algbw = size / t and
  busbw = algbw x {all_reduce 2(n-1)/n; all_gather, reduce_scatter (n-1)/n} (nccl-tests PERFORMANCE.md);
  time is the slowest rank's mean; ``#wrong`` counts elements that differ from the known result.
- Storage: sequential write (fsync included) and read of one file in large blocks, and random 4 KiB
  reads from it by ``iodepth`` threads; page-cache effects are removed with O_DIRECT where the file system
  supports it, else ``posix_fadvise(DONTNEED)`` after fsync (``direct_io`` says which).

torch is optional (``pip install 'clustertwin[bench]'``); without it GEMM and collectives are skipped with
that reason, host-memory and storage benchmarks still run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clustertwin import catalog
from clustertwin.errors import SpecError
from clustertwin.ops.health.gpu import catalog_gpu_id
from clustertwin.units import GB, MIB, TFLOP

TORCH_MISSING = "torch is not installed (pip install 'clustertwin[bench]')"
FLOP_PER_MAC = 2
COPY_BYTES_FACTOR = 2
"""A copy reads and writes each byte once (STREAM 'Copy' convention)."""
MIN_TIMED_S = 0.2
"""Each measurement repeats its operation until at least this long has elapsed."""
WARMUP_ITERS = 2
MAX_ITERS = 1000
BUSBW_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
}
"""nccl-tests bus-bandwidth factors (PERFORMANCE.md)."""
COLLECTIVES: tuple[str, ...] = tuple(BUSBW_FACTOR)
FLOAT32_BYTES = 4
GPU_GEMM_PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16")
CPU_GEMM_PRECISIONS: tuple[str, ...] = ("fp32",)
CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
"""Host bf16 GEMM is benchmarked by default only where the CPU has bf16 dot-product instructions (elsewhere
torch emulates it at a small fraction of fp32 speed)."""
DEFAULT_GEMM_N_GPU = 8192
DEFAULT_GEMM_N_CPU = 2048
CPU_FMA_UNITS = 2
"""FMA pipes per core assumed for the host peak estimate (AMD Zen 2-5, Intel server cores with 2 FMA
ports); a core with one FMA port reaches half the estimate."""
CPU_SIMD_FP32_LANES: tuple[tuple[str, int], ...] = (("avx512f", 16), ("avx2", 8), ("avx", 8), ("sse2", 4),
                                                     ("asimd", 4))
"""fp32 lanes per vector by the widest SIMD flag in /proc/cpuinfo (AVX-512 16, AVX/AVX2 8, SSE/NEON 4)."""
COLLECTIVE_TIMEOUT_S = 600.0


# ---------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class GemmResult:
    precision: str
    device: str
    n: int
    tflops: float
    peak_tflops: float | None
    """Catalog (GPU) or estimated (CPU) dense peak; None when unknown."""
    peak_source: str

    @property
    def pct_of_peak(self) -> float | None:
        return None if not self.peak_tflops else 100.0 * self.tflops / self.peak_tflops


@dataclass(frozen=True)
class MemoryBandwidthResult:
    where: str
    """host or device."""
    bytes_per_copy: int
    gb_per_s: float
    peak_gb_per_s: float | None
    peak_source: str
    tool: str = "numpy copyto, 1 thread"
    """What measured it (kernel and threads)."""

    @property
    def pct_of_peak(self) -> float | None:
        return None if not self.peak_gb_per_s else 100.0 * self.gb_per_s / self.peak_gb_per_s


@dataclass(frozen=True)
class CollectiveRow:
    size_bytes: int
    count: int
    time_us: float
    algbw_gb_per_s: float
    busbw_gb_per_s: float
    wrong: int
    ip_time_us: float | None = None
    """The other nccl-tests block (in-place, output buffer = input), when torch has both variants."""
    ip_wrong: int | None = None


@dataclass
class CollectiveResult:
    op: str
    backend: str
    world_size: int
    device: str
    rows: list[CollectiveRow]
    versions: str = ""
    block: str = "out-of-place"
    """nccl-tests block of the main timing: torch.distributed.all_reduce is in-place only."""

    @property
    def avg_busbw_gb_per_s(self) -> float:
        return float(np.mean([r.busbw_gb_per_s for r in self.rows])) if self.rows else 0.0

    @property
    def max_busbw_gb_per_s(self) -> float:
        return max((r.busbw_gb_per_s for r in self.rows), default=0.0)


@dataclass(frozen=True)
class StorageResult:
    path: str
    file_bytes: int
    seq_write_gb_per_s: float
    seq_read_gb_per_s: float
    rand_read_iops: float
    iodepth: int
    direct_io: bool
    expected: dict[str, float] = field(default_factory=dict)
    """Catalog figures of the named SSD (seq_read_gb_per_s, seq_write_gb_per_s, rand_read_iops)."""
    tool: str = "python (os.write/readv, preadv threads; fallback: fio not installed)"
    """What measured it: fio (with its version and engine) or the Python fallback."""


@dataclass
class BenchReport:
    device: str
    """``cuda:0 (NVIDIA H100 80GB HBM3)`` or ``cpu (AMD EPYC ...)``."""
    gpu_catalog_id: str | None
    gemm: list[GemmResult] = field(default_factory=list)
    memory: list[MemoryBandwidthResult] = field(default_factory=list)
    collectives: list[CollectiveResult] = field(default_factory=list)
    storage: StorageResult | None = None
    skipped: list[str] = field(default_factory=list)
    """What did not run, and why."""


# ---------------------------------------------------------------------------------------------- helpers
def import_torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def _timed(fn: Callable[[], Any], sync: Callable[[], None]) -> float:
    """Mean seconds per call of ``fn``, repeated until MIN_TIMED_S has elapsed (after warm-up)."""
    for _ in range(WARMUP_ITERS):
        fn()
    sync()
    iters, elapsed = 0, 0.0
    t0 = time.perf_counter()
    while elapsed < MIN_TIMED_S and iters < MAX_ITERS:
        fn()
        iters += 1
        if iters & (iters - 1) == 0 or elapsed == 0.0:
            sync()
            elapsed = time.perf_counter() - t0
    sync()
    return (time.perf_counter() - t0) / iters


def timed_collective(fn: Callable[[], Any], sync: Callable[[], None], dist: Any, torch: Any,
                      dev: Any) -> float:
    """Mean seconds per call of a collective ``fn``. Every rank must issue the same number of calls, so
    the repeat count is agreed on (the minimum of each rank's estimate for MIN_TIMED_S, from one probe
    call after warm-up) rather than decided by each rank's own clock as in :func:`_timed`."""
    for _ in range(WARMUP_ITERS):
        fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    probe_s = max(time.perf_counter() - t0, 1e-9)
    want = torch.tensor([min(MAX_ITERS, max(1, math.ceil(MIN_TIMED_S / probe_s)))], dtype=torch.int64,
                        device=dev)
    dist.all_reduce(want, op=dist.ReduceOp.MIN)
    iters = int(want.item())
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters


def cpu_peak_fp32_tflops(cores: int, ghz: float, flags: frozenset[str]) -> float | None:
    """Estimated host fp32 peak: cores x GHz x lanes x 2 (FMA) x CPU_FMA_UNITS / 1000."""
    lanes = next((n for flag, n in CPU_SIMD_FP32_LANES if flag in flags), None)
    if lanes is None or ghz <= 0:
        return None
    fma = 2 if "fma" in flags or "avx512f" in flags or "asimd" in flags else 1
    return cores * ghz * lanes * fma * CPU_FMA_UNITS / 1e3


def _cpu_ghz() -> float:
    import psutil

    f = psutil.cpu_freq()
    if f and (f.max or f.current):
        return float(f.max or f.current) / 1e3
    return 0.0


def _gpu_spec(name: str) -> Any:
    gid = catalog_gpu_id(name)
    return (gid, catalog.get("gpu", gid)) if gid else (None, None)


# ---------------------------------------------------------------------------------------------- GEMM
def gemm(precisions: Sequence[str] | None = None, n: int | None = None) -> tuple[list[GemmResult], list[str]]:
    """Dense GEMM throughput per precision on cuda:0 if present, else the CPU."""
    torch = import_torch()
    if torch is None:
        return [], [f"gemm: {TORCH_MISSING}"]
    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    if precisions is None and not cuda:
        from clustertwin.ops.health.host import read_cpuinfo

        has_bf16 = bool(read_cpuinfo()[2] & CPU_BF16_FLAGS)
        precisions = (*CPU_GEMM_PRECISIONS, "bf16") if has_bf16 else CPU_GEMM_PRECISIONS
    precisions = list(precisions or GPU_GEMM_PRECISIONS)
    n = n or (DEFAULT_GEMM_N_GPU if cuda else DEFAULT_GEMM_N_CPU)
    if n < 1:
        raise SpecError(f"GEMM size must be >= 1 (got {n})")
    dtypes = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    skipped: list[str] = []
    out: list[GemmResult] = []
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    gid, spec = _gpu_spec(torch.cuda.get_device_name(0)) if cuda else (None, None)
    cpu_peak = None
    if not cuda:
        import psutil

        from clustertwin.ops.health.host import read_cpuinfo

        _, _, flags = read_cpuinfo()
        cpu_peak = cpu_peak_fp32_tflops(psutil.cpu_count(logical=False) or 1, _cpu_ghz(), flags)
    for p in precisions:
        if p not in dtypes:
            raise SpecError(f"unknown GEMM precision '{p}' (choose from {', '.join(dtypes)})")
        if not cuda and p == "tf32":
            skipped.append("gemm tf32: tensor-core mode, GPU only")
            continue
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = p == "tf32"
        a = torch.randn(n, n, device=dev, dtype=dtypes[p])
        b = torch.randn(n, n, device=dev, dtype=dtypes[p])
        t = _timed(lambda a=a, b=b: torch.matmul(a, b), sync)
        tflops = FLOP_PER_MAC * n**3 / t / TFLOP
        if cuda:
            peak = spec.peak_tflops(p) if spec else None
            src = f"catalog {gid}" if spec else "GPU not in catalog"
        else:
            peak = cpu_peak if p == "fp32" else None
            src = ("estimated: cores x GHz x SIMD lanes x FMA x 2 FMA units" if peak
                   else "no host peak for this precision")
        out.append(GemmResult(p, dev, n, tflops, peak, src))
        del a, b
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
    return out, skipped


# ---------------------------------------------------------------------------------------------- memory
def host_memory_bandwidth(nbytes: int = 256 * MIB, cpu_id: str | None = None) -> MemoryBandwidthResult:
    """numpy copy bandwidth of host DRAM; compared with ``cpu_id``'s catalog peak x sockets if given."""
    if nbytes < MIB:
        raise SpecError(f"memory benchmark needs >= 1 MiB (got {nbytes} bytes)")
    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    t = _timed(lambda: np.copyto(dst, src), lambda: None)
    peak, psrc = None, "no catalog CPU given (--cpu ID)"
    if cpu_id:
        from clustertwin.ops.health.host import read_cpuinfo

        cpu = catalog.get("cpu", cpu_id)
        sockets = read_cpuinfo()[1]
        if cpu.memory_gb_per_s:
            peak, psrc = cpu.memory_gb_per_s * sockets, f"catalog {cpu_id} x {sockets} socket(s)"
    return MemoryBandwidthResult("host", int(src.nbytes), COPY_BYTES_FACTOR * src.nbytes / t / GB, peak, psrc)


def device_memory_bandwidth(nbytes: int = 2 * 2**30) -> tuple[MemoryBandwidthResult | None, str | None]:
    """torch copy bandwidth of GPU memory on cuda:0, or (None, reason)."""
    torch = import_torch()
    if torch is None:
        return None, f"device memory: {TORCH_MISSING}"
    if not torch.cuda.is_available():
        return None, "device memory: no GPU (torch.cuda.is_available() is False)"
    src = torch.empty(nbytes // 2, dtype=torch.float16, device="cuda")
    dst = torch.empty_like(src)
    t = _timed(lambda: dst.copy_(src), torch.cuda.synchronize)
    gid, spec = _gpu_spec(torch.cuda.get_device_name(0))
    moved = COPY_BYTES_FACTOR * src.numel() * src.element_size()
    return MemoryBandwidthResult("device", moved // COPY_BYTES_FACTOR, moved / t / GB,
                                 spec.hbm_gb_per_s if spec else None,
                                 f"catalog {gid}" if spec else "GPU not in catalog"), None
