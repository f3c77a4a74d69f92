"""CUDA toolkit/runtime -> minimum Linux driver (NVIDIA CUDA release notes, "CUDA Toolkit and
Corresponding Driver Versions" and "minor version compatibility", CUDA 13.2 edition).

A runtime X.Y runs with full features on a driver >= the table's minimum for X.Y; on an older driver of
the same major family it runs under minor-version compatibility (>= 450 for 11.x, >= 525 for 12.x,
>= 580 for 13.x) without PTX JIT of newer code; below that floor CUDA fails to initialise
("CUDA driver version is insufficient for CUDA runtime version").
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.ops.findings import Evidence, Finding

MIN_DRIVER: dict[tuple[int, int], str] = {
    (11, 8): "520.61.05", (12, 0): "525.60.13", (12, 1): "530.30.02", (12, 2): "535.54.03",
    (12, 3): "545.23.06", (12, 4): "550.54.14", (12, 5): "555.42.02", (12, 6): "560.28.03",
    (12, 8): "570.26", (12, 9): "575.51.03", (13, 0): "580.65.06", (13, 1): "590.44.01",
    (13, 2): "595.45.04",
}
MINOR_COMPAT_FLOOR: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


def _v(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


@dataclass(frozen=True)
class Compat:
    status: str
    """ok, minor-compat, too-old, unknown."""
    required: str | None


def driver_supports(driver: str, cuda: str) -> Compat:
    """Whether a driver runs a CUDA runtime version (``"550.54.15"``, ``"12.4"``)."""
    cv = _v(cuda)[:2]
    if len(cv) < 2 or not _v(driver):
        return Compat("unknown", None)
    need = MIN_DRIVER.get((cv[0], cv[1]))
    if need is None:  # between table rows (e.g. 12.7 does not exist): use the next lower listed minor
        lower = [k for k in MIN_DRIVER if k[0] == cv[0] and k[1] <= cv[1]]
        need = MIN_DRIVER[max(lower)] if lower else None
    if need is not None and _v(driver) >= _v(need):
        return Compat("ok", need)
    floor = MINOR_COMPAT_FLOOR.get(cv[0])
    if floor is not None and _v(driver) >= _v(floor):
        return Compat("minor-compat", need)
    return Compat("too-old", need or floor)


def compat_findings(driver: str | None, cuda_runtime: str | None, source: str = "torch.version.cuda") -> list[Finding]:
    """A finding when the driver is below the runtime's minimum (error) or only minor-compatible (warning)."""
    if not driver or not cuda_runtime:
        return []
    c = driver_supports(driver, cuda_runtime)
    ev = (Evidence(source, None, f"driver {driver}, CUDA runtime {cuda_runtime}"),)
    if c.status == "too-old":
        return [Finding("error", "DRIVER_TOO_OLD", f"driver {driver} is older than CUDA {cuda_runtime} needs "
                        f"(>= {c.required})", ev, f"upgrade the driver to >= {c.required} or use a CUDA "
                        f"{cuda_runtime.split('.')[0]}.x build that this driver supports")]
    if c.status == "minor-compat":
        return [Finding("warning", "DRIVER_MINOR_COMPAT", f"CUDA {cuda_runtime} runs on driver {driver} only "
                        f"under minor-version compatibility (full support from {c.required})", ev,
                        f"upgrade the driver to >= {c.required} for PTX JIT and new features")]
    return []


def stack_findings(driver: str | None, torch_version: str | None, cuda_runtime: str | None,
                   gpu_ids: list[str | None], nccl: str | None = None, source: str = "node") -> list[Finding]:
    """The whole stack against :mod:`compat_matrix`: driver vs the CUDA runtime (:func:`compat_findings`), the
    GPU's compute capability vs that CUDA and vs the kernels the PyTorch wheel ships, and NCCL vs the GPU."""
    from clustertwin.ops.health.compat_matrix import (
        GPU_ARCH,
        NCCL_MIN_CUDA_FOR_CC,
        cuda_supports_cc,
        torch_wheel,
        vtuple,
    )

    out = compat_findings(driver, cuda_runtime, source)
    wheel = torch_wheel(torch_version) if torch_version else None
    for gid in sorted({g for g in gpu_ids if g}):
        arch = GPU_ARCH.get(gid)
        if arch is None or not cuda_runtime:
            continue
        name, cc = arch
        ev = (Evidence(source, None, f"{gid} ({name}, sm_{cc.replace('.', '')}), torch {torch_version}, "
                                     f"CUDA {cuda_runtime}"),)
        if cuda_supports_cc(cuda_runtime, cc) is False:
            out.append(Finding("error", "CUDA_ARCH_UNSUPPORTED", f"CUDA {cuda_runtime} has no code for {name} "
                               f"(compute capability {cc})", ev, "use a CUDA release that supports this GPU "
                               "(Volta and older end with 12.x, Kepler with 11.8)"))
        elif wheel is not None and cc in wheel.dropped_cc.get(".".join(map(str, vtuple(cuda_runtime)[:2])), ()):
            keep = [c for c in wheel.cuda if cc not in wheel.dropped_cc.get(c, ())]
            out.append(Finding("error", "WHEEL_ARCH_UNSUPPORTED", f"the torch {torch_version} CUDA {cuda_runtime} "
                               f"wheel has no kernels for {name} (sm_{cc.replace('.', '')})", ev,
                               f"install the cu{keep[0].replace('.', '') if keep else '?'} wheel of this release "
                               "(pip install torch --index-url https://download.pytorch.org/whl/cu"
                               f"{keep[0].replace('.', '') if keep else '126'}) or an older torch"))
        need = NCCL_MIN_CUDA_FOR_CC.get(cc)
        nccl_v = nccl or (wheel.nccl if wheel else None)
        if need is not None and nccl_v and vtuple(nccl_v)[:2] < vtuple(need[0]):
            out.append(Finding("error", "NCCL_ARCH_UNSUPPORTED", f"NCCL {nccl_v} predates {name} support "
                               f"(NCCL >= {need[0]})", ev, f"upgrade NCCL to >= {need[0]} (CUDA >= {need[1]})"))
    if wheel is not None and cuda_runtime:
        cuda2 = ".".join(map(str, vtuple(cuda_runtime)[:2]))
        if cuda2 not in wheel.cuda:
            out.append(Finding("info", "WHEEL_UNOFFICIAL_CUDA", f"torch {torch_version} has no official CUDA "
                               f"{cuda2} wheel ({', '.join(wheel.cuda)})", (Evidence(source, None,
                               f"torch {torch_version}, CUDA {cuda_runtime}"),), "a custom or NGC build: check "
                               "that its NCCL and arch list match the cluster"))
    return out


def accelerator_findings(gpu_ids: list[str | None], rocm: str | None = None, cann: str | None = None,
                         source: str = "node") -> list[Finding]:
    """AMD GPUs against the installed ROCm and Ascend NPUs against the installed CANN
    (:data:`compat_matrix.ROCM_GPUS`, :data:`compat_matrix.CANN_ASCEND`)."""
    from clustertwin.ops.health.compat_matrix import CANN_ASCEND, ROCM_GPUS, vtuple

    out = []
    for gid in sorted({g for g in gpu_ids if g}):
        if gid in ROCM_GPUS and rocm:
            target, first, last = ROCM_GPUS[gid]
            if vtuple(rocm)[:2] < vtuple(first) or (last and vtuple(rocm)[:2] > vtuple(last)):
                span = f"{first}-{last}" if last else f">= {first}"
                out.append(Finding("error", "ROCM_GPU_UNSUPPORTED", f"ROCm {rocm} does not support {gid} "
                                   f"({target}; supported in ROCm {span})", (Evidence(source, None,
                                   f"{gid}, ROCm {rocm}"),), f"install a ROCm release in {span}"))
        if gid in CANN_ASCEND and cann:
            first, last = CANN_ASCEND[gid]
            if vtuple(cann)[:2] < vtuple(first):
                out.append(Finding("error", "CANN_NPU_UNSUPPORTED", f"CANN {cann} predates {gid} support (CANN "
                                   f">= {first})", (Evidence(source, None, f"{gid}, CANN {cann}"),),
                                   f"install CANN >= {first}"))
    return out
