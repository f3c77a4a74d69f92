"""The layout options, defined once: every command that takes one training layout (``train estimate``,
``explain``, ``deploy slurm|k8s``, ``report``, ``profile``, ``export chakra``; ``train search`` and ``train
scale`` pin the ones given and search the rest, ``calibrate --profile``) takes these same options through
the :func:`layout_options` decorator (one ``layout`` parameter in its signature), with the name, type,
default (None: not given) and help text taken from :class:`~clustertwin.specs.ParallelismSpec` (its field
types, docstrings and choices), and turns them into a layout with :func:`layout_fields` and
:func:`clustertwin.train.resolve.resolve_parallelism`, which fills what is not given with the spec's defaults
(tp, pp, cp, ep, vpp, micro-batch 1; dp = GPUs / (tp pp cp); ZeRO and sequence parallelism from the software
stack). ``tests/cli/test_layout_options.py`` holds the contract.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

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


def layout_option(name: str, *, searched: bool = False) -> Any:
    """The option of field ``name`` (:func:`layout_options` declares it on each layout command);
    ``searched``: the variant of ``train search``/``scale``, where a value not given is searched over (same
    name, type and default; the help says so)."""
    decl = LAYOUT_OPTIONS[name]
    decls = (f"{decl}/--no-{decl[2:]}",) if name == "sequence_parallel" else (decl,)
    text = field_help(name)
    if searched:
        text = text.rsplit(" (default", 1)[0] + " (pinned when given, else searched)"
    return typer.Option(None, *decls, help=text)


LAYOUT_PARAMS: tuple[str, ...] = tuple("sp" if f == "sequence_parallel" else f for f in LAYOUT_OPTIONS)
"""The command parameters of the layout options (each command's signature names these)."""


_F = TypeVar("_F", bound=Callable[..., Any])
LayoutOpts: Any = None
"""The default of a command's ``layout`` parameter, where :func:`layout_options` puts the layout options."""


def _leaf_types(ann: Any) -> set[type]:
    """The value types an annotation admits (Optional, Annotated and Literal unwrapped; a tuple: ``str``,
    as the option takes it comma-separated)."""
    origin = get_origin(ann)
    if origin is Annotated:
        return _leaf_types(get_args(ann)[0])
    if origin is Literal:
        return {type(v) for v in get_args(ann)}
    if origin in (Union, types.UnionType):
        return set().union(*(_leaf_types(a) for a in get_args(ann) if a is not type(None)))
    return {ann} if isinstance(ann, type) and origin is None else {str}


def _param_type(name: str) -> type:
    """The option's Python type, from the ParallelismSpec field's (``sp``: ``sequence_parallel``)."""
    kinds = _leaf_types(ParallelismSpec.model_fields["sequence_parallel" if name == "sp" else name].annotation)
    return next((kind for kind in (bool, int) if kind in kinds), str)


def layout_options(*, searched: bool = False) -> Callable[[_F], _F]:
    """Decorator of a command taking one training layout: the command declares one parameter ``layout``
    where the layout options go; the command line shows every option of :data:`LAYOUT_OPTIONS` there (as
    :func:`layout_option` makes it, ``searched`` for ``train search``/``scale``), and the command receives them as one
    dict ``layout`` keyed by :data:`LAYOUT_PARAMS` (None: not given), which :func:`layout_fields` turns into
    spec fields. The options are thus declared once, not copied into each command's signature."""

    def decorate(fn: _F) -> _F:
        sig = inspect.signature(fn, eval_str=True)
        if "layout" not in sig.parameters:
            raise TypeError(f"{fn.__name__} has no 'layout' parameter for the layout options")
        params: list[inspect.Parameter] = []
        for p in sig.parameters.values():
            if p.name != "layout":
                params.append(p)
                continue
            params += [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                         default=layout_option("sequence_parallel" if name == "sp" else name,
                                                      searched=searched),
                                         annotation=_param_type(name)) for name in LAYOUT_PARAMS]

        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            layout = {name: kwargs.pop(name, None) for name in LAYOUT_PARAMS}
            return fn(*args, layout=layout, **kwargs)

        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params} | {"return": sig.return_annotation}
        del command.__wrapped__  # type: ignore[attr-defined]  # typer reads the signature above, not fn's
        return command  # type: ignore[return-value]

    return decorate


def command_args(params: dict[str, Any], *drop: str) -> dict[str, Any]:
    """A command's arguments (``locals()`` at its top) as the shared ``*_result`` functions take them: the
    ``layout`` dict of :func:`layout_options` spread back into its parameters, ``drop`` left out."""
    out = {k: v for k, v in params.items() if k not in drop and k != "layout"}
    return out | dict(params.get("layout") or {})


def layout_from_params(params: dict[str, Any]) -> dict[str, Any]:
    """:func:`layout_fields` of the layout parameters among a command's arguments (``locals()`` at its top,
    or the ``layout`` dict of :func:`layout_options`)."""
    params = command_args(params)
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
