"""Collective benchmark under an external launcher (torchrun / srun): the multi-node stage of
``node validate``. Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT from the environment
(``init_method="env://"``); rank 0 prints the nccl-tests-style table.

    torchrun --nnodes=2 --nproc_per_node=8 ... -m clustertwin.ops.perf.dist_bench --op all_reduce -b 8M -e 8G
"""

from __future__ import annotations

import argparse
import os
import sys

from clustertwin.ops.perf.bench import (
    BUSBW_FACTOR,
    FLOAT32_BYTES,
    CollectiveResult,
    CollectiveRow,
    timed_collective,
)
from clustertwin.ops.perf.bench_collectives import format_nccl_tests, op_pair, sweep_sizes
from clustertwin.units import GB, US, parse_size


def run(op: str, sizes: list[int], backend: str | None = None) -> CollectiveResult | None:
    """Time ``op`` over ``sizes`` on the launcher's process group; the result on rank 0, None elsewhere."""
    import torch
    import torch.distributed as dist

    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if backend == "nccl":
        torch.cuda.set_device(local)
    dev = torch.device("cuda", local) if backend == "nccl" else torch.device("cpu")
    dist.init_process_group(backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    sync = torch.cuda.synchronize if backend == "nccl" else (lambda: None)
    rows = []
    try:
        for size in sizes:
            fn, check, count = op_pair(dist, torch, op, rank, world, size // FLOAT32_BYTES, dev)
            dist.barrier()
            t = torch.tensor([timed_collective(fn, sync, dist, torch, dev)], dtype=torch.float64, device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            wrong = torch.tensor([check()], dtype=torch.float64, device=dev)
            dist.all_reduce(wrong)
            nbytes, secs = count * FLOAT32_BYTES, float(t.item())
            algbw = nbytes / secs / GB
            rows.append(CollectiveRow(nbytes, count, secs / US, algbw, algbw * BUSBW_FACTOR[op](world),
                                      int(wrong.item())))
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    return CollectiveResult(op, backend, world, f"{world} ranks", rows, f"torch {torch.__version__}",
                            "in-place" if op == "all_reduce" else "out-of-place")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m clustertwin.ops.perf.dist_bench", description=__doc__)
    ap.add_argument("--op", default="all_reduce", choices=sorted(BUSBW_FACTOR))
    ap.add_argument("-b", "--min-bytes", default="8M")
    ap.add_argument("-e", "--max-bytes", default="8G")
    ap.add_argument("-f", "--step-factor", type=int, default=2)
    ap.add_argument("--backend", choices=("nccl", "gloo"))
    a = ap.parse_args(argv)
    res = run(a.op, sweep_sizes(parse_size(a.min_bytes), parse_size(a.max_bytes), a.step_factor), a.backend)
    if res is not None:
        print(format_nccl_tests(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
