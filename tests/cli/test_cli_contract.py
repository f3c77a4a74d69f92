"""The CLI contract, read from the loaded click commands: every command that models a training step declares
each layout option (``LAYOUT_OPTIONS``) and the run options around it (``--global-batch``, ``--seq-len``,
``--precision``, ``--stack``) once, with the name, type and default of ``cli/layout_options.py``;
``train search`` takes what ``train estimate`` takes; the old spellings of ``cli/aliases.py`` are hidden and
say they are deprecated when used."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from tests.cli import test_layout_options as layout_contract
from tests.conftest import run_cli

from clustertwin.cli import layout_options
from clustertwin.cli.aliases import ALIASES
from clustertwin.cli.layout_options import LAYOUT_OPTIONS
from clustertwin.cli.main import command

RUN_OPTIONS = ("--global-batch", "--seq-len", "--precision", "--stack")
CHECKED = (*LAYOUT_OPTIONS.values(), *RUN_OPTIONS)
#: the commands that take one training layout (tests/cli/test_layout_options.py lists them, with the reasons
#: for the options one of them does not take)
LAYOUT_COMMANDS = tuple(" ".join(path) for path in layout_contract.LAYOUT_COMMANDS)
#: command -> checked options it does not declare, and why
EXCEPTIONS: dict[str, tuple[tuple[str, ...], str]] = {}
for (_path, _option), _why in layout_contract.EXEMPT.items():
    if _option in CHECKED:
        _cmd = " ".join(_path)
        EXCEPTIONS[_cmd] = ((*EXCEPTIONS.get(_cmd, ((), ""))[0], _option), _why)
#: commands outside LAYOUT_COMMANDS that declare some checked options (same definition), and why no layout
PARTIAL: dict[str, str] = {
    "diagnose": "reads a failed job's logs; --global-batch and --seq-len only size its OOM advice",
    "calibrate": "--profile fits the twin to a traced run: the traced job's group sizes and batch only",
}
#: PARTIAL commands that declare layout options too (not only the run options around a layout)
PARTIAL_LAYOUT: dict[str, tuple[str, ...]] = {
    "calibrate": ("--tp", "--pp", "--dp", "--cp", "--ep", "--micro-batch"),
}
#: command -> checked options it declares on purpose without the shared default/required, and why
OPTIONAL: dict[str, tuple[str, ...]] = {"diagnose": ("--global-batch",),  # advice only: not required
                                        "profile": ("--global-batch",),  # only --compare against the twin
                                        "calibrate": ("--global-batch",)}  # only --profile
_FAILURES = "failures, checkpoints and restarts of one layout's time-to-train (a Monte Carlo per layout)"
#: options of train estimate that train search does not take, and why
ESTIMATE_ONLY: dict[str, str] = {
    "--with-failures": _FAILURES, "--async-checkpoint": _FAILURES, "--hot-spares": _FAILURES,
    "--trials": _FAILURES, "--seed": _FAILURES,
    "--timeline": "the per-rank timeline of one estimated step (search ranks many layouts)",
    "--trace-out": "profiler traces of one estimated step (search ranks many layouts)",
    "--strict-layout": "keeps the literal defaults of fields not given; search chooses every such field",
    "--batch-ramp": "a run's time to train with its batch-size ramp (search ranks layouts by their steady steps)",
}


def _leaves(cmd: Any, path: str = "") -> dict[str, Any]:
    if not hasattr(cmd, "list_commands"):
        return {path: cmd}
    out: dict[str, Any] = {}
    for name in cmd.list_commands(None):
        out.update(_leaves(cmd.get_command(None, name), f"{path} {name}".strip()))
    return out


COMMANDS = _leaves(command())


def _options(path: str) -> dict[str, Any]:
    """Long option -> its (visible) parameter; the old spellings of aliases.py are hidden and left out."""
    return {o: p for p in COMMANDS[path].params if not p.hidden
            for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}


def _signature(p: Any) -> tuple[Any, ...]:
    """What must agree between two declarations of one option: names, type, default, required, flag."""
    return (tuple(p.opts), tuple(p.secondary_opts), str(p.type_descriptor.annotation), p.default,
            bool(p.required), bool(p.is_flag), bool(p.multiple))


def _canonical() -> dict[str, typer.models.OptionInfo]:
    """Long option -> its one definition in cli/layout_options.py."""
    out = {}
    for value in vars(layout_options).values():
        if isinstance(value, typer.models.OptionInfo):
            out[value.param_decls[0].split("/")[0]] = value
    for field, option in layout_options.LAYOUT_OPTIONS.items():  # declared by the layout_options decorator
        out[option] = layout_options.layout_option(field)
    return out


def test_the_layout_commands_exist_and_nothing_else_takes_a_layout() -> None:
    assert set(LAYOUT_COMMANDS) <= set(COMMANDS)
    run_only = {"--global-batch", "--seq-len", "--precision"}
    for path in COMMANDS:
        given = set(_options(path)) & set(CHECKED)
        if path in LAYOUT_COMMANDS or not given or path.startswith(("infer ", "node ")):
            continue  # inference and node benchmarks: --tp/--precision of serving and GEMMs, another idea
        assert path in PARTIAL and given <= run_only | set(PARTIAL_LAYOUT.get(path, ())), (path, sorted(given))


def test_each_layout_command_declares_every_layout_option() -> None:
    for path in LAYOUT_COMMANDS:
        missing = {o for o in CHECKED if o not in _options(path)}
        assert missing == set(EXCEPTIONS.get(path, ((), ""))[0]), (path, sorted(missing))


@pytest.mark.parametrize("option", CHECKED)
def test_an_option_has_one_definition(option: str) -> None:
    declared = {path: _options(path)[option] for path in (*LAYOUT_COMMANDS, *PARTIAL) if option in _options(path)}
    assert declared, option
    signatures = {path: _signature(p)[:3] if option in OPTIONAL.get(path, ()) else _signature(p)
                  for path, p in declared.items()}
    first = signatures[next(path for path in signatures if option not in OPTIONAL.get(path, ()))]
    assert all(s == first[:len(s)] for s in signatures.values()), signatures
    canonical = _canonical()[option]
    decls = tuple(d for decl in canonical.param_decls for d in decl.split("/"))
    want = None if canonical.default is ... else canonical.default
    for path, p in declared.items():
        assert (*p.opts, *p.secondary_opts) == decls, (path, option)
        if option not in OPTIONAL.get(path, ()):
            assert p.default == want and bool(p.required) == (canonical.default is ...), (path, option, p.default)


def test_global_batch_is_required_wherever_a_step_is_modelled() -> None:
    for path in LAYOUT_COMMANDS:
        if "--global-batch" in OPTIONAL.get(path, ()):
            continue
        assert _options(path)["--global-batch"].required, path
    r = run_cli("explain", "--gpus", "8")
    assert r.code == 2 and "--global-batch" in r.stderr, r.stderr


def test_train_search_takes_every_option_of_train_estimate() -> None:
    estimate, search = set(_options("train estimate")), set(_options("train search"))
    assert estimate - search == set(ESTIMATE_ONLY), sorted(estimate - search)
    for option in estimate & search & set(CHECKED):
        assert _signature(_options("train estimate")[option]) == _signature(_options("train search")[option])


def test_old_spellings_are_hidden_aliases(monkeypatch: pytest.MonkeyPatch) -> None:
    for path, olds in ALIASES.items():
        params = COMMANDS[path].params
        for old in olds:
            alias = [p for p in params if old.partition("/")[0] in p.opts]
            assert len(alias) == 1 and alias[0].hidden, (path, old)
    monkeypatch.setenv("COLUMNS", "250")  # option names untruncated in the help table
    help_text = run_cli("train", "estimate", "--help").stdout
    assert "--sequence-parallel" in help_text and "--sp " not in help_text and "--no-sp " not in help_text


def test_an_old_spelling_works_and_says_it_is_deprecated() -> None:
    args = ("train", "estimate", "--gpus", "8", "-b", "64", "--tp", "8", "--json")
    new, old = run_cli(*args, "--sequence-parallel"), run_cli(*args, "--sp")
    assert new.code == 0 and old.code == 0, old.stderr
    assert old.stdout == new.stdout
    assert "warning: --sp is deprecated; use --sequence-parallel" in old.stderr
    assert "deprecated" not in new.stderr
