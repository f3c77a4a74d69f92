"""Accuracy against the shared calibration set (validation/README.md). Prints the computed figures.

Targets (issue 13) over all measured keys: train_megatron.yaml median |rel err| <= 5% and max <= 15%;
train_vtrain_single.yaml mean <= 12% and mean Spearman (groups of the same model, GPU count and global
batch with >= 6 layouts) >= 0.92; train_runs.yaml (GPU-hours incl. failures) within 15%; every case of
train_more.yaml evaluates (MoE rows included); train_nemo.yaml median <= 5% (target 10%; 4.9% achieved
with the 2025-26 Megatron-Bridge stack: FlashAttention-3 class attention on Hopper, fused cross-entropy,
FP8 current scaling, FP8 parameter gather). Bound below the
issue's where the model does not reach it yet, stated as the achieved figure: dense rows of train_more.yaml
median <= 8.5% (target 10%, 8.0% achieved; it was 11.3% before the torchtitan memory mechanisms of
train/memory_fsdp.py; the rest of the misses: the torchtitan rows on 500 W / HBM2e H100s and the torchao
rows on power-limited B200s run 10-145% slower than the catalog GPUs; the no-CP long-sequence rows do not
publish their layout), and train_llama3.yaml every value within 10% with the published stage plan.
"""

from __future__ import annotations

import collections
import statistics

import pytest
import yaml
from scipy.stats import spearmanr

from clustertwin import validate
from tests.conftest import VALIDATION, need_shared

try:  # the C loader reads the 1,440-case file ~7x faster
    _Loader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader


def _cases(name: str) -> list[dict]:
    path = need_shared(VALIDATION / name)
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=_Loader)["cases"]


def _errors(cases: list[dict]) -> tuple[list[float], list[validate.CaseResult]]:
    results = [validate.evaluate_case(c) for c in cases]
    failed = [(r.id, r.error) for r in results if r.error]
    assert not failed, failed
    return [abs(e) for r in results for e in r.rel_error.values()], results


def _report(results) -> None:
    for r in results:
        for k, e in r.rel_error.items():
            print(f"{r.id:44s} {k:24s} measured {r.measured[k]:>10.4g} predicted {r.predicted[k]:>10.4g} {e:+.1%}")


def test_megatron_weak_scaling_runs():
    errs, results = _errors(_cases("train_megatron.yaml"))
    _report(results)
    med, mx = statistics.median(errs), max(errs)
    print(f"\nMegatron: {len(errs)} values, median |rel err| {med:.1%}, max {mx:.1%}")
    assert med <= 0.05
    assert mx <= 0.15


def test_nemo_runs():
    errs, results = _errors(_cases("train_nemo.yaml"))
    _report(results)
    med = statistics.median(errs)
    print(f"\nNeMo: {len(errs)} values, median |rel err| {med:.1%}")
    assert med <= 0.05


def test_more_runs_all_evaluate_and_dense_rows_are_close():
    from clustertwin.train.validation import _model

    cases = _cases("train_more.yaml")
    _, results = _errors(cases)  # asserts that no case fails to evaluate (MoE rows included)
    dense = [abs(e) for c, r in zip(cases, results, strict=True) if _model(c).moe is None
             for e in r.rel_error.values()]
    med = statistics.median(dense)
    print(f"\ntrain_more: {len(results)} cases evaluated; dense rows {len(dense)} values, median {med:.1%}")
    assert med <= 0.085


def test_llama3_405b_runs_with_a_stage_plan_that_fits():
    errs, results = _errors(_cases("train_llama3.yaml"))
    _report(results)
    print(f"\nLlama 3 405B: max |rel err| {max(errs):.1%}")
    assert max(errs) <= 0.10
    for r in results:
        lay = r.predicted["layout"]
        assert r.predicted["fits"] and lay["tp"] == 8 and lay["pp"] == 16
        assert lay["vpp"] > 1 and lay["embedding_in_split"] and lay["loss_in_split"]


def test_vtrain_single_node_error_and_ranking():
    cases = _cases("train_vtrain_single.yaml")
    errs, results = _errors(cases)
    groups: dict[tuple, list[tuple[float, float]]] = collections.defaultdict(list)
    for c, r in zip(cases, results, strict=True):
        key = (c["model"]["name"], c["gpus"], c["parallelism"]["global_batch"])
        groups[key].append((r.measured["step_time_s"], r.predicted["step_time_s"]))
    rhos = [spearmanr([m for m, _ in g], [p for _, p in g]).statistic for g in groups.values() if len(g) >= 6]
    mean_err, mean_rho = statistics.fmean(errs), statistics.fmean(rhos)
    print(f"\nvTrain: {len(errs)} cases, mean |rel err| {mean_err:.1%}, median {statistics.median(errs):.1%}, "
          f"max {max(errs):.1%}; Spearman over {len(rhos)} groups: mean {mean_rho:.3f}, min {min(rhos):.3f}")
    assert len(rhos) == 88
    assert mean_err <= 0.12
    assert mean_rho >= 0.92


def test_llama2_gpu_hours_include_failures():
    errs, results = _errors(_cases("train_runs.yaml"))
    for r in results:
        print(f"{r.id:24s} measured {r.measured['gpu_hours']:>12,.0f} predicted {r.predicted['gpu_hours']:>12,.0f} "
              f"{r.rel_error['gpu_hours']:+.1%} ETTR {r.predicted['ettr']:.3f} layout {r.predicted['layout']}")
        assert r.predicted["gpu_hours"] == pytest.approx(r.predicted["failure_free_gpu_hours"] / r.predicted["ettr"],
                                                         rel=0.02)
    assert max(errs) <= 0.15


@pytest.mark.parametrize("kind", ["train", "train_run"])
def test_validate_cli_reports_kinds(cli, kind):
    name = "train_runs.yaml" if kind == "train_run" else "train_nemo.yaml"
    path = need_shared(VALIDATION / name)
    r = cli("validate", str(path), "--json")
    assert r.code == 0, r.stderr
    import json

    out = json.loads(r.stdout)
    assert out["summary"]["by_kind"][kind]["failed"] == 0
    assert all("layout" in c["predicted"] for c in out["cases"])


def test_case_shapes_are_understood():
    from clustertwin.train.validation import evaluate, evaluate_run

    # cluster preset, partial layout: the search fills the rest and keeps what is given
    p = evaluate({"model": "llama3-8b", "cluster": "ref-1k-h100",
                  "parallelism": {"tp": 2, "global_batch": 1024, "precision": "bf16"}})
    assert p["layout"]["tp"] == 2 and p["gpus"] == 1024 and p["fits"]
    # node + gpus, full layout on part of a node
    p = evaluate({"model": {"layers": 12, "hidden": 1024, "heads": 16, "seq_len": 1024}, "node": "dgx-a100-80gb",
                  "gpus": 4, "parallelism": {"tp": 2, "pp": 1, "dp": 2, "micro_batch": 2, "global_batch": 8,
                                             "recompute": "full", "precision": "fp16"}})
    assert p["gpus"] == 4 and p["step_time_s"] > 0
    # a layout using fewer GPUs than the cluster runs on tp x pp x dp x cp GPUs
    p = evaluate({"model": "llama3-8b", "cluster": {"node": "dgx-h100", "nodes": 4},
                  "parallelism": {"tp": 1, "pp": 1, "dp": 16, "global_batch": 128}})
    assert p["gpus"] == 16
    # a run with an explicit node count
    r = evaluate_run({"model": "llama2-7b", "cluster": {"node": "dgx-a100-80gb", "nodes": 64}, "tokens": 1e12,
                      "parallelism": {"global_batch": 1024, "precision": "bf16"}})
    assert r["gpus"] == 512 and r["gpu_hours"] > 0 and r["days"] > 0


def test_a_case_names_its_stack_and_the_prediction_says_what_was_filled():
    from clustertwin.errors import SpecError
    from clustertwin.train.validation import evaluate

    base = {"model": "llama3-8b", "cluster": "ref-1k-h100", "parallelism": {"tp": 2, "global_batch": 1024},
            "source": "a Megatron-LM run, 2022"}
    inferred = evaluate(base)
    named = evaluate({**base, "stack": "deepspeed-2022"})
    assert named["software_stack"] == "deepspeed-2022" and inferred["software_stack"] != "deepspeed-2022"
    assert not named["layout"]["sequence_parallel"]  # the stack has none: never searched in
    assert set(named["searched_fields"]) >= {"dp", "micro_batch", "recompute"} and "tp" not in named["searched_fields"]
    with pytest.raises(SpecError, match="did you mean 'deepspeed-2022'"):
        evaluate({**base, "stack": "deepspeed-2023"})
    with pytest.raises(SpecError, match="disagree"):
        evaluate({**base, "stack": "deepspeed-2022",
                  "parallelism": {**base["parallelism"], "software_stack": "megatron-2022"}})


def test_an_inline_model_named_as_a_preset_takes_the_fields_it_leaves_out():
    """A source table's summary of Qwen3-30B-A3B omits head_dim 128 (hidden / heads would be 64); the inline
    spec names the preset and agrees with it, so the preset fills it. A spec that disagrees on a field it
    gives is a variant and stays as written."""
    from clustertwin.train.validation import _model

    raw = {"name": "qwen3-30b-a3b", "layers": 48, "hidden": 2048, "heads": 32, "kv_heads": 4, "ffn_hidden": 6144,
           "vocab": 151936, "seq_len": 4096, "ffn": "swiglu",
           "moe": {"experts": 128, "top_k": 8, "expert_ffn_hidden": 768, "shared_experts": 0}}
    assert _model({"model": raw}).head_dim == 128
    variant = {**raw, "layers": 24}
    assert _model({"model": variant}).head_dim is None
    oss = _model({"model": {"name": "gpt-oss-120b", "layers": 36, "hidden": 2880, "heads": 64, "kv_heads": 8,
                            "head_dim": 64, "ffn_hidden": 2880, "vocab": 201088, "ffn": "swiglu",
                            "moe": {"experts": 128, "top_k": 4, "expert_ffn_hidden": 2880}}})
    assert (oss.attention_window, oss.full_attention_every, oss.gate_activation) == (128, 2, "quick_gelu")
