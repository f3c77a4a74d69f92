"""The ``clustertwin`` entry point: one lazily imported module per command group, and errors turned
into one-line messages (exit 2 for bad input, 1 for internal failures), never a traceback.

Start-up: ``clustertwin --help`` imports typer and nothing else of clustertwin (the command list and its one-line
help come from :data:`COMMANDS`); ``clustertwin train ...`` imports only ``cli/train_cmd.py`` and what it needs.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
import typing
import warnings
from typing import Any

import typer
from typer.core import TyperGroup, TyperOption

try:  # typer >= 0.2x vendors click as typer._click; older typer uses click itself
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - depends on the installed typer
    from click.exceptions import UsageError

from clustertwin import __version__
from clustertwin.errors import ClusterTwinError
from clustertwin.safety import one_line

#: command -> (module under clustertwin.cli exposing ``register(app)``, one-line help for ``clustertwin --help``)
COMMANDS: dict[str, tuple[str, str]] = {
    "calibrate": ("comm_cmd", "Fit a cluster's comm parameters to nccl-tests logs; write a calibration file."),
    "catalog": ("catalog_cmd", "List catalog entries, or show one entry with its source."),
    "comm": ("comm_cmd", "Predict a collective's time, algbw and busbw over message sizes (nccl-tests columns)."),
    "deploy": ("deploy_cmd", "Generate a Slurm script or Kubernetes manifests for a training job."),
    "diagnose": ("diagnose_cmd", "Find the cause of a failed job in its logs (NCCL, OOM, Xid, IB, driver)."),
    "explain": ("explain_cmd", "Walk storage -> network -> GPUs -> collectives -> scheduler; name the bottleneck."),
    "export": ("export_cmd", "Export a predicted training step: Chakra execution traces for ASTRA-sim."),
    "exporter": ("exporter_cmd", "Serve GPU metrics for Prometheus, or write alert rules."),
    "hpc": ("hpc_cmd", "Science workloads (HPL, HPCG, stencil): estimate one, or compare GPUs on a budget."),
    "infer": ("infer_cmd", "Inference: latency and throughput of a deployment, or the GPUs an SLO needs."),
    "node": ("node_cmd", "Check, benchmark and validate a real node."),
    "plan": ("plan_cmd", "Bill of materials, peak compute, memory, network, storage, power, cooling and cost."),
    "profile": ("profile_cmd", "Measured steps from profiler traces: compute, comm, idle per rank and step."),
    "reliability": ("reliability_cmd", "Failure rates, checkpoint interval, wall time and ETTR of a run."),
    "report": ("report_cmd", "Write a self-contained HTML report of a cluster and a model."),
    "sched": ("sched_cmd", "Replay job traces under scheduler policies, or fill the cluster."),
    "serve": ("serve_cmd", "Serve the planning web app and its JSON API on a local port."),
    "sweep": ("sweep_cmd", "Evaluate a design space and print its Pareto front."),
    "train": ("train_cmd", "Training: estimate a layout, search layouts, or scale to N GPUs."),
    "validate": ("validate_cmd", "Score the model against measured cases (default: the shipped validation/)."),
}
COMMAND_MODULES: tuple[str, ...] = tuple(dict.fromkeys(m for m, _ in COMMANDS.values()))
"""Every command module, once."""


def _load(name: str) -> Any:
    """The click command of ``name``, importing its module now (and only it)."""
    module = importlib.import_module(f"clustertwin.cli.{COMMANDS[name][0]}")
    holder = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    module.register(holder)
    cmd = typer.main.get_group(holder).get_command(None, name)  # type: ignore[arg-type]
    if cmd is not None:
        from clustertwin.cli.aliases import install

        _guard_numbers(cmd)
        install(cmd, name)  # old spellings of renamed options (cli/aliases.py)
    return cmd


_display_type_rich = TyperOption.display_type_rich


def _flag_type(self: TyperOption, ctx: Any) -> str | None:
    """No ``<bool>`` type column for on/off flags (typer 0.2x prints one for every flag, ``--help`` included)."""
    return None if self.is_flag else _display_type_rich(self, ctx)


TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]


class LazyGroup(TyperGroup):
    """The root group: commands are imported when invoked; ``--help`` lists them from :data:`COMMANDS`."""

    def list_commands(self, ctx: Any) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is None and cmd_name in COMMANDS:
            cmd = _load(cmd_name)
            self.add_command(cmd, cmd_name)
        return cmd

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except Exception as e:  # click.UsageError: add the nearest command name
            close = difflib.get_close_matches(args[0], self.list_commands(ctx), n=1) if args else []
            if close and hasattr(e, "message") and "did you mean" not in e.message.lower():
                e.message = f"{e.message.rstrip('.')}; did you mean '{close[0]}'?"
            raise

    def format_help(self, ctx: Any, formatter: Any) -> None:
        # click's plain formatter: typer's rich formatter would import every command for its short help
        self.format_usage(ctx, formatter)
        self.format_help_text(ctx, formatter)
        self.format_options(ctx, formatter)
        self.format_epilog(ctx, formatter)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(n, COMMANDS[n][1]) for n in sorted(COMMANDS)])


app = typer.Typer(
    cls=LazyGroup,
    name="clustertwin",
    help="A calibrated digital twin of AI compute clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"clustertwin {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show version."),
) -> None:
    """clustertwin: plan, simulate, check and operate AI compute clusters."""


_COMMAND: Any = None


def _numeric_guard(callback: Any, name: str) -> Any:
    from clustertwin.cli.common import check_number_option

    def check(ctx: Any, param: Any, value: Any) -> Any:
        problem = check_number_option(name, value)
        if problem:
            raise UsageError(problem, ctx=ctx)
        return callback(ctx, param, value) if callback is not None else value

    return check


def _guard_numbers(command: Any) -> None:
    """Every int/float option of every command gets the shared range check (finite, >= 0, int64; > 0 for
    counts and degrees), so no NaN, infinity or overflow reaches a model (:func:`check_number_option`)."""
    for sub in getattr(command, "commands", {}).values():
        _guard_numbers(sub)
    for param in getattr(command, "params", []):
        desc = getattr(param, "type_descriptor", None)
        annotation = getattr(desc, "annotation", None)
        click_type = getattr(getattr(param, "type", None), "name", None)  # typer on plain click
        if annotation in (int, float) or typing.get_args(annotation) in ((int,), (float,)) or \
                click_type in ("integer", "float"):
            long = next((o for o in param.opts if o.startswith("--")), param.opts[0])
            param.callback = _numeric_guard(param.callback, long)


def command() -> Any:
    """The root click group, built once per process; each command's options get the numeric guards when the
    command is first loaded (:func:`_load`)."""
    global _COMMAND
    if _COMMAND is None:
        cmd = typer.main.get_command(app)
        _guard_numbers(cmd)
        _COMMAND = cmd
    return _COMMAND


def usage_line(e: Any) -> str:
    """A click usage error on one line: ``error: clustertwin train search: No such option: --tpp (Possible
    options: --pp, --tp, --vpp) (see --help)``, instead of click's usage/try/error box."""
    ctx = getattr(e, "ctx", None)
    where = ctx.command_path if ctx is not None else "clustertwin"
    msg = one_line(" ".join(str(e.format_message()).split()))
    return f"error: {one_line(where)}: {msg} (see {one_line(where)} --help)"


def _report_warnings(caught: list[warnings.WarningMessage]) -> None:
    """Warnings (numpy RuntimeWarnings: overflow, division by zero, NaN) as one finding line each, counted,
    without the source paths Python's default format prints."""
    counts: dict[str, int] = {}
    for w in caught:
        kind = "numerical" if issubclass(w.category, RuntimeWarning) else w.category.__name__
        key = f"{kind}: {' '.join(str(w.message).split())}"
        counts[key] = counts.get(key, 0) + 1
    for key, n in counts.items():
        typer.echo(f"warning: {key}" + (f" ({n} times)" if n > 1 else ""), err=True)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; bad input -> exit 2 with one line on stderr; internal errors -> exit 1."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        try:
            return _run(argv)
        finally:
            _report_warnings(caught)


def _run(argv: list[str] | None) -> int:
    from clustertwin.cli import aliases

    aliases.reset()
    try:
        command().main(args=argv, prog_name="clustertwin", standalone_mode=False)
        for line in aliases.flush():  # old spellings: said once the run has succeeded
            typer.echo(line, err=True)
    except ClusterTwinError as e:
        typer.echo(f"error: {one_line(e)}", err=True)
        return e.exit_code
    except typer.Exit as e:
        for line in aliases.flush() if e.exit_code == 0 else ():
            typer.echo(line, err=True)
        return e.exit_code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 1
    except SystemExit as e:  # click usage errors already printed
        return int(e.code or 0)
    except UnicodeDecodeError as e:  # a reader that bypassed clustertwin.inputs: still the user's bytes
        typer.echo(f"error: input is not UTF-8 text: byte at offset {e.start} ({e.reason})", err=True)
        return 2
    except OSError as e:
        if e.filename is None:
            return _internal(e)
        typer.echo(f"error: {e.filename}: {e.strerror or e}", err=True)  # missing directory, permission
        return 2
    except Exception as e:  # click.UsageError and friends
        # typer >= 0.2x vendors click (typer._click): match click exceptions by interface (UsageError: exit 2)
        if callable(getattr(e, "show", None)) and isinstance(getattr(e, "exit_code", None), int):
            if type(e).__name__ == "NoArgsIsHelpError" or not callable(getattr(e, "format_message", None)):
                e.show()  # type: ignore[attr-defined]
            else:
                typer.echo(usage_line(e), err=True)
            return e.exit_code  # type: ignore[attr-defined]
        return _internal(e)
    return 0


def _internal(e: BaseException) -> int:
    if os.environ.get("CLUSTERTWIN_DEBUG"):
        raise e
    typer.echo(f"internal error: {type(e).__name__}: {one_line(e)} (set CLUSTERTWIN_DEBUG=1 for a traceback)",
               err=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
