"""Raw catalog storage: packaged YAML files, one list of entries per kind, each entry with an ``id``.

This module holds no spec types (so that ``specs`` can resolve preset ids through it without an import
cycle); typed access is in :mod:`clustertwin.catalog`.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

from clustertwin.errors import SpecError, UnknownPresetError
from clustertwin.yaml_load import load_yaml

#: catalog kind -> file under catalog/data
KIND_FILES: dict[str, str] = {
    "gpu": "gpus.yaml",
    "cpu": "cpus.yaml",
    "node": "nodes.yaml",
    "fabric": "fabrics.yaml",
    "switch": "switches.yaml",
    "storage": "storage.yaml",
    "ssd": "ssds.yaml",
    "model": "models.yaml",
    "cluster": "clusters.yaml",
}

#: plural/alias spellings accepted on the command line
KIND_ALIASES: dict[str, str] = {
    **{k + "s": k for k in KIND_FILES},
    "nic": "fabric",
    "nics": "fabric",
    "fabrics": "fabric",
    "switches": "switch",
    "storage": "storage",
}


def canonical_kind(kind: str) -> str:
    k = kind.lower()
    k = KIND_ALIASES.get(k, k)
    if k not in KIND_FILES:
        raise UnknownPresetError("catalog kind", kind, KIND_FILES)
    return k


@functools.cache
def entries(kind: str) -> dict[str, dict[str, Any]]:
    """All raw entries of a kind, keyed by id, in file order."""
    kind = canonical_kind(kind)
    fname = KIND_FILES[kind]
    path = resources.files("clustertwin.catalog") / "data" / fname
    if not path.is_file():
        return {}
    # the one YAML loader (libyaml's safe loader when built: 0.3 s -> 0.03 s for a command; duplicate keys refused)
    data = load_yaml(path.read_text(encoding="utf-8"), f"catalog/{fname}") or []
    if isinstance(data, dict):
        data = data.get("entries", [])
    out: dict[str, dict[str, Any]] = {}
    for i, item in enumerate(data):
        if not isinstance(item, dict) or "id" not in item:
            raise SpecError("catalog entry without an id", file=f"catalog/{fname}", path=(i,))
        out[str(item["id"])] = item
    return out


def raw(kind: str, preset_id: str) -> dict[str, Any]:
    """The raw entry ``preset_id`` of ``kind`` (a copy), or UnknownPresetError with the nearest ids."""
    table = entries(kind)
    try:
        return dict(table[preset_id])
    except KeyError:
        raise UnknownPresetError(canonical_kind(kind), preset_id, table) from None


def ids(kind: str) -> list[str]:
    return list(entries(kind))
