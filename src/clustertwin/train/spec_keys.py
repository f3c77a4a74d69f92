"""Cheap cache keys for frozen specs: ``spec_key(spec)`` is ``(generation, id(spec))`` for a spec held here,
so that a cache lookup does not hash the spec recursively through its pydantic fields (a cluster spec's
hash was a quarter of one training estimate). The spec is held while its key is in use, so its id cannot
be reused; when the table is full it is emptied and the generation advances, so keys made before can no
longer match a new object at a reused address. Equal but distinct spec objects get distinct keys (their
cache entries are computed once each)."""

from __future__ import annotations

from typing import Any

_HELD: dict[int, Any] = {}
_LIMIT = 256
_generation = 0


def spec_key(spec: Any) -> tuple[int, int]:
    """``(generation, id)`` of ``spec``, holding it (module docstring)."""
    global _generation
    i = id(spec)
    if _HELD.get(i) is not spec:
        if len(_HELD) >= _LIMIT:
            _HELD.clear()
            _generation += 1
        _HELD[i] = spec
    return _generation, i
