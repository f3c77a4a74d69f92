"""Evaluators of the validation kinds ``train`` and ``train_run`` (see validation/README.md).

* ``train``: model, cluster (``{node, nodes}``) or ``node`` + ``gpus``, parallelism, optional ``stack`` (the
  software stack the run used, a :data:`~clustertwin.train.stack.NAMES` name; without it the stack a
  framework named in ``source`` implies, else the GPU generation's). Parallelism fields
  the case leaves out are chosen by :func:`~clustertwin.train.search.search` (the best predicted layout
  that fits); fields it gives are never changed. When tp, pp and dp are given, tp x pp x dp x cp is the
  GPU count; a missing global batch is one sequence per GPU.
* ``train_run``: model, cluster, optional parallelism, ``tokens``. Without a GPU count (no ``nodes``,
  ``gpus`` or full tp/pp/dp) the run is evaluated with the best layout search finds on
  :data:`DEFAULT_RUN_GPUS` GPUs of the case's node. Published GPU-hours are allocated time, so the
  prediction is the failure-free time of the tokens at the layout's throughput divided by the ETTR of
  the reliability model for that GPU count and its default checkpoint policy
  (:func:`clustertwin.reliability.train_run.time_to_train_with_failures`, analytical expectation).

This module is the validate runner's (it composes the training and the reliability layers).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

from clustertwin.errors import SpecError, did_you_mean
from clustertwin.reliability.train_run import time_to_train_with_failures
from clustertwin.specs import ClusterSpec, ModelSpec, ParallelismSpec, build, load
from clustertwin.train.complete import complete_layout, is_complete
from clustertwin.train.estimate import TrainEstimate
from clustertwin.train.params import TrainParams, resolve_params
from clustertwin.train.stack import ALIASES, NAMES, STACKS, resolve_stack, stack_for_source

#: GPUs a train_run case without a GPU count is evaluated on
DEFAULT_RUN_GPUS = 1024
#: sequences per GPU of the default global batch (cases that do not state one)
DEFAULT_SEQUENCES_PER_GPU = 1

_CLUSTERS: dict[str, ClusterSpec] = {}
_MODELS: dict[str, ModelSpec] = {}


def _model(case: dict) -> ModelSpec:
    raw = case.get("model")
    if raw is None:
        raise SpecError("required field missing", path=("model",))
    key = json.dumps(raw, sort_keys=True, default=str)
    if key not in _MODELS:
        _MODELS[key] = load(ModelSpec, _with_preset_fields(raw), kind="model")
    return _MODELS[key]


def _with_preset_fields(raw: Any) -> Any:
    """An inline model spec whose ``name`` is a catalog preset id and which agrees with that preset on every
    field it gives (``seq_len`` aside: a run's own) is the published model: it takes the preset's fields it
    leaves out (head_dim, window pattern, sinks, gate activation), which a source table's summary omits."""
    if not isinstance(raw, dict) or "preset" in raw or not isinstance(raw.get("name"), str):
        return raw
    from clustertwin import catalog

    name = raw["name"].strip().lower()
    if name not in catalog.ids("model"):
        return raw
    preset = catalog.get("model", name).model_dump(exclude_none=True, exclude={"id", "source", "notes"})
    for field, value in raw.items():
        if field in ("name", "seq_len"):
            continue
        want = preset.get(field)
        if isinstance(value, dict) and isinstance(want, dict):
            if any(want.get(k) != v for k, v in value.items()):
                return raw
        elif want != value:
            return raw
    return {**preset, **raw}


def _cluster(case: dict, min_gpus: int | None = None) -> tuple[ClusterSpec, int | None]:
    """The case's cluster and its declared GPU count (None when the case states none)."""
    raw = case.get("cluster")
    gpus: int | None = None
    if raw is None:
        node = case.get("node")
        if node is None:
            raise SpecError("a case needs 'cluster' or 'node'", path=("cluster",))
        raw = {"node": node}
        gpus = case.get("gpus")
    elif isinstance(raw, str):
        raw = {"preset": raw}
    raw = dict(raw)
    declared_nodes = "nodes" in raw or "gpus" in raw or "preset" in raw
    key = json.dumps([raw, gpus, min_gpus], sort_keys=True, default=str)
    if key in _CLUSTERS:
        c = _CLUSTERS[key]
        return c, gpus or (c.total_gpus if declared_nodes else None)
    c = load(ClusterSpec, raw, kind="cluster")
    want = gpus or (None if declared_nodes else min_gpus)
    if want and not declared_nodes:
        c = c.model_copy(update={"nodes": max(1, math.ceil(want / c.node.gpus))})
    _CLUSTERS[key] = c
    return c, gpus or (c.total_gpus if declared_nodes else None)


def _parallelism(case: dict, gpus: int | None = None) -> ParallelismSpec:
    """The case's parallelism; a missing global batch defaults to one sequence per GPU
    (:data:`DEFAULT_SEQUENCES_PER_GPU`), the weak-scaling setting of the Megatron papers."""
    raw = dict(case.get("parallelism") or {})
    named = case.get("stack")
    if named is not None:
        if not isinstance(named, str) or (named != "auto" and ALIASES.get(named, named) not in STACKS):
            raise SpecError(f"unknown software stack {str(named)[:40]!r}{did_you_mean(str(named), NAMES)} "
                            f"(expected one of {', '.join(NAMES)})", path=("stack",))
        if "software_stack" in raw and raw["software_stack"] != named:
            raise SpecError(f"'stack: {named}' and 'parallelism.software_stack: {raw['software_stack']}' disagree; "
                            "give one", path=("stack",))
        raw["software_stack"] = named
    if "software_stack" not in raw and stack_for_source(case.get("source")):
        raw["software_stack"] = stack_for_source(case.get("source"))
    if "global_batch" not in raw and gpus:
        raw["global_batch"] = gpus * DEFAULT_SEQUENCES_PER_GPU
    return build(ParallelismSpec, raw, prefix=("parallelism",))


def _layout_gpus(case: dict) -> int | None:
    """tp x pp x dp x cp when the case gives tp, pp and dp."""
    raw = case.get("parallelism") or {}
    if not isinstance(raw, dict) or not {"tp", "pp", "dp"} <= set(raw):
        return None
    try:
        return int(raw["tp"]) * int(raw["pp"]) * int(raw["dp"]) * int(raw.get("cp", 1))
    except (TypeError, ValueError):
        return None


def _stack_defaults(par: ParallelismSpec, cluster: ClusterSpec, params: TrainParams | None) -> dict[str, Any]:
    """Pipeline fields the run's framework sets by default where the case states none
    (``Stack.pp_framework_defaults``, torchtitan 2024): the 1F1B schedule (vpp 1) and as many
    micro-batches as stages, i.e. ``micro_batch`` = global batch / (dp x pp), for a case with pp > 1 and dp."""
    given = par.model_fields_set
    stack = resolve_stack(par.software_stack, cluster, resolve_params(params))
    if not stack.pp_framework_defaults or not {"pp", "dp"} <= given or par.pp == 1:
        return {}
    out: dict[str, Any] = {}
    if not given & {"vpp", "schedule", "pipeline_layout"}:
        out["vpp"] = 1
    per_stage = par.global_batch // (par.dp * par.pp)
    if "micro_batch" not in given and per_stage >= 1:
        out["micro_batch"] = per_stage
    return out


def predict(model: ModelSpec, cluster: ClusterSpec, par: ParallelismSpec, gpus: int,
            params: TrainParams | None = None) -> TrainEstimate:
    """Estimate the given layout, completing the fields it leaves out with the best fitting layout that
    the run's software stack can run (``par.software_stack``; by default the GPU generation's;
    :func:`~clustertwin.train.complete.complete_layout`). When no completion fits in memory, the fastest one
    that does not is returned (``fits`` False): the run was measured, so it ran."""
    given = set(par.model_fields_set)
    if par.gpus != gpus and given >= {"tp", "pp", "dp"}:
        raise SpecError(f"tp x pp x dp x cp = {par.gpus} but the case has {gpus} GPUs", path=("parallelism",))
    layout = _recipe_layout(model, par, given)
    if layout:
        par, given = par.model_copy(update={"pipeline_layout": layout}), given | {"pipeline_layout"}
    extra = {} if is_complete(given, par) else _stack_defaults(par, cluster, params)
    e = complete_layout(model, cluster, par, gpus, given, extra_fixed=extra, params=params)[0]
    return replace(e, searched_fields={**e.searched_fields, "pipeline_layout": layout}) if layout else e


def _recipe_layout(model: ModelSpec, par: ParallelismSpec, given: set[str]) -> str | None:
    """The pipeline layout string of a case that gives a vpp whose chunks cannot hold whole layers (with or
    without the embedding/loss slots) and no stage split: the run had one, and Megatron-Bridge's recipes
    build it by :func:`~clustertwin.train.layout_string.balanced_layout`."""
    if "vpp" not in given or par.vpp < 2 or given & {"pipeline_layout", "first_stage_layers", "last_stage_layers"}:
        return None
    from clustertwin.train.layout_string import balanced_layout
    from clustertwin.train.rules import whole_chunks

    return None if whole_chunks(model.layers, par.pp, par.vpp) else balanced_layout(model.layers, par.pp, par.vpp)


def _prediction(e: TrainEstimate) -> dict[str, Any]:
    return {"step_time_s": e.step_time_s, "mfu": e.mfu, "hfu": e.hfu, "tokens_per_s": e.tokens_per_s,
            "model_tflops_per_gpu": e.model_tflops_per_gpu, "hardware_tflops_per_gpu": e.hardware_tflops_per_gpu,
            "memory_gib_per_gpu": e.memory_gib_per_gpu, "fits": e.fits, "gpus": e.gpus, "layout": e.layout,
            "software_stack": e.software_stack, "searched_fields": e.searched_fields}


def evaluate(case: dict) -> dict[str, Any]:
    """Predicted measured keys of a ``train`` case (plus ``layout``)."""
    model = _model(case)
    lg = _layout_gpus(case)
    cluster, gpus = _cluster(case, lg)
    gpus = lg or gpus or cluster.total_gpus
    par = _parallelism(case, gpus)
    return _prediction(predict(model, cluster, par, gpus))


def evaluate_run(case: dict) -> dict[str, Any]:
    """Predicted ``gpu_hours`` and ``days`` of a ``train_run`` case."""
    model = _model(case)
    tokens = case.get("tokens")
    if not tokens:
        raise SpecError("required field missing", path=("tokens",))
    lg = _layout_gpus(case)
    cluster, gpus = _cluster(case, lg or DEFAULT_RUN_GPUS)
    gpus = lg or gpus or DEFAULT_RUN_GPUS
    par = _parallelism(case, gpus)
    e = predict(model, cluster, par, gpus)
    extra = _ramp_tokens(case, model, cluster, e, par)
    run = time_to_train_with_failures(e, float(tokens) + extra, cluster, model, trials=0)
    out = _prediction(e)
    out.update({"gpu_hours": run.gpu_hours, "days": run.days, "energy_mwh": run.failure_free.energy_mwh,
                "ettr": run.ettr, "failure_free_gpu_hours": run.failure_free.gpu_hours,
                "batch_ramp_extra_tokens": extra})
    return out


def _ramp_tokens(case: dict, model: ModelSpec, cluster: ClusterSpec, e: TrainEstimate,
                 par: ParallelismSpec) -> float:
    """Steady-step tokens the case's ``batch_ramp: {start_batch, tokens}`` is worth beyond its own tokens
    (:mod:`clustertwin.train.ramp`); 0 without one."""
    raw = case.get("batch_ramp")
    if raw is None:
        return 0.0
    from clustertwin.train.ramp import batch_ramp

    if not isinstance(raw, dict) or set(raw) != {"start_batch", "tokens"}:
        raise SpecError("expected {start_batch: sequences, tokens: tokens trained while the batch rises}",
                        path=("batch_ramp",))
    try:
        start, ramp = int(raw["start_batch"]), float(raw["tokens"])
    except (TypeError, ValueError) as err:
        raise SpecError(f"not a number: {err}", path=("batch_ramp",)) from None
    if not ramp < float(case["tokens"]):
        raise SpecError("the ramp must be shorter than the run's tokens", path=("batch_ramp", "tokens"))
    return batch_ramp(model, cluster, e, par, start, ramp).extra_tokens
