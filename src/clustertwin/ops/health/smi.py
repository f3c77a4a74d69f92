"""Parsers for ``nvidia-smi -q`` (the fallback when NVML cannot be imported) and running it.

``nvidia-smi -q`` prints an indented ``Key : Value`` tree: a header (``Driver Version``, ``CUDA Version``)
then one ``GPU 00000000:18:00.0`` block per device with sections such as ``PCI > GPU Link Info > PCIe
Generation``, ``Clocks Event Reasons`` (``Clocks Throttle Reasons`` before driver 535), ``ECC Errors >
Volatile|Aggregate`` (``SRAM/DRAM Correctable|Uncorrectable`` since Hopper-era drivers; ``Single Bit /
Double Bit > Total`` before), ``Retired Pages`` and ``Remapped Rows``. Values may be ``N/A`` or
``[Not Supported]``; those parse to None. A number that is not finite (a 400-digit counter reads as infinity)
or a count beyond int64 is a SpecError naming the file and line (exit 2), never an overflow in a finding.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from clustertwin.errors import SpecError
from clustertwin.inputs import INT64_MAX
from clustertwin.ops.health.gpu import GpuInfo
from clustertwin.units import MIB

Tree = dict[str, Any]
SMI_TIMEOUT_S = 30.0
"""Time allowed for one nvidia-smi call (it can hang on a GPU that fell off the bus)."""
_SMI_REASON_NAMES = {"idle": "gpu_idle"}
"""``nvidia-smi -q`` reason labels whose snake-case differs from the NVML bit names of gpu.py."""
_INDENT_RE = re.compile(r"^( *)(\S.*?)\s*$")
_NUM_RE = re.compile(r"-?\d+(?:\.\d+)?")


class _Value(str):
    """A ``Key : Value`` value that remembers its line, so a bad number can be reported where it is."""

    line: int = 0

    def __new__(cls, text: str, line: int = 0) -> _Value:
        v = super().__new__(cls, text)
        v.line = line
        return v


@dataclass
class SmiReport:
    """``nvidia-smi -q`` parsed: driver and CUDA versions and the GPUs."""

    driver_version: str | None
    cuda_version: str | None
    gpus: list[GpuInfo] = field(default_factory=list)


def _tree(lines: list[str]) -> Tree:
    """Indentation tree of ``Key : Value`` lines; a key without a value opens a section."""
    root: Tree = {}
    stack: list[tuple[int, Tree]] = [(-1, root)]
    for n, raw in enumerate(lines, 1):
        m = _INDENT_RE.match(raw.replace("\t", "    "))
        if not m or m.group(2).startswith("="):
            continue
        indent, body = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else root
        if " : " in body or body.endswith(" :"):
            key, _, value = body.partition(":")
            key, value = key.strip(), value.strip()
            if value:
                parent.setdefault(key, _Value(value, n))
                continue
            body = key
        section: Tree = {}
        parent[body.strip()] = section
        stack.append((indent, section))
    return root


def _get(tree: Tree, *path: str) -> Any:
    node: Any = tree
    for p in path:
        if not isinstance(node, dict) or p not in node:
            return None
        node = node[p]
    return node


def _first(tree: Tree, *paths: tuple[str, ...]) -> Any:
    for p in paths:
        v = _get(tree, *p)
        if v is not None:
            return v
    return None


def _bad(v: str, why: str) -> SpecError:
    line = getattr(v, "line", 0)
    return SpecError(f"{f'line {line}: ' if line else ''}{why}, got '{v[:40]}{'...' if len(v) > 40 else ''}'")


def _num(v: Any) -> float | None:
    """First number in a value (``81559 MiB`` -> 81559.0, ``16x`` -> 16.0); None for N/A; a SpecError for
    a number too long to be finite."""
    if not isinstance(v, str):
        return None
    m = _NUM_RE.search(v)
    if not m:
        return None
    f = float(m.group())
    if not math.isfinite(f):
        raise _bad(v, "expected a finite number")
    return f


def _int(v: Any) -> int | None:
    """A count (ECC errors, replays, PCIe generation); None for N/A; a SpecError beyond int64."""
    n = _num(v)
    if n is None:
        return None
    if abs(n) > INT64_MAX:
        raise _bad(v, "count out of range (at most 2^63-1)")
    return int(n)


def _yes(v: Any) -> bool | None:
    if not isinstance(v, str):
        return None
    low = v.strip().lower()
    if low in ("yes", "enabled", "active", "true"):
        return True
    if low in ("no", "disabled", "not active", "false"):
        return False
    return None


def _text(v: Any) -> str | None:
    """A string value; None for N/A, [Not Supported] or a section."""
    if not isinstance(v, str) or v.strip() in ("N/A", "[N/A]", "[Not Supported]", "Not Supported", ""):
        return None
    return v.strip()


def _sec(tree: Tree, *path: str) -> Tree:
    """A section as a dict; ``{}`` when absent or reported as a scalar (``Remapped Rows : N/A``)."""
    v = _get(tree, *path)
    return v if isinstance(v, dict) else {}


def _sum_counts(section: Any, word: str) -> int | None:
    """Sum of the counters in an ECC section whose key contains ``word`` as a word start (so
    ``Correctable`` does not match ``Uncorrectable``); None if none is reported."""
    if not isinstance(section, dict):
        return None
    pattern = re.compile(rf"\b{word}", re.IGNORECASE)
    total, seen = 0, False
    for key, value in section.items():
        if not isinstance(value, dict) and pattern.search(key) and "threshold" not in key.lower():
            n = _int(value)
            if n is not None:
                total += n
                seen = True
    return total if seen else None


def _ecc(section: Any) -> tuple[int | None, int | None]:
    """(corrected, uncorrected) of a Volatile/Aggregate ECC section, new or old layout."""
    if not isinstance(section, dict):
        return None, None
    if "Single Bit" in section or "Double Bit" in section:  # drivers before the SRAM/DRAM layout
        sb, db = section.get("Single Bit"), section.get("Double Bit")
        return (_int(sb.get("Total")) if isinstance(sb, dict) else None,
                _int(db.get("Total")) if isinstance(db, dict) else None)
    return _sum_counts(section, "Correctable"), _sum_counts(section, "Uncorrectable")


def _gpu(index: int, bus: str, t: Tree) -> GpuInfo:
    gen = _sec(t, "PCI", "GPU Link Info", "PCIe Generation")
    width = _sec(t, "PCI", "GPU Link Info", "Link Width")
    gen_max = _int(gen.get("Max"))
    for cap in ("Device Max", "Host Max"):  # the link trains to the lower of both ends
        v = _int(gen.get(cap))
        if v is not None and gen_max is not None:
            gen_max = min(gen_max, v)
    reasons_sec = _sec(t, "Clocks Event Reasons") or _sec(t, "Clocks Throttle Reasons")
    reasons: list[str] = []

    def walk(sec: Tree) -> None:
        for k, v in sec.items():
            if isinstance(v, dict):
                walk(v)
            elif _yes(v):
                name = re.sub(r"[^a-z0-9]+", "_", k.lower()).strip("_")
                reasons.append(_SMI_REASON_NAMES.get(name, name))

    walk(reasons_sec)
    vol_c, vol_u = _ecc(_get(t, "ECC Errors", "Volatile"))
    agg_c, agg_u = _ecc(_get(t, "ECC Errors", "Aggregate"))
    retired = _sec(t, "Retired Pages")
    remap = _sec(t, "Remapped Rows")
    power = _sec(t, "GPU Power Readings") or _sec(t, "Power Readings")
    fb = _sec(t, "FB Memory Usage")
    return GpuInfo(
        index=index,
        name=str(t.get("Product Name", "unknown")),
        uuid=str(t["GPU UUID"]) if isinstance(t.get("GPU UUID"), str) else None,
        pci_bus_id=str(_get(t, "PCI", "Bus Id") or bus),
        memory_total_bytes=None if _num(fb.get("Total")) is None else _num(fb.get("Total")) * MIB,
        memory_used_bytes=None if _num(fb.get("Used")) is None else _num(fb.get("Used")) * MIB,
        memory_free_bytes=None if _num(fb.get("Free")) is None else _num(fb.get("Free")) * MIB,
        pcie_gen_current=_int(gen.get("Current")),
        pcie_gen_max=gen_max,
        pcie_width_current=_int(width.get("Current")),
        pcie_width_max=_int(width.get("Max")),
        pcie_replay_count=_int(_get(t, "PCI", "Replays Since Reset")),
        ecc_enabled=_yes(_first(t, ("ECC Mode", "Current"), ("Ecc Mode", "Current"))),
        ecc_volatile_corrected=vol_c,
        ecc_volatile_uncorrected=vol_u,
        ecc_aggregate_corrected=agg_c,
        ecc_aggregate_uncorrected=agg_u,
        retired_pages_sbe=_int(_first(retired, ("Single Bit ECC",), ("Single Bit ECC", "Count"))),
        retired_pages_dbe=_int(_first(retired, ("Double Bit ECC",), ("Double Bit ECC", "Count"))),
        retired_pages_pending=_yes(_first(retired, ("Pending Page Blacklist",), ("Pending",))),
        remapped_rows_correctable=_int(remap.get("Correctable Error")),
        remapped_rows_uncorrectable=_int(remap.get("Uncorrectable Error")),
        remapped_rows_pending=_yes(remap.get("Pending")),
        remapped_rows_failure=_yes(remap.get("Remapping Failure Occurred")),
        sm_clock_mhz=_num(_get(t, "Clocks", "SM")),
        sm_clock_max_mhz=_num(_get(t, "Max Clocks", "SM")),
        mem_clock_mhz=_num(_get(t, "Clocks", "Memory")),
        throttle_reasons=reasons,
        temperature_c=_num(_get(t, "Temperature", "GPU Current Temp")),
        power_w=_num(power.get("Power Draw")),
        power_limit_w=_num(_first(power, ("Current Power Limit",), ("Enforced Power Limit",), ("Power Limit",))),
        utilization_gpu_pct=_num(_get(t, "Utilization", "Gpu")),
        utilization_memory_pct=_num(_get(t, "Utilization", "Memory")),
        persistence_mode=_yes(t.get("Persistence Mode")),
        mig_current=_yes(_get(t, "MIG Mode", "Current")),
        mig_pending=_yes(_get(t, "MIG Mode", "Pending")),
        reset_required=_yes(_get(t, "GPU Reset Status", "Reset Required")),
        drain_and_reset_recommended=_yes(_get(t, "GPU Reset Status", "Drain and Reset Recommended")),
        fabric_state=_text(_get(t, "Fabric", "State")),
        fabric_status=_text(_get(t, "Fabric", "Status")),
        fabric_bandwidth=_text(_get(t, "Fabric", "Health", "Bandwidth")),
    )


def parse_nvidia_smi_q(text: str, source: str = "nvidia-smi -q") -> SmiReport:
    """Parse the full text of ``nvidia-smi -q``. GPU blocks are the top-level ``GPU <bus id>`` sections;
    a malformed number is a SpecError naming ``source`` and the line."""
    tree = _tree(text.splitlines())
    try:
        gpus = [_gpu(i, key.split(None, 1)[1], sec)
                for i, (key, sec) in enumerate((k, v) for k, v in tree.items()
                                               if k.startswith("GPU ") and isinstance(v, dict))]
    except SpecError as e:
        raise e.with_context(file=source) from None
    driver, cuda = tree.get("Driver Version"), tree.get("CUDA Version")
    return SmiReport(str(driver) if isinstance(driver, str) else None, str(cuda) if isinstance(cuda, str) else None,
                     gpus)


_NVLINK_GPU_RE = re.compile(r"^GPU (\d+):")
_NVLINK_LINK_RE = re.compile(r"^\s+Link (\d+): (.*)$")


def parse_nvlink_status(text: str) -> dict[int, list[bool]]:
    """``nvidia-smi nvlink -s``: GPU index -> per-link active flags (``<inactive>`` = down)."""
    out: dict[int, list[bool]] = {}
    current: int | None = None
    for raw in text.splitlines():
        m = _NVLINK_GPU_RE.match(raw)
        if m:
            current = int(m.group(1))
            out[current] = []
            continue
        m = _NVLINK_LINK_RE.match(raw)
        if m and current is not None:
            out[current].append("inactive" not in m.group(2).lower())
    return out


def run_nvidia_smi(*args: str) -> str | None:
    """stdout of ``nvidia-smi ARGS``; None when nvidia-smi is missing or fails (no driver, no GPU)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None
