"""Job shapes of a simulation: the distinct requests of a job table, built once, and per-job / per-shape
arrays the scheduling passes filter with numpy instead of asking every job.

A *shape* is one distinct :class:`~clustertwin.sched.state.Request` (kind, GPUs per unit, milli-GPUs of a
share, units, GPU-model eligibility, CPU and memory per unit); jobs of the same shape share one Request
object. A *family* is a shape without its GPU count: within a family, a request for more GPUs never fits
where a smaller one does not (backfill's "no smaller one fitted" skip).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clustertwin.sched.cluster import SchedCluster
from clustertwin.sched.jobs import MILLI_PER_GPU, JobTable
from clustertwin.sched.state import Request

KIND_NAMES = ("whole", "share", "spread")
"""Request kinds by code (``kind`` arrays: 0 whole, 1 share, 2 spread)."""


@dataclass(frozen=True)
class ShapeTable:
    """``shape[j]``: the shape of job ``j``; ``requests[s]``: its Request. Per shape: ``kind``, ``g``
    (GPUs per unit, 0 for shares), ``m`` (milli-GPUs of a share, else 0), ``milli`` (total milli-GPUs),
    ``family`` (code), ``whole_need`` (GPUs one node must have wholly free: ``g`` for whole-GPU shapes,
    else 0), ``share_need`` (``m`` for shares, else 0), ``frag_size`` (the smallest free capacity a unit
    uses: ``m`` for shares, 1 GPU for spread, ``g`` for whole) and ``elig`` (index into ``elig_arrays``).
    ``larger_in_family[s]``: the shapes of ``s``'s family with at least ``s``'s GPUs (``s`` included)."""

    shape: np.ndarray
    requests: tuple[Request, ...]
    kind: np.ndarray
    g: np.ndarray
    m: np.ndarray
    milli: np.ndarray
    family: np.ndarray
    whole_need: np.ndarray
    share_need: np.ndarray
    frag_size: np.ndarray
    elig: np.ndarray
    elig_arrays: tuple[np.ndarray, ...]
    larger_in_family: tuple[tuple[int, ...], ...]

    @property
    def has_shares(self) -> bool:
        return bool((self.kind == 1).any())


def build(jobs: JobTable, cl: SchedCluster) -> ShapeTable:
    """The shapes of ``jobs`` on ``cl``: a share (below one GPU) takes ``share_milli`` of one GPU on each
    of ``max(units, 1)`` nodes; a job without units asking for more GPUs than its largest eligible node
    is spread over nodes (any GPUs); anything else is ``max(units, 1)`` nodes with ``g`` whole GPUs each.
    Eligibility sets are numbered in order of first appearance in the table."""
    n = len(jobs)
    elig_code_of: dict[frozenset[str], int] = {}
    elig_arrays: list[np.ndarray] = []
    max_node: list[int] = []
    for types in dict.fromkeys(jobs.gpu_types):
        if types:
            codes = [i for i, m in enumerate(cl.models) if m in types]
            elig = np.isin(cl.model_code, codes)
        else:
            elig = np.ones(cl.nodes, dtype=bool)
        elig_code_of[types] = len(elig_arrays)
        elig_arrays.append(elig)
        max_node.append(int(cl.gpus[elig].max()) if elig.any() else 0)
    ecode = np.fromiter((elig_code_of[t] for t in jobs.gpu_types), dtype=np.int64, count=n)
    milli = jobs.share_milli
    g = jobs.gpus_per_unit
    share = milli < MILLI_PER_GPU
    spread = ~share & (jobs.units == 0) & (g > np.asarray(max_node, dtype=float)[ecode])
    kind = np.where(share, 1, np.where(spread, 2, 0))
    keys = np.stack([kind, np.where(share, 0, g.astype(np.int64)), np.where(share, milli, 0),
                     np.where(spread, 1, np.maximum(jobs.units, 1)), ecode,
                     np.where(spread, 0, jobs.cpu_milli), np.where(spread, 0, jobs.memory_mib)],
                    axis=1).astype(np.int64)
    uniq, inv = _unique_rows(keys)
    requests = tuple(Request(KIND_NAMES[k], gg, mm, uu, elig_arrays[e], c, me)
                     for k, gg, mm, uu, e, c, me in uniq.tolist())
    s_kind, s_g, s_m = uniq[:, 0], uniq[:, 1], uniq[:, 2]
    family = _unique_rows(uniq[:, [0, 2, 3, 4, 5, 6]])[1]
    members: dict[int, list[int]] = {}
    for s, f in enumerate(family.tolist()):
        members.setdefault(f, []).append(s)
    g_l = s_g.tolist()
    larger = tuple(tuple(o for o in members[f] if g_l[o] >= g_l[s]) for s, f in enumerate(family.tolist()))
    return ShapeTable(
        shape=inv, requests=requests, kind=s_kind, g=s_g, m=s_m,
        milli=np.array([r.total_milli for r in requests], dtype=np.int64), family=family,
        whole_need=np.where(s_kind == 0, s_g, 0), share_need=np.where(s_kind == 1, s_m, 0),
        frag_size=np.where(s_kind == 1, s_m, np.where(s_kind == 2, 1, s_g)), elig=uniq[:, 4],
        elig_arrays=tuple(elig_arrays), larger_in_family=larger)


def _unique_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, axis=0, return_inverse=True)`` (rows in lexicographic order), faster: each column
    is coded by its own ``np.unique``, the codes are combined into one integer per row (mixed radix, first
    column most significant) where that fits in 63 bits."""
    if not len(keys):
        return keys, np.zeros(0, dtype=np.int64)
    codes, radix = [], []
    for c in range(keys.shape[1]):
        u, inv = np.unique(keys[:, c], return_inverse=True)
        codes.append(inv.ravel().astype(np.int64))
        radix.append(len(u))
    if float(np.prod(np.array(radix, dtype=float))) >= 2.0**62:
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        return uniq, inv.ravel().astype(np.int64)
    combined = np.zeros(len(keys), dtype=np.int64)
    for code, r in zip(codes, radix, strict=True):
        combined = combined * r + code
    _, first, inv = np.unique(combined, return_index=True, return_inverse=True)
    return keys[first], inv.ravel().astype(np.int64)
