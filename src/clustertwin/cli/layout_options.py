"""The layout options, defined once: every command that takes one training layout (``train estimate``,
``explain``, ``deploy slurm|k8s``, ``report``, ``profile``, ``export chakra``; ``train search`` and ``train
scale`` pin the ones given and search the rest) declares these same options, with the name, type, default
(None: not given) and help text taken from :class:`~clustertwin.specs.ParallelismSpec` (its field docstrings
and choices), and turns them into a layout with :func:`layout_fields` and
:func:`clustertwin.train.resolve.resolve_parallelism`, which fills what is not given with the spec's defaults
(tp, pp, cp, ep, vpp, micro-batch 1; dp = GPUs / (tp pp cp); ZeRO and sequence parallelism from the software
stack). ``tests/cli/test_layout_options.py`` holds the contract.
"""

from __future__ import annotations

from typing import Any

import typer

from clustertwin.cli.common import literal_choices, spec_help
from clustertwin.errors import SpecError, did_you_mean
from clustertwin.specs import ParallelismSpec

# ------------------------------------------------------------------ the run around the layout
SeqOpt = typer.Option(None, "--seq-len", "-s", help="Sequence length (default: the model's).")
GlobalBatchOpt = typer.Option(..., "--global-batch", "-b", help="Sequences per optimizer step.")
"""``--global-batch``: required by every command that models a training step (train estimate/search/scale,
explain, report, deploy, export chakra); ``diagnose`` (OOM advice), ``profile`` and ``calibrate`` (only
against the twin) take it optionally."""
PrecOpt = typer.Option(ParallelismSpec.model_fields["precision"].default, "--precision", "-p",
                       help=spec_help(ParallelismSpec, "precision"))
StackOpt = typer.Option(ParallelismSpec.model_fields["software_stack"].default, "--stack",
                        help=spec_help(ParallelismSpec, "software_stack"))
StrictLayoutOpt = typer.Option(False, "--strict-layout",
                               help="Take the layout literally: fields not given keep their defaults (tp = pp = "
                                    "cp = ep = 1, micro-batch 1, no recompute, dp = the rest) instead of being "
                                    "chosen by search.")
"""``--strict-layout`` (train estimate, explain, report): without it, layout fields not given are searched
(:mod:`clustertwin.train.complete`, :func:`completed_layout`) and the chosen ones printed. Commands that run
or read one layout as given (deploy, profile, export chakra) resolve it as ``--strict-layout`` does."""
PlacementOpt = typer.Option("contiguous", "--placement",
                            help="Job nodes: contiguous, scattered, random, or node indices like 0-63,128-191.")


def _dataset_option() -> Any:
    from clustertwin.datapath.dataset import DATASETS

    names = ", ".join(DATASETS)
    return typer.Option(next(iter(DATASETS)), "--dataset",
                        help=f"What the job reads: {names}, or none (no data-loading term).")


DatasetOpt = _dataset_option()


# ------------------------------------------------------------------ the layout
#: ParallelismSpec field -> the option that sets it (one name per idea across the CLI)
LAYOUT_OPTIONS: dict[str, str] = {
    "tp": "--tp", "pp": "--pp", "dp": "--dp", "cp": "--cp", "ep": "--ep", "etp": "--etp", "vpp": "--vpp",
    "micro_batch": "--micro-batch", "recompute": "--recompute", "recompute_modules": "--recompute-modules",
    "recompute_num_layers": "--recompute-num-layers", "zero": "--zero",
    "sequence_parallel": "--sequence-parallel",
    "moe_overlap": "--moe-overlap", "first_stage_layers": "--first-stage-layers",
    "last_stage_layers": "--last-stage-layers", "embedding_in_split": "--embedding-in-split",
    "loss_in_split": "--loss-in-split", "pipeline_layout": "--pipeline-layout",
}
#: what the help adds to the field's docstring about a value that is not given
_NOT_GIVEN = {"dp": "default GPUs / (tp pp cp)", "zero": "default by the software stack: 1 when dp x cp > 1",
              "sequence_parallel": "default on when tp > 1 where the stack has it"}


def _choices(name: str) -> tuple[str, ...]:
    """The values a Literal field (or a tuple of Literals) admits."""
    return literal_choices(ParallelismSpec, name)


def field_help(name: str) -> str:
    """Help for ``name``: the spec field's docstring, its choices and what a value not given becomes."""
    text = spec_help(ParallelismSpec, name, not_given=_NOT_GIVEN.get(name))
    return text.replace(" One of:", " One of (comma-separated):") if name == "recompute_modules" else text


def _opt(name: str, *, searched: bool = False) -> Any:
    """The option of field ``name``; ``searched``: the variant of ``train search``, where a value not given
    is searched over (same name, type and default; the help says so)."""
    decl = LAYOUT_OPTIONS[name]
    decls = (f"{decl}/--no-{decl[2:]}",) if name == "sequence_parallel" else (decl,)
    text = field_help(name)
    if searched:
        text = text.rsplit(" (default", 1)[0] + " (pinned when given, else searched)"
    return typer.Option(None, *decls, help=text)


def search_option(name: str) -> Any:
    """``train search``'s variant of a layout option (see :func:`_opt`)."""
    return _opt(name, searched=True)


TpOpt = _opt("tp")
PpOpt = _opt("pp")
DpOpt = _opt("dp")
CpOpt = _opt("cp")
EpOpt = _opt("ep")
EtpOpt = _opt("etp")
VppOpt = _opt("vpp")
MicroBatchOpt = _opt("micro_batch")
RecomputeOpt = _opt("recompute")
RecomputeModulesOpt = _opt("recompute_modules")
RecomputeNumLayersOpt = _opt("recompute_num_layers")
ZeroOpt = _opt("zero")
SpOpt = _opt("sequence_parallel")
MoeOverlapOpt = _opt("moe_overlap")
FirstStageOpt = _opt("first_stage_layers")
LastStageOpt = _opt("last_stage_layers")
EmbeddingSplitOpt = _opt("embedding_in_split")
LossSplitOpt = _opt("loss_in_split")
PipelineLayoutOpt = _opt("pipeline_layout")


LAYOUT_PARAMS: tuple[str, ...] = tuple("sp" if f == "sequence_parallel" else f for f in LAYOUT_OPTIONS)
"""The command parameters of the layout options (each command's signature names these)."""


def layout_from_params(params: dict[str, Any]) -> dict[str, Any]:
    """:func:`layout_fields` of the layout parameters among a command's arguments (``locals()`` at its top)."""
    return layout_fields(**{k: params[k] for k in LAYOUT_PARAMS})


def layout_fields(*, sp: bool | None = None, recompute_modules: str | None = None, **given: Any) -> dict[str, Any]:
    """ParallelismSpec fields from the layout options a command received (None: not given); the option
    parameters carry the field names except ``sp`` and the comma-separated ``recompute_modules``."""
    unknown = set(given) - set(LAYOUT_OPTIONS)
    if unknown:
        raise TypeError(f"not layout options: {sorted(unknown)}")
    out = {k: v for k, v in given.items() if v is not None and v is not False}
    if sp is not None:
        out["sequence_parallel"] = sp
    modules = [x.strip() for x in (recompute_modules or "").split(",") if x.strip()]
    if modules:
        out["recompute_modules"] = modules
    for name, value in out.items():  # a choice checked here, before a search or a model sees it
        choices = _choices(name)
        for v in value if isinstance(value, list) else [value]:
            if choices and str(v) not in choices:
                raise SpecError(f"{LAYOUT_OPTIONS[name]} {str(v)[:40]!r} is not one of {', '.join(choices)}"
                                f"{did_you_mean(str(v), choices)}")
    return out


def any_given(fields: dict[str, Any]) -> bool:
    """True when a command was given at least one layout option."""
    return bool(fields)


def resolve_layout(fields: dict[str, Any], cluster: Any, model: Any, *, gpus: int, global_batch: int,
                   precision: str, stack: str, calibration: Any = None, searched: bool = False) -> ParallelismSpec:
    """The layout the options describe on ``gpus`` GPUs, completed as :func:`resolve_parallelism` does for
    the run's software stack; a pipeline layout string is checked against the model before anything is
    expanded (its errors name ``--pipeline-layout``). ``searched``: the caller completes the layout by
    search (:func:`completed_layout` without ``strict``), so the literal defaults are provisional."""
    from clustertwin.train.layout_string import parse_pipeline_layout
    from clustertwin.train.params import resolve_params
    from clustertwin.train.resolve import resolve_parallelism
    from clustertwin.train.stack import resolve_stack

    par = resolve_parallelism({**fields, "global_batch": global_batch, "precision": precision,
                               "software_stack": stack}, gpus, prefix=(),
                              stack=resolve_stack(stack, cluster, resolve_params(None, calibration)), searched=searched)
    if par.pipeline_layout:
        parse_pipeline_layout(par.pipeline_layout, par.pp, par.vpp, model.layers, path=("--pipeline-layout",))
    return par


def completed_layout(par: ParallelismSpec, fields: dict[str, Any], cluster: Any, model: Any, *, gpus: int,
                     strict: bool, **inputs: Any) -> tuple[ParallelismSpec, dict[str, Any]]:
    """(layout, fields chosen by search) of a layout resolved by :func:`resolve_layout` from ``fields``: as
    ``train estimate`` completes it, the fields not given chosen by :func:`clustertwin.train.complete.
    complete_layout` (``inputs``: its calibration, placement and dataset), or as it is with ``strict``
    (``--strict-layout``)."""
    if strict:
        return par, {}
    from clustertwin.train.complete import complete_layout

    _, chosen = complete_layout(model, cluster, par, gpus, set(fields), **inputs)
    return par.model_copy(update=chosen), chosen
