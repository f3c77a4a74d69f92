"""The pipeline stage plan as framework flags: the layers of every stage and virtual chunk, as the
training model costs them (:mod:`clustertwin.train.pipeline`), written in the form the framework reads.

Megatron-LM (``pretrain_gpt.py``) and Megatron-Bridge / NeMo 2 (``model.*`` overrides of Megatron-Core's
``TransformerConfig``) take one of four forms; the first that states the plan exactly is used:

* even split (``L`` divisible by ``pp x vpp``, no slots for embedding or loss): the layer count per
  virtual stage (``--num-layers-per-virtual-pipeline-stage``) or nothing when ``vpp = 1``;
* explicit first/last stage layers: ``--decoder-first-pipeline-num-layers`` /
  ``--decoder-last-pipeline-num-layers`` (``num_layers_in_first/last_pipeline_stage``), with
  ``--num-virtual-stages-per-pipeline-rank`` (Megatron requires that form for uneven stages);
* embedding / loss as slots, when ``L + e + l`` divides by ``pp x vpp``:
  ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``;
* otherwise a layout string (``--pipeline-model-parallel-layout``): the user's own (checked against the
  model and ``pp x vpp`` by :func:`clustertwin.train.layout_string.parse_pipeline_layout`, its counts
  taken from the grammar before anything is expanded), or the balanced plan
  written chunk by chunk, ``E`` opening chunk 0 and ``L`` closing the last, chunk ``j`` on stage
  ``j mod pp`` (Megatron-Core ``PipelineParallelLayerLayout``: ``layout[vpp_rank x pp + pp_rank]``).
  Megatron-Core refuses a layout string together with the other fields, so it is always given alone.

Sources: Megatron-LM ``megatron/training/arguments.py`` and
``megatron/core/transformer/pipeline_parallel_layer_layout.py``.
"""

from __future__ import annotations

from clustertwin.errors import SpecError
from clustertwin.specs.model import ModelSpec
from clustertwin.specs.parallelism import ParallelismSpec
from clustertwin.train.layout_string import parse_pipeline_layout

PATH = ("parallelism", "vpp")


def balanced_chunks(layers: int, pp: int, vpp: int, emb_slot: bool, loss_slot: bool) -> list[int]:
    """Layers of each of the ``pp x vpp`` chunks in layout order: ``S = L + e + l`` slots, chunk ``j``
    takes ``floor(S / pp vpp)`` and the first ``S mod pp vpp`` chunks one more; the embedding takes a
    slot of chunk 0, the loss one of the last chunk (the training model's balanced stage plan)."""
    chunks = pp * vpp
    slots = layers + int(emb_slot) + int(loss_slot)
    q, r = divmod(slots, chunks)
    out = [q + (1 if j < r else 0) for j in range(chunks)]
    out[0] -= int(emb_slot)
    out[-1] -= int(loss_slot)
    if q < 1 or out[0] < 0 or out[-1] < 0:
        raise SpecError(f"{layers} layers cannot fill {pp} x {vpp} pipeline chunks", path=PATH)
    return out


def layout_string(chunks: list[int]) -> str:
    """A Megatron-Core layout string for per-chunk layer counts: ``E`` + chunk 0 ``|`` ... ``|`` last
    chunk + ``L``; runs of equal middle chunks are folded as ``(t*N|)*K``."""
    def body(n: int) -> str:
        return "" if n == 0 else ("t" if n == 1 else f"t*{n}")

    if len(chunks) == 1:
        return "E" + body(chunks[0]) + "L"
    parts = ["E" + body(chunks[0]) + "|"]
    mid = chunks[1:-1]
    i = 0
    while i < len(mid):
        k = i
        while k < len(mid) and mid[k] == mid[i]:
            k += 1
        run = k - i
        item = body(mid[i]) + "|"
        parts.append(item if run == 1 else f"({item})*{run}")
        i = k
    parts.append(body(chunks[-1]) + "L")
    return "".join(parts)


def _check_explicit(model: ModelSpec, p: ParallelismSpec) -> None:
    first, last = p.first_stage_layers or 0, p.last_stage_layers or 0
    rest_stages = p.pp - (1 if first else 0) - (1 if last else 0)
    rest = model.layers - first - last
    ok = rest >= 0 and (rest % rest_stages == 0 and rest // rest_stages >= 1 if rest_stages > 0 else rest == 0)
    each = rest // rest_stages if rest_stages > 0 and ok else 0
    if ok and p.vpp > 1:
        ok = all(n % p.vpp == 0 for n in (first or each, last or each, each or p.vpp))
    if not ok:
        raise SpecError(f"first/last stage layers {first or '-'}/{last or '-'} leave {rest} layers that do not "
                        f"split evenly over the other {rest_stages} stages and {p.vpp} chunks each",
                        path=("parallelism", "first_stage_layers"))


def pipeline_plan(model: ModelSpec, p: ParallelismSpec) -> tuple[str, object]:
    """The form that states the layout's stage plan: ('none' | 'even' | 'explicit' | 'slots' | 'layout',
    value) — the value is the layers per virtual stage for 'even' and the layout string for 'layout'."""
    if p.pp == 1:
        return "none", None
    if p.pipeline_layout:  # checked against the model and pp x vpp (counted before expanding) before it is written
        parse_pipeline_layout(p.pipeline_layout, p.pp, p.vpp, model.layers)
        return "layout", p.pipeline_layout
    if p.first_stage_layers or p.last_stage_layers:
        _check_explicit(model, p)
        return "explicit", None
    chunks = p.pp * p.vpp
    if p.embedding_in_split or p.loss_in_split:
        slots = model.layers + int(p.embedding_in_split) + int(p.loss_in_split)
        if slots % chunks == 0:
            return "slots", None
    elif model.layers % chunks == 0:
        return "even", model.layers // chunks
    return "layout", layout_string(balanced_chunks(model.layers, p.pp, p.vpp, p.embedding_in_split,
                                                   p.loss_in_split))


def megatron_pipeline_args(model: ModelSpec, p: ParallelismSpec) -> list[str]:
    """Megatron-LM arguments for the stage plan (module docstring)."""
    form, value = pipeline_plan(model, p)
    vstages = ["--num-virtual-stages-per-pipeline-rank", str(p.vpp)] if p.vpp > 1 else []
    if form == "even":
        return ["--num-layers-per-virtual-pipeline-stage", str(value)] if p.vpp > 1 else []
    if form == "explicit":
        args = []
        if p.first_stage_layers:
            args += ["--decoder-first-pipeline-num-layers", str(p.first_stage_layers)]
        if p.last_stage_layers:
            args += ["--decoder-last-pipeline-num-layers", str(p.last_stage_layers)]
        return args + vstages
    if form == "slots":
        return ((["--account-for-embedding-in-pipeline-split"] if p.embedding_in_split else [])
                + (["--account-for-loss-in-pipeline-split"] if p.loss_in_split else []) + vstages)
    if form == "layout":
        return ["--pipeline-model-parallel-layout", str(value)]
    return []


def nemo_pipeline_overrides(model: ModelSpec, p: ParallelismSpec) -> dict[str, object]:
    """Megatron-Bridge ``model.*`` overrides for the stage plan; a layout string is Hydra-quoted (its
    ``| * ( )`` are grammar characters of an unquoted override)."""
    form, value = pipeline_plan(model, p)
    vpp = {"model.virtual_pipeline_model_parallel_size": p.vpp} if p.vpp > 1 else {}
    if form == "layout":
        return {"model.pipeline_model_parallel_layout": f"'{value}'"}
    if form == "explicit":
        ov: dict[str, object] = dict(vpp)
        if p.first_stage_layers:
            ov["model.num_layers_in_first_pipeline_stage"] = p.first_stage_layers
        if p.last_stage_layers:
            ov["model.num_layers_in_last_pipeline_stage"] = p.last_stage_layers
        return ov
    if form == "slots":
        return vpp | ({"model.account_for_embedding_in_pipeline_split": "true"} if p.embedding_in_split else {}) | (
            {"model.account_for_loss_in_pipeline_split": "true"} if p.loss_in_split else {})
    return vpp
