"""Model-based advice for a CUDA out-of-memory failure: run the training memory model on the job's layout
and propose the changes that make it fit, fastest first.

The job is described by a model, a cluster, a global batch and a layout string such as
``tp=8,pp=4,dp=32,micro_batch=2,recompute=none,zero=1`` (:func:`parse_layout`). :func:`advise` estimates
that layout (predicted memory per GPU and its largest term, next to the figures the log printed) and,
when it does not fit, searches a few change groups with :func:`clustertwin.train.search`, every field
outside the group fixed and the GPU count kept: recompute alone, micro-batch alone, ZeRO stage alone,
the three together, TP/PP (data parallelism shrinks to keep the GPU count), TP/PP/CP, and any layout.
The fastest fitting layout of each group is a suggestion; suggestions are ranked by predicted step time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clustertwin.errors import SpecError
from clustertwin.ops.findings import Finding
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.specs.loading import build
from clustertwin.specs.model import ModelSpec
from clustertwin.specs.parallelism import ParallelismSpec
from clustertwin.train import TrainEstimate, estimate, search
from clustertwin.units import GIB, human_bytes

LAYOUT_FIELDS: tuple[str, ...] = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "recompute", "zero",
                                  "sequence_parallel")
"""Layout fields in display order (``TrainEstimate.layout`` keys)."""
_INT_KEYS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "zero")
_ALIASES = {"mbs": "micro_batch", "sp": "sequence_parallel", "stack": "software_stack"}
_RECOMPUTE = ("none", "selective", "full")
_PRECISIONS = ("bf16", "fp16", "fp8", "fp32", "tf32")
_STACKS = ("auto", "te", "legacy")
_BOOLS = {"true": True, "on": True, "1": True, "yes": True, "false": False, "off": False, "0": False, "no": False}
LAYOUT_KEYS: tuple[str, ...] = (*LAYOUT_FIELDS, "precision", "software_stack")
"""Keys ``--layout`` accepts (plus the aliases ``mbs``, ``sp``, ``stack``)."""

CHANGE_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("recompute", ("recompute",)),
    ("micro-batch", ("micro_batch",)),
    ("ZeRO stage", ("zero",)),
    ("recompute + micro-batch + ZeRO", ("recompute", "micro_batch", "zero")),
    ("TP/PP", ("tp", "pp", "dp", "vpp", "sequence_parallel")),
    ("TP/PP/CP", ("tp", "pp", "dp", "cp", "vpp", "sequence_parallel")),
    ("any layout", LAYOUT_FIELDS),
)
"""(label, fields the search may change); all other layout fields are fixed to the job's values."""
MAX_SUGGESTIONS = 5
CAPACITY_MISMATCH = 0.10
"""Relative difference between the log's GPU capacity and the cluster's HBM that earns a warning."""


def parse_layout(text: str) -> dict[str, Any]:
    """``"tp=8,pp=4,dp=32,micro_batch=2,recompute=none,zero=1"`` -> ParallelismSpec fields. Keys:
    :data:`LAYOUT_KEYS` (aliases ``mbs``, ``sp``, ``stack``); degrees are positive integers, ``zero``
    0-3, ``recompute`` none/selective/full, ``sp`` true/false. Raises SpecError on anything else."""
    out: dict[str, Any] = {}
    items = [p.strip() for p in str(text).split(",")]
    if not any(items):
        raise SpecError("--layout is empty; expected e.g. 'tp=8,pp=4,dp=32,micro_batch=2,recompute=none,zero=1'")
    for item in items:
        key, eq, value = (s.strip() for s in item.partition("="))
        if not eq or not key or not value:
            raise SpecError(f"--layout item {item!r} is not KEY=VALUE (e.g. 'tp=8,pp=4,micro_batch=2')")
        key = _ALIASES.get(key, key)
        if key not in LAYOUT_KEYS:
            raise SpecError(f"--layout key {key!r} is unknown; expected one of {', '.join(LAYOUT_KEYS)}")
        if key in out:
            raise SpecError(f"--layout gives {key!r} twice")
        out[key] = _layout_value(key, value)
    return out


def _layout_value(key: str, value: str) -> Any:
    if key in _INT_KEYS:
        try:
            n = int(value)
        except ValueError:
            raise SpecError(f"--layout {key}={value!r}: expected an integer") from None
        if key == "zero" and n not in (0, 1, 2, 3):
            raise SpecError(f"--layout zero={n}: expected 0, 1, 2 or 3")
        if key != "zero" and n < 1:
            raise SpecError(f"--layout {key}={n}: expected a positive integer")
        return n
    if key == "sequence_parallel":
        if value.lower() not in _BOOLS:
            raise SpecError(f"--layout sp={value!r}: expected true or false")
        return _BOOLS[value.lower()]
    choices = {"recompute": _RECOMPUTE, "precision": _PRECISIONS, "software_stack": _STACKS}[key]
    if value not in choices:
        raise SpecError(f"--layout {key}={value!r}: expected one of {', '.join(choices)}")
    return value


@dataclass(frozen=True)
class JobContext:
    """What the log does not say: the job's model, cluster, layout, global batch and sequence length."""

    model: ModelSpec
    cluster: ClusterSpec
    parallelism: ParallelismSpec
    seq_len: int | None = None

    @classmethod
    def build(cls, model: ModelSpec, cluster: ClusterSpec, layout: str, global_batch: int,
              seq_len: int | None = None) -> JobContext:
        """Parse ``layout`` and complete it: dp defaults to the cluster's GPUs / (tp pp cp), sequence
        parallelism to tp > 1, the schedule to interleaved when vpp > 1. Raises SpecError."""
        if global_batch < 1:
            raise SpecError(f"--global-batch must be a positive integer (got {global_batch})")
        if seq_len is not None and seq_len < 1:
            raise SpecError(f"--seq-len must be a positive integer (got {seq_len})")
        fields = parse_layout(layout)
        if "dp" not in fields:
            split = fields.get("tp", 1) * fields.get("pp", 1) * fields.get("cp", 1)
            if cluster.total_gpus % split:
                raise SpecError(f"--layout has no dp and the cluster's {cluster.total_gpus} GPUs are not "
                                f"divisible by tp x pp x cp = {split}")
            fields["dp"] = cluster.total_gpus // split
        fields.setdefault("sequence_parallel", fields.get("tp", 1) > 1)
        fields.setdefault("zero", 1)
        fields["schedule"] = "interleaved" if fields.get("vpp", 1) > 1 else "1f1b"
        par = build(ParallelismSpec, {**fields, "global_batch": global_batch}, prefix=("--layout",))
        if par.gpus > cluster.total_gpus:
            raise SpecError(f"--layout needs tp x pp x dp x cp = {par.gpus} GPUs; the cluster has "
                            f"{cluster.total_gpus}")
        return cls(model, cluster, par, seq_len)


@dataclass(frozen=True)
class Suggestion:
    """A layout that the memory model says fits, with what changed from the job's layout."""

    found_by: str
    """The change group (:data:`CHANGE_GROUPS` label) whose search produced it."""
    changes: dict[str, tuple[Any, Any]]
    """Field -> (job's value, suggested value)."""
    estimate: TrainEstimate

    def describe(self) -> str:
        """``tp 1->8, pp 1->4, dp 1024->32``."""
        return ", ".join(f"{k} {_fmt(a)}->{_fmt(b)}" for k, (a, b) in self.changes.items())

    def to_dict(self) -> dict[str, Any]:
        e = self.estimate
        return {"found_by": self.found_by, "changes": {k: list(v) for k, v in self.changes.items()},
                "layout": e.layout, "step_time_s": e.step_time_s, "mfu": e.mfu,
                "memory_gib_per_gpu": e.memory_gib_per_gpu, "capacity_gib": e.memory.capacity_gib,
                "largest_term": e.memory.largest_term, "fits": e.fits}


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v)


@dataclass(frozen=True)
class OomAdvice:
    """The memory model on the job's layout and the changes that make it fit, fastest first."""

    job: JobContext
    current: TrainEstimate
    suggestions: tuple[Suggestion, ...]

    def model_dict(self) -> dict[str, Any]:
        """The job layout's predicted memory (``memory_model`` in --json)."""
        e = self.current
        return {"model": self.job.model.id or self.job.model.name, "cluster": self.job.cluster.id or
                self.job.cluster.name, "layout": e.layout, "global_batch": e.global_batch, "seq_len": e.seq_len,
                "gpus": e.gpus, "memory_gib_per_gpu": e.memory_gib_per_gpu, "capacity_gib": e.memory.capacity_gib,
                "fits": e.fits, "largest_term": e.memory.largest_term, "breakdown_gib": e.memory.breakdown,
                "step_time_s": e.step_time_s}

    def action(self, oom: dict[str, Any]) -> str:
        """The finding's action: predicted memory next to the log's figures, then the suggestions (or, when
        the model says the layout fits, what lies outside the model)."""
        e, mem = self.current, self.current.memory
        lay = " ".join(f"{k}={_fmt(e.layout[k])}" for k in LAYOUT_FIELDS)
        head = (f"memory model ({self.model_dict()['model']} on {self.model_dict()['cluster']}, {lay}, "
                f"global batch {e.global_batch}, seq {e.seq_len}): {e.memory_gib_per_gpu:.1f} GiB per GPU "
                f"predicted vs {mem.capacity_gib:.1f} GiB HBM, largest term {mem.largest_term} "
                f"{mem.breakdown[mem.largest_term]:.1f} GiB; the log: tried to allocate "
                f"{human_bytes(oom['requested_bytes'])}, {human_bytes(oom['free_bytes'])} free of "
                f"{human_bytes(oom['total_bytes'])}")
        if "allocated_bytes" in oom:
            head += (f", {human_bytes(oom['allocated_bytes'])} allocated + "
                     f"{human_bytes(oom['reserved_unallocated_bytes'])} reserved-unallocated by PyTorch")
        log_gib = oom["total_bytes"] / GIB
        if abs(log_gib - mem.capacity_gib) > CAPACITY_MISMATCH * mem.capacity_gib:
            head += (f" (the log's GPU has {log_gib:.1f} GiB, the cluster's {mem.capacity_gib:.1f} GiB: "
                     "check --cluster)")
        if e.fits:
            frag = oom.get("reserved_unallocated_bytes", 0.0)
            tail = ("the model says this layout fits, so the OOM comes from memory outside its terms: "
                    + ("fragmentation (reserved-unallocated exceeds the request), set "
                       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; " if frag >= oom["requested_bytes"] else "")
                    + "check for other processes on the GPU, longer sequences or larger micro-batches than given, "
                      "and evaluation or checkpoint buffers")
            return f"{head}; {tail}"
        if not self.suggestions:
            return (f"{head}; no layout of {e.gpus} GPUs fits this model at this global batch and sequence length "
                    "per the memory model: use more GPUs, a shorter sequence or a smaller model")
        ranked = "; ".join(f"{i}) {s.describe()} [{s.found_by}]: {s.estimate.memory_gib_per_gpu:.1f} GiB, "
                           f"step {s.estimate.step_time_s:.2f} s"
                           for i, s in enumerate(self.suggestions, 1))
        return f"{head}; changes that fit, fastest predicted step first: {ranked}"


def advise(job: JobContext) -> OomAdvice:
    """Estimate the job's layout; when it does not fit, the fastest fitting layout of each change group
    (GPU count kept), deduplicated and ranked by predicted step time. Raises SpecError for a layout the
    model rejects (GPU count, divisibility)."""
    p = job.parallelism
    cur = estimate(job.model, job.cluster, p, seq_len=job.seq_len)
    if cur.fits:
        return OomAdvice(job, cur, ())
    found: dict[tuple[Any, ...], Suggestion] = {}
    for label, free in CHANGE_GROUPS:
        fixed = {k: cur.layout[k] for k in LAYOUT_FIELDS if k not in free}
        try:
            res = search(job.model, job.cluster, global_batch=p.global_batch, gpus=cur.gpus, precision=p.precision,
                         seq_len=job.seq_len, fixed=fixed, top=1, software_stack=p.software_stack)
        except SpecError:  # no layout of this group matches the GPU count
            continue
        best = res.best
        if best is None:
            continue
        key = tuple(best.layout[k] for k in LAYOUT_FIELDS)
        if key not in found:
            changes = {k: (cur.layout[k], best.layout[k]) for k in LAYOUT_FIELDS if cur.layout[k] != best.layout[k]}
            found[key] = Suggestion(label, changes, best)
    ranked = sorted(found.values(), key=lambda s: s.estimate.step_time_s)[:MAX_SUGGESTIONS]
    return OomAdvice(job, cur, tuple(ranked))


@dataclass(frozen=True)
class OomFinding(Finding):
    """The ``CUDA_OOM`` finding: adds the parsed log figures, the memory model's view of the job layout
    (when given) and the structured suggestions to the JSON form."""

    oom: tuple[tuple[str, float], ...] = ()
    """Parsed byte figures of the largest failed request (requested, free, total, allocated, reserved)."""
    advice: OomAdvice | None = None

    def to_dict(self) -> dict[str, Any]:
        """The finding schema plus ``oom`` (bytes), ``suggestions`` (empty without the job's layout) and,
        with it, ``memory_model``."""
        d = super().to_dict()
        d["oom"] = dict(self.oom)
        d["suggestions"] = [s.to_dict() for s in self.advice.suggestions] if self.advice else []
        if self.advice is not None:
            d["memory_model"] = self.advice.model_dict()
        return d
