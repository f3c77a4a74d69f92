"""The ``clustertwin`` entry point: registers one typer app per command group and turns errors
into one-line messages (exit 2 for bad input, 1 for internal failures), never a traceback."""

from __future__ import annotations

import importlib
import os
import sys
import typing
import warnings
from typing import Any

import typer

try:  # typer >= 0.2x vendors click as typer._click; older typer uses click itself
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - depends on the installed typer
    from click.exceptions import UsageError

from clustertwin import __version__
from clustertwin.cli.common import check_number_option
from clustertwin.errors import ClusterTwinError
from clustertwin.safety import one_line

app = typer.Typer(
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


#: command groups, one module each under clustertwin.cli, each exposing ``register(app)``
COMMAND_MODULES: tuple[str, ...] = (
    "catalog_cmd", "comm_cmd", "deploy_cmd", "diagnose_cmd", "exporter_cmd", "infer_cmd", "node_cmd",
    "plan_cmd", "reliability_cmd", "report_cmd", "sched_cmd", "sweep_cmd", "train_cmd", "validate_cmd",
)


def _register() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"clustertwin.cli.{name}").register(app)


_register()


_COMMAND: Any = None


def _numeric_guard(callback: Any, name: str) -> Any:
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
    """The click command tree, built once per process (with the numeric guards installed)."""
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
    msg = " ".join(str(e.format_message()).split())
    return f"error: {where}: {msg} (see {where} --help)"


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
    try:
        command().main(args=argv, prog_name="clustertwin", standalone_mode=False)
    except ClusterTwinError as e:
        typer.echo(f"error: {one_line(e)}", err=True)
        return e.exit_code
    except typer.Exit as e:
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
