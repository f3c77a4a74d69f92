"""The host around the GPUs: OS, kernel, CPU, memory, NICs, file systems, container runtime and the
CUDA/NCCL versions torch was built with. Read from /proc, /etc/os-release and psutil; nothing here needs
root or a GPU."""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import dataclass, field
from pathlib import Path

import psutil

VIRTUAL_FS = frozenset({"tmpfs", "devtmpfs", "overlay", "squashfs", "proc", "sysfs", "cgroup", "cgroup2",
                        "devpts", "mqueue", "autofs", "fuse.lxcfs", "nsfs", "tracefs", "debugfs"})
"""File-system types that are not storage (skipped in the storage list; overlay is the container root)."""
MBIT = 1e6
"""psutil reports NIC speed in Mbit/s."""


@dataclass(frozen=True)
class NicInfo:
    name: str
    is_up: bool
    speed_gbit_per_s: float | None
    """Link speed; None when the driver does not report one (virtual NICs, loopback)."""
    mtu: int
    addresses: tuple[str, ...]


@dataclass(frozen=True)
class DiskInfo:
    mountpoint: str
    device: str
    fstype: str
    total_bytes: int
    free_bytes: int


@dataclass
class HostInfo:
    hostname: str
    os_name: str
    kernel: str
    cpu_model: str
    sockets: int
    logical_cpus: int
    physical_cores: int | None
    memory_total_bytes: int
    container_runtime: str
    """docker, podman, kubernetes, containerd, lxc or none."""
    torch_version: str | None = None
    torch_cuda_version: str | None = None
    """CUDA runtime torch was built with (torch.version.cuda)."""
    nccl_version: str | None = None
    rocm_version: str | None = None
    """Installed ROCm (``/opt/rocm/.info/version``)."""
    cann_version: str | None = None
    """Installed Ascend CANN toolkit (``ascend_toolkit_install.info``: ``version=8.0.RC2``)."""
    nics: list[NicInfo] = field(default_factory=list)
    disks: list[DiskInfo] = field(default_factory=list)
    cpu_flags: frozenset[str] = frozenset()


def read_cpuinfo(path: Path = Path("/proc/cpuinfo")) -> tuple[str, int, frozenset[str]]:
    model, sockets, flags = platform.processor() or platform.machine(), set(), frozenset()
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "Model") and model in ("", platform.machine(), platform.processor()):
                model = value.strip()
            elif key == "physical id":
                sockets.add(value.strip())
            elif key in ("flags", "Features") and not flags:
                flags = frozenset(value.split())
    except OSError:
        pass
    return model, max(len(sockets), 1), flags


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.platform()


def container_runtime() -> str:
    """Which container runtime this process runs under, from the marker files and cgroup paths they leave."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    if Path("/.dockerenv").exists():
        return "docker"
    if Path("/run/.containerenv").exists():
        return "podman"
    try:
        cgroup = Path("/proc/1/cgroup").read_text()
    except OSError:
        cgroup = ""
    for marker, name in (("kubepods", "kubernetes"), ("docker", "docker"), ("containerd", "containerd"),
                         ("lxc", "lxc"), ("libpod", "podman")):
        if marker in cgroup:
            return name
    return "none"


def torch_versions() -> tuple[str | None, str | None, str | None]:
    """(torch, CUDA runtime, NCCL) versions, or None where torch or CUDA is absent."""
    try:
        import torch
    except ImportError:
        return None, None, None
    nccl = None
    if torch.cuda.is_available():
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        except (RuntimeError, AttributeError):
            nccl = None
    return torch.__version__, torch.version.cuda, nccl


ROCM_VERSION_FILE = Path("/opt/rocm/.info/version")
CANN_INFO_GLOB = "/usr/local/Ascend/ascend-toolkit/latest/*/ascend_toolkit_install.info"


def accelerator_stacks(rocm_file: Path = ROCM_VERSION_FILE,
                       cann_glob: str = CANN_INFO_GLOB) -> tuple[str | None, str | None]:
    """(ROCm version, CANN version) from their install files; None where not installed."""
    import glob

    rocm = cann = None
    if rocm_file.is_file():
        rocm = rocm_file.read_text(encoding="utf-8", errors="replace").strip().split("-")[0] or None
    for info in sorted(glob.glob(cann_glob)):
        try:
            for line in Path(info).read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("version="):
                    cann = line.split("=", 1)[1].strip()
        except OSError:
            continue
    return rocm, cann


def host_info() -> HostInfo:
    model, sockets, flags = read_cpuinfo()
    stats = psutil.net_if_stats()
    nics = []
    for name, addrs in sorted(psutil.net_if_addrs().items()):
        st = stats.get(name)
        speed = st.speed * MBIT / 1e9 if st and st.speed else None
        nics.append(NicInfo(name, bool(st and st.isup), speed, st.mtu if st else 0,
                            tuple(a.address for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6))))
    disks = []
    for part in psutil.disk_partitions(all=False):
        if part.fstype in VIRTUAL_FS:
            continue
        try:
            usage = psutil.disk_usage(part.mountpoint)
        except OSError:
            continue
        disks.append(DiskInfo(part.mountpoint, part.device, part.fstype, usage.total, usage.free))
    tv, cv, nv = torch_versions()
    rocm, cann = accelerator_stacks()
    return HostInfo(
        hostname=socket.gethostname(), os_name=_os_name(), kernel=platform.release(), cpu_model=model,
        sockets=sockets, logical_cpus=psutil.cpu_count(logical=True) or 1,
        physical_cores=psutil.cpu_count(logical=False), memory_total_bytes=psutil.virtual_memory().total,
        container_runtime=container_runtime(), torch_version=tv, torch_cuda_version=cv, nccl_version=nv,
        rocm_version=rocm, cann_version=cann, nics=nics, disks=disks, cpu_flags=flags)
