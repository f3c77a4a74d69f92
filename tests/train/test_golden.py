"""Golden outputs of the step-time and memory model: every key of ``evaluate_layouts`` for 26
representative layouts (dense, interleaved, CP, MoE with expert-TP != TP, MoE overlap and per-module recompute,
ZeRO-2/3, every recompute mode, FP8, both software stacks, seven clusters, a scattered placement, an image
dataset) and one vectorised batch, pinned to rel. 1e-9.

A restructuring must leave these numbers unchanged; a physics change regenerates them deliberately
(``python -m tests.train.test_golden --regen``) and says why in its commit message.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from clustertwin import catalog, specs
from clustertwin.train.layout import MOE_OVERLAP_CODES, RECOMPUTE_CODES, RECOMPUTE_MODULE_BITS, Layouts
from clustertwin.train.params import DEFAULT_PARAMS, params_for_stack
from clustertwin.train.result import StepResult
from clustertwin.train.step import evaluate_layouts

GOLDEN = Path(__file__).parent / "golden" / "evaluate_layouts.json"
REL_TOL = 1e-9

TINY = {"name": "tiny-gpt", "layers": 12, "hidden": 768, "heads": 12, "seq_len": 1024, "vocab": 50257}

# id: (model, cluster, layout (tp, pp, dp, cp, ep, vpp, mbs, recompute, zero, sp), global batch, precision,
#      seq_len, stack)
CASES: dict[str, tuple] = {
    "8b-dp-ref1k": ("llama3-8b", "ref-1k-h100", (1, 1, 1024, 1, 1, 1, 1, "none", 1, 0), 1024, "bf16", None, "auto"),
    "8b-zero3-ref1k": ("llama3-8b", "ref-1k-h100", (1, 1, 1024, 1, 1, 1, 2, "full", 3, 0), 2048, "bf16", None, "auto"),
    "8b-cp4-32k": ("llama3-8b", "ref-1k-h100", (2, 1, 128, 4, 1, 1, 1, "selective", 1, 1), 256, "bf16", 32768,
                   "auto"),
    "70b-tp8pp4": ("llama3-70b", "ref-1k-h100", (8, 4, 32, 1, 1, 1, 1, "selective", 1, 1), 1024, "bf16", None,
                   "auto"),
    "70b-tp8pp4-vpp5": ("llama3-70b", "ref-1k-h100", (8, 4, 32, 1, 1, 5, 1, "selective", 1, 1), 1024, "bf16",
                        None, "auto"),
    "70b-fp8": ("llama3-70b", "ref-1k-h100", (4, 4, 64, 1, 1, 2, 2, "none", 1, 1), 1024, "fp8", None, "auto"),
    "70b-legacy-full": ("llama3-70b", "ref-1k-h100", (8, 8, 16, 1, 1, 1, 1, "full", 0, 0), 512, "bf16", None,
                        "legacy"),
    "405b-16k-tp8pp16": ("llama3-405b", "llama3-16k-h100-roce", (8, 16, 128, 1, 1, 1, 1, "selective", 1, 1), 2048,
                         "bf16", None, "auto"),
    "405b-16k-cp16-128k": ("llama3-405b", "llama3-16k-h100-roce", (8, 16, 8, 16, 1, 1, 1, "selective", 1, 1), 64,
                           "bf16", 131072, "auto"),
    "405b-8k-te-z2": ("llama3-405b", "llama3-16k-h100-roce", (8, 8, 128, 1, 1, 1, 1, "full", 2, 1), 1024, "bf16",
                      None, "te"),
    "mixtral-ep8": ("mixtral-8x7b", "ref-1k-h100", (2, 1, 512, 1, 8, 1, 1, "none", 1, 1), 1024, "bf16", None,
                    "auto"),
    "mixtral-ep4-pp4": ("mixtral-8x7b", "ref-1k-h100", (2, 4, 128, 1, 4, 2, 2, "selective", 0, 1), 1024, "bf16",
                        None, "auto"),
    "dsv3-gb200": ("deepseek-v3", "gb200-nvl72-576", (1, 8, 72, 1, 8, 1, 1, "full", 1, 0), 576, "fp8", 4096,
                   "auto"),
    "7b-1gbe-tp4pp32": ("llama2-7b", "a100-512-1gbe", (4, 32, 4, 1, 1, 1, 1, "none", 1, 1), 512, "bf16", None,
                        "auto"),
    "7b-1gbe-tp8pp16": ("llama2-7b", "a100-512-1gbe", (8, 16, 4, 1, 1, 1, 1, "none", 1, 1), 512, "bf16", None,
                        "auto"),
    "175b-1gbe-legacy": ("gpt3-175b", "a100-512-1gbe", (8, 16, 4, 1, 1, 1, 1, "full", 0, 0), 256, "fp16", None,
                         "legacy"),
    "175b-ref1k-vpp2": ("gpt3-175b", "ref-1k-h100", (8, 12, 8, 1, 1, 2, 1, "selective", 1, 1), 1536, "bf16", None,
                        "auto"),
    "13b-zero2-mbs4": ("llama2-13b", "ref-1k-h100", (2, 1, 256, 1, 1, 1, 4, "none", 2, 1), 1024, "bf16", None,
                       "auto"),
    "70b-mi300x": ("llama3-70b", "dragonfly-16k-mi300x", (8, 2, 64, 1, 1, 1, 1, "selective", 1, 1), 1024, "bf16",
                   None, "auto"),
    "7b-ascend": ("llama2-7b", "ascend-910b-64", (8, 1, 8, 1, 1, 1, 1, "full", 1, 1), 64, "fp16", None, "auto"),
    "tiny-k80": (TINY, "k80-8gpu-node", (1, 1, 4, 1, 1, 1, 4, "none", 0, 0), 64, "fp32", None, "auto"),
    "8b-torus": ("llama3-8b", "tpu-style-torus-4k", (4, 2, 64, 1, 1, 2, 1, "selective", 1, 1), 512, "bf16", None,
                 "auto"),
    # expert-TP != TP (issue: group shapes once computed in two places that disagreed here), MoE overlap,
    # per-module recompute, a scattered placement and another dataset
    "mixtral-tp2-ep8-etp1": ("mixtral-8x7b", "ref-1k-h100", (2, 1, 256, 1, 8, 1, 1, "none", 1, 1), 1024, "bf16", None,
                             "auto", {"etp": 1}),
    "mixtral-tp4-ep8-etp1-a2a": ("mixtral-8x7b", "ref-1k-h100", (4, 1, 128, 1, 8, 1, 1, "selective", 1, 1), 512,
                                 "bf16", None, "auto", {"etp": 1, "moe_overlap": "a2a"}),
    "dsv3-etp2-dualpipe-rcmod": ("deepseek-v3", "deepseek-v3-2048-h800", (1, 16, 128, 1, 64, 1, 1, "none", 1, 0),
                                 4096, "fp8", 4096, "auto",
                                 {"etp": 2, "moe_overlap": "dualpipe", "rc_modules": ("layernorm", "mla_up_proj")}),
    "mixtral-ep8-scattered-imagenet": ("mixtral-8x7b", "ref-1k-h100", (2, 1, 256, 1, 8, 1, 1, "none", 1, 1), 1024,
                                    "bf16", None, "auto", {"placement": "scattered", "dataset": "imagenet-jpeg"}),
}


def _cluster(c: str):
    if c.endswith(".yaml") or "-h800" in c:
        return specs.load(specs.ClusterSpec, str(Path(__file__).resolve().parents[2] / "examples" / "clusters" /
                                                 f"{c}.yaml"))
    return catalog.get("cluster", c)


def _model(m):
    return specs.load(specs.ModelSpec, m, kind="model") if isinstance(m, dict) else catalog.get("model", m)


def flat(out: StepResult) -> dict:
    """The golden file's flat names of a StepResult's fields: the scalars, ``bd_<term>``, ``mem_<term>``,
    ``mem_total``, ``fits`` and ``plan_<stage>_layers``."""
    scalars = ("step_time_s", "tokens_per_s", "mfu", "hfu", "model_tflops_per_gpu", "hardware_tflops_per_gpu",
               "model_flops_per_step", "hardware_flops_per_step")
    d = {k: getattr(out, k) for k in scalars}
    d.update({f"bd_{k}": v for k, v in out.breakdown.as_dict().items()})
    d.update({f"mem_{k}": v for k, v in out.memory.as_dict().items()})
    d.update(mem_total=out.memory_total_bytes, fits=out.fits, plan_first_layers=out.stages.first,
             plan_middle_layers=out.stages.middle, plan_last_layers=out.stages.last)
    return d


def _run(case: tuple) -> dict[str, float]:
    model, cluster, lay, gb, prec, seq, stack, *rest = case
    extra = dict(rest[0]) if rest else {}
    m, c = _model(model), _cluster(cluster)
    tp, pp, dp, cp, ep, vpp, mbs, rc, z, sp = lay
    fields = {"etp": extra.pop("etp", 0), "moe_overlap": MOE_OVERLAP_CODES[extra.pop("moe_overlap", "auto")],
              "rc_modules": sum(RECOMPUTE_MODULE_BITS[n] for n in extra.pop("rc_modules", ()))}
    layouts = Layouts(tp, pp, dp, cp, ep, vpp, mbs, RECOMPUTE_CODES[rc], z, sp, **fields)
    out = evaluate_layouts(m, c, layouts, gb, prec, params_for_stack(DEFAULT_PARAMS, stack), seq, **extra)
    return {k: float(v) for k, v in flat(out).items()}


def _batch() -> dict[str, list[float]]:
    """40 layouts of Llama-3-70B on 1,024 H100 (the vectorised path): tp x pp x vpp x mbs x recompute x zero."""
    rows = [(tp, pp, 1024 // (tp * pp), 1, 1, v, b, r, z, int(tp > 1))
            for tp in (2, 4, 8) for pp in (2, 4) for v in (1, 2) for b in (1, 2) for r in (0, 1, 2) for z in (1, 3)]
    a = np.array(rows[:40], dtype=np.int64)
    lay = Layouts(*(a[:, i] for i in range(a.shape[1])))
    out = evaluate_layouts(catalog.get("model", "llama3-70b"), catalog.get("cluster", "ref-1k-h100"), lay, 1024,
                           "bf16", DEFAULT_PARAMS)
    return {k: np.broadcast_to(np.asarray(v, dtype=float), (len(lay),)).tolist() for k, v in flat(out).items()}


def _compute() -> dict:
    return {"cases": {k: _run(v) for k, v in CASES.items()}, "batch": _batch()}


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text())


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-300) or (a == b)


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_case_matches_golden(golden, case_id):
    want = golden["cases"][case_id]
    got = _run(CASES[case_id])
    diff = {k: (want[k], got.get(k)) for k in want if got.get(k) is None or not _close(got[k], want[k])}
    assert not diff, diff


def test_vectorised_batch_matches_golden(golden):
    want = golden["batch"]
    got = _batch()
    for k, w in want.items():
        assert k in got, k
        bad = [i for i, (a, b) in enumerate(zip(w, got[k], strict=True)) if not _close(b, a)]
        assert not bad, (k, bad[:5])


if __name__ == "__main__" and "--regen" in sys.argv:
    GOLDEN.write_text(json.dumps(_compute(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
