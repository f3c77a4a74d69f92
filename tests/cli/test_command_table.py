"""The lazy command table (cli/main.py COMMANDS) names every command that a command module registers, so a
new module cannot be forgotten by ``clustertwin --help`` or be unreachable."""

from __future__ import annotations

import importlib
from pathlib import Path

import typer

from clustertwin.cli.main import COMMAND_MODULES, COMMANDS

CLI = Path(__file__).resolve().parents[2] / "src" / "clustertwin" / "cli"


def test_every_registered_command_is_in_the_table() -> None:
    top = set(COMMAND_MODULES)
    for path in sorted(CLI.glob("*_cmd.py")):
        if path.stem not in top:  # a sub-command module must be wired in by a top-level one
            assert any(f"{path.stem}" in (CLI / f"{m}.py").read_text(encoding="utf-8") for m in top), \
                f"{path.name} is neither in COMMANDS nor imported by a command module"
            continue
        module = importlib.import_module(f"clustertwin.cli.{path.stem}")
        holder = typer.Typer()
        module.register(holder)
        names = [c.name for c in holder.registered_commands] + [g.name for g in holder.registered_groups]
        for name in names:
            assert name in COMMANDS, f"{path.name} registers '{name}', missing from COMMANDS in cli/main.py"
            assert COMMANDS[name][0] == path.stem, (name, COMMANDS[name][0], path.stem)
