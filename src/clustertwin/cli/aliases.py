"""Old option spellings, kept for one release as hidden aliases of the names that replaced them.

One name per idea across the CLI: where two commands spelled one idea two ways, the spelling the majority of
commands (or the field's convention: Megatron's ``--sequence-parallel``, vLLM's ``--request-rate``, pyxis'
``--container-image``) survived, and the other is listed in :data:`ALIASES`. :func:`install` adds each old
spelling to its command as a hidden option that feeds the new one: the value is converted and checked exactly
as the new option's, and a run that succeeds ends with one line on stderr,
``warning: --data is deprecated; use --dataset`` (a run that fails prints its error line alone). Giving both
spellings is a usage error. ``tests/cli/test_cli_contract.py`` holds the contract.
"""

from __future__ import annotations

import copy
from typing import Any

try:  # typer >= 0.2x vendors click as typer._click; older typer uses click itself
    from typer._click.core import ParameterSource
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - depends on the installed typer
    from click.core import ParameterSource
    from click.exceptions import UsageError

#: command path -> old spelling -> the option that replaced it (a flag pair as ``--on/--off``)
ALIASES: dict[str, dict[str, str]] = {
    "train estimate": {"--sp/--no-sp": "--sequence-parallel"},
    "train search": {"--sp/--no-sp": "--sequence-parallel"},
    "explain": {"--sp/--no-sp": "--sequence-parallel", "--data": "--dataset"},
    "deploy slurm": {"--sp/--no-sp": "--sequence-parallel", "-n": "-g"},
    "deploy k8s": {"--sp/--no-sp": "--sequence-parallel", "-n": "-g", "--image": "--container-image"},
    "comm": {"-g": "--gpus-per-process"},
    "report": {"--out": "--output", "--trace-format": "--format", "--qps": "--request-rate"},
    "sweep": {"--out": "--output"},
    "infer estimate": {"--num-prompts": "--num-requests"},
    "infer simulate": {"--num-prompts": "--num-requests"},
    "infer size": {"--num-prompts": "--num-requests", "--qps": "--request-rate"},
}
POSITIONAL: dict[str, str] = {"plan CLUSTER": "plan --cluster CLUSTER"}
"""Old positional arguments (the command reads them itself and calls :func:`deprecated`)."""

_META = "clustertwin.aliases"
_PENDING: list[str] = []


def deprecated(old: str, new: str) -> None:
    """Note that ``old`` was used: :func:`flush` prints ``warning: OLD is deprecated; use NEW`` once."""
    line = f"warning: {old} is deprecated; use {new}"
    if line not in _PENDING:
        _PENDING.append(line)


def pending() -> list[str]:
    """The deprecation lines noted since the last :func:`flush` (or :func:`reset`)."""
    return list(_PENDING)


def reset() -> None:
    """Forget the noted lines (the start of a run)."""
    _PENDING.clear()


def flush() -> list[str]:
    """The noted lines, forgotten (the end of a successful run prints them)."""
    out = pending()
    reset()
    return out


def _target(command: Any, decl: str) -> Any:
    return next((p for p in command.params if decl in (*p.opts, *getattr(p, "secondary_opts", ()))), None)


def _alias_option(target: Any, old: str, new: str) -> Any:
    """A hidden copy of ``target`` under the spelling ``old`` that hands its value to ``target``."""
    alias = copy.copy(target)
    on, _, off = old.partition("/")
    alias.opts, alias.secondary_opts = [on], [off] if off else []
    alias.name = f"{target.name}__{on.lstrip('-').replace('-', '_')}"
    alias.hidden, alias.expose_value, alias.required = True, False, False
    alias.default = () if target.multiple else None

    def record(ctx: Any, param: Any, value: Any) -> Any:
        if ctx.get_parameter_source(param.name) is not ParameterSource.COMMANDLINE:
            return value
        if ctx.get_parameter_source(target.name) is ParameterSource.COMMANDLINE:
            raise UsageError(f"give {new} once ({old} is its old spelling)", ctx=ctx)
        ctx.meta.setdefault(_META, {})[target.name] = (value, old, new)
        flag_off = bool(off) and value is False
        deprecated(off if flag_off else on, f"--no-{new.lstrip('-')}" if flag_off else new)
        return value

    alias.callback = record
    return alias


def _feed(target: Any) -> None:
    """``target`` takes an alias's value when it was not given itself."""
    inner = target.callback

    def callback(ctx: Any, param: Any, value: Any) -> Any:
        given = ctx.meta.get(_META, {}).get(param.name)
        if given is None:
            return inner(ctx, param, value) if inner is not None else value
        if ctx.get_parameter_source(param.name) is ParameterSource.COMMANDLINE:
            raise UsageError(f"give {given[2]} once ({given[1]} is its old spelling)", ctx=ctx)
        try:
            return inner(ctx, param, given[0]) if inner is not None else given[0]
        except UsageError as e:  # the check names the new option: say which spelling carried the value
            e.message = f"{e.message} (given as {given[1]})"
            raise

    target.callback = callback


def _leaves(command: Any, path: str) -> list[tuple[str, Any]]:
    subs = getattr(command, "commands", None)
    if not subs:
        return [(path, command)]
    return [leaf for name, sub in subs.items() for leaf in _leaves(sub, f"{path} {name}")]


def install(command: Any, path: str) -> list[str]:
    """Add the old spellings of :data:`ALIASES` to ``command`` (a loaded command or group named ``path``) and
    its subcommands; returns the ``"path OLD"`` entries whose new option is missing (none: the contract)."""
    missing = []
    for leaf_path, leaf in _leaves(command, path):
        for old, new in ALIASES.get(leaf_path, {}).items():
            target = _target(leaf, new)
            if target is None or target.required or _target(leaf, old.partition("/")[0]) is not None:
                missing.append(f"{leaf_path} {old}")
                continue
            _feed(target)
            leaf.params.append(_alias_option(target, old, new))
    return missing
