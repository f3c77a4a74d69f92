"""Latency and throughput of one deployment (``clustertwin infer estimate``).

Modes, by what the workload fixes:

- ``batch`` b (static batching, as in TensorRT-LLM's session benchmark): each wave prefills
  ``b·input`` tokens in one pass, then runs ``output − 1`` decode iterations; throughput
  ``b·output / (t_prefill + Σ_j t_decode(b, input + j))``, TTFT = prefill time, TPOT = mean decode step.
  A batch larger than the KV cache runs in waves.
- ``offline`` (no load given; all requests queued): steady state of continuous batching at the
  largest batch ``B*`` the KV cache and ``max_batch_seqs`` allow. Flow balance puts
  ``P = B·input/output`` prefill tokens in every iteration; ``t = t_iter(B, ctx = B·(input + output/2),
  P)``, output tokens/s = ``B/t``. TTFT/TPOT are those of one full batch arriving at once (simulated).
- ``concurrency`` C (closed loop) and ``request_rate`` λ (open loop, Poisson): continuous-batching
  simulation (:mod:`clustertwin.infer.simulate`) of ``num_requests`` requests, spread over replicas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.infer import inputs
from clustertwin.infer.params import InferParams
from clustertwin.infer.roofline import Deployment, StepModel
from clustertwin.infer.simulate import Workload, simulate
from clustertwin.specs.calibration import Calibration
from clustertwin.specs.model import ModelSpec
from clustertwin.specs.node import NodeSpec

#: offline engines size their token budget to the batch (trtllm-bench caps max_num_tokens at 32,768 =
#: 4 x the 8,192 default): the offline steady state may use this multiple of ``max_batch_tokens``
OFFLINE_TOKEN_BUDGET_FACTOR = 4


@dataclass
class InferEstimate:
    """Predicted serving figures of ``replicas`` replicas (totals over all ``gpus``)."""

    mode: str
    model: str
    gpu: str
    gpus: int
    tp: int
    pp: int
    replicas: int
    precision: str
    kv_precision: str
    input_len: int
    output_len: int
    batch: float
    """Mean decoding sequences per replica at the operating point."""
    max_batch: int
    """Largest batch the KV cache and the engine allow per replica (the KV limit; same as ``kv_batch_limit``)."""
    output_tokens_per_s: float
    throughput_tokens_per_s: float
    request_throughput_per_s: float
    ttft_ms: float
    tpot_ms: float
    ttft_ms_p99: float | None = None
    tpot_ms_p99: float | None = None
    simulated_max_batch: int | None = None
    """Largest decode batch reached per replica in the simulation (static batching: the batch run)."""
    bound: str = ""
    """What limits throughput: compute, memory (HBM), kv-capacity, batch-limit or latency."""
    memory: dict[str, float] = field(default_factory=dict)
    breakdown: dict[str, Any] = field(default_factory=dict)

    @property
    def output_tokens_per_s_per_gpu(self) -> float:
        return self.output_tokens_per_s / self.gpus

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["output_tokens_per_s_per_gpu"] = self.output_tokens_per_s_per_gpu
        d["kv_batch_limit"] = self.max_batch
        # the same figures under the keys of vLLM benchmark result files
        d.update({"request_throughput": self.request_throughput_per_s, "output_throughput": self.output_tokens_per_s,
                  "total_token_throughput": self.throughput_tokens_per_s, "mean_ttft_ms": self.ttft_ms,
                  "mean_tpot_ms": self.tpot_ms, "p99_ttft_ms": self.ttft_ms_p99, "p99_tpot_ms": self.tpot_ms_p99})
        return d


def steady_state(step: StepModel, input_len: float, output_len: float, batch: Any) -> dict[str, np.ndarray]:
    """Continuous-batching steady state at decode batch ``batch`` (vectorised): per iteration ``B``
    decode tokens and ``P = B·input/output`` prefill tokens (flow balance); returns iteration time
    (= TPOT), its breakdown, output tokens/s and requests/s of one replica."""
    B = np.asarray(batch, dtype=float)
    P = B * input_len / output_len
    ctx = B * (input_len + output_len / 2.0)
    pfa = P * input_len / 2.0
    logits = B + B / output_len
    br = step.breakdown(B, ctx, P, pfa, logits)
    t = br["total_s"]
    return {**br, "iteration_s": t, "prefill_tokens": P, "output_tokens_per_s": B / t,
            "requests_per_s": B / (output_len * t)}


def _bound(br: dict[str, Any], at_cap: bool, cap_reason: str) -> str:
    comp = float(br["gemm_compute_s"]) + float(br["attention_compute_s"])
    mem = float(br["gemm_memory_s"]) + float(br["attention_memory_s"])
    kind = "compute" if comp >= mem else "memory"
    return f"{kind} ({cap_reason})" if at_cap else kind


def estimate(model: ModelSpec, node: NodeSpec, *, gpus: int | None = None, tp: int = 1, pp: int = 1,
             precision: str = "bf16", kv_precision: str | None = None, input_len: int = 512,
             output_len: int = 256, batch: int | None = None, concurrency: int | None = None,
             request_rate: float | None = None, num_requests: int = 1000, length_cv: float = 0.0,
             chunked_prefill: bool = True, params: InferParams | None = None,
             calibration: Calibration | None = None, seed: int = 0) -> InferEstimate:
    """Latency and throughput of ``gpus`` GPUs serving ``model`` as ``gpus/(tp·pp)`` replicas.

    At most one of ``batch``, ``concurrency``, ``request_rate``; none = offline maximum throughput."""
    p = InferParams.resolve(calibration, params)
    inputs.count("gpus", gpus)
    inputs.count("tp", tp)
    inputs.count("pp", pp)
    inputs.count("input_len", input_len)
    inputs.count("output_len", output_len)
    inputs.count("batch", batch)
    inputs.count("concurrency", concurrency)
    inputs.count("num_requests", num_requests)
    inputs.positive("request_rate", request_rate)
    inputs.non_negative("length_cv", length_cv)
    given = [x for x in (batch, concurrency, request_rate) if x is not None]
    if len(given) > 1:
        raise SpecError("give at most one of batch, concurrency, request_rate")
    if input_len < 1 or output_len < 1:
        raise SpecError("input_len and output_len must be >= 1", path=("input_len",))
    gpus = gpus or tp * pp
    if gpus % (tp * pp):
        raise SpecError(f"gpus={gpus} is not a multiple of tp x pp = {tp * pp}", path=("gpus",))
    replicas = gpus // (tp * pp)
    dep = Deployment(model, node, tp, pp, precision, kv_precision, p, calibration)
    dep.check_fits()
    step = dep.step_model()
    mem = dep.memory()
    seq = input_len + output_len
    kv_seqs = math.floor(mem.kv_capacity_tokens / seq)
    if kv_seqs < 1:
        raise SpecError(f"a request of {seq} tokens does not fit the KV cache of {mem.kv_capacity_tokens:,.0f} "
                        f"tokens per replica ({model.id or model.name}, tp={tp}, {precision})")
    common = {"model": model.id or model.name or "model", "gpu": node.gpu.id or node.gpu.name or "gpu",
              "gpus": gpus, "tp": tp, "pp": pp, "replicas": replicas, "precision": precision,
              "kv_precision": str(dep.kv_precision), "input_len": input_len, "output_len": output_len,
              "memory": mem.to_dict()}
    max_batch = int(min(kv_seqs, p.max_batch_seqs))

    if batch is not None:
        if batch < 1:
            raise SpecError("batch must be >= 1", path=("batch",))
        per = math.ceil(batch / replicas)
        b = min(per, kv_seqs)
        waves = math.ceil(per / b)
        pre = step.breakdown(0.0, 0.0, b * input_len, b * input_len * input_len / 2.0, b)
        j = np.arange(1, output_len, dtype=float)
        dec_t = step.time(b, b * (input_len + j)) if output_len > 1 else np.zeros(0)
        t_pre = float(pre["total_s"])
        wave = t_pre + float(dec_t.sum())
        out_tps = replicas * b * output_len / wave
        mid = step.breakdown(b, b * (input_len + output_len / 2.0))
        tpot = float(dec_t.mean()) if dec_t.size else 0.0
        return InferEstimate(
            mode="batch", batch=float(b), max_batch=max_batch, simulated_max_batch=b, output_tokens_per_s=out_tps,
            throughput_tokens_per_s=out_tps * seq / output_len, request_throughput_per_s=out_tps / output_len,
            ttft_ms=t_pre * 1e3, tpot_ms=tpot * 1e3,
            bound=_bound(mid, b < per, "kv-capacity"),
            breakdown={"waves": waves, "prefill_s": t_pre, "decode_s": float(dec_t.sum()),
                       "decode_step_mid": {k: float(v) for k, v in mid.items()},
                       "prefill": {k: float(v) for k, v in pre.items()}},
            **common)

    if concurrency is None and request_rate is None:
        budget = OFFLINE_TOKEN_BUDGET_FACTOR * p.max_batch_tokens
        b_tok = int(budget / (1.0 + input_len / output_len))
        b = max(1, min(max_batch, b_tok))
        reason = "kv-capacity" if b == kv_seqs else ("batch-limit" if b == p.max_batch_seqs else "token-budget")
        ss = steady_state(step, input_len, output_len, b)
        out_tps = replicas * float(ss["output_tokens_per_s"])
        sim = simulate(dep, Workload(input_len, output_len, None, b, length_cv, seed=seed),
                       chunked_prefill=chunked_prefill, max_batch_seqs=b, max_batch_tokens=budget)
        return InferEstimate(
            mode="offline", batch=float(b), max_batch=max_batch, simulated_max_batch=sim.max_batch, output_tokens_per_s=out_tps,
            throughput_tokens_per_s=out_tps * seq / output_len, request_throughput_per_s=out_tps / output_len,
            ttft_ms=sim.ttft_ms["mean"], tpot_ms=sim.tpot_ms["mean"], ttft_ms_p99=sim.ttft_ms["p99"],
            tpot_ms_p99=sim.tpot_ms["p99"], bound=_bound(ss, True, reason),
            breakdown={"iteration": {k: float(v) for k, v in ss.items()}, "first_batch_sim": sim.to_dict()},
            **common)

    if concurrency is not None:
        if concurrency < 1:
            raise SpecError("concurrency must be >= 1", path=("concurrency",))
        c = max(1, math.ceil(concurrency / replicas))
        n = 4 * c + 32
        wl = Workload(input_len, output_len, None, n, length_cv, concurrency=c, seed=seed)
        sim = simulate(dep, wl, chunked_prefill=chunked_prefill, warmup=c)
    else:
        assert request_rate is not None
        if request_rate <= 0:
            raise SpecError("request_rate must be > 0", path=("request_rate",))
        n = max(1, math.ceil(num_requests / replicas))
        wl = Workload(input_len, output_len, request_rate / replicas, n, length_cv, seed=seed)
        sim = simulate(dep, wl, chunked_prefill=chunked_prefill)
    op = step.breakdown(sim.mean_batch, sim.mean_batch * (input_len + output_len / 2.0))
    at_cap = sim.max_batch >= max_batch
    return InferEstimate(
        mode="concurrency" if concurrency is not None else "request_rate",
        batch=sim.mean_batch, max_batch=max_batch, simulated_max_batch=sim.max_batch,
        output_tokens_per_s=replicas * sim.output_tokens_per_s,
        throughput_tokens_per_s=replicas * sim.throughput_tokens_per_s,
        request_throughput_per_s=replicas * sim.request_throughput_per_s,
        ttft_ms=sim.ttft_ms["mean"], tpot_ms=sim.tpot_ms["mean"], ttft_ms_p99=sim.ttft_ms["p99"],
        tpot_ms_p99=sim.tpot_ms["p99"], bound=_bound(op, at_cap, "kv-capacity") if at_cap else "latency",
        breakdown={"simulation": sim.to_dict(), "iteration_at_mean_batch": {k: float(v) for k, v in op.items()}},
        **common)
