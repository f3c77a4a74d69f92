"""Science workload specs: HPL, HPCG and a halo-exchange stencil (weather/CFD style).

Each is a frozen pydantic spec with unknown keys forbidden; ``kind`` tells them apart in a YAML file
(``{kind: stencil, grid: [4096, 4096, 128], ...}``). Fields left out take the model's defaults, named in
the field docs.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated, Any, Literal

from pydantic import Field

from clustertwin.errors import SpecError
from clustertwin.specs.base import PositiveInt, Spec
from clustertwin.specs.loading import build, read_document


class HPLSpec(Spec):
    """High-Performance Linpack: LU factorisation of a dense N x N FP64 matrix on a P x Q process grid."""

    kind: Literal["hpl"] = "hpl"
    n: PositiveInt | None = None
    """Matrix order N; default: the largest multiple of NB filling ``memory_fraction`` of device memory."""
    nb: PositiveInt | None = None
    """Block size NB (panel width); default ``HPCParams.default_nb``."""
    p: PositiveInt | None = None
    """Process rows P (one process per GPU); default the largest divisor of the GPU count <= sqrt."""
    q: PositiveInt | None = None
    """Process columns Q; default GPUs / P."""
    gpus: PositiveInt | None = None
    """GPUs running HPL; default every GPU of the cluster."""


class HPCGSpec(Spec):
    """HPCG: conjugate gradient with a multigrid preconditioner on a 27-point 3D Poisson stencil."""

    kind: Literal["hpcg"] = "hpcg"
    local_grid: tuple[PositiveInt, PositiveInt, PositiveInt] = (320, 320, 320)
    """Sub-grid per GPU (nx, ny, nz); NVIDIA HPCG on 80 GB parts runs 256^3-320^3."""
    iterations: PositiveInt = 50
    """CG iterations per set (HPCG's reference set length)."""
    gpus: PositiveInt | None = None
    """GPUs; default every GPU of the cluster."""


class StencilSpec(Spec):
    """An explicit finite-difference/volume time step on a 3D grid, decomposed into GPU sub-domains that
    exchange halos with their neighbours every step (weather dynamical cores, CFD)."""

    kind: Literal["stencil"] = "stencil"
    grid: tuple[PositiveInt, PositiveInt, PositiveInt] = (8192, 4096, 128)
    """Global grid points (x, y, z); the default is a ~5 km global grid (40,000 km / 8,192) with 128 levels."""
    halo_width: PositiveInt = 3
    """Halo depth in points (a 7th-order advection stencil needs 3)."""
    bytes_per_point: Annotated[float, Field(gt=0)] = 8.0 * 20
    """State bytes per grid point (FP64 x prognostic fields); read and written once per step."""
    flops_per_point: Annotated[float, Field(gt=0)] = 2000.0
    """FP64 FLOPs per grid point per step (dynamics + physics; weather cores run ~1-5 kFLOP/point)."""
    halo_fields: PositiveInt = 20
    """Fields exchanged in each halo (8 B each per point)."""
    time_steps: PositiveInt = 86400
    """Steps to run (default: a 10-day forecast at a 10 s step)."""
    decomposition: Literal["2d", "3d"] = "2d"
    """Split x-y only (columns stay on one GPU, as weather models do) or all three axes."""
    gpus: PositiveInt | None = None
    """GPUs; default the most (within 3% of the cluster, whole nodes) that split into a near-square grid."""


WorkloadSpec = HPLSpec | HPCGSpec | StencilSpec
KINDS: dict[str, type[Spec]] = {"hpl": HPLSpec, "hpcg": HPCGSpec, "stencil": StencilSpec}


def load_workload(source: str | dict[str, Any], file: str | None = None) -> WorkloadSpec:
    """A workload from a name (``hpl``, ``hpcg``, ``stencil``: defaults), a YAML/JSON file or a dict."""
    from clustertwin.errors import did_you_mean

    if isinstance(source, str):
        if source in KINDS:
            return KINDS[source]()
        from pathlib import Path

        if not Path(source).is_file():
            raise SpecError(f"unknown workload '{source}'{did_you_mean(source, KINDS)} "
                            f"(one of: {', '.join(KINDS)}, or a YAML/JSON file)")
        file = source
        source = read_document(source)
    if not isinstance(source, dict):
        raise SpecError("expected a mapping with 'kind: hpl|hpcg|stencil'", file=file)
    kind = source.get("kind")
    if kind not in KINDS:
        raise SpecError(f"unknown workload kind '{kind}'{did_you_mean(str(kind), KINDS)} "
                        f"(one of: {', '.join(KINDS)})", file=file, path=("kind",))
    return build(KINDS[kind], source, file=file)  # type: ignore[return-value]


def workload_error(err: SpecError, ref: str, options: Collection[str] = ()) -> SpecError:
    """A semantic error of running the workload ``ref`` (``gpus=... exceeds``, ``N=... needs``) that names
    where the value came from: an error about a field in ``options`` (set by a CLI option such as ``--gpus``)
    names the option, an error about another field names the workload file. Errors without a field path are
    about the cluster and are returned unchanged, as are built-in workload names."""
    if err.file or not err.path:
        return err
    field = str(err.path[0])
    if field in options:
        return SpecError(err.message, path=(f"--{field.replace('_', '-')}", *err.path[1:]))
    return err if ref in KINDS else err.with_context(file=ref)
