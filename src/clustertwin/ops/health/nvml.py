"""The NVML backend: GPU state through NVIDIA's official bindings (``nvidia-ml-py``, import name
``pynvml``), imported lazily so that the package works without them.

Calls (nvidia-ml-py 13.x): driver/CUDA versions, per-device name, UUID, PCI info, memory, PCIe link
generation/width (current and max), PCIe replay counter and throughput (KB/s), ECC totals
(corrected/uncorrected x volatile/aggregate), retired pages (pre-Ampere) and remapped rows (Ampere+),
clocks and clocks-event (throttle) reasons, temperature, power (mW) and enforced limit, utilisation,
NVLink state and throughput field values, total energy (mJ), and Xid events through an event set.
Every call that the GPU or driver does not support is reported as None, never as an error.
"""

from __future__ import annotations

import socket
import threading
from typing import Any, Protocol

from clustertwin.errors import ClusterTwinError
from clustertwin.ops.health.gpu import GpuInfo, throttle_names
from clustertwin.units import MS

MW_PER_W = 1000.0
MJ_PER_J = 1000.0
KB_PER_S = 1000.0
"""NVML PCIe throughput unit: KB/s (1e3 B/s)."""
NVML_CUDA_VERSION_MAJOR = 1000
"""``nvmlSystemGetCudaDriverVersion`` encodes 12.4 as 12040: major x 1000 + minor x 10."""
NVML_CUDA_VERSION_MINOR = 10
XID_WAIT_MS = 1000
"""Xid event-wait timeout; bounds how long stopping the watcher takes."""
NVML_MISSING = "nvidia-ml-py is not installed (pip install 'clustertwin[nvml]')"


class NvmlUnavailable(ClusterTwinError):
    """NVML cannot be used here: bindings missing, library missing, driver not loaded or no permission."""


class GpuBackend(Protocol):
    """What the exporter and checks need from a GPU source."""

    def driver_version(self) -> str | None: ...

    def cuda_driver_version(self) -> str | None: ...

    def gpus(self) -> list[GpuInfo]: ...

    def xid_counts(self) -> dict[tuple[int, int], int]: ...


def _load() -> Any:
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable(NVML_MISSING) from None
    return pynvml


FABRIC_STATES = {0: "Not Supported", 1: "Not Started", 2: "In Progress", 3: "Completed"}
"""``nvmlGpuFabricState_t`` (NVML_GPU_FABRIC_STATE_*)."""
FABRIC_COMPLETED = 3
RECOVERY_RESET = frozenset({1, 2})
"""``NVML_GPU_RECOVERY_ACTION_GPU_RESET`` (1) and ``NODE_REBOOT`` (2): the GPU is unusable until then."""
RECOVERY_DRAIN = frozenset({3, 4})
"""``DRAIN_P2P`` (3) and ``DRAIN_AND_RESET`` (4): drain the GPU's work, then reset."""


class NvmlBackend:
    """Live GPU state through NVML. ``NvmlBackend()`` raises :class:`NvmlUnavailable` when NVML cannot start."""

    def __init__(self) -> None:
        self._nv = _load()
        try:
            self._nv.nvmlInit()
        except self._nv.NVMLError as e:
            raise NvmlUnavailable(f"NVML could not start: {e}") from None
        self.hostname = socket.gethostname()
        self._xid: dict[tuple[int, int], int] = {}
        self._xid_last: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _call(self, fn: str, *args: Any) -> Any:
        """``pynvml.<fn>(*args)``; None when unsupported (NVMLError) or absent from this binding version."""
        f = getattr(self._nv, fn, None)
        if f is None:
            return None
        try:
            return f(*args)
        except self._nv.NVMLError:
            return None

    def driver_version(self) -> str | None:
        v = self._call("nvmlSystemGetDriverVersion")
        return v.decode() if isinstance(v, bytes) else v

    def cuda_driver_version(self) -> str | None:
        """Highest CUDA version the driver supports, ``"12.4"``."""
        v = self._call("nvmlSystemGetCudaDriverVersion_v2") or self._call("nvmlSystemGetCudaDriverVersion")
        if not v:
            return None
        return f"{v // NVML_CUDA_VERSION_MAJOR}.{(v % NVML_CUDA_VERSION_MAJOR) // NVML_CUDA_VERSION_MINOR}"

    def device_count(self) -> int:
        return int(self._call("nvmlDeviceGetCount") or 0)

    def _ecc(self, h: Any, err_type: int, counter: int) -> int | None:
        v = self._call("nvmlDeviceGetTotalEccErrors", h, err_type, counter)
        return None if v is None else int(v)

    def _field(self, h: Any, field_id: int) -> float | None:
        vals = self._call("nvmlDeviceGetFieldValues", h, [field_id])
        if not vals or vals[0].nvmlReturn != 0:
            return None
        v = vals[0]
        return float(getattr(v.value, {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal"}.get(
            v.valueType, "ullVal")))

    def gpu(self, index: int) -> GpuInfo:
        nv, c = self._nv, self._call
        h = c("nvmlDeviceGetHandleByIndex", index)
        name = c("nvmlDeviceGetName", h) or "unknown"
        pci = c("nvmlDeviceGetPciInfo", h)
        mem = c("nvmlDeviceGetMemoryInfo", h)
        util = c("nvmlDeviceGetUtilizationRates", h)
        remap = c("nvmlDeviceGetRemappedRows", h)
        reasons = c("nvmlDeviceGetCurrentClocksEventReasons", h)
        if reasons is None:
            reasons = c("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        gen_max = c("nvmlDeviceGetMaxPcieLinkGeneration", h)
        gpu_gen_max = c("nvmlDeviceGetGpuMaxPcieLinkGeneration", h)
        if gen_max is not None and gpu_gen_max is not None:
            gen_max = min(gen_max, gpu_gen_max)
        ecc_mode = c("nvmlDeviceGetEccMode", h)
        power_mw = c("nvmlDeviceGetPowerUsage", h)
        limit_mw = c("nvmlDeviceGetEnforcedPowerLimit", h)
        energy_mj = c("nvmlDeviceGetTotalEnergyConsumption", h)
        tx_kb = c("nvmlDeviceGetPcieThroughput", h, nv.NVML_PCIE_UTIL_TX_BYTES)
        rx_kb = c("nvmlDeviceGetPcieThroughput", h, nv.NVML_PCIE_UTIL_RX_BYTES)
        links: list[bool] = []
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            state = c("nvmlDeviceGetNvLinkState", h, link)
            if state is None:
                break
            links.append(bool(state))
        retired_sbe = c("nvmlDeviceGetRetiredPages", h, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
        retired_dbe = c("nvmlDeviceGetRetiredPages", h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        pending = c("nvmlDeviceGetRetiredPagesPendingStatus", h)
        persistence = c("nvmlDeviceGetPersistenceMode", h)
        mig = c("nvmlDeviceGetMigMode", h)
        fabric = c("nvmlDeviceGetGpuFabricInfo", h)
        recovery_field = getattr(nv, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
        recovery = None if recovery_field is None else self._field(h, recovery_field)
        return GpuInfo(
            index=index,
            name=name.decode() if isinstance(name, bytes) else str(name),
            uuid=(lambda u: u.decode() if isinstance(u, bytes) else u)(c("nvmlDeviceGetUUID", h)),
            pci_bus_id=(lambda b: b.decode() if isinstance(b, bytes) else b)(pci.busId) if pci else None,
            memory_total_bytes=float(mem.total) if mem else None,
            memory_used_bytes=float(mem.used) if mem else None,
            memory_free_bytes=float(mem.free) if mem else None,
            pcie_gen_current=c("nvmlDeviceGetCurrPcieLinkGeneration", h),
            pcie_gen_max=gen_max,
            pcie_width_current=c("nvmlDeviceGetCurrPcieLinkWidth", h),
            pcie_width_max=c("nvmlDeviceGetMaxPcieLinkWidth", h),
            pcie_replay_count=c("nvmlDeviceGetPcieReplayCounter", h),
            ecc_enabled=None if ecc_mode is None else bool(ecc_mode[0]),
            ecc_volatile_corrected=self._ecc(h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC),
            ecc_volatile_uncorrected=self._ecc(h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
            ecc_aggregate_corrected=self._ecc(h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_AGGREGATE_ECC),
            ecc_aggregate_uncorrected=self._ecc(h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC),
            retired_pages_sbe=None if retired_sbe is None else len(retired_sbe),
            retired_pages_dbe=None if retired_dbe is None else len(retired_dbe),
            retired_pages_pending=None if pending is None else bool(pending),
            remapped_rows_correctable=None if remap is None else int(remap[0]),
            remapped_rows_uncorrectable=None if remap is None else int(remap[1]),
            remapped_rows_pending=None if remap is None else bool(remap[2]),
            remapped_rows_failure=None if remap is None else bool(remap[3]),
            sm_clock_mhz=c("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_SM),
            sm_clock_max_mhz=c("nvmlDeviceGetMaxClockInfo", h, nv.NVML_CLOCK_SM),
            mem_clock_mhz=c("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_MEM),
            throttle_reasons=throttle_names(int(reasons)) if reasons is not None else [],
            temperature_c=c("nvmlDeviceGetTemperature", h, nv.NVML_TEMPERATURE_GPU),
            power_w=None if power_mw is None else power_mw / MW_PER_W,
            power_limit_w=None if limit_mw is None else limit_mw / MW_PER_W,
            utilization_gpu_pct=None if util is None else float(util.gpu),
            utilization_memory_pct=None if util is None else float(util.memory),
            nvlink_active=links,
            pcie_tx_bytes_per_s=None if tx_kb is None else tx_kb * KB_PER_S,
            pcie_rx_bytes_per_s=None if rx_kb is None else rx_kb * KB_PER_S,
            nvlink_tx_bytes=self._field(h, nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX) if links else None,
            nvlink_rx_bytes=self._field(h, nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX) if links else None,
            energy_j=None if energy_mj is None else energy_mj / MJ_PER_J,
            persistence_mode=None if persistence is None else bool(persistence),
            mig_current=None if not mig else bool(mig[0]),
            mig_pending=None if not mig else bool(mig[1]),
            reset_required=None if recovery is None else int(recovery) in RECOVERY_RESET,
            drain_and_reset_recommended=None if recovery is None else int(recovery) in RECOVERY_DRAIN,
            fabric_state=None if fabric is None else FABRIC_STATES.get(int(fabric.state)),
            fabric_status=None if fabric is None or int(fabric.state) != FABRIC_COMPLETED
            else ("Success" if int(fabric.status) == 0 else f"NVML error {int(fabric.status)}"),
        )

    def gpus(self) -> list[GpuInfo]:
        return [self.gpu(i) for i in range(self.device_count())]

    # --- Xid events -------------------------------------------------------------------------------
    def start_xid_watch(self) -> bool:
        """Count Xid critical-error events in a background thread; False if events are unsupported."""
        nv = self._nv
        evset = self._call("nvmlEventSetCreate")
        if evset is None:
            return False
        registered = 0
        for i in range(self.device_count()):
            h = self._call("nvmlDeviceGetHandleByIndex", i)
            try:
                nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, evset)
                registered += 1
            except nv.NVMLError:
                continue
        if not registered:
            self._call("nvmlEventSetFree", evset)
            return False
        index_of = {}
        for i in range(self.device_count()):
            uuid = self._call("nvmlDeviceGetUUID", self._call("nvmlDeviceGetHandleByIndex", i))
            index_of[uuid] = i

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    data = nv.nvmlEventSetWait_v2(evset, XID_WAIT_MS)
                except nv.NVMLError:
                    continue
                idx = index_of.get(self._call("nvmlDeviceGetUUID", data.device), -1)
                with self._lock:
                    key = (idx, int(data.eventData))
                    self._xid[key] = self._xid.get(key, 0) + 1
                    self._xid_last[idx] = int(data.eventData)
            self._call("nvmlEventSetFree", evset)

        self._thread = threading.Thread(target=loop, name="clustertwin-xid", daemon=True)
        self._thread.start()
        return True

    def xid_last(self) -> dict[int, int]:
        """GPU index -> the last Xid seen since the watch started (dcgm-exporter's DCGM_FI_DEV_XID_ERRORS)."""
        with self._lock:
            return dict(self._xid_last)

    def xid_counts(self) -> dict[tuple[int, int], int]:
        """(GPU index, Xid) -> events seen since the watch started."""
        with self._lock:
            return dict(self._xid)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * XID_WAIT_MS * MS)
        self._call("nvmlShutdown")
