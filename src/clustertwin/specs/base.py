"""Common base for all specs: frozen, unknown keys forbidden, field docstrings as descriptions,
and preset resolution (a string names a catalog entry; ``{preset: id, ...}`` overrides some fields)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from clustertwin.catalog import store


class Spec(BaseModel):
    """Base spec: immutable, ``extra="forbid"``, attribute docstrings become field descriptions."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class Sourced(Spec):
    """A catalog-capable spec: optional id/name, and where its figures come from."""

    id: str | None = None
    """Catalog id (lower-case, dashes)."""
    name: str | None = None
    """Human-readable product name."""
    source: str | list[str] | None = None
    """Where the figures come from (datasheet, paper, page); required for catalog entries."""
    notes: str | None = None
    """Caveats: derived figures, conflicting sources, assumptions."""


def _resolver(kind: str):
    def resolve(value: Any) -> Any:
        if isinstance(value, str):
            return store.raw(kind, value)
        if isinstance(value, dict) and "preset" in value:
            merged = store.raw(kind, str(value["preset"]))
            merged.update({k: v for k, v in value.items() if k != "preset"})
            return merged
        return value

    return resolve


def preset(kind: str) -> BeforeValidator:
    """Validator that turns a preset id (or ``{preset: id, overrides...}``) into the catalog entry."""
    return BeforeValidator(_resolver(kind))


PositiveInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]
