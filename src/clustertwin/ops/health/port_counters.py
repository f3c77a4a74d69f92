"""Network port counters sampled twice: ``ethtool -S IFACE`` (RoCE, mlx5/ConnectX) and ``perfquery`` /
``perfquery -x`` (InfiniBand), turned into deltas and rates over the interval, and findings with thresholds.

Counter meanings:

- InfiniBand PortCounters / PortCountersExtended: IBTA spec vol. 1, 16.1.3.5 and 16.1.4.11 (as ``perfquery``
  prints them). ``PortXmitWait`` counts ticks in which the port had data to send and no credits: congestion
  downstream.
- mlx5 ``ethtool -S``: Linux ``Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst`` and
  NVIDIA "Understanding mlx5 ethtool Counters": ``rx_discards_phy`` (dropped for lack of buffers on the physical
  port: the adapter is congested), ``rx_out_of_buffer`` (no receive WQE: the host does not keep up),
  ``rx_prio<p>_pause`` / ``tx_prio<p>_pause`` and ``*_pause_duration`` (PFC pause frames and their duration in
  µs), ``tx_pause_storm_warning_events`` / ``tx_pause_storm_error_events`` (the device stalled sending pause),
  ``rx_crc_errors_phy`` / ``rx_symbol_err_phy`` / ``link_down_events_phy`` (the physical link).
- RDMA ``hw_counters`` (same file, ``name: value`` lines): ``np_cnp_sent``, ``rp_cnp_handled``,
  ``np_ecn_marked_roce_packets`` (DCQCN: ECN marks and congestion notification packets), ``out_of_sequence``,
  ``packet_seq_err``, ``local_ack_timeout_err`` (lost packets seen by the RoCE transport).

Thresholds: error counters rising faster than 10/s are "excessive", the rate limit of infiniband-diags'
``ibswportwatch`` (``IBswcountlimits.pm``: SymbolErrors, LinkRecovers, RcvErrors, LinkIntegrityErrors and
XmtDiscards, 10 counts/s); any rise of a link-down or discard counter within one interval is reported, since
a healthy lossless fabric shows none. PFC pause taking 1 % or more of the interval (from the pause duration
counters) and ``PortXmitWait`` ticks of at least 1 % of the data words sent are this project's congestion marks
(heuristics, stated as such): ECN/CNP activity alone is DCQCN doing its job and is context, not a fault.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from clustertwin.errors import SpecError
from clustertwin.inputs import RowDamage, parse_int
from clustertwin.ops.findings import Evidence, Finding, Severity

EXCESSIVE_ERRORS_PER_S = 10.0
"""infiniband-diags ibswportwatch: an error counter rising faster than this is excessive."""
PAUSE_FRACTION_WARN = 0.01
"""PFC pause duration over the interval at or above which the port is called congested (heuristic)."""
XMIT_WAIT_RATIO_WARN = 0.01
"""PortXmitWait ticks per PortXmitData word at or above which the port is called congested (heuristic)."""

LINK_DOWN = ("LinkDownedCounter", "link_down_events_phy")
LINK_RECOVERY = ("LinkErrorRecoveryCounter",)
PHY_ERRORS = ("SymbolErrorCounter", "PortRcvErrors", "LocalLinkIntegrityErrors", "PortRcvRemotePhysicalErrors",
              "rx_crc_errors_phy", "rx_symbol_err_phy", "rx_pcs_symbol_err_phy")
DISCARDS = ("PortXmitDiscards", "ExcessiveBufferOverrunErrors", "rx_discards_phy", "tx_discards_phy",
            "rx_out_of_buffer", "rx_buffer_passed_thres_phy", "out_of_sequence", "packet_seq_err",
            "local_ack_timeout_err")
"""Counters whose rise means packets were dropped (or retransmitted because they were)."""
PAUSE_STORM = ("tx_pause_storm_warning_events", "tx_pause_storm_error_events")
ECN_CNP = ("np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets", "rp_cnp_ignored")
_PRIO_DISCARD_RE = re.compile(r"^rx_prio\d_discards$")
_PAUSE_RE = re.compile(r"^(rx|tx)_prio(\d)_pause$")
_PAUSE_DURATION_RE = re.compile(r"^(rx|tx)_prio(\d)_pause_duration$")
_PQ_LINE_RE = re.compile(r"^(\w+):\.+\s*(\S+)\s*$")
_PQ_HEADER_RE = re.compile(r"^# Port (?:extended )?counters: Lid (\d+) port (\d+)")
_ETH_LINE_RE = re.compile(r"^\s*([A-Za-z_][\w.\-]*):\s*(\S+)\s*$")
MAX_INTERVAL_S = 30 * 86400.0


@dataclass
class CounterSample:
    """One reading of a port's counters."""

    source: str
    kind: str
    """``perfquery`` or ``ethtool``."""
    values: dict[str, int]
    lines: dict[str, int] = field(default_factory=dict)
    """Counter name -> 1-based line number in ``source``."""
    port_hint: str | None = None
    """``lid 20 port 1`` from a perfquery header; None for ethtool (its output does not name the interface)."""


def parse_counters(text: str, source: str = "counters", damage: RowDamage | None = None) -> CounterSample:
    """Counters of ``perfquery`` / ``perfquery -x`` output (``PortXmitDiscards:......41``) or ``ethtool -S``
    output (``NIC statistics:`` then ``rx_discards_phy: 12``; also plain ``name: value`` lines such as an RDMA
    ``hw_counters`` dump). Hex select/mask fields and per-queue lines are left out; a malformed number is a
    SpecError naming the file and line, or counted in ``damage``. A file of neither form is a SpecError."""
    lines = text.splitlines()
    head = next((ln.strip() for ln in lines if ln.strip()), "")
    values: dict[str, int] = {}
    where: dict[str, int] = {}
    hint = None
    if m := _PQ_HEADER_RE.match(head):
        kind, hint, pattern = "perfquery", f"lid {m.group(1)} port {m.group(2)}", _PQ_LINE_RE
    elif head.startswith("NIC statistics:") or _ETH_LINE_RE.match(head) or _PQ_LINE_RE.match(head):
        kind = "perfquery" if _PQ_LINE_RE.match(head) else "ethtool"
        pattern = _PQ_LINE_RE if kind == "perfquery" else _ETH_LINE_RE
    else:
        raise SpecError(f"{source}: neither 'ethtool -S' nor 'perfquery' output (expected a 'NIC statistics:' or "
                        f"'# Port counters' first line, got '{head[:60]}')")
    for i, raw in enumerate(lines, 1):
        m = pattern.match(raw)
        if not m or "Select" in m.group(1) or m.group(2).startswith("0x"):
            continue
        name, value = m.group(1), m.group(2)
        try:
            values[name] = parse_int(value, f"line {i}: {name}", file=source)
            where[name] = i
        except SpecError:
            if damage is None:
                raise
            damage.add("bad number", i)
    if not values:
        raise SpecError(f"{source}: no counters found ({kind} output expected)")
    return CounterSample(source, kind, values, where, hint)


def read_counters(path: str | Path, damage: RowDamage | None = None) -> CounterSample:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise SpecError(f"cannot read {p}: {e.strerror or e}") from None
    return parse_counters(text, str(p), damage)


@dataclass
class PortDelta:
    """What changed on one port between two samples."""

    port: str
    interval_s: float
    delta: dict[str, int]
    """Counter -> increase (counters present in both samples)."""
    reset: list[str]
    """Counters that went down (cleared with ``perfquery -R`` or wrapped): their delta is the later value."""
    after: CounterSample

    def rate_per_s(self, name: str) -> float:
        return self.delta.get(name, 0) / self.interval_s

    def grown(self, names: tuple[str, ...] | list[str]) -> dict[str, int]:
        return {n: self.delta[n] for n in names if self.delta.get(n, 0) > 0}


def port_delta(before: CounterSample, after: CounterSample, interval_s: float, port: str | None = None) -> PortDelta:
    """Deltas of every counter in both samples. The two must be the same tool's output; the interval is
    positive and at most 30 days (SpecError otherwise)."""
    if not 0 < interval_s <= MAX_INTERVAL_S:
        raise SpecError(f"--interval-s: expected a positive number of seconds up to {MAX_INTERVAL_S:.0f} "
                        f"(got {interval_s:g})")
    if before.kind != after.kind:
        raise SpecError(f"{after.source}: {after.kind} output, but {before.source} is {before.kind} output; "
                        "give two samples of the same port and tool")
    if before.port_hint and after.port_hint and before.port_hint != after.port_hint:
        raise SpecError(f"{after.source}: counters of {after.port_hint}, but {before.source} has {before.port_hint}")
    delta: dict[str, int] = {}
    reset: list[str] = []
    for name, v in after.values.items():
        if name not in before.values:
            continue
        d = v - before.values[name]
        if d < 0:
            reset.append(name)
            d = v
        delta[name] = d
    name = port or after.port_hint or Path(after.source).stem
    return PortDelta(name, interval_s, delta, reset, after)


def _ev(d: PortDelta, names: dict[str, int]) -> tuple[Evidence, ...]:
    return tuple(Evidence(d.after.source, d.after.lines.get(n), f"{n}: +{v:,} in {d.interval_s:g} s "
                          f"({v / d.interval_s:.3g}/s)") for n, v in names.items())


def _fmt(names: dict[str, int]) -> str:
    return ", ".join(f"{n} +{v:,}" for n, v in names.items())


def pause_fraction(d: PortDelta) -> tuple[float, dict[str, int]]:
    """The largest per-priority PFC pause duration over the interval (µs counters / interval), and the pause
    frame counters that grew."""
    frac = max((v / 1e6 / d.interval_s for n, v in d.delta.items() if _PAUSE_DURATION_RE.match(n)), default=0.0)
    frames = {n: v for n, v in d.delta.items() if _PAUSE_RE.match(n) and v > 0}
    return frac, frames


def xmit_wait_ratio(d: PortDelta) -> float:
    """PortXmitWait ticks per PortXmitData word in the interval (0 when no data was sent)."""
    data = d.delta.get("PortXmitData", 0)
    return d.delta.get("PortXmitWait", 0) / data if data else 0.0


@dataclass
class PortVerdict:
    """What the counters of one port say: loss (dropped or errored packets), congestion, link events."""

    delta: PortDelta
    loss: dict[str, int]
    link: dict[str, int]
    congestion: dict[str, int]
    findings: list[Finding]

    @property
    def port(self) -> str:
        return self.delta.port

    @property
    def bad(self) -> bool:
        return bool(self.loss or self.link or self.congestion)


def judge(d: PortDelta) -> PortVerdict:
    """Findings of one port's deltas (see the module docstring for the thresholds)."""
    out: list[Finding] = []
    subj = d.port
    link = d.grown(LINK_DOWN)
    recov = d.grown(LINK_RECOVERY)
    if link:
        out.append(Finding("error", "PORT_LINK_DOWN", f"{subj}: link went down during the interval ({_fmt(link)})",
                           _ev(d, link), "a flapping link: check the cable/transceiver (mlxlink -d DEV -m for the "
                           "module, ibdiagnet on the fabric) and the switch port's log; replace the cable if it "
                           "repeats", subject=subj))
    phy = d.grown(PHY_ERRORS)
    phy.update(recov)
    if phy:
        worst = max(v / d.interval_s for v in phy.values())
        sev: Severity = "error" if worst > EXCESSIVE_ERRORS_PER_S else "warning"
        out.append(Finding(sev, "PORT_PHY_ERRORS", f"{subj}: physical-layer errors rising ({_fmt(phy)}; "
                           f"max {worst:.3g}/s, excessive above {EXCESSIVE_ERRORS_PER_S:g}/s)", _ev(d, phy),
                           "bit errors on the link corrupt packets that are then dropped: reseat or replace the "
                           "cable/transceiver, check mlxlink's effective BER and the switch side's counters",
                           subject=subj))
    drops = d.grown(DISCARDS)
    drops.update({n: v for n, v in d.delta.items() if _PRIO_DISCARD_RE.match(n) and v > 0})
    if drops:
        worst = max(v / d.interval_s for v in drops.values())
        sev = "error" if worst > EXCESSIVE_ERRORS_PER_S else "warning"
        out.append(Finding(sev, "PORT_DISCARDS", f"{subj}: packets dropped ({_fmt(drops)}; max {worst:.3g}/s)",
                           _ev(d, drops), "rx_discards_phy / PortXmitDiscards: the port had no buffer (congestion "
                           "or a PFC/lossless class misconfigured: check 'mlnx_qos -i IFACE' trust and pfc for the "
                           "RoCE priority); rx_out_of_buffer: the host does not drain the queues (IRQ affinity, "
                           "ring size 'ethtool -G'); out_of_sequence/packet_seq_err: loss seen by RoCE",
                           subject=subj))
    congestion: dict[str, int] = {}
    storm = d.grown(PAUSE_STORM)
    if storm:
        sev = "error" if "tx_pause_storm_error_events" in storm else "warning"
        out.append(Finding(sev, "PFC_PAUSE_STORM", f"{subj}: PFC pause storm ({_fmt(storm)})", _ev(d, storm),
                           "the NIC stalled sending pause frames (a stuck receiver); find the host or switch port "
                           "that stopped draining; the device disables PFC on error events", subject=subj))
        congestion.update(storm)
    frac, frames = pause_fraction(d)
    if frac >= PAUSE_FRACTION_WARN:
        durations = {n: v for n, v in d.delta.items() if _PAUSE_DURATION_RE.match(n) and v > 0}
        sent = any(n.startswith("tx_") for n in durations)
        out.append(Finding("warning", "PFC_PAUSE", f"{subj}: PFC pause {100 * frac:.1f}% of the interval "
                           f"({_fmt(frames or durations)})", _ev(d, {**frames, **durations}),
                           ("this port sends pause: its receive path is behind (host not draining, PCIe); "
                            if sent else "the peer pauses this port: congestion downstream (switch buffer, "
                            "incast); ") + "check the switch's ECN/PFC thresholds for the RoCE priority",
                           subject=subj))
        congestion.update(frames or durations)
    ratio = xmit_wait_ratio(d)
    if ratio >= XMIT_WAIT_RATIO_WARN:
        xw = {"PortXmitWait": d.delta["PortXmitWait"]}
        out.append(Finding("warning", "IB_XMIT_WAIT", f"{subj}: PortXmitWait {ratio:.3g} ticks per data word "
                           f"sent (+{xw['PortXmitWait']:,} in {d.interval_s:g} s): congestion downstream",
                           _ev(d, xw), "credits ran out: look for a slow receiver or an oversubscribed switch "
                           "link (ibdiagnet --pm, the switches' PortXmitWait); check the routing (adaptive "
                           "routing, SL/VL mapping)", subject=subj))
        congestion.update(xw)
    ecn = d.grown(ECN_CNP)
    if ecn:
        out.append(Finding("info", "ROCE_ECN_CNP", f"{subj}: ECN/CNP activity ({_fmt(ecn)})", _ev(d, ecn),
                           "DCQCN reacting to congestion marks; fine in bursts, a steady rate means a hot link",
                           subject=subj))
    if d.reset:
        out.append(Finding("info", "COUNTERS_RESET", f"{subj}: {len(d.reset)} counter(s) went down between the "
                           "samples (cleared or wrapped); their later value was used", tuple(
                               Evidence(d.after.source, d.after.lines.get(n), n) for n in d.reset[:10]),
                           "sample without clearing counters in between", subject=subj))
    return PortVerdict(d, {**drops, **phy}, link, congestion, out)
