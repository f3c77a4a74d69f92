"""Named efficiency, overhead and engine parameters of the inference model (``InferParams``).

Every figure is physically motivated and documented with where its default comes from; defaults were
checked against the public serving measurements of the validation set (TensorRT-LLM, NIM, MLPerf),
never fitted per case. ``Calibration.infer`` overrides any of them by name (unknown names are errors
with the nearest valid name).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.specs.base import Spec
from clustertwin.specs.calibration import SECTION_CHECKS, Calibration
from clustertwin.specs.hardware import FP8_GEMM_EFFICIENCY_RATIO

_Frac = Annotated[float, Field(gt=0, le=1)]
_NonNeg = Annotated[float, Field(ge=0)]


class InferParams(Spec):
    """Inference-model parameters (defaults: public measurements; see docs/infer.md)."""

    gemm_efficiency: _Frac = 0.68
    """Achieved fraction of the dense tensor peak by large weight GEMMs (prefill, big decode batches).
    cuBLAS/TRT-LLM GEMMs reach 65-75% of dense peak on Hopper (power-limited clocks) and ~75-85% on
    A100; prefill of a 2k prompt on A100 (TRT-LLM, 120 ms for Llama-7B) implies ~0.72 end to end."""
    fp8_gemm_efficiency_ratio: _Frac = FP8_GEMM_EFFICIENCY_RATIO  # one value with training (train.params)
    """FP8 GEMMs reach a smaller fraction of their (2x) peak than 16-bit GEMMs: per-tensor scaling,
    fp32 accumulation promotion and the power limit. Hopper FP8 GEMM benchmarks reach ~1,150-1,350 of
    1,979 TFLOP/s vs ~650-750 of 989 for BF16."""
    attention_efficiency: _Frac = 0.5
    """Achieved fraction of the 16-bit tensor peak by attention (FlashAttention-2/3 forward reaches
    35-75% depending on head dim and sequence length; paged decode attention is memory-bound)."""
    hbm_efficiency: _Frac = 0.85
    """Achieved fraction of the HBM datasheet bandwidth when streaming weights and KV cache (STREAM-like
    copies reach 85-92% on A100/H100; decode GEMV kernels 75-90%)."""
    roofline_overlap: _Frac = 0.3
    """Fraction of the shorter of (compute time, memory time) of one operator hidden under the longer:
    1 is the ideal roofline max(), 0 is no overlap (sum). Kernels near the ridge point neither saturate
    compute nor bandwidth; LLM-Viewer's pure roofline over-estimates decode throughput 1.7-1.9x
    (LLM-Viewer issue #4), which a low overlap reproduces."""
    layer_overhead_us: _NonNeg = 35.0
    """Fixed time per transformer layer per forward step (kernel launches, tails, norms, RoPE, small
    element-wise kernels): ~8-12 kernels of 3-4 µs each even with CUDA graphs."""
    step_overhead_ms: _NonNeg = 1.5
    """Fixed time per engine iteration outside the layers: sampling, scheduler, detokenisation hand-off
    (TRT-LLM/vLLM iteration overhead 1-3 ms at small batch)."""
    seq_overhead_us: _NonNeg = 4.0
    """Host time per sequence per iteration that the GPU waits for (request bookkeeping, sampling
    set-up, stop checks, output hand-off): a few µs per request in C++ runtimes, more in Python ones
    (vLLM's CPU overhead at batch >256 is a documented bottleneck)."""
    tp_link_efficiency: _Frac = 0.75
    """Fallback TP all-reduce: achieved fraction of the scale-up (NVLink) per-direction bandwidth as
    nccl-tests bus bandwidth (H100 NVSwitch: ~340-370 of 450 GB/s at tens of MB). Used only when the
    collective model (``clustertwin.comm``) is not available."""
    tp_allreduce_latency_us: _NonNeg = 12.0
    """Fallback TP all-reduce latency per call, µs (custom one-shot all-reduce kernels of TRT-LLM/vLLM:
    8-15 µs on NVLink; NCCL ring ~20-30 µs). Used only without ``clustertwin.comm``."""
    kv_cache_free_mem_fraction: _Frac = 0.9
    """Fraction of the device memory left after weights and the runtime reserve that the engine gives
    to the KV cache (TensorRT-LLM ``kv_cache_free_gpu_mem_fraction`` default 0.90, NVIDIA's published
    tables use 0.95; vLLM sizes the KV cache from what its ``gpu_memory_utilization`` leaves after
    profiling weights and activations)."""
    runtime_reserve_gib: _NonNeg = 2.0
    """Per-GPU memory held by the CUDA context, activation workspace and communication buffers, GiB."""
    max_batch_seqs: Annotated[int, Field(gt=0)] = 2048
    """Engine limit on concurrently scheduled sequences (TensorRT-LLM ``max_batch_size`` default 2048;
    vLLM ``max_num_seqs`` 256-1024)."""
    max_batch_tokens: Annotated[int, Field(gt=0)] = 8192
    """Engine limit on tokens per iteration (prefill chunk + decodes) for online serving (TRT-LLM
    ``max_num_tokens`` 8192 default; vLLM ``max_num_batched_tokens`` 2048-8192 with chunked prefill)."""
    int4_dequant_overhead: _NonNeg = 0.15
    """Extra GEMM time of weight-only INT4 (AWQ/GPTQ) kernels for dequantisation, as a fraction of the
    16-bit compute time (Marlin/AWQ kernels lose 10-20% at large batch)."""
    kv_transfer_efficiency: _Frac = 0.7
    """Disaggregated serving: achieved fraction of the scale-out NIC bandwidth when moving a prompt's KV
    cache from a prefill to a decode instance (NIXL/UCX RDMA reaches 60-85% of line rate)."""

    cold_start_fixed_s: _NonNeg = 30.0
    """Replica start-up besides moving the weights: container start from a cached image, engine
    initialisation, CUDA-graph capture and warm-up (Kubernetes replica start "30 seconds to several
    minutes"; NVIDIA Dynamo snapshots cut start-up "from minutes to under 5 seconds")."""
    weights_nvme_gb_per_s: Annotated[float, Field(gt=0)] = 2.25
    """Checkpoint read rate from a node-local NVMe drive, GB/s (SkyPilot: a 14.19 GB 7B model in
    11.72 s). Standard loaders reach 1.5-2 GB/s (LLaMA-2-70B loads in 84 s, ServerlessLLM)."""
    weights_object_store_gb_per_s: Annotated[float, Field(gt=0)] = 0.19
    """Checkpoint read rate from an object store mounted as a file system (SkyPilot: S3 mount 0.19 GB/s,
    142 s for 14.19 GB)."""
    weights_network_efficiency: _Frac = 0.5
    """Achieved fraction of the node's scale-out NIC bandwidth when streaming weights from a peer or a
    parallel file system (TCP/HTTP range reads and deserialisation: about half of line rate)."""
    prefix_cache_fraction: _Frac = 0.5
    """Fraction of a replica's KV-cache capacity that holds reusable prefix blocks between requests
    (vLLM automatic prefix caching keeps freed blocks until they are evicted; about half the pool is free
    at moderate load)."""

    @classmethod
    def resolve(cls, calibration: Calibration | None = None, params: InferParams | None = None) -> InferParams:
        """Defaults, then ``params``, then ``calibration.infer`` overrides (validated by name)."""
        base = params or cls()
        if calibration is None or not calibration.infer:
            return base
        unknown = [k for k in calibration.infer if k not in cls.model_fields]
        if unknown:
            raise SpecError(f"unknown parameter '{unknown[0]}'{did_you_mean(unknown[0], cls.model_fields)}",
                            path=("infer", unknown[0]))
        data = base.model_dump()
        data.update(calibration.infer)
        try:
            return cls.model_validate(data)
        except Exception as e:  # pydantic ValidationError -> one line
            raise SpecError(f"bad infer calibration: {e}".splitlines()[0], path=("infer",)) from None


def _check_section(section: dict[str, float]) -> None:
    """Names and ranges of a calibration's ``infer`` section (registered in ``SECTION_CHECKS``)."""
    from pydantic import ValidationError

    if any(k not in InferParams.model_fields for k in section):
        InferParams.resolve(Calibration(infer=section))  # names the unknown parameter and its nearest valid name
    try:
        InferParams.model_validate({**InferParams().model_dump(), **section})
    except ValidationError as e:
        err = e.errors()[0]
        name = ".".join(str(p) for p in err["loc"])
        raise SpecError(f"{err['msg']} (got {err.get('input')!r})", path=("infer", name)) from None


SECTION_CHECKS["infer"] = _check_section
