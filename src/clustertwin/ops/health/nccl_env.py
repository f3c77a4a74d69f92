"""Install checks that catch what breaks multi-node NCCL jobs: the NCCL environment against the node (HCAs,
interfaces, GPUDirect RDMA), IOMMU and PCIe ACS settings, and MTU mismatches between the data interfaces.

Rules and their sources (NCCL documentation, "Environment Variables" and "Troubleshooting"):

- ``NCCL_IB_HCA``: a comma-separated list of ``name[:port]``; ``^`` excludes the listed ones, ``=`` makes the
  names exact (otherwise each is a prefix: ``mlx5`` selects every ``mlx5_N``). Every name that selects nothing
  is an error (NCCL silently falls back to the other HCAs or to sockets); a selected port that is not Active
  is an error.
- ``NCCL_SOCKET_IFNAME``: the same prefix/``=``/``^`` syntax over network interfaces; a name that matches no
  interface, or only interfaces that are down, is an error (bootstrap fails or uses the wrong network).
- ``NCCL_NET_GDR_LEVEL``: ``LOC``, ``PIX``, ``PXB``, ``PHB``, ``SYS`` (or the legacy 0-5); ``LOC`` disables
  GPUDirect RDMA; GPUs whose nearest NIC is farther than the level stage traffic through host memory.
- GPUDirect RDMA needs ``nvidia_peermem`` (or dma-buf) when IB is present: see ``PEERMEM_NOT_LOADED``.
- IOMMU: "IOMMU ... can cause GPU Direct RDMA and peer-to-peer to fail or be slow"; NCCL recommends
  ``iommu=pt`` (passthrough) or the IOMMU off on bare metal (kernel command line).
- PCIe ACS: "PCI Access Control Services (ACS) ... redirect peer-to-peer traffic through the CPU root
  complex" - on bare metal ACS must be disabled on the PCIe switches (``lspci -vvv``: ``ACSCtl:`` with
  ``ReqRedir+`` or ``CmpltRedir+``); inside a VM it is required, so this is a warning.
- MTU: all data interfaces (those NCCL_SOCKET_IFNAME selects and the RoCE netdevs) should share one MTU; RoCE
  with a 4096-byte RDMA MTU needs an Ethernet MTU of at least 4200 (NVIDIA RoCE configuration guides).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from clustertwin.ops.findings import Evidence, Finding
from clustertwin.ops.health.ib import IbPort
from clustertwin.ops.health.topo import GDR_MAX_RANK, PCIE_PATH_RANK, TopoMatrix

SYSFS_NET_ROOT = Path("/sys/class/net")
GDR_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS")
"""NCCL_NET_GDR_LEVEL names, nearest first; the legacy integers 0-5 map to LOC, PIX, PXB, PHB, SYS, SYS."""
ROCE_MIN_MTU = 4200
"""Ethernet MTU for a 4096-byte RoCE path MTU (4096 payload + RoCEv2 headers)."""
_ACS_RE = re.compile(r"ACSCtl:.*\b(ReqRedir\+|CmpltRedir\+)")
_LSPCI_DEV_RE = re.compile(r"^([0-9a-fA-F:.]+)\s+(.*)$")


@dataclass(frozen=True)
class NetIf:
    name: str
    up: bool
    mtu: int | None
    source: str


def read_net(root: Path = SYSFS_NET_ROOT) -> list[NetIf]:
    """Interfaces under ``root`` (``/sys/class/net``: ``<if>/operstate``, ``<if>/mtu``), loopback left out."""
    out: list[NetIf] = []
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        if d.name == "lo":
            continue
        try:
            state = (d / "operstate").read_text().strip()
        except OSError:
            state = "unknown"
        try:
            mtu: int | None = int((d / "mtu").read_text().strip())
        except (OSError, ValueError):
            mtu = None
        out.append(NetIf(d.name, state == "up", mtu, str(d)))
    return out


def roce_netdevs(ib_root: Path | None) -> dict[str, str]:
    """netdev -> HCA for RoCE devices (``<ib root>/<hca>/device/net/<netdev>``)."""
    out: dict[str, str] = {}
    if ib_root is None or not ib_root.is_dir():
        return out
    for hca in sorted(ib_root.iterdir()):
        net = hca / "device" / "net"
        if net.is_dir():
            out.update({n.name: hca.name for n in sorted(net.iterdir())})
    return out


def parse_selector(value: str) -> tuple[bool, bool, list[tuple[str, int | None]]]:
    """(exclude, exact, [(name, port)]) of an NCCL_IB_HCA / NCCL_SOCKET_IFNAME value."""
    v = value.strip()
    exclude = v.startswith("^")
    v = v[1:] if exclude else v
    exact = v.startswith("=")
    v = v[1:] if exact else v
    items: list[tuple[str, int | None]] = []
    for part in filter(None, (p.strip() for p in v.split(","))):
        name, _, port = part.partition(":")
        items.append((name, int(port) if port.isdigit() else None))
    return exclude, exact, items


def _match(name: str, candidates: list[str], exact: bool) -> list[str]:
    return [c for c in candidates if (c == name if exact else c.startswith(name))]


def _env_ev(key: str, value: str, source: str) -> tuple[Evidence, ...]:
    return (Evidence(source, None, f"{key}={value}"),)


def ib_hca_findings(env: Mapping[str, str], ports: list[IbPort], source: str = "environment") -> list[Finding]:
    """NCCL_IB_HCA against the HCAs present (see the module docstring)."""
    value = env.get("NCCL_IB_HCA")
    if not value:
        return []
    exclude, exact, items = parse_selector(value)
    hcas = sorted({p.hca for p in ports})
    out: list[Finding] = []
    if exclude:
        return out
    for name, port in items:
        found = _match(name, hcas, exact)
        if not found:
            out.append(Finding("error", "NCCL_IB_HCA_MISSING", f"NCCL_IB_HCA names '{name}', which matches no HCA "
                               f"on this node (present: {', '.join(hcas) or 'none'})", _env_ev("NCCL_IB_HCA", value,
                               source), "fix NCCL_IB_HCA (ibv_devices lists the names) or the missing HCA's driver; "
                               "NCCL otherwise uses the remaining HCAs or falls back to sockets", subject=name))
            continue
        for p in ports:
            if p.hca in found and (port is None or p.port == port) and p.state.lower() != "active":
                out.append(Finding("error", "NCCL_IB_HCA_DOWN", f"NCCL_IB_HCA selects {p.name}, which is {p.state} "
                                   f"({p.phys_state})", (*_env_ev("NCCL_IB_HCA", value, source),
                                   Evidence(p.source, p.line, f"{p.name}: State {p.state}")),
                                   "bring the port up (cable, subnet manager) or leave it out of NCCL_IB_HCA",
                                   subject=p.name))
    return out


def socket_ifname_findings(env: Mapping[str, str], nics: list[NetIf], source: str = "environment") -> list[Finding]:
    """NCCL_SOCKET_IFNAME against the interfaces present."""
    value = env.get("NCCL_SOCKET_IFNAME")
    if not value:
        return []
    exclude, exact, items = parse_selector(value)
    if exclude:
        return []
    names = [n.name for n in nics]
    out: list[Finding] = []
    for name, _ in items:
        found = [n for n in nics if n.name in _match(name, names, exact)]
        if not found:
            out.append(Finding("error", "NCCL_SOCKET_IFNAME_MISSING", f"NCCL_SOCKET_IFNAME names '{name}', which "
                               f"matches no interface (present: {', '.join(names) or 'none'})",
                               _env_ev("NCCL_SOCKET_IFNAME", value, source), "set it to the interface of the "
                               "cluster network ('ip -br link'); NCCL's bootstrap fails with 'no socket interface "
                               "found'", subject=name))
        elif not any(n.up for n in found):
            out.append(Finding("error", "NCCL_SOCKET_IFNAME_DOWN", f"NCCL_SOCKET_IFNAME '{name}' matches only "
                               f"interfaces that are down ({', '.join(n.name for n in found)})",
                               (*_env_ev("NCCL_SOCKET_IFNAME", value, source),
                                *(Evidence(n.source, None, f"{n.name}: operstate down") for n in found)),
                               "bring the interface up or point NCCL_SOCKET_IFNAME at one that is", subject=name))
    return out


def gdr_level(value: str) -> str | None:
    """NCCL_NET_GDR_LEVEL as a path name (``2`` -> ``PXB``); None when invalid."""
    v = value.strip().upper()
    if v in GDR_LEVELS:
        return v
    if v.isdigit() and int(v) <= 5:
        return GDR_LEVELS[min(int(v), 4)]
    return None


def gdr_findings(env: Mapping[str, str], topo: TopoMatrix | None, modules: set[str] | None,
                 ib_present: bool, source: str = "environment") -> list[Finding]:
    """NCCL_NET_GDR_LEVEL: valid, not LOC when IB is present, consistent with peermem and the topology."""
    value = env.get("NCCL_NET_GDR_LEVEL")
    if not value:
        return []
    level = gdr_level(value)
    ev = _env_ev("NCCL_NET_GDR_LEVEL", value, source)
    if level is None:
        return [Finding("error", "NCCL_GDR_LEVEL_INVALID", f"NCCL_NET_GDR_LEVEL={value} is not a level "
                        f"({', '.join(GDR_LEVELS)} or 0-5)", ev, "unset it (NCCL picks PXB) or use a level name")]
    out: list[Finding] = []
    if level == "LOC" and ib_present:
        out.append(Finding("warning", "NCCL_GDR_DISABLED", "NCCL_NET_GDR_LEVEL=LOC disables GPUDirect RDMA on a "
                           "node with RDMA NICs: every message is staged through host memory", ev,
                           "unset NCCL_NET_GDR_LEVEL unless GDR is known broken here (then fix peermem/IOMMU/ACS)"))
    if level != "LOC" and ib_present and modules is not None and "nvidia" in modules \
            and "nvidia_peermem" not in modules:
        out.append(Finding("warning", "NCCL_GDR_WITHOUT_PEERMEM", f"NCCL_NET_GDR_LEVEL={value} asks for GPUDirect "
                           "RDMA but nvidia_peermem is not loaded", ev, "modprobe nvidia_peermem, or make sure "
                           "the kernel, driver and NCCL support dma-buf (NCCL_DEBUG=INFO: 'DMABUF')"))
    if topo is not None and level != "LOC":
        rank = PCIE_PATH_RANK[level]
        far = [(g, path) for g in topo.gpus for path in [topo.nearest_nics(g)[1]]
               if path is not None and PCIE_PATH_RANK.get(path, 9) > rank]
        if far and rank != GDR_MAX_RANK:  # at the default level topo_findings' GPU_NIC_AFFINITY says it
            out.append(Finding("info", "NCCL_GDR_NOT_USED", f"{len(far)} GPU(s) have no NIC within "
                               f"NCCL_NET_GDR_LEVEL={level}: {', '.join(f'{g} ({p})' for g, p in far[:8])}",
                               ev, "their traffic goes through host memory; raise the level only if P2P across "
                               "that path is known to be fast (PHB/SYS usually are not)"))
    return out


def iommu_findings(cmdline: str | None, source: str = "/proc/cmdline") -> list[Finding]:
    """IOMMU translation on (``intel_iommu=on`` / ``amd_iommu=on`` without ``iommu=pt``)."""
    if cmdline is None:
        return []
    words = cmdline.split()
    on = [w for w in words if w in ("intel_iommu=on", "amd_iommu=on", "iommu=force", "iommu.passthrough=0")]
    if on and not any(w in ("iommu=pt", "iommu.passthrough=1") for w in words):
        return [Finding("warning", "IOMMU_TRANSLATING", f"IOMMU translation is on ({' '.join(on)}) without "
                        "passthrough: GPUDirect RDMA and GPU peer-to-peer can fail or slow down",
                        (Evidence(source, 1, cmdline.strip()[:300]),), "on bare metal add iommu=pt to the "
                        "kernel command line (or turn the IOMMU off) and reboot; keep it in VMs with passthrough")]
    return []


def acs_findings(lspci: str | None, source: str = "lspci -vvv") -> list[Finding]:
    """PCIe bridges with ACS redirection enabled (``ACSCtl: ... ReqRedir+``) in saved ``lspci -vvv`` output."""
    if lspci is None:
        return []
    device, bad = "", []
    for i, raw in enumerate(lspci.splitlines(), 1):
        if m := _LSPCI_DEV_RE.match(raw):
            device = m.group(1)
        elif _ACS_RE.search(raw):
            bad.append(Evidence(source, i, f"{device}: {raw.strip()}"))
    if not bad:
        return []
    return [Finding("warning", "PCIE_ACS_ENABLED", f"PCIe ACS redirection enabled on {len(bad)} bridge(s): GPU "
                    "peer-to-peer and GPUDirect RDMA traffic is sent up to the root complex", tuple(bad[:10]),
                    "on bare metal disable ACS in the BIOS (or 'setpci -s BDF ECAP_ACS+6.w=0000' at boot); "
                    "inside a VM ACS is required, leave it")]


def mtu_findings(nics: list[NetIf], env: Mapping[str, str], roce: Mapping[str, str]) -> list[Finding]:
    """MTU mismatch between the data interfaces (NCCL_SOCKET_IFNAME's and the RoCE netdevs), RoCE below 4200."""
    names = [n.name for n in nics]
    data = set(roce) & set(names)
    value = env.get("NCCL_SOCKET_IFNAME", "")
    exclude, exact, items = parse_selector(value) if value else (True, False, [])
    if not exclude:
        for name, _ in items:
            data.update(_match(name, names, exact))
    chosen = [n for n in nics if n.name in data and n.up and n.mtu is not None]
    out: list[Finding] = []
    mtus = sorted({n.mtu for n in chosen if n.mtu is not None})
    if len(mtus) > 1:
        out.append(Finding("warning", "MTU_MISMATCH", f"data interfaces disagree on MTU: "
                           f"{', '.join(f'{n.name}={n.mtu}' for n in chosen)}",
                           tuple(Evidence(n.source, None, f"{n.name}: mtu {n.mtu}") for n in chosen[:10]),
                           "set one MTU on every data interface and the switch ports (e.g. 9000 for RoCE); a "
                           "path with a smaller MTU drops the larger frames"))
    for n in chosen:
        if n.name in roce and n.mtu is not None and n.mtu < ROCE_MIN_MTU:
            out.append(Finding("warning", "ROCE_MTU_LOW", f"RoCE netdev {n.name} ({roce[n.name]}) has MTU {n.mtu}: "
                               f"below {ROCE_MIN_MTU} the RDMA path MTU drops from 4096 to 1024/2048",
                               (Evidence(n.source, None, f"{n.name}: mtu {n.mtu}"),), "ip link set dev "
                               f"{n.name} mtu 9000 (and the switch ports), then check 'ibv_devinfo -v' active_mtu",
                               subject=n.name))
    return out


def env_from_file(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines (``env`` / ``export`` output, a job's environment dump); other lines ignored."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        s = raw.strip().removeprefix("export ").strip()
        key, sep, value = s.partition("=")
        if sep and re.fullmatch(r"[A-Za-z_]\w*", key):
            out[key] = value.strip().strip("'\"")
    return out


def install_findings(env: Mapping[str, str], env_source: str, ports: list[IbPort], nics: list[NetIf],
                     roce: Mapping[str, str], topo: TopoMatrix | None, modules: set[str] | None,
                     cmdline: tuple[str, str] | None, lspci: tuple[str, str] | None) -> list[Finding]:
    """Every check of this module; ``cmdline`` and ``lspci`` are (text, source) or None when not read."""
    out = ib_hca_findings(env, ports, env_source)
    if nics:
        out += socket_ifname_findings(env, nics, env_source)
        out += mtu_findings(nics, env, roce)
    out += gdr_findings(env, topo, modules, bool(ports), env_source)
    out += iommu_findings(*cmdline) if cmdline else []
    out += acs_findings(*lspci) if lspci else []
    return out
