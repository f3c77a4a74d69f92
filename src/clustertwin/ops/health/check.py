"""``node check``: one pass over a node's GPUs, topology, kernel log, InfiniBand ports and host.

GPU state comes from NVML when it starts, else from ``nvidia-smi -q``; saved outputs of ``nvidia-smi -q``,
``nvidia-smi topo -m``, ``ibstat``, a sysfs copy and a kernel log can be checked instead of the live node
(``node check --smi-q FILE ...``). Every finding names its evidence and an action.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from clustertwin.errors import SpecError
from clustertwin.ops.diagnosis.diag import STRESS_S, DiagResult, gpu_levels, parse_dcgmi_json, run_dcgmi
from clustertwin.ops.findings import Evidence, Finding, sort_findings, worst
from clustertwin.ops.health import container_run as ctrun
from clustertwin.ops.health import ib as ibmod
from clustertwin.ops.health import nccl_env as ncclenv
from clustertwin.ops.health.compat import accelerator_findings, stack_findings
from clustertwin.ops.health.container import ContainerReport, check_containers, image_cuda_findings
from clustertwin.ops.health.gpu import GpuInfo, catalog_gpu_id
from clustertwin.ops.health.gpu_health import gpu_findings, node_expectation_findings
from clustertwin.ops.health.host import HostInfo, host_info
from clustertwin.ops.health.irq_affinity import irq_findings
from clustertwin.ops.health.netloss import sample_live
from clustertwin.ops.health.nvml import NvmlBackend, NvmlUnavailable
from clustertwin.ops.health.smi import parse_nvidia_smi_q, parse_nvlink_status, run_nvidia_smi
from clustertwin.ops.health.topo import TopoMatrix, parse_topo_matrix, topo_findings
from clustertwin.ops.health.xid import XidEvent, count_malformed_xid, parse_kernel_log, xid_findings
from clustertwin.ops.telemetry.port_exporter import run_ethtool
from clustertwin.units import pcie_x16_gb_per_s

FABRIC_MANAGER_UNIT = "nvidia-fabricmanager"
PEERMEM_MODULE = "nvidia_peermem"
"""Kernel module for GPUDirect RDMA with MLNX_OFED/inbox verbs (NCCL's net plugin uses dma-buf on newer kernels
and drivers, so it is a warning, not an error)."""


KERNEL_LOG_TIMEOUT_S = 30.0


def read_text(path: str | Path) -> str:
    """A user-supplied file's text; a missing or unreadable file is a SpecError (exit 2)."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise SpecError(f"cannot read {p}: {e.strerror or e}") from None


@dataclass
class CheckReport:
    """Everything ``node check`` found."""

    host: HostInfo | None
    """Live host facts; None with ``live=False`` (only the given files are read)."""
    gpu_source: str | None
    """nvml, nvidia-smi, a file name, or None when no GPU source worked."""
    gpu_source_note: str
    driver_version: str | None
    cuda_driver_version: str | None
    gpus: list[GpuInfo]
    gpu_catalog_ids: list[str | None]
    topology: TopoMatrix | None
    ib_ports: list[ibmod.IbPort]
    xid_events: list[XidEvent]
    kernel_log_source: str | None
    findings: list[Finding] = field(default_factory=list)
    diag: DiagResult | None = None
    """DCGM-style level 2/3 GPU tests and dcgmi diag results (``level`` > 1 or a saved dcgmi file)."""
    containers: ContainerReport | None = None
    """NVIDIA Container Toolkit, CDI specs and engines (live, or a saved root given)."""

    @property
    def worst(self) -> str | None:
        return worst(self.findings)


def _loaded_modules(modules: Path | None, live: bool) -> set[str] | None:
    """Kernel modules from a saved ``lsmod``/``/proc/modules`` file, or the live /proc/modules; None if neither."""
    if modules is not None:
        text = read_text(modules)
    elif live and Path("/proc/modules").exists():
        text = Path("/proc/modules").read_text(encoding="utf-8", errors="replace")
    else:
        return None
    return {ln.split()[0] for ln in text.splitlines() if ln.strip() and not ln.startswith("Module ")}


def _unit_active(unit: str) -> str | None:
    exe = shutil.which("systemctl")
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "is-active", unit], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() or None


def service_findings(gpus: list[GpuInfo], *, ports_present: bool, modules: Path | None,
                     live: bool) -> list[Finding]:
    """Fabric Manager on NVSwitch systems (live: ``systemctl is-active``) and nvidia-peermem for GPUDirect RDMA
    (live /proc/modules or a saved ``lsmod``)."""
    out: list[Finding] = []
    if not gpus:
        return out
    nvswitch = any(g.fabric_state not in (None, "Not Supported") for g in gpus)
    if nvswitch and live:
        state = _unit_active(FABRIC_MANAGER_UNIT)
        if state is not None and state != "active":
            out.append(Finding("error", "FABRIC_MANAGER_DOWN", f"{FABRIC_MANAGER_UNIT} is {state} on an NVSwitch "
                               "system", (Evidence("systemctl is-active", None, f"{FABRIC_MANAGER_UNIT}: {state}"),),
                               f"systemctl enable --now {FABRIC_MANAGER_UNIT} (its version must match the driver); "
                               "without it CUDA cannot use the NVLink fabric"))
    loaded = _loaded_modules(modules, live)
    if loaded is not None and (ports_present or modules is not None) and "nvidia" in loaded \
            and PEERMEM_MODULE not in loaded:
        src = str(modules) if modules is not None else "/proc/modules"
        out.append(Finding("warning", "PEERMEM_NOT_LOADED", "nvidia_peermem is not loaded: GPUDirect RDMA needs it "
                           "(or dma-buf support in kernel, driver and NCCL)", (Evidence(src, None, "nvidia loaded, "
                           "nvidia_peermem absent"),), "modprobe nvidia_peermem (and add it to /etc/modules-load.d); "
                           "check NCCL_DEBUG=INFO for 'GPU Direct RDMA Enabled'"))
    return out


def read_kernel_log() -> tuple[list[str] | None, str]:
    """The kernel log via ``dmesg -T`` or ``journalctl -k -b``; (None, reason) when neither is readable."""
    reasons = []
    for cmd in (["dmesg", "-T"], ["journalctl", "-k", "-b", "--no-pager", "-q"]):
        exe = shutil.which(cmd[0])
        if exe is None:
            reasons.append(f"{cmd[0]} not found")
            continue
        try:
            proc = subprocess.run([exe, *cmd[1:]], capture_output=True, text=True, errors="replace",
                                  timeout=KERNEL_LOG_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            reasons.append(f"{cmd[0]}: {e}")
            continue
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout.splitlines(), " ".join(cmd)
        reasons.append(f"{cmd[0]}: {proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else 'no output'}")
    return None, "; ".join(reasons)


def _gpus_live() -> tuple[str | None, str, str | None, str | None, list[GpuInfo]]:
    """(source, note, driver, cuda driver version, gpus): NVML first, nvidia-smi -q second."""
    try:
        nv = NvmlBackend()
    except NvmlUnavailable as e:
        nvml_note = str(e)
    else:
        try:
            gpus = nv.gpus()
            return "nvml", "NVML", nv.driver_version(), nv.cuda_driver_version(), gpus
        finally:
            nv.close()
    text = run_nvidia_smi("-q")
    if text is None:
        return None, f"NVML: {nvml_note}; nvidia-smi: not found or failed", None, None, []
    rep = parse_nvidia_smi_q(text)
    links = run_nvidia_smi("nvlink", "-s")
    if links:
        for idx, states in parse_nvlink_status(links).items():
            if idx < len(rep.gpus):
                rep.gpus[idx].nvlink_active = states
    return "nvidia-smi -q", f"nvidia-smi -q (NVML: {nvml_note})", rep.driver_version, rep.cuda_version, rep.gpus


def check_node(*, smi_q: Path | None = None, topo: Path | None = None, kernel_log: Path | None = None,
               ibstat: Path | None = None, perfquery: dict[str, Path] | None = None,
               sysfs_ib: Path | None = None, expect_node: str | None = None, live: bool = True,
               modules: Path | None = None, level: int = 1, dcgmi_json: Path | None = None,
               stress_s: float = STRESS_S, install: InstallInputs | None = None,
               containers: ContainerInputs | None = None, sample_counters_s: float = 0.0) -> CheckReport:
    """Run every check. Saved outputs given as paths replace the live source for that part; with
    ``live=False`` nothing is read from the running system (no host facts either), only the given files.
    ``install`` names saved inputs of the NCCL-environment/IOMMU/ACS/MTU checks (:mod:`clustertwin.ops.health.nccl_env`)."""
    findings: list[Finding] = []
    host = host_info() if live else None
    if smi_q is not None:
        rep = parse_nvidia_smi_q(read_text(smi_q), str(smi_q))
        source, note, driver, cuda_drv, gpus = str(smi_q), f"saved nvidia-smi -q ({smi_q.name})", \
            rep.driver_version, rep.cuda_version, rep.gpus
    elif live:
        source, note, driver, cuda_drv, gpus = _gpus_live()
    else:
        source, note, driver, cuda_drv, gpus = None, "not read (no live checks, no saved output)", None, None, []
    if not gpus:
        findings.append(Finding("info", "NO_GPU", "no NVIDIA GPU found on this node; host facts only",
                                (Evidence("gpu sources", None, note),),
                                "none on a CPU-only node; on a GPU node check that the driver is loaded "
                                "(lsmod | grep nvidia) and 'lspci | grep -i nvidia'"))
    findings += gpu_findings(gpus, source or "gpu")
    if expect_node:
        findings += node_expectation_findings(gpus, expect_node)
    if host is not None:
        findings += stack_findings(driver, host.torch_version, host.torch_cuda_version,
                                   [catalog_gpu_id(g.name) for g in gpus], host.nccl_version, "torch/driver")
        findings += accelerator_findings([catalog_gpu_id(g.name) for g in gpus], host.rocm_version,
                                         host.cann_version, "ROCm/CANN")

    tm: TopoMatrix | None = None
    if topo is not None:
        tm = parse_topo_matrix(read_text(topo))
    elif live and gpus:
        text = run_nvidia_smi("topo", "-m")
        tm = parse_topo_matrix(text) if text else None
    if tm is not None:
        findings += topo_findings(tm, str(topo) if topo else "nvidia-smi topo -m")
    events: list[XidEvent] = []
    if kernel_log is not None:
        lines, klog_source = read_text(kernel_log).splitlines(), str(kernel_log)
    elif live:
        lines, klog_source = read_kernel_log()
        if lines is None:
            findings.append(Finding("info", "KERNEL_LOG_UNREADABLE", "kernel log not readable; Xid events "
                                    "not checked", (Evidence("kernel log", None, klog_source),),
                                    "run as root or with CAP_SYSLOG, or pass --kernel-log FILE"))
            klog_source = None
    else:
        lines, klog_source = None, None
    if lines is not None and klog_source is not None:
        events, fell = parse_kernel_log(lines)
        findings += xid_findings(events, fell, klog_source)
        bad = count_malformed_xid(lines)
        if bad:
            findings.append(Finding("info", "MALFORMED_LINES", f"{bad} kernel-log lines mention an Xid but do "
                                    "not parse", (Evidence(klog_source, None, f"{bad} lines"),),
                                    "check the log for truncated lines"))
    ports: list[ibmod.IbPort] = []
    if ibstat is not None:
        ports = ibmod.parse_ibstat(read_text(ibstat), str(ibstat))
    elif sysfs_ib is not None:
        ports = ibmod.read_sysfs(sysfs_ib)
    elif live:
        ports = ibmod.read_sysfs()
    for hca_port, path in (perfquery or {}).items():
        counters = ibmod.parse_perfquery(read_text(path), str(path))
        for p in ports:
            if p.name == hca_port or p.hca == hca_port:
                p.counters.update(counters)
                p.source = str(path)
    findings += ibmod.ib_findings(ports)
    findings += service_findings(gpus, ports_present=bool(ports), modules=modules, live=live)
    findings += _install(install or InstallInputs(), ports, tm, _loaded_modules(modules, live), sysfs_ib, live)
    diag = None
    if level > 1 or dcgmi_json is not None:
        diag = _diag(level, gpus, live, dcgmi_json, stress_s)
        findings += diag.findings
    if live and sample_counters_s > 0:  # packet loss / congestion: two samples of every port's counters
        root = sysfs_ib or ibmod.SYSFS_IB_ROOT
        findings += sample_live(root, sorted(ncclenv.roce_netdevs(root)), sample_counters_s, run_ethtool)
    ct, ct_findings = _containers(containers or ContainerInputs(), live, gpus, driver, level)
    findings += ct_findings
    return CheckReport(host, source, note, driver, cuda_drv, gpus, [catalog_gpu_id(g.name) for g in gpus], tm,
                       ports, events, klog_source, sort_findings(findings), diag, ct)


@dataclass(frozen=True)
class InstallInputs:
    """Saved inputs of the install checks; each None part is read live (or skipped with ``live=False``)."""

    nccl_env: Path | None = None
    """``KEY=VALUE`` lines (a job's ``env`` dump); live: this process's environment."""
    sysfs_net: Path | None = None
    """A copy of /sys/class/net (``<if>/operstate``, ``<if>/mtu``)."""
    cmdline: Path | None = None
    """A saved /proc/cmdline."""
    lspci: Path | None = None
    """Saved ``lspci -vvv`` (as root: ACS capabilities); never run live."""
    irq_root: Path | None = None
    """A copy of /proc/interrupts, /proc/irq/*/smp_affinity_list and the NUMA sysfs files (IRQ affinity)."""


def _install(inp: InstallInputs, ports: list[ibmod.IbPort], tm: TopoMatrix | None, modules: set[str] | None,
             sysfs_ib: Path | None, live: bool) -> list[Finding]:
    if inp.nccl_env is not None:
        env, env_src = ncclenv.env_from_file(read_text(inp.nccl_env)), str(inp.nccl_env)
    else:
        env, env_src = ({k: v for k, v in os.environ.items() if k.startswith("NCCL_")} if live else {}), "environment"
    net_root = inp.sysfs_net or (ncclenv.SYSFS_NET_ROOT if live else None)
    nics = ncclenv.read_net(net_root) if net_root is not None else []
    ib_root = sysfs_ib or (ibmod.SYSFS_IB_ROOT if live else None)
    cmd_path = inp.cmdline or (Path("/proc/cmdline") if live and Path("/proc/cmdline").exists() else None)
    cmdline = (read_text(cmd_path), str(cmd_path)) if cmd_path is not None else None
    lspci = (read_text(inp.lspci), str(inp.lspci)) if inp.lspci is not None else None
    irq_root = inp.irq_root or (Path("/") if live else None)
    return ncclenv.install_findings(env, env_src, ports, nics, ncclenv.roce_netdevs(ib_root), tm, modules,
                                    cmdline, lspci) + (irq_findings(irq_root) if irq_root is not None else [])


@dataclass(frozen=True)
class ContainerInputs:
    """Saved inputs of the container-runtime checks (:mod:`clustertwin.ops.health.container`)."""

    root: Path | None = None
    """A copy of the files under / that the checks read (etc/cdi, var/run/cdi, etc/containerd, ...)."""
    ctk_version: Path | None = None
    """Saved ``nvidia-ctk --version``."""
    docker_info: Path | None = None
    """Saved ``docker info --format json``."""
    image: str | None = None
    """Image for the level-3 container run (live only)."""
    engine: str | None = None
    image_cuda: str | None = None
    """The image's CUDA version (read from the image live) for the forward-compat check."""


def _containers(inp: ContainerInputs, live: bool, gpus: list[GpuInfo], driver: str | None,
                level: int) -> tuple[ContainerReport | None, list[Finding]]:
    gpu_count = len(gpus)
    if inp.root is None and inp.ctk_version is None and inp.docker_info is None and inp.image_cuda is None \
            and not live:
        return None, []
    rep = check_containers(inp.root or (Path("/") if live else None), live=live and inp.root is None,
                           ctk_version_text=read_text(inp.ctk_version) if inp.ctk_version else None,
                           docker_info=read_text(inp.docker_info) if inp.docker_info else None,
                           gpu_count=gpu_count, driver=driver)
    found = list(rep.findings)
    engine = ctrun.pick_engine(inp.engine) if live else None
    cuda = inp.image_cuda or (ctrun.image_cuda(engine, inp.image) if engine and inp.image else None)
    found += image_cuda_findings(driver, cuda, [catalog_gpu_id(g.name) for g in gpus], inp.image or "")
    if level >= 3 and live:
        if inp.image is None or engine is None:
            why = "no --container-image given" if inp.image is None else "no podman or docker on PATH"
            found.append(Finding("info", "CONTAINER_RUN_SKIPPED", f"level 3 container run skipped: {why}",
                                 (Evidence("container run", None, why),), "give --container-image IMAGE (an image "
                                 "present locally, e.g. nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04)"))
        else:
            found += ctrun.run_findings(ctrun.run_container(engine, inp.image, gpu_count), gpu_count)
    return rep, found


def _diag(level: int, gpus: list[GpuInfo], live: bool, dcgmi_json: Path | None, stress_s: float) -> DiagResult:
    """Level 2/3 GPU tests (live only) merged with dcgmi diag (a saved ``-j`` file, or run when installed)."""
    if live:
        links = {g.index: pcie_x16_gb_per_s(g.pcie_gen_max or g.pcie_gen_current or 4)
                 * (g.pcie_width_max or 16) / 16 for g in gpus}
        res = gpu_levels(level, links, stress_s)
    else:
        res = DiagResult(level, skipped=[f"level {level} GPU tests: --offline (nothing runs on this host)"]
                         if level > 1 else [])
    if dcgmi_json is not None:
        res.dcgmi, found = parse_dcgmi_json(read_text(dcgmi_json), str(dcgmi_json))
        res.findings += found
    elif live:
        res.dcgmi, found, why = run_dcgmi(level)
        res.findings += found
        if why:
            res.skipped.append(f"dcgmi diag -r {level}: {why}")
    return res
