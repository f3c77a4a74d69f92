"""The predicted step as a timeline: a Chrome-trace / Perfetto JSON of one optimizer step on a few
representative ranks (``train estimate --timeline``), built from the same per-micro-batch times as the
step model (:class:`~clustertwin.train.result.StageTimes`), so it opens next to a measured trace.

**Operations.** Every pipeline stage runs a forward ``F`` and a backward ``B`` per micro-batch and virtual
chunk. A chunk of stage ``s`` holds ``layers_s / v`` layers (the stage plan, :mod:`~clustertwin.train.pipeline`);
the first stage's first chunk also runs the embedding, the last stage's last chunk the output layer and
loss. An operation is a run of segments, each on its own stream (``tid``): compute, then the exposed
TP / CP / EP communication, the GPU idle behind the host, the exposed send/recv. The forward takes the
forward kernels (``layer_forward_s``) and ``1 / passes`` of each layer's exposed communication; the backward
the rest (backward, recompute, ``(passes - 1) / passes`` of the communication); the host stall splits as the
compute does; the end blocks split 1 : 2 (a GEMM's forward : backward FLOPs); every operation sends or
receives once, ``p2p / 2v`` of the stage's exposed send/recv. An operation of stage ``s`` therefore lasts
what the step model charges, and a micro-batch's ``F + B`` over the chunks is the model's ``t_s``.

**Schedule.** 1F1B (``v = 1``: ``p - s - 1`` warm-up forwards on stage ``s``, then one forward and one
backward in turn, then the cool-down backwards) or Megatron's interleaved 1F1B (``v > 1``: micro-batches in
groups of ``p``, chunk by chunk, ``2 (p - s - 1) + (v - 1) p`` warm-up forwards; Narayanan et al. 2021,
"Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", section 2.2). A forward
waits for the same chunk on the previous stage (chunk ``c`` on stage 0 for chunk ``c - 1`` on the last
stage), a backward for the next stage's. Each stage runs its operations in order, as soon as their inputs
are there: the gaps on a compute stream are the pipeline bubble.

**Step.** ``[data stall] [pipeline] [stragglers] [exposed DP reduction] [exposed ZeRO-3 gathers] [optimizer]``:
the pipeline window lasts the model's pipeline term. The schedule's own end can fall short of it (the
closed form ``sum_i t_i + (m - 1) t_max`` is an upper bound when the slowest stage is not the last: warm-up
forwards hide part of the first micro-batch's round trip), and the difference is idle before the step's
synchronisation; when a schedule would run longer (DualPipe's modelled bubble), its times are scaled to the
window and the factor is reported (``schedule_scale``). Every rank also carries one ``step`` span over the
whole step, as ``ProfilerStep#N`` does in a PyTorch profiler trace. Hidden communication is not drawn: the
model charges only what is exposed.

Times in the JSON are microseconds (Chrome trace format); ``pid`` = global rank (rank order of
:mod:`~clustertwin.train.placement`), ``tid`` = stream (:data:`STREAMS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: stream -> thread id in the trace
STREAMS: dict[str, int] = {"step": 0, "compute": 1, "tp comm": 2, "cp comm": 3, "ep all-to-all": 4,
                           "pp send/recv": 5, "dp comm": 6, "host": 7, "data / sync": 8}
#: forward share of the end blocks (a GEMM's forward is 1 of its 3 passes' FLOPs)
END_FORWARD_SHARE = 1.0 / 3.0
US = 1e6


@dataclass(frozen=True)
class Op:
    """One pipeline operation: ``kind`` "F" (forward) or "B" (backward) of ``microbatch`` on ``chunk``."""

    kind: str
    chunk: int
    microbatch: int


def schedule_order(stage: int, pp: int, vpp: int, m: int) -> list[Op]:
    """The operations of ``stage`` in the order 1F1B (``vpp`` = 1) or interleaved 1F1B runs them."""
    groups = [range(g, min(g + pp, m)) for g in range(0, m, pp)] if vpp > 1 else [range(m)]
    fwd = [Op("F", c, mb) for g in groups for c in range(vpp) for mb in g]
    bwd = [Op("B", c, mb) for g in groups for c in reversed(range(vpp)) for mb in g]
    if pp == 1:
        return [op for pair in zip(fwd, bwd, strict=True) for op in pair]
    warm = min(pp - stage - 1 if vpp == 1 else 2 * (pp - stage - 1) + (vpp - 1) * pp, len(fwd))
    out = fwd[:warm]
    for i in range(len(fwd) - warm):
        out += [fwd[warm + i], bwd[i]]
    return out + bwd[len(fwd) - warm:]


def stage_layer_counts(stage_plan: dict[str, Any], model_layers: int) -> list[float]:
    """Layers of every stage: the plan's first and last; the busiest middle stage (the second) its own, the
    other middle stages the rest evenly."""
    p = int(stage_plan["stages"])
    first = float(stage_plan["first_stage_layers"])
    if p == 1:
        return [first]
    last = float(stage_plan["last_stage_layers"])
    if p == 2:
        return [first, last]
    mid = float(stage_plan["middle_stage_layers"])
    rest = (model_layers - first - last - mid) / (p - 3) if p > 3 else 0.0
    return [first, mid, *([rest] * (p - 3)), last]


def op_parts(sched: dict[str, float], layers: float, stage: int, pp: int, vpp: int, op: Op) -> list[tuple[str, float]]:
    """(stream, seconds) segments of ``op`` on ``stage`` holding ``layers`` layers (module docstring)."""
    lc = layers / vpp
    fwd = op.kind == "F"
    comp = sched["layer_compute_s"]
    f_ratio = sched["layer_forward_s"] / comp if comp > 0 else 0.5
    share = f_ratio if fwd else 1.0 - f_ratio
    comm_share = 1.0 / sched["passes"] if fwd else 1.0 - 1.0 / sched["passes"]
    extra = 0.0
    if stage == 0 and op.chunk == 0:
        extra += sched["embedding_s"]
    if stage == pp - 1 and op.chunk == vpp - 1:
        extra += sched["logits_s"]
    compute = lc * (sched["layer_forward_s"] if fwd else comp - sched["layer_forward_s"])
    compute += extra * (END_FORWARD_SHARE if fwd else 1.0 - END_FORWARD_SHARE)
    per_op = 1.0 / (2 * vpp)
    return [("compute", compute), ("tp comm", lc * sched["layer_tp_s"] * comm_share),
            ("cp comm", lc * sched["layer_cp_s"] * comm_share), ("ep all-to-all", lc * sched["layer_ep_s"] * comm_share),
            ("host", lc * sched["layer_host_s"] * share + sched["p2p_host_s"] * per_op),
            ("pp send/recv", sched["p2p_comm_s"] * per_op)]


def _dep(op: Op, stage: int, pp: int, vpp: int) -> tuple[str, int, int, int] | None:
    """(kind, stage, chunk, micro-batch) of the operation ``op`` waits for, None for the very first ones."""
    if op.kind == "F":
        if stage > 0:
            return "F", stage - 1, op.chunk, op.microbatch
        return ("F", pp - 1, op.chunk - 1, op.microbatch) if op.chunk > 0 else None
    if stage < pp - 1:
        return "B", stage + 1, op.chunk, op.microbatch
    if op.chunk < vpp - 1:
        return "B", 0, op.chunk + 1, op.microbatch
    return "F", pp - 1, vpp - 1, op.microbatch


def simulate(sched: dict[str, float], layers: list[float], vpp: int) -> list[list[tuple[Op, float, float]]]:
    """(operation, start s, end s) of every stage under the schedule (module docstring)."""
    pp, m = len(layers), round(sched["microbatches"])
    dur = {(s, k, c): sum(d for _, d in op_parts(sched, layers[s], s, pp, vpp, Op(k, c, 0)))
           for s in range(pp) for k in "FB" for c in range(vpp)}
    end = {"F": np.full((pp, vpp, m), np.nan), "B": np.full((pp, vpp, m), np.nan)}
    orders = [schedule_order(s, pp, vpp, m) for s in range(pp)]
    ptr, free = [0] * pp, [0.0] * pp
    out: list[list[tuple[Op, float, float]]] = [[] for _ in range(pp)]
    remaining = sum(len(o) for o in orders)
    while remaining:
        moved = 0
        for s in range(pp):
            while ptr[s] < len(orders[s]):
                op = orders[s][ptr[s]]
                d = _dep(op, s, pp, vpp)
                ready = 0.0 if d is None else end[d[0]][d[1], d[2], d[3]]
                if np.isnan(ready):
                    break
                start = max(free[s], ready)
                free[s] = start + dur[(s, op.kind, op.chunk)]
                end[op.kind][s, op.chunk, op.microbatch] = free[s]
                out[s].append((op, start, free[s]))
                ptr[s] += 1
                moved += 1
        if not moved:
            raise ValueError("pipeline schedule deadlocked")  # cannot happen for the orders above
        remaining -= moved
    return out


def representative_stages(pp: int) -> list[int]:
    """First, busiest middle (the second) and last pipeline stage."""
    return sorted({0, 1 if pp > 2 else 0, pp - 1})


def _event(name: str, pid: int, stream: str, ts_s: float, dur_s: float, **args: Any) -> dict[str, Any]:
    return {"name": name, "ph": "X", "pid": pid, "tid": STREAMS[stream], "ts": ts_s * US, "dur": dur_s * US,
            "cat": stream, "args": args}


def _tail(est: Any, start_s: float, rank: int) -> list[dict[str, Any]]:
    """Stragglers, exposed DP reduction, ZeRO-3 gathers and the optimizer after the pipeline."""
    bd, out, t = est.breakdown, [], start_s
    for term, stream, name in (("stragglers", "data / sync", "wait for the slowest GPU"),
                               ("dp_comm", "dp comm", "DP gradient reduction / parameter gather (exposed)"),
                               ("zero3_gather", "dp comm", "ZeRO-3 gathers (exposed)"),
                               ("optimizer", "compute", "optimizer step")):
        if bd.get(term, 0.0) > 0:
            out.append(_event(name, rank, stream, t, bd[term], term=term))
            t += bd[term]
    return out


def _meta(rank: int, stage: int, pp: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": rank,
                                  "args": {"name": f"rank {rank} (stage {stage} of {pp})"}},
                                 {"name": "process_sort_index", "ph": "M", "pid": rank, "args": {"sort_index": stage}}]
    out += [{"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": name}}
            for name, tid in STREAMS.items()]
    return out


def step_timeline(est: Any, model_layers: int) -> dict[str, Any]:
    """The Chrome-trace JSON of one predicted step of ``est`` (a
    :class:`~clustertwin.train.estimate.TrainEstimate`) on the representative stages' first ranks."""
    sched, lay = est.schedule, est.layout
    pp, vpp = int(lay["pp"]), int(lay["vpp"])
    layers = stage_layer_counts(est.stage_plan, model_layers)
    runs = simulate(sched, layers, vpp)
    schedule_end = max(r[-1][2] for r in runs)
    pipe = sched["pipe_s"]
    scale = pipe / schedule_end if schedule_end > pipe * (1 + 1e-9) else 1.0
    data = est.breakdown.get("data_stall", 0.0)
    stride = int(lay["tp"]) * int(lay["cp"]) * int(lay["dp"])
    events: list[dict[str, Any]] = []
    for s in representative_stages(pp):
        rank = s * stride
        events += _meta(rank, s, pp)
        events.append(_event("step", rank, "step", 0.0, est.step_time_s, step_time_s=est.step_time_s))
        if data > 0:
            events.append(_event("wait for data", rank, "data / sync", 0.0, data, term="data_stall"))
        for op, start, _ in runs[s]:
            t = data + start * scale
            label = f"{op.kind} mb{op.microbatch}" + (f" c{op.chunk}" if vpp > 1 else "")
            for stream, d in op_parts(sched, layers[s], s, pp, vpp, op):
                if d > 0:
                    events.append(_event(label if stream == "compute" else f"{stream} {label}", rank, stream, t,
                                         d * scale, microbatch=op.microbatch, chunk=op.chunk,
                                         layers=layers[s] / vpp))
                t += d * scale
        events += _tail(est, data + pipe, rank)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"step_time_s": est.step_time_s, "model_pipe_s": pipe, "schedule_pipe_s": schedule_end,
                          "schedule_scale": scale, "schedule": "interleaved 1F1B" if vpp > 1 else "1F1B",
                          "microbatches": round(sched["microbatches"]), "layers_per_stage": layers,
                          "layout": lay, "breakdown": est.breakdown}}
