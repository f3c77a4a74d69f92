"""FLOPs and parameter counts: Megatron-Core convention, Narayanan / Korthikanti closed forms, NeMo."""

from __future__ import annotations

import pytest

from clustertwin import catalog
from clustertwin.specs import ModelSpec
from clustertwin.train import flops as F


def gpt(layers=96, hidden=12288, heads=96, seq=2048, vocab=51200) -> ModelSpec:
    return ModelSpec(layers=layers, hidden=hidden, heads=heads, seq_len=seq, vocab=vocab)


@pytest.mark.parametrize("model", [gpt(), gpt(24, 2304, 24), gpt(128, 25600, 160), gpt(12, 1024, 16, 1024)])
def test_gpt_model_and_hardware_flops_match_closed_forms(model):
    B, s, L, h, V = 8, model.seq_len, model.layers, model.hidden, model.vocab
    # Korthikanti et al. 2022 (model FLOPs) and Narayanan et al. 2021 eq. 3 (full recompute)
    korthikanti = 72 * B * s * L * h**2 * (1 + s / (6 * h) + V / (12 * L * h))
    narayanan = 96 * B * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h))
    assert F.model_flops_per_step(model, B) == pytest.approx(korthikanti, rel=1e-12)
    assert F.hardware_flops_per_step(model, B, recompute="full") == pytest.approx(narayanan, rel=1e-12)


def test_megatron_core_formula_with_gqa_swiglu():
    m = ModelSpec(layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=128256, seq_len=8192,
                  ffn="swiglu")
    s, L, h = 8192, 32, 4096
    g, n, q, f, V = 8, 32, 4096, 14336, 128256
    mcore = 12 * s * L * h**2 * ((1 + g / n + s / h) * (q / h) + (f / h) * 1.5 + V / (2 * L * h))
    assert F.model_flops_per_step(m, 1) == pytest.approx(mcore, rel=1e-12)


def test_nemo_llama3_8b_counts_causal_attention_half():
    # NeMo: 744 TFLOP/s/GPU at 14,451 tokens/s/GPU -> 51.48 GFLOP per token
    m = catalog.get("model", "llama3-8b")
    m = m.model_copy(update={"seq_len": 8192})
    published = 744e12 / 14451
    causal = F.flops_per_token(m, causal=True).model
    full = F.flops_per_token(m).model
    print(f"\nllama3-8b FLOPs/token: NeMo {published / 1e9:.2f} G, causal {causal / 1e9:.2f} G, "
          f"non-causal {full / 1e9:.2f} G")
    assert causal == pytest.approx(published, rel=0.005)
    assert full / causal > 1.1


def test_param_counts_of_presets():
    assert F.param_count(catalog.get("model", "llama3-405b")) == pytest.approx(405.9e9, rel=0.005)
    assert F.param_count(catalog.get("model", "llama2-7b")) == pytest.approx(6.74e9, rel=0.01)
    assert F.param_count(catalog.get("model", "gpt3-175b")) == pytest.approx(175e9, rel=0.01)


def test_moe_active_parameters_and_flops_use_top_k():
    m = catalog.get("model", "mixtral-8x7b")
    pc = F.param_counts(m)
    assert pc.total == pytest.approx(46.7e9, rel=0.02)
    assert pc.active == pytest.approx(12.9e9, rel=0.02)
    per_token = F.flops_per_token(m)
    # GEMM part = 6 x active layer weights (norms excluded; the router is omitted, as in Megatron)
    layer_active = pc.active - pc.embedding - pc.output - m.hidden - m.layers * (
        pc.norms_per_layer + pc.router_per_layer)
    assert per_token.gemm == pytest.approx(6 * layer_active)


def test_selective_recompute_adds_only_attention_core():
    m = gpt()
    f0, fs = F.flops_per_token(m), F.flops_per_token(m, recompute="selective")
    assert fs.recompute == pytest.approx(4 * m.seq_len * m.hidden * m.layers)
    assert fs.model == f0.model


def test_multi_head_latent_attention_widths_and_params():
    m = catalog.get("model", "deepseek-v3")
    w = F.attention_widths(m)
    assert (w.qk, w.v, w.latent) == (128 * 192, 128 * 128, 512 + 64)
    # 671B published (query compression rank 1536; the MTP module is not counted in the 671B)
    assert F.param_count(m) == pytest.approx(671e9, rel=0.005)
    fpt = F.flops_per_token(m, seq_len=4096)
    assert fpt.attention_core == pytest.approx(3 * 2 * 4096 * (w.qk + w.v) * (m.layers + m.mtp_layers))
    # the same model without MLA fields is the GQA-shaped count
    plain = m.model_copy(update={"mla_kv_lora_rank": None, "mla_rope_dim": None})
    assert F.attention_widths(plain).qk == 128 * 128 and F.param_count(plain) > F.param_count(m)


def test_specs_with_list_fields_are_not_cached_but_work():
    m = ModelSpec(layers=2, hidden=64, heads=4, seq_len=128, source=["paper", "config"])
    assert F.param_count(m) == F.param_count(m.model_copy(update={"source": None}))
    assert F.flops_per_token(m).model > 0
