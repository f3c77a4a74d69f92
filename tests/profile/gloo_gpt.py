"""A tiny GPT trained for a few steps under torch.profiler with gloo on CPU, TP2 x DP2 (4 processes).

Tensor parallelism as in Megatron-LM (Shoeybi et al., 2019, section 3): per layer, a column-parallel QKV and
fc1 behind an ``f`` operator (identity forward, all-reduce backward) and a row-parallel output projection and
fc2 followed by a ``g`` operator (all-reduce forward, identity backward). So every step makes, per rank,
``4 * LAYERS`` TP all-reduces of ``BATCH * SEQ * HIDDEN`` fp32 values (2 per layer forward, 2 backward) and
one DP all-reduce of the rank's flattened gradients. ``extra`` adds one more DP all-reduce per step, of
:data:`EXTRA_BYTES` (a large unbucketed buffer synchronised by mistake: big enough that its time stands
above the run-to-run noise of four gloo processes sharing two cores); ``sleep_s`` sleeps in the data set's
``__getitem__`` (a slow data loader).

Run as a script to record a trace set: ``python -m tests.profile.gloo_gpt OUT_DIR [--sleep S] [--extra]``.
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from pathlib import Path

TP, DP = 2, 2
WORLD = TP * DP
LAYERS, HIDDEN, HEADS, SEQ, BATCH, VOCAB = 2, 64, 4, 32, 4, 128
STEPS, WAIT, WARMUP, ACTIVE = 5, 1, 1, 3
"""Steps run and the profiler schedule: the trace holds ``ACTIVE`` ProfilerSteps."""
EXTRA_BYTES = 16 * 2**20
"""Bytes of the extra DP all-reduce of ``--extra`` (4 Mi fp32 values)."""


def tp_ranks(rank: int) -> list[int]:
    return [r for r in range(WORLD) if r // TP == rank // TP]


def dp_ranks(rank: int) -> list[int]:
    return [r for r in range(WORLD) if r % TP == rank % TP]


def tp_allreduce_bytes() -> int:
    """Bytes of one TP all-reduce (the activations of one micro-batch, fp32)."""
    return BATCH * SEQ * HIDDEN * 4


def local_params() -> int:
    """Parameters held by one rank (embedding, norms and head replicated; the layers split over TP)."""
    h, f = HIDDEN, 4 * HIDDEN
    per_layer = (2 * h) * 2 + (h * 3 * h // TP + 3 * h // TP) + (h // TP * h + h) + (h * f // TP + f // TP) + (f // TP * h + h)
    return VOCAB * h + SEQ * h + LAYERS * per_layer + 2 * h + h * VOCAB


def dp_allreduce_bytes() -> int:
    return local_params() * 4


def _worker(rank: int, port: int, out: str, sleep_s: float, extra: bool) -> None:  # pragma: no cover - subprocess
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    tp_groups = [dist.new_group([d * TP + t for t in range(TP)], group_desc=f"tp{d}") for d in range(DP)]
    dp_groups = [dist.new_group([d * TP + t for d in range(DP)], group_desc=f"dp{t}") for t in range(TP)]
    tp_g, dp_g = tp_groups[rank // TP], dp_groups[rank % TP]
    tp_desc, dp_desc = f"tp{rank // TP}", f"dp{rank % TP}"
    mark = torch.profiler.record_function  # names the group of each collective (gloo records no comm args)
    torch.manual_seed(rank % TP)

    class F(torch.autograd.Function):  # identity forward, TP all-reduce backward
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            g = g.contiguous()
            with mark(tp_desc):
                dist.all_reduce(g, group=tp_g)
            return g

    class G(torch.autograd.Function):  # TP all-reduce forward, identity backward
        @staticmethod
        def forward(ctx, x):
            x = x.contiguous()
            with mark(tp_desc):
                dist.all_reduce(x, group=tp_g)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    h, nh = HIDDEN, HEADS // TP

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.qkv, self.proj = nn.Linear(h, 3 * h // TP), nn.Linear(h // TP, h)
            self.fc1, self.fc2 = nn.Linear(h, 4 * h // TP), nn.Linear(4 * h // TP, h)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(F.apply(self.ln1(x))).view(b, s, 3, nh, h // HEADS).unbind(2)
            a = nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                           is_causal=True)
            x = x + G.apply(self.proj(a.transpose(1, 2).reshape(b, s, h // TP)))
            return x + G.apply(self.fc2(nn.functional.gelu(self.fc1(F.apply(self.ln2(x))))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(VOCAB, h), nn.Embedding(SEQ, h)
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln, self.head = nn.LayerNorm(h), nn.Linear(h, VOCAB, bias=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    class Tokens(Dataset):
        def __len__(self):
            return BATCH * STEPS

        def __getitem__(self, i):
            if sleep_s:
                time.sleep(sleep_s / BATCH)
            g = torch.Generator().manual_seed(i)
            return torch.randint(0, VOCAB, (SEQ + 1,), generator=g)

    model = GPT()
    assert sum(p.numel() for p in model.parameters()) == local_params()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1)
    path = Path(out) / f"rank{rank}.json"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                record_shapes=True,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for batch in DataLoader(Tokens(), batch_size=BATCH):
            logits = model(batch[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            with mark(dp_desc):
                dist.all_reduce(flat, group=dp_g)
                if extra:
                    dist.all_reduce(torch.ones(EXTRA_BYTES // 4), group=dp_g)
            opt.step()
            prof.step()
    dist.destroy_process_group()


def record(out: Path, *, sleep_s: float = 0.0, extra: bool = False) -> list[Path]:
    """Train the tiny GPT on 4 gloo processes and write ``rank{0..3}.json`` into ``out``."""
    import torch.multiprocessing as mp

    out.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_worker, args=(port, str(out), sleep_s, extra), nprocs=WORLD, join=True,
                       start_method="spawn")
    return [out / f"rank{r}.json" for r in range(WORLD)]


if __name__ == "__main__":  # pragma: no cover
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--extra", action="store_true")
    a = ap.parse_args()
    record(Path(a.out), sleep_s=a.sleep, extra=a.extra)
