"""Per-step breakdown of one rank: every instant of the step window counted once.

For the window ``W = [start, end)`` of a step (``ProfilerStep#N`` on the host, or a named range), with
``C`` the union of compute intervals, ``K_g`` the union of communication intervals of group kind ``g``,
``M`` the copies and ``B = C ∪ K ∪ M`` the busy set (all clipped to W):

- ``wall_s = |W|``, ``gpu_busy_s = |B|``, ``compute_s = |C|`` split by class in priority order
  (:data:`~.classify.COMPUTE_KEYS`: an instant under a GEMM and an element-wise kernel counts as GEMM);
- ``comm_s = |K|``; ``exposed_comm_s = |K \\ C|``, split by kind in the order of
  :data:`~.classify.COMM_KINDS`; ``overlapped_comm_s = comm_s - exposed_comm_s``;
- ``memcpy_s = |M|``, ``exposed_memcpy_s = |M \\ (C ∪ K)|``;
- ``idle_s = |W \\ B|``, split into ``data_wait_s`` (idle while the host is in the data loader),
  ``rank_wait_s`` (idle while the host blocks in a synchronize / collective wait: waiting on other ranks)
  and ``host_bound_s`` (the rest: the device waits for the host to issue work).

So ``wall_s = compute_s + exposed_comm_s + exposed_memcpy_s + idle_s`` exactly. The same terms, in the
twin's names (:data:`clustertwin.train.breakdown.BREAKDOWN_KEYS`), are ``breakdown``: compute (less the
optimizer), optimizer, ``<kind>_comm`` (exposed), host_overhead (host-bound idle and exposed copies),
data_stall and stragglers (rank wait); exposed communication on a group the trace does not name is kept
apart as ``unattributed_comm_s``.
"""

from __future__ import annotations

import bisect
from typing import Any

from clustertwin.profile import classify as cl
from clustertwin.profile import intervals as iv
from clustertwin.profile.trace import Activity, RankTrace, Step

US = 1e-6


class Window:
    """Fast access to the activity of a trace inside a time window (activity sorted by start)."""

    def __init__(self, trace: RankTrace) -> None:
        self.acts = trace.activity
        self.starts = [a.ts for a in self.acts]
        self.max_dur = max((a.end - a.ts for a in self.acts), default=0.0)
        self.data = iv.merge(trace.data_spans)
        self.wait = iv.merge(trace.wait_spans)

    def inside(self, start: float, end: float) -> list[Activity]:
        lo = bisect.bisect_left(self.starts, start - self.max_dur)
        hi = bisect.bisect_left(self.starts, end)
        return [a for a in self.acts[lo:hi] if a.end > start]


def _sets(acts: list[Activity], start: float, end: float) -> tuple[dict[str, iv.Intervals], dict[str, iv.Intervals],
                                                                     iv.Intervals]:
    comp: dict[str, list[tuple[float, float]]] = {k: [] for k in cl.COMPUTE_KEYS}
    comm: dict[str, list[tuple[float, float]]] = {k: [] for k in cl.COMM_KINDS}
    mem: list[tuple[float, float]] = []
    for a in acts:
        span = (max(a.ts, start), min(a.end, end))
        if a.term == "sync":
            continue
        if a.term == "comm":
            comm[a.kind if a.kind in comm else "unknown"].append(span)
        elif a.term == "memcpy":
            mem.append(span)
        else:
            comp[a.term if a.term in comp else "other"].append(span)
    return ({k: iv.merge(v) for k, v in comp.items()}, {k: iv.merge(v) for k, v in comm.items()}, iv.merge(mem))


def step_terms(win: Window, trace: RankTrace, step: Step) -> dict[str, Any]:
    """The terms of one step (seconds; see the module docstring)."""
    start, end = step.ts, step.end
    comp, comm, mem = _sets(win.inside(start, end), start, end)
    covered: iv.Intervals = []
    compute_by: dict[str, float] = {}
    for k in cl.COMPUTE_KEYS:
        compute_by[k] = iv.length(iv.subtract(comp[k], covered)) * US
        covered = iv.union(covered, comp[k])
    compute = covered
    all_comm = iv.union(*comm.values())
    exposed_by: dict[str, float] = {}
    comm_by: dict[str, float] = {}
    for k in cl.COMM_KINDS:
        comm_by[k] = iv.length(comm[k]) * US
        exposed_by[k] = iv.length(iv.subtract(comm[k], covered)) * US
        covered = iv.union(covered, comm[k])
    exposed_mem = iv.length(iv.subtract(mem, covered)) * US
    busy = iv.union(covered, mem)
    idle = iv.subtract([(start, end)], busy)
    data = iv.intersect(idle, iv.clip(win.data, start, end))
    rest = iv.subtract(idle, data)
    rank_wait = iv.intersect(rest, iv.clip(win.wait, start, end))
    comm_s, exposed_s = iv.length(all_comm) * US, sum(exposed_by.values())
    idle_s, data_s, wait_s = iv.length(idle) * US, iv.length(data) * US, iv.length(rank_wait) * US
    host_s = idle_s - data_s - wait_s
    colls = [c for c in trace.collectives if start <= c.ts < end]
    counts: dict[str, dict[str, float]] = {}
    if colls:
        for c in colls:
            d = counts.setdefault(c.kind, {"count": 0, "bytes": 0})
            d["count"] += 1
            d["bytes"] += c.bytes
    else:
        for a in win.inside(start, end):
            if a.term == "comm" and a.ts >= start:
                d = counts.setdefault(a.kind or "unknown", {"count": 0, "bytes": 0})
                d["count"] += 1
                d["bytes"] += a.bytes
    unattributed = exposed_by["world"] + exposed_by["unknown"]
    breakdown = {
        "compute": sum(compute_by.values()) - compute_by["optimizer"], "optimizer": compute_by["optimizer"],
        "host_overhead": max(host_s, 0.0) + exposed_mem, "data_stall": data_s, "stragglers": wait_s,
        **{f"{k}_comm": exposed_by[k] for k in ("tp", "cp", "ep", "pp", "dp")},
    }
    return {
        "step": step.number, "name": step.name, "start_us": start, "wall_s": (end - start) * US,
        "gpu_busy_s": iv.length(busy) * US, "compute_s": iv.length(compute) * US, "compute_by_class_s": compute_by,
        "comm_s": comm_s, "exposed_comm_s": exposed_s, "overlapped_comm_s": max(comm_s - exposed_s, 0.0),
        "comm_by_kind_s": {k: v for k, v in comm_by.items() if v > 0},
        "exposed_comm_by_kind_s": {k: v for k, v in exposed_by.items() if v > 0},
        "memcpy_s": iv.length(mem) * US, "exposed_memcpy_s": exposed_mem,
        "idle_s": idle_s, "host_bound_s": max(host_s, 0.0), "data_wait_s": data_s, "rank_wait_s": wait_s,
        "unattributed_comm_s": unattributed, "breakdown": breakdown, "collectives": counts,
        "partial": "",
    }


def rank_steps(trace: RankTrace) -> list[dict[str, Any]]:
    """Every step of a rank (none dropped); a step the trace cuts is flagged in ``partial``. With no step
    markers the whole traced span is one step named ``trace``."""
    steps = list(trace.steps)
    if not steps and trace.activity:
        steps = [Step("trace", 0, min(a.ts for a in trace.activity), max(a.end for a in trace.activity))]
    win = Window(trace)
    out = [step_terms(win, trace, s) for s in steps]
    if not steps:
        return out
    first_act = min((a.ts for a in trace.activity), default=steps[0].ts)
    if trace.activity and first_act < steps[0].ts and any(a.end > steps[0].ts for a in win.inside(first_act, steps[0].ts)):
        out[0]["partial"] = "work launched before the step runs into it"
    last = steps[-1]
    tail = [a for a in trace.activity if a.ts < last.end and a.end > last.end]
    if tail:
        out[-1]["partial"] = "device work of the step runs past the end of the trace's step window"
    if out[-1]["partial"] == "" and len(steps) > 1 and out[-1]["gpu_busy_s"] == 0:
        out[-1]["partial"] = "no device work recorded in the step"
    for s, o in zip(steps, out, strict=True):
        if s.end <= s.ts:
            o["partial"] = "empty step window"
    return out
