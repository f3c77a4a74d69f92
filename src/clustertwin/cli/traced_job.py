"""The job a profile was taken of, as the twin models it: ``profile --compare`` predicts it and
``calibrate --profile`` fits the twin to it. The layout is read from the trace where it says (the world size
of ``distributedInfo``); the layout options of ``train estimate`` fill the rest (``--dp`` with the other sizes
overrides the world size)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clustertwin.errors import SpecError


@dataclass
class TracedJob:
    """The twin's view of a traced run: model, cluster, layout, the calibration in use, and GPUs."""

    model: Any
    cluster: Any
    parallelism: Any
    calibration: Any
    gpus: int
    inputs: dict[str, Any]

    def estimate(self, train_overrides: dict[str, float] | None = None) -> Any:
        """The twin's estimate, with ``train_overrides`` on top of the calibration's training parameters."""
        from clustertwin.specs.calibration import Calibration
        from clustertwin.train import estimate

        cal = self.calibration
        if train_overrides is not None:
            base = cal.model_dump() if cal is not None else {}
            cal = Calibration(**{**base, "train": {**base.get("train", {}), **train_overrides}})
        return estimate(self.model, self.cluster, self.parallelism, calibration=cal, **self.inputs)

    def predictor(self) -> Callable[[dict[str, float]], dict[str, float]]:
        """``overrides -> predicted breakdown`` with the attention term (the fit's model,
        :func:`~clustertwin.profile.fit.with_attention`)."""
        from clustertwin.profile.fit import with_attention

        return with_attention(lambda over: self.estimate(over).breakdown)


def world_size(report: Any) -> int | None:
    """The world size a profile's ranks record, or None."""
    return next((r.world_size for r in report.ranks if r.world_size), None)


def traced_job(report: Any, *, cluster: str, model: str | None, global_batch: int | None, seq_len: int | None,
               calibration: str | None, dataset: str, layout: dict[str, Any], what: str, precision: str = "bf16",
               stack: str = "auto") -> TracedJob:
    """The :class:`TracedJob` of ``report`` (a :class:`~clustertwin.profile.report.ProfileReport`) and the
    command's options (``layout``: layout parameters, :data:`~clustertwin.cli.layout_options.LAYOUT_PARAMS`
    or some of them). A traced job ran the layout it ran: fields not given take their literal defaults (as
    ``--strict-layout`` gives them), never a search. ``what`` names the command in errors."""
    from clustertwin.cli.common import load_calibration, load_cluster
    from clustertwin.cli.layout_options import layout_fields, resolve_layout
    from clustertwin.cli.train_run import path_inputs, seq_model

    if not (model and global_batch):
        raise SpecError(f"{what} needs --model and --global-batch (the traced job as the twin models it)")
    sizes = [layout.get(k) or 1 for k in ("tp", "pp", "cp")]
    gpus = sizes[0] * sizes[1] * sizes[2] * layout["dp"] if layout.get("dp") else world_size(report)
    if not gpus:
        raise SpecError(f"{what}: the trace records no world size; give the layout with --tp/--pp/--cp and --dp")
    c = load_cluster(cluster)
    m = seq_model(model, seq_len)
    cal = load_calibration(calibration, c, False)
    par = resolve_layout(layout_fields(**layout), c, m, gpus=gpus, global_batch=global_batch, precision=precision,
                         stack=stack, calibration=cal)
    return TracedJob(m, c, par, cal, gpus, path_inputs("contiguous", dataset, c.nodes))
