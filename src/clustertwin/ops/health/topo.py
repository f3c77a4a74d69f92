"""Parser for ``nvidia-smi topo -m``: the GPU/NIC connection matrix, CPU/NUMA affinity and the NIC legend,
and findings on it (a GPU pair without NVLink where the others have it; a GPU with no NIC near it).

Legend (nvidia-smi): ``X`` self; ``NV#`` a bonded set of # NVLinks; ``PIX`` at most one PCIe bridge;
``PXB`` several PCIe bridges without the host bridge; ``PHB`` through a PCIe host bridge (the CPU);
``NODE`` across host bridges within a NUMA node; ``SYS`` across the inter-socket link (QPI/UPI/xGMI).
GPUDirect RDMA (NCCL ``NCCL_NET_GDR_LEVEL``) is used by default up to PXB; at PHB/NODE/SYS traffic is
staged through host memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clustertwin.errors import SpecError
from clustertwin.ops.findings import Evidence, Finding

PCIE_PATH_RANK: dict[str, int] = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}
"""PCIe path types, nearest first."""
GDR_MAX_RANK = PCIE_PATH_RANK["PXB"]
"""Farthest path at which NCCL uses GPUDirect RDMA by default (NCCL_NET_GDR_LEVEL default PXB)."""
_DEVICE_RE = re.compile(r"^(GPU|NIC|mlx5_|NVSwitch)\S*$")
_NIC_LEGEND_RE = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")
_NV_RE = re.compile(r"^NV(\d+)$")


@dataclass
class TopoMatrix:
    """``nvidia-smi topo -m`` parsed."""

    devices: list[str]
    """Row/column names in order (``GPU0`` ... ``NIC0`` ...)."""
    links: dict[tuple[str, str], str]
    """(row, column) -> connection type (``NV18``, ``PXB``, ``SYS`` ...); the diagonal is omitted."""
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)
    """``NIC0`` -> ``mlx5_0`` from the NIC legend."""
    lines: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Row name -> (1-based line number, text) for evidence."""

    @property
    def gpus(self) -> list[str]:
        return [d for d in self.devices if d.startswith("GPU")]

    @property
    def nics(self) -> list[str]:
        return [d for d in self.devices if not d.startswith("GPU")]

    def nvlinks(self, a: str, b: str) -> int:
        """Number of bonded NVLinks between two devices (0 when the path is PCIe)."""
        m = _NV_RE.match(self.links.get((a, b), ""))
        return int(m.group(1)) if m else 0

    def nearest_nics(self, gpu: str) -> tuple[list[str], str | None]:
        """The NICs on the nearest PCIe path from ``gpu`` and that path type."""
        paths = [(PCIE_PATH_RANK.get(self.links.get((gpu, n), ""), len(PCIE_PATH_RANK)), n) for n in self.nics]
        if not paths:
            return [], None
        best = min(p for p, _ in paths)
        kind = next((k for k, r in PCIE_PATH_RANK.items() if r == best), None)
        return [n for p, n in paths if p == best], kind

    def nic_label(self, nic: str) -> str:
        return self.nic_names.get(nic, nic)


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Parse ``nvidia-smi topo -m``. The header lists device columns then affinity columns; rows are
    tab-separated (cells may carry padding and empty cells before the affinity fields)."""
    lines = text.splitlines()
    header_i = next((i for i, ln in enumerate(lines) if "\t" in ln and re.search(r"\bGPU0\b", ln)), None)
    if header_i is None:
        raise SpecError("not an 'nvidia-smi topo -m' matrix (no header row naming GPU0)")
    header = [c.strip() for c in lines[header_i].split("\t") if c.strip()]
    devices = [c for c in header if _DEVICE_RE.match(c)]
    extra_cols = header[len(devices):]
    topo = TopoMatrix(devices=devices, links={})
    for i in range(header_i + 1, len(lines)):
        raw = lines[i]
        cells = raw.split("\t")
        name = cells[0].strip()
        if name not in devices:
            if raw.strip().startswith("Legend"):
                break
            continue
        values = [c.strip() for c in cells[1:]]
        for col, value in zip(devices, values[:len(devices)], strict=False):
            if col != name and value:
                topo.links[(name, col)] = value
        rest = [v for v in values[len(devices):] if v]
        for col, value in zip(extra_cols, rest, strict=False):
            if col == "CPU Affinity":
                topo.cpu_affinity[name] = value
            elif col == "NUMA Affinity":
                topo.numa_affinity[name] = value
        topo.lines[name] = (i + 1, raw.strip())
    for raw in lines:
        m = _NIC_LEGEND_RE.match(raw)
        if m:
            topo.nic_names[m.group(1)] = m.group(2)
    return topo


def topo_findings(topo: TopoMatrix, file: str = "nvidia-smi topo -m") -> list[Finding]:
    """NVLink gaps (a GPU pair on PCIe while the node's usual pair count is NVLink) and GPU-NIC affinity
    beyond GPUDirect RDMA range (nearest NIC at PHB/NODE/SYS)."""
    out: list[Finding] = []
    gpus = topo.gpus

    def ev(*rows: str) -> tuple[Evidence, ...]:
        return tuple(Evidence(file, topo.lines[r][0], topo.lines[r][1]) for r in rows if r in topo.lines)

    counts = [topo.nvlinks(a, b) for a in gpus for b in gpus if a < b]
    typical = max(counts, default=0)
    if typical:
        for a in gpus:
            for b in gpus:
                if a < b and topo.nvlinks(a, b) < typical:
                    got = topo.links.get((a, b), "?")
                    out.append(Finding(
                        "error", "NVLINK_MISSING", f"{a}-{b} connected by {got}, other GPU pairs by NV{typical}",
                        ev(a, b), "check 'nvidia-smi nvlink -s' for inactive links and Fabric Manager state; "
                        "reset the GPUs or reboot; reseat/RMA if links stay down", subject=f"{a}-{b}"))
    if topo.nics:
        for g in gpus:
            nics, kind = topo.nearest_nics(g)
            if kind is not None and PCIE_PATH_RANK[kind] > GDR_MAX_RANK:
                labels = ", ".join(topo.nic_label(n) for n in nics)
                out.append(Finding(
                    "warning", "GPU_NIC_AFFINITY", f"{g}: nearest NIC ({labels}) is {kind}, beyond GPUDirect "
                    "RDMA range (PXB)", ev(g),
                    "expected on PCIe-switchless hosts; on rail-optimised nodes check the NIC/GPU slot "
                    "population and NCCL_IB_HCA mapping", subject=g))
    return out
