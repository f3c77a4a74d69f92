"""``node check``: one pass over a node's GPUs, topology, kernel log, InfiniBand ports and host.

GPU state comes from NVML when it starts, else from ``nvidia-smi -q``; saved outputs of ``nvidia-smi -q``,
``nvidia-smi topo -m``, ``ibstat``, a sysfs copy and a kernel log can be checked instead of the live node
(``node check --smi-q FILE ...``). Every finding names its evidence and an action.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from clustertwin import catalog
from clustertwin.errors import SpecError
from clustertwin.ops import ib as ibmod
from clustertwin.ops.compat import accelerator_findings, stack_findings
from clustertwin.ops.diag import STRESS_S, DiagResult, gpu_levels, parse_dcgmi_json, run_dcgmi
from clustertwin.ops.findings import Evidence, Finding, FindingList, sort_findings, worst
from clustertwin.ops.gpu import HARMLESS_THROTTLE, GpuInfo, catalog_gpu_id
from clustertwin.ops.host import HostInfo, host_info
from clustertwin.ops.nvml import NvmlBackend, NvmlUnavailable
from clustertwin.ops.smi import parse_nvidia_smi_q, parse_nvlink_status, run_nvidia_smi
from clustertwin.ops.topo import TopoMatrix, parse_topo_matrix, topo_findings
from clustertwin.ops.xid import XidEvent, count_malformed_xid, parse_kernel_log, xid_findings
from clustertwin.units import GB, pcie_x16_gb_per_s

MEMORY_MATCH_FRACTION = 0.9
"""A GPU reporting less than this fraction of its catalog memory is a different SKU (or partitioned)."""
TEMP_WARN_C = 85.0
"""Warn at or above this GPU temperature: a few degrees below the 87-90 °C slowdown temperatures that
``nvidia-smi -q`` reports for V100/A100/H100 SXM parts."""
IDLE_UTIL_PCT = 5.0
"""Below this utilisation a GPU counts as idle: its PCIe link may legitimately train down to save power."""
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

    @property
    def worst(self) -> str | None:
        return worst(self.findings)


def gpu_findings(gpus: list[GpuInfo], source: str) -> list[Finding]:
    """Per-GPU checks: catalog model and memory, PCIe link, ECC, retired/remapped memory, throttling,
    temperature and NVLink state."""
    fl = FindingList()
    for g in gpus:
        subj = f"GPU {g.index}"

        def ev(text: str, _g: GpuInfo = g) -> list[Evidence]:
            return [Evidence(source, None, f"GPU {_g.index} ({_g.pci_bus_id}) {text}")]

        gid = catalog_gpu_id(g.name)
        if gid is None:
            fl.add("info", "GPU_NOT_IN_CATALOG", f"{subj}: '{g.name}' has no catalog entry", "none; "
                   "expectations (peaks, memory) are not checked for it", ev(f"name {g.name}"), subj)
        elif g.memory_total_bytes is not None:
            expected = catalog.get("gpu", gid).hbm_gb * GB
            if g.memory_total_bytes < MEMORY_MATCH_FRACTION * expected:
                fl.add("warning", "GPU_MEMORY_MISMATCH", f"{subj}: {g.memory_total_bytes / GB:.1f} GB visible, "
                       f"catalog {gid} has {expected / GB:.0f} GB", "check for MIG partitioning or a different "
                       "SKU than ordered", ev(f"memory total {g.memory_total_bytes / GB:.1f} GB"), subj)
        if g.pcie_width_current is not None and g.pcie_width_max and g.pcie_width_current < g.pcie_width_max:
            fl.add("warning", "PCIE_WIDTH_DEGRADED", f"{subj}: PCIe link x{g.pcie_width_current} of "
                   f"x{g.pcie_width_max}", "reseat the GPU/riser; check the slot and 'lspci -vv' LnkSta; a "
                   "narrow link halves host<->GPU and GPUDirect bandwidth",
                   ev(f"link width current {g.pcie_width_current}x, max {g.pcie_width_max}x"), subj)
        if g.pcie_gen_current is not None and g.pcie_gen_max and g.pcie_gen_current < g.pcie_gen_max:
            idle = "gpu_idle" in g.throttle_reasons or (g.utilization_gpu_pct or 0.0) < IDLE_UTIL_PCT
            if idle:
                fl.add("info", "PCIE_GEN_IDLE", f"{subj}: PCIe Gen{g.pcie_gen_current} of Gen{g.pcie_gen_max} "
                       "while idle", "normal power saving; re-check under load",
                       ev(f"PCIe generation current {g.pcie_gen_current}, max {g.pcie_gen_max}"), subj)
            else:
                fl.add("warning", "PCIE_GEN_DEGRADED", f"{subj}: PCIe Gen{g.pcie_gen_current} of "
                       f"Gen{g.pcie_gen_max} under load", "check BIOS PCIe settings, risers and retimers; "
                       "reseat the GPU", ev(f"PCIe generation current {g.pcie_gen_current}, max "
                                            f"{g.pcie_gen_max}, utilisation {g.utilization_gpu_pct}%"), subj)
        if g.pcie_replay_count:
            fl.add("warning", "PCIE_REPLAYS", f"{subj}: {g.pcie_replay_count} PCIe replays since reset",
                   "replays are retried link errors; if they keep rising, reseat the GPU or replace the riser",
                   ev(f"replays since reset {g.pcie_replay_count}"), subj)
        if g.ecc_volatile_uncorrected:
            fl.add("critical", "ECC_UNCORRECTED", f"{subj}: {g.ecc_volatile_uncorrected} uncorrectable ECC "
                   "errors since the last reset", "drain the node and reset the GPU; replace it if they recur",
                   ev(f"ECC volatile uncorrectable {g.ecc_volatile_uncorrected}"), subj)
        elif g.ecc_aggregate_uncorrected:
            fl.add("warning", "ECC_UNCORRECTED_HISTORY", f"{subj}: {g.ecc_aggregate_uncorrected} uncorrectable "
                   "ECC errors over its lifetime", "watch for new ones; RMA candidate if they recur",
                   ev(f"ECC aggregate uncorrectable {g.ecc_aggregate_uncorrected}"), subj)
        if g.ecc_enabled is False and gid is not None:
            fl.add("warning", "ECC_DISABLED", f"{subj}: ECC is disabled", "enable it (nvidia-smi -e 1) and reboot",
                   ev("ECC mode disabled"), subj)
        if g.remapped_rows_failure:
            fl.add("critical", "ROW_REMAP_FAILURE", f"{subj}: row remapping failed", "drain the node and RMA "
                   "the GPU", ev("Remapping Failure Occurred: Yes"), subj)
        if g.remapped_rows_pending:
            fl.add("warning", "ROW_REMAP_PENDING", f"{subj}: a row remap is pending", "reset the GPU at the next "
                   "job boundary to apply it", ev(f"remapped rows pending, uncorrectable "
                                                  f"{g.remapped_rows_uncorrectable}"), subj)
        if g.retired_pages_pending:
            fl.add("warning", "PAGE_RETIREMENT_PENDING", f"{subj}: page retirement pending "
                   f"({g.retired_pages_sbe or 0} SBE, {g.retired_pages_dbe or 0} DBE pages retired)",
                   "reset the GPU (or reboot) at the next job boundary to retire the pages",
                   ev(f"retired pages SBE {g.retired_pages_sbe}, DBE {g.retired_pages_dbe}, pending yes"), subj)
        bad = [r for r in g.throttle_reasons if r not in HARMLESS_THROTTLE]
        if bad:
            clocks = (f" (SM {g.sm_clock_mhz:.0f} of {g.sm_clock_max_mhz:.0f} MHz)"
                      if g.sm_clock_mhz and g.sm_clock_max_mhz else "")
            fl.add("warning", "CLOCKS_THROTTLED", f"{subj}: clocks limited by {', '.join(bad)}{clocks}",
                   "thermal: check airflow/coolant and fan/CDU alarms; power: check the power limit and PSU/"
                   "rack power capping", ev(f"clocks event reasons active: {', '.join(bad)}"), subj)
        if g.temperature_c is not None and g.temperature_c >= TEMP_WARN_C:
            fl.add("warning", "GPU_HOT", f"{subj}: {g.temperature_c:.0f} °C", "check cooling for this GPU's "
                   "position in the chassis", ev(f"temperature {g.temperature_c:.0f} C"), subj)
        if g.reset_required:
            fl.add("critical", "GPU_RESET_REQUIRED", f"{subj}: the driver reports Reset Required", "drain the node "
                   "and reset the GPU (nvidia-smi -r -i N) or reboot; it fails CUDA work until then",
                   ev("GPU Reset Status: Reset Required: Yes"), subj)
        elif g.drain_and_reset_recommended:
            fl.add("error", "GPU_DRAIN_AND_RESET", f"{subj}: the driver recommends drain and reset", "let running "
                   "jobs finish, drain the node, reset the GPU; it runs degraded until then",
                   ev("GPU Reset Status: Drain and Reset Recommended: Yes"), subj)
        if g.fabric_state is not None and g.fabric_state != "Not Supported":
            if g.fabric_state != "Completed":
                fl.add("error", "FABRIC_NOT_READY", f"{subj}: NVLink fabric registration {g.fabric_state}",
                       "start/restart nvidia-fabricmanager (systemctl status nvidia-fabricmanager) and check its log; "
                       "CUDA and NCCL NVLS fail on this GPU until the fabric completes",
                       ev(f"Fabric State {g.fabric_state}, Status {g.fabric_status or 'N/A'}"), subj)
            elif g.fabric_status not in (None, "Success"):
                fl.add("error", "FABRIC_FAILED", f"{subj}: NVLink fabric registration failed ({g.fabric_status})",
                       "check the Fabric Manager log and the NVSwitch trays; reset the GPU",
                       ev(f"Fabric State Completed, Status {g.fabric_status}"), subj)
            elif g.fabric_bandwidth == "Degraded":
                fl.add("error", "FABRIC_DEGRADED", f"{subj}: NVLink fabric bandwidth degraded", "an NVSwitch "
                       "link or tray is down: check 'nvidia-smi nvlink -s' and the Fabric Manager log; drain the "
                       "NVLink domain for service", ev("Fabric Health Bandwidth: Degraded"), subj)
        if g.persistence_mode is False:
            fl.add("warning", "PERSISTENCE_MODE_OFF", f"{subj}: persistence mode disabled", "enable it "
                   "(nvidia-persistenced, or nvidia-smi -pm 1): without it the driver re-initialises the GPU for "
                   "every job (seconds of start-up, lost ECC/clock state)", ev("Persistence Mode: Disabled"), subj)
        if g.mig_current:
            fl.add("warning", "MIG_ENABLED", f"{subj}: MIG mode enabled", "a training job sees MIG slices, not the "
                   "whole GPU (no NVLink, a fraction of memory); disable MIG (nvidia-smi -mig 0, then reset) unless "
                   "the node serves MIG partitions", ev("MIG Mode Current: Enabled"), subj)
        if g.mig_pending is not None and g.mig_current is not None and g.mig_pending != g.mig_current:
            fl.add("warning", "MIG_CHANGE_PENDING", f"{subj}: MIG mode change pending a GPU reset",
                   "reset the GPU at the next job boundary to apply it",
                   ev(f"MIG Mode Current {'Enabled' if g.mig_current else 'Disabled'}, Pending "
                      f"{'Enabled' if g.mig_pending else 'Disabled'}"), subj)
        if g.nvlink_active and any(g.nvlink_active) and not all(g.nvlink_active):
            down = [i for i, a in enumerate(g.nvlink_active) if not a]
            fl.add("error", "NVLINK_DOWN", f"{subj}: NVLink(s) {down} inactive of {len(g.nvlink_active)}",
                   "reset the GPU; check Fabric Manager; RMA if links stay down",
                   ev(f"inactive links {down}"), subj)
    return fl.items


FABRIC_MANAGER_UNIT = "nvidia-fabricmanager"
PEERMEM_MODULE = "nvidia_peermem"
"""Kernel module for GPUDirect RDMA with MLNX_OFED/inbox verbs (NCCL's net plugin uses dma-buf on newer kernels
and drivers, so it is a warning, not an error)."""


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


def node_expectation_findings(gpus: list[GpuInfo], node_id: str) -> list[Finding]:
    """GPU count and model against a catalog node (``dgx-h100`` expects 8 x h100-sxm)."""
    node = catalog.get("node", node_id)
    expected_gpu = node.gpu.id
    out: list[Finding] = []
    ev = (Evidence("catalog", None, f"{node_id}: {node.gpus} x {expected_gpu}"),)
    if len(gpus) != node.gpus:
        out.append(Finding("critical" if len(gpus) < node.gpus else "warning", "GPU_COUNT",
                           f"{len(gpus)} GPUs visible, {node_id} has {node.gpus}", ev,
                           "a missing GPU fell off the bus or failed to initialise: check the kernel log for "
                           "Xid 79 and 'lspci | grep -i nvidia'; reboot; RMA if it stays missing"))
    for g in gpus:
        gid = catalog_gpu_id(g.name)
        if expected_gpu and gid and gid != expected_gpu:
            out.append(Finding("warning", "GPU_MODEL", f"GPU {g.index} is {gid}, {node_id} has {expected_gpu}",
                               ev, "check the node's inventory against its catalog entry", subject=f"GPU {g.index}"))
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
               stress_s: float = STRESS_S) -> CheckReport:
    """Run every check. Saved outputs given as paths replace the live source for that part; with
    ``live=False`` nothing is read from the running system (no host facts either), only the given files."""
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
    diag = None
    if level > 1 or dcgmi_json is not None:
        diag = _diag(level, gpus, live, dcgmi_json, stress_s)
        findings += diag.findings
    return CheckReport(host, source, note, driver, cuda_drv, gpus, [catalog_gpu_id(g.name) for g in gpus], tm,
                       ports, events, klog_source, sort_findings(findings), diag)


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
