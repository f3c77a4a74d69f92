"""Request models of the API, built from the commands' parameters (:mod:`clustertwin.web.commands`).

Every field checks its value as the CLI does, with the CLI's one-line message: numbers pass the shared guard
(:func:`clustertwin.cli.common.check_number_option`: finite, >= 0, <= 2^53, > 0 for counts, the physical upper
bounds) plus the web's work caps (:data:`WORK_CAPS`); ids must be catalog ids of their kind (a path such as
``../../etc/passwd`` is refused naming the field, before anything is opened); strings are bounded and hold no
control characters; a pasted model (``model_yaml``) is at most :data:`MAX_YAML_BYTES`.
"""

from __future__ import annotations

import functools
import re
import typing
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model, model_validator

from clustertwin.catalog import ids
from clustertwin.cli.common import MAX_OPTION_INT, OPTION_MAX, POSITIVE_OPTIONS, check_number_option
from clustertwin.cli.layout_options import LAYOUT_OPTIONS
from clustertwin.errors import did_you_mean
from clustertwin.specs import ParallelismSpec
from clustertwin.web.commands import Param, command_of, params_of

MAX_YAML_BYTES = 1 << 20
"""Largest pasted YAML document (1 MiB)."""
MAX_STRING = 1000
"""Longest string option (a pipeline layout or a node list of a large job)."""
WORK_CAPS: dict[str, float] = {"trials": 10_000, "num_requests": 100_000, "top": 100}
"""Options the web bounds below the CLI's limits: work one request may ask for (Monte Carlo trials, simulated
requests, layouts listed), so no request holds the server for minutes."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def choices(p: Param) -> tuple[str, ...]:
    """The values an option admits (a choice option's, or a layout option's ParallelismSpec field's Literal), ()
    for a free value."""
    if p.choices:
        return p.choices
    name = "sequence_parallel" if p.name == "sp" else p.name
    if not p.layout or name not in LAYOUT_OPTIONS:
        return ()
    ann = ParallelismSpec.model_fields[name].annotation
    while typing.get_origin(ann) is not typing.Literal and typing.get_args(ann):
        ann = typing.get_args(ann)[0]
    return tuple(str(a) for a in typing.get_args(ann)) if typing.get_origin(ann) is typing.Literal else ()


def catalog_ids(kind: str) -> list[str]:
    """Catalog ids of ``kind``, in catalog order."""
    return list(ids(kind))


def _check(p: Param) -> Any:
    """The validator of parameter ``p``: the CLI's checks, its messages."""
    known = frozenset(catalog_ids(p.catalog)) if p.catalog else frozenset()

    def one(v: Any) -> Any:
        if v is None or isinstance(v, bool):
            return v
        if isinstance(v, int | float):
            problem = check_number_option(p.option, v)
            if problem:
                raise ValueError(problem)
            cap = WORK_CAPS.get(p.name)
            if cap is not None and v > cap:
                raise ValueError(f"{p.option} must be at most {cap:,.0f} in the web app (got {v:g})")
            return v
        text = str(v)
        if _CONTROL.search(text):
            raise ValueError(f"{p.option}: control characters are not allowed")
        if p.catalog and text not in known:
            raise ValueError(f"{p.option} {text[:40]!r} is not a {p.catalog} catalog id (the web app takes "
                             f"catalog ids, not files){did_you_mean(text, known)}")
        allowed = choices(p)
        if allowed and p.name != "recompute_modules" and text not in allowed:
            raise ValueError(f"{p.option} {text[:40]!r} is not one of {', '.join(allowed)}"
                             f"{did_you_mean(text, allowed)}")
        return v

    def check(value: Any) -> Any:
        for v in value if isinstance(value, list) else [value]:
            one(v)
        return value

    return AfterValidator(check)


def _schema(p: Param) -> dict[str, Any]:
    """OpenAPI hints: the bounds the checks enforce, the catalog ids or choices."""
    extra: dict[str, Any] = {}
    if p.kind in ("int", "float"):
        extra["minimum"] = 1 if p.option in POSITIVE_OPTIONS and p.kind == "int" else 0
        if p.option in POSITIVE_OPTIONS and p.kind == "float":
            extra["exclusiveMinimum"] = 0
            del extra["minimum"]
        top = min(OPTION_MAX.get(p.option, MAX_OPTION_INT), WORK_CAPS.get(p.name, MAX_OPTION_INT))
        extra["maximum"] = int(top) if p.kind == "int" else float(top)
    enum = catalog_ids(p.catalog) if p.catalog else list(choices(p))
    if enum and p.name != "recompute_modules":
        extra["enum"] = enum
    return extra


_TYPES = {"int": int, "float": float, "bool": bool, "str": str}


def _field(p: Param) -> tuple[Any, Any]:
    """The annotation and Field of parameter ``p``: the checks on the value, the schema hints on its type."""
    base: Any = _TYPES[p.kind]
    if p.kind == "str":
        base = Annotated[str, Field(max_length=MAX_STRING, json_schema_extra=_schema(p))]
    elif p.kind == "float":
        base = Annotated[float, Field(allow_inf_nan=False, json_schema_extra=_schema(p))]
    elif p.kind == "int":
        base = Annotated[int, Field(json_schema_extra=_schema(p))]
    text = f"{p.help} (web: catalog ids only)" if p.catalog else p.help
    extra = {"x-cli-option": p.option}
    if p.multiple:
        ann: Any = Annotated[list[base], Field(max_length=16), _check(p)]  # type: ignore[valid-type]
        return ann, Field(default_factory=lambda d=list(p.default): list(d), description=text,
                          json_schema_extra=extra)
    ann = Annotated[base | None, _check(p)]
    if p.required:
        return ann, Field(..., description=text, json_schema_extra=extra)
    return ann, Field(p.default, description=text, json_schema_extra=extra)


class ModelOrYaml(BaseModel):
    """Options of a command whose ``--model`` is required: a catalog id or a pasted ``model_yaml``, one of them."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="after")
    def _one_model(self) -> ModelOrYaml:
        if getattr(self, "model", None) is None and getattr(self, "model_yaml", None) is None:
            raise ValueError("--model: missing option (a catalog id, or a model pasted as model_yaml)")
        return self


@functools.cache
def request_model(path: str) -> type[BaseModel]:
    """The pydantic model of ``/api/<path>``'s options (unknown options refused, as the CLI refuses them)."""
    params = params_of(path)
    fields: dict[str, Any] = {p.name: _field(p) for p in params}
    required_model = any(p.name == "model" and p.required for p in params)
    if "model" in fields:
        fields["model_yaml"] = (Annotated[str | None, Field(max_length=MAX_YAML_BYTES)],
                                Field(None, description="A model spec pasted as YAML (at most 1 MiB; read with "
                                                        "the safe loader); replaces --model."))
    if required_model:  # the CLI requires --model; here a pasted model_yaml stands in for it
        model = next(p for p in params if p.name == "model")
        fields["model"] = (fields["model"][0], Field(None, description=f"{model.help} (web: catalog ids only; "
                                                     "required unless model_yaml is given)",
                                                     json_schema_extra={"x-cli-option": model.option}))
    name = "".join(w.capitalize() for w in re.split(r"[/_]", path)) + "Options"
    doc = command_of(path).summary
    if required_model:
        return create_model(name, __base__=ModelOrYaml, __doc__=doc, **fields)
    return create_model(name, __config__=ConfigDict(extra="forbid"), __doc__=doc, **fields)
