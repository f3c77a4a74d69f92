"""The collective benchmark of ``clustertwin node bench``: torch.distributed ranks on this host (gloo on CPU,
NCCL on GPU) time all_reduce / all_gather / reduce_scatter over message sizes, out-of-place and in-place, and
print them in nccl-tests' format (algbw = bytes / time, busbw = algbw x the op's factor, PERFORMANCE.md)."""

from __future__ import annotations

import json
import os
import socket
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from clustertwin.errors import SpecError
from clustertwin.ops.perf.bench import (
    BUSBW_FACTOR,
    COLLECTIVES,
    FLOAT32_BYTES,
    TORCH_MISSING,
    CollectiveResult,
    CollectiveRow,
    import_torch,
    timed_collective,
)
from clustertwin.units import GB, KIB, MIB, US


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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def op_pair(dist: Any, torch: Any, op: str, rank: int, world: int, count: int,
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
                    run, check, count = op_pair(dist, torch, op, rank, world, size // FLOAT32_BYTES, dev,
                                                 in_place)
                    dist.barrier()
                    t = timed_collective(run, sync, dist, torch, dev)
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
    torch = import_torch()
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
        mp.start_processes(_collective_worker, args=(world, f"tcp://127.0.0.1:{free_port()}", backend, list(ops),
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
