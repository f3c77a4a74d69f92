"""Stage plans (train/pipeline.py), group placement (train/placement.py), software stacks
(train/stack.py), layout defaults (train/resolve.py) and the DP bucket schedule (train/overlap.py)."""

from __future__ import annotations

import math

import pytest

from clustertwin import catalog, specs
from clustertwin.errors import SpecError
from clustertwin.train import estimate, search
from clustertwin.train.layout import Layouts
from clustertwin.train.overlap import bucket_exposed
from clustertwin.train.pipeline import stage_plan
from clustertwin.train.placement import groups
from clustertwin.train.resolve import resolve_parallelism


def _lay(tp=1, pp=1, dp=1, cp=1, ep=1, vpp=1, first=0, last=0, emb=0, loss=0) -> Layouts:
    return Layouts(tp, pp, dp, cp, ep, vpp, 1, 0, 0, 0, first, last, emb, loss)


def _plan(model, **kw):
    p = stage_plan(model, _lay(**kw), 1024)
    return p.first_layers, p.middle_layers, p.last_layers, p.middle_total_layers, bool(p.valid)


def test_llama3_405b_interleaved_plan_has_short_first_and_last_stages():
    """126 layers + embedding + loss = 128 slots over 16 x 8 chunks: 7 layers on the first and the last
    stage, 8 on the 14 others (Llama Team 2024, 3.3.2); the explicit form gives the same plan."""
    m = catalog.get("model", "llama3-405b")
    assert _plan(m, pp=16, vpp=8, emb=1, loss=1) == (7, 8, 7, 112, True)
    assert _plan(m, pp=16, vpp=1, first=7, last=7) == (7, 8, 7, 112, True)
    # 126 layers alone cannot fill 16 x 8 chunks; over 16 x 4 chunks the balanced split puts the
    # 62 extra layers on the first chunks: 8 | 8 ... | 7
    assert not _plan(m, pp=16, vpp=8)[-1]
    first, mid, last, total, ok = _plan(m, pp=16, vpp=4)
    assert ok and first + total + last == 126 and (first, mid, last) == (8, 8, 7)
    # explicit stages whose rest the others cannot share evenly are no plan
    assert not _plan(m, pp=16, first=10, last=10)[-1]


def test_stage_plan_drives_memory_and_step_time():
    m = catalog.get("model", "llama3-405b")
    c = specs.load(specs.ClusterSpec, {"node": "hgx-h100-roce", "nodes": 2048})
    base = dict(tp=8, pp=16, dp=128, global_batch=2048, sequence_parallel=True, zero=2)
    heavy_first = estimate(m, c, specs.ParallelismSpec(**base, first_stage_layers=8, last_stage_layers=6))
    short_ends = estimate(m, c, specs.ParallelismSpec(**base, first_stage_layers=7, last_stage_layers=7))
    assert short_ends.stage_plan["layers_per_stage"] == "7|8 x 14|7"
    # the first stage holds the most micro-batches in flight: a layer fewer there is less memory
    assert short_ends.memory_gib_per_gpu < heavy_first.memory_gib_per_gpu
    # the published layout (interleaved, first/last stage one layer short) fits in an H100's 80 GiB
    published = estimate(m, c, specs.ParallelismSpec(**base, vpp=8, embedding_in_split=True, loss_in_split=True))
    assert published.fits and published.stage_plan["layers_per_stage"] == "7|8 x 14|7"


def test_search_finds_the_published_llama3_layout_or_a_faster_one():
    m = catalog.get("model", "llama3-405b")
    c = catalog.get("cluster", "llama3-16k-h100-roce")
    published = estimate(m, c, specs.ParallelismSpec(tp=8, pp=16, dp=128, vpp=8, global_batch=2048, zero=2,
                                                     sequence_parallel=True, embedding_in_split=True,
                                                     loss_in_split=True))
    best = search(m, c, global_batch=2048, fixed={"tp": 8, "pp": 16}, top=1).best
    assert best is not None and best.fits
    assert best.step_time_s <= published.step_time_s * (1 + 1e-9)


def test_groups_follow_the_megatron_rank_order():
    g = groups(_lay(tp=2, cp=2, dp=8, pp=4, ep=4), 8)
    assert (g.tp.size, g.tp.ranks_per_node) == (2, 2)
    assert (g.cp.size, g.cp.ranks_per_node) == (2, 2)      # stride 2: both CP ranks in one node
    assert (g.dp.size, g.dp.ranks_per_node) == (16, 4)     # DP x CP, stride 2: 4 per 8-GPU node
    # experts re-fold the tp x cp x dp ranks as etp x ep x edp (MoE parallel folding, etp = tp = 2):
    # EP ranks are etp = 2 apart, 4 per node; expert-DP = 32 / (2 x 4) = 4, stride 8
    assert (g.ep.size, g.ep.ranks_per_node) == (4, 4)
    assert (g.edp.size, g.edp.ranks_per_node) == (4, 1)
    assert g.pp.ranks_per_node == 1                        # stride 32 > 8: every hop on the network
    tp16 = groups(_lay(tp=16, dp=2), 8)
    assert (tp16.tp.size, tp16.tp.ranks_per_node) == (16, 8)  # TP over two nodes, costed


@pytest.mark.parametrize(("tp", "pp"), [(4, 32), (8, 16)])
def test_pipeline_traffic_crosses_the_1gbe_network(tp, pp):
    """On a100-512-1gbe the stages of both layouts sit on different nodes, so their send/recv run over
    the 1 GbE port (the older model put tp4 pp32 on NVLink: 0.04 s against 305 s): seconds, not ms."""
    m = catalog.get("model", "llama2-7b")
    c = catalog.get("cluster", "a100-512-1gbe")
    assert groups(_lay(tp=tp, pp=pp), c.node.gpus).pp.ranks_per_node == 1
    e = estimate(m, c, specs.ParallelismSpec(tp=tp, pp=pp, dp=1, global_batch=64, sequence_parallel=True))
    # 64 micro-batches x 2 passes x s h 2 / t bytes at ~0.1 GB/s, half hidden
    nbytes = m.seq_len * m.hidden * 2 / tp
    assert e.breakdown["pp_comm"] > 0.5 * 64 * 2 * nbytes / 0.125e9 * 0.5


def test_stack_features_limit_search_and_estimate():
    m = catalog.get("model", "llama2-7b")
    c = specs.load(specs.ClusterSpec, {"node": "dgx-a100-80gb", "nodes": 4})
    res = search(m, c, global_batch=256, top=50, software_stack="deepspeed-2022")
    for e in res.top:
        lay = e.layout
        assert not lay["sequence_parallel"] and lay["recompute"] != "selective" and lay["vpp"] == 1
        assert lay["zero"] in (0, 1, 2) and e.software_stack == "deepspeed-2022"
    with pytest.raises(SpecError, match="has no sequence parallelism"):
        estimate(m, c, specs.ParallelismSpec(tp=2, dp=16, global_batch=256, sequence_parallel=True,
                                             software_stack="megatron-2021"))
    with pytest.raises(SpecError, match="did you mean 'nemo-2025'"):
        estimate(m, c, specs.ParallelismSpec(dp=32, global_batch=256, software_stack="nemo-2026"))


def test_resolver_is_the_one_place_of_layout_defaults():
    p = resolve_parallelism({"tp": 8, "pp": 2, "global_batch": 512, "zero": None}, 1024)
    assert (p.dp, p.sequence_parallel, p.zero, p.pipeline_schedule) == (64, True, 1, "1f1b")
    one = resolve_parallelism({"tp": 8, "global_batch": 8}, 8)
    assert (one.dp, one.zero) == (1, 0)  # no DP group: no distributed optimizer
    with pytest.raises(SpecError, match="not divisible by tp x pp x cp"):
        resolve_parallelism({"tp": 3, "global_batch": 8}, 8)
    with pytest.raises(SpecError, match="interleaved"):
        resolve_parallelism({"schedule": "interleaved", "global_batch": 8}, 8)


def test_bucket_schedule_exposes_the_last_bucket_or_the_backlog():
    # 4 buckets of 1 s each behind 10 s of backward: only the last bucket shows
    assert bucket_exposed(4.0, 1.0, 10.0, True) == pytest.approx(1.0)
    # a slow network: 4 x 5 s, the backward releases a bucket every 2.5 s -> 20 - 7.5
    assert bucket_exposed(4.0, 5.0, 10.0, True) == pytest.approx(12.5)
    assert bucket_exposed(4.0, 5.0, 10.0, False) == pytest.approx(20.0)


def test_failure_adjusted_time_to_train_is_a_library_function():
    from clustertwin.reliability.train_run import time_to_train_with_failures

    m = catalog.get("model", "llama3-70b")
    c = catalog.get("cluster", "ref-1k-h100")
    e = estimate(m, c, specs.ParallelismSpec(tp=8, pp=4, dp=32, global_batch=1024, sequence_parallel=True, zero=1))
    run = time_to_train_with_failures(e, 2e12, c, m, trials=0)
    assert 0.5 < run.ettr < 1.0
    assert run.days == pytest.approx(run.failure_free.days / run.ettr, rel=0.02)
    assert run.gpu_hours == pytest.approx(run.days * 24 * e.gpus, rel=1e-9)
    assert math.isfinite(run.to_dict()["gpu_hours"])


def test_megatron_layout_strings():
    from clustertwin.train.layout_string import parse_pipeline_layout

    # Llama 3: first and last stage one layer short; DeepSeek-V3's published 16-stage layout
    assert parse_pipeline_layout("Et*7|(t*8|)*14t*7L", 16, 1, 126).stage_layers == (7, *[8] * 14, 7)
    dsv3 = parse_pipeline_layout("Et*3|(tt|)*29m|L", 16, 2, 62)
    assert (dsv3.first, dsv3.middle_max, dsv3.last) == (5, 4, 2) and sum(dsv3.stage_layers) == 62
    for bad, match in (("Et*7|(t*8|)*14t*7", "loss"), ("Et*7|t*8L", "chunks"), ("Et*7|(t*8|*14t*7L", "missing"),
                       ("Ex|L", "unexpected")):
        with pytest.raises(SpecError, match=match):
            parse_pipeline_layout(bad, 16, 1, 126)
    m = catalog.get("model", "llama3-405b")
    c = specs.load(specs.ClusterSpec, {"node": "hgx-h100-roce", "nodes": 2048})
    base = dict(tp=8, pp=16, dp=128, global_batch=2048, sequence_parallel=True, zero=2)
    by_string = estimate(m, c, specs.ParallelismSpec(**base, pipeline_layout="Et*7|(t*8|)*14t*7L"))
    by_fields = estimate(m, c, specs.ParallelismSpec(**base, first_stage_layers=7, last_stage_layers=7))
    assert by_string.step_time_s == pytest.approx(by_fields.step_time_s, rel=1e-12)
    assert by_string.layout["pipeline_layout"] == "Et*7|(t*8|)*14t*7L"


def test_fa3_class_attention_is_a_stack_feature_on_hopper_only():
    """The stack's fused-attention generation sets the attention core's rate: FlashAttention-3 / cuDNN 9
    class kernels (nemo-2024+, megatron-bridge) run attention_fa3_ratio x the FA2-class rate on Hopper;
    Blackwell keeps the FA2-class rate; nothing else in the step changes."""
    from clustertwin.train.params import DEFAULT_PARAMS
    from clustertwin.train.stack import STACKS, stack_for_source

    m = catalog.get("model", "llama3-8b")
    par = {"tp": 1, "dp": 8, "global_batch": 64, "precision": "bf16"}
    for node, faster in (("dgx-h100", True), ("dgx-b200", False)):
        c = specs.load(specs.ClusterSpec, {"node": node, "nodes": 1})
        old = estimate(m, c, specs.ParallelismSpec(**par, software_stack="megatron-core-2024"))
        new = estimate(m, c, specs.ParallelismSpec(**par, software_stack="nemo-2024"))
        assert (new.step_time_s < old.step_time_s * 0.97) is faster
        assert faster or new.step_time_s == pytest.approx(old.step_time_s, rel=1e-9)
    assert 1.5 <= DEFAULT_PARAMS.attention_fa3_ratio <= 2.0  # Shah et al. 2024: 1.5-2.0x forward
    assert STACKS["torchtitan-2024"].fused_attention_gen == 2 and not STACKS["torchtitan-2024"].tp_comm_overlap
    assert stack_for_source("MLCommons MLPerf Training v4.1 closed-division result logs") == "nemo-2024"
    assert stack_for_source("PyTorch torchtitan team, benchmarks/llama3_h100_202412_torchtitan.md") == "torchtitan-2024"


def test_torchtitan_2024_pipeline_defaults_fill_unstated_fields():
    """torchtitan's 2024 defaults (pipeline_parallel_schedule 1F1B, pipeline_parallel_microbatches = stages)
    fill a case's unstated pipeline fields; a stated field is kept."""
    from clustertwin.train.validation import evaluate

    case = {"model": "llama3-405b", "cluster": {"node": "hgx-h100-roce", "nodes": 64},
            "source": "PyTorch torchtitan team, benchmarks/llama3_h100_202412_torchtitan.md",
            "parallelism": {"tp": 8, "pp": 8, "dp": 8, "global_batch": 256, "recompute": "full", "zero": 3,
                            "precision": "fp8"}}
    lay = evaluate(case)["layout"]
    assert lay["vpp"] == 1 and lay["micro_batch"] == 256 // (8 * 8)
    case["parallelism"]["micro_batch"] = 1
    assert evaluate(case)["layout"]["micro_batch"] == 1
    case["source"] = "somewhere else"
    assert evaluate(case)["layout"]["vpp"] > 1  # the search's best: interleaved


def test_fp8_parameter_gather_halves_the_gathered_bytes():
    """Stacks with FP8 weights (nemo-2024+, Megatron-Bridge) gather 1 byte per parameter in FP8 training:
    less exposed DP time, same compute (Blackwell: no attention-generation difference either)."""
    from clustertwin.train.overlap import data_parallel_time
    from clustertwin.train.params import DEFAULT_PARAMS

    m = catalog.get("model", "llama3-8b")
    c = specs.load(specs.ClusterSpec, {"node": "dgx-b200", "nodes": 4})
    par = {"tp": 1, "dp": 32, "micro_batch": 1, "global_batch": 32, "zero": 1, "precision": "fp8"}
    old = estimate(m, c, specs.ParallelismSpec(**par, software_stack="megatron-core-2024"))
    new = estimate(m, c, specs.ParallelismSpec(**par, software_stack="nemo-2024"))
    assert new.breakdown["compute"] == pytest.approx(old.breakdown["compute"], rel=1e-9)
    assert new.breakdown["dp_comm"] < old.breakdown["dp_comm"]
    seen = []

    def coll(op, nbytes, group):
        seen.append((op, nbytes))
        return 1e-3

    grp = type("G", (), {"size": 8})()
    data_parallel_time(80e6, 0.0, 1, 1, 1.0, 1.0, 1.0, coll, grp, grp, DEFAULT_PARAMS, True, True,
                       param_bytes=1)
    assert dict(seen)["all_gather"] * 2 == dict(seen)["reduce_scatter"]


def test_fused_cross_entropy_moves_fewer_bytes_per_logit():
    """The NeMo 2 / Megatron-Bridge stacks' fused vocab-parallel cross-entropy: the same logits GEMMs, 6
    instead of 52 bytes per logit through HBM."""
    from clustertwin.train.gemm import Gemm
    from clustertwin.train.hardware import hardware
    from clustertwin.train.layer import model_shape
    from clustertwin.train.output_layer import FUSED_LOSS_BYTES_PER_LOGIT, LOSS_BYTES_PER_LOGIT, end_blocks
    from clustertwin.train.params import DEFAULT_PARAMS
    from clustertwin.train.stack import STACKS

    m = catalog.get("model", "llama3-8b")
    c = specs.load(specs.ClusterSpec, {"node": "dgx-h100", "nodes": 1})
    hw = hardware(c, "bf16", DEFAULT_PARAMS)
    g, bw, T = Gemm(hw, DEFAULT_PARAMS, "bf16"), hw.hbm_bytes_per_s * DEFAULT_PARAMS.hbm_efficiency, 8192.0
    shape = model_shape(m, 8192)
    plain = end_blocks(shape, 1, T, g, bw, DEFAULT_PARAMS).logits_gpu_s
    fused = end_blocks(shape, 1, T, g, bw, DEFAULT_PARAMS, fused_loss=True).logits_gpu_s
    assert plain - fused == pytest.approx(T * m.vocab * (LOSS_BYTES_PER_LOGIT - FUSED_LOSS_BYTES_PER_LOGIT) / bw)
    assert STACKS["nemo-2025"].fused_cross_entropy and not STACKS["nemo-2024"].fused_cross_entropy


def test_fp8_current_scaling_reads_each_cast_input_once_more():
    """Per-tensor current scaling (NeMo 2 / Megatron-Bridge / torchtitan's float8) costs an amax pass over
    every FP8 cast input: slower FP8 steps than delayed scaling, BF16 steps unchanged."""
    from clustertwin.train.layer import FP8_RECIPE_EXTRA_BYTES
    from clustertwin.train.stack import STACKS

    assert FP8_RECIPE_EXTRA_BYTES["delayed"] == 0 < FP8_RECIPE_EXTRA_BYTES["current"]
    assert STACKS["nemo-2024"].fp8_recipe == "delayed" and STACKS["nemo-2025"].fp8_recipe == "current"
    m = catalog.get("model", "llama3-8b")
    c = specs.load(specs.ClusterSpec, {"node": "dgx-b200", "nodes": 1})
    for precision, slower in (("fp8", True), ("bf16", False)):
        par = {"tp": 1, "dp": 8, "micro_batch": 1, "global_batch": 8, "zero": 3, "precision": precision}
        delayed = estimate(m, c, specs.ParallelismSpec(**par, software_stack="megatron-core-2024"))
        current = estimate(m, c, specs.ParallelismSpec(**par, software_stack="torchtitan-2024"))
        assert (current.breakdown["compute"] > delayed.breakdown["compute"] * 1.001) is slower
