"""The NCCL release a run used, and the rules of the model that depend on it.

nccl-tests >= 2.13 prints the release in its header (``nccl-library=22602``), NCCL_DEBUG=INFO as ``NCCL
version 2.26.2+cuda12.8``; a case or a command may state it. Without one the model follows the current
release (2.27 or later).

Version rules (NCCL ``src/graph/tuning.cc``, ``ncclTopoTuneModel`` protocol enable):

* **NVLS channels** (``src/transport/nvls.cc``): 16 on Hopper, 32 on Blackwell; from 2.27 a single-node
  (one NVLink domain) Blackwell communicator uses 24 (``NVLS_NCHANNELS_SM100_NVL``).
* **LL128 across nodes through the CPU.** LL128 is on by default only where the GPU reaches its NIC
  through a PCIe switch, or on Hopper and later at most through PXN (``typeInter <= PATH_PXN``). Where the
  NIC hangs off the CPU and the GPU reaches it over a chip-to-chip link (Grace superchips: GB200, GH200),
  the path is PHB and releases up to 2.26 leave LL128 off between nodes; 2.27 adds the ``PATH_P2C`` class
  and ``NCCL_LL128_C2C`` (default 1), which turns it on.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from clustertwin.errors import SpecError

if TYPE_CHECKING:
    from clustertwin.specs.node import NodeSpec

CURRENT_VERSION: tuple[int, int, int] = (2, 27, 0)
"""The release the model follows when none is stated."""
LL128_C2C_VERSION: tuple[int, int, int] = (2, 27, 0)
"""First release with LL128 across nodes over a chip-to-chip GPU-NIC path (``NCCL_LL128_C2C``)."""
C2C_CPU_VENDORS = frozenset({"nvidia"})
"""CPU vendors whose GPUs reach the NIC over a chip-to-chip link through the CPU (Grace)."""

_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+].*)?\s*$")


def parse_version(text: str | None) -> tuple[int, int, int]:
    """``"2.26.2"``, ``"2.26.2-1"``, ``"2.26.2+cuda12.8"`` or ``"2.26"`` -> (2, 26, 2); None -> the current
    release. Anything else is a :class:`SpecError`."""
    if text is None:
        return CURRENT_VERSION
    m = _VERSION.match(str(text))
    if m is None:
        raise SpecError(f"NCCL version '{text}' is not a release number (expected e.g. 2.26.2)")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def nic_through_cpu(node: NodeSpec) -> bool:
    """Whether the node's GPUs reach their NICs through the CPU over a chip-to-chip link (Grace)."""
    return node.cpu is not None and node.cpu.vendor.strip().lower() in C2C_CPU_VENDORS


def ll128_across_nodes(node: NodeSpec, version: tuple[int, int, int]) -> bool:
    """NCCL's default LL128 enable between nodes for this node's GPU-NIC path (module docstring)."""
    return not nic_through_cpu(node) or version >= LL128_C2C_VERSION


NVLS_NVL_CHANNELS_VERSION: tuple[int, int, int] = (2, 27, 0)
"""First release with 24 NVLS channels on one Blackwell NVLink domain."""


def nvls_channels(gen: str, nodes: int, version: tuple[int, int, int]) -> int:
    """NVLS channels (CTAs) NCCL runs (module docstring): Hopper 16, Blackwell 32 (24 on one node from
    2.27)."""
    if gen == "blackwell":
        return 24 if nodes == 1 and version >= NVLS_NVL_CHANNELS_VERSION else 32
    return 16
