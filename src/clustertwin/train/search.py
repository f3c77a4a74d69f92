"""Layout search (``train search``): every valid combination of tp, pp, dp, cp, ep, vpp, micro-batch,
recompute, ZeRO stage and pipeline split for a GPU count and global batch, evaluated in one vectorised
pass and ranked by throughput among the layouts that fit in memory.

Candidates: power-of-two tp (inside a node, dividing the heads), pp and cp, dp = GPUs / (tp pp cp)
(any integer), ep dividing the experts with etp x ep dividing tp x cp x dp (expert TP = tp, or 1 when tp > 1:
MoE parallel folding; MoE grids are pruned by :mod:`search_prune` before timing), every micro-batch that divides the per-replica
batch (global batch / dp), vpp from 1 to :data:`VPP_MAX` with at least one layer slot per chunk, and the
whole-chunk vpp above it when none in 2..VPP_MAX gives whole chunks (:func:`~clustertwin.train.rules.searched_vpps`;
the ``vpp_whole_layers`` rule drops the others), the balanced split with and without the embedding and the loss
counted as pipeline slots, recompute modes and ZeRO stages. Only the features of the software stack
(:mod:`clustertwin.train.stack`) are offered: sequence parallelism (on whenever tp > 1, which saves
memory at equal communication volume), selective recompute, its ZeRO stages, context parallelism,
interleaving, uneven splits. Fields the caller fixes (``fixed``) are never changed. Rejected layouts are
counted by rule (:mod:`clustertwin.train.rules`) and, for out-of-memory ones, by their largest memory
term.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clustertwin.errors import SpecError
from clustertwin.specs.calibration import Calibration
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.specs.model import ModelSpec
from clustertwin.train.data import DEFAULT_DATASET
from clustertwin.train.estimate import TrainEstimate, annotate, from_arrays
from clustertwin.train.hardware import hardware
from clustertwin.train.layout import MOE_OVERLAP_CODES, RECOMPUTE_CODES, RECOMPUTE_MODULE_BITS, Layouts
from clustertwin.train.layout_string import pinned_layout_string
from clustertwin.train.memory import TERMS, memory_arrays
from clustertwin.train.moe_overlap import overlap_violation
from clustertwin.train.params import TrainParams, resolve_params
from clustertwin.train.resolve import default_sequence_parallel
from clustertwin.train.rules import MESSAGES, RULES, searched_vpps, violations
from clustertwin.train.search_prune import cheapest_fitting
from clustertwin.train.stack import STACKS, Stack, moe_layout_defaults, resolve_stack
from clustertwin.train.step import evaluate_layouts
from clustertwin.units import GIB

#: largest virtual pipeline chunks per stage the search offers
VPP_MAX = 8
CP_MAX = 16
#: balanced pipeline splits offered with uneven-pipeline stacks: (embedding in split, loss in split)
SPLIT_CHOICES = ((0, 0), (0, 1), (1, 1))
#: search fields -> ParallelismSpec field names
SPEC_FIELDS = {"tp": "tp", "pp": "pp", "dp": "dp", "cp": "cp", "ep": "ep", "vpp": "vpp", "mbs": "micro_batch",
               "recompute": "recompute", "zero": "zero", "sp": "sequence_parallel",
               "first": "first_stage_layers", "last": "last_stage_layers", "emb_split": "embedding_in_split",
               "loss_split": "loss_in_split"}
#: the stage-plan fields: given together (a case that fixes none of them is searched over the splits)
SPLIT_FIELDS = frozenset(("first_stage_layers", "last_stage_layers", "embedding_in_split", "loss_in_split"))


def _pow2_upto(n: int) -> list[int]:
    return [1 << i for i in range(max(int(n), 1).bit_length()) if (1 << i) <= n]


@dataclass
class SearchResult:
    """Ranked layouts and why the others were rejected."""

    gpus: int
    global_batch: int
    seq_len: int
    precision: str
    evaluated: int
    valid: int
    fitting: int
    top: list[TrainEstimate] = field(default_factory=list)
    rejected: dict[str, int] = field(default_factory=dict)
    """Rejection class (rule message, or 'out of memory: <largest term>') -> layouts."""
    fastest_oom: TrainEstimate | None = None
    """The fastest valid layout that does not fit (what more memory would buy)."""
    leanest_gib: float | None = None
    """Memory per GPU of the valid layout that needs the least (GiB), when none fits."""
    capacity_gib: float | None = None
    """HBM per GPU (GiB)."""

    @property
    def best(self) -> TrainEstimate | None:
        return self.top[0] if self.top else None

    @property
    def no_fit_reason(self) -> str | None:
        """Why no layout is ranked (None when one fits): every valid layout out of memory (with the leanest
        one's need), else the most common rule that rejected the candidates."""
        if self.top:
            return None
        if self.valid and self.leanest_gib is not None:
            return (f"every valid layout exceeds HBM: the leanest of {self.valid:,} needs {self.leanest_gib:.1f} "
                    f"GiB per GPU of {self.capacity_gib:.1f} GiB")
        if self.rejected:
            return "no valid layout: " + max(self.rejected, key=lambda k: self.rejected[k])
        return "no valid layout"

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        d: dict[str, Any] = {
            "gpus": self.gpus, "global_batch": self.global_batch, "seq_len": self.seq_len,
            "precision": self.precision, "evaluated": self.evaluated, "valid": self.valid,
            "fitting": self.fitting, "rejected": self.rejected, "no_fit_reason": self.no_fit_reason,
            "layouts": [e.to_dict() for e in self.top],
        }
        if best is not None:
            d.update({k: v for k, v in best.to_dict().items() if k in (
                "step_time_s", "mfu", "hfu", "tokens_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu",
                "memory_gib_per_gpu", "layout", "breakdown")})
        return d


def _divisors(n: int) -> list[int]:
    """The divisors of ``n`` in ascending order, by trial division up to ``sqrt(n)`` (a global batch of
    10^12 sequences has at most 6,720 divisors; counting to ``n`` would take hours)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def candidates(model: ModelSpec, gpus: int, global_batch: int, gpus_per_node: int,
               fixed: dict[str, Any] | None = None, seq_len: int | None = None,
               stack: Stack | None = None) -> Layouts:
    """All combinations of the search grid for ``gpus`` (before validity rules), honouring ``fixed``
    (keys: ParallelismSpec field names) and offering only the features of ``stack``."""
    fx = dict(fixed or {})
    s = seq_len or model.seq_len
    st = stack or STACKS["megatron-core-2024"]

    def choice(name: str, default: list[int]) -> list[int]:
        spec_name = SPEC_FIELDS[name]
        if spec_name in fx:
            v = fx[spec_name]
            if name == "recompute":
                return [RECOMPUTE_CODES[str(v)]]
            return [int(v or 0)]
        return default

    tps = choice("tp", [t for t in _pow2_upto(min(gpus_per_node, gpus)) if model.heads % t == 0])
    pps = choice("pp", _pow2_upto(min(model.layers, gpus)))
    if fx.get("moe_overlap") == "dualpipe":  # DualPipe runs on an even pipeline of >= 2 stages (moe_overlap.py)
        pps = [p for p in pps if p >= 2 and p % 2 == 0]
    cps = choice("cp", [c for c in _pow2_upto(min(CP_MAX if st.context_parallel else 1, gpus))
                        if c == 1 or s % (2 * c) == 0])
    experts = model.moe.experts if model.moe else 1
    eps = np.array(choice("ep", [e for e in _pow2_upto(min(experts, gpus)) if experts % e == 0]))
    rc_default = [v for k, v in RECOMPUTE_CODES.items() if k != "selective" or st.selective_recompute]
    rcs = np.array(choice("recompute", rc_default))
    zs = np.array(choice("zero", list(st.zero_stages)))
    if SPLIT_FIELDS & fx.keys():
        splits = [(int(fx.get("first_stage_layers") or 0), int(fx.get("last_stage_layers") or 0),
                   int(bool(fx.get("embedding_in_split"))), int(bool(fx.get("loss_in_split"))))]
    else:
        splits = [(0, 0, e, lo) for e, lo in (SPLIT_CHOICES if st.uneven_pipeline else SPLIT_CHOICES[:1])]
    blocks = []
    for tp, pp, cp in itertools.product(tps, pps, cps):
        if gpus % (tp * pp * cp):
            continue
        dp = gpus // (tp * pp * cp)
        if "dp" in fx and int(fx["dp"]) != dp:
            continue
        sp = int(bool(fx["sequence_parallel"])) if "sequence_parallel" in fx else \
            int(default_sequence_parallel(tp, st))
        per_replica = global_batch // dp if global_batch % dp == 0 else 0
        mbss = choice("mbs", _divisors(per_replica) if per_replica else [1])
        vmax = VPP_MAX if (st.interleaved and pp > 1) else 1
        vpps = choice("vpp", searched_vpps(model.layers, pp, vmax))
        for first, last, es, ls in (splits if pp > 1 else [(0, 0, 0, 0)]):
            # expert TP: = tp (0), or 1 when tp > 1 (MoE parallel folding, moe_layout.py)
            etps = np.array([int(fx["etp"] or 0)] if "etp" in fx else ([0, 1] if model.moe and tp > 1 else [0]))
            g = np.meshgrid(eps, np.array(vpps), np.array(mbss), rcs, zs, etps, indexing="ij")
            n = g[0].size
            cols = [np.full(n, tp), np.full(n, pp), np.full(n, dp), np.full(n, cp), g[0].ravel(), g[1].ravel(),
                    g[2].ravel(), g[3].ravel(), g[4].ravel(), np.full(n, sp), np.full(n, first), np.full(n, last),
                    np.full(n, es), np.full(n, ls), g[5].ravel()]
            block = np.stack(cols, axis=1)
            if model.moe:  # only foldings where etp x ep divides tp x cp x dp (moe_layout)
                block = block[(tp * cp * dp) % (block[:, 4] * np.where(block[:, 14] > 0, block[:, 14], tp)) == 0]
                m = global_batch // (block[:, 6] * dp)  # and the interleaved schedule only where it runs
                block = block[(block[:, 5] == 1) | ((pp > 1) & (m % pp == 0))]
            blocks.append(block)
    if not blocks:
        raise SpecError(f"no layout of tp x pp x dp x cp matches {gpus} GPUs with the fixed fields "
                        f"{ {k: v for k, v in fx.items() if k in ('tp', 'pp', 'dp', 'cp')} }")
    a = np.concatenate(blocks).astype(np.int64)
    # columns 0-13: tp .. loss_split in field order; 14: etp (a keyword: the stage-plan fields sit between)
    return Layouts(*(a[:, i] for i in range(14)), etp=a[:, 14], **pinned_modes(fx))


def pinned_modes(fixed: dict[str, Any]) -> dict[str, int]:
    """The per-layout modes a search takes as given, never searched: MoE overlap, per-module recompute and
    the number of fully recomputed layers (Layouts codes; absent: the stack's default / none)."""
    out: dict[str, int] = {}
    if fixed.get("moe_overlap") is not None:
        out["moe_overlap"] = MOE_OVERLAP_CODES[str(fixed["moe_overlap"])]
    if fixed.get("recompute_modules"):
        out["rc_modules"] = sum(RECOMPUTE_MODULE_BITS[str(m)] for m in set(fixed["recompute_modules"]))
    if fixed.get("recompute_num_layers"):
        out["rc_layers"] = int(fixed["recompute_num_layers"])
    return out


def _prune_moe(model: ModelSpec, valid: Layouts, global_batch: int, precision: str, hw, prm: TrainParams, s: int,
               rejected: Counter[str], stack: Stack | None = None) -> tuple[Layouts, int | None]:
    """The cheapest fitting layout of each recompute/ZeRO group (:mod:`search_prune`); evaluated layouts
    that do not fit are counted by their largest memory term. Unchanged when none fits."""

    def memory(sub: Layouts):
        mem = memory_arrays(model, sub, global_batch, precision, hw.flash, prm, s, stack)
        fits = np.broadcast_to(mem["total"] <= hw.hbm_bytes, (len(sub),))
        largest = np.stack([np.broadcast_to(mem[k], fits.shape) for k in TERMS]).argmax(axis=0)
        return fits, largest

    pr = cheapest_fitting(valid, memory)
    if len(pr.keep) == 0:
        return valid, None
    for k, c in zip(*np.unique(pr.oom_terms, return_counts=True), strict=True):
        rejected[f"out of memory (largest term: {TERMS[int(k)]})"] += int(c)
    skipped = len(valid) - pr.evaluated
    if skipped:
        rejected["not timed: a cheaper recompute mode or ZeRO stage of the same layout fits"] += skipped
    return valid.take(pr.keep), len(pr.keep)


def search(model: ModelSpec, cluster: ClusterSpec, *, global_batch: int, gpus: int | None = None,
           precision: str = "bf16", seq_len: int | None = None, fixed: dict[str, Any] | None = None,
           top: int = 10, params: TrainParams | None = None, calibration: Calibration | None = None,
           software_stack: str = "auto", placement="contiguous", dataset=DEFAULT_DATASET) -> SearchResult:
    """Rank every valid layout for ``gpus`` GPUs (default: the whole cluster) by tokens/s among those
    that fit; count the rejected ones by reason. ``software_stack`` as ``ParallelismSpec.software_stack``;
    ``placement`` and ``dataset`` as :func:`~clustertwin.train.estimate.estimate`."""
    prm = resolve_params(params, calibration)
    stack = resolve_stack(software_stack, cluster, prm)
    s = seq_len or model.seq_len
    n = cluster.total_gpus if gpus is None else gpus
    if n < 1:
        raise SpecError(f"gpus must be >= 1 (got {n})", path=("gpus",))
    if n > cluster.total_gpus:
        raise SpecError(f"gpus={n} exceeds the cluster's {cluster.total_gpus} GPUs", path=("gpus",))
    hw = hardware(cluster, precision, prm, stack)
    fx = dict(fixed or {})
    fx.update(moe_layout_defaults(stack, bool(model.moe), fx))  # what the stack's runs fix (stack.py)
    parsed = pinned_layout_string(fx, model)  # a layout string pins the stage plan (layout_string.py)
    mode = fx.get("moe_overlap")
    bad = overlap_violation(stack.name, stack.moe_overlaps, str(mode), model, 2) if mode else None
    if bad:
        raise SpecError(f"invalid layout: {bad}", path=("moe_overlap",))
    if not hw.flash and "cp" not in fx:
        fx["cp"] = 1  # ring attention (context parallelism) runs on fused attention kernels only
    lay = candidates(model, n, global_batch, cluster.node.gpus, fx, s, stack)
    if parsed is not None:
        lay.first, lay.last, lay.mid, lay.from_string = (np.full(len(lay), v) for v in parsed.columns)
    viol = violations(model, lay, global_batch, cluster.node.gpus, s)
    bad = np.zeros(len(lay), dtype=bool)
    rejected: Counter[str] = Counter()
    for name in RULES:
        mask = np.asarray(viol[name], dtype=bool) & ~bad
        if mask.any():
            rejected[MESSAGES[name]] += int(mask.sum())
        bad |= np.asarray(viol[name], dtype=bool)
    ok = np.flatnonzero(~bad)
    res = SearchResult(gpus=n, global_batch=global_batch, seq_len=s, precision=precision, evaluated=len(lay),
                       valid=len(ok), fitting=0)
    if len(ok) == 0:
        res.rejected = dict(rejected)
        return res
    valid = lay.take(ok)
    pre_fitting = None
    if model.moe:  # MoE grids: time only the cheapest fitting recompute/ZeRO of each layout (search_prune)
        valid, pre_fitting = _prune_moe(model, valid, global_batch, precision, hw, prm, s, rejected, stack)
    out = evaluate_layouts(model, cluster, valid, global_batch, precision, prm, s, calibration, stack=stack,
                           placement=placement, dataset=dataset)
    fits = out.fits
    res.fitting = int(fits.sum()) if pre_fitting is None else pre_fitting
    oom = np.flatnonzero(~fits)
    if len(oom):
        terms = np.stack([np.broadcast_to(getattr(out.memory, k), fits.shape)[oom] for k in TERMS])
        for k, c in zip(*np.unique(terms.argmax(axis=0), return_counts=True), strict=True):
            rejected[f"out of memory (largest term: {TERMS[int(k)]})"] += int(c)
        j = oom[np.argmax(out.tokens_per_s[oom])]
        res.leanest_gib = float(np.min(np.broadcast_to(out.memory_total_bytes, fits.shape)[oom])) / GIB
        res.capacity_gib = hw.hbm_bytes / GIB
        res.fastest_oom = from_arrays(out, valid, int(j), global_batch=global_batch, seq_len=s,
                                      precision=precision, hbm_bytes=hw.hbm_bytes, model=model, stack=stack.name)
    res.rejected = dict(rejected)
    fit_idx = np.flatnonzero(fits)
    order = fit_idx[np.argsort(-out.tokens_per_s[fit_idx], kind="stable")][:max(top, 1)]
    res.top = [annotate(from_arrays(out, valid, int(i), global_batch=global_batch, seq_len=s, precision=precision,
                                    hbm_bytes=hw.hbm_bytes, model=model, stack=stack.name),
                        cluster, valid, int(i), placement, dataset) for i in order]
    return res
