"""ParallelismSpec.software_stack: te (fused flash attention, TP overlap) vs legacy (unfused attention over
materialised scores, exposed TP communication); auto follows the GPU generation."""

from __future__ import annotations

import pytest

from clustertwin import catalog, specs
from clustertwin.errors import SpecError
from clustertwin.train import estimate
from clustertwin.train.params import DEFAULT_PARAMS, params_for_stack


def _est(node: str, stack: str):
    cluster = specs.load(specs.ClusterSpec, {"node": node, "nodes": 8})
    par = specs.ParallelismSpec(tp=2, pp=1, dp=32, global_batch=512, sequence_parallel=True, zero=1,
                                software_stack=stack)
    return estimate(catalog.get("model", "llama3-8b"), cluster, par)


@pytest.mark.parametrize(("node", "auto_is"), [("dgx-h100", "te"), ("dgx-a100-80gb", "legacy")])
def test_auto_follows_gpu_generation(node, auto_is):
    assert _est(node, "auto").step_time_s == pytest.approx(_est(node, auto_is).step_time_s)


def test_legacy_stack_is_slower_and_holds_the_score_matrices():
    te, legacy = _est("dgx-h100", "te"), _est("dgx-h100", "legacy")
    assert legacy.step_time_s > te.step_time_s
    assert legacy.memory.breakdown["activations"] > te.memory.breakdown["activations"]


def test_unknown_stack_is_a_spec_error():
    with pytest.raises(SpecError):
        params_for_stack(DEFAULT_PARAMS, "tee")
