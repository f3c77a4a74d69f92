"""DCGM-style diagnostic levels for ``node check --level 1|2|3`` (the run levels of ``dcgmi diag -r``):

- level 1 (seconds): the deployment checks of ``node check`` (driver, GPUs, fabric, reset status, links).
- level 2 (about a minute): plus a GPU memory test (write a pattern over most free memory, read it back) and
  host<->device copy bandwidth of every GPU (pinned memory, as ``nvbandwidth``'s ``host_to_device_memcpy_ce``),
  compared with the PCIe link the GPU trained to.
- level 3 (minutes): plus a power/clock stress: back-to-back bf16 GEMMs for ``stress_s`` seconds while NVML
  samples power, SM clock and the clocks-event (throttle) reasons.

The GPU tests need torch with CUDA; they are imported lazily and skipped (with the reason) without a GPU. When
``dcgmi`` is installed its ``dcgmi diag -r N -j`` runs too and its failures and warnings become findings.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from clustertwin.ops.findings import Evidence, Finding
from clustertwin.ops.health.gpu import HARMLESS_THROTTLE, throttle_names
from clustertwin.units import GB, GIB

MEMTEST_FRACTION = 0.8
"""Share of a GPU's free memory the memory test writes (the rest stays for the CUDA context and allocator)."""
MEMTEST_CHUNK_BYTES = 1 * GIB
"""The memory test writes and checks one chunk at a time."""
H2D_BYTES = 256 * 2**20
"""Bytes per host<->device copy (large enough to reach the link's asymptotic rate)."""
H2D_MIN_FRACTION = 0.6
"""A GPU whose host<->device copies reach less than this fraction of its link's rate is flagged: pinned copies
reach 75-85 % of the PCIe payload rate on healthy systems (nvbandwidth, 128b/130b coding and TLP overheads)."""
STRESS_S = 20.0
"""Default duration of the level-3 stress."""
STRESS_GEMM_N = 8192
DCGMI_TIMEOUT_S = {1: 120, 2: 600, 3: 1800}
"""Time allowed for ``dcgmi diag -r N`` (DCGM documents ~seconds / ~2 min / ~15 min for r1/r2/r3)."""


@dataclass
class DiagResult:
    """What the levels above 1 measured, per GPU, and what they skipped."""

    level: int
    memtest: dict[int, dict[str, Any]] = field(default_factory=dict)
    h2d: dict[int, dict[str, float]] = field(default_factory=dict)
    stress: dict[int, dict[str, Any]] = field(default_factory=dict)
    dcgmi: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


def _torch_cuda() -> tuple[Any, str | None]:
    try:
        import torch
    except ImportError:
        return None, "torch is not installed (pip install 'clustertwin[bench]')"
    if not torch.cuda.is_available():
        return None, "no GPU (torch.cuda.is_available() is False)"
    return torch, None


def memory_test(torch: Any, index: int) -> dict[str, Any]:
    """Write ``arange`` patterns over MEMTEST_FRACTION of free memory in chunks, read back, count mismatches."""
    dev = torch.device("cuda", index)
    free, _total = torch.cuda.mem_get_info(dev)
    # the chunks, plus one reference chunk and a comparison mask while checking, within the fraction
    n_chunks = max(1, int(free * MEMTEST_FRACTION // MEMTEST_CHUNK_BYTES) - 2)
    elems = MEMTEST_CHUNK_BYTES // 4
    bad = 0
    chunks = []
    try:
        for k in range(n_chunks):
            t = torch.arange(elems, dtype=torch.int32, device=dev) ^ k
            chunks.append(t)
        for k, t in enumerate(chunks):
            ref = torch.arange(elems, dtype=torch.int32, device=dev) ^ k
            bad += int((t != ref).sum().item())
            t.bitwise_not_()
            bad += int((t != ~ref).sum().item())
    finally:
        del chunks
        torch.cuda.empty_cache()
    return {"bytes_tested": n_chunks * MEMTEST_CHUNK_BYTES, "mismatches": bad}


def host_device_bandwidth(torch: Any, index: int) -> dict[str, float]:
    """Pinned host->device and device->host copy bandwidth, GB/s (best of 5)."""
    dev = torch.device("cuda", index)
    host = torch.empty(H2D_BYTES, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty(H2D_BYTES, dtype=torch.uint8, device=dev)
    out = {}
    for name, dst, src in (("h2d_gb_per_s", gpu, host), ("d2h_gb_per_s", host, gpu)):
        best = float("inf")
        for _ in range(5):
            torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize(dev)
            best = min(best, time.perf_counter() - t0)
        out[name] = H2D_BYTES / best / GB
    return out


def stress(torch: Any, index: int, seconds: float, nvml: Any | None) -> dict[str, Any]:
    """bf16 GEMMs for ``seconds``; NVML samples of power (W), SM clock (MHz) and throttle reasons."""
    dev = torch.device("cuda", index)
    a = torch.randn(STRESS_GEMM_N, STRESS_GEMM_N, device=dev, dtype=torch.bfloat16)
    b = torch.randn_like(a)
    power, clocks, reasons = [], [], set()
    handle = nvml.nvmlDeviceGetHandleByIndex(index) if nvml is not None else None
    end = time.perf_counter() + seconds
    iters = 0
    while time.perf_counter() < end:
        for _ in range(20):
            a @ b
        iters += 20
        torch.cuda.synchronize(dev)
        if handle is not None:
            power.append(nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
            clocks.append(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
            get_reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                nvml.nvmlDeviceGetCurrentClocksThrottleReasons  # bindings before the 535 rename
            reasons |= set(throttle_names(int(get_reasons(handle))))
    tflops = 2 * STRESS_GEMM_N**3 * iters / seconds / 1e12
    return {"seconds": seconds, "tflops": tflops, "power_w_max": max(power, default=None),
            "sm_clock_mhz_min": min(clocks, default=None), "throttle_reasons": sorted(reasons)}


def _nvml() -> Any | None:
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # NVML missing or no driver: the stress runs without samples
        return None
    return pynvml


def gpu_levels(level: int, pcie_gb_per_s: dict[int, float], stress_s: float = STRESS_S) -> DiagResult:
    """Run the GPU tests of ``level`` (2: memory + host<->device; 3: + stress). ``pcie_gb_per_s``: the per-GPU
    link rate (GB/s per direction) the host<->device result is compared with."""
    res = DiagResult(level)
    if level < 2:
        return res
    torch, why = _torch_cuda()
    if torch is None:
        res.skipped.append(f"level {level} GPU tests: {why}")
        return res
    nvml = _nvml() if level >= 3 else None
    for i in range(torch.cuda.device_count()):
        subj = f"GPU {i}"
        m = res.memtest[i] = memory_test(torch, i)
        if m["mismatches"]:
            res.findings.append(Finding("critical", "MEMTEST_FAILED", f"{subj}: {m['mismatches']} memory words "
                                        "read back wrong", (Evidence("memory test", None, f"{m['bytes_tested'] / GIB:.0f}"
                                                            f" GiB tested"),), "drain and RMA the GPU", subj))
        bw = res.h2d[i] = host_device_bandwidth(torch, i)
        link = pcie_gb_per_s.get(i)
        low = min(bw.values())
        if link and low < H2D_MIN_FRACTION * link:
            res.findings.append(Finding("warning", "H2D_BANDWIDTH_LOW", f"{subj}: host<->device {low:.1f} GB/s, "
                                        f"{low / link:.0%} of its link's {link:.1f} GB/s",
                                        (Evidence("copy test", None, json.dumps(bw)),), "check the PCIe link (width, "
                                        "generation), IOMMU/ACS settings and the NUMA placement of the test", subj))
        if level >= 3:
            st = res.stress[i] = stress(torch, i, stress_s, nvml)
            bad = [r for r in st["throttle_reasons"] if r not in HARMLESS_THROTTLE and r != "sw_power_cap"]
            if bad:
                res.findings.append(Finding("warning", "STRESS_THROTTLED", f"{subj}: clocks limited by "
                                            f"{', '.join(bad)} under load", (Evidence("stress", None, json.dumps(st)),),
                                            "check cooling and power delivery for this GPU", subj))
    return res


def parse_dcgmi_json(text: str, source: str = "dcgmi diag") -> tuple[list[dict[str, Any]], list[Finding]]:
    """``dcgmi diag -r N -j`` output: one record per (test, GPU) result with its status and messages; a finding
    per Fail (error) and Warn (warning). Walks the document, so DCGM 3 (``test_categories``/``tests``/
    ``results``) and later layouts with the same keys parse alike."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        return [], [Finding("warning", "DCGMI_UNPARSED", "dcgmi diag output is not JSON", (Evidence(source, None,
                            str(e)),), "run 'dcgmi diag -r 1 -j' by hand and check its version")]
    records: list[dict[str, Any]] = []

    def walk(node: Any, test: str | None, category: str | None) -> None:
        if isinstance(node, dict):
            if "status" in node and test is not None:
                msgs = [w.get("warning") or w.get("message") or str(w) if isinstance(w, dict) else str(w)
                        for w in node.get("warnings", [])]
                if node.get("info"):
                    msgs += node["info"] if isinstance(node["info"], list) else [str(node["info"])]
                gpu = node.get("gpu_id", node.get("gpu_ids"))
                records.append({"category": category, "test": test, "gpu": gpu, "status": str(node["status"]),
                                "messages": msgs})
                return
            cat = node.get("category", category)
            name = node.get("name", test) if "results" in node else test
            for v in node.values():
                walk(v, name, cat)
        elif isinstance(node, list):
            for v in node:
                walk(v, test, category)

    walk(doc, None, None)
    findings = []
    for r in records:
        status = r["status"].lower()
        if status not in ("fail", "warn"):
            continue
        subj = None if r["gpu"] in (None, "") else f"GPU {r['gpu']}"
        findings.append(Finding("error" if status == "fail" else "warning", "DCGM_" + status.upper(),
                                f"dcgmi diag {r['test']}{f' on {subj}' if subj else ''}: {r['status']}",
                                (Evidence(source, None, "; ".join(r["messages"]) or r["status"]),),
                                "see the DCGM diagnostic guide for this test; rerun at -r 3 before an RMA", subj))
    return records, findings


def run_dcgmi(level: int) -> tuple[list[dict[str, Any]], list[Finding], str | None]:
    """``dcgmi diag -r level -j`` when dcgmi is installed: (records, findings, None) or ([], [], why not)."""
    exe = shutil.which("dcgmi")
    if exe is None:
        return [], [], "dcgmi not installed"
    try:
        proc = subprocess.run([exe, "diag", "-r", str(level), "-j"], capture_output=True, text=True,
                              timeout=DCGMI_TIMEOUT_S.get(level, 1800), check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [], [], f"dcgmi diag -r {level}: {e}"
    if not proc.stdout.strip():
        return [], [], f"dcgmi diag -r {level}: {proc.stderr.strip() or 'no output'} (is nv-hostengine running?)"
    recs, fnd = parse_dcgmi_json(proc.stdout, f"dcgmi diag -r {level}")
    return recs, fnd, None
