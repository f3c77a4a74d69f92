"""Calibration: overrides of the models' named efficiency and latency parameters.

Each layer owns a typed parameter set with documented defaults (``comm.params.CommParams``,
``train.params.TrainParams``, ``infer.params.InferParams``); a Calibration carries overrides by
parameter name, validated by that layer (unknown names are errors with the nearest valid name).
``clustertwin node bench`` writes one from measurements; ``--calibration FILE`` reads it.
"""

from __future__ import annotations

from collections.abc import Callable

from clustertwin.specs.base import Spec


class Calibration(Spec):
    """Per-layer parameter overrides, e.g. ``{comm: {nvlink_efficiency: 0.8}}``."""

    comm: dict[str, float] = {}
    """Collective-model overrides (per-hop-type efficiency and latency), by CommParams field name."""
    train: dict[str, float] = {}
    """Training-model overrides (GEMM efficiency, overlap fractions), by TrainParams field name."""
    infer: dict[str, float] = {}
    """Inference-model overrides, by InferParams field name."""
    source: str | None = None
    """Where the figures were measured (host, date, tool versions)."""

    def check_sections(self) -> Calibration:
        """Each section's names and ranges checked by its layer's typed parameters; called when a file is
        read (``specs.load``), so an error names the file. The checkers live with the parameters and register
        themselves in :data:`SECTION_CHECKS` when their layer is imported (the CLI imports all three before it
        reads a calibration), so specs import nothing above them. Raises SpecError with the section and
        parameter as path."""
        for name in ("train", "comm", "infer"):
            section = getattr(self, name)
            if section and name in SECTION_CHECKS:
                SECTION_CHECKS[name](section)
        return self


SECTION_CHECKS: dict[str, Callable[[dict[str, float]], None]] = {}
"""Section name -> checker of that section's overrides (raises SpecError naming the parameter), registered by
``train.params``, ``comm.params`` and ``infer.params``."""
