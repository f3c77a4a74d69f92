"""Units and conversions. Every other module takes its constants from here.

Conventions: sizes in bytes (``*_bytes``), decimal GB for bandwidth (``gb_per_s`` = 1e9 B/s, the unit of
nccl-tests and vendor datasheets), binary GiB for memory capacity reports (``*_gib``), time in seconds
(``*_s``) unless the name says ``_us``/``_ms``, compute in TFLOP/s (``*_tflops``).
"""

from __future__ import annotations

from clustertwin.errors import SpecError

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
PB = 1e15
KIB = 2**10
MIB = 2**20
GIB = 2**30
TIB = 2**40

TFLOP = 1e12
PFLOP = 1e15
EFLOP = 1e18

US = 1e-6
MS = 1e-3
MINUTE_S = 60.0
HOUR_S = 3600.0
DAY_S = 86400.0
YEAR_H = 8760.0

BITS_PER_BYTE = 8


def gbit_to_gb_per_s(gbit_per_s: float) -> float:
    """Line rate in Gbit/s -> GB/s (decimal): ``gbit / 8``."""
    return gbit_per_s / BITS_PER_BYTE


def gb_per_s_to_bytes_per_s(gb_per_s: float) -> float:
    return gb_per_s * GB


def bytes_to_gib(n_bytes: float) -> float:
    return n_bytes / GIB


def parse_size(text: str | int | float) -> int:
    """Parse a byte size as nccl-tests accepts it: ``8``, ``64K``, ``8M``, ``8G`` (binary multiples).
    Anything else (``1.5.5K``, ``nan``, negative, past int64) is a SpecError."""
    from clustertwin.inputs import INT64_MAX, parse_float  # lazy: inputs imports errors only, units is a leaf

    s = str(text).strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": KIB, "M": MIB, "G": GIB, "T": TIB}
    scale = 1
    if s and s[-1] in mult:
        s, scale = s[:-1], mult[s[-1]]
    n = parse_float(s, f"size {str(text)[:40]!r}", min_value=0.0) * scale
    if n > INT64_MAX:
        raise SpecError(f"size {str(text)[:40]!r}: larger than 2^63-1 bytes")
    return int(n)


def human_bytes(n_bytes: float) -> str:
    """``1073741824 -> '1 GiB'`` style, binary units as nccl-tests sizes are powers of two."""
    for unit, size in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n_bytes >= size:
            v = n_bytes / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n_bytes:.0f} B"


PCIE_X16_LANES = 16
PCIE_GT_PER_S: dict[int, float] = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
"""Transfer rate per lane by PCIe generation, GT/s (PCI-SIG base specifications)."""
PCIE_ENCODING: dict[int, float] = {1: 0.8, 2: 0.8, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}
"""Payload fraction of the line code: 8b/10b (Gen1-2), 128b/130b (Gen3-5), FLIT mode (Gen6)."""


def pcie_x16_gb_per_s(gen: int) -> float:
    """PCIe x16 bandwidth per direction, GB/s: ``GT/s x 16 x encoding / 8`` (Gen4: 31.5, Gen5: 63);
    generations outside 1-6 are clamped to the nearest known one."""
    g = min(max(int(gen), min(PCIE_GT_PER_S)), max(PCIE_GT_PER_S))
    return PCIE_GT_PER_S[g] * PCIE_X16_LANES * PCIE_ENCODING[g] / BITS_PER_BYTE


#: PCIe x16 bandwidth per direction after line encoding, GB/s, by generation (Gen3 15.75 ... Gen6 121).
PCIE_X16_GB_PER_S: dict[int, float] = {g: pcie_x16_gb_per_s(g) for g in PCIE_GT_PER_S}
