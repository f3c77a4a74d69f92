"""The Parquet schema of sweep results: one row per design point, every column documented (the
descriptions are stored as field metadata, so ``pyarrow.parquet.read_schema`` shows them) and the space
that produced the file stored as JSON in the file metadata under ``clustertwin.space``.

Metrics of a point that could not be evaluated (``status`` other than ``ok``) are null; the
performance columns of an ``out_of_memory`` point are filled (what the layout would do with more HBM).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clustertwin import __version__

STATUSES: tuple[str, ...] = ("ok", "out_of_memory", "invalid_layout", "invalid_checkpoint", "invalid_design")
"""Outcome of a point: evaluated; layout exceeds HBM; layout cannot run (rule named in ``reason``);
checkpoint choice impossible on that design; cluster cannot be built or lacks the precision."""

COLUMNS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("point_id", pa.int64(), "flat index of the point in the full grid (C order of the space's axes)"),
    ("model", pa.string(), "model catalog id"),
    ("node", pa.string(), "node catalog id"),
    ("gpu", pa.string(), "GPU catalog id of the node"),
    ("nodes", pa.int32(), "cluster size, nodes"),
    ("gpus", pa.int32(), "cluster size, GPUs (all used by the job)"),
    ("fabric", pa.string(), "scale-out fabric catalog id"),
    ("topology", pa.string(), "network topology"),
    ("precision", pa.string(), "GEMM precision"),
    ("global_batch", pa.int32(), "global batch, sequences"),
    ("layout", pa.string(), "layout choice as written in the space ('auto' or its label)"),
    ("tp", pa.int32(), "tensor-parallel degree"),
    ("pp", pa.int32(), "pipeline-parallel stages"),
    ("dp", pa.int32(), "data-parallel degree (GPUs / (tp pp cp))"),
    ("cp", pa.int32(), "context-parallel degree"),
    ("ep", pa.int32(), "expert-parallel degree"),
    ("vpp", pa.int32(), "virtual pipeline chunks"),
    ("micro_batch", pa.int32(), "sequences per micro-batch"),
    ("recompute", pa.string(), "activation recomputation"),
    ("zero", pa.int32(), "ZeRO stage"),
    ("sequence_parallel", pa.bool_(), "Megatron sequence parallelism"),
    ("checkpoint", pa.string(), "checkpoint choice label (policy, spares, sync/async, interval)"),
    ("checkpoint_policy", pa.string(), "recovery policy: restart, spares, elastic"),
    ("async_checkpoint", pa.bool_(), "asynchronous checkpoints"),
    ("status", pa.string(), "ok, out_of_memory, invalid_layout, invalid_checkpoint, invalid_design"),
    ("reason", pa.string(), "why the point is not ok (null when ok)"),
    ("step_time_s", pa.float64(), "predicted optimizer step time, s"),
    ("tokens_per_s", pa.float64(), "training throughput, tokens/s"),
    ("mfu", pa.float64(), "model FLOPs utilisation"),
    ("memory_gib_per_gpu", pa.float64(), "peak memory per GPU, GiB"),
    ("ideal_days", pa.float64(), "failure-free time to train the token budget, days"),
    ("wall_days", pa.float64(), "expected wall time with failures, checkpoints and restarts, days"),
    ("ettr", pa.float64(), "effective training time ratio (failure-free time / wall time)"),
    ("interruptions", pa.float64(), "expected unplanned interruptions during the run"),
    ("checkpoint_interval_s", pa.float64(), "checkpoint interval used, s of computation"),
    ("hot_spares", pa.int32(), "hot-spare nodes (policy spares)"),
    ("gpu_hours", pa.float64(), "GPUs x wall time, hours"),
    ("energy_mwh", pa.float64(), "facility energy over the wall time (node power x PUE), MWh"),
    ("cost_usd", pa.float64(), "GPU-hours x price per GPU-hour, USD"),
    ("usd_per_gpu_hour", pa.float64(), "price per GPU-hour used for cost (space's, else the cluster's TCO)"),
    ("price_complete", pa.bool_(), "every component of the design has a catalog price (else cost is a lower bound)"),
    ("capex_usd", pa.float64(), "cluster capital cost of the priced items, USD"),
    ("it_power_kw", pa.float64(), "cluster IT power at maximum load, kW"),
    ("facility_power_kw", pa.float64(), "IT power x PUE, kW"),
    ("racks", pa.int32(), "racks (compute, network, storage)"),
    ("pue", pa.float64(), "power usage effectiveness applied to energy"),
)
"""Column name, Arrow type and description, in file order."""

NAMES: tuple[str, ...] = tuple(c[0] for c in COLUMNS)
TYPES: dict[str, pa.DataType] = {c[0]: c[1] for c in COLUMNS}
SPACE_METADATA_KEY = b"clustertwin.space"


Columns = tuple[tuple[str, pa.DataType, str], ...]
"""A results layout: (name, Arrow type, description) per column, in file order."""


def schema(space_json: str | None = None, layout: Columns = COLUMNS) -> pa.Schema:
    """The Arrow schema of a results file (descriptions as field metadata); ``layout``: its columns
    (default the design space's; a cluster space's is
    :data:`clustertwin.sweep.cluster_eval.CLUSTER_COLUMNS`)."""
    fields = [pa.field(n, t, nullable=True, metadata={"description": d}) for n, t, d in layout]
    meta = {b"clustertwin.version": __version__.encode()}
    if space_json is not None:
        meta[SPACE_METADATA_KEY] = space_json.encode()
    return pa.schema(fields, metadata=meta)


def _array(t: pa.DataType, values: Any) -> pa.Array:
    if pa.types.is_floating(t):
        a = np.asarray(values, dtype=np.float64)
        return pa.array(a, type=t, mask=~np.isfinite(a))
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        # evaluators keep every numeric column as float64 with NaN for "no value"
        a = np.asarray(values, dtype=np.float64)
        mask = ~np.isfinite(a)
        filled = np.where(mask, 0.0, a)
        typed = filled.astype(bool) if pa.types.is_boolean(t) else filled.astype(np.int64)
        return pa.array(typed, type=t, mask=mask)
    return pa.array(list(values), type=t)


def to_table(columns: dict[str, Any], space_json: str | None = None, layout: Columns = COLUMNS) -> pa.Table:
    """An Arrow table from evaluator columns: numeric columns as float64 arrays (NaN becomes null, integer
    and boolean columns are cast), text columns as sequences of ``str | None``; ``layout`` as in
    :func:`schema`."""
    missing = [n for n, _, _ in layout if n not in columns]
    if missing:
        raise ValueError(f"result columns missing: {missing}")
    return pa.Table.from_arrays([_array(t, columns[n]) for n, t, _ in layout], schema=schema(space_json, layout))


def write_parquet(table: pa.Table, path: str | Path) -> None:
    """Write results (zstd-compressed, statistics on) for DuckDB, pandas or Arrow to query."""
    pq.write_table(table, str(path), compression="zstd")
