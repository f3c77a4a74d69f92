"""Common base for all specs: frozen, unknown keys forbidden, field docstrings as descriptions,
and preset resolution (a string names a catalog entry; ``{preset: id, ...}`` overrides some fields)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from clustertwin.catalog import store


class Spec(BaseModel):
    """Base spec: immutable, ``extra="forbid"``, attribute docstrings become field descriptions; floats are
    finite (NaN and infinities are rejected, so ``gt=0`` also excludes ``.inf``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False)

    @model_validator(mode="after")
    def _within_limits(self) -> Spec:
        """Integers stay exact in float64 and far from int64 overflow (|n| <= 2^53); model dimensions stay
        below :data:`PHYSICAL_LIMITS`."""
        limits = PHYSICAL_LIMITS.get(type(self).__name__, {})
        for name, value in self.__dict__.items():
            if isinstance(value, int) and not isinstance(value, bool):
                cap = limits.get(name)
                if cap is not None and value > cap[0]:
                    raise ValueError(f"{name}={value:.4g} exceeds the physical limit {cap[0]:,} "
                                     f"(largest published: {cap[1]:,})")
                if abs(value) > MAX_SPEC_INT:
                    raise ValueError(f"{name}={value:.3g} is out of range (|value| <= 2^53)")
        return self


MAX_SPEC_INT = 2**53
"""Largest integer magnitude any spec field holds (exact in float64; products of a few stay in int64)."""

#: class -> field -> (limit, largest published figure): ~100x the largest published model, so a typo such as
#: ``hidden: 1.0e+30`` is an error instead of a 1e52-second step. Largest published: PaLM-540B hidden 18,432
#: and 48 heads; GPT-3 96 layers (Megatron-Turing 105); Gemma vocab 256,000; Llama-4 Scout 10M context;
#: DeepSeek-V3 256 experts, top-8, kv_lora_rank 512. Clusters and nodes likewise.
PHYSICAL_LIMITS: dict[str, dict[str, tuple[int, int]]] = {
    "ModelSpec": {"layers": (10_000, 105), "hidden": (2**21, 18_432), "heads": (2**16, 128),
                  "kv_heads": (2**16, 128), "head_dim": (2**16, 256), "ffn_hidden": (2**24, 73_728),
                  "vocab": (2**26, 256_000), "seq_len": (2**30, 10_000_000),
                  "attention_window": (2**30, 10_000_000), "mla_kv_lora_rank": (2**20, 512),
                  "mla_rope_dim": (2**16, 64)},
    "MoESpec": {"experts": (2**20, 256), "top_k": (2**16, 8), "expert_ffn_hidden": (2**24, 18_432),
                "shared_experts": (2**16, 2), "moe_layers": (10_000, 58)},
    # largest built: ~25,000 8-GPU nodes (200k GPUs); NVL576 domains; 8 NICs per 8-GPU node
    "ClusterSpec": {"nodes": (1_000_000, 25_000), "gpus": (8_000_000, 200_000)},
    "NodeSpec": {"gpus": (4096, 576)},
    "NICSpec": {"count": (4096, 576)},
}


class Sourced(Spec):
    """A catalog-capable spec: optional id/name, and where its figures come from."""

    id: str | None = None
    """Catalog id (lower-case, dashes)."""
    name: str | None = None
    """Human-readable product name."""
    source: str | tuple[str, ...] | None = None
    """Where the figures come from (datasheet, paper, page); required for catalog entries. A YAML list is
    kept as a tuple, so the spec stays hashable (the model's caches key on specs)."""
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
