"""Direct 3D torus between nodes (k-ary n-cube generalised to ``x x y x z``; TPU v4-style).

Each node is its own router. A dimension of size ``k >= 3`` gives a node two neighbours (+/-, the
ring closes with a wrap-around link), ``k = 2`` one, ``k = 1`` none; the node degree ``D`` is their
sum. The node's ``P`` NIC ports are striped over its ``D`` directions, so a neighbour link carries
``P x r / D`` GB/s per direction. Closed forms (Dally & Towles, *Principles and Practices of
Interconnection Networks*, ch. 5):

* links ``N D / 2``; cables ``N max(P, D) / 2`` (one port-to-port cable per NIC port pair), all optical
  (1 cable + 2 transceivers: an upper bound; racks of neighbours could use copper);
* diameter ``sum_i floor(k_i / 2)`` link hops;
* average hops over distinct node pairs ``N/(N-1) x sum_i m(k_i)`` with the mean ring distance
  ``m(k) = k/4`` (k even) or ``(k^2 - 1)/(4k)`` (k odd);
* bisection: cut across the largest dimension ``k_max``: ``(N / k_max) x 2`` links for ``k_max >= 3``
  (both the middle and the wrap-around plane; ``2 k^(n-1)`` for a k-ary n-cube with even k), ``N/2``
  for ``k_max = 2``.

The default shape is the most cubic factorisation of the node count (smallest diameter, then smallest
largest side), sorted ``x <= y <= z``.
"""

from __future__ import annotations

import math

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.specs import ClusterSpec
from clustertwin.topology.common import TRANSCEIVERS_PER_OPTICAL_LINK
from clustertwin.topology.model import TORUS_WRAP_MIN_K, Topology
from clustertwin.topology.single import scale_up_domain
from clustertwin.topology.torus_net import Torus3D
from clustertwin.units import gbit_to_gb_per_s


def divisors(n: int) -> np.ndarray:
    """Divisors of ``n`` in increasing order (O(sqrt n))."""
    small = np.arange(1, math.isqrt(n) + 1)
    small = small[n % small == 0]
    return np.unique(np.concatenate([small, n // small]))


def cubic_dims(n_nodes: int) -> tuple[int, int, int]:
    """Most cubic ``x <= y <= z`` with ``x y z = n``: minimum diameter, then minimum ``z``."""
    best: tuple[int, int, int] | None = None
    best_key: tuple[int, int] | None = None
    for x in divisors(n_nodes):
        x = int(x)
        if x**3 > n_nodes:
            break
        rest = n_nodes // x
        for y in divisors(rest):
            y = int(y)
            if y < x or y * y > rest:
                continue
            z = rest // y
            key = (x // 2 + y // 2 + z // 2, z)
            if best_key is None or key < best_key:
                best, best_key = (x, y, z), key
    assert best is not None
    return best


def ring_mean_distance(k: np.ndarray) -> np.ndarray:
    """Mean shortest distance on a ring of ``k`` nodes over all ordered pairs (self included)."""
    k = np.asarray(k, dtype=float)
    even = np.mod(k, 2) == 0
    return np.where(even, k / 4.0, (k * k - 1.0) / (4.0 * k))


def torus3d(cluster: ClusterSpec) -> Topology:
    """Build the direct 3D torus of ``cluster`` (module docstring)."""
    net = cluster.net
    n_nodes, nics = cluster.nodes, cluster.node.nics.count
    if net.torus_dims is not None:
        dims = tuple(int(d) for d in net.torus_dims)
        if math.prod(dims) != n_nodes:
            raise SpecError(
                f"torus_dims {dims[0]}x{dims[1]}x{dims[2]} = {math.prod(dims)} nodes, but nodes = {n_nodes}",
                path=("network", "torus_dims"),
            )
    else:
        dims = cubic_dims(n_nodes)
    k = np.array(dims, dtype=np.int64)
    degree = int(np.where(k >= TORUS_WRAP_MIN_K, 2, np.where(k == 2, 1, 0)).sum())
    port_gb = gbit_to_gb_per_s(net.fabric.gbit_per_s)
    link_gb = nics * port_gb / degree
    notes: list[str] = []
    if nics % degree:
        notes.append(f"{nics} NIC ports striped over {degree} torus directions: {link_gb:g} GB/s per link")
    n_links = n_nodes * degree // 2
    cables = max(n_links, n_nodes * nics // 2)
    k_max = int(k.max())
    cut_links = n_nodes // k_max * (2 if k_max >= TORUS_WRAP_MIN_K else 1)
    if k_max % 2:
        notes.append(f"odd largest side {k_max}: bisection cut leaves halves of unequal size")
    diameter = int((k // 2).sum())
    avg = float(ring_mean_distance(k).sum()) * n_nodes / (n_nodes - 1)
    return Torus3D(
        kind="torus3d",
        nodes=n_nodes,
        gpus_per_node=cluster.node.gpus,
        gpus=cluster.total_gpus,
        endpoints=n_nodes * nics,
        port_gb_per_s=port_gb,
        switches={},
        links={"node-node": n_links},
        cables=int(cables),
        transceivers=TRANSCEIVERS_PER_OPTICAL_LINK * int(cables),
        bisection_gb_per_s=float(cut_links * link_gb),
        diameter_hops=diameter,
        avg_hops=avg,
        oversubscription=1.0,
        nodes_per_leaf=1,
        nodes_per_pod=n_nodes,
        scale_up_domain_gpus=cluster.node.gpus,
        notes=tuple(notes),
        scale_up=scale_up_domain(cluster.node),
        layout={"x": dims[0], "y": dims[1], "z": dims[2], "degree": degree, "link_gb_per_s": link_gb},
    )
