"""Storage micro-benchmark without fio: sequential write/read bandwidth and random 4 KiB read IOPS of a
temporary file in a directory, with O_DIRECT where the file system allows it (:mod:`.bench_io` runs fio
instead when it is installed)."""

from __future__ import annotations

import mmap
import os
import random
import tempfile
import threading
import time
from pathlib import Path

from clustertwin import catalog
from clustertwin.errors import SpecError
from clustertwin.ops.perf.bench import StorageResult
from clustertwin.units import GB, KIB, MIB

STORAGE_BLOCK_BYTES = 4 * MIB
"""Block of the sequential write and read passes."""
RANDOM_READ_BYTES = 4 * KIB
"""Size of one random read."""
RANDOM_READ_S = 2.0
"""Duration of the random-read phase."""


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
