"""Physics of the inference model: KV cache, parameters, quantisation, batching knee, prefill scaling."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from clustertwin import catalog
from clustertwin.errors import SpecError
from clustertwin.infer import Deployment, InferParams, estimate, kv_bytes_per_token, shape, steady_state
from clustertwin.specs import Calibration
from clustertwin.train.flops import param_count


def _m(i: str):
    return catalog.get("model", i)


def _n(i: str):
    return catalog.get("node", i)


def test_kv_bytes_per_token_mha_gqa_mla():
    assert kv_bytes_per_token(_m("llama2-7b"), "fp16") == 524_288          # 2·32·32·128·2
    assert kv_bytes_per_token(_m("llama3-8b"), "bf16") == 131_072          # GQA, 8 KV heads
    assert kv_bytes_per_token(_m("llama3-70b"), "fp8") == 163_840          # 320 KiB at 16 bit, halved
    # MLA caches the 512-wide latent + 64 RoPE dims per layer: 61·576·2 B, ~57x less than MHA would
    mla = kv_bytes_per_token(_m("deepseek-v3"), "bf16")
    assert mla == 61 * 576 * 2
    assert 2 * 61 * 128 * 128 * 2 / mla > 50


def test_param_counts():
    assert param_count(_m("llama3-8b")) == pytest.approx(8.03e9, rel=0.01)
    assert param_count(_m("llama3-70b")) == pytest.approx(70.6e9, rel=0.01)
    assert param_count(_m("mixtral-8x7b")) == pytest.approx(46.7e9, rel=0.01)
    assert param_count(_m("deepseek-v3")) == pytest.approx(671e9, rel=0.03)
    # the inference shape splits the same parameters (less the norm weights, ~1e-5 of the total)
    for mid in ("llama3-8b", "llama3-70b", "gpt3-175b", "mixtral-8x7b", "deepseek-v3"):
        assert shape(_m(mid)).params_total == pytest.approx(param_count(_m(mid)), rel=1e-4)


def test_fp8_weights_raise_max_batch_and_int4_more():
    m, n = _m("llama3-70b"), _n("dgx-h100")
    caps = {pr: Deployment(m, n, tp=2, precision=pr, kv_precision="bf16").memory().kv_capacity_tokens
            for pr in ("bf16", "fp8", "int4")}
    assert caps["fp8"] > 2 * caps["bf16"]
    assert caps["int4"] > caps["fp8"]
    b16 = estimate(m, n, tp=4, precision="bf16", input_len=1024, output_len=1024)
    b8 = estimate(m, n, tp=4, precision="fp8", input_len=1024, output_len=1024)
    assert b8.max_batch > b16.max_batch


def test_decode_throughput_rises_with_batch_until_roofline_knee():
    m, n = _m("llama3-8b"), _n("dgx-h100")
    dep = Deployment(m, n, tp=1, precision="bf16", params=InferParams(max_batch_seqs=100_000))
    step = dep.step_model()
    B = np.arange(1, 4097, dtype=float)
    ctx = 128.0  # short context: the KV stream stays small, the knee is the weight GEMM's ridge point
    tput = B / step.time(B, B * ctx)
    assert np.all(np.diff(tput) > 0)  # more sequences never lower the throughput
    # roofline knee: GEMM compute time = weight streaming time, B* = m_dense / c_gemm
    knee = (step.m_dense + step.m_lm) / step.c_gemm
    ridge = (dep.gpu.bf16_tflops * 1e12 * dep.params.gemm_efficiency) / (dep.gpu.hbm_gb_per_s * 1e9
                                                                          * dep.params.hbm_efficiency)
    assert knee == pytest.approx(ridge, rel=0.15)  # 2·B FLOP per 2-byte weight: B* = ridge intensity
    gain = lambda b: float(np.interp(2 * b, B, tput) / np.interp(b, B, tput))  # noqa: E731
    assert gain(knee / 8) > 1.6   # well below the knee: doubling the batch nearly doubles throughput
    assert gain(knee * 4) < 1.25  # well above: compute-bound, little gain
    # and the KV cache caps the batch: capacity / tokens per sequence
    cap = dep.max_seqs(4096 + 4096)
    assert 0 < cap < 400
    ss = steady_state(step, 4096, 4096, np.array([cap / 4, cap]))
    assert ss["output_tokens_per_s"][1] > ss["output_tokens_per_s"][0]


def test_ttft_grows_with_input_length():
    m, n = _m("llama3-70b"), _n("dgx-h100")
    ttft = [estimate(m, n, tp=4, precision="fp8", input_len=isl, output_len=1, batch=1).ttft_ms
            for isl in (128, 512, 2048, 8192)]
    assert all(b > a for a, b in itertools.pairwise(ttft))
    assert ttft[-1] / ttft[-2] > 3.5  # compute-bound prefill: ~linear (+ quadratic attention)


def test_tp_speeds_up_decode_latency():
    m, n = _m("llama3-70b"), _n("dgx-h100")
    t = [estimate(m, n, tp=tp, precision="fp8", input_len=512, output_len=64, concurrency=1).tpot_ms
         for tp in (2, 4, 8)]
    assert t[0] > t[1] > t[2]


def test_calibration_overrides_and_errors():
    m, n = _m("llama3-8b"), _n("dgx-h100")
    base = estimate(m, n, precision="bf16", input_len=256, output_len=256, batch=64)
    slow = estimate(m, n, precision="bf16", input_len=256, output_len=256, batch=64,
                    calibration=Calibration(infer={"hbm_efficiency": 0.5}))
    assert slow.tpot_ms > 1.4 * base.tpot_ms
    with pytest.raises(SpecError, match="did you mean 'hbm_efficiency'"):
        estimate(m, n, calibration=Calibration(infer={"hbm_eficiency": 0.5}))


def test_bad_inputs_raise_spec_error():
    m, n = _m("llama3-70b"), _n("dgx-h100")
    with pytest.raises(SpecError, match="does not fit"):
        estimate(m, n, tp=1, precision="bf16")
    with pytest.raises(SpecError, match="at most one"):
        estimate(m, n, tp=8, batch=4, concurrency=4)
    with pytest.raises(SpecError, match="unsupported precision"):
        estimate(m, n, tp=8, precision="fp9")
    with pytest.raises(SpecError, match="multiple"):
        estimate(m, n, tp=8, gpus=12)
