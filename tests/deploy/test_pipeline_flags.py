"""The stage plan that the training model costs is the one the generated job runs (deploy/pipeline_flags)."""

from __future__ import annotations

import itertools

import pytest

from clustertwin import specs
from clustertwin.deploy.layout_flags import megatron_args, nemo_overrides
from clustertwin.deploy.pipeline_flags import balanced_chunks, layout_string, pipeline_plan
from clustertwin.errors import SpecError
from clustertwin.train.layout_string import parse_pipeline_layout


def load_model(ref: str) -> specs.ModelSpec:
    return specs.load(specs.ModelSpec, ref, kind="model")


def _flags(args: list[str]) -> dict[str, str]:
    return {a: b for a, b in itertools.pairwise(args) if a.startswith("--")}


def test_llama3_405b_layout_is_first_and_last_stage_one_layer_short():
    """Llama 3 405B (126 layers) on 16 stages, embedding and loss as slots: 7 | 8 x 14 | 7 (Llama Team 2024)."""
    m = load_model("llama3-405b")
    p = specs.ParallelismSpec(tp=8, pp=16, dp=8, global_batch=2048, embedding_in_split=True, loss_in_split=True)
    assert pipeline_plan(m, p)[0] == "slots"
    flags = megatron_args(m, p, "/ck")[0]
    assert "--account-for-embedding-in-pipeline-split" in flags and "--account-for-loss-in-pipeline-split" in flags
    ov = nemo_overrides(m, p, "/ck")[0]
    assert "model.account_for_embedding_in_pipeline_split=true" in ov
    # interleaved, 128 slots over 16 x 2 chunks = 4 each: still the slot form, with the virtual-stage count
    pv = p.model_copy(update={"vpp": 2})
    f = _flags(megatron_args(m, pv, "/ck")[0])
    assert f["--num-virtual-stages-per-pipeline-rank"] == "2" and "--num-layers-per-virtual-pipeline-stage" not in f


@pytest.mark.parametrize(("layers", "pp", "vpp", "emb", "loss"), [
    (126, 16, 1, False, False), (126, 16, 3, True, False), (80, 4, 3, False, False), (61, 16, 1, True, True),
    (7, 4, 1, False, False), (96, 8, 5, False, True)])
def test_balanced_layout_string_round_trips_through_the_parser(layers, pp, vpp, emb, loss):
    chunks = balanced_chunks(layers, pp, vpp, emb, loss)
    assert sum(chunks) == layers and len(chunks) == pp * vpp
    parsed = parse_pipeline_layout(layout_string(chunks), pp, vpp, layers)
    stage = [sum(chunks[s::pp]) for s in range(pp)]
    assert list(parsed.stage_layers) == stage


def test_explicit_first_and_last_stage_layers_use_megatron_uneven_flags():
    m = load_model("llama3-70b")  # 80 layers
    p = specs.ParallelismSpec(tp=8, pp=6, vpp=2, dp=1, global_batch=64, first_stage_layers=10, last_stage_layers=14)
    f = _flags(megatron_args(m, p, "/ck")[0])
    assert f["--decoder-first-pipeline-num-layers"] == "10" and f["--decoder-last-pipeline-num-layers"] == "14"
    assert f["--num-virtual-stages-per-pipeline-rank"] == "2"
    ov = nemo_overrides(m, p, "/ck")[0]
    assert "model.num_layers_in_first_pipeline_stage=10" in ov and "model.num_layers_in_last_pipeline_stage=14" in ov
    with pytest.raises(SpecError, match="first/last stage layers"):
        megatron_args(m, p.model_copy(update={"last_stage_layers": 13}), "/ck")


def test_user_layout_string_goes_out_alone_and_hydra_quoted():
    m = load_model("llama3-405b")
    text = "Et*7|(t*8|)*14t*7L"
    p = specs.ParallelismSpec(tp=8, pp=16, dp=8, global_batch=2048, pipeline_layout=text)
    args = megatron_args(m, p, "/ck")[0]
    assert _flags(args)["--pipeline-model-parallel-layout"] == text
    assert not any(a.startswith(("--decoder-", "--account-for", "--num-layers-per-virtual")) for a in args)
    assert f"model.pipeline_model_parallel_layout='{text}'" in nemo_overrides(m, p, "/ck")[0]


def test_even_split_keeps_the_classic_flag():
    m = load_model("llama3-70b")
    p = specs.ParallelismSpec(tp=8, pp=4, vpp=5, dp=1, global_batch=64)
    assert _flags(megatron_args(m, p, "/ck")[0])["--num-layers-per-virtual-pipeline-stage"] == "4"
    assert pipeline_plan(m, p.model_copy(update={"pp": 1, "vpp": 1})) == ("none", None)


def test_torchtitan_warns_that_the_stage_plan_is_not_passed(cli):
    r = cli("deploy", "slurm", "--model", "llama3-405b", "--global-batch", "2048", "--cluster",
            "llama3-16k-h100-roce", "--tp", "8", "--pp", "16", "--dp", "128", "--embedding-in-split",
            "--loss-in-split", "--flags", "torchtitan", "--no-predict")
    assert r.code == 0 and "torchtitan splits the layers" in r.stderr
    strict = cli("deploy", "slurm", "--model", "llama3-405b", "--global-batch", "2048", "--cluster",
                 "llama3-16k-h100-roce", "--tp", "8", "--pp", "16", "--dp", "128", "--pipeline-layout",
                 "Et*7|(t*8|)*14t*7L", "--flags", "torchtitan", "--strict", "--no-predict")
    assert strict.code == 2 and "--strict refuses" in strict.stderr


def test_cli_layout_string_reaches_the_script_and_its_header(cli):
    r = cli("deploy", "slurm", "--model", "llama3-405b", "--global-batch", "2048", "--cluster",
            "llama3-16k-h100-roce", "--tp", "8", "--pp", "16", "--dp", "128", "--pipeline-layout",
            "Et*7|(t*8|)*14t*7L", "--no-predict")
    assert r.code == 0, r.stderr
    assert "pipeline_layout=Et*7|(t*8|)*14t*7L" in r.stdout
    assert "--pipeline-model-parallel-layout 'Et*7|(t*8|)*14t*7L'" in r.stdout
    bad = cli("deploy", "slurm", "--model", "llama3-405b", "--global-batch", "2048", "--cluster",
              "llama3-16k-h100-roce", "--tp", "8", "--pp", "16", "--dp", "128", "--pipeline-layout", "Et*7|L")
    assert bad.code == 2 and "Traceback" not in bad.stderr
