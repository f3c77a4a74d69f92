"""Vectorised CSV trace readers on pyarrow (optional: ``pip install clustertwin[arrow]``, also in the ``sweep`` extra).

A fast path for large clean files: pyarrow parses the CSV in C++, numpy checks every number at once.
Whenever the file is not clean (a row of the wrong width, a broken quote, a value that is not a number,
out of range or negative, a field over ``parse.MAX_FIELD_CHARS``, bytes that are not UTF-8) the fast path
returns ``None`` and the caller reads the file with the csv reader, so damaged files are counted exactly
as without pyarrow. Reading 1M Helios rows: about 1 s here vs about 7 s with the csv path.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clustertwin.sched import parse
from clustertwin.sched.jobs import Trace, TraceReport, make_jobs

FAST_PATH_MIN_BYTES = 1 << 20
"""Files smaller than this are read by the csv path (the fast path's setup is not worth it)."""


def _table(path: Path, columns: tuple[str, ...]):
    try:
        import pyarrow as pa
        import pyarrow.csv as pcsv
    except ImportError:
        return None
    bad = []

    def invalid(row) -> str:
        bad.append(row)
        return "skip"

    try:
        table = pcsv.read_csv(
            path,
            parse_options=pcsv.ParseOptions(newlines_in_values=False, invalid_row_handler=invalid),
            convert_options=pcsv.ConvertOptions(include_columns=list(columns),
                                                column_types={c: pa.string() for c in columns}),
        )
    except (pa.ArrowInvalid, pa.ArrowKeyError, OSError, KeyError):
        return None
    if bad:
        return None
    return table


def _strings(table, name: str) -> np.ndarray | None:
    import pyarrow.compute as pc

    col = table.column(name)
    if col.null_count or (len(col) and pc.max(pc.utf8_length(col)).as_py() > parse.MAX_FIELD_CHARS):
        return None
    return col.to_numpy(zero_copy_only=False)


def _floats(values: np.ndarray, lo: float, hi: float) -> np.ndarray | None:
    try:
        v = values.astype(np.float64)
    except (ValueError, TypeError):
        return None
    if not np.all(np.isfinite(v)) or np.any(v < lo) or np.any(v > hi):
        return None
    return v


def read_helios(path: Path, max_gpus: float, max_time_s: float) -> Trace | None:
    """Helios ``cluster_log.csv`` on the fast path (see :func:`clustertwin.sched.readers.read_helios` for
    the mapping), or None to use the csv path."""
    if path.stat().st_size < FAST_PATH_MIN_BYTES:
        return None
    cols = ("job_id", "user", "gpu_num", "node_num", "submit_time", "duration")
    table = _table(path, cols)
    if table is None:
        return None
    s = {c: _strings(table, c) for c in cols}
    if any(v is None for v in s.values()):
        return None
    gpus = _floats(s["gpu_num"], 0, max_gpus)
    nodes = _floats(s["node_num"], 0, max_gpus)
    dur = _floats(s["duration"], 0, max_time_s)
    if gpus is None or nodes is None or dur is None or np.any(gpus != np.floor(gpus)):
        return None
    submit = _floats(s["submit_time"], -max_time_s, max_time_s)
    if submit is None:
        try:
            submit = s["submit_time"].astype("datetime64[s]").astype(np.int64).astype(np.float64)
        except ValueError:
            return None
    n = len(gpus)
    rep = TraceReport(path=str(path), format="helios", lines=n)
    keep = gpus > 0
    cpu_only = int(n - keep.sum())
    if cpu_only:
        rep.excluded["cpu-only"] += cpu_only
    g, nd = gpus[keep], nodes[keep]
    multi = nd > 1
    per = np.where(multi, np.ceil(g / np.where(multi, nd, 1)), g)
    units = np.where(multi, nd, 0).astype(np.int64)
    jobs = make_jobs(s["job_id"][keep].tolist(), submit[keep], dur[keep], per, units=units,
                     users=s["user"][keep].tolist(), rebase=True)
    rep.jobs = len(jobs)
    return Trace(jobs, rep)
