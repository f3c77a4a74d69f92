"""What a drawn job runs, evaluated on its actual allocation: the training model's step time and exposed
inter-node communication, and the reliability layer's checkpoint interval and restart cost.

Per job class and GPU count the layout is the training model's best (``train.search``, contiguous nodes)
unless the class fixes one. Per (class, GPUs, span) - the span being what the allocation's nodes see of the
network (:meth:`clustertwin.topology.Topology.span_of`: nodes, leaves, pods, farthest hops) - the step is
``train.estimate`` with ``placement`` = the allocation's node list, evaluated once and cached. The exposed
communication terms of the step breakdown (``tp_comm``, ``cp_comm``, ``ep_comm``, ``pp_comm``,
``dp_comm``, ``zero3_gather``) whose group crosses nodes (``net_hops > 0``) are the job's inter-node share:
what contention can stretch (:mod:`clustertwin.sched.contention`).

Resilience per (class, GPUs), from :mod:`clustertwin.reliability`: checkpoint size ``14 B x params``
(BLOOM convention, ``checkpoint_bytes``), its save stall ``δ`` and load time through storage
(``cluster_checkpoint_cost``, ``recovery_times``), the job's MTBF ``M = node MTBF / nodes`` and the
checkpoint interval of Daly (2006) ``τ(δ, M)`` (``daly_interval_s``). A restart costs detection + restart +
load (``RecoveryTimes.mttr_s``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.sched.workload import NO_BODY, WorkloadMix
from clustertwin.units import HOUR_S

_NO_PROFILE_STEP_S = 1.0
"""A job without a body (:data:`~clustertwin.sched.workload.NO_BODY`) runs one 1-second step per second of its
trace runtime, with no inter-node traffic and no checkpoints."""

TERM_KIND = {"tp_comm": "tp", "cp_comm": "cp", "ep_comm": "ep", "pp_comm": "pp", "dp_comm": "dp",
             "zero3_gather": "dp"}
"""Exposed communication terms of :class:`clustertwin.train.breakdown.StepBreakdown` and their group kind."""


@dataclass(frozen=True)
class BodyProfile:
    """One class's step on one span: isolated step time and the exposed inter-node communication in it."""

    step_s: float
    inter_node_comm_s: dict[str, float]
    """Exposed seconds per step by group kind, for groups that cross nodes."""
    leaves: int
    max_hops: int

    @property
    def comm_share(self) -> float:
        """Exposed inter-node communication / step time."""
        return sum(self.inter_node_comm_s.values()) / self.step_s


@dataclass(frozen=True)
class Resilience:
    checkpoint_interval_s: float
    """Daly's optimum interval between checkpoints (compute time)."""
    save_stall_s: float
    restart_s: float
    """Detection + restart + checkpoint load after an interruption."""
    mtbf_s: float


class Bodies:
    """Step profiles and resilience of a mix's classes on one cluster, cached."""

    def __init__(self, mix: WorkloadMix, cluster_spec, *, node_mtbf_h: float, recovery_style: str = "requeue") -> None:
        from clustertwin import specs
        from clustertwin.topology import build

        self.mix = mix
        self.cluster = cluster_spec
        self.topology = build(cluster_spec)
        self.gpus_per_node = int(cluster_spec.node.gpus)
        self.node_mtbf_h = float(node_mtbf_h)
        self.recovery_style = recovery_style
        self.models = []
        for i, c in enumerate(mix.classes):
            try:
                self.models.append(specs.load(specs.ModelSpec, c.model, kind="model"))
            except SpecError as e:
                raise SpecError(f"class '{c.name}': {e.message}", file=e.file, path=("classes", i, "model")) from None
        self._layouts: dict[tuple[int, int], object] = {}
        self._profiles: dict[tuple, BodyProfile] = {}
        self._by_nodes: dict[tuple, BodyProfile] = {}
        """Profiles by (class, GPUs, sorted node set): a scheduler hands out the same node sets again and
        again (nine in ten starts of the co-simulation benchmark), and a set's span never changes."""
        self._res: dict[tuple[int, int], Resilience] = {}
        self._compact: dict[tuple[int, int], BodyProfile] = {}

    # ------------------------------------------------------------------ layout and step
    def layout(self, k: int, gpus: int):
        """The class's parallelism on ``gpus`` GPUs: its fixed layout, else the training model's best."""
        key = (k, gpus)
        hit = self._layouts.get(key)
        if hit is not None:
            return hit
        from clustertwin.specs import ParallelismSpec
        from clustertwin.train.search import search

        c = self.mix.classes[k]
        where = ("classes", k)
        if gpus > self.cluster.total_gpus:
            raise SpecError(f"class '{c.name}' asks for {gpus} GPUs; the cluster has {self.cluster.total_gpus}",
                            path=(*where, "gpus"))
        if c.layout is not None:
            fields = dict(c.layout)
            fields.setdefault("dp", max(gpus // (int(fields.get("tp", 1)) * int(fields.get("pp", 1))
                                                 * int(fields.get("cp", 1))), 1))
            try:
                spec = ParallelismSpec(**fields, global_batch=c.global_batch)
            except (TypeError, ValueError) as e:
                raise SpecError(f"class '{c.name}' layout: {e}", path=(*where, "layout")) from None
        else:
            res = search(self.models[k], self.cluster, global_batch=c.global_batch, gpus=gpus, top=1,
                         seq_len=c.seq_len)
            if res.best is None:
                raise SpecError(f"class '{c.name}' on {gpus} GPUs: {res.no_fit_reason or 'no valid layout'}",
                                path=where)
            lay = {f: v for f, v in res.best.layout.items() if f in ParallelismSpec.model_fields}
            spec = ParallelismSpec(**{**lay, "global_batch": c.global_batch})
        self._layouts[key] = spec
        return spec

    def new_run(self) -> None:
        """Forget the profiles cached by span: the first allocation of a span stands for the others of that
        span within one simulation, so a simulation must not inherit another's (its result would depend on
        which ran before). Layouts, resilience and the compact profiles (fixed nodes) stay."""
        self._profiles = {}
        self._by_nodes = {}

    def profile(self, k: int, gpus: int, nodes: np.ndarray) -> BodyProfile:
        """The class's step on the allocation ``nodes`` (cached by span)."""
        if k == NO_BODY:
            return BodyProfile(_NO_PROFILE_STEP_S, {}, 0, 0)
        node_list = np.asarray(nodes).tolist()
        exact = (k, gpus, tuple(sorted(node_list)))
        hit = self._by_nodes.get(exact)
        if hit is not None:
            return hit
        span = self.topology.span_of(nodes)
        key = (k, gpus, span.nodes, span.leaves, span.pods, span.max_hops)
        hit = self._profiles.get(key)
        if hit is None:
            hit = self._profiles[key] = self._evaluate(k, gpus, node_list, span)
        self._by_nodes[exact] = hit
        return hit

    def _evaluate(self, k: int, gpus: int, nodes: list[int], span) -> BodyProfile:
        from clustertwin.train.estimate import estimate

        c = self.mix.classes[k]
        try:
            est = estimate(self.models[k], self.cluster, self.layout(k, gpus), seq_len=c.seq_len,
                           placement=nodes)
        except SpecError as e:
            raise SpecError(f"class '{c.name}' on {gpus} GPUs: {e.message}", path=("classes", k)) from None
        comm: dict[str, float] = {}
        for term, kind in TERM_KIND.items():
            v = float(est.breakdown.get(term, 0.0))
            if v > 0 and est.net_hops.get(kind, 0) > 0:
                comm[kind] = comm.get(kind, 0.0) + v
        return BodyProfile(float(est.step_time_s), comm, span.leaves, span.max_hops)

    def compact(self, k: int, gpus: int) -> BodyProfile:
        """The step on the first ``ceil(gpus / gpus_per_node)`` nodes (the reference of slowdowns)."""
        key = (k, gpus)
        if key not in self._compact:
            n = max(1, math.ceil(gpus / self.gpus_per_node))
            self._compact[key] = self.profile(k, gpus, np.arange(n))
        return self._compact[key]

    def steps(self, k: int, gpus: int) -> float:
        """Nominal steps of one job of the class (before its lognormal factor)."""
        if k == NO_BODY:
            return 1.0
        c = self.mix.classes[k]
        d = c.duration
        if d.steps is not None:
            return float(d.steps)
        if d.tokens is not None:
            seq = c.seq_len or self.models[k].seq_len
            return d.tokens / (c.global_batch * seq)
        return float(d.hours) * HOUR_S / self.compact(k, gpus).step_s

    def iso_runtime_s(self, k: int, gpus: int) -> float:
        """Isolated runtime of a nominal job on a compact allocation (checkpoint stalls included)."""
        r = self.resilience(k, gpus)
        return self.steps(k, gpus) * self.compact(k, gpus).step_s * (1.0 + r.save_stall_s / r.checkpoint_interval_s)

    # ------------------------------------------------------------------ resilience
    def resilience(self, k: int, gpus: int) -> Resilience:
        if k == NO_BODY:
            return Resilience(math.inf, 0.0, 0.0, math.inf)
        key = (k, gpus)
        hit = self._res.get(key)
        if hit is not None:
            return hit
        from clustertwin.reliability.checkpoint import (
            checkpoint_bytes,
            cluster_checkpoint_cost,
            daly_interval_s,
        )
        from clustertwin.reliability.recovery import recovery_times

        ck = cluster_checkpoint_cost(self.cluster, gpus, checkpoint_bytes(self.models[k]))
        rt = recovery_times(self.recovery_style, ck, self.topology.injection_gb_per_s)
        nodes = max(1, math.ceil(gpus / self.gpus_per_node))
        mtbf_s = self.node_mtbf_h * HOUR_S / nodes
        stall = max(rt.save_stall_s, 1e-6)
        hit = self._res[key] = Resilience(daly_interval_s(stall, mtbf_s), stall, rt.mttr_s, mtbf_s)
        return hit
