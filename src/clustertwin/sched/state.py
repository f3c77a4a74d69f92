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
    ``node_list``); the ``nodes`` / ``slots`` / ``milli`` arrays are built when first asked for. Treat as
    immutable."""

    __slots__ = ("_arrays", "cpu", "entries", "mem", "node_list", "total_milli")

    def __init__(self, entries: tuple[tuple[int, int, int], ...], node_list: tuple[int, ...], total_milli: int,
                 cpu: int = 0, mem: int = 0) -> None:
        self.entries = entries
        self.node_list = node_list
        self.total_milli = total_milli
        self.cpu = cpu
        self.mem = mem
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

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
        return cls(tuple((node, s, MILLI_PER_GPU) for s in slots), (node,), len(slots) * MILLI_PER_GPU)

    def with_res(self, cpu: int, mem: int) -> Allocation:
        """The same GPUs, holding ``cpu`` milli-cores and ``mem`` MiB on each node."""
        return Allocation(self.entries, self.node_list, self.total_milli, cpu, mem)

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
    ``need`` is how many node contributions (see :meth:`ClusterState.contribution`) must add up."""

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


UNLIMITED = np.iinfo(np.int64).max // 4
"""Free CPU / memory of nodes whose cluster does not declare them (never a constraint)."""


class ClusterState:
    """Mutable free-capacity arrays of a :class:`SchedCluster`."""

    def __init__(self, cluster: SchedCluster) -> None:
        n, s = cluster.nodes, cluster.max_gpus_per_node
        self.cluster = cluster
        self.cap = np.where(np.arange(s)[None, :] < cluster.gpus[:, None], MILLI_PER_GPU, 0).astype(np.int64)
        self.free = self.cap.copy()
        self.whole = cluster.gpus.astype(np.int64).copy()
        self.top = self.free.max(axis=1)
        self.tot = self.free.sum(axis=1)
        self.up = np.ones(n, dtype=bool)
        self.free_total = int(self.tot.sum())
        """Free milli-GPUs of the whole cluster (``tot.sum()``, kept as a Python int)."""
        self.whole_count = np.bincount(self.whole, minlength=s + 1).tolist()
        """``whole_count[w]``: nodes with exactly ``w`` wholly free GPUs."""
        self.leaf = cluster.leaf
        unlimited = np.full(n, UNLIMITED, dtype=np.int64)
        self.cpu_free = unlimited.copy() if cluster.cpu_milli is None else cluster.cpu_milli.astype(np.int64).copy()
        self.mem_free = unlimited.copy() if cluster.memory_mib is None else cluster.memory_mib.astype(np.int64).copy()

    # ------------------------------------------------------------------ updates
    def _refresh(self, nodes: tuple[int, ...] | list[int]) -> None:
        count = self.whole_count
        if len(nodes) == 1:
            n = nodes[0]
            row = self.free[n].tolist()  # (a few slots: plain Python beats three numpy reductions)
            w = row.count(MILLI_PER_GPU)
            count[int(self.whole[n])] -= 1
            count[w] += 1
            tot = sum(row)
            self.free_total += tot - int(self.tot[n])
            self.whole[n] = w
            self.top[n] = max(row)
            self.tot[n] = tot
            return
        idx = np.fromiter(nodes, dtype=np.int64, count=len(nodes))
        rows = self.free[idx]
        for w in self.whole[idx].tolist():
            count[w] -= 1
        whole = (rows == MILLI_PER_GPU).sum(axis=1)
        for w in whole.tolist():
            count[w] += 1
        tot = rows.sum(axis=1)
        self.free_total += int(tot.sum()) - int(self.tot[idx].sum())
        self.whole[idx] = whole
        self.top[idx] = rows.max(axis=1)
        self.tot[idx] = tot

    def apply(self, alloc: Allocation, sign: int) -> None:
        """Take (``sign=-1``) or give back (``sign=+1``) an allocation."""
        if len(alloc.node_list) == 1:  # one node (most jobs): update its row as a Python list
            n = alloc.node_list[0]
            row = self.free[n].tolist()
            for _, s, m in alloc.entries:
                row[s] += sign * m
            self.free[n] = row
            w = row.count(MILLI_PER_GPU)
            count = self.whole_count
            count[int(self.whole[n])] -= 1
            count[w] += 1
            self.whole[n] = w
            self.top[n] = max(row)
            self.tot[n] = sum(row)
            self.free_total += sign * alloc.total_milli
        else:
            self.free[alloc.nodes, alloc.slots] += sign * alloc.milli
            self._refresh(alloc.node_list)
        if alloc.cpu or alloc.mem:
            idx = list(alloc.node_list)
            self.cpu_free[idx] += sign * alloc.cpu
            self.mem_free[idx] += sign * alloc.mem

    def set_down(self, node: int) -> None:
        """Node failed: nothing on it may be used (jobs on it must have been released first)."""
        self.up[node] = False
        self.free[node] = 0
        self._refresh((node,))

    def set_up(self, node: int) -> None:
        self.up[node] = True
        self.free[node] = self.cap[node]
        self._refresh((node,))

    def whole_max(self) -> int:
        """The most wholly free GPUs on one node (``whole.max()``)."""
        count = self.whole_count
        for w in range(len(count) - 1, 0, -1):
            if count[w]:
                return w
        return 0

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


def row_contribution(req: Request, node: int, row: list[int], res: list[int] | None = None) -> int:
    """:meth:`ClusterState.contribution` of one node whose free slots are ``row`` and free
    ``[cpu, memory]`` is ``res`` (plain Python, for the projected states of backfill and preemption)."""
    if not req.eligible[node]:
        return 0
    if req.has_res and res is not None and (res[0] < req.cpu or res[1] < req.mem):
        return 0
    if req.kind == "share":
        return 1 if max(row) >= req.m else 0
    whole = row.count(MILLI_PER_GPU)
    if req.kind == "whole":
        return 1 if whole >= req.g else 0
    return whole


class Projection:
    """A copy-on-write view of ``free`` used to ask "would the request fit if these allocations were
    released / taken?" without touching the real state. Tracks the request's total contribution."""

    def __init__(self, state: ClusterState, req: Request) -> None:
        self.state = state
        self.req = req
        self.rows: dict[int, list[int]] = {}
        self.res: dict[int, list[int]] = {}
        self.total = int(state.contribution(req).sum())

    def row(self, node: int) -> list[int]:
        r = self.rows.get(node)
        if r is None:
            r = self.state.free[node].tolist()
            self.rows[node] = r
            self.res[node] = [int(self.state.cpu_free[node]), int(self.state.mem_free[node])]
        return r

    def freeze(self, nodes: tuple[int, ...]) -> None:
        """Copy these rows now: call before the real state of ``nodes`` changes, so that the projection
        stays "state when created + its own releases and takes"."""
        for n in nodes:
            self.row(n)

    def _change(self, alloc: Allocation, sign: int) -> int:
        """Apply ``sign * alloc`` to the projected rows; return the change of the contribution total."""
        req = self.req
        rows, res = self.rows, self.res
        nodes = alloc.node_list
        for n in nodes:
            if n not in rows:
                self.row(n)
        if req.kind == "whole" and not req.has_res and req.all_eligible:
            # (the common case, inlined: row_contribution of a whole-GPU unit on any node)
            g = req.g
            before = 0
            for n in nodes:
                before += rows[n].count(MILLI_PER_GPU) >= g
            for n, s, m in alloc.entries:
                rows[n][s] += sign * m
            after = 0
            for n in nodes:
                after += rows[n].count(MILLI_PER_GPU) >= g
            return after - before
        before = 0
        for n in nodes:
            before += row_contribution(req, n, rows[n], res[n])
        for n, s, m in alloc.entries:
            rows[n][s] += sign * m
        if alloc.cpu or alloc.mem:
            for n in nodes:
                r = res[n]
                r[0] += sign * alloc.cpu
                r[1] += sign * alloc.mem
        after = 0
        for n in nodes:
            after += row_contribution(req, n, rows[n], res[n])
        return after - before

    def release(self, alloc: Allocation) -> None:
        self.total += self._change(alloc, +1)

    def take_if_still_fits(self, alloc: Allocation) -> bool:
        """Take ``alloc`` if the request still fits afterwards; otherwise leave the projection unchanged."""
        delta = self._change(alloc, -1)
        if self.total + delta >= self.req.need:
            self.total += delta
            return True
        self._change(alloc, +1)
        return False

    @property
    def fits(self) -> bool:
        return self.total >= self.req.need
