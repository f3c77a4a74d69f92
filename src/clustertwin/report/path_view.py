"""The report's path view: storage -> network -> HBM/compute -> collectives -> scheduler for the best layout,
each stage's capacity against demand, the bottleneck highlighted.

Content only (no HTML): :func:`path_section` turns :func:`clustertwin.explain.explain` into a
:class:`~clustertwin.report.sections.Section` whose ``path`` boxes the template draws as a flow of boxes
(HTML/CSS, autoescaped, no network fetches), plus the same figures as a table.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustertwin.errors import SpecError
from clustertwin.report.sections import Section, Table, fmt
from clustertwin.specs import ClusterSpec, ModelSpec, ParallelismSpec
from clustertwin.train.estimate import TrainEstimate

LAYOUT_KEYS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "recompute", "zero", "sequence_parallel",
               "first_stage_layers", "last_stage_layers", "embedding_in_split", "loss_in_split")


@dataclass(frozen=True)
class PathBox:
    """One stage of the path as the diagram draws it (formatted strings)."""

    name: str
    capacity: str
    demand: str
    unit: str
    cost: str
    detail: str
    bottleneck: bool


def _parallelism(est: TrainEstimate) -> ParallelismSpec:
    fields = {k: est.layout[k] for k in LAYOUT_KEYS if est.layout.get(k) is not None}
    return ParallelismSpec(**fields, global_batch=est.global_batch, precision=est.precision)


def path_section(model: ModelSpec, cluster: ClusterSpec, est: TrainEstimate) -> Section:
    """The path of ``est``'s layout on ``cluster`` (the report's best layout), bottleneck highlighted."""
    from clustertwin.explain import explain

    ex = explain(model, cluster, global_batch=est.global_batch, gpus=est.gpus, parallelism=_parallelism(est),
                 placement=est.placement, precision=est.precision)
    boxes = tuple(PathBox(s.name, fmt(s.capacity), fmt(s.demand), s.unit, fmt(s.cost_s), s.detail,
                          s.name == ex.bottleneck) for s in ex.stages)
    if not boxes:
        raise SpecError("the path has no stages")
    rows = tuple((b.name, b.capacity, b.demand, b.unit, b.cost, b.detail) for b in boxes)
    return Section("path", "The path: storage to collectives",
                   f"One training step of the best layout on {ex.gpus:,} GPUs, stage by stage: what each stage can "
                   f"deliver (capacity) against what the step needs (demand), and the seconds per step it costs "
                   f"beyond compute. Bottleneck: {ex.bottleneck}.",
                   (Table("path stages", ("stage", "capacity", "demand", "unit", "cost, s", "detail"), rows),),
                   notes=(ex.verdict,), path=boxes)
