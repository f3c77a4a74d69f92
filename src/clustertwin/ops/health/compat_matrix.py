"""The software/hardware compatibility matrix beyond CUDA -> driver (``compat.MIN_DRIVER``): GPU compute
capability <-> CUDA, PyTorch wheels <-> CUDA/NCCL and the architectures each wheel is built for, ROCm <-> AMD
GPU and CANN <-> Ascend NPU. Every table names its source; entries are release facts, not tuned values.
"""

from __future__ import annotations

from dataclasses import dataclass

GPU_ARCH: dict[str, tuple[str, str]] = {
    "k80": ("Kepler", "3.7"), "v100-sxm2-32gb": ("Volta", "7.0"), "a100-sxm-40gb": ("Ampere", "8.0"),
    "a100-sxm-80gb": ("Ampere", "8.0"), "l40s": ("Ada", "8.9"), "h100-sxm": ("Hopper", "9.0"),
    "h100-pcie": ("Hopper", "9.0"), "h200-sxm": ("Hopper", "9.0"), "h800-sxm": ("Hopper", "9.0"),
    "h20": ("Hopper", "9.0"), "b200": ("Blackwell", "10.0"), "gb200": ("Blackwell", "10.0"),
}
"""Catalog GPU id -> (architecture, compute capability). Source: NVIDIA CUDA GPUs compute-capability table
(developer.nvidia.com/cuda-gpus)."""

CC_CUDA_RANGE: dict[str, tuple[str, str | None]] = {
    "3.5": ("5.0", "11.8"), "3.7": ("5.0", "11.8"),
    "5.0": ("6.0", "12.9"), "5.2": ("6.5", "12.9"), "6.0": ("8.0", "12.9"), "6.1": ("8.0", "12.9"),
    "7.0": ("9.0", "12.9"), "7.5": ("10.0", None), "8.0": ("11.0", None), "8.6": ("11.1", None),
    "8.9": ("11.8", None), "9.0": ("11.8", None), "10.0": ("12.8", None), "12.0": ("12.8", None),
}
"""Compute capability -> (first, last) CUDA toolkit that compiles for it (None: still supported). Sources: CUDA
release notes: 12.0 removed Kepler (sm_35/37); 13.0 removed Maxwell, Pascal and Volta (sm_50-sm_72); Ada/Hopper
from 11.8; Blackwell sm_100/sm_120 from 12.8."""


@dataclass(frozen=True)
class TorchWheel:
    """One PyTorch release's official Linux wheels (download.pytorch.org index, release notes)."""

    cuda: tuple[str, ...]
    """CUDA variants built (``cu126`` -> 12.6)."""
    nccl: str
    """NCCL version bundled in the CUDA wheels (nvidia-nccl-cu12 pin)."""
    dropped_cc: dict[str, tuple[str, ...]]
    """CUDA variant -> compute capabilities that variant is no longer built for."""


TORCH_WHEELS: dict[str, TorchWheel] = {
    "2.4": TorchWheel(("11.8", "12.1", "12.4"), "2.20.5", {}),
    "2.5": TorchWheel(("11.8", "12.1", "12.4"), "2.21.5", {}),
    "2.6": TorchWheel(("11.8", "12.4", "12.6"), "2.21.5", {}),
    "2.7": TorchWheel(("11.8", "12.6", "12.8"), "2.26.2", {}),
    "2.8": TorchWheel(("12.6", "12.8", "12.9"), "2.27.3",
                      {"12.8": ("5.0", "6.0", "6.1", "7.0"), "12.9": ("5.0", "6.0", "6.1", "7.0")}),
    "2.9": TorchWheel(("12.6", "12.8", "13.0"), "2.27.5",
                      {"12.8": ("5.0", "6.0", "6.1", "7.0"), "13.0": ("5.0", "6.0", "6.1", "7.0")}),
}
"""PyTorch release -> wheels. Sources: pytorch.org "Previous versions" install matrix and the release notes (2.8:
the CUDA 12.8/12.9 wheels no longer include Maxwell, Pascal and Volta kernels; Volta stays in cu126); the NCCL
pin of each release's ``nvidia-nccl-cu12`` requirement."""

NCCL_MIN_CUDA_FOR_CC: dict[str, tuple[str, str]] = {
    "9.0": ("2.12", "11.8"), "10.0": ("2.25", "12.8"), "12.0": ("2.25", "12.8"),
}
"""Compute capability -> (first NCCL release with kernels for it, the CUDA it needs). Source: NCCL release
notes (2.12 Hopper/NVLink4; 2.25 Blackwell, CUDA 12.8 builds)."""

ROCM_GPUS: dict[str, tuple[str, str, str | None]] = {
    "mi100": ("gfx908", "4.0", None), "mi210": ("gfx90a", "5.0", None), "mi250x": ("gfx90a", "4.5", None),
    "mi300x": ("gfx942", "6.0", None), "mi300a": ("gfx942", "6.0", None), "mi325x": ("gfx942", "6.3", None),
    "mi355x": ("gfx950", "7.0", None), "mi50": ("gfx906", "3.0", "5.7"),
}
"""AMD GPU -> (LLVM target, first ROCm release supporting it, last one; None = current). Source: ROCm
"System requirements (Linux)" GPU support tables per release; gfx906 (MI50/MI60) left maintenance after 5.7."""

CANN_ASCEND: dict[str, tuple[str, str | None]] = {
    "ascend-910": ("5.0", None), "ascend-910b": ("7.0", None), "ascend-910c": ("8.0", None),
    "ascend-310p": ("5.1", None),
}
"""Ascend NPU -> (first CANN release supporting it, last). Source: Huawei CANN release notes / version
compatibility tables (Atlas 800T A2 = 910B from CANN 7.0; Atlas A3 = 910C from 8.0)."""


def vtuple(text: str) -> tuple[int, ...]:
    """``"12.8"`` -> ``(12, 8)``; non-numeric parts end the tuple (``"2.8.0+cu128"`` -> ``(2, 8, 0)``)."""
    out = []
    for part in text.split("+")[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def torch_wheel(torch_version: str) -> TorchWheel | None:
    """The wheel table row of a ``torch.__version__`` string (``2.8.0+cu128`` -> the 2.8 row)."""
    v = vtuple(torch_version)
    return TORCH_WHEELS.get(f"{v[0]}.{v[1]}") if len(v) >= 2 else None


def cuda_supports_cc(cuda: str, cc: str) -> bool | None:
    """Whether CUDA ``cuda`` compiles for compute capability ``cc`` (None if the table has no row)."""
    rng = CC_CUDA_RANGE.get(cc)
    if rng is None:
        return None
    first, last = rng
    return vtuple(first) <= vtuple(cuda)[:2] and (last is None or vtuple(cuda)[:2] <= vtuple(last))


IMAGE_ON_DRIVER: dict[str, tuple[str, str]] = {
    "ok": ("info", "the driver meets the image's CUDA minimum"),
    "minor-compat": ("warning", "runs under minor-version compatibility: same major release, older driver; PTX "
                     "newer than the driver cannot be JIT-compiled and some APIs return "
                     "cudaErrorCallRequiresNewerDriver"),
    "forward-compat": ("warning", "needs forward compatibility: the image must carry cuda-compat-<major>-<minor> "
                       "(NGC images do and enable it on data-center GPUs); without it CUDA fails to initialise"),
    "unsupported": ("error", "forward compatibility is only for data-center GPUs (and NGC-Server-Ready RTX, "
                    "Jetson): this GPU needs a driver that supports the image's CUDA"),
}
"""Host driver vs a container image's CUDA (forward-compat rules). Source: NVIDIA "CUDA Compatibility" guide
(docs.nvidia.com/deploy/cuda-compatibility): minor version compatibility within a major release from CUDA 11;
forward compatibility across majors via the cuda-compat package, "applicable only for systems with NVIDIA Data
Center GPUs, select NGC Server Ready SKUs of RTX cards, Jetson boards"."""


def image_on_driver(status: str, datacenter: bool) -> str:
    """Row of :data:`IMAGE_ON_DRIVER` from ``compat.driver_supports``' status (``ok``, ``minor-compat``,
    ``too-old``) and whether the GPU is a data-center part."""
    if status in ("ok", "minor-compat"):
        return status
    return "forward-compat" if datacenter else "unsupported"
