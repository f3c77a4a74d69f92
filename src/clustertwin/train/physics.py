"""The physics guard of the training estimate: no layout is predicted above the GPUs' peak.

MFU = model FLOPs / (step x GPUs x peak) and HFU = (model + recomputed FLOPs) / (step x GPUs x peak)
(Chowdhery et al. 2022, PaLM, appendix B; Korthikanti et al. 2022) are fractions of the dense peak: a GPU
cannot issue more FLOPs per second than its tensor cores, and no published run reports more than 1.

Each parameter's range and the products that form one kernel's efficiency are checked when a calibration
is read (:func:`clustertwin.train.params.bound_problem`, :func:`~clustertwin.train.params.product_problem`).
This guard checks what they predict together: with every figure at its optimistic edge (GEMMs and attention at
the full peak, no kernel latency, no host overhead, full overlap) a layout can still pass 1, e.g. where the
stack's reported FLOPs count the full attention square the causal kernels skip. Every evaluated layout is
checked, so such a calibration is refused (exit 2, one line naming its file and the optimistic parameters)
in ``train estimate``, ``search`` and ``scale``, ``explain`` and ``report`` alike, and a layout above the
peak never wins a search.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.specs.calibration import Calibration
from clustertwin.specs.model import ModelSpec
from clustertwin.train.layout import Layouts, is_array
from clustertwin.train.params import DEFAULT_PARAMS, TrainParams
from clustertwin.train.result import StepResult

#: parameters that do not change the step time (memory model, stack selection): never named as optimistic
_NOT_TIMING = frozenset({"memory_reserved_gib", "memory_fragmentation", "te_stack_min_year"})
#: most parameters one error line names
_MAX_NAMED = 8


def _higher_is_faster(name: str) -> bool:
    """Efficiencies, their ratios and overlaps speed a step up as they grow; every other timing parameter
    (latencies, overheads, half-points, tile traffic, imbalance, jitter, interference) as it shrinks."""
    return name.endswith(("_efficiency", "_ratio", "_overlap"))


def optimistic_names(params: TrainParams, calibration: Calibration | None) -> list[str]:
    """The parameters set more optimistically than their defaults (the calibration's ``train`` overrides, or
    the fields of ``params`` that differ from the defaults); all overrides when none is."""
    given = dict(calibration.train) if calibration is not None and calibration.train else \
        {f.name: getattr(params, f.name) for f in fields(params)
         if getattr(params, f.name) != getattr(DEFAULT_PARAMS, f.name)}
    names = [k for k, v in given.items() if k not in _NOT_TIMING and v != getattr(DEFAULT_PARAMS, k)
             and (v > getattr(DEFAULT_PARAMS, k)) == _higher_is_faster(k)]
    if not names:
        names = list(given) + [f"comm.{k}" for k in (calibration.comm if calibration is not None else {})]
    return names


def check_peak(out: StepResult, lay: Layouts, model: ModelSpec, params: TrainParams,
               calibration: Calibration | None) -> None:
    """SpecError when any layout of an :func:`~clustertwin.train.step.evaluate_layouts` result has MFU or
    HFU above 1; it names the calibration's file and its optimistic parameters (see the module docstring)."""
    if not is_array(out.hfu, out.mfu) and not (out.hfu > 1.0 or out.mfu > 1.0):
        return  # one layout within peak: no array round trip
    hfu = np.atleast_1d(np.asarray(out.hfu, dtype=float))
    mfu = np.atleast_1d(np.asarray(out.mfu, dtype=float))
    if not (np.any(hfu > 1.0) or np.any(mfu > 1.0)):
        return
    i = int(np.argmax(np.maximum(hfu, mfu)))
    row = lay.row(0 if lay.is_scalar else i)
    where = " ".join(f"{k}={row[k]}" for k in ("tp", "pp", "dp", "cp", "ep"))
    names = optimistic_names(params, calibration)
    shown = ", ".join(names[:_MAX_NAMED]) + (f" (+{len(names) - _MAX_NAMED} more)" if len(names) > _MAX_NAMED else "")
    who = "the calibration" if calibration is not None else "the training parameters"
    blame = f"{shown} together are more optimistic than the hardware allows" if shown else \
        "the default parameters do (a model error; please report it)"
    raise SpecError(f"{who} predicts MFU {mfu[i]:.4g} and HFU {hfu[i]:.4g} for {model.name or model.id or 'the model'}"
                    f" at {where}: above 1, more FLOP/s than the GPUs' peak; {blame}",
                    file=calibration.file if calibration is not None else None,
                    path=("train",) if calibration is not None else ())
