"""Units and conversions. Every other module takes its constants from here.

Conventions: sizes in bytes (``*_bytes``), decimal GB for bandwidth (``gb_per_s`` = 1e9 B/s, the unit of
nccl-tests and vendor datasheets), binary GiB for memory capacity reports (``*_gib``), time in seconds
(``*_s``) unless the name says ``_us``/``_ms``, compute in TFLOP/s (``*_tflops``).
"""

from __future__ import annotations

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
    """Parse a byte size as nccl-tests accepts it: ``8``, ``64K``, ``8M``, ``8G`` (binary multiples)."""
    if isinstance(text, int | float):
        return int(text)
    s = str(text).strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": KIB, "M": MIB, "G": GIB, "T": TIB}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(float(s))


def human_bytes(n_bytes: float) -> str:
    """``1073741824 -> '1 GiB'`` style, binary units as nccl-tests sizes are powers of two."""
    for unit, size in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n_bytes >= size:
            v = n_bytes / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n_bytes:.0f} B"


#: PCIe x16 bandwidth per direction after line encoding, GB/s, by generation (PCI-SIG: 8/16/32/64 GT/s
#: per lane; Gen3-5 128b/130b encoding, Gen6 FLIT mode ~242/256).
PCIE_X16_GB_PER_S: dict[int, float] = {3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}
