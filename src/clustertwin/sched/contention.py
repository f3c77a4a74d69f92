"""Contention between jobs on the fabric's shared links: bundles, demands, ECMP and max-min fair rates.

**Bundles.** Every tier of :meth:`clustertwin.topology.Topology.uplink_tiers` (leaf uplinks, pod uplinks;
a rail-optimised fabric's leaf block is a scalable unit with one leaf per rail) gives each block of nodes one
up- and one down-bundle of the tier's capacity per direction; traffic inside a block (a leaf, a node's
NVLink domain) touches no bundle. Flows and the bundles they cross come from
:meth:`~clustertwin.topology.Topology.flow_links`.

**Demand.** A job's inter-node traffic is a ring over its nodes in node order (NCCL's ring over the ranks
of a Slurm node list, which is sorted): each ring edge ``u -> v`` carries one flow per NIC at line rate,
``nics x port_gb_per_s`` while the job communicates (collectives are bandwidth-bound: they push at the
injection rate). With ``q`` flows per NIC (``flows_per_nic``: NCCL channels per network peer x
queue pairs per connection, each hashed on its own) every flow carries ``port / q``. A job alone on adaptive routing moves at ``x_alone = min(1, min_b cap_b / d_b)``, what the
training model's own span fractions already price.

**ECMP.** Without adaptive routing each flow is hashed onto one of the bundle's ``n = cap / port`` links;
the bundle's worst link carries the expected maximum load ``M(k, n)`` of ``k`` balls thrown into ``n``
bins, and every flow moves at ``min(port / q, port / M)``, so the bundle delivers
``c_eff = k x port / max(q, M(k, n))`` (adaptive routing / packet spraying: ``c_eff = cap``). ``M`` is the balls-into-bins expectation (Raab &
Steger, "Balls into bins - a simple and tight analysis", RANDOM 1998: ``M = k/n + sqrt(2 (k/n) ln n)
(1 + o(1))`` for ``k >= n ln n``; ``ln n / ln ln n (1 + o(1))`` for ``k = n``), estimated here without the
asymptotic error by a seeded Monte Carlo of :data:`ECMP_TRIALS` throws per ``(k, n)`` (standard error below
1 % of ``M`` for ``n <= 4096``), cached.

**Max-min fairness.** The rates of all running jobs are the max-min fair allocation of the bundles'
capacities to the jobs' demand vectors (each job scales its whole demand by one factor ``x_j <= 1``):
progressive filling (Bertsekas & Gallager, Data Networks, 2nd ed. 1992, §6.5.2): raise every unfrozen
``x`` together until a bundle saturates or a job reaches 1, freeze the jobs crossing saturated bundles,
repeat. A job's communication slows by ``s_j = x_alone / x_j``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from clustertwin.errors import SpecError, did_you_mean

ROUTINGS = ("ecmp", "adaptive")
ECMP_TRIALS = 4096
"""Seeded Monte Carlo throws per ``(k, n)`` for the expected maximum load (fewer for large ``k``: at most
:data:`ECMP_DRAWS` balls in all, at least 256 throws)."""
ECMP_DRAWS = 4_000_000
_TOL = 1e-9
_REL = 1e-9


@lru_cache(maxsize=65536)
def expected_max_load(k: int, n: int) -> float:
    """``E[max load]`` of ``k`` balls thrown uniformly into ``n`` bins (flows hashed onto ECMP paths)."""
    if k < 0 or n < 1:
        raise SpecError("balls-into-bins needs k >= 0 balls and n >= 1 bins")
    if k <= 1 or n == 1:
        return float(k)
    trials = max(256, min(ECMP_TRIALS, ECMP_DRAWS // k))
    rng = np.random.default_rng(1_000_003 * k + n)
    bins = rng.integers(0, n, size=(trials, k)) + n * np.arange(trials)[:, None]
    return float(np.bincount(bins.ravel(), minlength=trials * n).reshape(trials, n).max(axis=1).mean())


_MAX_LOAD: dict[int, np.ndarray] = {}
"""``M(k, n)`` by ``n``: an array over ``k`` (NaN where not computed yet)."""


def max_load_table(k: np.ndarray, n: int) -> np.ndarray:
    """:func:`expected_max_load` for every entry of ``k`` (ints) with ``n`` bins, from a growing table."""
    tab = _MAX_LOAD.get(n)
    top = int(k.max()) + 1 if len(k) else 1
    if tab is None or len(tab) < top:
        new = np.full(max(top, 2 * len(tab) if tab is not None else top), np.nan)
        if tab is not None:
            new[: len(tab)] = tab
        tab = _MAX_LOAD[n] = new
    vals = tab[k]
    missing = np.isnan(vals)
    if missing.any():
        for kk in np.unique(k[missing]).tolist():
            tab[kk] = expected_max_load(int(kk), n)
        vals = tab[k]
    return vals


@dataclass(frozen=True)
class Fabric:
    """The shared bundles of one topology. Bundle ``2 b + d`` is block ``b``'s up (``d = 0``) or down
    (``d = 1``) bundle, blocks of all tiers numbered consecutively."""

    tiers: tuple[str, ...]
    block_of: np.ndarray
    """(tiers, nodes): each node's global block index per tier."""
    cap_gb_per_s: np.ndarray
    """Per bundle, per direction."""
    paths: np.ndarray
    """Links per bundle (ECMP next hops): ``round(cap / port)``."""
    port_gb_per_s: float
    nics: int
    routing: str
    flows_per_nic: int = 1
    """Flows each NIC opens per ring edge (NCCL channels per network peer x QPs per connection)."""

    @property
    def bundles(self) -> int:
        return len(self.cap_gb_per_s)

    @property
    def flow_gb_per_s(self) -> float:
        """Line rate of one flow: the port shared by the NIC's ``flows_per_nic`` flows."""
        return self.port_gb_per_s / self.flows_per_nic

    def effective_capacity(self, bundles: np.ndarray, flows: np.ndarray) -> np.ndarray:
        """Capacity bundles ``bundles`` deliver to ``flows`` flows each (> 0): ECMP collisions,
        ``k x port / max(q, M(k, n))``, or the full capacity (adaptive)."""
        cap = self.cap_gb_per_s[bundles]
        if self.routing == "adaptive":
            return cap
        k = flows.astype(np.int64)
        n = self.paths[bundles]
        m = np.empty(len(k))
        for nn in np.unique(n).tolist():
            sel = n == nn
            m[sel] = max_load_table(k[sel], int(nn))
        return np.minimum(cap, k * self.port_gb_per_s / np.maximum(m, self.flows_per_nic))

    def demand(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bundles a job on ``nodes`` loads and its flows on each (ring in node order)."""
        u = np.unique(np.asarray(nodes, dtype=np.int64))
        if len(u) < 2 or not len(self.tiers):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        v = np.roll(u, -1)
        src = self.block_of[:, u]
        dst = self.block_of[:, v]
        cross = src != dst
        ids = np.concatenate([2 * src[cross], 2 * dst[cross] + 1])
        if not len(ids):
            return ids, ids
        b, cnt = np.unique(ids, return_counts=True)
        return b, cnt * (self.nics * self.flows_per_nic)


def fabric_of(topology, routing: str = "ecmp", flows_per_nic: int = 1) -> Fabric:
    """The bundles of a built :class:`~clustertwin.topology.Topology` under ``routing``, each NIC opening
    ``flows_per_nic`` flows per ring edge."""
    if routing not in ROUTINGS:
        raise SpecError(f"unknown routing '{routing}'{did_you_mean(routing, ROUTINGS)}; choose from "
                        f"{', '.join(ROUTINGS)}")
    if isinstance(flows_per_nic, bool) or not isinstance(flows_per_nic, int) or not 1 <= flows_per_nic <= 1024:
        raise SpecError(f"flows_per_nic must be an integer from 1 to 1024 (got {str(flows_per_nic)[:40]!r})")
    nodes = np.arange(topology.nodes, dtype=np.int64)
    addr = topology.node_address(nodes)
    port = float(topology.port_gb_per_s)
    names, blocks, caps = [], [], []
    offset = 0
    for name, key, cap in topology.uplink_tiers():
        _, dense = np.unique(np.asarray(addr[key]), return_inverse=True)
        nb = int(dense.max()) + 1
        names.append(name)
        blocks.append(dense.reshape(-1) + offset)
        caps.append(np.full(2 * nb, float(cap)))
        offset += nb
    block_of = np.stack(blocks) if blocks else np.zeros((0, topology.nodes), dtype=np.int64)
    cap_arr = np.concatenate(caps) if caps else np.zeros(0)
    paths = np.maximum(1, np.round(cap_arr / port)).astype(np.int64) if len(cap_arr) else np.zeros(0, np.int64)
    return Fabric(tuple(names), block_of, cap_arr, paths, port, int(topology.nics_per_node), routing, flows_per_nic)


def max_min_rates(demand: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Max-min fair scale factors ``x`` (jobs) of demand rows ``demand`` (jobs x bundles, GB/s at ``x = 1``)
    under capacities ``cap`` (bundles), by progressive filling; each ``x <= 1``."""
    jobs = demand.shape[0]
    x = np.zeros(jobs)
    if jobs == 0:
        return x
    active = np.ones(jobs, dtype=bool)
    rem = cap.astype(float).copy()
    touches = demand > 0
    for _ in range(jobs + demand.shape[1] + 1):
        rate = demand[active].sum(axis=0)
        used = rate > 0
        step = 1.0 - x[active].max()
        if used.any():
            step = min(step, float((rem[used] / rate[used]).min()))
        step = max(step, 0.0)
        x[active] += step
        rem -= step * rate
        sat = used & (rem <= _TOL * np.maximum(cap, 1.0))
        frozen = active & ((x >= 1.0 - _TOL) | (touches[:, sat].any(axis=1) if sat.any() else False))
        active &= ~frozen
        if not active.any():
            break
    return np.minimum(x, 1.0)


def alone_rate(bundles: np.ndarray, flows: np.ndarray, fabric: Fabric) -> float:
    """``x_alone``: a job's rate on adaptive routing with the fabric to itself."""
    if not len(bundles):
        return 1.0
    d = flows * fabric.flow_gb_per_s
    return float(min(1.0, (fabric.cap_gb_per_s[bundles] / d).min()))


def bottleneck_slowdowns(fabric: Fabric, flows: np.ndarray,
                         nets: dict[int, tuple[np.ndarray, np.ndarray, float]]) -> dict[int, float]:
    """Communication slowdown ``s_j = x_alone / x_j`` (>= 1) of the jobs ``nets`` (job -> bundles, flows,
    ``x_alone``) whose rate falls below 1, given every running job's ``flows`` on each bundle (the sum of
    ``nets``' flows); jobs absent from the result move at their full rate.

    Only jobs crossing an over-demanded bundle (demand above its effective capacity) can get less than
    their full rate: the max-min filling runs on them, with the full demand of the others (who get it)
    taken off the capacities."""
    slow: dict[int, float] = {}
    if not nets:
        return slow
    js = sorted(nets)
    flow_gb = fabric.flow_gb_per_s
    used = np.flatnonzero(flows)
    cap = fabric.effective_capacity(used, flows[used])
    over_used = flows[used] * flow_gb > cap * (1.0 + _REL)
    if not over_used.any():
        return slow
    over = np.zeros(fabric.bundles, dtype=bool)
    over[used[over_used]] = True
    bs = [nets[j][0] for j in js]
    rows = np.repeat(np.arange(len(js)), [len(b) for b in bs])
    ball = np.concatenate(bs)
    hit_rows = np.unique(rows[over[ball]])
    pick = np.isin(rows, hit_rows)
    row_of = np.searchsorted(hit_rows, rows[pick])
    sub, cols = np.unique(ball[pick], return_inverse=True)
    f_hit = np.concatenate([nets[js[r]][1] for r in hit_rows.tolist()])
    demand = np.zeros((len(hit_rows), len(sub)))
    demand[row_of, cols] = f_hit * flow_gb
    mine = np.bincount(cols, weights=f_hit, minlength=len(sub))
    residual = cap[np.searchsorted(used, sub)] - (flows[sub] - mine) * flow_gb
    x = max_min_rates(demand, np.maximum(residual, 0.0))
    for r, xj in zip(hit_rows.tolist(), x.tolist(), strict=True):
        j = js[r]
        slow[j] = max(nets[j][2] / max(xj, 1e-12), 1.0)
    return slow
