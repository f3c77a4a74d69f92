"""A partial layout completed by search: the layout fields a user (or a validation case) gives are kept,
the ones left out are chosen by :func:`~clustertwin.train.search.search` (the layout of the highest
throughput that fits in memory; when none fits, the fastest that does not, flagged ``fits`` False).

A layout that gives every searched field (:data:`SEARCH_FIELDS`; the stage-plan fields only matter with
pipeline parallelism) is estimated as given. ``train estimate`` and ``explain`` complete this way unless
``--strict-layout`` asks for the literal defaults (tp = pp = cp = ep = vpp = micro-batch = 1, no
recompute, dp = the rest); ``validate`` completes its cases the same way.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from clustertwin.errors import SpecError
from clustertwin.specs import ClusterSpec, ModelSpec, ParallelismSpec
from clustertwin.specs.calibration import Calibration
from clustertwin.train.data import DEFAULT_DATASET
from clustertwin.train.estimate import TrainEstimate, estimate
from clustertwin.train.params import TrainParams, resolve_params
from clustertwin.train.search import SPEC_FIELDS, SPLIT_FIELDS, search
from clustertwin.train.stack import ALIASES, moe_layout_defaults, resolve_stack, stack_violation

#: layout fields the search varies; a layout giving all of them is estimated directly
SEARCH_FIELDS = frozenset(SPEC_FIELDS.values())
#: fields the search takes as given without searching them (search.pinned_modes, etp, a pipeline layout string)
PINNED_FIELDS = frozenset(("moe_overlap", "recompute_modules", "recompute_num_layers", "etp", "pipeline_layout"))


def is_complete(given: set[str], par: ParallelismSpec) -> bool:
    """Whether ``given`` (the field names given) leaves nothing to search in ``par``."""
    return given >= SEARCH_FIELDS - SPLIT_FIELDS and bool(given & SPLIT_FIELDS or par.pp == 1 or par.pipeline_layout)


def _check_given(par: ParallelismSpec, given: set[str], cluster: ClusterSpec, params: TrainParams) -> None:
    """SpecError when a field given needs a feature the named software stack lacks (the search pins given
    fields as they are, so it is said here, as :func:`~clustertwin.train.estimate.estimate` says it)."""
    if par.software_stack in ("auto", *ALIASES):
        return
    stack = resolve_stack(par.software_stack, cluster, params)

    def g(name: str, default: Any) -> Any:
        return getattr(par, name) if name in given else default

    bad = stack_violation(stack, sequence_parallel=g("sequence_parallel", False), recompute=g("recompute", "none"),
                          zero=g("zero", min(stack.zero_stages)), cp=g("cp", 1), vpp=g("vpp", 1),
                          uneven=bool(given & SPLIT_FIELDS or par.pipeline_layout), precision=par.precision)
    if bad:
        raise SpecError(f"invalid layout: {bad}", path=("parallelism", "software_stack"))


def stack_layout_defaults(model: ModelSpec, cluster: ClusterSpec, par: ParallelismSpec, given: set[str],
                          params: TrainParams) -> dict[str, Any]:
    """The layout fields of an MoE model's run that ``par``'s named software stack fixes and ``given``
    leaves out (:func:`~clustertwin.train.stack.moe_layout_defaults`)."""
    if par.software_stack in ("auto", *ALIASES):
        return {}
    stack = resolve_stack(par.software_stack, cluster, params)
    return moe_layout_defaults(stack, bool(model.moe), {k: getattr(par, k) for k in given})


def complete_layout(model: ModelSpec, cluster: ClusterSpec, par: ParallelismSpec, gpus: int, given: set[str], *,
                    extra_fixed: dict[str, Any] | None = None, params: TrainParams | None = None,
                    calibration: Calibration | None = None, placement: Any = "contiguous",
                    dataset: Any = DEFAULT_DATASET) -> tuple[TrainEstimate, dict[str, Any]]:
    """(estimate, fields chosen by the search) of ``par`` completed on ``gpus`` GPUs, keeping the fields
    named in ``given`` (and ``extra_fixed``: defaults the caller pins, such as a framework's pipeline
    defaults). SpecError when no layout with the given fields exists."""
    _check_given(par, given, cluster, resolve_params(params, calibration))
    defaults = stack_layout_defaults(model, cluster, par, given, resolve_params(params, calibration))
    if defaults:
        par, given = par.model_copy(update=defaults), given | set(defaults)
    if is_complete(given, par):
        e = estimate(model, cluster, par, params=params, calibration=calibration, placement=placement,
                     dataset=dataset)
        return (replace(e, searched_fields=dict(defaults)), dict(defaults)) if defaults else (e, {})
    fixed = {k: getattr(par, k) for k in given if k in SEARCH_FIELDS or k in PINNED_FIELDS}
    fixed.update(extra_fixed or {})
    res = search(model, cluster, global_batch=par.global_batch, gpus=gpus, precision=par.precision,
                 fixed=fixed, top=1, params=params, calibration=calibration, software_stack=par.software_stack,
                 placement=placement, dataset=dataset)
    best = res.best if res.best is not None else res.fastest_oom
    if best is None:
        why = "; ".join(f"{k}: {v}" for k, v in res.rejected.items()) or "no candidates"
        raise SpecError(f"no valid layout on {gpus} GPUs with the given fields ({why})", path=("parallelism",))
    pipelined = int(best.layout.get("pp", 1)) > 1
    chosen = {f: best.layout[f] for f in sorted(SEARCH_FIELDS) if f not in fixed and best.layout.get(f) is not None
              and (pipelined or f not in SPLIT_FIELDS)}
    chosen.update(defaults)
    return replace(best, searched_fields=chosen), chosen
