"""Generated framework arguments build the model that was predicted: Megatron-LM arguments, Megatron-Bridge
overrides and torchtitan options are read back with each framework's own defaults and compared with the
architecture of the ModelSpec; ZeRO stages a framework lacks are mapped with a warning or refused."""

from __future__ import annotations

import dataclasses
import re

import pytest
from tests.conftest import run_cli

from clustertwin import catalog, specs
from clustertwin.deploy import DeploySpec, plan_job
from clustertwin.deploy import readback as rb
from clustertwin.deploy.arch import architecture, model_spec
from clustertwin.deploy.layout_flags import (
    framework_layout,
    megatron_args,
    nemo_overrides,
    torchtitan_args,
    torchtitan_flavor,
)
from clustertwin.errors import SpecError


def model(ref: str) -> specs.ModelSpec:
    return specs.load(specs.ModelSpec, ref, kind="model")


def cluster(ref: str = "ref-1k-h100") -> specs.ClusterSpec:
    return specs.load(specs.ClusterSpec, ref, kind="cluster")


LAYOUT = specs.ParallelismSpec(tp=8, pp=4, dp=2, vpp=2, micro_batch=1, global_batch=64, sequence_parallel=True,
                               recompute="selective", zero=1)


def test_megatron_llama3_70b_reads_back_to_the_same_architecture():
    m = model("llama3-70b")
    args, _ = megatron_args(m, LAYOUT, "ckpt")
    for flag in ("--position-embedding-type", "--rotary-base", "--normalization", "--swiglu",
                 "--disable-bias-linear", "--untie-embeddings-and-output-weights", "--group-query-attention"):
        assert flag in args
    assert args[args.index("--num-query-groups") + 1] == "8"
    assert args[args.index("--rotary-base") + 1] == "500000"
    assert args[args.index("--normalization") + 1] == "RMSNorm"
    back = rb.megatron(args)
    assert back.arch == architecture(m)
    # the read-back architecture as a ModelSpec predicts the same parameter count as the catalog model
    from clustertwin.train.flops import param_count
    assert param_count(model_spec(back.arch)) == param_count(m)
    assert back.layout == {"tp": 8, "pp": 4, "cp": 1, "ep": 1, "vpp": 2, "micro_batch": 1, "global_batch": 64,
                           "zero": 1, "sequence_parallel": True, "recompute": "selective"}


def test_megatron_defaults_would_build_a_gpt_without_the_flags():
    """Without the architecture flags Megatron's defaults give learned positions, LayerNorm, biases, GeLU."""
    m = model("llama3-70b")
    args, _ = megatron_args(m, LAYOUT, "ckpt")
    drop = {"--position-embedding-type", "--rotary-base", "--normalization", "--swiglu", "--disable-bias-linear",
            "--untie-embeddings-and-output-weights"}
    bare: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in drop:
            skip = a in ("--position-embedding-type", "--rotary-base", "--normalization")
            continue
        bare.append(a)
    back = rb.megatron(bare).arch
    assert (back.position_embedding, back.norm, back.linear_bias, back.ffn, back.tied_embeddings) == \
        ("learned", "layernorm", True, "gelu", True)
    assert back != architecture(m)


@pytest.mark.parametrize("ref", catalog.ids("model"))
def test_every_catalog_model_reads_back_from_megatron_and_nemo(ref):
    m = model(ref)
    p = specs.ParallelismSpec(tp=1, pp=1, dp=8, global_batch=64, ep=m.moe.experts if m.moe else 1)
    p = p.model_copy(update={"ep": 1})
    want = architecture(m)
    if want.moe is not None and want.moe.node_groups and not want.moe.router_groups:
        # node-limited routing without a router group count is a property of the twin's dispatch model only:
        # Megatron needs --moe-router-num-groups, so the job leaves it out (docs/deploy.md)
        want = dataclasses.replace(want, moe=want.moe.model_copy(update={"node_groups": None}))
    assert rb.megatron(megatron_args(m, p, "c")[0]).arch == want
    if m.mla_kv_lora_rank is None:
        assert rb.nemo(nemo_overrides(m, p, "c")[0]).arch == architecture(m)


def test_gpt3_gets_gpt_conventions():
    args, _ = megatron_args(model("gpt3-175b"), LAYOUT.model_copy(update={"vpp": 1}), "c")
    assert args[args.index("--position-embedding-type") + 1] == "learned_absolute"
    assert args[args.index("--normalization") + 1] == "LayerNorm"
    assert "--swiglu" not in args and "--disable-bias-linear" not in args


@pytest.mark.parametrize(("ref", "flavor"), [("llama3-8b", "8B"), ("llama3-70b", "70B"), ("llama3-405b", "405B")])
def test_torchtitan_flavor_matches_the_architecture(ref, flavor):
    m = model(ref)
    assert torchtitan_flavor(m) == flavor
    args, _ = torchtitan_args(m, LAYOUT.model_copy(update={"zero": 3}), "c")
    back = rb.torchtitan(args)
    assert back.arch == architecture(m)
    assert back.layout["zero"] == 3 and back.layout["dp"] == 2


def test_torchtitan_refuses_a_model_it_has_no_flavor_for():
    with pytest.raises(SpecError, match=r"no llama3 flavor.*nearest 8B"):
        torchtitan_flavor(model("llama2-7b"))


def test_zero2_on_megatron_maps_to_zero1_with_a_warning_or_is_refused():
    p = LAYOUT.model_copy(update={"zero": 2})
    eff, warnings = framework_layout("megatron", p)
    assert eff.zero == 1 and len(warnings) == 1 and "zero=2 does not exist in Megatron-LM" in warnings[0]
    with pytest.raises(SpecError, match="--strict"):
        framework_layout("megatron", p, strict=True)
    eff, warnings = framework_layout("torchtitan", LAYOUT)  # zero=1 has no FSDP2 mode
    assert eff.zero == 2 and warnings
    assert framework_layout("torchtitan", p) == (p, [])
    assert framework_layout("none", p) == (p, [])


def test_the_header_predicts_the_layout_the_job_runs():
    """zero=2 on Megatron: the job runs the distributed optimizer (ZeRO-1), and the header's memory figure is
    the ZeRO-1 one (more than ZeRO-2's), not the layout asked for."""
    args = ["deploy", "slurm", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "2",
            "--global-batch", "128", "--zero", "2"]
    res = run_cli(*args)
    assert res.code == 0, res.stderr
    assert "warning: zero=2 does not exist in Megatron-LM; the job runs zero=1" in res.stderr
    script = res.stdout
    assert "zero=1" in script and "# warning: zero=2 does not exist" in script
    assert "--use-distributed-optimizer" in script
    from clustertwin.deploy import predict
    p2 = specs.ParallelismSpec(tp=8, pp=2, dp=4, global_batch=128, sequence_parallel=True, zero=2)
    mem1 = predict(model("llama3-70b"), cluster(), p2.model_copy(update={"zero": 1})).memory_gib_per_gpu
    mem2 = predict(model("llama3-70b"), cluster(), p2).memory_gib_per_gpu
    assert mem1 > mem2
    assert f"memory {mem1:.1f} GiB per GPU" in script
    strict = run_cli(*args, "--strict")
    assert strict.code == 2 and "--strict refuses" in strict.stderr and len(strict.stderr.splitlines()) == 1


def test_plan_refuses_a_prediction_for_another_layout():
    from clustertwin.deploy import predict
    p2 = specs.ParallelismSpec(tp=8, pp=2, dp=4, global_batch=128, sequence_parallel=True, zero=2)
    pred = predict(model("llama3-70b"), cluster(), p2)
    with pytest.raises(SpecError, match="different layout"):
        plan_job(cluster(), model("llama3-70b"), p2, DeploySpec(), pred)


def test_nemo_overrides_are_hydra_key_values():
    ov, env = nemo_overrides(model("llama3-8b"), LAYOUT.model_copy(update={"vpp": 1}), "ckpt")
    assert all(re.fullmatch(r"[a-z_.]+=[^\s]+", o) for o in ov)
    assert "model.normalization=RMSNorm" in ov and "model.rotary_base=500000" in ov
    assert "ddp.use_distributed_optimizer=true" in ov
    assert env[0][0] == "CUDA_DEVICE_MAX_CONNECTIONS"


def test_deepseek_v3_group_limited_routing_and_capacity_reach_the_job():
    """DeepSeek-V3 routes each token to 4 of 8 expert groups (config.json n_group 8, topk_group 4)."""
    m = model("deepseek-v3")
    p = specs.ParallelismSpec(tp=1, pp=1, dp=64, ep=64, global_batch=64)
    args = megatron_args(m, p, "c")[0]
    assert args[args.index("--moe-router-num-groups") + 1] == "8"
    assert args[args.index("--moe-router-group-topk") + 1] == "4"
    assert rb.megatron(args).arch.moe == architecture(m).moe
    dropping = m.model_copy(update={"moe": m.moe.model_copy(update={"capacity_factor": 1.25})})
    args = megatron_args(dropping, p, "c")[0]
    assert args[args.index("--moe-expert-capacity-factor") + 1] == "1.25"
    assert rb.megatron(args).arch.moe.capacity_factor == 1.25
    ov = nemo_overrides(dropping, p, "c")[0]
    assert "model.moe_router_num_groups=8" in ov and "model.moe_expert_capacity_factor=1.25" in ov
    with pytest.raises(ValueError, match="does not divide"):
        specs.MoESpec(experts=256, top_k=8, expert_ffn_hidden=2048, node_groups=4, router_groups=6)
