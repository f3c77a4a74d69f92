"""One layout: step time, throughput, MFU/HFU and memory with breakdowns (``train estimate``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from clustertwin.errors import SpecError
from clustertwin.specs.calibration import Calibration
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.specs.model import ModelSpec
from clustertwin.specs.parallelism import ParallelismSpec
from clustertwin.train.data import DEFAULT_DATASET, data_path
from clustertwin.train.hardware import hardware
from clustertwin.train.layout import LAYOUT_FIELDS, Layouts, scalar
from clustertwin.train.layout_string import parse_pipeline_layout
from clustertwin.train.memory import MemoryResult, checkpoint_bytes, memory_result
from clustertwin.train.moe import overlap_violation
from clustertwin.train.params import TrainParams, resolve_params
from clustertwin.train.result import StepResult
from clustertwin.train.rules import first_violation
from clustertwin.train.stack import ALIASES, resolve_stack, stack_violation
from clustertwin.train.step import evaluate_layouts
from clustertwin.train.topology_comm import group_traffic, placement_key
from clustertwin.units import GIB


@dataclass
class TrainEstimate:
    """Predicted performance of one layout. Times in seconds per optimizer step."""

    step_time_s: float
    tokens_per_s: float
    mfu: float
    hfu: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    gpus: int
    global_batch: int
    seq_len: int
    precision: str
    layout: dict[str, Any]
    memory: MemoryResult
    breakdown: dict[str, float] = field(default_factory=dict)
    """Seconds per step by term; they add up to ``step_time_s``."""
    model_flops_per_step: float = 0.0
    checkpoint_bytes: float = 0.0
    """Weights + optimizer state of the whole model (what a checkpoint writes)."""
    stage_plan: dict[str, Any] = field(default_factory=dict)
    """Layers of the first, each middle and the last pipeline stage, chunks per stage, where the
    embedding and the loss sit (:mod:`clustertwin.train.pipeline`)."""
    software_stack: str = ""
    """The stack the estimate assumed (:mod:`clustertwin.train.stack`)."""
    placement: str = "contiguous"
    """The job's nodes: contiguous, scattered, random or ``nodes`` (an explicit list)."""
    data_path: dict[str, Any] | None = None
    """The data path of the estimate (:meth:`clustertwin.datapath.DataStall.to_dict`): stages, demand,
    bottleneck; None without a dataset."""
    net_fractions: dict[str, float] = field(default_factory=dict)
    """Each group kind's share of injection bandwidth on the topology (:mod:`~clustertwin.train.topology_comm`)."""
    net_hops: dict[str, int] = field(default_factory=dict)
    """Each group kind's switch hops where the placement puts it (0: inside a node)."""
    searched_fields: dict[str, Any] = field(default_factory=dict)
    """Layout fields the user left out and the search chose (:mod:`~clustertwin.train.complete`); empty when
    the layout was estimated as given."""
    schedule: dict[str, float] = field(default_factory=dict)
    """Per-micro-batch times behind the pipeline term (:class:`~clustertwin.train.result.StageTimes`; what
    :mod:`~clustertwin.train.timeline` lays out); not part of :meth:`to_dict`."""

    @property
    def data_bottleneck(self) -> str | None:
        """The data path's slowest stage when it binds (data stall > 0), else None."""
        if self.data_path is None or self.breakdown.get("data_stall", 0.0) <= 0.0:
            return None
        return str(self.data_path["bottleneck"])

    @property
    def memory_gib_per_gpu(self) -> float:
        return self.memory.total_gib

    @property
    def fits(self) -> bool:
        return self.memory.fits

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.gpus

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_time_s": self.step_time_s, "mfu": self.mfu, "hfu": self.hfu, "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "hardware_tflops_per_gpu": self.hardware_tflops_per_gpu,
            "memory_gib_per_gpu": self.memory_gib_per_gpu, "fits": self.fits,
            "gpus": self.gpus, "global_batch": self.global_batch, "seq_len": self.seq_len,
            "precision": self.precision, "layout": self.layout, "breakdown": self.breakdown,
            "memory": self.memory.to_dict(), "checkpoint_gib": self.checkpoint_bytes / GIB,
            "stage_plan": self.stage_plan, "software_stack": self.software_stack,
            "placement": self.placement, "net_fractions": self.net_fractions, "data_path": self.data_path,
            "data_bottleneck": self.data_bottleneck, "net_hops": self.net_hops,
            "searched_fields": self.searched_fields,
        }


def _stage_plan(out: StepResult, lay: Layouts, i: int) -> dict[str, Any]:
    pp, vpp = int(scalar(lay.pp, i)), int(scalar(lay.vpp, i))
    first, last = int(scalar(out.stages.first, i)), int(scalar(out.stages.last, i))
    mid = int(scalar(out.stages.middle, i))
    layers = [first] if pp == 1 else [first, *([mid] * (pp - 2)), last]
    return {"stages": pp, "chunks_per_stage": vpp, "first_stage_layers": first,
            "middle_stage_layers": mid if pp > 2 else None, "last_stage_layers": last if pp > 1 else None,
            "layers_per_stage": ("|".join(map(str, layers)) if pp <= 8 else f"{first}|{mid} x {pp - 2}|{last}"),
            "embedding": "first stage", "output_and_loss": "last stage"}


def from_arrays(out: StepResult, lay: Layouts, i: int, *, global_batch: int, seq_len: int, precision: str,
                hbm_bytes: float, model: ModelSpec, stack: str = "") -> TrainEstimate:
    """The TrainEstimate of layout ``i`` of an :func:`evaluate_layouts` result."""
    assert out.memory is not None, "an estimate needs the memory model"
    return TrainEstimate(
        step_time_s=scalar(out.step_time_s, i), tokens_per_s=scalar(out.tokens_per_s, i),
        mfu=scalar(out.mfu, i), hfu=scalar(out.hfu, i),
        model_tflops_per_gpu=scalar(out.model_tflops_per_gpu, i),
        hardware_tflops_per_gpu=scalar(out.hardware_tflops_per_gpu, i),
        gpus=int(scalar(lay.gpus, i)), global_batch=global_batch, seq_len=seq_len, precision=precision,
        layout=lay.row(i), memory=memory_result(out.memory, out.memory_total_bytes, i, hbm_bytes),
        breakdown={k: scalar(v, i) for k, v in out.breakdown.as_dict().items()},
        model_flops_per_step=scalar(out.model_flops_per_step, i), checkpoint_bytes=checkpoint_bytes(model),
        stage_plan=_stage_plan(out, lay, i), software_stack=stack,
        schedule=({f.name: scalar(getattr(out.schedule, f.name), i) for f in fields(out.schedule)}
                  if out.schedule is not None else {}))


def annotate(est: TrainEstimate, cluster: ClusterSpec, lay: Layouts, i: int, placement, dataset) -> TrainEstimate:
    """Fill ``placement``, ``net_fractions`` and ``data_path`` of layout ``i``'s estimate (scalar work, once
    per reported row)."""
    est.placement = placement_key(placement)[0]
    one = Layouts(*(int(scalar(getattr(lay, f), i)) for f in LAYOUT_FIELDS))  # type: ignore[arg-type]
    fractions, hops = group_traffic(cluster, one, cluster.node.gpus, placement)
    est.net_fractions = {k: float(v) for k, v in fractions.items()}
    est.net_hops = {k: int(v) for k, v in hops.items()}
    if dataset is not None:
        stall = est.breakdown.get("data_stall", 0.0)
        est.data_path = data_path(cluster, dataset, est.step_time_s - stall, est.gpus, est.global_batch,
                                  est.seq_len).to_dict()
    return est


def estimate(model: ModelSpec, cluster: ClusterSpec, parallelism: ParallelismSpec, *,
             seq_len: int | None = None, params: TrainParams | None = None,
             calibration: Calibration | None = None, placement="contiguous",
             dataset=DEFAULT_DATASET) -> TrainEstimate:
    """Predict one layout on ``cluster``. ``placement``: contiguous, scattered, random or a node list
    (:mod:`~clustertwin.train.topology_comm`); ``dataset``: a :data:`clustertwin.datapath.DATASETS` name,
    mapping or spec (None: no data term). Raises SpecError for layouts that cannot run (wrong GPU
    count, divisibility); a layout that runs out of memory is returned with ``fits = False`` and
    ``memory.reason``."""
    p = parallelism
    prm = resolve_params(params, calibration)
    stack = resolve_stack(p.software_stack, cluster, prm)
    if p.software_stack not in ("auto", *ALIASES):
        bad_feature = stack_violation(stack, sequence_parallel=p.sequence_parallel, recompute=p.recompute,
                                      zero=p.zero, cp=p.cp, vpp=p.vpp, precision=p.precision,
                                      uneven=bool(p.first_stage_layers or p.last_stage_layers or p.pipeline_layout
                                                  or p.embedding_in_split or p.loss_in_split))
        if bad_feature:
            raise SpecError(f"invalid layout: {bad_feature}", path=("parallelism", "software_stack"))
    bad_overlap = overlap_violation(stack.name, stack.moe_overlaps, p.moe_overlap, model, p.pp)  # moe.py
    if bad_overlap:
        raise SpecError(f"invalid layout: {bad_overlap}", path=("parallelism", "moe_overlap"))
    s = seq_len or model.seq_len
    if p.gpus > cluster.total_gpus:
        raise SpecError(f"layout needs tp x pp x dp x cp = {p.gpus} GPUs; the cluster has {cluster.total_gpus}",
                        path=("parallelism",))
    lay = Layouts.from_spec(p)
    if p.pipeline_layout:
        parsed = parse_pipeline_layout(p.pipeline_layout, p.pp, p.vpp, model.layers)
        lay.first, lay.last, lay.mid, lay.from_string = parsed.first, parsed.last, parsed.middle_max, 1
    bad = first_violation(model, lay, p.global_batch, cluster.node.gpus, s)
    if bad:
        raise SpecError(f"invalid layout: {bad}", path=("parallelism",))
    hw = hardware(cluster, p.precision, prm, stack)
    out = evaluate_layouts(model, cluster, lay, p.global_batch, p.precision, prm, s, calibration, stack=stack,
                           placement=placement, dataset=dataset)
    est = from_arrays(out, lay, 0, global_batch=p.global_batch, seq_len=s, precision=p.precision,
                      hbm_bytes=hw.hbm_bytes, model=model, stack=stack.name)
    annotate(est, cluster, lay, 0, placement, dataset)
    if p.pipeline_layout:
        est.layout["pipeline_layout"] = p.pipeline_layout
    return est
