"""A design space: axes of choices (cluster size, node/GPU type, fabric, topology, model, precision, global
batch, parallel layout, checkpoint policy) and the points drawn from it, as a grid or at random.

Points are numbered by their flat index in the full grid (C order, the last axis varying fastest: the
layout and checkpoint choices of one cluster design sit next to each other), so a random space is a
sorted subset of the grid's point ids and a point id means the same design in both modes. A point is
never materialised as a Python object on the hot path: executors ship ranges of ids, and
:func:`axis_indices` turns ids back into per-axis choice indices with ``numpy.unravel_index``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

import numpy as np
from pydantic import Field, model_validator

from clustertwin.catalog import store
from clustertwin.errors import SpecError, did_you_mean
from clustertwin.specs.base import NonNegInt, PositiveFloat, PositiveInt, Spec
from clustertwin.specs.loading import build, read_document
from clustertwin.specs.network import TopologyKind
from clustertwin.specs.parallelism import Recompute, TrainPrecision

if TYPE_CHECKING:
    from clustertwin.sweep.cluster_space import ClusterSweepSpace

AUTO = "auto"
"""Layout choice meaning: the best fitting layout of the layout search for that design."""
AXES: tuple[str, ...] = ("model", "node", "nodes", "fabric", "topology", "precision", "global_batch",
                         "layout", "checkpoint")
"""Axis order of the grid (the last varies fastest)."""
DESIGN_AXES = AXES[:-2]
"""Axes that fix one evaluation group: everything but layout and checkpoint."""
MAX_POINTS = 50_000_000
"""Upper bound on a space's grid size (point ids are int64; results must fit on a disk)."""
DEFAULT_MAX_POINTS = 1_000_000
"""Points a sweep evaluates unless the caller raises the cap (``clustertwin sweep --max-points``): about
an hour on 2 cores; results stream to Parquet, so the cap bounds time, not memory."""


class LayoutChoice(Spec):
    """A parallel layout applied at every cluster size: dp is what remains, ``GPUs / (tp x pp x cp)``."""

    tp: PositiveInt = 1
    """Tensor-parallel degree."""
    pp: PositiveInt = 1
    """Pipeline-parallel stages."""
    cp: PositiveInt = 1
    """Context-parallel degree."""
    ep: PositiveInt = 1
    """Expert-parallel degree (MoE models)."""
    vpp: PositiveInt = 1
    """Virtual pipeline chunks per stage."""
    micro_batch: PositiveInt = 1
    """Sequences per micro-batch."""
    recompute: Recompute = "selective"
    """Activation recomputation: none, selective, full."""
    zero: Literal[0, 1, 2, 3] = 1
    """ZeRO stage over the data-parallel group."""
    sequence_parallel: bool | None = None
    """Megatron sequence parallelism; default on whenever tp > 1."""

    @property
    def label(self) -> str:
        """Short text form, e.g. ``tp8-pp4-cp1-mb1-sel-z1``."""
        rc = {"none": "none", "selective": "sel", "full": "full"}[self.recompute]
        extra = (f"-ep{self.ep}" if self.ep > 1 else "") + (f"-vpp{self.vpp}" if self.vpp > 1 else "")
        return f"tp{self.tp}-pp{self.pp}-cp{self.cp}{extra}-mb{self.micro_batch}-{rc}-z{self.zero}"

    @property
    def sp(self) -> bool:
        """Sequence parallelism as evaluated (the explicit choice, else the training model's default)."""
        from clustertwin.train.resolve import default_sequence_parallel

        return default_sequence_parallel(self.tp) if self.sequence_parallel is None else self.sequence_parallel


class CheckpointChoice(Spec):
    """How the run checkpoints and recovers from failures."""

    policy: Literal["restart", "spares", "elastic"] = "restart"
    """Recovery policy: restart (wait for a replacement node), spares (hot spares), elastic (shrink)."""
    async_checkpoint: bool = False
    """Asynchronous checkpoints (snapshot to host memory, write in the background)."""
    interval_s: PositiveFloat | None = None
    """Checkpoint interval in seconds of computation; default Daly's optimum for the stall."""
    hot_spares: NonNegInt | None = None
    """Hot-spare nodes (policy spares); default the P99 of nodes in repair at once."""

    @property
    def label(self) -> str:
        """Short text form, e.g. ``spares-async-daly``."""
        interval = "daly" if self.interval_s is None else f"{self.interval_s:g}s"
        spares = f"-k{self.hot_spares}" if self.hot_spares is not None else ""
        return f"{self.policy}{spares}-{'async' if self.async_checkpoint else 'sync'}-{interval}"


LayoutOrAuto = LayoutChoice | Literal["auto"]


class SweepSpace(Spec):
    """A design space over clusters, workloads, layouts and checkpoint policies (``clustertwin sweep``)."""

    name: str = "sweep"
    """Name of the study (shown in output and stored in the Parquet metadata)."""
    mode: Literal["grid", "random"] = "grid"
    """grid: every combination; random: ``samples`` distinct points of the grid, drawn with ``seed``."""
    samples: PositiveInt | None = None
    """Number of points of a random space."""
    seed: NonNegInt = 0
    """Seed of the random draw."""
    tokens: PositiveFloat = 15e12
    """Training token budget for time-to-train, energy and cost."""
    base: str | dict[str, Any] = "ref-1k-h100"
    """Cluster (catalog id, file or inline mapping) whose storage, facility and network settings every
    design starts from; node, nodes, fabric and topology are replaced by the axes."""
    usd_per_gpu_hour: Annotated[float, Field(ge=0)] | None = None
    """Price of a GPU-hour (rental); default the owned cluster's TCO per GPU-hour from the facility model."""
    model: list[str] = Field(min_length=1)
    """Model catalog ids."""
    node: list[str] = Field(min_length=1)
    """Node catalog ids: the GPU type, GPUs per node, scale-up and NICs."""
    nodes: list[PositiveInt] = Field(min_length=1)
    """Cluster sizes in nodes."""
    fabric: list[str] = Field(min_length=1)
    """Scale-out fabric catalog ids."""
    topology: list[TopologyKind] = Field(default=["rail-optimized"], min_length=1)
    """Network topologies."""
    precision: list[TrainPrecision] = Field(default=["bf16"], min_length=1)
    """GEMM precisions."""
    global_batch: list[PositiveInt] = Field(default=[1024], min_length=1)
    """Global batch sizes, sequences."""
    layout: list[LayoutOrAuto] = Field(default=[AUTO], min_length=1)  # type: ignore[assignment]
    """Parallel layouts (``auto``: the layout search's best for each design)."""
    checkpoint: list[CheckpointChoice] = Field(default=[CheckpointChoice()], min_length=1)
    """Checkpoint and recovery choices."""

    @model_validator(mode="after")
    def _check(self) -> SweepSpace:
        if self.mode == "random" and self.samples is None:
            raise ValueError("a random space needs 'samples'")
        if self.mode == "grid" and self.samples is not None:
            raise ValueError("'samples' applies to mode: random only")
        if self.mode == "random" and self.samples is not None and self.samples > self.grid_size:
            raise ValueError(f"samples={self.samples:,} exceeds the grid's {self.grid_size:,} points "
                             "(a random space draws distinct points; use mode: grid for all of them)")
        for axis in AXES:
            values = getattr(self, axis)
            keys = [v if isinstance(v, str | int) else v.model_dump_json() for v in values]
            if len(set(keys)) != len(keys):
                raise ValueError(f"'{axis}' lists a choice twice")
        return self

    @property
    def shape(self) -> tuple[int, ...]:
        """Choices per axis, in :data:`AXES` order."""
        return tuple(len(getattr(self, a)) for a in AXES)

    @property
    def grid_size(self) -> int:
        return math.prod(self.shape)

    @property
    def size(self) -> int:
        """Points this space evaluates (a random space's ``samples`` never exceed the grid)."""
        return self.grid_size if self.mode == "grid" else int(self.samples or 0)


AnySpace = Union[SweepSpace, "ClusterSweepSpace"]
"""A space of either kind."""

_CATALOG_AXES = {"model": "model", "node": "node", "fabric": "fabric"}


def _check_catalog_ids(space: SweepSpace, file: str | None) -> None:
    for axis, kind in _CATALOG_AXES.items():
        known = store.ids(kind)
        for i, ref in enumerate(getattr(space, axis)):
            if ref not in known:
                raise SpecError(f"unknown {kind} '{ref}'{did_you_mean(ref, known)}", file=file, path=(axis, i))


KINDS: tuple[str, ...] = ("design", "cluster")
"""Space kinds: ``design`` (default: training designs, :class:`SweepSpace`) and ``cluster``
(co-simulations of a workload mix, :class:`~clustertwin.sweep.cluster_space.ClusterSweepSpace`)."""


def load_space(source: str | Path | dict[str, Any], max_points: int | None = None) -> AnySpace:
    """Load and check a space from a YAML/JSON file or a mapping; errors are one-line SpecErrors. A space
    evaluating more than ``max_points`` points (None: no work cap) is refused with how to raise the cap.
    ``kind: cluster`` gives a cluster space (:mod:`clustertwin.sweep.cluster_space`)."""
    file = None if isinstance(source, dict) else str(source)
    data = source if isinstance(source, dict) else read_document(source)
    kind = data.get("kind", "design") if isinstance(data, dict) else "design"
    if kind not in KINDS:
        raise SpecError(f"unknown space kind {str(kind)[:40]!r}{did_you_mean(str(kind), KINDS)} "
                        f"(choose from: {', '.join(KINDS)})", file=file, path=("kind",))
    if kind == "cluster":
        from clustertwin.sweep.cluster_space import load_cluster_space

        return load_cluster_space(data, file, max_points)
    if isinstance(data, dict) and "kind" in data:
        data = {k: v for k, v in data.items() if k != "kind"}
    space = build(SweepSpace, data, file=file)
    _check_catalog_ids(space, file)
    if space.grid_size > MAX_POINTS:
        raise SpecError(f"the grid has {space.grid_size:,} points; at most {MAX_POINTS:,}", file=file)
    if max_points is not None and space.size > max_points:
        raise SpecError(f"the space evaluates {space.size:,} points, more than the cap of {max_points:,}; "
                        "raise it with --max-points or draw fewer with mode: random, samples: N", file=file)
    return space


def point_ids(space: SweepSpace) -> np.ndarray:
    """Sorted ids of the points to evaluate: all of the grid, or ``samples`` distinct ones at random."""
    if space.mode == "grid":
        return np.arange(space.grid_size, dtype=np.int64)
    rng = np.random.default_rng(space.seed)  # samples <= grid_size (checked); Floyd's draw, O(samples) memory
    return np.sort(rng.choice(space.grid_size, size=space.size, replace=False)).astype(np.int64)


def axis_indices(space: SweepSpace, ids: np.ndarray) -> dict[str, np.ndarray]:
    """Axis name -> choice index of each point id."""
    idx = np.unravel_index(np.asarray(ids, dtype=np.int64), space.shape)
    return dict(zip(AXES, idx, strict=True))


def batches(ids: np.ndarray, batch_points: int) -> list[np.ndarray]:
    """Consecutive slices of ``ids`` of at most ``batch_points`` (the unit of work of an executor)."""
    if batch_points < 1:
        raise SpecError(f"batch size must be >= 1 (got {batch_points})")
    return [ids[i:i + batch_points] for i in range(0, len(ids), batch_points)]


def design_batches(space: SweepSpace, ids: np.ndarray, batch_points: int) -> list[np.ndarray]:
    """Consecutive slices of the sorted ``ids`` of at most ``batch_points``, cut between designs (a design's
    points, which differ only in layout and checkpoint, are contiguous ids): a design is evaluated by one
    task, so no worker rebuilds it. A design with more than ``batch_points`` points is split."""
    return block_batches(ids, int(np.prod(space.shape[len(DESIGN_AXES):])), batch_points)


def block_batches(ids: np.ndarray, block: int, batch_points: int) -> list[np.ndarray]:
    """Consecutive slices of the sorted ``ids`` of at most ``batch_points``, cut between groups of ``block``
    consecutive grid ids (a group larger than ``batch_points`` is split)."""
    if batch_points < 1:
        raise SpecError(f"batch size must be >= 1 (got {batch_points})")
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    design = ids // block
    starts = np.flatnonzero(np.r_[True, design[1:] != design[:-1]]) if n else np.empty(0, dtype=np.int64)
    cuts = np.r_[starts, n]
    out: list[np.ndarray] = []
    start = 0
    while start < n:
        limit = start + batch_points
        end = int(cuts[np.searchsorted(cuts, limit, side="right") - 1])
        if end <= start:  # one design larger than a batch
            end = min(limit, n)
        out.append(ids[start:end])
        start = end
    return out
