"""MLCommons Chakra execution traces of one predicted training step, for ASTRA-sim 2.0 (``export chakra``).

One ``PREFIX.RANK.et`` per rank (ASTRA-sim's ``--workload-configuration=DIR/PREFIX`` reads
``PREFIX.<npu>.et``) and the communicator groups ``PREFIX.json`` (``--comm-group-configuration``: group id ->
member ranks; a collective node names its group in ``pg_name``). Each file is Chakra's framing (protolib
``encodeMessage``, :mod:`~clustertwin.deploy.chakra_schema`): a ``GlobalMetadata``, then the ``Node`` messages.

**Graph of a rank** (stage ``s`` = rank // (tp cp dp), the rank order of :mod:`~clustertwin.train.placement`):
the stage's forward and backward operations in the order the 1F1B / interleaved schedule runs them
(:func:`~clustertwin.train.timeline.schedule_order`), each chained to the one before (``data_deps``). An
operation receives its input (``COMM_RECV_NODE``; none for the first chunk's forward on the first stage
and the last chunk's backward on the last), runs its layers, and sends its output (``COMM_SEND_NODE``,
which nothing waits on: sends overlap the next operation). A layer is a ``COMP_NODE`` (the twin's
forward kernels, or backward + recompute, plus its share of the host stall; ``StageTimes``) followed by
its collectives (``COMM_COLL_NODE``): TP, CP, and for MoE layers (the model's last ``n_moe_layers``) the EP
dispatch and combine, one node per collective of :mod:`~clustertwin.train.step_collectives`. The
embedding and the output layer are ``COMP_NODE`` s of their own on the first / last stage. After the last
backward come the DP gradient buckets (chained: they run one after another), the optimizer, and with
ZeRO 1-2 the parameter all-gathers; ZeRO-3 gathers the parameters before each micro-batch's first forward
and first backward on the stage and reduce-scatters after each backward. ``duration_micros`` is the twin's
time (collectives: the collective model's time of that size on that group); ``comm_size`` nccl-tests' size
in bytes. Layers per chunk: the stage's layers split over its chunks as evenly as integers allow.

**World.** Every rank of the layout gets a file when ``tp cp dp pp <= max_ranks``; otherwise DP replicas are
dropped (DP replicas run the same graph): the exported world keeps tp, cp, pp and the largest ``dp' <= dp``
dividing dp with ``tp cp dp' pp <= max_ranks``; DP collectives keep the twin's sizes and run over
``cp dp'`` ranks (the metadata records ``dp_modelled`` and ``dp_exported``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clustertwin.errors import SpecError
from clustertwin.specs.calibration import Calibration
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.specs.model import ModelSpec
from clustertwin.specs.parallelism import ParallelismSpec
from clustertwin.train.step_collectives import Coll, StepPlan, dp_collectives, step_collectives, zero3_gathers
from clustertwin.train.timeline import END_FORWARD_SHARE, Op, schedule_order

COMM_TYPES = {"all_reduce": "ALL_REDUCE", "all_gather": "ALL_GATHER", "reduce_scatter": "REDUCE_SCATTER",
              "all_to_all": "ALL_TO_ALL"}
SCHEMA_VERSION = "0.0.4"
DEFAULT_MAX_RANKS = 64
_PREFIX = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}")


@dataclass
class World:
    """Exported ranks and where each sits: rank = tp_rank + tp (cp_rank + cp (dp_rank + dp pp_rank))."""

    tp: int
    cp: int
    dp: int
    pp: int
    ep: int
    etp: int

    @property
    def size(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def stage_stride(self) -> int:
        return self.tp * self.cp * self.dp

    def members(self, kind: str, rank: int) -> tuple[int, ...]:
        """The ranks of ``rank``'s group of ``kind`` (tp, cp, dp = DP x CP, ep, edp)."""
        base, d = divmod(rank, self.stage_stride)
        base *= self.stage_stride
        tp_r, rest = d % self.tp, d // self.tp
        cp_r, dp_r = rest % self.cp, rest // self.cp
        if kind == "tp":
            return tuple(base + t + self.tp * (cp_r + self.cp * dp_r) for t in range(self.tp))
        if kind == "cp":
            return tuple(base + tp_r + self.tp * (c + self.cp * dp_r) for c in range(self.cp))
        if kind == "dp":
            return tuple(base + tp_r + self.tp * i for i in range(self.cp * self.dp))
        etp_r, rest = d % self.etp, d // self.etp  # expert order: etp fastest, then ep, then expert-DP
        ep_r, edp_r = rest % self.ep, rest // self.ep
        edp = self.stage_stride // (self.etp * self.ep)
        if kind == "ep":
            return tuple(base + etp_r + self.etp * (e + self.ep * edp_r) for e in range(self.ep))
        return tuple(base + etp_r + self.etp * (ep_r + self.ep * i) for i in range(edp))


@dataclass
class ChakraExport:
    """What :func:`export_chakra` wrote."""

    out_dir: str
    prefix: str
    ranks: int
    dp_modelled: int
    dp_exported: int
    comm_groups: int
    nodes: dict[int, dict[str, int]] = field(default_factory=dict)
    """rank -> node count by kind (COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE, and ALL_REDUCE ... per collective)"""
    files: list[str] = field(default_factory=list)
    bytes_written: int = 0


def exported_dp(par: ParallelismSpec, max_ranks: int) -> int:
    """The DP degree of the exported world (module docstring)."""
    fixed = par.tp * par.cp * par.pp
    etp = par.etp or par.tp
    ok = [d for d in range(par.dp, 0, -1) if par.dp % d == 0 and fixed * d <= max_ranks
          and (par.tp * par.cp * d) % (etp * par.ep) == 0]
    if not ok:
        experts = f"; expert groups need etp x ep = {etp * par.ep} dense ranks per stage" if par.ep > 1 else ""
        raise SpecError(f"export chakra: one DP replica is tp x cp x pp = {fixed} ranks{experts}; "
                        f"raise --ranks to at least {fixed}")
    return ok[0]


def integer_layers(stage_plan: dict[str, Any], model_layers: int) -> list[int]:
    """Whole layers per stage: the plan's first, busiest middle and last; the other middle stages share the
    rest, the earlier ones one more when it does not divide."""
    p = int(stage_plan["stages"])
    first = int(stage_plan["first_stage_layers"])
    if p == 1:
        return [first]
    last = int(stage_plan["last_stage_layers"])
    if p == 2:
        return [first, last]
    mid = int(stage_plan["middle_stage_layers"])
    q, r = divmod(model_layers - first - last - mid, p - 3) if p > 3 else (0, 0)
    return [first, mid, *[q + (i < r) for i in range(p - 3)], last]


class _Graph:
    """The nodes of one rank, built in order; ``last`` is the node the next one waits on."""

    def __init__(self, S: Any, world: World, rank: int, group_ids: dict[tuple[int, ...], int]):
        self.S, self.world, self.rank, self.group_ids = S, world, rank, group_ids
        self.nodes: list[Any] = []
        self.last: int | None = None
        self.counts: Counter[str] = Counter()

    def _node(self, name: str, typ: str, seconds: float, deps: list[int], chain: bool = True) -> Any:
        S = self.S
        n = S.Node(id=len(self.nodes), name=name, type=getattr(S, typ), data_deps=deps,
                   duration_micros=max(round(seconds * 1e6), 0))
        n.attr.add(name="is_cpu_op", bool_val=False)
        self.nodes.append(n)
        self.counts[typ] += 1
        if chain:
            self.last = n.id
        return n

    def _deps(self) -> list[int]:
        return [] if self.last is None else [self.last]

    def comp(self, name: str, seconds: float) -> None:
        self._node(name, "COMP_NODE", seconds, self._deps())

    def coll(self, name: str, c: Coll) -> None:
        members = self.world.members(c.group, self.rank)
        n = self._node(f"{name} {c.group} {c.op}", "COMM_COLL_NODE", c.seconds, self._deps())
        n.attr.add(name="comm_type", int64_val=getattr(self.S, COMM_TYPES[c.op]))
        n.attr.add(name="comm_size", int64_val=round(c.nbytes))
        n.attr.add(name="pg_name", string_val=str(self.group_ids.setdefault(members, len(self.group_ids) + 1)))
        self.counts[COMM_TYPES[c.op]] += 1

    def p2p(self, name: str, c: Coll, peer: int, tag: int, send: bool) -> None:
        typ = "COMM_SEND_NODE" if send else "COMM_RECV_NODE"
        n = self._node(name, typ, c.seconds, self._deps(), chain=not send)
        src, dst = (self.rank, peer) if send else (peer, self.rank)
        for key, v in (("comm_src", src), ("comm_dst", dst), ("comm_tag", tag)):
            n.attr.add(name=key, int32_val=v)
        n.attr.add(name="comm_size", int64_val=round(c.nbytes))


def _peers(op: Op, s: int, pp: int, vpp: int) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """((stage, chunk) the operation receives from, (stage, chunk) it sends to); None at the pipe's ends."""
    first, last = (s == 0 and op.chunk == 0), (s == pp - 1 and op.chunk == vpp - 1)
    prev = (s - 1, op.chunk) if s > 0 else (pp - 1, op.chunk - 1)
    nxt = (s + 1, op.chunk) if s < pp - 1 else (0, op.chunk + 1)
    if op.kind == "F":
        return (None if first else prev), (None if last else nxt)
    return (None if last else nxt), (None if first else prev)


def _tag(kind: str, consumer_chunk: int, mb: int, vpp: int, m: int) -> int:
    return ((kind == "B") * vpp + consumer_chunk) * m + mb


def _layers_of_chunk(n_stage: int, vpp: int, chunk: int) -> int:
    q, r = divmod(n_stage, vpp)
    return q + (chunk < r)


def _run_op(g: _Graph, op: Op, ctx: dict[str, Any]) -> None:
    """The nodes of one forward or backward operation (module docstring)."""
    s, pp, vpp, m, plan = ctx["stage"], ctx["pp"], ctx["vpp"], ctx["m"], ctx["plan"]
    sc, sched, fwd = plan.collectives, ctx["sched"], op.kind == "F"
    label = f"{op.kind} mb{op.microbatch} c{op.chunk}"
    src, dst = _peers(op, s, pp, vpp)
    stride = g.world.stage_stride
    if src is not None:
        g.p2p(f"recv {label}", sc.p2p, g.rank + (src[0] - s) * stride,
              _tag(op.kind, op.chunk, op.microbatch, vpp, m), send=False)
    lc = _layers_of_chunk(ctx["stage_layers"][s], vpp, op.chunk)
    first_layer = ctx["layer_offset"][s] + sum(_layers_of_chunk(ctx["stage_layers"][s], vpp, c) for c in range(op.chunk))
    recomputed = round(sc.full_recompute_fraction * lc)
    host_share = (sched["layer_forward_s"] / sched["layer_compute_s"]) if sched["layer_compute_s"] > 0 else 0.5
    layer_s = sched["layer_forward_s"] if fwd else sched["layer_compute_s"] - sched["layer_forward_s"]
    layer_s += sched["layer_host_s"] * (host_share if fwd else 1 - host_share)
    ends = [("embedding", sched["embedding_s"])] if s == 0 and op.chunk == 0 else []
    tail = [("output layer", sched["logits_s"])] if s == pp - 1 and op.chunk == vpp - 1 else []
    end_share = END_FORWARD_SHARE if fwd else 1 - END_FORWARD_SHARE
    for name, t in ends if fwd else tail:
        g.comp(f"{name} {label}", t * end_share)
    order = range(lc) if fwd else reversed(range(lc))
    for i in order:
        g.comp(f"layer {first_layer + i} {label}", layer_s)
        passes = 1 if fwd else 1 + (i < recomputed)
        for c in sc.tp_pass * passes:
            g.coll(label, c)
        for c in sc.cp_pass * (1 if fwd else 2 + (i < recomputed)):
            g.coll(label, c)
        if first_layer + i >= ctx["first_moe_layer"]:
            for c in sc.ep_pass * passes:
                g.coll(label, c)
    for name, t in tail if fwd else ends:
        g.comp(f"{name} {label}", t * end_share)
    if dst is not None:
        consumer_chunk = dst[1]
        g.p2p(f"send {label}", sc.p2p, g.rank + (dst[0] - s) * stride,
              _tag(op.kind, consumer_chunk, op.microbatch, vpp, m), send=True)


def _rank_graph(S: Any, world: World, rank: int, group_ids: dict, ctx: dict[str, Any]) -> _Graph:
    g = _Graph(S, world, rank, group_ids)
    s, vpp, m, plan = ctx["stage"], ctx["vpp"], ctx["m"], ctx["plan"]
    z3 = zero3_gathers(plan, s)
    red, gather = dp_collectives(plan, s)
    for op in schedule_order(s, world.pp, vpp, m):
        if z3 and ((op.kind == "F" and op.chunk == 0) or (op.kind == "B" and op.chunk == vpp - 1)):
            for c in z3:
                g.coll(f"zero3 {op.kind} mb{op.microbatch}", c)
        _run_op(g, op, ctx)
        if z3 and op.kind == "B" and op.chunk == 0 and op.microbatch < m - 1:
            for c in red:
                g.coll(f"zero3 mb{op.microbatch}", c)
    for c in red:
        g.coll("grad", c)
    g.comp("optimizer step", ctx["optimizer_s"])
    for c in gather:
        g.coll("param", c)
    return g


def export_chakra(model: ModelSpec, cluster: ClusterSpec, par: ParallelismSpec, est: Any, out_dir: str | Path,
                  *, prefix: str = "workload", max_ranks: int = DEFAULT_MAX_RANKS,
                  calibration: Calibration | None = None, placement: Any = "contiguous") -> ChakraExport:
    """Write the Chakra traces and the communicator groups of estimate ``est`` of layout ``par``."""
    from clustertwin.deploy.chakra_schema import encode_message, schema

    if not _PREFIX.fullmatch(prefix):
        raise SpecError(f"--prefix {prefix[:40]!r}: expected letters, digits, '_', '-' or '.', not starting with '.'")
    S = schema()
    dp_x = exported_dp(par, max_ranks)
    world = World(par.tp, par.cp, dp_x, par.pp, par.ep, par.etp or par.tp)
    layers = integer_layers(est.stage_plan, model.layers)
    plan: StepPlan = step_collectives(model, cluster, par, layers, calibration, placement)
    offsets = [sum(layers[:i]) for i in range(len(layers))]
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SpecError(f"--out {out_dir}: cannot create ({err.strerror})") from None
    res = ChakraExport(str(out), prefix, world.size, par.dp, dp_x, 0)
    group_ids: dict[tuple[int, ...], int] = {}
    for rank in range(world.size):
        stage = rank // world.stage_stride
        ctx = {"stage": stage, "pp": par.pp, "vpp": par.vpp, "m": plan.collectives.microbatches, "plan": plan,
               "sched": est.schedule, "stage_layers": layers, "layer_offset": offsets,
               "first_moe_layer": model.layers - model.n_moe_layers, "optimizer_s": est.breakdown["optimizer"]}
        g = _rank_graph(S, world, rank, group_ids, ctx)
        meta = S.GlobalMetadata(version=SCHEMA_VERSION)
        for key, v in (("generator", "clustertwin export chakra"), ("stage", str(stage)),
                       ("dp_modelled", str(par.dp)), ("dp_exported", str(dp_x)),
                       ("step_time_s", repr(est.step_time_s))):
            meta.attr.add(name=key, string_val=v)
        path = out / f"{prefix}.{rank}.et"
        with open(path, "wb") as f:
            encode_message(f, meta)
            for n in g.nodes:
                encode_message(f, n)
        res.files.append(path.name)
        res.bytes_written += path.stat().st_size
        res.nodes[rank] = dict(g.counts)
    groups = {str(i): list(members) for members, i in sorted(group_ids.items(), key=lambda kv: kv[1])}
    lines = ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in groups.items())
    (out / f"{prefix}.json").write_text("{\n" + lines + "\n}\n", encoding="utf-8")
    res.comm_groups = len(groups)
    return res
