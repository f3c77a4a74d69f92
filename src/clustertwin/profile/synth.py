"""A profiler trace synthesized from the twin: the predicted step of :func:`~clustertwin.train.timeline.step_timeline`
written as PyTorch-profiler (Kineto) JSON, one document per representative rank, that ``clustertwin profile``
reads like a measured trace. It is the known-parameter input of ``calibrate --profile``'s round trip (a trace
made with parameters P is fitted back to P) and a way to see what the reader makes of a step whose terms are
known exactly.

Mapping (every segment of the timeline becomes one event of the same start and length, ``steps`` copies of
the step back to back, each under a ``ProfilerStep#N`` annotation on the host):

- compute segments -> a GEMM kernel (:data:`GEMM_KERNEL`) followed by a flash-attention kernel
  (:data:`ATTENTION_KERNEL`) holding the share ``attention_s / compute`` of the segment (``attention_s``: the
  twin's attention time, :func:`~clustertwin.profile.fit.with_attention`; none when not given); the optimizer
  step -> an Adam multi-tensor kernel;
- exposed communication -> an NCCL kernel whose ``Process Group Description`` names the group kind
  (``tp``, ``cp``, ``ep``, ``pp``, ``dp``), which the reader attributes by that description;
- the host stall -> nothing on the device (the reader counts it host-bound idle);
- the data stall -> a host ``DataLoader`` span over idle device time (the reader's data wait);
- waiting for the slowest GPU -> a ``cudaStreamSynchronize`` runtime span over idle device time (rank wait).

So the measured breakdown of the synthesized trace equals the estimate's terms; with pipeline parallelism
the bubble is idle device time with the host free, which a profiler cannot tell from host-bound idle (the
reader counts it in ``host_overhead``).
"""

from __future__ import annotations

from typing import Any

from clustertwin.train.timeline import step_timeline

GEMM_KERNEL = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
ATTENTION_KERNEL = "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>"
ADAM_KERNEL = "multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>>"
#: timeline stream -> (NCCL kernel name, process-group description)
COMM_KERNELS: dict[str, tuple[str, str]] = {
    "tp comm": ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "tp"),
    "cp comm": ("ncclDevKernel_SendRecv", "cp"),
    "ep all-to-all": ("ncclDevKernel_AllToAll_bf16", "ep"),
    "pp send/recv": ("ncclDevKernel_SendRecv", "pp"),
    "dp comm": ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "dp"),
}
GPU_STREAM = 7
DATA_SPAN = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
SYNC_SPAN = "cudaStreamSynchronize"


def _device(name: str, ts_us: float, dur_us: float, pid: int, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": pid, "tid": GPU_STREAM, "ts": ts_us, "dur": dur_us,
            "args": {"stream": GPU_STREAM, **args}}


def _host(cat: str, name: str, ts_us: float, dur_us: float, pid: int) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": 1, "ts": ts_us, "dur": dur_us, "args": {}}


def _segment(e: dict[str, Any], offset_us: float, attention_share: float) -> list[dict[str, Any]]:
    """The trace events of one timeline segment (none: the host stall, idle on the device)."""
    stream, ts, dur, pid = e["cat"], e["ts"] + offset_us, e["dur"], e["pid"]
    if stream == "compute":
        if e["args"].get("term") == "optimizer":
            return [_device(ADAM_KERNEL, ts, dur, pid)]
        gemm = dur * (1.0 - attention_share)
        out = [_device(GEMM_KERNEL, ts, gemm, pid)]
        if dur - gemm > 0:
            out.append(_device(ATTENTION_KERNEL, ts + gemm, dur - gemm, pid))
        return out
    if stream in COMM_KERNELS:
        name, desc = COMM_KERNELS[stream]
        return [_device(name, ts, dur, pid, **{"Process Group Description": desc})]
    if stream == "data / sync":
        if e["args"].get("term") == "data_stall":
            return [_host("cpu_op", DATA_SPAN, ts, dur, pid)]
        return [_host("cuda_runtime", SYNC_SPAN, ts, dur, pid)]
    return []


def synth_traces(est: Any, model_layers: int, steps: int = 3, attention_s: float = 0.0) -> list[dict[str, Any]]:
    """Kineto JSON documents (one per representative rank of ``est``, a
    :class:`~clustertwin.train.estimate.TrainEstimate`) of ``steps`` predicted steps back to back;
    ``attention_s`` of the step's ``compute`` written as attention kernels."""
    timeline = step_timeline(est, model_layers)
    compute = float(est.breakdown.get("compute", 0.0))
    share = min(max(attention_s / compute, 0.0), 1.0) if compute > 0 else 0.0
    lay = est.layout
    world = int(lay["tp"]) * int(lay["cp"]) * int(lay["dp"]) * int(lay["pp"])
    step_us = est.step_time_s * 1e6
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for e in timeline["traceEvents"]:
        if e.get("ph") == "X":
            by_rank.setdefault(int(e["pid"]), []).append(e)
    docs = []
    for rank, events in sorted(by_rank.items()):
        out: list[dict[str, Any]] = []
        for n in range(steps):
            offset = n * step_us
            for e in events:
                if e["cat"] == "step":
                    out.append(_host("user_annotation", f"ProfilerStep#{n + 1}", e["ts"] + offset, e["dur"], rank))
                    continue
                out.extend(_segment(e, offset, share))
        out.sort(key=lambda ev: (ev["ts"], ev["tid"]))
        pgs = [{"pg_name": str(i), "pg_desc": desc, "ranks": []} for i, (_, desc) in enumerate(COMM_KERNELS.values())]
        docs.append({"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world,
                                                             "pg_config": pgs},
                     "traceEvents": out, "displayTimeUnit": "ms",
                     "otherData": {"synthesized_from": "clustertwin train estimate", "step_time_s": est.step_time_s,
                                   "breakdown": est.breakdown}})
    return docs


def estimate_attention_s(est: Any, model: Any, cluster: Any, calibration: Any = None, **inputs: Any) -> float:
    """The attention kernels' seconds of estimate ``est``'s compute term at its own layout (the ``attention_s``
    of :func:`synth_traces`): :func:`~clustertwin.profile.fit.with_attention` on the estimate again at a
    higher attention efficiency. ``inputs``: the estimate's placement and dataset."""
    from clustertwin.profile.fit import with_attention
    from clustertwin.specs import ParallelismSpec
    from clustertwin.specs.calibration import Calibration
    from clustertwin.train import estimate

    fields = {k: v for k, v in est.layout.items() if k in ParallelismSpec.model_fields}
    par = ParallelismSpec(**fields, global_batch=est.global_batch, precision=est.precision,
                          software_stack=est.software_stack)
    base = calibration.model_dump() if calibration is not None else {}

    def predict(over: dict[str, float]) -> dict[str, float]:
        return estimate(model, cluster, par, calibration=Calibration(**{**base, "train": over}), **inputs).breakdown

    return with_attention(predict)(dict(base.get("train") or {}))["attention"]
