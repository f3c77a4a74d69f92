"""The CLI commands the web API serves, and their parameters read from the commands themselves.

A :class:`Param` is one click option (or argument) of a command: its parameter name (the API's name, the
CLI's ``--global-batch`` is ``global_batch``), long option, type, default, help and whether it repeats. Nothing
is retyped here: :func:`params_of` walks the click command typer builds from the CLI module, so a new option of
``train estimate`` appears in the API, its OpenAPI schema and the Train page's form by itself. What the web does
not take is named per command (:attr:`ApiCommand.exclude`: files such as ``--calibration``, and ``--json``).
:data:`COMMANDS` answer with the ``--json`` value (``train/timeline``: the JSON ``train estimate --timeline``
writes, for ``train estimate``'s options); :data:`DOWNLOADS` with the text the command writes
(``deploy slurm``, ``deploy k8s``, ``report``), made by the command itself into a file the web names.
"""

from __future__ import annotations

import enum
import functools
import importlib
import typing
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from clustertwin.cli.layout_options import LAYOUT_PARAMS

#: options that name a file or only make sense with one (the web takes catalog ids and pasted YAML only)
FILE_OPTIONS: frozenset[str] = frozenset({"calibration", "force", "json_out", "paths", "trace", "fmt",
                                          "save_result", "data"})
#: parameter -> catalog kind of the ids it takes
CATALOG_PARAMS: dict[str, str] = {"cluster": "cluster", "compare": "cluster", "model": "model", "node": "node",
                                  "gpu": "gpu", "fabric": "fabric", "network_fabric": "fabric", "storage": "storage"}


JOB_PROGRESS: ContextVar[Callable[[int, int | None], None] | None] = ContextVar("job_progress", default=None)
"""Where a runner reports its progress, ``(done, total)``, when it runs as a background job (:mod:`.jobs`); a
runner whose command has no progress of its own ignores it."""


@dataclass(frozen=True)
class Param:
    """One option of a CLI command, as the API and the forms take it."""

    name: str
    """Parameter name (the API's field name: the long option with underscores)."""
    option: str
    """The CLI's long option (``--global-batch``; the argument's name for a positional)."""
    kind: str
    """``int``, ``float``, ``bool`` or ``str``."""
    default: Any
    """Default (None: not given)."""
    help: str
    """The CLI's help text."""
    multiple: bool = False
    """Repeatable (a list)."""
    required: bool = False
    """The CLI requires it."""
    catalog: str | None = None
    """Catalog kind whose ids it takes."""
    layout: bool = False
    """One of the layout options (``cli/layout_options.py``)."""
    choices: tuple[str, ...] = ()
    """The values a choice option admits (its Enum, as typer takes choices), () for a free value."""


@dataclass(frozen=True)
class ApiCommand:
    """A CLI command served at ``/api/<path>``: ``run`` maps its full argument dict to its ``--json`` value."""

    path: str
    """URL path under ``/api/`` (the command words joined by ``/``)."""
    words: tuple[str, ...]
    """The CLI command words."""
    module: str
    """Module under ``clustertwin.cli`` that registers it."""
    run: Callable[[dict[str, Any]], Any]
    """Arguments (every parameter of the command but ``json_out``) -> the value ``--json`` prints (a download:
    the text the command writes to ``arguments["output"]``)."""
    exclude: frozenset[str] = field(default_factory=frozenset)
    """Parameters the web does not take besides :data:`FILE_OPTIONS` (they keep the CLI default)."""
    summary: str = ""
    """One line for the OpenAPI listing (the command's help)."""


_KIND = {"integer": "int", "float": "float", "boolean": "bool", int: "int", float: "float", bool: "bool"}


def _kind(p: Any) -> str:
    """``int``, ``float``, ``bool`` or ``str`` of a click parameter (typer's annotation, or click's type)."""
    ann = getattr(getattr(p, "type_descriptor", None), "annotation", None)
    args = typing.get_args(ann)
    base = args[0] if args and typing.get_origin(ann) in (list, tuple) else ann
    if base in _KIND:
        return _KIND[base]
    return _KIND.get(getattr(getattr(p, "type", None), "name", None), "str")


def _choices(p: Any) -> tuple[str, ...]:
    """The values of a choice parameter (typer's Enum annotation, optional or repeated), () for a free value."""
    ann = getattr(getattr(p, "type_descriptor", None), "annotation", None)
    while typing.get_args(ann) and not isinstance(ann, type):
        ann = next((a for a in typing.get_args(ann) if a is not type(None)), None)
    return tuple(str(m.value) for m in ann) if isinstance(ann, type) and issubclass(ann, enum.Enum) else ()


def _click_command(cmd: ApiCommand) -> Any:
    """The click command typer builds for ``cmd`` from its CLI module (as ``clustertwin`` itself loads it)."""
    import typer

    module = importlib.import_module(f"clustertwin.cli.{cmd.module}")
    holder = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    module.register(holder)
    group = typer.main.get_group(holder)
    c = group.get_command(None, cmd.words[0])  # type: ignore[arg-type]
    for word in cmd.words[1:]:
        c = c.get_command(None, word)
    return c


def command_of(path: str) -> ApiCommand:
    """The command served at ``/api/<path>``: one of :data:`COMMANDS` or :data:`DOWNLOADS`."""
    return COMMANDS[path] if path in COMMANDS else DOWNLOADS[path]


def repeats(p: Any) -> bool:
    """Whether click parameter ``p`` takes a list (a repeatable option, or an argument of any count)."""
    return bool(p.multiple) or getattr(p, "nargs", 1) == -1


@functools.cache
def click_params(path: str) -> tuple[Any, ...]:
    """Every click parameter of the command at ``path``."""
    return tuple(_click_command(command_of(path)).params)


@functools.cache
def params_of(path: str) -> tuple[Param, ...]:
    """The parameters the web takes for the command at ``path`` (hidden and file options left out)."""
    cmd = command_of(path)
    out = []
    for p in click_params(path):
        if p.name in FILE_OPTIONS or p.name in cmd.exclude or getattr(p, "hidden", False):
            continue
        long = next((o for o in p.opts if o.startswith("--")), p.name)
        kind = _kind(p)
        default = p.default if not callable(p.default) else None
        if repeats(p):
            default = list(default or [])
        out.append(Param(p.name, long, kind, default, " ".join((getattr(p, "help", None) or "").split()),
                         multiple=repeats(p), required=bool(p.required), catalog=CATALOG_PARAMS.get(p.name),
                         layout=p.name in LAYOUT_PARAMS,
                         choices=_choices(p)))
    return tuple(out)


def full_arguments(path: str, given: dict[str, Any]) -> dict[str, Any]:
    """Every parameter of the command (``json_out`` aside): the values ``given``, the CLI defaults for the rest."""
    args = {}
    for p in click_params(path):
        if p.name == "json_out":
            continue
        default = None if callable(p.default) else p.default
        if repeats(p):
            default = list(default or [])
        args[p.name] = given.get(p.name, default)
    return args


# ------------------------------------------------------------------------------------------ the runners
def _train_estimate(a: dict[str, Any]) -> Any:
    from clustertwin.cli.train_run import estimate_json, estimate_result

    e, ttt, rel, _, _ = estimate_result(**a)
    return estimate_json(e, ttt, rel)


def _train_timeline(a: dict[str, Any]) -> Any:
    """``train estimate --timeline``'s Chrome-trace JSON (:func:`clustertwin.train.timeline.step_timeline`) of
    the estimate of ``train estimate``'s arguments. The trace does not depend on the failure simulation, so
    ``with_failures`` is dropped when a token budget is given (the Monte Carlo run would be thrown away); without
    one it stays, so the request gets the CLI's error as the estimate does."""
    from clustertwin.cli.train_run import estimate_result
    from clustertwin.train.timeline import step_timeline

    e, _, _, m, _ = estimate_result(**{**a, "with_failures": a["with_failures"] and not a["tokens"]})
    return step_timeline(e, m.layers)


def _train_search(a: dict[str, Any]) -> Any:
    from clustertwin.cli.train_run import search_json, search_result

    return search_json(*search_result(**a))


def _train_scale(a: dict[str, Any]) -> Any:
    from clustertwin.cli.train_run import scale_json, scale_result

    return scale_json(*scale_result(**a), a["tokens"])


def _plan(a: dict[str, Any]) -> Any:
    from clustertwin.cli.plan_cmd import PARTS, plan_json, plans_of

    return plan_json(plans_of(a["cluster"], a["compare"], a["fabric"], {k: a[k] for k in PARTS}))


def _infer_estimate(a: dict[str, Any]) -> Any:
    from clustertwin.cli.infer_cmd import estimate_result

    return estimate_result(**a)


def _infer_size(a: dict[str, Any]) -> Any:
    from clustertwin.cli.infer_cmd import size_inputs, size_result

    m, nodes = size_inputs(a["model"], a["node"], a["percentile"])
    keep = ("request_rate", "input_len", "output_len", "slo_ttft_ms", "slo_tpot_ms", "tp", "precision", "percentile",
            "disaggregated", "usd_per_gpu_hour", "verify", "calibration")
    return size_result(m, nodes, **{k: a[k] for k in keep})


def _explain(a: dict[str, Any]) -> Any:
    from clustertwin.cli.explain_cmd import explain_result

    e, chosen = explain_result(**a)
    return {**e.to_dict(), "searched_fields": chosen}


def _validate(a: dict[str, Any]) -> Any:
    """``validate --json``; as a job, its progress is the cases evaluated of those of the kinds asked for (the
    run's own count, and the cases it reads: unreadable entries count, cases of other kinds do not)."""
    from clustertwin import validate as validation
    from clustertwin.cli.validate_cmd import validate_json

    paths, kinds = list(validation.default_paths()), set(a["kind"]) or None
    report = JOB_PROGRESS.get()
    progress = None
    if report is not None:
        total = sum(1 for _, _, c in validation.iter_cases(paths)
                    if isinstance(c, validation.BadEntry) or not kinds or c.get("kind") in kinds)
        report(0, total)

        def progress(n: int) -> None:
            report(n, total)

    return validate_json(validation.run(paths, kinds, progress=progress))


#: what ``train estimate`` takes only as a file to write (``train/timeline`` answers with the ``--timeline`` file)
_ESTIMATE_FILES = frozenset({"timeline", "trace_out"})
#: what ``infer size`` takes only with a trace file
_TRACE_ONLY = frozenset({"num_requests", "attainment", "router", "batching", "weights_from",
                         "autoscale", "duration_s", "peak_to_mean", "burst_fraction", "burstiness", "period_s",
                         "length_cv", "prefix_groups", "prefix_tokens", "seed", "window_s"})

COMMANDS: dict[str, ApiCommand] = {c.path: c for c in (
    ApiCommand("train/estimate", ("train", "estimate"), "train_cmd", _train_estimate, exclude=_ESTIMATE_FILES,
               summary="Step time, MFU, throughput and memory of one layout (train estimate --json)."),
    ApiCommand("train/timeline", ("train", "estimate"), "train_cmd", _train_timeline, exclude=_ESTIMATE_FILES,
               summary="The predicted step as Chrome-trace JSON on the representative ranks, the options of "
                       "train/estimate (the file train estimate --timeline writes)."),
    ApiCommand("train/search", ("train", "search"), "train_cmd", _train_search,
               summary="Every valid layout ranked; the options given are pinned (train search --json)."),
    ApiCommand("train/scale", ("train", "scale"), "train_cmd", _train_scale,
               summary="Throughput and scaling efficiency from one node to N GPUs (train scale --json)."),
    ApiCommand("plan", ("plan",), "plan_cmd", _plan,
               summary="Bill of materials, power, racks and cost; up to four side by side (plan --json)."),
    ApiCommand("infer/estimate", ("infer", "estimate"), "infer_cmd", _infer_estimate,
               summary="Latency and throughput of one deployment (infer estimate --json)."),
    ApiCommand("infer/size", ("infer", "size"), "infer_cmd", _infer_size, exclude=_TRACE_ONLY,
               summary="The cheapest fleet that serves a request rate within the SLOs (infer size --json)."),
    ApiCommand("explain", ("explain",), "explain_cmd", _explain,
               summary="The whole path of one training job and its bottleneck (explain --json)."),
    ApiCommand("validate", ("validate",), "validate_cmd", _validate, exclude=frozenset({"show_cases"}),
               summary="The model against the shipped measured cases (validate --json)."),
)}


# ------------------------------------------------------------------------------------------ the downloads
def _deploy_slurm(a: dict[str, Any]) -> str:
    from clustertwin.cli.deploy_cmd import slurm_command

    slurm_command(**a, json_out=False)
    return a["output"].read_text(encoding="utf-8")


def _deploy_k8s(a: dict[str, Any]) -> str:
    from clustertwin.cli.deploy_cmd import k8s_command

    k8s_command(**a, json_out=False)
    return a["output"].read_text(encoding="utf-8")


def _report(a: dict[str, Any]) -> str:
    from clustertwin.cli.report_cmd import report_command

    report_command(**a, json_out=False)
    return a["output"].read_text(encoding="utf-8")


#: what ``report`` takes only with a trace file
_REPORT_TRACE_ONLY = frozenset({"output", "trace_format", "policy"})

DOWNLOADS: dict[str, ApiCommand] = {c.path: c for c in (
    ApiCommand("download/sbatch", ("deploy", "slurm"), "deploy_cmd", _deploy_slurm, exclude=frozenset({"output"}),
               summary="The Slurm batch script of a layout, as deploy slurm prints it."),
    ApiCommand("download/k8s", ("deploy", "k8s"), "deploy_cmd", _deploy_k8s, exclude=frozenset({"output"}),
               summary="The Kubernetes manifests of a layout, as deploy k8s prints them."),
    ApiCommand("download/report", ("report",), "report_cmd", _report, exclude=_REPORT_TRACE_ONLY,
               summary="The self-contained HTML report, as report writes it (no trace: no scheduler section)."),
)}
"""Commands whose answer is a file to download: ``run`` gets ``output`` (a private temporary file) set."""
