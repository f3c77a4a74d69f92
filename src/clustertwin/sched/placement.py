"""Placement strategies: which nodes and GPUs a job that fits gets.

- ``first-fit``: lowest-numbered nodes (and GPU slots) that can host the job.
- ``best-fit`` (packing): the node with the fewest wholly free GPUs that still fits (whole-GPU units), the
  GPU with the least free share left that still fits (shared units); jobs spread over several nodes take
  the nodes with the most free GPUs first, so they span as few nodes as possible.
- ``topology``: as best-fit, but first choose the leaf switch: for one unit, the fullest leaf that can host
  it (keeping emptier leaves whole for large jobs); for several units or a spread job, the leaf with the
  least room that holds the whole job, else leaves with the most room first (fewest leaves spanned).
- ``fgd``: fragmentation gradient descent (Weng et al., USENIX ATC 2023): put the unit where the node's
  expected fragmentation grows least. Node fragmentation for a workload ``M`` of task shapes with
  popularity ``p_k``: ``F_n = sum_k p_k F_n(k)``; ``F_n(k)`` is the free GPU capacity of node ``n`` that
  task ``k`` cannot use: all free capacity when ``k`` does not fit on the node, else the free capacity on
  GPUs whose free share is below the task's share (share tasks) or on partially used GPUs (whole-GPU
  tasks); a task whose CPU or memory does not fit the node finds all its free GPU capacity unusable.
  Jobs of several units or spread over nodes fall back to best-fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.sched.jobs import MILLI_PER_GPU, JobTable
from clustertwin.sched.state import Allocation, ClusterState, Request

PLACEMENTS = ("first-fit", "best-fit", "topology", "fgd")
_BIG = np.iinfo(np.int64).max // 4


@dataclass(frozen=True)
class WorkloadShapes:
    """Task shapes of the workload with their popularity (FGD's target workload ``M``): whole-GPU shapes
    (``whole_g`` GPUs) and GPU-share shapes (``share_m`` milli-GPUs), each with the CPU (milli-cores) and
    memory (MiB) a unit needs on its node."""

    whole_g: np.ndarray
    whole_p: np.ndarray
    share_m: np.ndarray
    share_p: np.ndarray
    whole_cpu: np.ndarray | None = None
    whole_mem: np.ndarray | None = None
    share_cpu: np.ndarray | None = None
    share_mem: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name, ref in (("whole_cpu", self.whole_g), ("whole_mem", self.whole_g), ("share_cpu", self.share_m),
                          ("share_mem", self.share_m)):
            if getattr(self, name) is None:
                object.__setattr__(self, name, np.zeros(len(ref), dtype=np.int64))

    @classmethod
    def from_jobs(cls, jobs: JobTable, max_gpus_per_node: int) -> WorkloadShapes:
        """Popularity = share of units of each (GPU, CPU, memory) shape among single-node units."""
        units = np.maximum(jobs.units, 1)
        milli = jobs.share_milli
        g = jobs.gpus_per_unit
        single = g <= max_gpus_per_node
        share = single & (milli < MILLI_PER_GPU)
        whole = single & ~share
        total = float(units[single].sum()) or 1.0

        def group(size: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, ...]:
            keys = np.stack([size[mask], jobs.cpu_milli[mask], jobs.memory_mib[mask]], axis=1).astype(np.int64)
            if not len(keys):
                empty = np.zeros(0, dtype=np.int64)
                return empty, np.zeros(0), empty, empty
            uniq, inv = np.unique(keys, axis=0, return_inverse=True)
            p = np.bincount(inv.ravel(), weights=units[mask], minlength=len(uniq)) / total
            return uniq[:, 0], p, uniq[:, 1], uniq[:, 2]

        wg, wp, wc, wm = group(g.astype(np.int64), whole)
        sm, sp, sc, smem = group(milli, share)
        return cls(wg, wp, sm, sp, wc, wm, sc, smem)


def node_fragmentation(rows: np.ndarray, shapes: WorkloadShapes, cpu: np.ndarray | None = None,
                       mem: np.ndarray | None = None) -> np.ndarray:
    """``F_n`` (milli-GPUs) for free-slot rows ``rows`` (nodes x slots) with free ``cpu`` / ``mem`` per
    node (unconstrained when None); see the module docstring."""
    tot = rows.sum(axis=1)
    whole = (rows == MILLI_PER_GPU).sum(axis=1)
    mx = rows.max(axis=1)
    frag = _share_frag(rows, shapes.share_m)
    big = np.full(len(rows), np.iinfo(np.int64).max // 4, dtype=np.int64)
    return _expected_frag(tot, whole, mx, frag, big if cpu is None else cpu, big if mem is None else mem, shapes)


def _share_frag(rows: np.ndarray, share_m: np.ndarray) -> np.ndarray:
    """``sum_s free[n, s] * [free[n, s] < m_k]`` for every node and share shape ``k``."""
    if not len(share_m):
        return np.zeros((rows.shape[0], 0), dtype=np.int64)
    r = rows[:, :, None]
    return (r * (r < share_m[None, None, :])).sum(axis=1)


def _expected_frag(tot, whole, mx, frag, cpu, mem, shapes: WorkloadShapes) -> np.ndarray:
    """``sum_k p_k F_n(k)``: a shape that does not fit the node (GPU, CPU or memory) finds all the node's
    free GPU capacity unusable."""
    out = np.zeros(len(tot), dtype=float)
    c, mm = cpu[:, None], mem[:, None]
    if len(shapes.share_m):
        fits = (mx[:, None] >= shapes.share_m[None, :]) & (c >= shapes.share_cpu[None, :]) & (
            mm >= shapes.share_mem[None, :])
        out += (np.where(fits, frag, tot[:, None]) * shapes.share_p[None, :]).sum(axis=1)
    if len(shapes.whole_g):
        fits = (whole[:, None] >= shapes.whole_g[None, :]) & (c >= shapes.whole_cpu[None, :]) & (
            mm >= shapes.whole_mem[None, :])
        partial = (tot - MILLI_PER_GPU * whole)[:, None]
        out += (np.where(fits, partial, tot[:, None]) * shapes.whole_p[None, :]).sum(axis=1)
    return out


def _alloc(nodes: list[np.ndarray], slots: list[np.ndarray], milli: list[np.ndarray]) -> Allocation:
    return Allocation.make(np.concatenate(nodes).astype(np.int64), np.concatenate(slots).astype(np.int64),
                      np.concatenate(milli).astype(np.int64))


def _free_slots(state: ClusterState, n: int, g: int) -> list[int]:
    """The first ``g`` wholly free GPU slots of node ``n``."""
    row = state.rows[n]
    if g == 1:
        return [row.index(MILLI_PER_GPU)]
    return [s for s, v in enumerate(row) if v == MILLI_PER_GPU][:g]


_FREE_SLOTS: dict[tuple[int, ...], tuple[int, ...]] = {}
"""Wholly free slots of a node by its row of free milli-GPUs (a memo: rows repeat, nodes have few slots)."""
_SLOT_CACHE_MAX = 1 << 16
"""Most rows the memo holds (rows with GPU shares can be many; past this they are computed each time)."""


_ROW_HASH_SEED = 0x9E3779B97F4A7C15  # golden-ratio constant of Fibonacci hashing


def _unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows and the index of each one's first occurrence, ordered by that index. Rows are
    hashed to one int64 (fast) and the grouping is verified exactly; on a hash collision the exact
    (slower) ``np.unique(axis=0)`` is used."""
    weights = (np.arange(1, rows.shape[1] + 1, dtype=np.uint64) * np.uint64(_ROW_HASH_SEED)) | np.uint64(1)
    with np.errstate(over="ignore"):
        keys = (rows.astype(np.uint64) * weights[None, :]).sum(axis=1, dtype=np.uint64)
    _, first, inv = np.unique(keys, return_index=True, return_inverse=True)
    if not np.array_equal(rows[first][inv.ravel()], rows):
        _, first = np.unique(rows, axis=0, return_index=True)
    first = np.sort(first)
    return rows[first], first


class Placer:
    """Chooses nodes and GPU slots for a request on a :class:`ClusterState`."""

    def __init__(self, name: str, shapes: WorkloadShapes | None = None) -> None:
        if name not in PLACEMENTS:
            raise SpecError(f"unknown placement '{name}'{did_you_mean(name, PLACEMENTS)}; "
                            f"choose from {', '.join(PLACEMENTS)}")
        if name == "fgd" and shapes is None:
            raise SpecError("fgd placement needs the workload's task shapes")
        self.name = name
        self.shapes = shapes

    # ------------------------------------------------------------------ public
    def place(self, state: ClusterState, req: Request) -> Allocation | None:
        """An allocation for ``req``, or None if it does not fit now."""
        if req.kind == "whole" and req.g >= 1 and not req.has_res and self.name in ("first-fit", "best-fit"):
            return self._whole_fast(state, req)
        if req.kind == "spread" and req.all_eligible and self.name in ("first-fit", "best-fit"):
            return self._spread_fast(state, req)
        contrib = state.contribution(req)
        if int(contrib.sum()) < req.need:
            return None
        if req.kind == "spread":
            return self._spread(state, req, contrib)
        cand = np.flatnonzero(contrib)
        if req.units == 1:
            if self.name == "fgd":
                alloc = self._fgd_one(state, req, cand)
            else:
                if self.name == "topology":
                    cand = self._fullest_leaf(state, cand)
                alloc = self._one(state, req, cand)
        else:
            alloc = self._many(state, req, cand)
        if req.has_res:
            alloc = alloc.with_res(req.cpu, req.mem)
        return alloc

    # ------------------------------------------------------------------ single unit
    def _whole_fast(self, state: ClusterState, req: Request) -> Allocation | None:
        """Fast path of :meth:`place` for whole-GPU units without CPU/memory (first-fit, best-fit), from
        the nodes' bit masks by wholly free GPUs: the same nodes and slots as the general path (first-fit:
        the lowest-numbered nodes that fit; best-fit: the fewest wholly free GPUs first, then the lowest
        number)."""
        g, k = req.g, req.units
        eq = state.whole_eq
        chosen: list[int] = []
        if self.name == "first-fit":
            m = state.nodes_with_whole(g, req.elig_mask)
            masks = [m]
        else:
            masks = [eq[w] & req.elig_mask for w in range(g, len(eq))]
        for m in masks:
            while m and len(chosen) < k:
                low = m & -m
                chosen.append(low.bit_length() - 1)
                m ^= low
            if len(chosen) == k:
                break
        else:
            return None
        if k == 1:
            return Allocation.whole_gpus(chosen[0], _free_slots(state, chosen[0], g))
        groups = tuple((n, tuple(_free_slots(state, n, g))) for n in chosen)
        return Allocation(None, tuple(chosen), k * g * MILLI_PER_GPU, groups=groups)

    def _one(self, state: ClusterState, req: Request, cand: np.ndarray) -> Allocation:
        if req.kind == "whole":
            if self.name == "first-fit":
                n = int(cand[0])
            else:
                n = int(cand[np.argmin(state.whole[cand])])
            return self._unit(state, req, n)
        rows = state.free[cand]
        if self.name == "first-fit":
            i, s = divmod(int(np.argmax((rows >= req.m).ravel())), rows.shape[1])
        else:
            left = np.where(rows >= req.m, rows - req.m, _BIG)
            i, s = divmod(int(np.argmin(left.ravel())), rows.shape[1])
        return Allocation.make(np.array([cand[i]]), np.array([s]), np.array([req.m]))

    def _unit(self, state: ClusterState, req: Request, n: int) -> Allocation:
        if req.kind == "whole":
            return Allocation.whole_gpus(n, _free_slots(state, n, req.g))
        row = state.free[n]
        if self.name == "first-fit":
            s = int(np.argmax(row >= req.m))
        else:
            s = int(np.argmin(np.where(row >= req.m, row - req.m, _BIG)))
        return Allocation.make(np.array([n]), np.array([s]), np.array([req.m]))

    def _fullest_leaf(self, state: ClusterState, cand: np.ndarray) -> np.ndarray:
        """Candidates restricted to the candidate leaf with the least free capacity (ties: lowest id)."""
        leaf_free = np.bincount(state.leaf, weights=state.tot, minlength=state.cluster.leaves)
        cand_leaves = np.unique(state.leaf[cand])
        best = cand_leaves[np.argmin(leaf_free[cand_leaves])]
        return cand[state.leaf[cand] == best]

    # ------------------------------------------------------------------ several units
    def _many(self, state: ClusterState, req: Request, cand: np.ndarray) -> Allocation:
        k = req.units
        score = state.whole[cand] if req.kind == "whole" else state.top[cand]
        if self.name == "first-fit":
            chosen = cand[:k]
        elif self.name == "topology":
            chosen = self._leaf_pick(state, cand, np.ones(len(cand), dtype=np.int64), score, k, count=True)
        else:
            chosen = cand[np.argsort(score, kind="stable")[:k]]
        if req.kind == "whole":  # whole GPUs node by node: held as groups (taken and released per node)
            nodes = chosen.tolist()
            groups = tuple([(n, tuple(_free_slots(state, n, req.g))) for n in nodes])
            return Allocation(None, tuple(nodes), len(nodes) * req.g * MILLI_PER_GPU, groups=groups)
        parts = [self._unit(state, req, n) for n in chosen.tolist()]
        return Allocation(tuple(e for p in parts for e in p.entries), tuple(dict.fromkeys(
            n for p in parts for n in p.node_list)), sum(p.total_milli for p in parts))

    def _leaf_pick(self, state: ClusterState, cand: np.ndarray, amount: np.ndarray, score: np.ndarray,
                   need: int, *, count: bool) -> np.ndarray:
        """Candidate nodes in the order to use them: the leaf with the least room that holds ``need``
        alone; otherwise leaves with the most room first. Within a leaf, ascending ``score`` for unit
        counts (packing), descending ``amount`` for spread jobs (fewest nodes)."""
        leaves = state.leaf[cand]
        room = np.bincount(leaves, weights=amount, minlength=state.cluster.leaves)
        enough = np.flatnonzero(room >= need)
        if len(enough):
            order_leaves = [int(enough[np.argmin(room[enough])])]
        else:
            order_leaves = [int(x) for x in np.argsort(-room, kind="stable") if room[x] > 0]
        picked: list[np.ndarray] = []
        got = 0
        for lf in order_leaves:
            mask = leaves == lf
            nodes, sc, am = cand[mask], score[mask], amount[mask]
            order = np.argsort(sc, kind="stable") if count else np.argsort(-am, kind="stable")
            picked.append(nodes[order])
            got += int(am.sum())
            if got >= need:
                break
        out = np.concatenate(picked)
        return out[:need] if count else out

    # ------------------------------------------------------------------ spread
    def _spread(self, state: ClusterState, req: Request, contrib: np.ndarray) -> Allocation:
        cand = np.flatnonzero(contrib)
        amount = contrib[cand]
        if self.name == "first-fit":
            order = cand
        elif self.name == "topology":
            order = self._leaf_pick(state, cand, amount, amount, req.g, count=False)
        else:
            order = cand[np.argsort(-amount, kind="stable")]
        nodes, slots = [], []
        remaining = req.g
        for n in order.tolist():
            t = min(int(contrib[n]), remaining)
            if t <= 0:
                continue
            nodes.append(np.full(t, n))
            slots.append(np.flatnonzero(state.free[n] == MILLI_PER_GPU)[:t])
            remaining -= t
            if remaining == 0:
                break
        return _alloc(nodes, slots, [np.full(len(s), MILLI_PER_GPU) for s in slots])

    def _spread_fast(self, state: ClusterState, req: Request) -> Allocation | None:
        """Fast path of :meth:`_spread` for spread jobs that may use any node (first-fit, best-fit): the fit
        from the cluster's count of wholly free GPUs, the nodes from the bit masks by wholly free GPUs
        (first-fit: ascending node number; best-fit: the most wholly free GPUs first, then the lowest
        number), the slots from the node rows: the same allocation as the general path."""
        remaining = req.g
        if state.whole_sum < remaining:
            return None
        whole_l, rows = state.whole_l, state.rows
        if self.name == "first-fit":
            masks = [state.whole_ge[1]]
        else:
            eq = state.whole_eq
            masks = [eq[w] for w in range(len(eq) - 1, 0, -1)]
        nodes: list[int] = []
        groups: list[tuple[int, tuple[int, ...]]] = []
        slot_cache = _FREE_SLOTS
        for m in masks:
            while m:
                low = m & -m
                n = low.bit_length() - 1
                m ^= low
                w = whole_l[n]
                row = rows[n]
                key = tuple(row)
                free = slot_cache.get(key)
                if free is None:
                    free = tuple([s for s, v in enumerate(row) if v == MILLI_PER_GPU])
                    if len(slot_cache) < _SLOT_CACHE_MAX:
                        slot_cache[key] = free
                if w <= remaining:
                    slots, take = free, w
                else:
                    slots, take = free[:remaining], remaining
                groups.append((n, slots))
                nodes.append(n)
                remaining -= take
                if not remaining:
                    return Allocation(None, tuple(nodes), req.g * MILLI_PER_GPU, groups=tuple(groups))
        return None  # (unreachable: whole_sum counted enough wholly free GPUs)

    # ------------------------------------------------------------------ FGD
    def _fgd_one(self, state: ClusterState, req: Request, cand: np.ndarray) -> Allocation:
        """Minimise the growth of ``F_n``. Nodes with the same multiset of free shares and the same free
        CPU and memory are one state; the gradient is evaluated once per distinct state (ties: the
        lowest-numbered node)."""
        sh = self.shapes
        assert sh is not None
        srt = -np.sort(-state.free[cand], axis=1)  # each node's free shares, largest first
        s = srt.shape[1]
        key = np.concatenate([srt, state.cpu_free[cand, None], state.mem_free[cand, None]], axis=1)
        ukey, first = _unique_rows(key)
        uniq, cpu, mem = ukey[:, :s], ukey[:, s], ukey[:, s + 1]
        cpu_a, mem_a = cpu - (req.cpu if req.has_res else 0), mem - (req.mem if req.has_res else 0)
        tot = uniq.sum(axis=1)
        whole = (uniq == MILLI_PER_GPU).sum(axis=1)
        t1 = uniq[:, 0]
        t2 = uniq[:, 1] if s > 1 else np.zeros(len(uniq), dtype=np.int64)
        frag = _share_frag(uniq, sh.share_m)
        before = _expected_frag(tot, whole, t1, frag, cpu, mem, sh)
        if req.kind == "whole":
            partial = np.where(uniq < MILLI_PER_GPU, uniq, 0).max(axis=1)
            whole_a = whole - req.g
            mx_a = np.where(whole_a > 0, MILLI_PER_GPU, partial)
            delta = _expected_frag(tot - req.g * MILLI_PER_GPU, whole_a, mx_a, frag, cpu_a, mem_a, sh) - before
            best = np.lexsort((cand[first], delta))[0]
            return self._unit(state, req, int(cand[first[best]]))
        ii, ss = np.nonzero(uniq >= req.m)
        f = uniq[ii, ss]
        fa = f - req.m
        others = np.where(f == t1[ii], t2[ii], t1[ii])
        mx_a = np.maximum(others, fa)
        whole_a = whole[ii] - (f == MILLI_PER_GPU)
        m_k = sh.share_m[None, :]
        frag_a = frag[ii] - f[:, None] * (f[:, None] < m_k) + fa[:, None] * (fa[:, None] < m_k)
        delta = _expected_frag(tot[ii] - req.m, whole_a, mx_a, frag_a, cpu_a[ii], mem_a[ii], sh) - before[ii]
        best = np.lexsort((ss, cand[first[ii]], delta))[0]
        n = int(cand[first[ii[best]]])
        slot = int(np.flatnonzero(state.free[n] == f[best])[0])
        return Allocation.make(np.array([n]), np.array([slot]), np.array([req.m]))
