"""``clustertwin validate`` kind ``infer``: predict a measured serving case.

Case fields (validation/README.md): ``model``, ``node`` or ``gpu``, ``gpus``, ``tp``, ``pp``,
``precision``, ``kv_precision``, ``input_len``, ``output_len`` and at most one of ``batch``,
``concurrency``, ``request_rate`` (none: offline maximum throughput); optional ``num_requests``.

Conventions for fields a case leaves out:

- ``tp``: the divisor of ``gpus`` (within one node) with the highest predicted output throughput,
  as ``infer size`` would choose; reported under ``predicted.layout``;
- ``input_len`` / ``output_len``: ``DEFAULT_INPUT_LEN`` / ``DEFAULT_OUTPUT_LEN`` (a chat-style mix);
- ``num_requests`` (open-loop runs): 1000, the ``vllm bench serve`` default; throughput counts the
  whole run, drain included, as benchmark clients do.
"""

from __future__ import annotations

from typing import Any

from clustertwin import catalog
from clustertwin.errors import SpecError
from clustertwin.infer import inputs
from clustertwin.infer.estimator import InferEstimate, estimate
from clustertwin.specs.hardware import GPUSpec
from clustertwin.specs.loading import build, load
from clustertwin.specs.model import ModelSpec
from clustertwin.specs.node import NodeSpec

#: prompt / generation lengths assumed when a case does not state them: a chat-style request with a
#: prompt and an answer of a few hundred tokens each (ShareGPT / OpenOrca means are 200-600 tokens)
DEFAULT_INPUT_LEN = 512
DEFAULT_OUTPUT_LEN = 512
DEFAULT_NUM_REQUESTS = 1000

_KNOWN = {"id", "kind", "source", "notes", "measured", "model", "node", "gpu", "gpus", "tp", "pp", "precision",
          "kv_precision", "input_len", "output_len", "batch", "concurrency", "request_rate", "num_requests"}


def _model(ref: Any) -> ModelSpec:
    if isinstance(ref, ModelSpec):
        return ref
    if isinstance(ref, str):
        return catalog.get("model", ref)
    return load(ModelSpec, ref, kind="model")


def node_for(case_node: Any = None, case_gpu: Any = None, gpus: int | None = None) -> NodeSpec:
    """The node a case runs on: a node preset/spec, or a bare GPU placed in a node of ``gpus`` GPUs
    with the GPU's own scale-up links (NVSwitch when it has NVLink bandwidth, PCIe otherwise)."""
    if case_node is not None:
        if isinstance(case_node, NodeSpec):
            return case_node
        return catalog.get("node", case_node) if isinstance(case_node, str) else build(NodeSpec, case_node)
    if case_gpu is None:
        raise SpecError("an infer case needs 'node' or 'gpu'", path=("node",))
    gpu = case_gpu if isinstance(case_gpu, GPUSpec) else (
        catalog.get("gpu", case_gpu) if isinstance(case_gpu, str) else build(GPUSpec, case_gpu))
    kind = "nvswitch" if gpu.scale_up_gb_per_s > 0 else "pcie"
    return NodeSpec(gpu=gpu, gpus=max(8, gpus or 1), scale_up={"kind": kind})


def predict(case: dict) -> tuple[InferEstimate, dict[str, Any]]:
    """Estimate for a case, and the layout/assumption notes."""
    unknown = set(case) - _KNOWN
    if unknown:
        raise SpecError(f"unknown infer case key '{sorted(unknown)[0]}'")
    if "model" not in case:
        raise SpecError("an infer case needs 'model'", path=("model",))
    for key in ("gpus", "tp", "pp", "input_len", "output_len", "batch", "concurrency", "num_requests"):
        inputs.count(key, case.get(key))
    inputs.positive("request_rate", case.get("request_rate"))
    model = _model(case["model"])
    gpus = int(case.get("gpus") or case.get("tp") or 1)
    node = node_for(case.get("node"), case.get("gpu"), gpus)
    precision = str(case.get("precision", "bf16"))
    assumed: dict[str, Any] = {}
    isl = case.get("input_len")
    osl = case.get("output_len")
    if isl is None:
        isl = assumed["input_len"] = DEFAULT_INPUT_LEN
    if osl is None:
        osl = assumed["output_len"] = DEFAULT_OUTPUT_LEN
    kw = {"gpus": gpus, "pp": int(case.get("pp", 1)), "precision": precision,
          "kv_precision": case.get("kv_precision"), "input_len": int(isl), "output_len": int(osl),
          "batch": case.get("batch"), "concurrency": case.get("concurrency"),
          "request_rate": case.get("request_rate"),
          "num_requests": int(case.get("num_requests", DEFAULT_NUM_REQUESTS))}
    if "tp" in case:
        est = estimate(model, node, tp=int(case["tp"]), **kw)
        return est, assumed
    best: InferEstimate | None = None
    errors: list[str] = []
    for tp in [t for t in (1, 2, 4, 8, 16, 32, 64, 72) if t <= min(gpus, node.gpus) and gpus % (t * kw["pp"]) == 0]:
        try:
            est = estimate(model, node, tp=tp, **kw)
        except SpecError as e:
            errors.append(str(e))
            continue
        if best is None or est.output_tokens_per_s > best.output_tokens_per_s:
            best = est
    if best is None:
        raise SpecError(errors[-1] if errors else "no tensor-parallel degree fits")
    assumed["tp"] = best.tp
    return best, assumed


def evaluate(case: dict) -> dict[str, Any]:
    """Predicted ``throughput_tokens_per_s``, ``output_tokens_per_s``, ``ttft_ms``, ``tpot_ms`` (+ layout)."""
    est, assumed = predict(case)
    out: dict[str, Any] = {
        "throughput_tokens_per_s": est.throughput_tokens_per_s,
        "output_tokens_per_s": est.output_tokens_per_s,
        "ttft_ms": est.ttft_ms,
        "tpot_ms": est.tpot_ms,
        "layout": {"tp": est.tp, "pp": est.pp, "replicas": est.replicas, "batch": round(est.batch, 1),
                   "mode": est.mode, "bound": est.bound},
    }
    if assumed:
        out["assumed"] = assumed
    return out
