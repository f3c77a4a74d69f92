"""Read a PyTorch profiler (Kineto) trace: ``.json`` or ``.json.gz``, one file per rank, streamed.

The events are read one at a time (``ijson`` with its C backend when installed; the standard ``json``
module otherwise, which holds the whole file) and reduced at once to a :class:`~.trace.RankTrace`, so
the memory used grows with the kept intervals, not with the file. The top-level keys before
``traceEvents`` (``distributedInfo`` with its ``pg_config``, ``baseTimeNanoseconds``) are read first.

Nothing in a damaged file raises: a truncated gzip stream or JSON document keeps the events read before
the break and counts the break; events that are not objects, complete events without a numeric ``ts`` or
``dur``, and event categories the reader does not know are counted by cause in ``RankTrace.damage`` and
``RankTrace.event_kinds``.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from clustertwin.profile import classify as cl
from clustertwin.profile.hostops import build_cpu_activity, finish_collectives
from clustertwin.profile.trace import Activity, Collective, RankTrace, Step

GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "mtia_ccp_events"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver", "runtime", "driver"})
HOST_CATS = frozenset({"cpu_op", "user_annotation", "python_function", "cpu_instant_event"})
KNOWN_CATS = GPU_CATS | RUNTIME_CATS | HOST_CATS | frozenset(
    {"gpu_user_annotation", "ac2g", "fwdbwd", "async_cpu_to_gpu", "cuda_sync", "cuda_profiler_range", "Trace",
     "overhead", "flow", "python_function", "Mtia", "mtia_runtime", ""})
STEP_RE = re.compile(r"^ProfilerStep\s*#\s*(\d+)")
_DTYPE_BYTES = {"float": 4, "float32": 4, "int": 4, "int32": 4, "bfloat16": 2, "half": 2, "float16": 2,
                "double": 8, "float64": 8, "long": 8, "int64": 8, "byte": 1, "char": 1, "int8": 1, "uint8": 1,
                "bool": 1, "short": 2, "int16": 2, "c10::bfloat16": 2, "c10::half": 2, "float8_e4m3fn": 1,
                "float8_e5m2": 1}
_ARRAY = "\0array"
READ_ERRORS = (OSError, EOFError, zlib.error, ValueError, UnicodeDecodeError)


def dtype_bytes(dtype: Any) -> int:
    """Bytes of one element of a trace's dtype name (``Float``, ``BFloat16``, ``c10::Half``; 0 when unknown)."""
    return _DTYPE_BYTES.get(str(dtype).lower().replace("scalartype.", ""), 0)


def _open(path: Path) -> BinaryIO:
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gz else open(path, "rb")  # type: ignore[return-value]


def _ijson() -> Any:
    try:
        import ijson
    except ImportError:
        return None
    return ijson


def streaming_available() -> bool:
    """Whether ``ijson`` is installed (the ``profile`` extra): files are streamed, not read whole."""
    return _ijson() is not None


def _header(path: Path, ijson: Any, trace: RankTrace) -> dict[str, Any]:
    """Top-level keys before ``traceEvents`` (streamed: stops at the event list)."""
    meta: dict[str, Any] = {}
    try:
        with _open(path) as f:
            builder, key = None, None
            for prefix, event, value in ijson.parse(f, use_float=True):
                if prefix == "" and event == "start_array":  # the Chrome trace format's bare event array
                    meta[_ARRAY] = True
                    break
                if prefix == "" and event == "map_key":
                    key = value
                    if key == "traceEvents":
                        break
                    builder = ijson.ObjectBuilder()
                    continue
                if key is None or builder is None:
                    continue
                builder.event(event, value)
                if prefix == key and event not in ("start_map", "start_array", "map_key"):
                    meta[key] = builder.value
                    builder = None
    except READ_ERRORS as e:
        trace.damage[f"header unreadable ({type(e).__name__})"] += 1
    except Exception as e:  # ijson's own errors (IncompleteJSONError, JSONError)
        trace.damage[f"header unreadable ({type(e).__name__})"] += 1
    return meta


def _events(path: Path, trace: RankTrace, stream: bool) -> tuple[dict[str, Any], Iterator[Any]]:
    ijson = _ijson() if stream else None
    if ijson is not None:
        meta = _header(path, ijson, trace)

        def gen() -> Iterator[Any]:
            with _open(path) as f:
                yield from ijson.items(f, "item" if meta.pop(_ARRAY, False) else "traceEvents.item", use_float=True)
        return meta, gen()
    raw, cut = _read_all(path)
    try:
        doc = json.loads(raw)
    except ValueError as e:
        return _salvage(raw.decode("utf-8", "replace"), type(cut or e).__name__)
    if cut is not None:
        raise cut
    if isinstance(doc, list):
        return {}, iter(doc)
    if not isinstance(doc, dict):
        raise ValueError("top level is not an object")
    events = doc.pop("traceEvents", [])
    return doc, iter(events if isinstance(events, list) else [])


def _read_all(path: Path) -> tuple[bytes, Exception | None]:
    """The file's bytes (decompressed), read in chunks so a truncated gzip stream keeps what came before
    the cut; the error that stopped the read, if any."""
    chunks: list[bytes] = []
    with _open(path) as f:
        try:
            while chunk := f.read(1 << 20):
                chunks.append(chunk)
        except (EOFError, zlib.error, OSError) as e:
            return b"".join(chunks), e
    return b"".join(chunks), None


def _salvage(text: str, cause: str) -> tuple[dict[str, Any], Iterator[Any]]:
    """The events of a document cut short, without ``ijson``: the header before ``traceEvents`` (closed
    with ``}``) and each complete event of the array, decoded one at a time with ``raw_decode``; the
    iterator raises at the break so the reader counts it."""
    decoder = json.JSONDecoder()
    key = text.find('"traceEvents"')
    meta: dict[str, Any] = {}
    if key >= 0:
        try:
            head = json.loads(text[:key].rstrip().rstrip(",") + "}")
            meta = head if isinstance(head, dict) else {}
        except ValueError:
            meta = {}
        start = text.find("[", key)
    else:
        start = text.find("[")
    if start < 0:
        raise ValueError("no traceEvents array")

    def gen() -> Iterator[Any]:
        i = start + 1
        n = len(text)
        while True:
            while i < n and text[i] in " \t\r\n,":
                i += 1
            if i >= n or text[i] == "]":
                break
            try:
                item, i = decoder.raw_decode(text, i)
            except ValueError:
                break
            yield item
        raise ValueError(f"document cut short ({cause})")
    return meta, gen()


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v == v else None


def _apply_meta(trace: RankTrace, meta: dict[str, Any]) -> None:
    info = meta.get("distributedInfo")
    if isinstance(info, dict):
        trace.rank = info.get("rank") if isinstance(info.get("rank"), int) else None
        trace.world_size = info.get("world_size") if isinstance(info.get("world_size"), int) else None
        trace.backend = str(info.get("backend", ""))
        for pg in info.get("pg_config") or []:
            if isinstance(pg, dict) and "pg_name" in pg:
                desc = str(pg.get("pg_desc", ""))
                ranks = pg.get("ranks") if isinstance(pg.get("ranks"), list) else []
                kind = cl.kind_from_desc(desc) or ("world" if trace.world_size and len(ranks) == trace.world_size
                                                   else "unknown")
                trace.groups[str(pg["pg_name"])] = {"desc": desc, "ranks": ranks, "kind": kind}
    base = meta.get("baseTimeNanoseconds")
    trace.base_time_ns = int(base) if isinstance(base, int | float) else None


def comm_args(trace: RankTrace, args: dict[str, Any]) -> tuple[str, str, int, int, str]:
    """(kind, collective, bytes, group size, pg name) of a collective's ``record_param_comms`` arguments."""
    desc = str(args.get("Process Group Description", ""))
    pg = str(args.get("Process Group Name", ""))
    kind = cl.kind_from_desc(desc) if desc else None
    if kind is None and pg in trace.groups:
        kind = trace.groups[pg]["kind"]
    nelems = args.get("In msg nelems") or args.get("Out msg nelems") or 0
    size = dtype_bytes(args.get("dtype", "")) * int(nelems) if isinstance(nelems, int) else 0
    group = args.get("Group size") if isinstance(args.get("Group size"), int) else 0
    return kind or "", cl.collective_of(str(args.get("Collective name", ""))), size, group, pg


def dims_elems(args: dict[str, Any]) -> int:
    """Elements of the first tensor input from ``Input Dims`` (record_shapes; a tensor list's first tensor)."""
    dims = args.get("Input Dims")
    if not isinstance(dims, list) or not dims:
        return 0
    first = dims[0]
    while isinstance(first, list) and first and isinstance(first[0], list):
        first = first[0]
    if not isinstance(first, list):
        return 0
    n = 1
    for d in first:
        n *= d if isinstance(d, int) else 0
    return n


def _dims_bytes(args: dict[str, Any]) -> int:
    """Bytes of the first tensor input (``Input Dims`` times the size of ``Input type``)."""
    types = args.get("Input type")
    return dims_elems(args) * dtype_bytes(types[0]) if isinstance(types, list) and types else 0


def read_kineto(path: Path, *, step_range: str | None = None, stream: bool = True) -> RankTrace:
    """A :class:`RankTrace` of one Kineto file; ``step_range`` names annotations to use as steps instead of
    ``ProfilerStep#N``; ``stream=False`` (or no ``ijson`` installed) reads the whole document with ``json``."""
    trace = RankTrace(source=str(path))
    try:
        meta, events = _events(path, trace, stream)
    except READ_ERRORS as e:
        trace.damage[f"not a JSON trace ({type(e).__name__})"] += 1
        return trace
    _apply_meta(trace, meta)
    host_ops: list[tuple[float, float, int, str]] = []
    annotations: list[tuple[float, float, int, str]] = []
    gloo: list[tuple[float, float, int, str, int, int]] = []
    seen = 0
    try:
        for e in events:
            seen += 1
            _event(trace, e, step_range, host_ops, annotations, gloo)
    except READ_ERRORS as e:
        trace.damage[f"trace cut short after {seen} events ({type(e).__name__})"] += 1
    except Exception as e:  # ijson.IncompleteJSONError / JSONError: a truncated or malformed document
        trace.damage[f"trace cut short after {seen} events ({type(e).__name__})"] += 1
    trace.steps.sort(key=lambda s: s.ts)
    unique = {(s.name, s.ts): s for s in reversed(trace.steps)}  # one marker as cpu_op and as annotation
    if len(unique) < len(trace.steps):
        trace.damage["step marker recorded twice (kept the first)"] += len(trace.steps) - len(unique)
        trace.steps = sorted(unique.values(), key=lambda s: s.ts)
    gloo_activity = finish_collectives(trace, annotations, gloo)
    if not any(a.hta_type for a in trace.activity) and host_ops:
        trace.cpu_mode = True
        build_cpu_activity(trace, host_ops, {a[3] for a in annotations})
        trace.activity.extend(gloo_activity)
    trace.activity.sort(key=lambda a: a.ts)
    return trace


def _event(trace: RankTrace, e: Any, step_range: str | None, host_ops: list[tuple[float, float, int, str]],
           annotations: list[tuple[float, float, int, str]], gloo: list[tuple[float, float, int, str, int, int]]) -> None:
    if not isinstance(e, dict):
        trace.damage["event not an object"] += 1
        return
    ph, cat = e.get("ph"), e.get("cat")
    cat = cat if isinstance(cat, str) else ""
    if not trace.float_ts and not isinstance(e.get("ts"), int):
        trace.float_ts = True
    if ph != "X":
        trace.event_kinds[f"ph={ph}" if isinstance(ph, str) else "ph missing"] += 1
        return
    trace.event_kinds[cat or "no category"] += 1
    if cat not in KNOWN_CATS:
        trace.damage[f"unknown event category {cat[:40]!r}"] += 1
        return
    ts, dur, name = _num(e.get("ts")), _num(e.get("dur")), e.get("name")
    if ts is None or dur is None or dur < 0 or not isinstance(name, str):
        trace.damage["complete event without numeric ts/dur or name"] += 1
        return
    args = e.get("args") if isinstance(e.get("args"), dict) else {}
    end = ts + dur
    if cat in GPU_CATS:
        corr = args.get("correlation")
        a = Activity(ts, end, "", name, stream=int(args.get("stream", 0) or 0) if isinstance(args.get("stream", 0), int)
                     else 0, correlation=corr if isinstance(corr, int) else -1, hta_type=cl.hta_kernel_type(name))
        if cat == "kernel" and cl.is_device_comm(name):
            a.term = "comm"
            a.kind, a.collective, a.bytes, _, _ = comm_args(trace, args)
            a.collective = a.collective if a.collective != "other" else cl.collective_of(name)
        elif cat != "kernel" or cl.is_memcpy(name):
            a.term = "memcpy"
        else:
            a.term = cl.compute_class(name)
        trace.activity.append(a)
        return
    if cat == "cuda_sync":  # device-side waits: not work, but HTA counts them on their stream
        stream, corr = args.get("stream"), args.get("correlation")
        if isinstance(stream, int) and stream != -1:
            trace.activity.append(Activity(ts, end, "sync", name, stream=stream,
                                           correlation=corr if isinstance(corr, int) else -1,
                                           hta_type=cl.hta_kernel_type(name)))
        return
    tid = e.get("tid") if isinstance(e.get("tid"), int) else -1
    if cat in RUNTIME_CATS:
        corr = args.get("correlation")
        if isinstance(corr, int):
            trace.launches[corr] = ts
        if "Synchronize" in name:
            trace.wait_spans.append((ts, end))
        return
    if cat == "python_function" or cat not in HOST_CATS:
        return
    m = STEP_RE.match(name)
    if (step_range is None and m) or (step_range is not None and name.startswith(step_range)):
        trace.steps.append(Step(name, int(m.group(1)) if m else len(trace.steps), ts, end))
        if step_range is None:
            return
    if "DataLoader" in name:
        trace.data_spans.append((ts, end))
    if name == "record_param_comms":
        kind, coll, size, group, pg = comm_args(trace, args)
        trace.collectives.append(Collective(ts, end, tid, coll, kind, pg, group, size, "param"))
        return
    if name.startswith("gloo:"):
        gloo.append((ts, end, tid, cl.collective_of(name), _dims_bytes(args), dims_elems(args)))
        return
    if name.startswith("c10d::") and cl.collective_of(name) not in ("other", "barrier"):
        trace.collectives.append(Collective(ts, end, tid, cl.collective_of(name), "", "", 0, 0,
                                            dims_elems(args), "c10d"))
    elif "wait" in name.lower() or "barrier" in name.lower():
        trace.wait_spans.append((ts, end))
    if cat == "user_annotation":
        annotations.append((ts, end, tid, name))
    host_ops.append((ts, end, tid, name))
