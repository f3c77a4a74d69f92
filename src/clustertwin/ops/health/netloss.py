"""``diagnose LOG... --counters BEFORE AFTER``: NCCL's network symptoms joined with the counters of the port
involved, naming "packet loss / congestion on port X" when both agree.

Symptoms (as NCCL, libibverbs and PyTorch print them):

- transport retry exceeded: ``NCCL WARN NET/IB : Got completion from peer P with error 12`` (NCCL < 2.19) or
  ``... with status=IBV_WC_RETRY_EXC_ERR(12) ... hca mlx5_0`` (NCCL >= 2.19), ``transport retry counter
  exceeded`` (``ibv_wc_status_str(12)``): the sender retried ``NCCL_IB_RETRY_CNT`` times without an ACK, so
  packets (or their ACKs) were lost on the path, or the peer died. Other completion errors count too, except
  5 (work request flushed: a consequence of an earlier error).
- weak symptoms: the PyTorch watchdog's ``Watchdog caught collective operation timeout`` and ``ncclRemoteError``
  / ``remote process exited or there was a network error``: a network fault is one cause among several.

Verdict: a strong symptom with loss or link counters rising on the port = ``PACKET_LOSS`` (error); with only
congestion counters (PFC pause, PortXmitWait) = ``NET_CONGESTION`` (error); with only weak symptoms the same
codes as warnings; symptoms while the port's counters stayed clean = ``NET_PORT_CLEAN`` (info: look at the
peer, the switch or another rail). Counter findings of the port (:mod:`clustertwin.ops.health.port_counters`) are
reported in every case. Nothing here is critical: a lossy link degrades or fails jobs, it does not break a GPU.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from clustertwin.errors import SpecError
from clustertwin.inputs import RowDamage
from clustertwin.ops.diagnosis.diagnose import decode_log
from clustertwin.ops.findings import Evidence, Finding, Severity
from clustertwin.ops.health.ib import SYSFS_TO_PERFQUERY
from clustertwin.ops.health.port_counters import (
    CounterSample,
    PortVerdict,
    judge,
    parse_counters,
    port_delta,
    read_counters,
)

MAX_EVIDENCE = 6
SYSFS_NAMES = {**SYSFS_TO_PERFQUERY, "port_xmit_wait": "PortXmitWait", "port_xmit_data": "PortXmitData",
               "port_rcv_data": "PortRcvData", "port_xmit_packets": "PortXmitPkts", "port_rcv_packets": "PortRcvPkts"}
"""sysfs counter file -> perfquery name, for the live samples."""
_COMPLETION_RE = re.compile(r"NET/IB ?: Got completion from peer (\S+) with (?:error |status=(?:(\w+)\()?)(\d+)")
_RETRY_RE = re.compile(r"IBV_WC_RETRY_EXC_ERR|transport retry counter exceeded", re.IGNORECASE)
_HCA_RE = re.compile(r"\bhca (\w+)\s*$")
_WATCHDOG_RE = re.compile(r"Watchdog caught collective operation timeout")
_REMOTE_RE = re.compile(r"ncclRemoteError|remote process exited or there was a network error")
FLUSHED = 5
RETRY_EXCEEDED = 12


@dataclass(frozen=True)
class Symptom:
    kind: str
    """``retry_exceeded``, ``completion_error`` (strong), ``watchdog_timeout``, ``remote_error`` (weak)."""
    evidence: Evidence
    peer: str | None = None
    hca: str | None = None

    @property
    def strong(self) -> bool:
        return self.kind in ("retry_exceeded", "completion_error")


def scan_symptoms(lines: list[str], file: str) -> list[Symptom]:
    """Network symptoms in one log, one per line (a line's strongest reading)."""
    out: list[Symptom] = []
    for i, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text:
            continue
        ev = Evidence(file, i, text)
        hca = m.group(1) if (m := _HCA_RE.search(text)) else None
        if m := _COMPLETION_RE.search(text):
            code = int(m.group(3))
            if code == FLUSHED:
                continue
            kind = "retry_exceeded" if code == RETRY_EXCEEDED else "completion_error"
            out.append(Symptom(kind, ev, m.group(1), hca))
        elif _RETRY_RE.search(text):
            out.append(Symptom("retry_exceeded", ev, None, hca))
        elif _WATCHDOG_RE.search(text):
            out.append(Symptom("watchdog_timeout", ev))
        elif _REMOTE_RE.search(text):
            out.append(Symptom("remote_error", ev))
    return out


def _log_files(paths: Iterable[str | Path]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(q for q in p.rglob("*") if q.is_file() and q.suffix.lower() != ".csv"))
        elif p.is_file():
            out.append(p)
        else:
            raise SpecError(f"{p}: no such file or directory")
    return out


def symptoms_of(paths: Iterable[str | Path]) -> list[Symptom]:
    """Symptoms of every text file (directories recursively; binary files are left to ``diagnose``)."""
    out: list[Symptom] = []
    for path in _log_files(paths):
        try:
            text = decode_log(path.read_bytes())
        except OSError:
            continue  # diagnose reports unreadable files
        if text is not None:
            out += scan_symptoms(text.splitlines(), str(path))
    return out


def _summary(symptoms: list[Symptom]) -> str:
    kinds: dict[str, int] = {}
    for s in symptoms:
        kinds[s.kind] = kinds.get(s.kind, 0) + 1
    names = {"retry_exceeded": "transport retry exceeded", "completion_error": "IB completion error",
             "watchdog_timeout": "watchdog timeout", "remote_error": "ncclRemoteError"}
    return ", ".join(f"{names[k]} x{n}" for k, n in kinds.items())


def verdict_findings(symptoms: list[Symptom], v: PortVerdict) -> list[Finding]:
    """The joined finding (see the module docstring) followed by the port's counter findings."""
    out: list[Finding] = []
    port = v.port
    strong = [s for s in symptoms if s.strong]
    if symptoms:
        hcas = sorted({s.hca for s in symptoms if s.hca})
        peers = sorted({s.peer for s in symptoms if s.peer})
        named = (f"; NCCL names hca {', '.join(hcas)}" if hcas else "") + \
                (f", peer {', '.join(peers)}" if peers else "")
        lead = (strong or symptoms)[:MAX_EVIDENCE]
        evidence = tuple(s.evidence for s in lead)
        if v.loss or v.link or v.congestion:
            loss = {**v.link, **v.loss}
            code = "PACKET_LOSS" if loss else "NET_CONGESTION"
            counters = ", ".join(f"{n} +{d:,}" for n, d in list({**loss, **v.congestion}.items())[:6])
            sev: Severity = "error" if strong else "warning"
            what = ("packet loss and congestion" if v.congestion else "packet loss") if loss else "congestion"
            title = (f"packet loss / congestion on port {port}: {what} ({counters} in {v.delta.interval_s:g} s) "
                     f"while NCCL reports {_summary(symptoms)}{named}")
            cev = tuple(Evidence(v.delta.after.source, v.delta.after.lines.get(n), f"{n}: +{d:,}")
                        for n, d in list({**loss, **v.congestion}.items())[:4])
            action = ("the lost packets made the sender exhaust NCCL_IB_RETRY_CNT: fix the port first (the counter "
                      "findings below say which layer), then rerun; drain the node from the job's rail until the "
                      "counters stay flat over a job" if loss else
                      "the port is congested (PFC pause / XmitWait): check the switch's lossless-class and ECN "
                      "settings for the RoCE priority, adaptive routing, and whether this rail carries more "
                      "traffic than the others (NCCL_IB_HCA, placement)")
            if not strong:
                action = "a timeout alone has other causes (a hung rank, an Xid): " + action
            out.append(Finding(sev, code, title, evidence + cev, action, subject=port))
        elif strong:
            out.append(Finding("info", "NET_PORT_CLEAN", f"NCCL reports {_summary(symptoms)}{named}, but port "
                               f"{port}'s counters show no loss or congestion in the interval", evidence,
                               "the loss is elsewhere: sample the peer node's port and the switch ports between "
                               "them (ibdiagnet --pm, perfquery on the switch), or the port of another rail",
                               subject=port))
    return out + v.findings


def network_diagnosis(paths: Iterable[str | Path], before: str | Path, after: str | Path,
                      port: str | None = None, interval_s: float = 60.0) -> tuple[list[Finding], int]:
    """(findings, malformed counter lines) of logs plus two counter samples of one port."""
    damage = RowDamage()
    b, a = read_counters(before, damage), read_counters(after, damage)
    verdict = judge(port_delta(b, a, interval_s, port))
    return verdict_findings(symptoms_of(paths), verdict), damage.total


def ib_sysfs_sample(port_dir: Path) -> CounterSample | None:
    """One port's ``counters/`` and ``hw_counters/`` files as a perfquery-named sample (sysfs names mapped to
    perfquery's, so the same rules apply); None when the port has no counters."""
    values: dict[str, int] = {}
    for sub in ("counters", "hw_counters"):
        d = port_dir / sub
        for f in sorted(d.iterdir()) if d.is_dir() else []:
            try:
                text = f.read_text().strip()
            except OSError:
                continue
            if text.isdigit():
                values[SYSFS_NAMES.get(f.name, f.name)] = int(text)
    return CounterSample(str(port_dir), "perfquery", values) if values else None


def sample_live(ib_root: Path, ethtool_ifaces: list[str], interval_s: float,
                read_ethtool: Callable[[str], str | None]) -> list[Finding]:
    """Two samples ``interval_s`` apart of every IB/RoCE port under ``ib_root`` and of ``ethtool -S`` of each
    RoCE netdev, judged like ``diagnose --counters`` (without logs: the counter findings alone)."""
    def take() -> dict[str, CounterSample]:
        out: dict[str, CounterSample] = {}
        for hca in sorted(ib_root.iterdir()) if ib_root.is_dir() else []:
            for pdir in sorted((hca / "ports").glob("*")) if (hca / "ports").is_dir() else []:
                if (s := ib_sysfs_sample(pdir)) is not None:
                    out[f"{hca.name}/{pdir.name}"] = s
        for iface in ethtool_ifaces:
            if (text := read_ethtool(iface)) and text.strip():
                try:
                    out[iface] = parse_counters(text, f"ethtool -S {iface}", RowDamage())
                except SpecError:
                    continue
        return out

    first = take()
    if not first:
        return []
    time.sleep(interval_s)
    second = take()
    findings: list[Finding] = []
    for name, b in first.items():
        if name in second:
            findings += judge(port_delta(b, second[name], interval_s, name)).findings
    return findings
