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
from typing import Any

import typer
from typer.core import TyperGroup, TyperOption

from clustertwin import __version__
from clustertwin.errors import ClusterTwinError

#: command -> (module under clustertwin.cli exposing ``register(app)``, one-line help for ``clustertwin --help``)
COMMANDS: dict[str, tuple[str, str]] = {
    "catalog": ("catalog_cmd", "List catalog entries, or show one entry with its source."),
    "comm": ("comm_cmd", "Predict a collective's time, algbw and busbw over message sizes (nccl-tests columns)."),
    "deploy": ("deploy_cmd", "Generate a Slurm script or Kubernetes manifests for a training job."),
    "diagnose": ("diagnose_cmd", "Find the cause of a failed job in its logs (NCCL, OOM, Xid, IB, driver)."),
    "exporter": ("exporter_cmd", "Serve GPU metrics for Prometheus, or write alert rules."),
    "hpc": ("hpc_cmd", "Science workloads (HPL, HPCG, stencil): estimate one, or compare GPUs on a budget."),
    "infer": ("infer_cmd", "Inference: latency and throughput of a deployment, or the GPUs an SLO needs."),
    "node": ("node_cmd", "Check, benchmark and validate a real node."),
    "plan": ("plan_cmd", "Bill of materials, peak compute, memory, network, storage, power, cooling and cost."),
    "reliability": ("reliability_cmd", "Failure rates, checkpoint interval, wall time and ETTR of a run."),
    "report": ("report_cmd", "Write a self-contained HTML report of a cluster and a model."),
    "sched": ("sched_cmd", "Replay job traces under scheduler policies, or fill the cluster."),
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
    return typer.main.get_group(holder).get_command(None, name)  # type: ignore[arg-type]


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


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; bad input -> exit 2 with one line on stderr; internal errors -> exit 1."""
    try:
        app(args=argv, standalone_mode=False)
    except ClusterTwinError as e:
        typer.echo(f"error: {e}", err=True)
        return e.exit_code
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 1
    except SystemExit as e:  # click usage errors already printed
        return int(e.code or 0)
    except Exception as e:  # click.UsageError and friends
        # typer >= 0.2x vendors click (typer._click): match click exceptions by interface (UsageError: exit 2)
        if callable(getattr(e, "show", None)) and isinstance(getattr(e, "exit_code", None), int):
            e.show()  # type: ignore[attr-defined]
            return e.exit_code  # type: ignore[attr-defined]
        if os.environ.get("CLUSTERTWIN_DEBUG"):
            raise
        typer.echo(f"internal error: {type(e).__name__}: {e} (set CLUSTERTWIN_DEBUG=1 for a traceback)", err=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
