"""Range checks at the inference boundary: every rate, length, count and fraction a caller passes is
finite and in range before it reaches numpy or an event loop (a NaN rate never reaches the horizon;
a negative GPU count would predict negative throughput)."""

from __future__ import annotations

import math

from clustertwin.errors import SpecError


def positive(name: str, value: float | None, *, allow_none: bool = True) -> None:
    """``value`` must be a finite number > 0 (or None when allowed)."""
    if value is None:
        if allow_none:
            return
        raise SpecError("is required", path=(name,))
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise SpecError(f"must be a finite number > 0, got {value!r}", path=(name,))


def non_negative(name: str, value: float | None) -> None:
    """``value`` must be a finite number >= 0 (None passes)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise SpecError(f"must be a finite number >= 0, got {value!r}", path=(name,))


def count(name: str, value: int | None, *, minimum: int = 1) -> None:
    """``value`` must be a whole number >= ``minimum`` (None passes)."""
    if value is None:
        return
    ok = isinstance(value, int) and not isinstance(value, bool)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        ok = True
    if not ok or value < minimum:
        raise SpecError(f"must be a whole number >= {minimum}, got {value!r}", path=(name,))


def fraction(name: str, value: float, *, low: float = 0.0, high: float = 1.0) -> None:
    """``low < value < high`` and finite."""
    if not isinstance(value, int | float) or not math.isfinite(value) or not low < value < high:
        raise SpecError(f"must be in ({low:g}, {high:g}), got {value!r}", path=(name,))
