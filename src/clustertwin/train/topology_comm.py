"""Training communication on the cluster's topology: every parallel group's traffic mapped onto the
switches, with contention between the groups of one kind that run in the same phase.

For each group kind of a layout (rank order ``tp-cp-ep-dp-pp``, :mod:`clustertwin.train.placement`) the
job's ``N = gpus / gpus_per_node`` nodes, in the order the placement gives them
(:func:`clustertwin.topology.place`: ``contiguous``, ``scattered``, ``random`` or an explicit node list),
are cut into node groups: a group of ``size`` ranks ``stride`` ranks apart spans

    m = ceil(size x stride / gpus_per_node) consecutive nodes     when stride < gpus_per_node
    m = size nodes, stride / gpus_per_node apart                  otherwise

(:func:`clustertwin.topology.groups_of`). All node groups of a kind run at once - the DP rings of every
pipeline stage, every pipeline's send/recv hops, every EP all-to-all - and
:func:`clustertwin.topology.group_bandwidth` maps them onto leaves, pods, Dragonfly+ global links or torus
links: the phase moves at the worst group's ``fraction`` of its injection bandwidth. That fraction is
handed to the collective model (``net_fraction``), which uses ``min(span fraction, net_fraction)``;
the switch hops of the farthest ring edge (all-to-all pair) where the placement puts the groups go with it
(``net_hops``) and replace the contiguous span's hop count in the network step latency, ``hops x
switch_latency_ns`` per step (:mod:`clustertwin.comm.latency`): a scattered DP ring crossing the spine
pays 3 switch traversals per step instead of 1.

Patterns: TP, CP, DP (dense gradients) and expert-DP run rings, EP an all-to-all, PP the ring of stage
neighbours (send/recv). A kind whose groups stay inside one node gets 1.

Cost: one ``group_bandwidth`` call per distinct (kind, node-group shape) of an evaluation, cached by
(cluster, placement, shape); a search over thousands of layouts has a few dozen distinct shapes.
"""

from __future__ import annotations

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.topology import Topology, build, group_bandwidth, groups_of, place
from clustertwin.train.layout import Layouts
from clustertwin.train.placement import Group, Groups, groups
from clustertwin.train.spec_keys import spec_key

PLACEMENTS = ("contiguous", "scattered", "random")
_CACHE: dict[tuple, tuple[float, int]] = {}
_NODES: dict[tuple, np.ndarray] = {}
_CACHE_LIMIT = 4096
_LAYOUT_CACHE: dict[tuple, tuple[dict, dict]] = {}
"""(fractions, hops) per scalar layout shape (cluster, GPUs per node, placement, GPUs, tp cp dp ep etp pp)."""
_TOPOLOGIES: dict[ClusterSpec, Topology] = {}
MAX_PLACEMENT_NODES = 1_048_576
"""Most nodes a ``--placement`` node list may name (2^20, above any catalog cluster); the cluster's own node
count is the bound when it is known."""


def _topology(cluster: ClusterSpec) -> Topology:
    """The cluster's built topology, cached by value (the frozen spec is the key)."""
    hit = _TOPOLOGIES.get(cluster)
    if hit is None:
        if len(_TOPOLOGIES) >= 64:
            _TOPOLOGIES.clear()
        hit = _TOPOLOGIES[cluster] = build(cluster)
    return hit


def placement_key(placement) -> tuple:
    """A hashable key of a placement (name, or the node list)."""
    if isinstance(placement, str):
        if placement not in PLACEMENTS:
            from clustertwin.errors import did_you_mean

            raise SpecError(f"unknown placement '{placement}'{did_you_mean(placement, PLACEMENTS)} "
                            f"(contiguous, scattered, random or a list of node indices)")
        return (placement,)
    return ("nodes", *(int(x) for x in np.asarray(placement).reshape(-1)))


def _is_index(text: str) -> bool:
    """ASCII digits only (a sign, a space or a letter is not a node index)."""
    return bool(text) and text.isascii() and text.isdigit()


def parse_placement(text: str | None, nodes: int | None = None) -> str | list[int]:
    """CLI form: ``contiguous``/``scattered``/``random``, or node indices ``0-63,128-191`` / ``0,5,9``.

    Work cap: every index and range end is checked against ``0 .. nodes-1`` (the cluster's nodes; default
    :data:`MAX_PLACEMENT_NODES`) and the running count against the same bound *before* the range is
    listed, so ``0-99999999999`` or a 30-digit end is a one-line SpecError naming ``--placement``."""
    if text is None or text == "":
        return "contiguous"
    t = text.strip()
    if t in PLACEMENTS:
        return t
    limit = MAX_PLACEMENT_NODES if nodes is None else min(int(nodes), MAX_PLACEMENT_NODES)
    out: list[int] = []
    for part in t.split(","):
        part = part.strip()
        a_s, sep, b_s = (x.strip() for x in part.partition("-"))
        if not (_is_index(a_s) and (_is_index(b_s) or not sep)):
            if not any(ch.isdigit() for ch in t):
                placement_key(t)  # a misspelt name: the unknown-placement error with a suggestion
            raise SpecError(f"--placement: cannot read '{part[:40]}' (expected a node index or a range a-b)")
        if max(len(a_s.lstrip("0")), len(b_s.lstrip("0"))) > len(str(limit)):  # refused unconverted
            raise SpecError(f"--placement: '{part[:40]}' names a node beyond the cluster's nodes 0..{limit - 1:,}")
        a = int(a_s)
        b = int(b_s) if sep else a
        if b < a:
            raise SpecError(f"--placement: node range '{part}' ends before it starts")
        if b >= limit:
            raise SpecError(f"--placement: node index {b:,} in '{part}' is outside the cluster's nodes "
                            f"0..{limit - 1:,}")
        if len(out) + (b - a + 1) > limit:
            raise SpecError(f"--placement lists more than {limit:,} nodes, the most there are (a node may "
                            "appear once)")
        out.extend(range(a, b + 1))
    return out


def job_nodes(cluster: ClusterSpec, n_nodes: int, placement) -> np.ndarray:
    """The job's node indices in rank order (:func:`clustertwin.topology.place`); an explicit list gives
    the first ``n_nodes`` of its nodes (the job may use fewer nodes than the list)."""
    key = (cluster, n_nodes, placement_key(placement))
    hit = _NODES.get(key)
    if hit is not None:
        return hit
    topo = _topology(cluster)
    if isinstance(placement, str):
        nodes = place(topo, n_nodes, placement)
    else:
        lst = np.asarray(placement, dtype=np.int64).reshape(-1)
        if lst.size < n_nodes:
            raise SpecError(f"placement lists {lst.size} nodes; the layout needs {n_nodes}", path=("placement",))
        nodes = place(topo, n_nodes, lst[:n_nodes])
    if len(_NODES) >= _CACHE_LIMIT:
        _NODES.clear()
    _NODES[key] = nodes
    return nodes


def node_shape(size: int, stride: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes per group ``m``, node stride ``s``) of a group of ``size`` ranks ``stride`` apart."""
    if stride < gpus_per_node:
        return max(1, -(-size * stride // gpus_per_node)), 1
    return size, stride // gpus_per_node


def kind_traffic(cluster: ClusterSpec, n_nodes: int, m: int, s: int, pattern: str,
                 placement) -> tuple[float, int]:
    """(worst group's fraction of injection bandwidth when all node groups of shape (``m``, ``s``) of an
    ``n_nodes`` job run ``pattern`` at once (module docstring; 1 inside a node), switch hops of the farthest
    ring edge or all-to-all pair of those groups);
    hops 0 inside a node or for a ragged shape (the collective model's contiguous span then counts them)."""
    if m <= 1 or n_nodes <= 1:
        return 1.0, 0
    key = (spec_key(cluster), n_nodes, m, s, pattern, placement_key(placement))
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    nodes = job_nodes(cluster, n_nodes, placement)
    if n_nodes % (m * s):
        out = (1.0, 0)  # the group shape does not tile the job (ragged layouts): the span model alone
    else:
        tr = group_bandwidth(_topology(cluster), groups_of(nodes, m, s), pattern)  # type: ignore[arg-type]
        out = (tr.fraction, int(tr.max_hops))
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.clear()
    _CACHE[key] = out
    return out


def net_fractions(cluster: ClusterSpec, lay: Layouts, gpus_per_node: int, placement="contiguous") -> dict:
    """Fraction of injection bandwidth of every group kind of every layout (floats for a scalar layout,
    arrays otherwise); keys :attr:`Groups.KINDS` (``tp cp dp ep edp pp etp``)."""
    return _per_kind(cluster, lay, gpus_per_node, placement)[0]


def net_hops(cluster: ClusterSpec, lay: Layouts, gpus_per_node: int, placement="contiguous") -> dict:
    """Switch hops of every group kind where the placement puts it (:func:`kind_traffic`; ints for a
    scalar layout, int arrays otherwise; 0 = inside a node); keys :attr:`Groups.KINDS`."""
    return _per_kind(cluster, lay, gpus_per_node, placement)[1]


def group_traffic(cluster: ClusterSpec, lay: Layouts, gpus_per_node: int, placement="contiguous") -> tuple[dict, dict]:
    """(:func:`net_fractions`, :func:`net_hops`) in one pass."""
    return _per_kind(cluster, lay, gpus_per_node, placement)


def _per_kind(cluster: ClusterSpec, lay: Layouts, gpn: int, placement,
              grp: Groups | None = None) -> tuple[dict, dict]:
    """(fractions, hops) of every group kind, from the group shapes of the one owner
    (:meth:`clustertwin.train.placement.Groups.shapes`; ``grp`` when the caller built them already). A scalar
    layout's result is cached by what decides its shapes; a layout batch is reduced to its distinct
    (nodes, m, s) shapes first (one 1-D integer key, so the unique is a plain sort), each costed once."""
    frac: dict[str, object] = {}
    hops: dict[str, object] = {}
    if lay.is_scalar:
        key = (spec_key(cluster), gpn, placement_key(placement), int(lay.gpus),
               *(int(getattr(lay, f)) for f in ("tp", "cp", "dp", "ep", "etp", "pp")))
        hit = _LAYOUT_CACHE.get(key)
        if hit is not None:
            return dict(hit[0]), dict(hit[1])
        n_nodes = max(1, int(lay.gpus) // gpn)
        for name, (size, stride, pattern) in (grp or groups(lay, gpn)).shapes().items():
            m, s = node_shape(int(size), int(stride), gpn)  # type: ignore[call-overload]
            frac[name], hops[name] = kind_traffic(cluster, n_nodes, m, s, pattern, placement)
        if len(_LAYOUT_CACHE) >= _CACHE_LIMIT:
            _LAYOUT_CACHE.clear()
        _LAYOUT_CACHE[key] = (dict(frac), dict(hops))
        return frac, hops
    n_nodes_a = np.maximum(np.asarray(lay.gpus) // gpn, 1).astype(np.int64)
    for name, (size, stride, pattern) in (grp or groups(lay, gpn)).shapes().items():
        size_a = np.broadcast_to(np.asarray(size), n_nodes_a.shape).astype(np.int64)
        stride_a = np.broadcast_to(np.asarray(stride), n_nodes_a.shape).astype(np.int64)
        m_a = np.where(stride_a < gpn, np.maximum(1, -(-size_a * stride_a // gpn)), size_a)
        s_a = np.where(stride_a < gpn, 1, np.maximum(stride_a // gpn, 1))
        base_m, base_s = int(m_a.max()) + 1, int(s_a.max()) + 1
        code = (n_nodes_a * base_m + m_a) * base_s + s_a
        keys, inv = np.unique(code.reshape(-1), return_inverse=True)
        pairs = [kind_traffic(cluster, int(k // (base_m * base_s)), int(k // base_s % base_m), int(k % base_s),
                              pattern, placement) for k in keys.tolist()]
        frac[name] = np.array([f for f, _ in pairs])[inv].reshape(n_nodes_a.shape)
        hops[name] = np.array([h for _, h in pairs], dtype=np.int64)[inv].reshape(n_nodes_a.shape)
    return frac, hops


def with_topology(cluster: ClusterSpec, lay: Layouts, grp: Groups, gpus_per_node: int,
                  placement="contiguous") -> Groups:
    """``grp`` with every group's ``net_fraction`` and ``net_hops`` set from :func:`net_fractions` and
    :func:`net_hops` (each kind its own, expert-TP included)."""
    f, h = _per_kind(cluster, lay, gpus_per_node, placement, grp)

    def g(group: Group, kind: str) -> Group:  # the fields spelled out: cheaper than dataclasses.replace
        return Group(size=group.size, ranks_per_node=group.ranks_per_node, stride=group.stride,
                     pattern=group.pattern, span=group.span, net_fraction=f[kind], net_hops=h[kind])

    return Groups(tp=g(grp.tp, "tp"), cp=g(grp.cp, "cp"), dp=g(grp.dp, "dp"), ep=g(grp.ep, "ep"),
                  edp=g(grp.edp, "edp"), pp=g(grp.pp, "pp"), etp=g(grp.etp, "etp"))
