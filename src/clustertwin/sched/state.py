"""Free GPU capacity of every node and GPU (numpy), allocations, and requests.

``free[n, s]`` is the free capacity of GPU slot ``s`` of node ``n`` in milli-GPUs (1000 = a whole free GPU,
0 = busy, absent or down). ``whole[n]`` counts the wholly free GPUs of node ``n``; ``top[n]`` is the
largest free share on node ``n``; ``tot[n]`` the free milli-GPUs. All are kept in step by :meth:`apply`.
``cpu_free`` / ``mem_free`` hold each node's free CPU (milli-cores) and memory (MiB) when the cluster
declares them; every unit of a whole-GPU or shared job takes its CPU and memory on its node.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clustertwin.sched.cluster import SchedCluster
from clustertwin.sched.jobs import MILLI_PER_GPU


class Allocation:
    """GPU capacity held by one job: ``milli[i]`` milli-GPUs of slot ``slots[i]`` on node ``nodes[i]``.

    Held as Python ints: ``entries`` ``(node, slot, milli)``, ``node_list`` (distinct nodes, in placement
    order), ``total_milli``, and ``cpu`` / ``mem`` (CPU milli-cores and memory MiB held on each node of
    ``node_list``); the ``nodes`` / ``slots`` / ``milli`` arrays are built when first asked for. ``groups``:
    when every entry is a whole GPU, ``(node, slots)`` per node of ``node_list`` (the same GPUs as
    ``entries``), so that taking and releasing work node by node; else None. Treat as immutable."""

    __slots__ = ("_arrays", "_entries", "cpu", "groups", "mem", "node_list", "total_milli")

    def __init__(self, entries: tuple[tuple[int, int, int], ...] | None, node_list: tuple[int, ...],
                 total_milli: int, cpu: int = 0, mem: int = 0,
                 groups: tuple[tuple[int, tuple[int, ...]], ...] | None = None) -> None:
        """``entries`` may be None when ``groups`` is given (then built from it when first asked for)."""
        self._entries = entries
        self.node_list = node_list
        self.total_milli = total_milli
        self.cpu = cpu
        self.mem = mem
        self.groups = groups
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def entries(self) -> tuple[tuple[int, int, int], ...]:
        e = self._entries
        if e is None:
            e = self._entries = tuple([(n, s, MILLI_PER_GPU) for n, slots in self.groups for s in slots])
        return e

    @classmethod
    def make(cls, nodes: np.ndarray, slots: np.ndarray, milli: np.ndarray, cpu: int = 0,
             mem: int = 0) -> Allocation:
        nl = np.asarray(nodes, dtype=np.int64).tolist()
        ml = np.asarray(milli, dtype=np.int64).tolist()
        return cls(tuple(zip(nl, np.asarray(slots, dtype=np.int64).tolist(), ml, strict=True)),
                   tuple(dict.fromkeys(nl)), sum(ml), cpu, mem)

    @classmethod
    def whole_gpus(cls, node: int, slots: list[int]) -> Allocation:
        """Whole GPUs ``slots`` of one node."""
        if len(slots) == 1:
            return cls(((node, slots[0], MILLI_PER_GPU),), (node,), MILLI_PER_GPU, groups=((node, (slots[0],)),))
        return cls(tuple([(node, s, MILLI_PER_GPU) for s in slots]), (node,), len(slots) * MILLI_PER_GPU,
                   groups=((node, tuple(slots)),))

    def with_res(self, cpu: int, mem: int) -> Allocation:
        """The same GPUs, holding ``cpu`` milli-cores and ``mem`` MiB on each node."""
        return Allocation(self._entries, self.node_list, self.total_milli, cpu, mem, self.groups)

    def _array(self, k: int) -> np.ndarray:
        if self._arrays is None:
            cols = np.array(self.entries, dtype=np.int64).reshape(-1, 3)
            self._arrays = (cols[:, 0].copy(), cols[:, 1].copy(), cols[:, 2].copy())
        return self._arrays[k]

    @property
    def nodes(self) -> np.ndarray:
        return self._array(0)

    @property
    def slots(self) -> np.ndarray:
        return self._array(1)

    @property
    def milli(self) -> np.ndarray:
        return self._array(2)

    @property
    def gpus(self) -> float:
        return self.total_milli / MILLI_PER_GPU


@dataclass(frozen=True)
class Request:
    """What one job needs. ``kind``: ``whole`` (``units`` nodes with ``g`` whole GPUs each), ``share``
    (``units`` nodes with one GPU that has ``m`` milli-GPUs free), ``spread`` (``g`` whole GPUs anywhere).
    ``need`` is how many node contributions (see :meth:`ClusterState.contribution`) must add up;
    ``elig_mask`` is ``eligible`` as a bit mask (-1: every node)."""

    kind: str
    g: int
    m: int
    units: int
    eligible: np.ndarray
    cpu: int = 0
    """CPU milli-cores per unit (whole and share kinds)."""
    mem: int = 0
    """Memory MiB per unit (whole and share kinds)."""

    @property
    def need(self) -> int:
        return self.g if self.kind == "spread" else self.units

    @property
    def total_milli(self) -> int:
        return self._total_milli

    def __post_init__(self) -> None:
        if self.kind == "share":
            total = self.m * self.units
        else:
            total = self.g * MILLI_PER_GPU * (1 if self.kind == "spread" else self.units)
        object.__setattr__(self, "_total_milli", total)
        object.__setattr__(self, "family", (self.kind, self.m, self.units, id(self.eligible), self.cpu, self.mem))
        object.__setattr__(self, "has_res", bool(self.cpu or self.mem) and self.kind != "spread")
        object.__setattr__(self, "all_eligible", bool(np.all(self.eligible)))
        object.__setattr__(self, "elig_mask", -1 if self.all_eligible else int.from_bytes(
            np.packbits(np.asarray(self.eligible, dtype=bool), bitorder="little").tobytes(), "little"))


UNLIMITED = np.iinfo(np.int64).max // 4
"""Free CPU / memory of nodes whose cluster does not declare them (never a constraint)."""


class ClusterState:
    """Mutable free-capacity arrays of a :class:`SchedCluster`."""

    def __init__(self, cluster: SchedCluster) -> None:
        n, s = cluster.nodes, cluster.max_gpus_per_node
        self.cluster = cluster
        self.cap = np.where(np.arange(s)[None, :] < cluster.gpus[:, None], MILLI_PER_GPU, 0).astype(np.int64)
        self._free = self.cap.copy()
        self._whole = cluster.gpus.astype(np.int64).copy()
        self._top = self._free.max(axis=1)
        self._tot = self._free.sum(axis=1)
        self.up = np.ones(n, dtype=bool)
        # The per-node state lives in Python lists (cheap per-node reads and updates); the arrays ``free``
        # and ``top`` are brought up to date for the nodes changed since (``_dirty``) when next read;
        # ``whole`` and ``tot`` (read by every placement) are updated in place with the lists.
        self.rows: list[list[int]] = self._free.tolist()
        """``rows[n]``: ``free[n]`` as a list."""
        self.whole_l: list[int] = self._whole.tolist()
        self._dirty: set[int] = set()
        self.free_total = int(self._tot.sum())
        """Free milli-GPUs of the whole cluster (``tot.sum()``)."""
        self.whole_count = np.bincount(self._whole, minlength=s + 1).tolist()
        self.whole_sum = int(self._whole.sum())
        """Wholly free GPUs of the whole cluster (``whole.sum()``)."""
        """``whole_count[w]``: nodes with exactly ``w`` wholly free GPUs."""
        self.whole_eq = [0] * (s + 1)
        """``whole_eq[w]``: bit mask (a Python int, bit ``n`` = node ``n``) of the nodes with exactly ``w``
        wholly free GPUs."""
        self._bit = [1 << node for node in range(n)]
        """``_bit[n]``: node ``n``'s bit in the masks (made once, not per update)."""
        for node, w in enumerate(self.whole_l):
            self.whole_eq[w] |= self._bit[node]
        self.whole_ge = [0] * (s + 2)
        """``whole_ge[g]``: bit mask of the nodes with at least ``g`` wholly free GPUs (``whole_ge[s + 1]``
        is empty)."""
        self._ge_span = [[tuple(range(min(a, b) + 1, max(a, b) + 1)) for b in range(s + 1)] for a in range(s + 1)]
        """``_ge_span[old][new]``: the ``whole_ge`` masks a node leaves or joins going from ``old`` to ``new``."""
        acc = 0
        for w in range(s, -1, -1):
            acc |= self.whole_eq[w]
            self.whole_ge[w] = acc
        self.leaf = cluster.leaf
        unlimited = np.full(n, UNLIMITED, dtype=np.int64)
        self.cpu_free = unlimited.copy() if cluster.cpu_milli is None else cluster.cpu_milli.astype(np.int64).copy()
        self.mem_free = unlimited.copy() if cluster.memory_mib is None else cluster.memory_mib.astype(np.int64).copy()

    # ------------------------------------------------------------------ arrays
    def _sync(self) -> None:
        idx = list(self._dirty)
        self._dirty.clear()
        rows = [self.rows[n] for n in idx]
        self._free[idx] = rows
        self._top[idx] = [max(r) for r in rows]

    @property
    def free(self) -> np.ndarray:
        if self._dirty:
            self._sync()
        return self._free

    @property
    def whole(self) -> np.ndarray:
        return self._whole  # kept current by every update (read on every placement: no sync)

    @property
    def top(self) -> np.ndarray:
        if self._dirty:
            self._sync()
        return self._top

    @property
    def tot(self) -> np.ndarray:
        return self._tot  # kept current by every update

    # ------------------------------------------------------------------ updates
    def _set_row(self, n: int, row: list[int]) -> None:
        """Node ``n``'s free slots become ``row`` (a node failure or repair)."""
        total = sum(row)
        self.free_total += total - sum(self.rows[n])
        self.rows[n] = row
        self._dirty.add(n)
        self._tot[n] = total
        w = row.count(MILLI_PER_GPU)
        old = self.whole_l[n]
        if old != w:
            self.whole_l[n] = w
            self._whole[n] = w
            self.whole_sum += w - old
            self.whole_count[old] -= 1
            self.whole_count[w] += 1
            bit = self._bit[n]
            self.whole_eq[old] ^= bit
            self.whole_eq[w] ^= bit
            for k in self._ge_span[old][w]:
                self.whole_ge[k] ^= bit

    def _refresh(self, nodes: tuple[int, ...] | list[int]) -> None:
        """Take ``free[nodes]`` as edited through the array and bring the rest of the state in step."""
        for n in nodes:
            self._set_row(n, self._free[n].tolist())

    def apply(self, alloc: Allocation, sign: int) -> None:
        """Take (``sign=-1``) or give back (``sign=+1``) an allocation."""
        rows = self.rows
        whole_l, count, eq, ge, span = self.whole_l, self.whole_count, self.whole_eq, self.whole_ge, self._ge_span
        bits, whole_a, tot_a = self._bit, self._whole, self._tot
        self._dirty.update(alloc.node_list)
        moved = 0
        groups = alloc.groups
        if groups is not None:
            # whole GPUs: a taken slot was wholly free (1000 -> 0), a released one is wholly free again
            value = MILLI_PER_GPU if sign > 0 else 0
            many = len(groups) > 3  # (then the ``whole_ge`` masks are rebuilt once from ``whole_eq``, below)
            for n, slots in groups:
                row = rows[n]
                for s in slots:
                    row[s] = value
                old = whole_l[n]
                w = old + sign * len(slots)
                whole_l[n] = w
                whole_a[n] = w
                tot_a[n] += (w - old) * MILLI_PER_GPU
                moved += w - old
                count[old] -= 1
                count[w] += 1
                bit = bits[n]
                eq[old] ^= bit
                eq[w] ^= bit
                if not many:
                    for k in span[old][w]:
                        ge[k] ^= bit
            if many:
                acc = 0
                for k in range(len(eq) - 1, -1, -1):
                    acc |= eq[k]
                    ge[k] = acc
        else:  # fractional GPUs: recount each node's wholly free GPUs
            for n, s, m in alloc.entries:
                rows[n][s] += sign * m
                tot_a[n] += sign * m
            for n in alloc.node_list:
                w = rows[n].count(MILLI_PER_GPU)
                old = whole_l[n]
                if old != w:
                    whole_l[n] = w
                    whole_a[n] = w
                    moved += w - old
                    count[old] -= 1
                    count[w] += 1
                    bit = bits[n]
                    eq[old] ^= bit
                    eq[w] ^= bit
                    for k in span[old][w]:
                        ge[k] ^= bit
        self.whole_sum += moved
        self.free_total += sign * alloc.total_milli
        if alloc.cpu or alloc.mem:
            idx = list(alloc.node_list)
            self.cpu_free[idx] += sign * alloc.cpu
            self.mem_free[idx] += sign * alloc.mem

    def set_down(self, node: int) -> None:
        """Node failed: nothing on it may be used (jobs on it must have been released first)."""
        self.up[node] = False
        self._set_row(node, [0] * len(self.rows[node]))

    def set_up(self, node: int) -> None:
        self.up[node] = True
        self._set_row(node, self.cap[node].tolist())

    def whole_max(self) -> int:
        """The most wholly free GPUs on one node (``whole.max()``)."""
        count = self.whole_count
        for w in range(len(count) - 1, 0, -1):
            if count[w]:
                return w
        return 0

    def nodes_with_whole(self, g: int, elig_mask: int = -1) -> int:
        """Bit mask of the nodes (within ``elig_mask``) with at least ``g`` wholly free GPUs."""
        ge = self.whole_ge
        return ge[min(max(g, 0), len(ge) - 1)] & elig_mask

    def count_whole_at_least(self, g: int) -> int:
        """Nodes with at least ``g`` wholly free GPUs."""
        return sum(self.whole_count[max(g, 0):])

    # ------------------------------------------------------------------ fit
    def contribution(self, req: Request, nodes: np.ndarray | None = None) -> np.ndarray:
        """Per-node contribution to ``req.need``: 1 if the node can host a unit (whole/share), or its
        wholly free GPUs (spread); 0 on ineligible nodes. The request fits iff the sum reaches ``need``."""
        idx = slice(None) if nodes is None else nodes
        elig = req.eligible[idx]
        if req.has_res:
            elig = elig & (self.cpu_free[idx] >= req.cpu) & (self.mem_free[idx] >= req.mem)
        if req.kind == "whole":
            return (elig & (self.whole[idx] >= req.g)).astype(np.int64)
        if req.kind == "share":
            return (elig & (self.top[idx] >= req.m)).astype(np.int64)
        return np.where(elig, self.whole[idx], 0)

    def fits(self, req: Request) -> bool:
        return int(self.contribution(req).sum()) >= req.need
