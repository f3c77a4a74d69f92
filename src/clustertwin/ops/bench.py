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

import json
import math
import mmap
import os
import random
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clustertwin import catalog
from clustertwin.errors import SpecError
from clustertwin.ops.gpu import catalog_gpu_id
from clustertwin.units import GB, KIB, MIB, TFLOP, US

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
STORAGE_BLOCK_BYTES = 4 * MIB
RANDOM_READ_BYTES = 4 * KIB
RANDOM_READ_S = 2.0
"""Duration of the random-read phase."""
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
def _torch() -> Any:
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


def _timed_collective(fn: Callable[[], Any], sync: Callable[[], None], dist: Any, torch: Any,
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
    torch = _torch()
    if torch is None:
        return [], [f"gemm: {TORCH_MISSING}"]
    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    if precisions is None and not cuda:
        from clustertwin.ops.host import _cpuinfo

        has_bf16 = bool(_cpuinfo()[2] & CPU_BF16_FLAGS)
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

        from clustertwin.ops.host import _cpuinfo

        _, _, flags = _cpuinfo()
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
        from clustertwin.ops.host import _cpuinfo

        cpu = catalog.get("cpu", cpu_id)
        sockets = _cpuinfo()[1]
        if cpu.memory_gb_per_s:
            peak, psrc = cpu.memory_gb_per_s * sockets, f"catalog {cpu_id} x {sockets} socket(s)"
    return MemoryBandwidthResult("host", int(src.nbytes), COPY_BYTES_FACTOR * src.nbytes / t / GB, peak, psrc)


def device_memory_bandwidth(nbytes: int = 2 * 2**30) -> tuple[MemoryBandwidthResult | None, str | None]:
    """torch copy bandwidth of GPU memory on cuda:0, or (None, reason)."""
    torch = _torch()
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


# ---------------------------------------------------------------------------------------------- collectives
def sweep_sizes(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """nccl-tests ``-b -e -f``: MIN, MIN x F, ... <= MAX, each a whole number of float32 elements."""
    if min_bytes < FLOAT32_BYTES or max_bytes < min_bytes or factor < 2:
        raise SpecError(f"need 4 <= min <= max and factor >= 2 (got {min_bytes}, {max_bytes}, {factor})")
    sizes, s = [], min_bytes
    while s <= max_bytes:
        sizes.append(s - s % FLOAT32_BYTES)
        s *= factor
    return sizes


def _loopback_ifname() -> str | None:
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address.startswith("127.") for a in addrs):
            return name
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _op_pair(dist: Any, torch: Any, op: str, rank: int, world: int, count: int,
             dev: Any, in_place: bool = False) -> tuple[Callable[[], Any], Callable[[], int], int]:
    """(run, check, total element count) of one collective. Rank r contributes the value r + 1, so a sum is
    n(n+1)/2 and a gather is 1, 2, ..., n chunk by chunk; ``check`` returns the number of wrong elements.
    ``in_place`` (all_gather, reduce_scatter): the input is this rank's slice of the output (all_gather) or
    the output is this rank's slice of the input (reduce_scatter), as nccl-tests' in-place block runs them;
    all_reduce is always in-place in torch."""
    total = world * (world + 1) / 2
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    if op == "all_reduce":
        buf = torch.full((count,), float(rank + 1), device=dev)

        def run() -> Any:
            return dist.all_reduce(buf)

        def check() -> int:
            buf.fill_(float(rank + 1))
            dist.all_reduce(buf)
            return int((buf != total).sum())

        return run, check, count
    per = max(count // world, 1)
    if op == "all_gather":
        out = torch.empty(per * world, device=dev)
        inp = out[rank * per:(rank + 1) * per] if in_place else torch.empty(per, device=dev)
        inp.fill_(float(rank + 1))
        expect = torch.arange(1, world + 1, device=dev, dtype=out.dtype).repeat_interleave(per)

        def run() -> Any:
            return gather(out, inp)

        def check() -> int:
            out.zero_()
            inp.fill_(float(rank + 1))
            gather(out, inp)
            return int((out != expect).sum())

        return run, check, per * world
    inp = torch.full((per * world,), float(rank + 1), device=dev)
    out = inp[rank * per:(rank + 1) * per] if in_place else torch.empty(per, device=dev)

    def run() -> Any:
        return scatter(out, inp)

    def check() -> int:
        inp.fill_(float(rank + 1))
        if not in_place:
            out.zero_()
        scatter(out, inp)
        return int((out != total).sum())

    return run, check, per * world


def _collective_worker(rank: int, world: int, init_method: str, backend: str, ops: list[str],
                       sizes: list[int], out_path: str) -> None:
    """One rank: time each op at each size, check the result, rank 0 writes the table as JSON."""
    import torch
    import torch.distributed as dist

    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    results: dict[str, list[dict[str, float]]] = {}
    try:
        for op in ops:
            rows = []
            for size in sizes:
                row: dict[str, Any] = {}
                for in_place in ((False,) if op == "all_reduce" else (False, True)):
                    run, check, count = _op_pair(dist, torch, op, rank, world, size // FLOAT32_BYTES, dev,
                                                 in_place)
                    dist.barrier()
                    t = _timed_collective(run, sync, dist, torch, dev)
                    tt = torch.tensor([t], dtype=torch.float64, device=dev)
                    dist.all_reduce(tt, op=dist.ReduceOp.MAX)
                    wrong = torch.tensor([check()], dtype=torch.float64, device=dev)
                    dist.all_reduce(wrong)
                    key = "ip_" if in_place else ""
                    row.update({"size": count * FLOAT32_BYTES, "count": count, f"{key}time_s": float(tt.item()),
                                f"{key}wrong": int(wrong.item())})
                rows.append(row)
            results[op] = rows
        if rank == 0:
            Path(out_path).write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def collectives(ops: Sequence[str] = ("all_reduce",), sizes: Sequence[int] | None = None,
                world_size: int | None = None, backend: str | None = None) -> tuple[list[CollectiveResult], list[str]]:
    """Collective bus bandwidth across ``world_size`` local processes on loopback (127.0.0.1)."""
    torch = _torch()
    if torch is None:
        return [], [f"collectives: {TORCH_MISSING}"]
    import torch.distributed as dist
    import torch.multiprocessing as mp

    for op in ops:
        if op not in BUSBW_FACTOR:
            raise SpecError(f"unknown collective '{op}' (choose from {', '.join(COLLECTIVES)})")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = backend or ("nccl" if gpus >= 2 else "gloo")
    if backend == "nccl" and gpus < 2:
        return [], ["collectives nccl: needs >= 2 GPUs on this node"]
    if not dist.is_available() or (backend == "gloo" and not dist.is_gloo_available()):
        return [], [f"collectives: torch.distributed/{backend} not available in this torch build"]
    world = world_size or (gpus if backend == "nccl" else 2)
    if world < 2:
        raise SpecError(f"collectives need >= 2 processes (got {world})")
    if backend == "nccl" and world > gpus:
        raise SpecError(f"{world} NCCL ranks requested but only {gpus} GPUs")
    sizes = list(sizes or sweep_sizes(8 * KIB, (256 if backend == "nccl" else 16) * MIB))
    if backend == "gloo" and not os.environ.get("GLOO_SOCKET_IFNAME"):
        lo = _loopback_ifname()
        if lo:
            os.environ["GLOO_SOCKET_IFNAME"] = lo
    with tempfile.TemporaryDirectory(prefix="ct-bench-") as tmp:
        out = Path(tmp) / "result.json"
        mp.start_processes(_collective_worker, args=(world, f"tcp://127.0.0.1:{_free_port()}", backend, list(ops),
                                                     sizes, str(out)), nprocs=world, join=True,
                           start_method="spawn")
        data = json.loads(out.read_text())
    device = f"{world} x {torch.cuda.get_device_name(0)}" if backend == "nccl" else f"{world} CPU processes"
    versions = f"torch {torch.__version__}" + (
        f", NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}" if backend == "nccl" else "")
    res = []
    for op in ops:
        factor = BUSBW_FACTOR[op](world)
        rows = [CollectiveRow(r["size"], r["count"], r["time_s"] / US, r["size"] / r["time_s"] / GB,
                              r["size"] / r["time_s"] / GB * factor, r["wrong"],
                              r["ip_time_s"] / US if "ip_time_s" in r else None, r.get("ip_wrong"))
                for r in data[op]]
        res.append(CollectiveResult(op, backend, world, device, rows, versions,
                                    "in-place" if op == "all_reduce" else "out-of-place"))
    return res, []


def format_nccl_tests(res: CollectiveResult) -> str:
    """The table as nccl-tests prints it: out-of-place and in-place blocks, ``N/A`` in a block torch has
    no variant for (all_reduce is in-place only), then the out-of-bounds and average bus bandwidth lines."""
    factor = BUSBW_FACTOR[res.op](res.world_size)
    lines = [f"# Collective test starting: {res.op}_perf",
             f"# {res.op} on {res.device}, backend {res.backend} ({res.versions})",
             "#" + " " * 62 + "out-of-place                       in-place",
             f"# {'size':>10} {'count':>12} {'type':>6} {'redop':>6} {'root':>6} {'time':>8} {'algbw':>7} "
             f"{'busbw':>7} {'#wrong':>6} {'time':>8} {'algbw':>7} {'busbw':>7} {'#wrong':>6}",
             f"# {'(B)':>10} {'(elements)':>12} {'':>6} {'':>6} {'':>6} {'(us)':>8} {'(GB/s)':>7} {'(GB/s)':>7} "
             f"{'':>6} {'(us)':>8} {'(GB/s)':>7} {'(GB/s)':>7}"]
    redop = "none" if res.op == "all_gather" else "sum"
    na = f"{'N/A':>8} {'N/A':>7} {'N/A':>7} {'N/A':>6}"

    def cells(t_us: float | None, wrong: int | None, size: int) -> str:
        if t_us is None:
            return na
        alg = size / (t_us * US) / GB
        return f"{t_us:>8.1f} {alg:>7.2f} {alg * factor:>7.2f} {wrong if wrong is not None else 0:>6}"

    for r in res.rows:
        main = cells(r.time_us, r.wrong, r.size_bytes)
        other = cells(r.ip_time_us, r.ip_wrong, r.size_bytes)
        oop, ip = (na, main) if res.block == "in-place" else (main, other)
        lines.append(f"  {r.size_bytes:>10} {r.count:>12} {'float':>6} {redop:>6} {-1:>6} {oop} {ip}")
    wrong = sum(r.wrong + (r.ip_wrong or 0) for r in res.rows)
    lines.append(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}")
    lines.append(f"# Avg bus bandwidth    : {res.avg_busbw_gb_per_s:.3f}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- storage
def _open_direct(path: Path, flags: int) -> tuple[int, bool]:
    direct = getattr(os, "O_DIRECT", 0)
    if direct:
        try:
            return os.open(path, flags | direct, 0o600), True
        except OSError:
            pass
    return os.open(path, flags, 0o600), False


def _drop_cache(fd: int) -> None:
    os.fsync(fd)
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def storage(path: str | Path, file_bytes: int = 256 * MIB, iodepth: int = 16,
            ssd_id: str | None = None, rand_seconds: float = RANDOM_READ_S) -> StorageResult:
    """Sequential write/read bandwidth and random 4 KiB read IOPS of a temporary file in directory ``path``."""
    d = Path(path)
    if not d.is_dir():
        raise SpecError(f"storage benchmark path {d} is not a directory")
    if file_bytes < STORAGE_BLOCK_BYTES:
        raise SpecError(f"storage file size must be >= {STORAGE_BLOCK_BYTES // MIB} MiB (got {file_bytes} B)")
    if iodepth < 1:
        raise SpecError(f"iodepth must be >= 1 (got {iodepth})")
    expected: dict[str, float] = {}
    if ssd_id:
        ssd = catalog.get("ssd", ssd_id)
        expected = {k: float(getattr(ssd, k)) for k in ("seq_read_gb_per_s", "seq_write_gb_per_s",
                                                          "rand_read_iops") if getattr(ssd, k, None)}
    blocks = file_bytes // STORAGE_BLOCK_BYTES
    nbytes = blocks * STORAGE_BLOCK_BYTES
    buf = mmap.mmap(-1, STORAGE_BLOCK_BYTES)  # page-aligned, as O_DIRECT requires
    buf.write(os.urandom(STORAGE_BLOCK_BYTES))
    fd_tmp, name = tempfile.mkstemp(prefix="ct-bench-", dir=d)
    os.close(fd_tmp)
    fpath = Path(name)
    try:
        fd, direct_w = _open_direct(fpath, os.O_WRONLY | os.O_TRUNC)
        t0 = time.perf_counter()
        for _ in range(blocks):
            os.write(fd, buf)
        os.fsync(fd)
        t_write = time.perf_counter() - t0
        _drop_cache(fd)
        os.close(fd)
        fd, direct_r = _open_direct(fpath, os.O_RDONLY)
        if not direct_r:
            _drop_cache(fd)
        t0 = time.perf_counter()
        while os.readv(fd, [buf]) > 0:
            pass
        t_read = time.perf_counter() - t0
        if not direct_r:
            _drop_cache(fd)
        pages = nbytes // RANDOM_READ_BYTES
        stop_at = time.perf_counter() + rand_seconds
        counts = [0] * iodepth

        def reader(k: int) -> None:
            rng = random.Random(k)
            local = mmap.mmap(-1, RANDOM_READ_BYTES)
            n = 0
            while time.perf_counter() < stop_at:
                os.preadv(fd, [local], rng.randrange(pages) * RANDOM_READ_BYTES)
                n += 1
            counts[k] = n
            local.close()

        threads = [threading.Thread(target=reader, args=(k,)) for k in range(iodepth)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        t_rand = time.perf_counter() - t0
        os.close(fd)
    finally:
        buf.close()
        fpath.unlink(missing_ok=True)
    return StorageResult(str(d), nbytes, nbytes / t_write / GB, nbytes / t_read / GB, sum(counts) / t_rand,
                         iodepth, direct_w and direct_r, expected)
