"""NVIDIA Xid codes and the kernel-log lines that carry them.

The driver logs ``NVRM: Xid (PCI:0000:18:00): 79, pid=..., GPU has fallen off the bus.`` to the kernel
ring buffer (``dmesg -T``, ``journalctl -k``); NVSwitch errors appear as ``SXid``. Meanings and immediate
actions follow NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors, "Resolution Bucket") and the
dynamic-page-retirement / row-remapping guides; severities are this project's triage:
critical = drain the node or GPU, error = the job died (restart it, watch for repeats), warning =
degraded or will need a reset, info = context.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clustertwin.ops.findings import Evidence, Finding, Severity


@dataclass(frozen=True)
class XidInfo:
    """One Xid code: meaning, triage severity and the action to take."""

    code: int
    meaning: str
    severity: Severity
    action: str


_RESET = "reset the GPU (nvidia-smi -r -i N, or reboot) before it takes new work"
XID_CATALOG: dict[int, XidInfo] = {x.code: x for x in (
    XidInfo(13, "graphics engine exception", "error",
            "restart the application; if it repeats on the same GPU, run dcgmi diag -r 3 on it"),
    XidInfo(31, "GPU memory page fault (MMU fault)", "error",
            "restart the application (usually a software bug); if it repeats on the same GPU, run dcgmi diag"),
    XidInfo(43, "GPU stopped processing (follows an earlier error)", "info",
            "follow the Xid that preceded it; no action on its own"),
    XidInfo(45, "preemptive cleanup after an earlier error", "info",
            "follow the Xid that preceded it; if it is alone, restart Fabric Manager"),
    XidInfo(48, "double-bit (uncorrectable) ECC error", "critical",
            f"drain the node and {_RESET}; with Xid 63/64 or SRAM errors over threshold, replace the GPU"),
    XidInfo(61, "internal micro-controller breakpoint/warning", "error", _RESET),
    XidInfo(62, "internal micro-controller halt", "critical", f"drain the node and {_RESET}"),
    XidInfo(63, "row remapping / page retirement recorded", "warning",
            "schedule a GPU reset at the next job boundary to apply the remap"),
    XidInfo(64, "row remapping / page retirement failure", "critical",
            f"drain the node and {_RESET}; if it recurs, RMA the GPU"),
    XidInfo(74, "NVLink error", "critical",
            "drain the node; check NVLink state (nvidia-smi nvlink -s / -e), reset GPUs, reseat or RMA"),
    XidInfo(79, "GPU has fallen off the bus", "critical",
            "drain the node and reboot it; check PCIe seating, power and thermals; replace the GPU if it repeats"),
    XidInfo(92, "high single-bit ECC error rate", "warning",
            "monitor ECC counters; contact the vendor if the rate keeps rising"),
    XidInfo(94, "contained uncorrectable memory error", "error",
            "restart the application; the GPU stays usable, reset it at the next job boundary"),
    XidInfo(95, "uncontained uncorrectable memory error", "critical", f"drain the node and {_RESET}"),
    XidInfo(109, "context-switch timeout", "error", _RESET),
    XidInfo(119, "GSP RPC timeout", "critical",
            f"drain the node and {_RESET}; check the driver/firmware version"),
    XidInfo(120, "GSP error", "critical", f"drain the node and {_RESET}; check the driver/firmware version"),
    XidInfo(140, "unrecovered ECC error", "critical", f"drain the node and {_RESET}"),
    XidInfo(154, "GPU recovery action changed (the message names the action)", "warning",
            "follow the recovery action named in the message (reset, reboot, drain)"),
    XidInfo(158, "GPU fatal timeout", "critical", f"drain the node and {_RESET}"),
)}

NVLINK5_XIDS = range(144, 151)
"""Xid 144-150: NVLink5 (Blackwell) errors, all handled like Xid 74."""


def xid_info(code: int) -> XidInfo:
    """Meaning and action of an Xid; unknown codes are reported as errors pointing at NVIDIA's catalog."""
    if code in XID_CATALOG:
        return XID_CATALOG[code]
    if code in NVLINK5_XIDS:
        return XidInfo(code, "NVLink5 error", "critical", XID_CATALOG[74].action)
    return XidInfo(code, "Xid not in the built-in table", "error",
                   "look the code up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)")


XID_RE = re.compile(r"NVRM: (S?)Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+)(?:, (.*))?")
"""``NVRM: Xid (PCI:0000:18:00): 79, pid=..., msg`` and NVSwitch ``NVRM: SXid (PCI:...): 24007, msg``."""
FELL_OFF_RE = re.compile(r"NVRM: (?:GPU at PCI:|GPU )((?:[0-9a-fA-F]+:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)"
                         r"\b.*fallen off the bus", re.IGNORECASE)
"""``NVRM: GPU at PCI:0000:01:00.0 has fallen off the bus.`` / ``NVRM: GPU 0000:18:00.0: GPU has fallen off
the bus.``"""


@dataclass(frozen=True)
class XidEvent:
    """One Xid line from a kernel log."""

    code: int
    pci_bus_id: str
    message: str
    nvswitch: bool
    line: int
    text: str


def parse_kernel_log(lines: list[str]) -> tuple[list[XidEvent], list[tuple[str, int, str]]]:
    """Xid events and fallen-off-the-bus lines ``(pci_bus_id, line, text)`` of a kernel log.

    Lines are 1-based. Lines that mention ``NVRM: Xid`` but do not match the format are skipped
    (the caller counts them as malformed through :func:`count_malformed_xid`).
    """
    events: list[XidEvent] = []
    fell: list[tuple[str, int, str]] = []
    for i, raw in enumerate(lines, 1):
        if "NVRM" not in raw:
            continue
        m = XID_RE.search(raw)
        if m:
            events.append(XidEvent(int(m.group(3)), m.group(2), (m.group(4) or "").strip(), m.group(1) == "S",
                                   i, raw.strip()))
            continue
        m = FELL_OFF_RE.search(raw)
        if m:
            fell.append((m.group(1), i, raw.strip()))
    return events, fell


def count_malformed_xid(lines: list[str]) -> int:
    """Lines that mention an Xid but do not parse (truncated or mangled kernel-log lines)."""
    return sum(1 for raw in lines if "Xid" in raw and "NVRM" in raw and not XID_RE.search(raw))


def xid_findings(events: list[XidEvent], fell: list[tuple[str, int, str]], file: str) -> list[Finding]:
    """One finding per (Xid code, PCI device), with every line as evidence; one per fallen-off GPU."""
    groups: dict[tuple[int, str, bool], list[XidEvent]] = {}
    for ev in events:
        groups.setdefault((ev.code, ev.pci_bus_id.lower(), ev.nvswitch), []).append(ev)
    out: list[Finding] = []
    for (code, bus, nvswitch), evs in groups.items():
        ev_list = tuple(Evidence(file, e.line, e.text) for e in evs)
        if nvswitch:
            out.append(Finding("error", f"SXID_{code}", f"NVSwitch SXid {code} on {bus} ({len(evs)}x)", ev_list,
                               "check Fabric Manager logs and nvswitch state; the NVSwitch may need a reset "
                               "(reboot) or service", subject=bus))
            continue
        info = xid_info(code)
        out.append(Finding(info.severity, f"XID_{code}", f"Xid {code} on GPU {bus}: {info.meaning} ({len(evs)}x)",
                           ev_list, info.action, subject=bus))
    by_bus: dict[str, list[tuple[str, int, str]]] = {}
    for bus, line, text in fell:
        by_bus.setdefault(bus.lower(), []).append((bus, line, text))
    for bus, items in by_bus.items():
        out.append(Finding("critical", "GPU_FELL_OFF_BUS", f"GPU {bus} has fallen off the bus",
                           tuple(Evidence(file, ln, t) for _, ln, t in items), XID_CATALOG[79].action, subject=bus))
    return out
