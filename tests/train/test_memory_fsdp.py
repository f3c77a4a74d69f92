"""PyTorch-native (torchtitan) memory: FSDP2 states, the resident stage under pipelining, op-level selective
recompute, the eager fp32 loss, and the torchtitan 2024-12 tables' peak memory (validation/train_more.yaml)."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
import yaml

from clustertwin import catalog, specs, validate
from clustertwin.train import estimate
from clustertwin.train.flops import param_counts
from clustertwin.train.layout import RECOMPUTE_CODES
from clustertwin.train.memory import activation_bytes_per_layer, memory_arrays
from clustertwin.train.memory_fsdp import (
    LOSS_PEAK_BYTES_PER_LOGIT,
    cp_allgather_bytes,
    loss_peak_bytes,
    op_sac_bytes_per_layer,
    op_sac_recompute_share,
)
from clustertwin.train.params import DEFAULT_PARAMS
from clustertwin.train.stack import STACKS
from clustertwin.units import GIB
from tests.conftest import VALIDATION, need_shared
from tests.train.test_memory import _lay

TT = STACKS["torchtitan-2024"]


def _m():
    return catalog.get("model", "llama3-8b")


def test_fsdp2_states_are_16_bytes_per_param_sharded_plus_the_last_block():
    m = _m()
    pc = param_counts(m)
    lay = _lay(tp=1, dp=8, zero=3, sp=0, recompute=RECOMPUTE_CODES["full"])
    tt = memory_arrays(m, lay, 8, "bf16", True, DEFAULT_PARAMS, stack=TT)
    mc = memory_arrays(m, lay, 8, "bf16", True, DEFAULT_PARAMS, stack=STACKS["megatron-core-2024"])
    states = float((tt["weights"] + tt["gradients"] + tt["optimizer"])[0])
    assert states == pytest.approx(16 * pc.total / 8 + 2 * pc.dense_layer, rel=1e-6)
    assert float(tt["optimizer"][0]) == pytest.approx(8 * pc.total / 8)  # Adam m, v (the fp32 param is the master)
    mstates = float((mc["weights"] + mc["gradients"] + mc["optimizer"])[0])
    assert mstates > states  # Megatron: 18 B/param + two gathered layers


def test_pipelining_keeps_the_stage_unsharded_with_fp32_accumulated_grads():
    m = catalog.get("model", "llama3-405b")
    lay = _lay(tp=8, pp=8, dp=8, zero=3, recompute=RECOMPUTE_CODES["full"], mbs=4)
    tt = memory_arrays(m, lay, 256, "bf16", True, DEFAULT_PARAMS, stack=TT)
    pc = param_counts(m)
    stage_min = 15 * pc.dense_layer / 8  # the fullest stage holds at least 15 of the 126 layers
    assert float(tt["gradients"][0]) >= 4 * stage_min  # fp32 unsharded accumulation (no-sync backward)
    assert float(tt["weights"][0]) >= 2 * stage_min  # 16-bit parameters not resharded after forward
    no_pp = memory_arrays(m, _lay(tp=8, pp=1, dp=64, zero=3, recompute=2, mbs=4), 256, "bf16", True,
                          DEFAULT_PARAMS, stack=TT)
    assert float(no_pp["gradients"][0]) < 0.2 * float(tt["gradients"][0])  # sharded fp32 gradients only


def test_op_level_sac_saves_every_other_gemm_output_and_attention():
    m = _m()
    tokens = 2 * 8192
    got = float(op_sac_bytes_per_layer(m, 8192, 2, 1, 1, 0))
    # input h, wq q, wv kv, attention output h, w1 f, w2 h (16-bit) + fp32 log-sum-exp per head
    assert got == tokens * (2 * (4096 + 4096 + 1024 + 4096 + 14336 + 4096) + 4 * 32)
    lay = _lay(tp=1, dp=8, zero=3, sp=0, mbs=2, recompute=RECOMPUTE_CODES["selective"])
    tt = memory_arrays(m, lay, 16, "bf16", True, DEFAULT_PARAMS, stack=TT)
    korth = activation_bytes_per_layer(m, 8192, 2, 1, 1, 0, RECOMPUTE_CODES["selective"], True)
    assert float(tt["activations"][0]) == pytest.approx(32 * got)
    assert 32 * got < 0.5 * 32 * korth  # Korthikanti's selective keeps everything but the attention core


def test_op_level_sac_reruns_the_unsaved_gemms():
    m = _m()
    h, kv, f = 4096, 1024, 14336
    assert op_sac_recompute_share(m) == pytest.approx((h * kv + h * h + h * f) / (2 * h * h + 2 * h * kv + 3 * h * f))
    c = specs.load(specs.ClusterSpec, {"node": "hgx-h100-roce", "nodes": 1})
    par = {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 2, "global_batch": 16, "zero": 3, "precision": "bf16"}
    sel, none = (estimate(m, c, specs.ParallelismSpec(**par, recompute=rc, software_stack="torchtitan-2024"))
                 for rc in ("selective", "none"))
    extra = sel.breakdown["compute"] - none.breakdown["compute"]
    assert 0.05 * none.breakdown["compute"] < extra < 0.2 * none.breakdown["compute"]
    assert sel.hfu > sel.mfu


def test_eager_fp32_loss_peak_and_the_compiled_loss():
    m = _m()
    assert LOSS_PEAK_BYTES_PER_LOGIT["eager_fp32"] == (12, 16)
    assert float(loss_peak_bytes(m, 1000, 1, "eager_fp32")) == 1000 * (12 * m.vocab + 4 * m.hidden)
    assert float(loss_peak_bytes(m, 1000, 8, "eager_fp32")) == 1000 * (16 * m.vocab + 4 * m.hidden) / 8
    assert float(loss_peak_bytes(m, 1000, 1, "compiled")) < float(loss_peak_bytes(m, 1000, 1, "eager_fp32")) / 2
    # 32K tokens of a 128K vocabulary: the eager loss alone needs ~47 GiB
    assert float(loss_peak_bytes(m, 32768, 1, "eager_fp32")) / GIB == pytest.approx(47.5, abs=0.5)


def test_allgather_context_parallelism_gathers_the_whole_sequence_kv():
    m = catalog.get("model", "llama3-405b")
    assert float(cp_allgather_bytes(m, 262144, 1, 8, 1)) == 0.0
    # K and V of 262,144 tokens at 128 query heads (repeat_kv) / TP 8 x 128 dims, 16-bit: 2 GiB
    assert float(cp_allgather_bytes(m, 262144, 1, 8, 8)) == 2 * 2 * 262144 * 16 * 128
    from dataclasses import replace

    lay = _lay(tp=8, pp=8, dp=1, cp=8, zero=3, recompute=2)
    with_ag, without = (memory_arrays(m, lay, 8, "bf16", True, DEFAULT_PARAMS, seq_len=262144, stack=st)["activations"]
                        for st in (TT, replace(TT, cp_kv_allgather=False)))
    assert float(with_ag[0] - without[0]) == pytest.approx(2 * 2 * 262144 * 16 * 128, rel=1e-6)


def test_torchao_float8_keeps_no_fp8_copies():
    m = _m()
    c = specs.load(specs.ClusterSpec, {"node": "hgx-h100-roce", "nodes": 1})
    par = {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 2, "global_batch": 16, "zero": 3, "recompute": "selective",
           "software_stack": "torchtitan-2024"}
    bf16 = estimate(m, c, specs.ParallelismSpec(**par, precision="bf16"))
    fp8 = estimate(m, c, specs.ParallelismSpec(**par, precision="fp8"))
    assert fp8.memory_gib_per_gpu == pytest.approx(bf16.memory_gib_per_gpu)  # Table 1: 76.8 vs 77.0 GiB


def test_torchtitan_tables_peak_memory():
    with open(need_shared(VALIDATION / "train_more.yaml"), encoding="utf-8") as f:
        cases = [c for c in yaml.safe_load(f)["cases"] if c["id"].startswith(("tt2412-", "torchao-"))]
    errs = {}
    for c in cases:
        r = validate.evaluate_case(c)
        assert not r.error, (c["id"], r.error)
        errs[c["id"]] = r.rel_error["memory_gib_per_gpu"]
        print(f"{c['id']:52s} measured {r.measured['memory_gib_per_gpu']:6.1f} GiB "
              f"predicted {r.predicted['memory_gib_per_gpu']:6.1f} GiB {errs[c['id']]:+.1%}")
    tt = [abs(e) for k, e in errs.items() if k.startswith("tt2412-")]
    print(f"torchtitan 2024-12: {len(tt)} rows, median |err| {statistics.median(tt):.1%}, max {max(tt):.1%}")
    assert len(tt) == 18 and statistics.median(tt) <= 0.04 and max(tt) <= 0.14
    assert max(abs(e) for k, e in errs.items() if k.startswith("torchao-")) <= 0.20
    assert np.all(np.isfinite(list(errs.values())))
