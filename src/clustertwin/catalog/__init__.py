"""The packaged hardware/model catalog: typed accessors over ``catalog/data/*.yaml``.

Every entry carries a ``source``. ``get("gpu", "h100-sxm")`` returns a validated ``GPUSpec``;
unknown ids raise an error naming the nearest valid id.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel

from clustertwin.catalog import store
from clustertwin.catalog.store import KIND_FILES, canonical_kind, entries, ids, raw

__all__ = ["KIND_FILES", "canonical_kind", "entries", "get", "ids", "kinds", "raw", "spec_class"]


def spec_class(kind: str) -> type[BaseModel]:
    """The spec model of a catalog kind."""
    from clustertwin import specs

    return {
        "gpu": specs.GPUSpec,
        "cpu": specs.CPUSpec,
        "node": specs.NodeSpec,
        "fabric": specs.FabricSpec,
        "switch": specs.SwitchSpec,
        "storage": specs.StorageSpec,
        "ssd": specs.SSDSpec,
        "model": specs.ModelSpec,
        "cluster": specs.ClusterSpec,
    }[canonical_kind(kind)]


@functools.cache
def get(kind: str, preset_id: str) -> Any:
    """A validated catalog entry (cached; specs are immutable)."""
    from clustertwin.specs.loading import build

    kind = canonical_kind(kind)
    data = store.raw(kind, preset_id)
    return build(spec_class(kind), data, file=f"catalog/{KIND_FILES[kind]}", prefix=(preset_id,))


def kinds() -> list[str]:
    return list(KIND_FILES)
