"""Shared pieces of the builders: the switch and its radix, the leaf port split, cabling rules.

Switch: ``cluster.network.switch`` if given, else the catalog switch named by the fabric's
``default_switch``; if that id is missing (or unset) a generic radix-64 switch at the fabric rate is
used (64 ports is the radix of the common 51.2 Tb/s 400G-class switch ASIC generation, e.g. Quantum-2
QM9700 64x400G) and a note says so.

Radix at the fabric rate: a switch whose ports are an integer multiple ``f`` faster than the fabric
splits each port into ``f`` (breakout: 64x800G -> 128x400G); a switch ``f`` times slower gangs ``f``
ports per link. Other ratios are a :class:`~clustertwin.errors.SpecError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.specs import ClusterSpec, SwitchSpec

FALLBACK_RADIX = 64
"""Ports of the generic switch used when the fabric's default switch is not in the catalog."""
TRANSCEIVERS_PER_OPTICAL_LINK = 2
"""One optical module at each end of a fibre link."""
MIN_RADIX = 2
"""A switch needs at least one down- and one up-port."""


@dataclass(frozen=True)
class SwitchChoice:
    """The switch a network is built from, at the fabric's port rate."""

    radix: int
    """Ports at the fabric rate."""
    spec: SwitchSpec
    notes: tuple[str, ...] = ()


def choose_switch(cluster: ClusterSpec) -> SwitchChoice:
    """Switch spec and radix at the fabric rate (see module docstring)."""
    from clustertwin import catalog

    net = cluster.net
    fabric = net.fabric
    notes: list[str] = []
    if net.switch is not None:
        sw = net.switch
    elif fabric.default_switch and fabric.default_switch in catalog.ids("switch"):
        sw = catalog.get("switch", fabric.default_switch)
    else:
        missing = fabric.default_switch or "none"
        sw = SwitchSpec(
            id=f"generic-{FALLBACK_RADIX}x{fabric.gbit_per_s:g}g",
            name=f"generic {FALLBACK_RADIX}-port switch",
            ports=FALLBACK_RADIX,
            port_gbit_per_s=fabric.gbit_per_s,
        )
        notes.append(
            f"default switch '{missing}' of fabric '{fabric.id}' not in catalog: "
            f"assumed a generic {FALLBACK_RADIX}-port {fabric.gbit_per_s:g}G switch"
        )
    ratio = sw.port_gbit_per_s / fabric.gbit_per_s
    if ratio >= 1 and float(ratio).is_integer():
        radix = sw.ports * int(ratio)
        if ratio > 1:
            notes.append(f"switch ports split {int(ratio)}-way: {radix} ports at {fabric.gbit_per_s:g}G")
    elif ratio < 1 and float(1 / ratio).is_integer() and sw.ports // int(1 / ratio) >= MIN_RADIX:
        radix = sw.ports // int(1 / ratio)
        notes.append(f"{int(1 / ratio)} switch ports ganged per {fabric.gbit_per_s:g}G link: radix {radix}")
    else:
        raise SpecError(
            f"switch port rate {sw.port_gbit_per_s:g} Gbit/s does not split into or gang to the fabric "
            f"rate {fabric.gbit_per_s:g} Gbit/s",
            path=("network", "switch"),
        )
    if radix < MIN_RADIX:
        raise SpecError(f"switch radix {radix} is too small", path=("network", "switch"))
    return SwitchChoice(radix=radix, spec=sw, notes=tuple(notes))


def leaf_port_split(radix: int, oversubscription: float) -> tuple[int, int]:
    """Most leaf down-ports and the matching up-ports for a requested oversubscription ``o``.

    ``up = ceil(k / (1 + o))``, ``down = k - up`` so that ``down/up <= o`` (never worse than asked);
    for ``o = 1`` and even ``k`` this is the k-ary split ``k/2 : k/2`` (Al-Fares et al. 2008).
    """
    up = math.ceil(radix / (1.0 + oversubscription))
    return radix - up, up


def uplinks_for(down_used: int, oversubscription: float) -> int:
    """Leaf up-ports for ``down_used`` used down-ports: ``ceil(down / o)``."""
    return max(1, math.ceil(down_used / oversubscription - 1e-9))


def smallest_divisor_at_least(n: int, lower: int) -> int | None:
    """Smallest divisor of ``n`` that is ``>= lower`` (None if ``lower > n``).

    Used for switch counts: a leaf spreads its ``n`` up-links evenly (equal parallel links) over the
    spines it reaches, so the spine count divides ``n`` (this reproduces the DGX SuperPOD H100 table,
    where 3 SUs get 16 spines, not 12).
    """
    if lower > n:
        return None
    lower = max(1, lower)
    d = np.arange(lower, n + 1)
    return int(d[n % d == 0][0])


def pair_count_weighted_mean(groups: np.ndarray, total: int) -> float:
    """``sum e (e - 1) / (E (E - 1))``: the share of ordered endpoint pairs inside the same group."""
    if total < 2:
        return 1.0
    g = np.asarray(groups, dtype=float)
    return float((g * (g - 1)).sum() / (total * (total - 1.0)))


def fill_counts(total: int, per_group: int, groups: int) -> np.ndarray:
    """Items per group when ``total`` items fill groups of ``per_group`` in order (last partial)."""
    full = np.full(groups, per_group, dtype=np.int64)
    full[-1] = total - per_group * (groups - 1)
    return full
