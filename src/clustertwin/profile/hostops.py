"""Host-side work of a trace: which group each collective ran on, and on CPU-only traces the host threads'
operators as the device timeline.

Group of a collective, in order: the ``Process Group Description`` / ``Name`` of ``record_param_comms``
(or of the NCCL kernel's own arguments); the innermost enclosing ``record_function`` annotation whose
name is a group description of ``distributedInfo.pg_config`` (gloo records no ``record_param_comms``, so
a training loop names its groups with ``record_function(group.group_desc)``); the NCCL kernel name
(send/recv: pp, all-to-all: ep). A gloo worker's ``gloo:<collective>`` interval is matched to the host
``c10d::`` operator that queued it (same collective and element count, first in first out), which gives
it its group and the host operator its bytes.

CPU-only traces: each host operator's exclusive time (its interval minus its children's) takes the class
of the innermost operator that names one (``aten::addmm`` -> GEMM, ``aten::layer_norm`` -> norm), except
that everything under ``Optimizer.step`` is optimizer, under ``enumerate(DataLoader)`` data loading (a
marker, not device work), and under a ``c10d::`` operator or a region named after a process group
(``record_function(group_desc)``: the host blocked in that group's collective) communication.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict, deque

from clustertwin.profile import classify as cl
from clustertwin.profile.trace import Activity, Collective, RankTrace

_TRANSPARENT = object()


def _innermost(spans: list[tuple[float, float, str]], starts: list[float], ts: float, end: float) -> str | None:
    """Label of the innermost span (latest start) that contains ``[ts, end]``."""
    i = bisect.bisect_right(starts, ts)
    while i > 0:
        i -= 1
        _s, e, label = spans[i]
        if e >= end:
            return label
    return None


def finish_collectives(trace: RankTrace, annotations: list[tuple[float, float, int, str]],
                       gloo: list[tuple[float, float, int, str, int, int]]) -> list[Activity]:
    """Give every collective its group kind and bytes; return the gloo workers' intervals as activity."""
    if any(c.source == "param" for c in trace.collectives):
        trace.collectives = [c for c in trace.collectives if c.source == "param"]
    trace.collectives.sort(key=lambda c: c.ts)
    desc_kind = {g["desc"]: g["kind"] for g in trace.groups.values() if g["desc"]}
    by_tid: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    for ts, end, tid, name in sorted(annotations):
        if name in desc_kind:
            by_tid[tid].append((ts, end, desc_kind[name]))
    starts = {tid: [s[0] for s in spans] for tid, spans in by_tid.items()}
    for c in trace.collectives:
        if not c.kind and c.tid in by_tid:
            c.kind = _innermost(by_tid[c.tid], starts[c.tid], c.ts, c.end) or ""
        if not c.kind:
            c.kind = "unknown"
    queues: dict[tuple[str, int], deque[Collective]] = defaultdict(deque)
    for c in trace.collectives:
        if c.source == "c10d":
            queues[(c.collective, c.elems)].append(c)
    out: list[Activity] = []
    for ts, end, _tid, coll, size, elems in sorted(gloo):
        q = queues.get((coll, elems))
        host = q.popleft() if q and q[0].ts <= ts else None
        if host is not None and not host.bytes:
            host.bytes = size
        if host is None:
            trace.damage["gloo collective without its c10d operator"] += 1
        out.append(Activity(ts, end, "comm", f"gloo:{coll}", kind=host.kind if host else "unknown",
                            collective=coll, bytes=size))
    _attribute_kernels(trace)
    return out


def _attribute_kernels(trace: RankTrace) -> None:
    """Comm kernels without group arguments: the host collective around their launch."""
    spans = [(c.ts, c.end, str(i)) for i, c in enumerate(trace.collectives)]
    starts = [s[0] for s in spans]
    for a in trace.activity:
        if a.term != "comm" or a.kind:
            continue
        launch = trace.launches.get(a.correlation)
        label = _innermost(spans, starts, launch, launch) if launch is not None else None
        if label is not None:
            c = trace.collectives[int(label)]
            a.kind = c.kind
            a.bytes = a.bytes or c.bytes
            a.collective = a.collective if a.collective not in ("", "other") else c.collective
        if not a.kind or a.kind == "unknown":
            a.kind = cl.kind_from_kernel(a.name)


def _label(name: str, parent: object, annotations: set[str], group_kind: dict[str, str]) -> object:
    if parent in ("data", "optimizer") or (isinstance(parent, str) and parent.startswith("comm")):
        return parent
    if name in group_kind:  # a region the loop named after a process group: the host is in its collective
        return f"comm:{group_kind[name]}"
    if "DataLoader" in name:
        return "data"
    if name.startswith("Optimizer."):
        return "optimizer"
    if name.startswith(("c10d::", "nccl:", "gloo:")) or name == "record_param_comms":
        return "comm"
    if name in annotations:
        return parent if parent is not None else _TRANSPARENT
    c = cl.compute_class(name)
    if c == "other" and isinstance(parent, str):
        return parent
    return c


def build_cpu_activity(trace: RankTrace, host_ops: list[tuple[float, float, int, str]],
                       annotations: set[str]) -> None:
    """The main host thread's operators as device activity (CPU-only traces)."""
    main = Counter(op[2] for op in host_ops).most_common(1)[0][0]
    group_kind = {g["desc"]: g["kind"] for g in trace.groups.values() if g["desc"]}
    ops = sorted((op for op in host_ops if op[2] == main), key=lambda o: (o[0], -o[1]))
    pieces: list[tuple[float, float, object]] = []
    stack: list[list[object]] = []  # [end, label, cursor]

    def pop() -> None:
        end, label, cursor = stack.pop()
        pieces.append((cursor, end, label))  # type: ignore[arg-type]
        if stack:
            stack[-1][2] = end

    for ts, end, _tid, name in ops:
        while stack and stack[-1][0] <= ts:  # type: ignore[operator]
            pop()
        parent = stack[-1][1] if stack else None
        if stack:
            pieces.append((stack[-1][2], ts, parent))  # type: ignore[arg-type]
            end = min(end, stack[-1][0])  # type: ignore[type-var]
        stack.append([end, _label(name, None if parent is _TRANSPARENT else parent, annotations, group_kind), ts])
    while stack:
        pop()
    coll = [(c.ts, c.end, c.kind) for c in trace.collectives if c.tid == main]
    starts = [c[0] for c in coll]
    for s, e, label in pieces:
        if e <= s or label is None or label is _TRANSPARENT:
            continue
        if label == "data":
            trace.data_spans.append((s, e))
        elif isinstance(label, str) and label.startswith("comm"):
            kind = label[5:] or _innermost(coll, starts, s, e) or "unknown"
            trace.activity.append(Activity(s, e, "comm", "host collective", kind=kind))
        else:
            trace.activity.append(Activity(s, e, str(label), str(label)))
