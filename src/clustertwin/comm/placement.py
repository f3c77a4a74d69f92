"""Where a collective's GPUs sit: contiguous (the default) or an explicit list of global GPU indices.

An explicit placement ``g`` (global GPU indices, GPU ``g`` on node ``g // gpus_per_node``) is reduced to
the few integers the cost model needs, vectorised (no per-GPU objects):

* ``nodes`` = number of distinct nodes touched, ``m``;
* ``ranks_per_node`` = the largest count of group GPUs on one node, ``p = max_k c_k``: the busiest node
  bounds the intra-node ring and sets the NIC share ``p / gpus_per_node`` (a lighter node is modelled as
  if it held ``p`` ranks, as the partly filled last node of a contiguous group is);
* ``span`` = :meth:`clustertwin.topology.Topology.span_of` of the touched nodes (leaves and pods from
  ``node_address``, the ring and all-to-all bandwidth fractions across the spine).

Rank order inside the list does not matter: NCCL orders its rings and trees by topology, so a node
boundary is crossed once per ring step between nodes (``2(m - 1)`` of the ``2(n - 1)`` all-reduce steps).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from clustertwin.comm.span import group_span, placement_span
from clustertwin.errors import SpecError
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.topology import GroupSpan

MAX_LISTED_INDICES = 10_000_000
"""Upper bound on the GPU indices one placement list may expand to (guards against typos like 0-1e12); the
cluster's own GPU (node) count is the bound when it is smaller (:func:`parse_index_list`)."""
_CACHE_SIZE = 256
_cache: dict[tuple[ClusterSpec, int, bytes], Placement] = {}


@dataclass(frozen=True)
class Placement:
    """The group's footprint on the cluster: nodes, ranks per node and network span.

    ``kind`` is ``contiguous`` (nodes ``0 .. m-1``, ``ranks_per_node`` GPUs each) or ``explicit``;
    ``gpu_ranges`` the explicit GPU indices as sorted ranges (``"0-7,64-71"``), empty when contiguous."""

    kind: str
    gpus: int
    nodes: int
    ranks_per_node: int
    min_ranks_per_node: int
    span: GroupSpan
    gpu_ranges: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary: counts, leaves/pods/hops spanned and the spine bandwidth fractions."""
        out: dict[str, Any] = {
            "kind": self.kind, "gpus": self.gpus, "nodes": self.nodes, "ranks_per_node": self.ranks_per_node,
            "min_ranks_per_node": self.min_ranks_per_node, "leaves": self.span.leaves, "pods": self.span.pods,
            "max_hops": self.span.max_hops, "ring_bw_fraction": self.span.ring_bw_fraction,
            "a2a_bw_fraction": self.span.a2a_bw_fraction,
        }
        if self.gpu_ranges:
            out["gpu_ranges"] = self.gpu_ranges
        return out


def contiguous_placement(cluster: ClusterSpec, gpus: int, ranks_per_node: int) -> Placement:
    """Nodes ``0 .. ceil(gpus / ranks_per_node) - 1`` with ``ranks_per_node`` ranks each (last one full)."""
    nodes = -(-int(gpus) // int(ranks_per_node))
    return Placement("contiguous", int(gpus), nodes, int(ranks_per_node), int(ranks_per_node),
                     group_span(cluster, nodes))


def index_ranges(values: np.ndarray) -> str:
    """Sorted distinct integers as inclusive ranges: ``[0..7, 64..71] -> "0-7,64-71"``."""
    v = np.unique(np.asarray(values, dtype=np.int64))
    if v.size == 0:
        return ""
    breaks = np.flatnonzero(np.diff(v) != 1)
    starts = np.concatenate(([v[0]], v[breaks + 1]))
    ends = np.concatenate((v[breaks], [v[-1]]))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in zip(starts.tolist(), ends.tolist(), strict=True))


def parse_index_list(text: str, limit: int, what: str = "GPU") -> np.ndarray:
    """Parse ``"0-7,64-71"`` (inclusive ranges and single indices, separated by commas or whitespace)
    into an int64 array, in the given order; every index must lie in ``0 .. limit-1``.

    Work cap: each range is checked against ``limit`` (an end longer than ``limit`` has digits is refused
    unconverted) and the running count against ``min(limit, MAX_LISTED_INDICES)`` -- more indices than
    there are would repeat one -- before its indices are allocated."""
    tokens = [t for t in text.replace(",", " ").split() if t]
    if not tokens:
        raise SpecError(f"empty {what} placement list")
    cap = min(int(limit), MAX_LISTED_INDICES)
    digits = len(str(max(int(limit) - 1, 0)))
    parts: list[np.ndarray] = []
    total = 0
    for tok in tokens:
        shown = tok if len(tok) <= 40 else tok[:37] + "..."
        lo_s, sep, hi_s = tok.partition("-")
        if not (lo_s.isascii() and lo_s.isdigit() and (not sep or (hi_s.isascii() and hi_s.isdigit()))):
            raise SpecError(f"bad {what} range '{shown}' in placement (use e.g. 0-7,64-71)")
        if max(len(lo_s.lstrip("0")), len(hi_s.lstrip("0"))) > digits:
            raise SpecError(f"{what} index range '{shown}' in placement is outside 0..{limit - 1}")
        lo = int(lo_s)
        hi = int(hi_s) if sep else lo
        if hi < lo:
            raise SpecError(f"bad {what} range '{tok}' in placement: end before start")
        if lo < 0 or hi >= limit:
            raise SpecError(f"{what} index range '{tok}' in placement is outside 0..{limit - 1}")
        total += hi - lo + 1
        if total > cap:
            raise SpecError(f"placement lists more than {cap:,} {what} indices (0..{limit - 1} holds {limit:,}; "
                            "an index may appear once)")
        parts.append(np.arange(lo, hi + 1, dtype=np.int64))
    return np.concatenate(parts)


def nodes_placement(cluster: ClusterSpec, nodes: np.ndarray | Sequence[int], ranks_per_node: int) -> np.ndarray:
    """GPU indices of local GPUs ``0 .. ranks_per_node-1`` on each listed node:
    ``node x gpus_per_node + local``."""
    g = cluster.node.gpus
    rpn = int(ranks_per_node)
    if not 1 <= rpn <= g:
        raise SpecError(f"ranks_per_node must be between 1 and {g} GPUs per node (got {rpn})")
    idx = _as_indices(nodes, "node")
    if idx.size and (idx.min() < 0 or idx.max() >= cluster.nodes):
        raise SpecError(f"node index out of range 0..{cluster.nodes - 1} in placement")
    return (idx[:, None] * g + np.arange(rpn, dtype=np.int64)[None, :]).reshape(-1)


def _as_indices(values: np.ndarray | Sequence[int], what: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or arr.size == 0:
        raise SpecError(f"placement must be a non-empty 1-D list of {what} indices")
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        return arr.astype(np.int64)
    raise SpecError(f"placement must hold integer {what} indices (got dtype {arr.dtype})")


def explicit_placement(cluster: ClusterSpec, gpu_indices: np.ndarray | Sequence[int], gpus: int) -> Placement:
    """Validate global GPU indices (distinct, in range, exactly ``gpus`` of them) and summarise them.

    ``c_k = bincount(g // gpus_per_node)``; nodes = #{k: c_k > 0}; ranks_per_node = max c_k.
    Valid placements are cached by value (cluster spec, indices), so a repeated call costs one lookup."""
    g = _as_indices(gpu_indices, "GPU")
    key = (cluster, int(gpus), g.tobytes())
    hit = _cache.get(key)
    if hit is not None:
        return hit
    total = cluster.total_gpus
    if g.size != int(gpus):
        raise SpecError(f"placement lists {g.size} GPUs but the group has gpus={gpus}")
    lo, hi = int(g.min()), int(g.max())
    if lo < 0 or hi >= total:
        bad = lo if lo < 0 else hi
        raise SpecError(f"GPU index {bad} in placement is outside 0..{total - 1}")
    s = np.sort(g)
    dup = np.flatnonzero(s[1:] == s[:-1])
    if dup.size:
        raise SpecError(f"GPU {int(s[dup[0]])} appears more than once in the placement")
    counts = np.bincount(s // cluster.node.gpus)
    used = np.flatnonzero(counts)
    per_node = counts[used]
    pl = Placement("explicit", int(g.size), int(used.size), int(per_node.max()), int(per_node.min()),
                   placement_span(cluster, used), index_ranges(s))
    if len(_cache) >= _CACHE_SIZE:
        _cache.pop(next(iter(_cache)))
    _cache[key] = pl
    return pl
