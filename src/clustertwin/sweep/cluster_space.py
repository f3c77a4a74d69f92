"""A cluster space (``kind: cluster``): scenarios of the whole cluster, one co-simulation of a workload mix
per point (:func:`clustertwin.sched.cosim.simulate_mix`), over scheduler policy, placement, routing,
cluster (fabric) and seed.

Points are numbered by their flat index in the grid of :data:`CLUSTER_AXES` (C order, the last axis
varying fastest), so the points of one (cluster, seed), which share one drawn workload, are contiguous ids
and one task evaluates them (:func:`scenario_batches`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, PrivateAttr, field_validator, model_validator

from clustertwin.catalog import store
from clustertwin.errors import SpecError, did_you_mean
from clustertwin.sched.contention import ROUTINGS
from clustertwin.sched.failures import DEFAULT_NODE_MTTR_H, MAX_FAILURE_EVENTS
from clustertwin.sched.placement_net import ALL_PLACEMENTS
from clustertwin.sched.policy import POLICIES
from clustertwin.sched.workload import WorkloadMix, load_workload
from clustertwin.specs.base import NonNegInt, PositiveFloat, PositiveInt, Spec
from clustertwin.specs.loading import build

KIND = "cluster"
CLUSTER_AXES: tuple[str, ...] = ("cluster", "seed", "routing", "policy", "placement")
"""Axis order of a cluster space's grid (the last varies fastest)."""
SCENARIO_AXES = CLUSTER_AXES[:2]
"""Axes that fix one drawn workload (cluster and seed): one evaluation group."""
MAX_CLUSTER_POINTS = 1_000_000
"""Upper bound on a cluster space's grid (each point is a whole co-simulation)."""


def _names(values: list[str], known: tuple[str, ...] | list[str], what: str) -> list[str]:
    for v in values:
        if v not in known:
            raise ValueError(f"unknown {what} '{v}'{did_you_mean(v, known)} (choose from: {', '.join(known)})")
    return values


class ClusterSweepSpace(Spec):
    """Scenarios of one workload mix on whole clusters: policy x placement x routing x cluster x seed."""

    kind: Literal["cluster"] = KIND
    """Space kind: ``cluster`` (co-simulations); the default kind is the design space."""
    name: str = "cluster-sweep"
    """Name of the study (shown in output and stored in the Parquet metadata)."""
    workload: str | WorkloadMix
    """Workload mix: a file (as ``sched simulate --workload`` reads; relative to the space file or the
    working directory) or an inline mapping. The loader replaces a file by its parsed mix."""
    workload_file: str | None = None
    """The mix file the workload was read from (set by the loader)."""
    max_jobs: PositiveInt | None = None
    """Draw at most this many jobs of the mix (default: the mix's ``jobs``)."""
    network: Literal["contention", "ideal"] = "contention"
    """contention: jobs share the fabric's bundles (max-min fair rates); ideal: no network contention."""
    node_mtbf_h: PositiveFloat | None = None
    """Inject exponential node failures with this mean time between failures, hours (None: no failures;
    the checkpoint intervals use the default node MTBF either way unless this is given)."""
    node_mttr_h: PositiveFloat = DEFAULT_NODE_MTTR_H
    """Mean time to repair a failed node, hours."""
    max_failure_events: PositiveInt = MAX_FAILURE_EVENTS
    """Cap on the injected failure events per scenario."""
    cluster: list[str] = Field(min_length=1)
    """Clusters: catalog ids or cluster files (relative to the space file or the working directory)."""
    seed: list[NonNegInt] = Field(default=[0], min_length=1)
    """Seeds of the job draw, the failures and the random placement."""
    routing: list[str] = Field(default=["ecmp"], min_length=1)
    """Routings of the contention model: ecmp (hash collisions) or adaptive."""
    policy: list[str] = Field(default=["backfill"], min_length=1)
    """Scheduler policies, as ``sched simulate --policy`` names them."""
    placement: list[str] = Field(default=["first-fit"], min_length=1)
    """Placements, as ``sched simulate --placement`` names them."""
    _root: str | None = PrivateAttr(default=None)

    @field_validator("routing")
    @classmethod
    def _routing(cls, v: list[str]) -> list[str]:
        return _names(v, ROUTINGS, "routing")

    @field_validator("policy")
    @classmethod
    def _policy(cls, v: list[str]) -> list[str]:
        return _names(v, tuple(POLICIES), "policy")

    @field_validator("placement")
    @classmethod
    def _placement(cls, v: list[str]) -> list[str]:
        return _names(v, ALL_PLACEMENTS, "placement")

    @model_validator(mode="after")
    def _check(self) -> ClusterSweepSpace:
        for axis in CLUSTER_AXES:
            values = getattr(self, axis)
            if len(set(values)) != len(values):
                raise ValueError(f"'{axis}' lists a choice twice")
        return self

    @property
    def mix(self) -> WorkloadMix:
        """The parsed workload mix (the loader reads a file)."""
        if isinstance(self.workload, str):
            raise SpecError("the workload file is not read yet: load the space with load_space")
        return self.workload

    @property
    def shape(self) -> tuple[int, ...]:
        """Choices per axis, in :data:`CLUSTER_AXES` order."""
        return tuple(len(getattr(self, a)) for a in CLUSTER_AXES)

    @property
    def grid_size(self) -> int:
        return math.prod(self.shape)

    @property
    def size(self) -> int:
        """Points this space evaluates: the whole grid."""
        return self.grid_size

    def resolve(self, ref: str) -> str:
        """A cluster or workload reference as the loader can open it: a catalog id as is, a path as given
        when it exists from the working directory, else relative to the space file's folder."""
        if ref in store.ids("cluster"):
            return ref
        p = Path(ref)
        if p.is_absolute() or p.exists() or self._root is None:
            return ref
        return str(Path(self._root) / p)


def _check_clusters(space: ClusterSweepSpace, file: str | None) -> None:
    from clustertwin import specs

    known = store.ids("cluster")
    for i, ref in enumerate(space.cluster):
        resolved = space.resolve(ref)
        looks_like_file = Path(ref).suffix.lower() in (".yaml", ".yml", ".json") or "/" in ref
        if not looks_like_file and ref not in known:
            raise SpecError(f"unknown cluster '{ref}'{did_you_mean(ref, known)}", file=file, path=("cluster", i))
        if looks_like_file and not Path(resolved).is_file():
            raise SpecError(f"cluster file not found: {ref}", file=file, path=("cluster", i))
        try:
            specs.load(specs.ClusterSpec, resolved, kind="cluster")
        except SpecError as e:
            raise SpecError(f"cluster '{ref}': {e}", file=file, path=("cluster", i)) from None


def load_cluster_space(data: dict[str, Any], file: str | None = None,
                       max_points: int | None = None) -> ClusterSweepSpace:
    """Check a ``kind: cluster`` mapping (read from ``file``, if any): fields, names (nearest valid name),
    clusters (each loaded once) and the workload mix (read and parsed); errors are one-line SpecErrors."""
    if isinstance(data.get("workload"), dict):  # an inline mix: its own field errors, not the union's
        build(WorkloadMix, data["workload"], file=file, prefix=("workload",))
    space = build(ClusterSweepSpace, data, file=file)
    if file is not None:
        space._root = str(Path(file).parent)
    if isinstance(space.workload, str):
        path = space.resolve(space.workload)
        if not Path(path).is_file():
            raise SpecError(f"workload file not found: {space.workload}", file=file, path=("workload",))
        mix = load_workload(path)
        root = space._root
        space = space.model_copy(update={"workload": mix, "workload_file": space.workload})
        space._root = root
    _check_clusters(space, file)
    if space.grid_size > MAX_CLUSTER_POINTS:
        raise SpecError(f"the grid has {space.grid_size:,} points; at most {MAX_CLUSTER_POINTS:,}", file=file)
    if max_points is not None and space.size > max_points:
        raise SpecError(f"the space evaluates {space.size:,} points, more than the cap of {max_points:,}; "
                        "raise it with --max-points", file=file)
    return space


def cluster_point_ids(space: ClusterSweepSpace) -> np.ndarray:
    """Ids of every point of the grid, sorted."""
    return np.arange(space.grid_size, dtype=np.int64)


def cluster_axis_indices(space: ClusterSweepSpace, ids: np.ndarray) -> dict[str, np.ndarray]:
    """Axis name -> choice index of each point id."""
    idx = np.unravel_index(np.asarray(ids, dtype=np.int64), space.shape)
    return dict(zip(CLUSTER_AXES, idx, strict=True))


def scenario_block(space: ClusterSweepSpace) -> int:
    """Points per (cluster, seed) scenario: routing x policy x placement choices (contiguous ids)."""
    return int(np.prod(space.shape[len(SCENARIO_AXES):]))
