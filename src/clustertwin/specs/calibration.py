"""Calibration: overrides of the models' named efficiency and latency parameters.

Each layer owns a typed parameter set with documented defaults (``comm.params.CommParams``,
``train.params.TrainParams``, ``infer.params.InferParams``); a Calibration carries overrides by
parameter name, validated by that layer (unknown names are errors with the nearest valid name).
``clustertwin node bench`` writes one from measurements; ``--calibration FILE`` reads it.
"""

from __future__ import annotations

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
