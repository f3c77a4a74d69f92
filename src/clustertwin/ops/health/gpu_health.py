"""GPU health findings of ``node check``: what each GPU's state says (memory vs catalog, ECC, retired and
remapped rows, reset and drain flags, fabric state, throttle reasons, temperature, PCIe link) and whether the
GPUs are the ones the node spec expects. Each finding names its evidence and an action."""

from __future__ import annotations

from clustertwin import catalog
from clustertwin.ops.findings import Evidence, Finding, FindingList
from clustertwin.ops.health.gpu import HARMLESS_THROTTLE, GpuInfo, catalog_gpu_id
from clustertwin.units import GB

MEMORY_MATCH_FRACTION = 0.9
"""A GPU reporting less than this fraction of its catalog memory is a different SKU (or partitioned)."""
TEMP_WARN_C = 85.0
"""Warn at or above this GPU temperature: a few degrees below the 87-90 °C slowdown temperatures that
``nvidia-smi -q`` reports for V100/A100/H100 SXM parts."""
IDLE_UTIL_PCT = 5.0
"""Below this utilisation a GPU counts as idle: its PCIe link may legitimately train down to save power."""

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
