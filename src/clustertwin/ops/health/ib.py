"""InfiniBand / RoCE port state, rate and error counters from sysfs, ``ibstat`` or ``perfquery``.

Sources: ``/sys/class/infiniband/<hca>/ports/<n>/{state,phys_state,rate,link_layer}`` (``4: ACTIVE``,
``5: LinkUp``, ``400 Gb/sec (4X NDR)``) and ``counters/*``; ``ibstat`` blocks (``CA 'mlx5_0'`` / ``Port 1:`` /
``State: Active``, ``Physical state: LinkUp``, ``Rate: 400``, ``Link layer: InfiniBand``); ``perfquery``
lines ``SymbolErrorCounter:......0``. Error counters are the IBA PortCounters attribute (IBTA spec vol. 1,
ch. 16.1.3.5), the ones ``ibqueryerrors`` reports.

Numbers are checked (:mod:`clustertwin.inputs`): a rate such as ``1.5.5`` or an infinite one, a port number or
counter beyond its range is a SpecError naming the file and line (exit 2); readers of whole log folders
(``diagnose``) pass a :class:`~clustertwin.inputs.RowDamage` instead, and the value is counted and left out.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from clustertwin.errors import SpecError
from clustertwin.inputs import INT64_MAX, RowDamage, parse_float, parse_int
from clustertwin.ops.findings import Evidence, Finding

SYSFS_IB_ROOT = Path("/sys/class/infiniband")
SYSFS_TO_PERFQUERY: dict[str, str] = {
    "symbol_error": "SymbolErrorCounter",
    "link_error_recovery": "LinkErrorRecoveryCounter",
    "link_downed": "LinkDownedCounter",
    "port_rcv_errors": "PortRcvErrors",
    "port_rcv_remote_physical_errors": "PortRcvRemotePhysicalErrors",
    "port_rcv_switch_relay_errors": "PortRcvSwitchRelayErrors",
    "port_xmit_discards": "PortXmitDiscards",
    "port_xmit_constraint_errors": "PortXmitConstraintErrors",
    "port_rcv_constraint_errors": "PortRcvConstraintErrors",
    "local_link_integrity_errors": "LocalLinkIntegrityErrors",
    "excessive_buffer_overrun_errors": "ExcessiveBufferOverrunErrors",
    "VL15_dropped": "VL15Dropped",
}
"""sysfs counter file -> PortCounters name (as perfquery prints it)."""
ERROR_COUNTERS: tuple[str, ...] = tuple(SYSFS_TO_PERFQUERY.values())
"""Counters whose non-zero value indicates a physical-layer or congestion problem."""
LINK_COUNTERS = frozenset({"SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter",
                           "LocalLinkIntegrityErrors", "PortRcvErrors", "PortRcvRemotePhysicalErrors"})
"""Counters pointing at the cable/transceiver/port (the rest: congestion or configuration)."""
MAX_RATE_GBIT_PER_S = 100_000.0
"""Highest port rate accepted, Gb/s (today's fastest ports run 800)."""
MAX_PORT = 255
"""Highest HCA port number (an 8-bit field in IBA)."""
_RATE_RE = re.compile(r"\s*([\d.]+)")
_ACTION_COUNTERS = ("clear the counters (perfquery -x -R), re-check after a job; if they keep rising, "
                    "reseat or replace the cable/transceiver and check the switch port")


@dataclass
class IbPort:
    """One HCA port."""

    hca: str
    port: int
    state: str
    """Logical state: Active, Down, Init, Armed."""
    phys_state: str
    """Physical state: LinkUp, Polling, Disabled, ..."""
    rate_gbit_per_s: float | None
    link_layer: str
    """InfiniBand or Ethernet (RoCE)."""
    counters: dict[str, int] = field(default_factory=dict)
    source: str = ""
    line: int | None = None

    @property
    def name(self) -> str:
        return f"{self.hca}/{self.port}"


def _rate(text: str, source: str, line: int | None, damage: RowDamage | None = None) -> float | None:
    """Gb/s of a rate value (``400``, ``400 Gb/sec (4X NDR)``); None when it holds no number. A malformed
    number (``1.5.5``, an infinity, above :data:`MAX_RATE_GBIT_PER_S`) is a SpecError naming ``source`` and
    ``line``, or counted in ``damage`` (and None) when one is given."""
    m = _RATE_RE.match(text)
    if not m:
        return None
    where = f"line {line}: Rate" if line else "rate"
    try:
        return parse_float(m.group(1), where, max_value=MAX_RATE_GBIT_PER_S, file=source)
    except SpecError:
        if damage is None:
            raise
        damage.add("bad number", line or 0)
        return None


def _sysfs_value(text: str) -> str:
    """``4: ACTIVE`` -> ``ACTIVE``; plain values unchanged."""
    return text.split(":", 1)[1].strip() if re.match(r"^\d+:\s", text) else text.strip()


def read_sysfs(root: Path = SYSFS_IB_ROOT) -> list[IbPort]:
    """All ports under ``root`` (``/sys/class/infiniband``); [] when there is none."""
    ports: list[IbPort] = []
    if not root.is_dir():
        return ports
    for hca in sorted(root.iterdir()):
        for pdir in sorted((hca / "ports").glob("*")) if (hca / "ports").is_dir() else []:
            def read(name: str, base: Path = pdir) -> str:
                p = base / name
                try:
                    return p.read_text().strip()
                except OSError:
                    return ""
            if not pdir.name.isdigit():
                continue
            counters: dict[str, int] = {}
            for fname, cname in SYSFS_TO_PERFQUERY.items():
                v = read(f"counters/{fname}")
                if v.isdigit():
                    counters[cname] = parse_int(v, cname, max_value=INT64_MAX, file=str(pdir / "counters" / fname))
            state = _sysfs_value(read("state")).capitalize()
            ports.append(IbPort(hca.name, parse_int(pdir.name, "port", max_value=MAX_PORT, file=str(pdir)), state,
                                _sysfs_value(read("phys_state")), _rate(read("rate"), str(pdir / "rate"), None),
                                read("link_layer") or "InfiniBand", counters, source=str(pdir)))
    return ports


def parse_ibstat(text: str, source: str = "ibstat", damage: RowDamage | None = None) -> list[IbPort]:
    """Ports of ``ibstat`` output; a malformed number is a SpecError naming ``source`` and its line, or counted
    in ``damage`` when one is given (a bad port number drops its port, a bad rate leaves the rate unknown)."""
    ports: list[IbPort] = []
    hca = ""
    cur: dict[str, str] = {}
    lines: dict[str, int] = {}
    port_no, port_line = 0, 0

    def flush() -> None:
        if cur and port_no >= 0:
            rate = _rate(cur.get("Rate", ""), source, lines.get("Rate", port_line), damage)
            ports.append(IbPort(hca, port_no, cur.get("State", "?"), cur.get("Physical state", "?"),
                                rate, cur.get("Link layer", "InfiniBand"), source=source, line=port_line))

    for i, raw in enumerate(text.splitlines(), 1):
        m = re.match(r"^CA '([^']+)'", raw)
        if m:
            flush()
            cur = {}
            hca = m.group(1)
            continue
        m = re.match(r"^\s+Port (\d+):\s*$", raw)
        if m:
            flush()
            cur, lines = {"_": ""}, {}
            port_no, port_line = _port(m.group(1), source, i, damage), i
            continue
        if cur and ":" in raw:
            key, _, value = raw.strip().partition(":")
            cur[key.strip()] = value.strip()
            lines[key.strip()] = i
    flush()
    return ports


def _port(text: str, source: str, line: int, damage: RowDamage | None) -> int:
    """A port number (0..255); a bad one is a SpecError, or -1 (the port is dropped) counted in ``damage``."""
    try:
        return parse_int(text, f"line {line}: Port", max_value=MAX_PORT, file=source)
    except SpecError:
        if damage is None:
            raise
        damage.add("bad number", line)
        return -1


def parse_perfquery(text: str, source: str = "perfquery", damage: RowDamage | None = None) -> dict[str, int]:
    """``perfquery`` counters (``SymbolErrorCounter:....0``) as integers; select/mask fields dropped. A counter
    beyond int64 is a SpecError naming ``source`` and its line, or counted in ``damage`` and left out."""
    out: dict[str, int] = {}
    for i, raw in enumerate(text.splitlines(), 1):
        m = re.match(r"^(\w+):\.*\s*(\d+)\s*$", raw)
        if m and "Select" not in m.group(1):
            try:
                out[m.group(1)] = parse_int(m.group(2), f"line {i}: {m.group(1)}", file=source)
            except SpecError:
                if damage is None:
                    raise
                damage.add("bad number", i)
    return out


def ib_findings(ports: list[IbPort]) -> list[Finding]:
    """Down ports, ports below the node's common active rate, and non-zero error counters."""
    out: list[Finding] = []
    rates = Counter(p.rate_gbit_per_s for p in ports
                    if p.state.lower() == "active" and p.rate_gbit_per_s and p.link_layer == "InfiniBand")
    common_rate = rates.most_common(1)[0][0] if rates else None
    for p in ports:
        ev = (Evidence(p.source, p.line, f"{p.name}: State {p.state}, Physical state {p.phys_state}, "
                                         f"Rate {p.rate_gbit_per_s:g}, Link layer {p.link_layer}"
                       if p.rate_gbit_per_s else f"{p.name}: State {p.state}, Physical state {p.phys_state}"),)
        if p.state.lower() != "active":
            if p.phys_state.lower() == "disabled":
                out.append(Finding("info", "IB_PORT_DISABLED", f"{p.name} is administratively disabled", ev,
                                   "none if the port is meant to be unused", subject=p.name))
            else:
                out.append(Finding("error", "IB_PORT_DOWN", f"{p.name} is {p.state} ({p.phys_state})", ev,
                                   "check the cable, transceiver and switch port; Polling = no link partner; "
                                   "Init/Armed = no subnet manager configured the port", subject=p.name))
            continue
        if (common_rate and p.link_layer == "InfiniBand" and p.rate_gbit_per_s
                and p.rate_gbit_per_s < common_rate):
            out.append(Finding("warning", "IB_RATE_DEGRADED",
                               f"{p.name} runs at {p.rate_gbit_per_s:g} Gb/s, other ports at {common_rate:g}", ev,
                               "a link trained down (bad lane, cable or transceiver): reseat/replace the cable "
                               "and check 'mlxlink' for the lane state", subject=p.name))
        bad = {k: v for k, v in p.counters.items() if k in ERROR_COUNTERS and v > 0}
        if bad:
            link = any(k in LINK_COUNTERS for k in bad)
            text = ", ".join(f"{k}={v}" for k, v in bad.items())
            out.append(Finding("warning", "IB_LINK_ERRORS" if link else "IB_PORT_ERRORS",
                               f"{p.name} error counters: {text}", (Evidence(p.source, p.line, text),),
                               _ACTION_COUNTERS, subject=p.name))
    return out
