"""Errors about a command's own options name the option, not the model field behind it.

Commands pass their options into specs and models (``FleetPolicy(max_replicas=...)``,
``DeploySpec(rdma_resource=...)``), whose errors name the field (``max_replicas: must be ...``). Inside
:func:`option_names` such an error is re-raised with the option the user typed (``--max-replicas: ...``),
in the field path and in the message. Errors that came from a file keep the file's field names.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import typer.models

from clustertwin.errors import SpecError

_QUOTED_OR_SNAKE = re.compile(r"'[^']*'|\b([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b")
"""A quoted value (left alone: it is the user's text) or a snake_case field name."""


def command_options(command: Callable[..., Any]) -> dict[str, str]:
    """Parameter name -> long option of a Typer command function (``max_replicas`` -> ``--max-replicas``;
    ``--chunked-prefill/--no-chunked-prefill`` -> ``--chunked-prefill``)."""
    out: dict[str, str] = {}
    try:  # Annotated[..., typer.Option(...)] aliases are strings under postponed evaluation
        signature = inspect.signature(command, eval_str=True)
    except (NameError, TypeError, SyntaxError):
        signature = inspect.signature(command)
    for name, param in signature.parameters.items():
        infos = [param.default, *getattr(param.annotation, "__metadata__", ())]
        info = next((i for i in infos if isinstance(i, typer.models.OptionInfo)), None)
        # in Annotated[..., typer.Option("--name")] the first declaration arrives as the default
        given = [info.default, *(info.param_decls or ())] if info else []
        decls = [d.split("/")[0] for d in given if isinstance(d, str) and d.startswith("--")]
        if decls:
            out[name] = decls[0]
    return out


def option_error(err: SpecError, command: Callable[..., Any], aliases: Mapping[str, str] | None = None) -> SpecError:
    """``err`` with field names written as ``command``'s options. ``aliases`` maps a field to the command
    parameter that sets it where the names differ (``{"rate": "request_rate"}``). Errors from a file, errors
    without a field path and fields that are no option of the command are returned unchanged."""
    if err.file or not err.path:
        return err
    opts = command_options(command)
    alias = dict(aliases or {})

    def option(field: str) -> str | None:
        return opts.get(alias.get(field, field))

    head = option(str(err.path[0]))
    if head is None:
        return err

    def swap(m: re.Match[str]) -> str:
        return (option(m.group(1)) or m.group(0)) if m.group(1) else m.group(0)

    return SpecError(_QUOTED_OR_SNAKE.sub(swap, err.message), path=(head, *err.path[1:]))


@contextmanager
def option_names(command: Callable[..., Any], aliases: Mapping[str, str] | None = None) -> Iterator[None]:
    """Re-raise a SpecError of the block with :func:`option_error`'s option names of ``command``."""
    try:
        yield
    except SpecError as e:
        raise option_error(e, command, aliases) from None
