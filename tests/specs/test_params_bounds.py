"""Typed, range-checked model parameters: TrainParams, CommParams and InferParams refuse NaN, infinities and
values outside their physical ranges, whether built directly or through a calibration."""

from __future__ import annotations

import dataclasses
import math

import pytest
from pydantic import ValidationError

from clustertwin.comm.params import CommParams
from clustertwin.errors import SpecError
from clustertwin.infer.params import InferParams
from clustertwin.specs import Calibration
from clustertwin.train.params import DEFAULT_PARAMS, TrainParams, params_for_stack


@pytest.mark.parametrize("name,value", [("gemm_efficiency", 0.0), ("gemm_efficiency", 1.2),
                                        ("gemm_efficiency", math.nan), ("cp_overlap", 5.0), ("cp_overlap", -0.1),
                                        ("kernel_latency_s", -1e-6), ("memory_reserved_gib", math.inf),
                                        ("fp8_gemm_efficiency_ratio", 0.0)])
def test_train_params_bounds(name: str, value: float) -> None:
    with pytest.raises(SpecError):
        DEFAULT_PARAMS.with_overrides({name: value})
    with pytest.raises(ValidationError):
        dataclasses.replace(DEFAULT_PARAMS, **{name: value})


def test_train_params_stay_a_dataclass() -> None:
    """Same field names and dataclass API as before (fields/replace), legacy stack still selectable (inf)."""
    assert [f.name for f in dataclasses.fields(TrainParams)] == TrainParams.names()
    assert params_for_stack(DEFAULT_PARAMS, "legacy").te_stack_min_year == math.inf
    assert DEFAULT_PARAMS.with_overrides({"gemm_efficiency": 0.5}).gemm_efficiency == 0.5


@pytest.mark.parametrize("section,name,value", [("comm", "nvlink_efficiency", 0.0), ("comm", "net_latency_scale", math.inf),
                                                ("comm", "pat_per_rank_us", -1.0), ("infer", "gemm_efficiency", math.nan),
                                                ("infer", "step_overhead_ms", -3.0)])
def test_comm_and_infer_bounds(section: str, name: str, value: float) -> None:
    cal = Calibration.model_construct(**{section: {name: value}, "comm": {} if section != "comm" else {name: value},
                                         "train": {}, "infer": {} if section != "infer" else {name: value}})
    with pytest.raises(SpecError):
        cal.check_sections()
    with pytest.raises((SpecError, ValidationError)):
        (CommParams().with_overrides({name: value}) if section == "comm"
         else InferParams.model_validate({**InferParams().model_dump(), name: value}))
