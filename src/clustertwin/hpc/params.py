"""Global physical parameters of the science-workload models (few, documented, never per system).

Every HPL/HPCG/stencil prediction uses only these, the catalog figures of the parts and the comm model.
They were set once against the whole ``validation/hpl.yaml`` set (medians, not case by case) and are
judged on TOP500 systems outside it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: FP64 DGEMM energy efficiency at a device's power limit, GFLOP/s per W, by compute-die process class (nm).
#: HPL runs DGEMM until the board hits its power cap; the clock then drops so that
#: ``rate <= TDP x GFLOP/s-per-W``. Whole Green500-leading systems reach 60-73 GF/W including host, network
#: and HPL's own losses, so the device alone sits higher: 4 nm (Hopper 4N) 78, 5 nm (CDNA3 N5, whose matrix
#: FP64 doubles the peak per clock) 86, 6 nm (CDNA2 N6) 68, 7 nm (Ampere) 36. The 4-6 nm classes were set
#: once against the medians of validation/hpl.yaml (see docs/hpc.md); 7 nm sits between the A100 systems
#: (Perlmutter ~11 TF per GPU, NVIDIA's DGX A100 systems ~14); 12 nm (V100: 7.8 TF at 300 W, DGEMM near
#: its clock limit) and older classes are not calibrated and leave those parts compute-bound.
DGEMM_GFLOPS_PER_W_BY_PROCESS: dict[float, float] = {4: 78.0, 5: 86.0, 6: 68.0, 7: 36.0, 12: 24.0, 16: 16.0,
                                                     28: 6.0}


class HPCParams(BaseModel):
    """Tunable global terms of :mod:`clustertwin.hpc` (defaults are the calibrated values)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    dgemm_efficiency: float = Field(0.80, gt=0, le=1)
    """Fraction of the FP64 GEMM peak (tensor/matrix where present) that the vendor BLAS reaches on the large
    local DGEMM of HPL when the clock holds (cuBLAS/rocBLAS large-DGEMM ~80-90% of peak)."""
    dgemm_gflops_per_w: dict[float, float] = Field(default_factory=lambda: dict(DGEMM_GFLOPS_PER_W_BY_PROCESS))
    """Power-limit term: DGEMM GFLOP/s per board watt by process class (see the module constant)."""
    panel_efficiency: float = Field(0.04, gt=0, le=1)
    """Rate of the panel factorisation (DGETRF on an ``m/P x NB`` column block: memory- and latency-bound,
    one process column at a time) as a fraction of the DGEMM rate."""
    memory_fraction: float = Field(0.85, gt=0, lt=1)
    """Share of device memory the HPL matrix fills when N is not given (vendor HPL guidance: 80-90%)."""
    default_nb: int = Field(1024, gt=0)
    """HPL block size when not given (NVIDIA HPL on Hopper: 1024; rocHPL: 512)."""
    runtime_efficiency: float = Field(0.96, gt=0, le=1)
    """Share of the HPL run spent in the modelled loop (setup, rank imbalance, the final solve and
    verification outside it)."""
    cpu_power_fraction: float = Field(0.5, ge=0, le=1)
    """Host CPU power during GPU HPL as a fraction of its TDP (host cores mostly wait on the GPUs)."""
    overhead_fraction_air: float = Field(0.43, ge=0)
    """Power besides the GPU boards and host CPUs in an air-cooled server, as a fraction of the GPUs' TDP
    (fans, voltage regulators and PSU losses scale with the heat; NICs, NVSwitch, memory, drives: DGX H100
    10.2 kW max for 5.6 kW of GPUs and 0.7 kW of CPUs)."""
    overhead_fraction_liquid: float = Field(0.06, ge=0)
    """The same for a liquid-cooled blade (no fans: NIC, board, pumps, conversion losses)."""
    hbm_efficiency: float = Field(0.80, gt=0, le=1)
    """Sustained fraction of the peak HBM bandwidth a streaming kernel reaches (STREAM-like)."""
    hpcg_bytes_per_flop: float = Field(6.0, gt=0)
    """Memory traffic of HPCG per FLOP (SpMV/MG/SymGS on the 27-point stencil matrix, FP64 values and int32
    indices: ~6 B/FLOP once the vectors miss cache)."""
    vector_efficiency: float = Field(0.5, gt=0, le=1)
    """Fraction of the FP64 vector peak a compute-bound stencil kernel sustains (irregular loads, no FMA
    pairing for every operation)."""
    stencil_overlap: float = Field(0.0, ge=0, le=1)
    """Fraction of the halo exchange hidden behind interior computation (0 = exchange, then compute)."""


DEFAULT_PARAMS = HPCParams()


def gflops_per_w(process_nm: float | None, params: HPCParams = DEFAULT_PARAMS) -> float:
    """The DGEMM GF/W of a process class: the nearest class at or above ``process_nm`` (None: the
    4 nm class, i.e. no power limit beyond current parts)."""
    table = params.dgemm_gflops_per_w
    if process_nm is None:
        return table[min(table)]
    for nm in sorted(table):
        if process_nm <= nm:
            return table[nm]
    return table[max(table)]
