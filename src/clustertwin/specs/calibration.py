"""Calibration: overrides of the models' named efficiency and latency parameters.

Each layer owns a typed parameter set with documented defaults (``comm.params.CommParams``,
``train.params.TrainParams``, ``infer.params.InferParams``); a Calibration carries overrides by
parameter name, validated by that layer (unknown names are errors with the nearest valid name).
``clustertwin node bench`` writes one from measurements; ``--calibration FILE`` reads it.

Efficiencies are fractions of one device's peaks, so a calibration records the device it was measured
on (``gpu``: a catalog GPU id, ``cpu`` for a CPU-only host) and is refused for a cluster of another GPU
unless forced (:meth:`Calibration.check_gpu`): a CPU host's GEMM efficiency applied to H100 estimates
would turn an MFU of 0.41 into 0.09.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import PrivateAttr

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

    gpu: str | None = None
    """Catalog id of the GPU the figures were measured on (``cpu``: a CPU-only host; another string: a GPU
    the catalog does not list); None: not recorded (hand-written overrides apply to any cluster)."""

    _file: str | None = PrivateAttr(default=None)

    @property
    def file(self) -> str | None:
        """The file the calibration was read from (``specs.load``), for errors that its figures cause later
        (an estimate above the peak, :mod:`clustertwin.train.physics`); None when built in code."""
        return self._file

    def bind_file(self, file: str) -> None:
        """Record the file the calibration was read from (called by ``specs.load``)."""
        self._file = file

    def check_gpu(self, cluster_gpu: str | None, *, force: bool = False, file: str | None = None) -> None:
        """SpecError (one line) when this calibration was measured on another device than ``cluster_gpu``
        (the cluster's catalog GPU id), unless ``force`` or no device is recorded."""
        if force or self.gpu is None or cluster_gpu is None or self.gpu == cluster_gpu:
            return
        raise SpecError(f"calibration was measured on '{self.gpu}' but the cluster's GPU is '{cluster_gpu}'; "
                        "measure on that GPU, or pass --force to apply it anyway", file=file, path=("gpu",))

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

    def fit_problem(self) -> str | None:
        """For figures that were measured or fitted (``calibrate``, ``node bench``) rather than written by hand:
        the first parameter outside its layer's physical range, as ``section.name came out VALUE (why)``, or a
        section's combined problem (e.g. a product of efficiencies above 1); None when every figure is in range.
        Such a fit is reported as failed, never clipped or written: a value past its bound means the
        measurement, the catalog peak or the cluster spec is wrong."""
        for name in ("train", "comm", "infer"):
            section, check = getattr(self, name), SECTION_CHECKS.get(name)
            if not section or check is None:
                continue
            for key, value in section.items():
                try:
                    check({key: value})
                except SpecError as e:
                    return f"{name}.{key} came out {float(value):.4g} ({e.message})"
            try:
                check(section)
            except SpecError as e:
                return f"{name}: {e.message}"
        return None


SECTION_CHECKS: dict[str, Callable[[dict[str, float]], None]] = {}
"""Section name -> checker of that section's overrides (raises SpecError naming the parameter), registered by
``train.params``, ``comm.params`` and ``infer.params``."""
