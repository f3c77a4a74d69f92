"""Host benchmarks with the tools practitioners trust: storage with fio (JSON output) and host memory with a
multi-threaded STREAM-style triad. Every result names the tool that measured it.

- Storage (``fio --output-format=json``): sequential 1 MiB writes and reads (``--rw=write|read``), then random
  4 KiB reads at the requested queue depth (``--rw=randread --iodepth=QD --numjobs=JOBS``), with O_DIRECT where
  the file system allows it (``--direct=1``; tmpfs does not), ``--ioengine=libaio``. Bandwidth from fio's
  ``bw_bytes``, IOPS from ``iops`` (summed over jobs). Without fio the Python path of :func:`bench_storage.storage`
  runs and says so: Python threads issuing ``preadv`` reach a fraction of an NVMe drive's IOPS.
- Host memory (McCalpin STREAM triad ``a = b + s*c``): counted as STREAM counts it, 3 x 8 bytes per element
  (two reads, one write; write-allocate traffic not counted). With torch it is one fused pass
  (``torch.add(b, c, alpha=s, out=a)``) on every core; without, numpy in one thread per core over slices,
  two passes (``a = s*c; a += b``: 5 array passes), counted as the 5 x 8 bytes it moves.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from clustertwin import catalog
from clustertwin.errors import SpecError
from clustertwin.ops.perf.bench import MemoryBandwidthResult, StorageResult
from clustertwin.units import GB, MIB

TRIAD_SCALAR = 3.0
TRIAD_BYTES_PER_ELEMENT = 3 * 8
"""STREAM's count for the fused triad: read b, read c, write a (float64)."""
NUMPY_TRIAD_BYTES_PER_ELEMENT = 5 * 8
"""numpy's two-pass triad moves: read c, write a, read a, read b, write a."""
TRIAD_REPEATS = 5
"""Best of this many timed passes (STREAM reports the best)."""
FIO_TIMEOUT_S = 600
FIO_SEQ_BS = "1M"
FIO_RAND_BS = "4k"


def _threads() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def _peak(cpu_id: str | None) -> tuple[float | None, str]:
    if not cpu_id:
        return None, "no catalog CPU given (--cpu ID)"
    from clustertwin.ops.health.host import read_cpuinfo

    cpu = catalog.get("cpu", cpu_id)
    sockets = read_cpuinfo()[1]
    if not cpu.memory_gb_per_s:
        return None, f"catalog {cpu_id} has no memory bandwidth"
    return cpu.memory_gb_per_s * sockets, f"catalog {cpu_id} x {sockets} socket(s)"


def stream_triad(nbytes: int = 1024 * MIB, cpu_id: str | None = None, threads: int | None = None,
                 use_torch: bool = True) -> MemoryBandwidthResult:
    """Triad bandwidth over three arrays of ``nbytes / 3`` each (module docstring)."""
    if nbytes < 3 * MIB:
        raise SpecError(f"triad needs >= 3 MiB (got {nbytes} bytes)")
    n = nbytes // 3 // 8
    nthreads = threads or _threads()
    torch = None
    if use_torch:
        try:
            import torch
        except ImportError:
            torch = None
    best = float("inf")
    if torch is not None:
        old = torch.get_num_threads()
        torch.set_num_threads(nthreads)
        try:
            a, b, c = (torch.ones(n, dtype=torch.float64) for _ in range(3))
            torch.add(b, c, alpha=TRIAD_SCALAR, out=a)  # touch the pages
            for _ in range(TRIAD_REPEATS):
                t0 = time.perf_counter()
                torch.add(b, c, alpha=TRIAD_SCALAR, out=a)
                best = min(best, time.perf_counter() - t0)
        finally:
            torch.set_num_threads(old)
        moved, tool = TRIAD_BYTES_PER_ELEMENT * n, f"STREAM triad, torch.add fused, {nthreads} threads"
    else:
        a, b, c = np.empty(n), np.ones(n), np.ones(n)
        bounds = np.linspace(0, n, nthreads + 1).astype(np.int64)

        def part(k: int) -> None:
            sl = slice(int(bounds[k]), int(bounds[k + 1]))
            np.multiply(c[sl], TRIAD_SCALAR, out=a[sl])
            np.add(a[sl], b[sl], out=a[sl])

        for rep in range(TRIAD_REPEATS + 1):
            workers = [threading.Thread(target=part, args=(k,)) for k in range(nthreads)]
            t0 = time.perf_counter()
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            if rep:  # the first pass touches the pages
                best = min(best, time.perf_counter() - t0)
        moved, tool = NUMPY_TRIAD_BYTES_PER_ELEMENT * n, f"STREAM triad, numpy two-pass, {nthreads} threads"
    peak, src = _peak(cpu_id)
    return MemoryBandwidthResult("host", 3 * 8 * n, moved / best / GB, peak, src, tool)


def fio_version() -> str | None:
    exe = shutil.which("fio")
    if exe is None:
        return None
    try:
        return subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout.strip() or "fio"
    except (OSError, subprocess.TimeoutExpired):
        return None


def _fio(exe: str, args: list[str]) -> dict[str, Any]:
    try:
        proc = subprocess.run([exe, "--output-format=json", *args], capture_output=True, text=True,
                              timeout=FIO_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise SpecError(f"fio did not finish in {FIO_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        raise SpecError(f"fio failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    text = proc.stdout[proc.stdout.find("{"):]  # fio may print notes before the JSON
    return json.loads(text)


def parse_fio(doc: dict[str, Any], direction: str) -> tuple[float, float]:
    """(bytes/s, IOPS) of ``direction`` ('read' or 'write') summed over the jobs of a fio JSON document."""
    jobs = doc.get("jobs") or []
    if not jobs:
        raise SpecError("fio JSON has no jobs")
    return (float(sum(j[direction]["bw_bytes"] for j in jobs)), float(sum(j[direction]["iops"] for j in jobs)))


def fio_storage(path: str | Path, file_bytes: int = 1024 * MIB, iodepth: int = 32, ssd_id: str | None = None,
                runtime_s: float = 5.0, numjobs: int = 1) -> StorageResult:
    """Sequential write/read GB/s and random 4 KiB read IOPS measured by fio in directory ``path``."""
    exe = shutil.which("fio")
    if exe is None:
        raise SpecError("fio is not installed (apt-get install fio)")
    d = Path(path)
    if not d.is_dir():
        raise SpecError(f"storage benchmark path {d} is not a directory")
    expected: dict[str, float] = {}
    if ssd_id:
        ssd = catalog.get("ssd", ssd_id)
        expected = {k: float(getattr(ssd, k)) for k in ("seq_read_gb_per_s", "seq_write_gb_per_s",
                                                          "rand_read_iops") if getattr(ssd, k, None)}
    fd, name = tempfile.mkstemp(prefix="ct-fio-", dir=d)
    os.close(fd)
    size_mib = max(4, file_bytes // MIB)
    common = [f"--filename={name}", f"--size={size_mib}M", "--ioengine=libaio", "--group_reporting=0",
              "--name=ct", "--end_fsync=1"]
    try:
        direct = "1"
        try:
            w = _fio(exe, [*common, "--rw=write", f"--bs={FIO_SEQ_BS}", "--direct=1", "--iodepth=8"])
        except SpecError:  # O_DIRECT unsupported here (tmpfs, some overlay file systems)
            direct = "0"
            w = _fio(exe, [*common, "--rw=write", f"--bs={FIO_SEQ_BS}", "--direct=0", "--iodepth=8"])
        r = _fio(exe, [*common, "--rw=read", f"--bs={FIO_SEQ_BS}", f"--direct={direct}", "--iodepth=8",
                       "--invalidate=1"])
        rr = _fio(exe, [*common, "--rw=randread", f"--bs={FIO_RAND_BS}", f"--direct={direct}",
                        f"--iodepth={iodepth}", f"--numjobs={numjobs}", "--time_based", f"--runtime={runtime_s:g}",
                        "--invalidate=1", "--randrepeat=0"])
    finally:
        Path(name).unlink(missing_ok=True)
    wbw, _ = parse_fio(w, "write")
    rbw, _ = parse_fio(r, "read")
    _, iops = parse_fio(rr, "read")
    version = w.get("fio version", "fio")
    tool = (f"{version} libaio, direct={direct}, seq bs={FIO_SEQ_BS}, randread bs={FIO_RAND_BS} "
            f"QD{iodepth} x {numjobs} job(s)")
    return StorageResult(str(d), size_mib * MIB, wbw / GB, rbw / GB, iops, iodepth, direct == "1", expected, tool)
