"""The training model's single entry point to collective costs.

Every communication term of the step-time model (TP, CP, EP, PP, DP, ZeRO-3) calls
:func:`collective_time`, which evaluates :func:`clustertwin.comm.collective` (the calibrated NCCL-style
model of the cluster's topology) for the group's size and members per node.

``nbytes`` is nccl-tests' size: the all-reduced tensor, the gathered output, the scattered input, the
data each rank sends in an all-to-all, the message of a send/recv.
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

from clustertwin.comm import collective
from clustertwin.specs.calibration import Calibration
from clustertwin.specs.cluster import ClusterSpec

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")

#: message sizes (bytes) at which the collective model is sampled once per group shape; between grid
#: points time is linear in size, as within one (algorithm, protocol) candidate of an alpha-beta model
GRID_BYTES = 2.0 ** np.arange(0.0, 44.25, 0.25)
_GRID_LIST: list[float] = GRID_BYTES.tolist()
_CACHE: dict[tuple, np.ndarray] = {}
#: the same grid times as Python floats, for one-point interpolation (:func:`_interp_one`)
_LIST_CACHE: dict[int, tuple[np.ndarray, list[float]]] = {}
_CACHE_LIMIT = 4096
#: object id -> (the object, its value key): hashing a spec walks all its fields, so each object is
#: hashed once; equal specs built separately (every validation case loads its own) share grid entries
_VALUE_KEYS: dict[int, tuple[object, int]] = {}


def _value_key(spec: object) -> int:
    if spec is None:
        return 0
    hit = _VALUE_KEYS.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    try:
        key = hash(spec)
    except TypeError:  # a spec with list-valued fields: by its JSON form
        key = hash(spec.model_dump_json())  # type: ignore[attr-defined]
    if len(_VALUE_KEYS) >= _CACHE_LIMIT:
        _VALUE_KEYS.clear()
    _VALUE_KEYS[id(spec)] = (spec, key)
    return key


def unique_pairs(a: np.ndarray, b: np.ndarray) -> list[tuple[int, int]]:
    """Distinct (a, b) pairs of two non-negative int arrays, via one 1-D ``np.unique`` of ``a 2^32 + b``
    (``np.unique(..., axis=1)`` sorts structured rows, ~20x slower on millions of layouts)."""
    key = np.unique(a.reshape(-1).astype(np.int64) * (1 << 32) + b.reshape(-1).astype(np.int64))
    return [(int(k >> 32), int(k & 0xFFFFFFFF)) for k in key]


def unique_groups(n: np.ndarray, r: np.ndarray, f: np.ndarray) -> list[tuple[int, int, float]]:
    """Distinct (group size, ranks per node, network fraction) triples, via one 1-D ``np.unique`` of
    ``n 2^40 + r 2^16 + index of f`` (sizes and ranks per node below 2^24, fewer than 2^16 fractions)."""
    fu, fi = np.unique(f.reshape(-1), return_inverse=True)
    key = np.unique((n.reshape(-1).astype(np.int64) << 40) + (r.reshape(-1).astype(np.int64) << 16) + fi)
    return [(int(k >> 40), int((k >> 16) & 0xFFFFFF), float(fu[k & 0xFFFF])) for k in key]


def _grid_times(cluster: ClusterSpec, op: str, gpus: int, rpn: int, calibration: Calibration | None,
                net_fraction: float = 1.0, net_hops: int = 0):
    """The collective model on :data:`GRID_BYTES`, cached by the value of the cluster and calibration."""
    key = (_value_key(cluster), op, gpus, rpn, _value_key(calibration), net_fraction, net_hops)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    times = np.asarray(collective(cluster, op, GRID_BYTES, gpus, ranks_per_node=rpn, calibration=calibration,
                                  net_fraction=net_fraction if net_fraction < 1.0 else None,
                                  net_hops=net_hops or None).time_s, dtype=float)
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.clear()
    _CACHE[key] = times
    return times


_SLOPE_DX = GRID_BYTES[-1] - GRID_BYTES[-2]


def _interp(x: np.ndarray, times: np.ndarray) -> np.ndarray:
    y = np.interp(x, GRID_BYTES, times)
    if x.size and x.max() > GRID_BYTES[-1]:
        slope = (times[-1] - times[-2]) / _SLOPE_DX
        y = np.where(x > GRID_BYTES[-1], times[-1] + (x - GRID_BYTES[-1]) * slope, y)
    return y


def _interp_one(x: float, times: np.ndarray) -> float:
    """``np.interp(x, GRID_BYTES, times)`` of one point inside the grid, with numpy's arithmetic (slope
    ``(t[j+1] - t[j]) / (g[j+1] - g[j])`` times ``x - g[j]`` plus ``t[j]``; exact grid points return ``t[j]``)
    on Python floats, without numpy's per-call overhead."""
    if not _GRID_LIST[0] < x < _GRID_LIST[-1]:  # the ends, and NaN: numpy itself
        return float(np.interp(x, GRID_BYTES, times))
    hit = _LIST_CACHE.get(id(times))
    if hit is None or hit[0] is not times:
        if len(_LIST_CACHE) >= _CACHE_LIMIT:
            _LIST_CACHE.clear()
        hit = _LIST_CACHE[id(times)] = (times, times.tolist())
    t, g = hit[1], _GRID_LIST
    j = bisect_right(g, x) - 1
    if g[j] == x:
        return t[j]
    slope = (t[j + 1] - t[j]) / (g[j + 1] - g[j])
    y = slope * (x - g[j]) + t[j]
    if y != y:  # NaN one way: the other (as numpy)
        y = slope * (x - g[j + 1]) + t[j + 1]
        if y != y and t[j] == t[j + 1]:
            y = t[j]
    return y


def _fraction_key(f) -> float:
    """Net fractions are cached to 3 decimals (a 0.1% bandwidth difference is below the model's accuracy)."""
    return min(1.0, max(round(float(f), 3), 1e-3))


def _pack(f, hops):
    """One float per (net fraction, switch hops) pair: ``2 hops + f`` with ``f`` in (0, 1] (decoded by
    :func:`_unpack`), so the distinct-group search keys on one value."""
    return 2.0 * np.asarray(hops, dtype=float) + f


def _unpack(code: float) -> tuple[float, int]:
    hops = max(0, int(np.ceil(code / 2.0 - 1e-9)) - 1)
    return round(code - 2.0 * hops, 3), hops


def collective_time(cluster: ClusterSpec, op: str, nbytes, gpus, ranks_per_node,
                    calibration: Calibration | None = None, net_fraction=None, net_hops=None):
    """Seconds for collective ``op`` of ``nbytes`` over ``gpus`` ranks, ``ranks_per_node`` of them per
    node (numpy arrays broadcast). Groups of one rank cost nothing. ``net_fraction`` (scalar or array,
    None = 1): the group's share of injection bandwidth under concurrent traffic
    (:mod:`clustertwin.train.topology_comm`), passed to :func:`clustertwin.comm.collective`; ``net_hops``
    (scalar or int array, None/0 = the contiguous span's): the group's switch hops under the placement.

    The collective model is sampled once per (cluster, op, group size, ranks per node) on
    :data:`GRID_BYTES` and interpolated linearly in size (extrapolated with the last slope beyond)."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op}")
    if net_fraction is None:
        net_fraction = 1.0
    if net_hops is None:
        net_hops = 0
    if not isinstance(nbytes, np.ndarray) and not isinstance(gpus, np.ndarray) and \
            not isinstance(ranks_per_node, np.ndarray) and not isinstance(net_fraction, np.ndarray) and \
            not isinstance(net_hops, np.ndarray):
        g = int(gpus)
        if g <= 1:
            return 0.0
        rpn = min(max(int(ranks_per_node), 1), g)
        times = _grid_times(cluster, op, g, rpn, calibration, _fraction_key(net_fraction), int(net_hops))
        x = float(nbytes)
        if x > GRID_BYTES[-1]:
            return float(times[-1] + (x - GRID_BYTES[-1]) * (times[-1] - times[-2]) / _SLOPE_DX)
        return _interp_one(x, times)
    nb, n, r, fr = np.broadcast_arrays(np.asarray(nbytes, dtype=float), np.asarray(gpus, dtype=np.int64),
                                       np.asarray(ranks_per_node, dtype=np.int64),
                                       _pack(np.clip(np.round(np.asarray(net_fraction, dtype=float), 3), 1e-3, 1.0),
                                             np.maximum(np.asarray(net_hops), 0)))
    out = np.zeros(nb.shape)
    if out.size == 0:
        return out
    r = np.minimum(np.maximum(r, 1), np.maximum(n, 1))
    if n.size <= 8:
        keys = sorted({(int(a), int(b), float(c)) for a, b, c in zip(n.flat, r.flat, fr.flat, strict=True)})
    else:
        keys = unique_groups(n, r, fr)
    single = len(keys) == 1
    for g, rpn, f in keys:
        if g <= 1:
            continue
        times = _grid_times(cluster, op, g, rpn, calibration, *_unpack(f))
        if single:
            out = _interp(nb, times)
        else:
            sel = (n == g) & (r == rpn) & (fr == f)
            out[sel] = _interp(nb[sel], times)
    return out
