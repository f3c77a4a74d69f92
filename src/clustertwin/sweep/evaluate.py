"""Evaluate design points: training (step time, throughput, memory), reliability (expected wall time
with failures and checkpoints) and facility (power, capex, cost per GPU-hour), per point.

Points are grouped by design (model, node, nodes, fabric, topology, precision, global batch): the
cluster spec, its plan and the reliability scenario of each checkpoint choice are built once per design
(and cached per process), and all fixed layouts of a design go through the training model in one
vectorised call (:func:`clustertwin.train.step.evaluate_layouts`). ``auto`` runs the layout search once
per design. Per point, with ``W`` = token budget / tokens per second:

* ``ideal_days = W / 86400``; ``wall_days`` = the analytical expectation of the reliability model
  (:func:`clustertwin.reliability.analytic`) for ``W`` seconds of work under the checkpoint choice. Its
  work-independent terms (failure rates, restart and downtime terms, the Poisson spare-pool probability,
  the cost of one checkpointed period) are computed once per (design, checkpoint choice) as a
  :class:`RunModel`; each point then costs a few float operations, bit-identical to ``analytic``;
* ``energy_mwh = gpus / gpus_per_node x node power kW x wall hours x PUE / 1000`` (the formula of
  :func:`clustertwin.train.scale.time_to_train`, applied to the wall time with failures);
* ``cost_usd = gpus x wall hours x USD per GPU-hour`` (the space's price, else the cluster's TCO per
  GPU-hour from :func:`clustertwin.plan.plan`).

Every function here is deterministic, so any split of the points into batches gives the same rows.
"""

from __future__ import annotations

import contextlib
import functools
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.plan import plan
from clustertwin.reliability import Scenario
from clustertwin.reliability import estimate as reliability_estimate
from clustertwin.reliability.analytic import RunModel
from clustertwin.specs import ClusterSpec, ModelSpec
from clustertwin.specs.loading import build, load
from clustertwin.sweep.schema import COLUMNS
from clustertwin.sweep.space import (
    AUTO,
    DESIGN_AXES,
    CheckpointChoice,
    LayoutChoice,
    SweepSpace,
    axis_indices,
)
from clustertwin.train.layout import RECOMPUTE_CODES, Layouts
from clustertwin.train.params import resolve_params
from clustertwin.train.rules import MESSAGES, RULES, violations
from clustertwin.train.scale import KWH_PER_MWH, facility_pue
from clustertwin.train.search import search
from clustertwin.train.step import evaluate_layouts, hardware
from clustertwin.units import DAY_S, GIB, HOUR_S

TEXT_COLUMNS = tuple(n for n, t, _ in COLUMNS if str(t) == "string")
NUMERIC_COLUMNS = tuple(n for n, _, _ in COLUMNS if n not in TEXT_COLUMNS)
_WORK_PROBE_S = DAY_S
"""Failure-free run length used only to build a design's reliability scenario (the work is replaced per
point; the scenario's rates, restart times and checkpoint interval do not depend on it)."""


@dataclass(frozen=True)
class DesignFacts:
    """What a design's cluster contributes to every point: size, power, price."""

    gpus: int
    gpus_per_node: int
    gpu: str
    node_power_kw: float
    pue: float
    capex_usd: float
    it_power_kw: float
    facility_power_kw: float
    racks: int
    usd_per_gpu_hour: float
    price_complete: bool
    """Every component priced (the space's own price counts as complete)."""


@functools.lru_cache(maxsize=64)
def _base_cluster(base_json: str) -> dict[str, Any]:
    spec = load(ClusterSpec, json.loads(base_json), kind="cluster")
    return spec.model_dump(mode="json", exclude_none=True)


@functools.lru_cache(maxsize=4096)
def _cluster(base_json: str, node: str, nodes: int, fabric: str, topology: str) -> ClusterSpec:
    data = _base_cluster(base_json)
    net = {k: v for k, v in (data.get("network") or {}).items() if k not in ("fabric", "switch", "torus_dims",
                                                                                "dragonfly_groups")}
    net.update(fabric=fabric, topology=topology)
    spec = {k: v for k, v in data.items() if k not in ("id", "name", "gpus", "node", "nodes", "network",
                                                      "source", "notes")}
    spec.update(name=f"{node}x{nodes}-{fabric}-{topology}", node=node, nodes=nodes, network=net)
    return build(ClusterSpec, spec)


@functools.lru_cache(maxsize=64)
def _model(model_id: str) -> ModelSpec:
    return load(ModelSpec, model_id, kind="model")


@functools.lru_cache(maxsize=4096)
def _facts(cluster: ClusterSpec, usd_per_gpu_hour: float | None) -> DesignFacts:
    p = plan(cluster)
    f = p.facility
    node = cluster.node
    price = f.tco.usd_per_gpu_hour if usd_per_gpu_hour is None else usd_per_gpu_hour
    return DesignFacts(gpus=cluster.total_gpus, gpus_per_node=node.gpus, gpu=str(node.gpu.id or node.gpu.name),
                       node_power_kw=node.system_power_kw, pue=facility_pue(cluster),
                       capex_usd=f.capex.total_usd, it_power_kw=f.power.total_kw,
                       facility_power_kw=f.energy.facility_kw, racks=f.racks.total_racks,
                       usd_per_gpu_hour=price,
                       price_complete=bool(f.tco.complete) or usd_per_gpu_hour is not None)


@functools.lru_cache(maxsize=4096)
def _scenario(cluster: ClusterSpec, model: ModelSpec, ck: CheckpointChoice) -> tuple[Scenario, int]:
    res = reliability_estimate(cluster, cluster.total_gpus, model=model, ideal_time_s=_WORK_PROBE_S,
                               interval_s=ck.interval_s, async_checkpoint=ck.async_checkpoint, policy=ck.policy,
                               hot_spares=ck.hot_spares, trials=0)
    return res.scenario, res.hot_spares


@functools.lru_cache(maxsize=4096)
def _auto_layout(model: ModelSpec, cluster: ClusterSpec, global_batch: int, precision: str) -> LayoutChoice | str:
    """The search's best fitting layout, or the reason none fits."""
    res = search(model, cluster, global_batch=global_batch, precision=precision, top=1)
    best = res.best
    if best is None:
        return f"layout search: no fitting layout ({res.no_fit_reason})"
    lay = best.layout
    return LayoutChoice(tp=lay["tp"], pp=lay["pp"], cp=lay["cp"], ep=lay["ep"], vpp=lay["vpp"],
                        micro_batch=lay["micro_batch"], recompute=lay["recompute"], zero=lay["zero"],
                        sequence_parallel=bool(lay["sequence_parallel"]))


def _empty(n: int) -> dict[str, Any]:
    cols: dict[str, Any] = {name: np.full(n, np.nan) for name in NUMERIC_COLUMNS}
    cols.update({name: [None] * n for name in TEXT_COLUMNS})
    return cols


def _set_text(cols: dict[str, Any], name: str, rows: np.ndarray, value: str | None) -> None:
    col = cols[name]
    for r in rows.tolist():
        col[r] = value


def _layout_arrays(choices: list[LayoutChoice], gpus: int) -> tuple[Layouts, np.ndarray]:
    """Layouts (dp = gpus / (tp pp cp)) and a mask of choices whose degrees do not divide the GPUs."""
    def col(f):
        return np.array([f(c) for c in choices], dtype=np.int64)

    tp, pp, cp = col(lambda c: c.tp), col(lambda c: c.pp), col(lambda c: c.cp)
    model_parallel = tp * pp * cp
    bad = (gpus % model_parallel) != 0
    dp = np.maximum(gpus // model_parallel, 1)
    lay = Layouts(tp, pp, dp, cp, col(lambda c: c.ep), col(lambda c: c.vpp), col(lambda c: c.micro_batch),
                  col(lambda c: RECOMPUTE_CODES[c.recompute]), col(lambda c: c.zero), col(lambda c: int(c.sp)))
    return lay, bad


def _evaluate_layouts(space: SweepSpace, model: ModelSpec, cluster: ClusterSpec, precision: str,
                      global_batch: int, choices: list[LayoutChoice]) -> dict[str, Any]:
    """Per-choice training results: arrays of step time, tokens/s, MFU, memory, fits, dp and a reason."""
    n = len(choices)
    gpus = cluster.total_gpus
    lay, bad_split = _layout_arrays(choices, gpus)
    reason: list[str | None] = [None] * n
    for i in np.flatnonzero(bad_split).tolist():
        c = choices[i]
        reason[i] = f"tp x pp x cp = {c.tp * c.pp * c.cp} does not divide {gpus} GPUs"
    viol = violations(model, lay, global_batch, cluster.node.gpus)
    bad = bad_split.copy()
    for rule in RULES:
        mask = np.asarray(viol[rule], dtype=bool).reshape(-1) & ~bad
        if mask.shape[0] != n:
            mask = np.broadcast_to(mask, (n,)) & ~bad
        for i in np.flatnonzero(mask).tolist():
            reason[i] = MESSAGES[rule]
        bad |= mask
    res = {k: np.full(n, np.nan) for k in ("step_time_s", "tokens_per_s", "mfu", "memory_gib_per_gpu", "fits")}
    res["dp"] = lay.dp.astype(np.float64)
    ok = np.flatnonzero(~bad)
    if len(ok):
        out = evaluate_layouts(model, cluster, lay.take(ok), global_batch, precision, resolve_params(), None)
        for key in ("step_time_s", "tokens_per_s", "mfu"):
            res[key][ok] = np.asarray(getattr(out, key), dtype=np.float64)
        res["memory_gib_per_gpu"][ok] = np.asarray(out.memory_total_bytes, dtype=np.float64) / GIB
        res["fits"][ok] = np.asarray(out.fits, dtype=np.float64)
    res["reason"] = reason
    return res


def _design_values(space: SweepSpace, ax: dict[str, np.ndarray], row: int) -> dict[str, Any]:
    return {a: getattr(space, a)[int(ax[a][row])] for a in DESIGN_AXES}


def _evaluate_design(space: SweepSpace, base_json: str, ax: dict[str, np.ndarray], rows: np.ndarray,
                     cols: dict[str, Any]) -> None:
    d = _design_values(space, ax, int(rows[0]))
    for name in ("model", "node", "fabric", "topology", "precision"):
        _set_text(cols, name, rows, str(d[name]))
    cols["nodes"][rows] = d["nodes"]
    cols["global_batch"][rows] = d["global_batch"]
    lay_idx, ck_idx = ax["layout"][rows], ax["checkpoint"][rows]
    for r, li, ci in zip(rows.tolist(), lay_idx.tolist(), ck_idx.tolist(), strict=True):
        choice = space.layout[li]
        cols["layout"][r] = AUTO if choice == AUTO else choice.label
        ck = space.checkpoint[ci]
        cols["checkpoint"][r] = ck.label
        cols["checkpoint_policy"][r] = ck.policy
    cols["async_checkpoint"][rows] = [float(space.checkpoint[ci].async_checkpoint) for ci in ck_idx.tolist()]
    try:
        cluster = _cluster(base_json, d["node"], int(d["nodes"]), d["fabric"], d["topology"])
        model = _model(d["model"])
        facts = _facts(cluster, space.usd_per_gpu_hour)
        hardware(cluster, d["precision"], resolve_params())  # the GPU must support the precision
    except SpecError as e:
        _set_text(cols, "status", rows, "invalid_design")
        _set_text(cols, "reason", rows, str(e))
        return
    cols["gpus"][rows] = facts.gpus
    _set_text(cols, "gpu", rows, facts.gpu)
    for name in ("capex_usd", "it_power_kw", "facility_power_kw", "racks", "pue", "usd_per_gpu_hour",
                 "price_complete"):
        cols[name][rows] = getattr(facts, name)

    # training: every distinct layout choice of the group once, fixed ones in one vectorised call
    used = sorted(set(lay_idx.tolist()))
    chosen: dict[int, LayoutChoice] = {}
    layout_reason: dict[int, str] = {}
    for li in used:
        c = space.layout[li]
        if c == AUTO:
            found = _auto_layout(model, cluster, int(d["global_batch"]), str(d["precision"]))
            if isinstance(found, str):
                layout_reason[li] = found
                continue
            c = found
        chosen[li] = c
    keys = sorted(chosen)
    per = _evaluate_layouts(space, model, cluster, str(d["precision"]), int(d["global_batch"]),
                            [chosen[k] for k in keys]) if keys else None
    pos = {li: i for i, li in enumerate(keys)}
    ok_rows: list[np.ndarray] = []

    # per layout choice, all its rows at once; reliability per (layout, checkpoint) group of rows
    for li in used:
        lrows = rows[lay_idx == li]
        if li in layout_reason:
            _set_text(cols, "status", lrows, "invalid_layout")
            _set_text(cols, "reason", lrows, layout_reason[li])
            continue
        c, i = chosen[li], pos[li]
        assert per is not None
        for name, value in (("tp", c.tp), ("pp", c.pp), ("cp", c.cp), ("ep", c.ep), ("vpp", c.vpp),
                            ("micro_batch", c.micro_batch), ("zero", c.zero), ("sequence_parallel", float(c.sp)),
                            ("dp", per["dp"][i])):
            cols[name][lrows] = value
        _set_text(cols, "recompute", lrows, c.recompute)
        if per["reason"][i] is not None:
            _set_text(cols, "status", lrows, "invalid_layout")
            _set_text(cols, "reason", lrows, per["reason"][i])
            continue
        for name in ("step_time_s", "tokens_per_s", "mfu", "memory_gib_per_gpu"):
            cols[name][lrows] = per[name][i]
        if not per["fits"][i]:
            _set_text(cols, "status", lrows, "out_of_memory")
            _set_text(cols, "reason", lrows, f"needs {per['memory_gib_per_gpu'][i]:.1f} GiB per GPU")
            continue
        ok_rows.append(lrows)
    if not ok_rows:
        return
    ok = np.concatenate(ok_rows)
    ok_ck = ax["checkpoint"][ok]
    for ci in np.unique(ok_ck).tolist():
        _reliability_and_cost(space, cluster, model, facts, space.checkpoint[ci], ok[ok_ck == ci], cols)


@functools.lru_cache(maxsize=4096)
def _run_model(cluster: ClusterSpec, model: ModelSpec, ck: CheckpointChoice) -> tuple[RunModel, Scenario, int]:
    """A design's reliability under one checkpoint choice, built once per process."""
    scn, spares = _scenario(cluster, model, ck)
    return RunModel.of(scn), scn, spares


def _reliability_and_cost(space: SweepSpace, cluster: ClusterSpec, model: ModelSpec, facts: DesignFacts,
                          ck: CheckpointChoice, rows: np.ndarray, cols: dict[str, Any]) -> None:
    """Reliability, energy and cost of the ``rows`` (all of one design and checkpoint choice, training done)."""
    try:
        run, scn, spares = _run_model(cluster, model, ck)
    except SpecError as e:
        _set_text(cols, "status", rows, "invalid_checkpoint")
        _set_text(cols, "reason", rows, str(e))
        return
    work = space.tokens / cols["tokens_per_s"][rows]
    out = np.array([run.wall(w) for w in work.tolist()], dtype=np.float64).reshape(-1, 3)
    wall_s = out[:, 0]
    wall_h = wall_s / HOUR_S
    gpu_hours = facts.gpus * wall_h
    _set_text(cols, "status", rows, "ok")
    cols["ideal_days"][rows] = work / DAY_S
    cols["wall_days"][rows] = wall_s / DAY_S
    cols["ettr"][rows] = out[:, 1]
    cols["interruptions"][rows] = out[:, 2]
    cols["checkpoint_interval_s"][rows] = scn.interval_s
    cols["hot_spares"][rows] = spares if ck.policy == "spares" else np.nan
    cols["gpu_hours"][rows] = gpu_hours
    cols["energy_mwh"][rows] = (facts.gpus / facts.gpus_per_node * facts.node_power_kw * wall_h * facts.pue
                                / KWH_PER_MWH)
    cols["cost_usd"][rows] = gpu_hours * facts.usd_per_gpu_hour


def preload(space: SweepSpace) -> None:
    """Parse the catalog, the base cluster and the space's models into this process's caches (a process
    pool forked afterwards inherits them instead of parsing them once per worker)."""
    with contextlib.suppress(SpecError):  # a bad base or model is reported per point as invalid_design
        _base_cluster(json.dumps(space.base, sort_keys=True))
    for m in space.model:
        with contextlib.suppress(SpecError):
            _model(str(m))


def evaluate_points(space: SweepSpace, ids: np.ndarray) -> dict[str, Any]:
    """Result columns (see :mod:`clustertwin.sweep.schema`) of the points ``ids``, in that order:
    numeric columns as float64 arrays (NaN = null), text columns as lists."""
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    cols = _empty(n)
    cols["point_id"][:] = ids
    if n == 0:
        return cols
    ax = axis_indices(space, ids)
    design_shape = space.shape[:len(DESIGN_AXES)]
    design = np.ravel_multi_index([ax[a] for a in DESIGN_AXES], design_shape)
    order = np.argsort(design, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(design[order]) != 0])
    base_json = json.dumps(space.base, sort_keys=True)
    for rows in np.split(order, starts[1:]):
        _evaluate_design(space, base_json, ax, rows, cols)
    return cols

