"""Placements that matter to the network, on top of :mod:`clustertwin.sched.placement`:

- ``leaf-packed``: Slurm ``topology/tree`` with ``--switches=1``: a job that could fit under one leaf switch
  (its units fit the largest leaf) waits until one leaf holds it all, then takes the leaf with the least room
  that does (``topology``'s choice); larger jobs take the fewest leaves, most room first.
- ``random``: nodes drawn uniformly at random among those that can host a unit (seeded): the scattered
  allocations of a busy cluster without topology awareness.
- ``topology`` stays the preferred-level variant (Kueue topology-aware scheduling ``preferred``: one leaf
  when one has room now, else the fewest leaves).
"""

from __future__ import annotations

import numpy as np

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.sched.jobs import MILLI_PER_GPU
from clustertwin.sched.placement import PLACEMENTS, Placer, WorkloadShapes
from clustertwin.sched.state import Allocation, ClusterState, Request

NET_PLACEMENTS = ("leaf-packed", "random")
ALL_PLACEMENTS = (*PLACEMENTS, *NET_PLACEMENTS)
_BASE = {"leaf-packed": "topology", "random": "first-fit"}


class NetPlacer(Placer):
    """A :class:`Placer` that also knows ``leaf-packed`` and ``random`` (``seed``: the random draws)."""

    def __init__(self, name: str, shapes: WorkloadShapes | None = None, seed: int = 0) -> None:
        if name not in ALL_PLACEMENTS:
            raise SpecError(f"unknown placement '{name}'{did_you_mean(name, ALL_PLACEMENTS)}; "
                            f"choose from {', '.join(ALL_PLACEMENTS)}")
        super().__init__(_BASE.get(name, name), shapes)
        self.variant = name
        self.rng = np.random.default_rng(seed)

    def place(self, state: ClusterState, req: Request) -> Allocation | None:
        if self.variant == "random":
            return self._random(state, req)
        if self.variant == "leaf-packed" and (req.kind == "spread" or req.units > 1):
            contrib = state.contribution(req)
            room = np.bincount(state.leaf, weights=contrib, minlength=state.cluster.leaves)
            per_leaf = np.bincount(state.leaf, weights=state.cluster.gpus if req.kind == "spread" else None,
                                   minlength=state.cluster.leaves)
            if req.need <= per_leaf.max() and room.max() < req.need:
                return None  # fits one leaf, no leaf has room now: wait for one
        return super().place(state, req)

    def _random(self, state: ClusterState, req: Request) -> Allocation | None:
        contrib = state.contribution(req)
        if int(contrib.sum()) < req.need:
            return None
        cand = np.flatnonzero(contrib)
        order = cand[self.rng.permutation(len(cand))]
        if req.kind == "spread":
            nodes, slots = [], []
            remaining = req.g
            for n in order.tolist():
                take = min(int(contrib[n]), remaining)
                nodes.append(np.full(take, n))
                slots.append(np.flatnonzero(state.free[n] == MILLI_PER_GPU)[:take])
                remaining -= take
                if remaining == 0:
                    break
            slot_arr = np.concatenate(slots).astype(np.int64)
            return Allocation.make(np.concatenate(nodes).astype(np.int64), slot_arr,
                                   np.full(len(slot_arr), MILLI_PER_GPU, dtype=np.int64))
        chosen = np.sort(order[: req.units])
        parts = [self._unit(state, req, n) for n in chosen.tolist()]
        if len(parts) == 1:
            alloc = parts[0]
        else:
            alloc = Allocation(tuple(e for p in parts for e in p.entries),
                               tuple(dict.fromkeys(n for p in parts for n in p.node_list)),
                               sum(p.total_milli for p in parts))
        return alloc.with_res(req.cpu, req.mem) if req.has_res else alloc
