"""A partial layout is completed by search: given fields kept, the others chosen and said; --strict-layout
keeps the literal defaults."""

from __future__ import annotations

import json

import pytest

from clustertwin import specs
from clustertwin.errors import SpecError
from clustertwin.specs import ParallelismSpec
from clustertwin.train import estimate
from clustertwin.train.complete import complete_layout
from tests.conftest import run_cli

CLUSTER = specs.load(specs.ClusterSpec, "ref-1k-h100", kind="cluster")
MODEL = specs.load(specs.ModelSpec, "llama3-70b", kind="model")


def test_given_fields_are_kept_and_the_rest_chosen_faster_than_the_literal_defaults():
    par = ParallelismSpec(tp=8, global_batch=1024)
    e, chosen = complete_layout(MODEL, CLUSTER, par, 1024, {"tp"})
    assert e.layout["tp"] == 8 and "tp" not in chosen
    assert set(chosen) >= {"dp", "pp", "micro_batch", "recompute", "zero"}
    assert all(e.layout[k] == v for k, v in chosen.items()) and e.searched_fields == chosen
    literal = estimate(MODEL, CLUSTER, par)
    assert e.fits and e.step_time_s <= literal.step_time_s


def test_a_complete_layout_is_estimated_as_given():
    par = ParallelismSpec(tp=8, pp=1, dp=128, cp=1, ep=1, vpp=1, micro_batch=1, recompute="full", zero=1,
                          sequence_parallel=True, global_batch=1024)
    given = set(par.model_fields_set) - {"global_batch"}
    e, chosen = complete_layout(MODEL, CLUSTER, par, 1024, given)
    assert chosen == {} and e.step_time_s == estimate(MODEL, CLUSTER, par).step_time_s


def test_a_given_field_the_stack_lacks_is_refused_not_searched_around():
    par = ParallelismSpec(tp=2, sequence_parallel=True, software_stack="deepspeed-2022", global_batch=1024)
    with pytest.raises(SpecError, match="has no sequence parallelism"):
        complete_layout(MODEL, CLUSTER, par, 1024, {"tp", "sequence_parallel"})


def test_cli_says_what_it_chose_and_strict_layout_keeps_the_defaults():
    base = ["--model", "llama3-70b", "--gpus", "1024", "--tp", "8", "-b", "1024"]
    searched = json.loads(run_cli("train", "estimate", *base, "--json").stdout)
    strict = json.loads(run_cli("train", "estimate", *base, "--strict-layout", "--json").stdout)
    assert searched["searched_fields"] and strict["searched_fields"] == {}
    assert strict["layout"]["dp"] == 128 and strict["layout"]["micro_batch"] == 1
    assert searched["step_time_s"] <= strict["step_time_s"]
    text = run_cli("train", "estimate", *base)
    assert text.code == 0 and "chosen by search" in text.stdout
    ex = run_cli("explain", *base, "--json")
    assert ex.code == 0, ex.stderr
    assert json.loads(ex.stdout)["searched_fields"] == searched["searched_fields"]
