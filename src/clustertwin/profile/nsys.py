"""Read an Nsight Systems SQLite export (``nsys export --type sqlite report.nsys-rep``) with the standard library.

Tables used (Nsight Systems' export schema; times in nanoseconds on one synchronised clock):

- ``CUPTI_ACTIVITY_KIND_KERNEL`` (``start``, ``end``, ``deviceId``, ``streamId``, ``correlationId``,
  ``demangledName`` or ``shortName`` -> ``StringIds.value``): kernels, classified as the Kineto reader
  classifies them (NCCL kernels are communication, their group kind from the kernel name);
- ``CUPTI_ACTIVITY_KIND_MEMCPY`` / ``CUPTI_ACTIVITY_KIND_MEMSET`` (``start``, ``end``, ``deviceId``,
  ``bytes``): copies and sets;
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` (``start``, ``end``, ``correlationId``, ``nameId``): launch times, and the
  synchronisation calls the host blocks in;
- ``NVTX_EVENTS`` (``start``, ``end``, ``text`` or ``textId`` -> ``StringIds``): the step ranges
  (``ProfilerStep#N`` by default, ranges whose name starts with ``--step-range NAME`` otherwise) and data
  loader ranges.

One file can hold several GPUs: each ``deviceId`` is one rank (the device id as its number), sharing the
file's NVTX ranges. A missing table or column is counted in ``damage``, never raised.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

from clustertwin.profile import classify as cl
from clustertwin.profile.trace import Activity, RankTrace, Step

NS_PER_US = 1e3
STEP_RE = re.compile(r"^ProfilerStep\s*#\s*(\d+)")


def _tables(db: sqlite3.Connection) -> dict[str, set[str]]:
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
    return {n: {c[1] for c in db.execute(f'PRAGMA table_info("{n}")')} for n in names}


def _rows(db: sqlite3.Connection, tables: dict[str, set[str]], table: str, want: list[str],
          damage: dict[str, int]) -> list[tuple[Any, ...]]:
    """``want`` columns of ``table`` (a missing optional column reads as NULL); [] and a count when absent."""
    cols = tables.get(table)
    if cols is None:
        damage[f"table {table} missing"] = damage.get(f"table {table} missing", 0) + 1
        return []
    sel = ", ".join(f'"{c}"' if c in cols else "NULL" for c in want)
    return list(db.execute(f'SELECT {sel} FROM "{table}"'))


def _steps(nvtx: list[tuple[Any, ...]], strings: dict[int, str], step_range: str | None
           ) -> tuple[list[Step], list[tuple[float, float]]]:
    steps: list[Step] = []
    data: list[tuple[float, float]] = []
    for start, end, text, text_id in nvtx:
        name = text if isinstance(text, str) else strings.get(text_id, "")
        if not isinstance(start, int) or not isinstance(end, int) or end < start or not name:
            continue
        ts, te = start / NS_PER_US, end / NS_PER_US
        m = STEP_RE.match(name)
        if (step_range is None and m) or (step_range is not None and name.startswith(step_range)):
            steps.append(Step(name, int(m.group(1)) if m else len(steps), ts, te))
        elif "DataLoader" in name:
            data.append((ts, te))
    steps.sort(key=lambda s: s.ts)
    return steps, data


def _device_activity(db: sqlite3.Connection, tables: dict[str, set[str]], strings: dict[int, str],
                     damage: dict[str, int]) -> dict[int, list[Activity]]:
    out: dict[int, list[Activity]] = {}
    bad = 0
    kern = _rows(db, tables, "CUPTI_ACTIVITY_KIND_KERNEL",
                 ["start", "end", "deviceId", "streamId", "correlationId", "demangledName", "shortName"], damage)
    for start, end, dev, stream, corr, dname, sname in kern:
        name = strings.get(dname) or strings.get(sname) or ""
        if not isinstance(start, int) or not isinstance(end, int) or end < start or not name:
            bad += 1
            continue
        a = Activity(start / NS_PER_US, end / NS_PER_US, "", name, stream=int(stream or 0),
                     correlation=int(corr) if isinstance(corr, int) else -1, hta_type=cl.hta_kernel_type(name))
        if cl.is_device_comm(name):
            a.term, a.kind, a.collective = "comm", cl.kind_from_kernel(name), cl.collective_of(name)
        else:
            a.term = cl.compute_class(name)
        out.setdefault(int(dev or 0), []).append(a)
    for table, label in (("CUPTI_ACTIVITY_KIND_MEMCPY", "Memcpy"), ("CUPTI_ACTIVITY_KIND_MEMSET", "Memset")):
        if table not in tables:
            continue
        for start, end, dev, stream, corr, nbytes in _rows(
                db, tables, table, ["start", "end", "deviceId", "streamId", "correlationId", "bytes"], damage):
            if not isinstance(start, int) or not isinstance(end, int) or end < start:
                bad += 1
                continue
            out.setdefault(int(dev or 0), []).append(Activity(
                start / NS_PER_US, end / NS_PER_US, "memcpy", label, stream=int(stream or 0),
                correlation=int(corr) if isinstance(corr, int) else -1, bytes=int(nbytes or 0), hta_type="MEMORY"))
    if bad:
        damage["device record without start/end or name"] = bad
    return out


def read_nsys(path: Path, *, step_range: str | None = None) -> list[RankTrace]:
    """One :class:`RankTrace` per GPU of the export (a single damaged trace when the file cannot be read)."""
    damage: dict[str, int] = {}
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = _tables(db)
            strings = {i: v for i, v in _rows(db, tables, "StringIds", ["id", "value"], damage)}
            steps, data = _steps(_rows(db, tables, "NVTX_EVENTS", ["start", "end", "text", "textId"], damage),
                                 strings, step_range)
            acts = _device_activity(db, tables, strings, damage)
            runtime = _rows(db, tables, "CUPTI_ACTIVITY_KIND_RUNTIME", ["start", "end", "correlationId", "nameId"],
                            {})
        finally:
            db.close()
    except sqlite3.Error as e:
        t = RankTrace(source=str(path))
        t.damage[f"not a readable Nsight Systems SQLite export ({type(e).__name__})"] += 1
        return [t]
    launches = {c: s / NS_PER_US for s, _e, c, _n in runtime if isinstance(c, int) and isinstance(s, int)}
    waits = [(s / NS_PER_US, e / NS_PER_US) for s, e, _c, n in runtime
             if isinstance(s, int) and isinstance(e, int) and "Synchronize" in strings.get(n, "")]
    out = []
    for dev in sorted(acts) or [0]:
        t = RankTrace(source=f"{path}#gpu{dev}" if len(acts) > 1 else str(path), rank=dev if len(acts) > 1 else None)
        t.steps, t.data_spans, t.wait_spans = list(steps), list(data), list(waits)
        t.activity = sorted(acts.get(dev, []), key=lambda a: a.ts)
        t.launches = launches
        t.damage.update(damage)
        t.event_kinds.update({"kernel": sum(a.term != "memcpy" for a in t.activity),
                              "memcpy": sum(a.term == "memcpy" for a in t.activity), "nvtx step": len(steps)})
        out.append(t)
    return out
