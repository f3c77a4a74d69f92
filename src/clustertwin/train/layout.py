"""Parallel layouts as numpy columns, so that one code path evaluates one layout or a million.

``Layouts`` holds one array per degree of freedom (all of equal length); ``Layouts.from_spec`` turns a
``ParallelismSpec`` into a batch of one. Recompute modes are coded ``RECOMPUTE_CODES``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from clustertwin.specs.parallelism import ParallelismSpec

#: recompute mode -> integer code used in the arrays
RECOMPUTE_CODES: dict[str, int] = {"none": 0, "selective": 1, "full": 2}
RECOMPUTE_NAMES: dict[int, str] = {v: k for k, v in RECOMPUTE_CODES.items()}
#: MoE overlap mode -> code (:mod:`clustertwin.train.moe`)
MOE_OVERLAP_CODES: dict[str, int] = {"auto": -1, "none": 0, "shared_expert": 1, "a2a": 2, "dualpipe": 3}
MOE_OVERLAP_NAMES: dict[int, str] = {v: k for k, v in MOE_OVERLAP_CODES.items()}
#: per-module recompute name -> bit (Megatron ``--recompute-modules``; :mod:`clustertwin.train.memory_moe`)
RECOMPUTE_MODULE_BITS: dict[str, int] = {"layernorm": 1, "mla_up_proj": 2, "core_attn": 4, "moe_act": 8, "moe": 16,
                                         "shared_experts": 32}


@dataclass
class Layouts:
    """A batch of layouts (numpy int arrays of equal length; ``sp`` is 0/1)."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    vpp: np.ndarray
    mbs: np.ndarray
    recompute: np.ndarray
    zero: np.ndarray
    sp: np.ndarray
    first: np.ndarray | int = 0
    """layers of the first pipeline stage (0: from the stage plan's balanced split)"""
    last: np.ndarray | int = 0
    """layers of the last pipeline stage (0: balanced split)"""
    emb_split: np.ndarray | int = 0
    """1: the embedding counts as one layer slot of the balanced split (Megatron
    ``account_for_embedding_in_pipeline_split``)"""
    loss_split: np.ndarray | int = 0
    """1: the output layer and loss count as one slot (``account_for_loss_in_pipeline_split``)"""
    mid: np.ndarray | int = 0
    """layers of the busiest middle stage of a layout string (with ``from_string``)"""
    from_string: np.ndarray | int = 0
    """1: ``first``, ``mid`` and ``last`` come from a parsed pipeline layout string"""
    etp: np.ndarray | int = 0
    """expert tensor-parallel degree (0: = tp), :mod:`clustertwin.train.moe_layout`"""
    moe_overlap: np.ndarray | int = -1
    """MoE dispatch/combine overlap code (:data:`MOE_OVERLAP_CODES`; -1: the stack's default)"""
    rc_modules: np.ndarray | int = 0
    """bitmask of per-module recompute (:data:`clustertwin.train.memory_moe.RECOMPUTE_MODULES`)"""
    rc_layers: np.ndarray | int = 0
    """full recompute of this many layers per pipeline chunk only (0: every layer)"""

    def __post_init__(self) -> None:
        if isinstance(self.tp, np.ndarray):
            for name in OPTIONAL_FIELDS:
                v = getattr(self, name)
                if not isinstance(v, np.ndarray):
                    setattr(self, name, np.full(self.tp.shape, int(v), dtype=np.int64))

    @classmethod
    def from_spec(cls, p: ParallelismSpec) -> Layouts:
        """One layout as Python ints (the scalar fast path of the model functions)."""
        return cls(p.tp, p.pp, p.dp, p.cp, p.ep, p.vpp, p.micro_batch,  # type: ignore[arg-type]
                   RECOMPUTE_CODES[p.recompute], p.zero, int(p.sequence_parallel),  # type: ignore[arg-type]
                   first=p.first_stage_layers or 0, last=p.last_stage_layers or 0,
                   emb_split=int(p.embedding_in_split), loss_split=int(p.loss_in_split), etp=p.etp or 0,
                   moe_overlap=MOE_OVERLAP_CODES[p.moe_overlap],
                   rc_modules=sum(RECOMPUTE_MODULE_BITS[m] for m in set(p.recompute_modules)),
                   rc_layers=p.recompute_num_layers or 0)

    @property
    def is_scalar(self) -> bool:
        return not isinstance(self.tp, np.ndarray)

    def __len__(self) -> int:
        return 1 if self.is_scalar else len(self.tp)

    @property
    def gpus(self) -> np.ndarray:
        return self.tp * self.pp * self.dp * self.cp

    def as_arrays(self) -> Layouts:
        """The same layouts as numpy int arrays."""
        return Layouts(*(np.atleast_1d(np.asarray(getattr(self, f.name), dtype=np.int64)) for f in fields(self)))

    def take(self, idx) -> Layouts:
        """The layouts at ``idx`` (index array or boolean mask)."""
        return Layouts(*(getattr(self, f.name)[idx] for f in fields(self)))

    def spec(self, i: int, global_batch: int, precision: str) -> ParallelismSpec:
        """Layout ``i`` as a ParallelismSpec."""
        a = self.as_arrays() if self.is_scalar else self
        return a._spec(i, global_batch, precision)

    def _spec(self, i: int, global_batch: int, precision: str) -> ParallelismSpec:
        vpp = int(self.vpp[i])
        return ParallelismSpec(
            tp=int(self.tp[i]), pp=int(self.pp[i]), dp=int(self.dp[i]), cp=int(self.cp[i]), ep=int(self.ep[i]),
            vpp=vpp, micro_batch=int(self.mbs[i]), global_batch=global_batch,
            sequence_parallel=bool(self.sp[i]), recompute=RECOMPUTE_NAMES[int(self.recompute[i])],  # type: ignore[arg-type]
            zero=int(self.zero[i]), precision=precision,  # type: ignore[arg-type]
            first_stage_layers=int(self.first[i]) or None, last_stage_layers=int(self.last[i]) or None,
            embedding_in_split=bool(self.emb_split[i]), loss_in_split=bool(self.loss_split[i]),
            etp=int(self.etp[i]) or None, moe_overlap=MOE_OVERLAP_NAMES[int(self.moe_overlap[i])],  # type: ignore[arg-type]
            recompute_modules=[k for k, b in RECOMPUTE_MODULE_BITS.items() if int(self.rc_modules[i]) & b],
            recompute_num_layers=int(self.rc_layers[i]) or None)

    def row(self, i: int) -> dict[str, int | bool | str]:
        """Layout ``i`` as a flat dict (for tables and JSON)."""
        one = self.is_scalar  # a scalar layout is its own row: no array round trip

        def at(x):
            return x if one else x[i]

        tp, rc_modules = int(at(self.tp)), int(at(self.rc_modules))
        return {"tp": tp, "pp": int(at(self.pp)), "dp": int(at(self.dp)), "cp": int(at(self.cp)),
                "ep": int(at(self.ep)), "vpp": int(at(self.vpp)), "micro_batch": int(at(self.mbs)),
                "recompute": RECOMPUTE_NAMES[int(at(self.recompute))], "zero": int(at(self.zero)),
                "sequence_parallel": bool(at(self.sp)), "first_stage_layers": int(at(self.first)) or None,
                "last_stage_layers": int(at(self.last)) or None, "embedding_in_split": bool(at(self.emb_split)),
                "loss_in_split": bool(at(self.loss_split)), "etp": int(at(self.etp)) or tp,
                "moe_overlap": MOE_OVERLAP_NAMES[int(at(self.moe_overlap))],
                "recompute_modules": tuple(k for k, b in RECOMPUTE_MODULE_BITS.items() if rc_modules & b),
                "recompute_num_layers": int(at(self.rc_layers)) or None}

LAYOUT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Layouts))
#: the stage-plan columns, which default to the balanced split
OPTIONAL_FIELDS: tuple[str, ...] = ("first", "last", "emb_split", "loss_split", "mid", "from_string", "etp",
                                   "moe_overlap", "rc_modules", "rc_layers")


# Element-wise helpers that work on numpy arrays (search) and on Python scalars (one estimate, where
# numpy's per-call overhead would dominate): the same model code serves both.

_ND = np.ndarray


def is_array(*xs) -> bool:
    return any(isinstance(x, _ND) for x in xs)


def fmax(a, b):
    """Element-wise maximum."""
    if isinstance(a, _ND) or isinstance(b, _ND):
        return np.maximum(a, b)
    return a if a >= b else b


def fmin(a, b):
    """Element-wise minimum."""
    if isinstance(a, _ND) or isinstance(b, _ND):
        return np.minimum(a, b)
    return a if a <= b else b


def where(cond, a, b):
    """Element-wise ``a if cond else b``."""
    if isinstance(cond, _ND) or isinstance(a, _ND) or isinstance(b, _ND):
        return np.where(cond, a, b)
    return a if cond else b


def ceil(x):
    return np.ceil(x) if isinstance(x, _ND) else float(math.ceil(x))


def log2(x):
    return np.log2(x) if isinstance(x, _ND) else math.log2(x)


def any_true(x) -> bool:
    """Whether any element is true (``np.any`` on arrays, ``bool`` on scalars)."""
    return bool(np.any(x)) if isinstance(x, _ND) else bool(x)


def as_float(x):
    return x.astype(float) if isinstance(x, _ND) else float(x)


def scalar(x, i: int = 0) -> float:
    """Element ``i`` of an array, or the scalar itself."""
    return float(x[i]) if isinstance(x, _ND) and x.ndim else float(x)
