"""Loading specs from YAML/JSON files, dicts or catalog ids, with one-line errors.

Every failure becomes a :class:`~clustertwin.errors.SpecError` naming the file, the field path and what
was expected, with the nearest valid name for unknown keys and preset ids. YAML is read with
``yaml.safe_load`` only.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from clustertwin import inputs
from clustertwin.catalog import store
from clustertwin.errors import SpecError, UnknownPresetError, did_you_mean
from clustertwin.safety import one_line

M = TypeVar("M", bound=BaseModel)

def read_document(path: str | Path) -> Any:
    """Parse a YAML or JSON file (safe loader) through the input layer: UTF-8 only (errors name the byte
    offset), nesting and integer limits, syntax errors with file and line (:mod:`clustertwin.inputs`)."""
    return inputs.read_document(path)


def _submodel(cls: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The model class that a (possibly nested) location lands in, for key suggestions."""
    current: Any = cls
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(part))
        if field is None:
            return None
        current = _model_in(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _clean_loc(loc: tuple) -> tuple:
    # pydantic adds the validator function name for Annotated/union branches; drop those
    return tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p.startswith("function-"))))


def validation_error_to_spec_error(
    err: ValidationError, cls: type[BaseModel], file: str | None, prefix: tuple = ()
) -> SpecError:
    """First (most relevant) pydantic error as a one-line SpecError."""
    errors = err.errors()
    # most actionable first: unknown keys, then bad values, then missing fields; never union noise
    rank = {"extra_forbidden": 0, "missing": 2, "none_required": 3}
    e = min(errors, key=lambda x: rank.get(x["type"], 1))
    loc = _clean_loc(tuple(e["loc"]))
    etype = e["type"]
    if etype == "extra_forbidden":
        key = e["loc"][-1] if e["loc"] else "?"  # the user's key itself, even if it looks like a validator name
        loc = (*_clean_loc(tuple(e["loc"][:-1])), key)
        parent = _submodel(cls, loc[:-1])
        valid = list(parent.model_fields) if parent else []
        msg = f"unknown key {one_line(repr(key)) if not isinstance(key, str) else repr(key)}"
        msg = f"unknown key '{one_line(key)}'{did_you_mean(str(key), valid)}" if isinstance(key, str) else msg
        if not did_you_mean(str(key), valid) and valid:
            msg += f" (valid keys: {', '.join(valid)})"
    elif etype == "missing":
        msg = "required field missing"
    else:
        msg = str(e["msg"]).removeprefix("Value error, ")
        if "input" in e and etype not in ("value_error",) and not isinstance(e["input"], dict | list):
            msg += f" (got {e['input']!r})"
    return SpecError(msg, file=file, path=(*prefix, *loc))


def build(cls: type[M], data: Any, *, file: str | None = None, prefix: tuple = ()) -> M:
    """Validate ``data`` as ``cls``; errors become SpecError."""
    if not isinstance(data, dict):
        got = "an empty document" if data is None else type(data).__name__
        raise SpecError(f"expected a mapping of {cls.__name__} fields, got {got}",
                        file=file, path=prefix)
    try:
        obj = cls.model_validate(data)
        check = getattr(obj, "check_sections", None)  # cross-layer checks (Calibration's parameter ranges)
        if callable(check):
            check()
        bind = getattr(obj, "bind_file", None)  # a Calibration remembers its file for later errors
        if file and callable(bind):
            bind(file)
        return obj
    except SpecError as e:  # UnknownPresetError outside a field validator, check_sections
        raise e.with_context(file, prefix) from None
    except ValidationError as e:
        raise validation_error_to_spec_error(e, cls, file, prefix) from None


def load(cls: type[M], source: str | Path | dict | M, kind: str | None = None) -> M:
    """Load a spec from an instance, a dict, a YAML/JSON file or a catalog id of ``kind``.

    A dict (or file) may say ``preset: ID`` to start from a catalog entry and override fields."""
    if isinstance(source, cls):
        return source
    file: str | None = None
    if isinstance(source, dict):
        data: Any = dict(source)
    else:
        text = str(source)
        p = Path(text)
        looks_like_file = p.suffix.lower() in (".yaml", ".yml", ".json") or "/" in text
        if p.is_file() or looks_like_file:
            file = text
            data = read_document(p)
        elif kind is not None:
            try:
                data = store.raw(kind, text)
            except UnknownPresetError as e:
                raise SpecError(f"{e.message} (not a file either)") from None
        else:
            raise SpecError("file not found", file=text)
    if isinstance(data, dict) and "preset" in data and kind is not None:
        try:
            base = store.raw(kind, str(data["preset"]))
        except UnknownPresetError as e:
            raise SpecError(e.message, file=file, path=("preset",)) from None
        base.update({k: v for k, v in data.items() if k != "preset"})
        data = base
    return build(cls, data, file=file)
