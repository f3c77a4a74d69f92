"""Calibration: overrides of the models' named efficiency and latency parameters.

Each layer owns a typed parameter set with documented defaults (``comm.params.CommParams``,
``train.params.TrainParams``, ``infer.params.InferParams``); a Calibration carries overrides by
parameter name, validated by that layer (unknown names are errors with the nearest valid name).
``clustertwin node bench`` writes one from measurements; ``--calibration FILE`` reads it.
"""

from __future__ import annotations

from clustertwin.errors import SpecError
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
        read (``specs.load``), so an error names the file (imports are lazy: the layers import this module).
        Raises SpecError with the section and parameter as path."""
        if self.train:
            from clustertwin.train.params import DEFAULT_PARAMS as train_defaults

            train_defaults.with_overrides(self.train)
        if self.comm:
            from clustertwin.comm.params import DEFAULT_PARAMS as comm_defaults

            comm_defaults.with_overrides(self.comm)
        if self.infer:
            from pydantic import ValidationError

            from clustertwin.infer.params import InferParams

            if any(k not in InferParams.model_fields for k in self.infer):
                InferParams.resolve(self)  # names the unknown parameter and its nearest valid name
            try:
                InferParams.model_validate({**InferParams().model_dump(), **self.infer})
            except ValidationError as e:
                err = e.errors()[0]
                name = ".".join(str(p) for p in err["loc"])
                raise SpecError(f"{err['msg']} (got {err.get('input')!r})", path=("infer", name)) from None
        return self
