"""HolisticTraceAnalysis's whole-trace figures, by HTA's own definitions (HTA 0.5, ``hta/analyzers``,
``hta/common/trace_parser.py``, ``hta/utils/utils.py``; MIT licence):

- the GPU events are the kernels, copies and sets (``kernel``, ``gpu_memcpy``, ``gpu_memset``); with two or
  more ``ProfilerStep`` markers only those launched (``correlation``) by a host event that starts before
  the last step's start are kept (HTA drops the last, usually partial, iteration);
- a trace with fractional timestamps (nanosecond resolution) is rounded as HTA rounds it
  (``round_down_time_stamps``: start up to the next microsecond, end down), so a sub-microsecond kernel
  can get a negative length, which HTA keeps;
- intervals are merged as ``merge_kernel_intervals`` does (sort by start; a new group begins when a start
  is later than every earlier end; a group is (min start, max end));
- temporal breakdown (``get_temporal_breakdown``): ``kernel_time`` = end of the last merged group - start
  of the first; ``idle`` = kernel_time - sum of merged lengths; ``compute`` = merged COMPUTATION kernels;
  ``non_compute`` = kernel_time - compute - idle (HTA's kernel types: :func:`~.classify.hta_kernel_type`);
- communication-computation overlap (``get_comm_comp_overlap``): the time both merged sets are active (a
  sweep over their starts and ends) / the merged communication length.
"""

from __future__ import annotations

import math
from typing import Any

from clustertwin.profile.trace import RankTrace

US = 1e-6


def hta_events(trace: RankTrace) -> list[tuple[float, float, str]]:
    """(start, end, HTA kernel type) of the GPU events HTA keeps, rounded as HTA rounds them."""
    gpu = [a for a in trace.activity if a.hta_type]
    names = {s.name for s in trace.steps if s.name.startswith("ProfilerStep")}
    if len(names) >= 2 and trace.launches:
        last_start = max(s.ts for s in trace.steps if s.name.startswith("ProfilerStep"))
        if trace.float_ts:
            last_start = math.ceil(last_start)
        rnd = math.ceil if trace.float_ts else (lambda v: v)
        gpu = [a for a in gpu if rnd(trace.launches.get(a.correlation, last_start)) < last_start]
    if trace.float_ts:
        return [(math.ceil(a.ts), math.floor(a.end), a.hta_type) for a in gpu]
    return [(a.ts, a.end, a.hta_type) for a in gpu]


def hta_merge(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """HTA's ``merge_kernel_intervals``: groups by start, a group's end the max of its ends."""
    out: list[tuple[float, float]] = []
    top = -math.inf
    for s, e in sorted(spans):
        if out and s <= top:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
        top = max(top, e)
    return out


def _both_active(comm: list[tuple[float, float]], comp: list[tuple[float, float]]) -> float:
    """Time during which the running status is 3 (comm +-1, comp +-2), as HTA's sweep counts it."""
    marks = sorted([(s, 1) for s, _ in comm] + [(e, -1) for _, e in comm]
                   + [(s, 2) for s, _ in comp] + [(e, -2) for _, e in comp])
    total, running = 0.0, 0
    for i, (t, d) in enumerate(marks):
        running += d
        if running == 3 and i + 1 < len(marks):
            total += marks[i + 1][0] - t
    return total


def hta_figures(trace: RankTrace) -> dict[str, Any] | None:
    """The temporal breakdown (seconds and shares of ``kernel_time_s``) and the comm-comp overlap ratio;
    None for a trace without GPU events."""
    ev = hta_events(trace)
    if not ev:
        return None
    merged = hta_merge([(s, e) for s, e, _ in ev])
    kernel_time = merged[-1][1] - merged[0][0]
    idle = kernel_time - sum(e - s for s, e in merged)
    comp = hta_merge([(s, e) for s, e, t in ev if t == "COMPUTATION"])
    comm = hta_merge([(s, e) for s, e, t in ev if t == "COMMUNICATION"])
    compute = sum(e - s for s, e in comp)
    comm_len = sum(e - s for s, e in comm)
    overlap = _both_active(comm, comp) / comm_len if comm_len > 0 else None
    non_compute = kernel_time - compute - idle
    share = (lambda v: v / kernel_time) if kernel_time > 0 else (lambda v: 0.0)
    return {"kernel_time_s": kernel_time * US, "idle_time_s": idle * US, "compute_time_s": compute * US,
            "non_compute_time_s": non_compute * US, "idle_share": share(idle),
            "compute_share": share(compute), "non_compute_share": share(non_compute),
            "comm_comp_overlap": overlap}
