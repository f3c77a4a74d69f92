"""The cluster as the scheduler sees it: GPUs per node, GPU model per node, leaf switch per node.

Built from a cluster spec (homogeneous nodes; leaf membership from ``clustertwin.topology`` when that
package provides ``build``, otherwise consecutive groups of ``nodes_per_leaf`` nodes), from a trace's node
list (Alibaba PAI 2023 ``openb_node_list_*.csv``: ``sn,cpu_milli,memory_mib,gpu,model``), or directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clustertwin.errors import SpecError

DEFAULT_NODES_PER_LEAF = 32
"""Nodes under one leaf switch when the topology does not say: a DGX SuperPOD H100 scalable unit has 32
node slots per leaf group (NVIDIA DGX SuperPOD reference architecture)."""


@dataclass(frozen=True)
class SchedCluster:
    """Nodes with ``gpus[n]`` GPUs of model ``models[model_code[n]]`` under leaf switch ``leaf[n]``."""

    name: str
    gpus: np.ndarray
    model_code: np.ndarray
    models: tuple[str, ...]
    leaf: np.ndarray
    node_names: tuple[str, ...] = ()
    cpu_milli: np.ndarray | None = None
    """CPU per node in milli-cores; None: CPU is not a constraint."""
    memory_mib: np.ndarray | None = None
    """Host memory per node, MiB; None: memory is not a constraint."""
    skipped_rows: tuple[tuple[str, int], ...] = ()
    """Node-list rows left out, by cause (``(cause, count)``): rejected rows (wrong field count, bad number)
    and CPU-only nodes (``gpu=0``, unless they are kept); ``nodes + sum(counts) == data rows``."""

    def __post_init__(self) -> None:
        n = len(self.gpus)
        for name in ("cpu_milli", "memory_mib"):
            v = getattr(self, name)
            if v is not None and len(v) != n:
                raise SpecError(f"cluster array {name} must have one entry per node")
        if n == 0:
            raise SpecError("the cluster has no nodes")
        if len(self.model_code) != n or len(self.leaf) != n:
            raise SpecError("cluster arrays gpus, model_code and leaf must have one entry per node")
        if np.any(self.gpus < 0):
            raise SpecError("GPUs per node must be >= 0")
        if self.gpus.sum() == 0:
            raise SpecError("the cluster has no GPUs")

    @property
    def nodes(self) -> int:
        return len(self.gpus)

    @property
    def total_gpus(self) -> int:
        return int(self.gpus.sum())

    @property
    def max_gpus_per_node(self) -> int:
        return int(self.gpus.max())

    @property
    def leaves(self) -> int:
        return int(self.leaf.max()) + 1

    def skipped_note(self) -> str:
        """``' (node list: 2 rows skipped: CPU-only (gpu=0) 1, bad number 1)'``, or ``''``."""
        if not self.skipped_rows:
            return ""
        n = sum(c for _, c in self.skipped_rows)
        causes = ", ".join(f"{k} {v}" for k, v in self.skipped_rows)
        return f" (node list: {n:,} row{'s' if n != 1 else ''} skipped: {causes})"

    def summary(self) -> str:
        """One line for text output: name, nodes, GPUs, leaves and the node-list rows skipped."""
        return (f"cluster {self.name}: {self.nodes:,} nodes, {self.total_gpus:,} GPUs, {self.leaves} leaves"
                f"{self.skipped_note()}")

    def to_dict(self) -> dict:
        counts = {m: int(self.gpus[self.model_code == i].sum()) for i, m in enumerate(self.models)}
        out = {"name": self.name, "nodes": self.nodes, "gpus": self.total_gpus, "leaves": self.leaves,
               "gpus_by_model": counts}
        if self.skipped_rows:
            out["skipped_rows"] = dict(self.skipped_rows)
        return out


def uniform(nodes: int, gpus_per_node: int, *, nodes_per_leaf: int = DEFAULT_NODES_PER_LEAF,
            model: str = "gpu", name: str = "uniform") -> SchedCluster:
    """``nodes`` identical nodes, leaves of ``nodes_per_leaf`` consecutive nodes."""
    if nodes < 1 or gpus_per_node < 1 or nodes_per_leaf < 1:
        raise SpecError("nodes, gpus_per_node and nodes_per_leaf must be >= 1")
    idx = np.arange(nodes)
    return SchedCluster(name=name, gpus=np.full(nodes, gpus_per_node, dtype=np.int64),
                        model_code=np.zeros(nodes, dtype=np.int64), models=(model,),
                        leaf=idx // nodes_per_leaf)


def leaf_of_nodes(cluster_spec, nodes_per_leaf: int | None = None) -> np.ndarray:
    """Leaf switch index of every node of a cluster spec.

    Uses ``clustertwin.topology.build(spec)`` (``node_address(nodes)["leaf"]``) when the topology package
    provides it and no explicit ``nodes_per_leaf`` is given; otherwise groups consecutive nodes,
    ``nodes_per_leaf`` per leaf (default: the network's scalable-unit size ``su_nodes``, else
    ``DEFAULT_NODES_PER_LEAF``).
    """
    n = int(cluster_spec.nodes)
    if nodes_per_leaf is None:
        try:
            from clustertwin import topology  # built by the topology layer when present

            build = getattr(topology, "build", None)
        except ImportError:
            build = None
        if build is not None:
            topo = build(cluster_spec)
            leaf = np.asarray(topo.node_address(np.arange(n))["leaf"], dtype=np.int64)
            _, dense = np.unique(leaf, return_inverse=True)
            return dense.astype(np.int64)
        net = getattr(cluster_spec, "network", None)
        nodes_per_leaf = int(getattr(net, "su_nodes", DEFAULT_NODES_PER_LEAF) or DEFAULT_NODES_PER_LEAF)
    if nodes_per_leaf < 1:
        raise SpecError("nodes_per_leaf must be >= 1")
    return np.arange(n, dtype=np.int64) // nodes_per_leaf


def from_spec(cluster_spec, nodes_per_leaf: int | None = None) -> SchedCluster:
    """A :class:`SchedCluster` for a ``ClusterSpec`` (all nodes alike)."""
    n = int(cluster_spec.nodes)
    gpu_id = getattr(cluster_spec.node.gpu, "id", None) or getattr(cluster_spec.node.gpu, "name", None) or "gpu"
    return SchedCluster(
        name=str(getattr(cluster_spec, "name", None) or "cluster"),
        gpus=np.full(n, int(cluster_spec.node.gpus), dtype=np.int64),
        model_code=np.zeros(n, dtype=np.int64),
        models=(str(gpu_id),),
        leaf=leaf_of_nodes(cluster_spec, nodes_per_leaf),
    )


NODE_LIST_COLUMNS = ("sn", "gpu", "model")
CPU_ONLY = "CPU-only (gpu=0)"
"""Cause under which node-list rows without GPUs are counted in ``skipped_rows``."""
MAX_GPUS_PER_NODE = 1024
"""Most GPUs one node-list row may declare (beyond any real node; ``4294967296`` is out of range)."""
MAX_NODE_CPU_MILLI = 10**9
"""Most CPU milli-cores per node (a million cores)."""
MAX_NODE_MEMORY_MIB = 10**10
"""Most memory per node, MiB (about 10 PiB)."""


def from_node_list(path: str | Path, *, nodes_per_leaf: int = DEFAULT_NODES_PER_LEAF,
                   include_cpu_nodes: bool = False) -> SchedCluster:
    """Cluster from an Alibaba PAI 2023 node list (``sn,cpu_milli,memory_mib,gpu,model``).

    The trace does not publish the network, so leaves are ``nodes_per_leaf`` consecutive nodes in file
    order. Nodes without GPUs are left out unless ``include_cpu_nodes`` (counted as ``CPU-only (gpu=0)``).
    CPU and memory capacities are kept (pods need them too). Rows that cannot be used (wrong field count,
    broken quote, a number that is not finite or out of range) are rejected; both are counted by cause in
    ``skipped_rows``, so every data row is either a node or counted.
    """
    from collections import Counter

    from clustertwin.sched import parse

    p = Path(path)
    if nodes_per_leaf < 1:
        raise SpecError("nodes_per_leaf must be >= 1")
    text = parse.read_lines(p, "node list")
    try:
        cols = [c.strip() for c in parse.split_record(text[0])] if text else []
    except parse.Damaged as d:
        raise SpecError(f"node list header: {d}", file=str(p)) from None
    missing = [c for c in NODE_LIST_COLUMNS if c not in cols]
    if missing:
        raise SpecError(f"node list lacks columns {missing}; expected sn,cpu_milli,memory_mib,gpu,model",
                        file=str(p))
    has_res = {"cpu_milli", "memory_mib"} <= set(cols)
    names: list[str] = []
    gpus: list[int] = []
    models: list[str] = []
    cpus: list[int] = []
    mems: list[int] = []
    skipped: Counter = Counter()
    first_bad = ""
    for line_no, rec, damage in parse.records(text, 1):
        try:
            if damage is not None:
                raise damage
            if len(rec) != len(cols):
                raise parse.Damaged(parse.FIELD_COUNT, f"expected {len(cols)} fields, got {len(rec)}")
            row = dict(zip(cols, rec, strict=True))
            g = parse.count(row["gpu"], "gpu", lo=0, hi=MAX_GPUS_PER_NODE)
            cpu = parse.count(row["cpu_milli"], "cpu_milli", hi=MAX_NODE_CPU_MILLI) if has_res else 0
            mem = parse.count(row["memory_mib"], "memory_mib", hi=MAX_NODE_MEMORY_MIB) if has_res else 0
        except parse.Damaged as d:
            skipped[d.cause] += 1
            first_bad = first_bad or f"line {line_no}: {d}"
            continue
        if g == 0 and not include_cpu_nodes:
            skipped[CPU_ONLY] += 1
            continue
        names.append(row["sn"])
        gpus.append(g)
        cpus.append(cpu)
        mems.append(mem)
        models.append((row.get("model") or "").strip() or "unknown")
    if not gpus:
        rejected = sum(skipped.values()) - skipped[CPU_ONLY]
        why = "".join([f", {skipped[CPU_ONLY]} CPU-only rows" if skipped[CPU_ONLY] else "",
                       f", {rejected} rows rejected, first: {first_bad}" if rejected else ""])
        why = f" ({why[2:]})" if why else ""
        raise SpecError(f"node list holds no GPU nodes{why}", file=str(p))
    table = tuple(sorted(set(models)))
    code = {m: i for i, m in enumerate(table)}
    return SchedCluster(
        name=p.stem,
        gpus=np.array(gpus, dtype=np.int64),
        model_code=np.array([code[m] for m in models], dtype=np.int64),
        models=table,
        leaf=np.arange(len(gpus), dtype=np.int64) // nodes_per_leaf,
        node_names=tuple(names),
        cpu_milli=np.array(cpus, dtype=np.int64) if has_res else None,
        memory_mib=np.array(mems, dtype=np.int64) if has_res else None,
        skipped_rows=tuple(sorted(skipped.items())),
    )
