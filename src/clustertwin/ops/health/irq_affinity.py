"""IRQ affinity of the RDMA NICs: completion interrupts served by CPUs of another NUMA node than the NIC's cost
a cross-socket hop per completion and show up as lower RDMA bandwidth and jittery NCCL steps.

Sources: ``/proc/interrupts`` (mlx5 names its completion vectors ``mlx5_comp<N>@pci:<BDF>``),
``/proc/irq/<n>/smp_affinity_list``, ``/sys/bus/pci/devices/<BDF>/numa_node`` and
``/sys/devices/system/node/node<N>/cpulist``; NVIDIA's performance tuning guide for ConnectX adapters
(``set_irq_affinity_bynode.sh <node> <iface>`` or ``mlnx_tune``, and irqbalance left off or told to keep the
NIC's IRQs on its node). Everything is read below a root directory (``/`` live, a copy for a saved check).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from clustertwin.ops.findings import Evidence, Finding

_MLX5_IRQ_RE = re.compile(r"^\s*(\d+):.*\b(mlx5_comp\d+)@pci:([0-9a-fA-F:.]+)\s*$")
MIN_REMOTE_FRACTION = 0.5
"""Share of a NIC's completion IRQs on remote CPUs at which the NIC is reported."""


def cpu_list(text: str) -> set[int]:
    """``0-3,8,10-11`` -> {0, 1, 2, 3, 8, 10, 11}; malformed parts are ignored."""
    out: set[int] = set()
    for part in text.strip().split(","):
        a, _, b = part.partition("-")
        if a.strip().isdigit() and (not b or b.strip().isdigit()):
            out.update(range(int(a), int(b or a) + 1))
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


@dataclass(frozen=True)
class NicIrqs:
    bdf: str
    numa_node: int
    irqs: dict[int, set[int]]
    """IRQ number -> CPUs allowed to serve it."""
    remote: list[int]
    """IRQs whose CPUs are all outside the NIC's NUMA node."""


def nic_irqs(root: Path) -> tuple[list[NicIrqs], str]:
    """The mlx5 NICs' completion IRQs and where they run; (nics, source of /proc/interrupts)."""
    src = root / "proc" / "interrupts"
    text = _read(src)
    if text is None:
        return [], str(src)
    by_dev: dict[str, list[int]] = {}
    for ln in text.splitlines():
        if m := _MLX5_IRQ_RE.match(ln):
            by_dev.setdefault(m.group(3).lower(), []).append(int(m.group(1)))
    nodes: dict[int, set[int]] = {}
    for d in sorted((root / "sys/devices/system/node").glob("node[0-9]*")):
        if (t := _read(d / "cpulist")) is not None:
            nodes[int(d.name[4:])] = cpu_list(t)
    out: list[NicIrqs] = []
    for bdf, irqs in sorted(by_dev.items()):
        node_text = _read(root / "sys/bus/pci/devices" / bdf / "numa_node")
        node = int(node_text.strip()) if node_text and node_text.strip().lstrip("-").isdigit() else -1
        cpus = {i: cpu_list(_read(root / "proc/irq" / str(i) / "smp_affinity_list") or "") for i in irqs}
        local = nodes.get(node)
        remote = [i for i, c in cpus.items() if local is not None and c and not (c & local)]
        out.append(NicIrqs(bdf, node, cpus, remote))
    return out, str(src)


def _span(cpus: set[int]) -> str:
    lo, hi = min(cpus), max(cpus)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def irq_findings(root: Path) -> list[Finding]:
    """A finding per NIC whose completion IRQs mostly run on another NUMA node."""
    out: list[Finding] = []
    nics, src = nic_irqs(root)
    for n in nics:
        if n.numa_node < 0 or not n.irqs or len(n.remote) / len(n.irqs) < MIN_REMOTE_FRACTION:
            continue
        sample = ", ".join(f"IRQ {i} -> CPU {_span(n.irqs[i])}" for i in n.remote[:3])
        out.append(Finding("warning", "IRQ_AFFINITY_REMOTE", f"{len(n.remote)} of {len(n.irqs)} completion IRQs "
                           f"of NIC {n.bdf} run on CPUs outside its NUMA node {n.numa_node}",
                           (Evidence(src, None, sample),), f"pin them to node {n.numa_node}: "
                           f"set_irq_affinity_bynode.sh {n.numa_node} <iface> (or mlnx_tune), and stop irqbalance "
                           "from moving them (IRQBALANCE_BANNED_CPUS or its policy script)", subject=n.bdf))
    return out
